"""Named block-scaled recipes (NVFP4, MX) with every technique a switch: "<recipe>[:<switch>[:<switch>...]]".

    nvfp4   TE's NVFP4BlockScaling defaults: E2M1 elements everywhere; X 1x16 RNE, W 16x16 tiles RNE,
            dY 1x16 stochastic rounding; random Hadamard transform on the wgrad operands (X and dY along the
            tokens); lm_head high precision (the attention matmuls always are)
    mxfp4   E2M1, MX blocks of 32 with E8M0 scales (FLOOR); X, W RNE; dY stochastic; RHT on wgrad (Tseng et
            al.'s MXFP4 backward); lm_head high precision
    mxfp8   E4M3 for X, W and dY, MX blocks of 32 (FLOOR), RNE, no RHT; lm_head high precision
    mxfp6   E2M3 for X and W, E3M2 for dY, MX blocks of 32 (FLOOR), RNE, no RHT; lm_head high precision

Switches: disable_rht, disable_sr (dY round to nearest), disable_2d (nvfp4: W in 1x16 blocks), rceil (MX scale mode
RCEIL instead of FLOOR), sr_headroom (dY scaled by Tseng et al.'s 3/4 before rounding), wgrad_hp (the wgrad GEMM in
high precision), hp_attn (attention linears c_attn/c_proj in high precision too), hp_last=<N> (the last N transformer
blocks in high precision; the NVFP4 paper keeps about 15 % of the linears, mostly at the end). E.g.
"nvfp4:disable_rht:hp_last=1".
"""
from __future__ import annotations

from altgrad_lib.choices import BLOCK_RECIPES, BLOCK_SWITCHES  # one copy of the names


def is_block_recipe(name: str) -> bool:
    return name.split(":", 1)[0].strip().lower() in BLOCK_RECIPES


def _parse(name: str) -> tuple[str, set[str], int]:
    """(base, switches on, hp_last) of a recipe string; a repeated switch counts once, hp_last twice is an error."""
    base, *switches = [p.strip() for p in name.split(":")]
    base = base.lower()
    if base not in BLOCK_RECIPES:
        raise ValueError(f"unknown block recipe {base!r}; valid choices: {BLOCK_RECIPES}")
    valid = BLOCK_SWITCHES[base]
    on: set[str] = set()
    hp_last = None
    for sw in switches:
        if sw.startswith("hp_last="):
            v = sw.split("=", 1)[1]
            if not v.isdigit():
                raise ValueError(f"recipe {name!r}: hp_last={v!r} must be an int >= 0")
            if hp_last is not None and int(v) != hp_last:
                raise ValueError(f"recipe {name!r}: hp_last is given twice ({hp_last} and {int(v)}); give it once")
            hp_last = int(v)
        elif sw in valid:
            on.add(sw)
        else:
            raise ValueError(f"recipe {name!r}: unknown switch {sw!r} for {base}; valid switches: {valid}")
    return base, on, hp_last or 0


def canonical_block_recipe(name: str) -> str:
    """One spelling per recipe: base in lower case, each switch once in BLOCK_SWITCHES' order, hp_last=<N> last
    and only when N > 0 ('NVFP4:hp_last=0' -> 'nvfp4', 'nvfp4:hp_last=1:disable_rht:disable_rht' ->
    'nvfp4:disable_rht:hp_last=1'). Every spelling already in this form is returned unchanged (its runs keep
    their config hash)."""
    base, on, hp_last = _parse(name)
    parts = [base] + [sw for sw in BLOCK_SWITCHES[base] if sw in on] + ([f"hp_last={hp_last}"] if hp_last else [])
    return ":".join(parts)


def _operands(x: tuple, w: tuple, g: tuple, rht: bool) -> dict:
    """The "*" LayerSpec dict from (fmt, scaling, rounding) per role; rht: the random Hadamard transform on wgrad."""
    spec = {role: {"fmt": f, "scaling": sc, **({"rounding": r} if r else {})}
            for role, (f, sc, r) in (("input", x), ("weight", w), ("grad_output", g))}
    return {**spec, "gemm": {"rht": ["wgrad"] if rht else [], "hp_gemms": []}}


def _nvfp4(on: set[str]) -> dict:
    nv = {"kind": "nvfp4"}
    return _operands(("E2M1", nv, None), ("E2M1", {**nv, "tile_2d": "disable_2d" not in on}, None),
                     ("E2M1", nv, "nearest" if "disable_sr" in on else "stochastic"), "disable_rht" not in on)


def _mx(x_fmt: str, g_fmt: str, fp4: bool):
    """Builder of an MX recipe: E8M0 blocks of 32 (FLOOR, or RCEIL with the switch); FP4 adds SR on dY and RHT."""
    def build(on: set[str]) -> dict:
        sc = {"kind": "mx", "mode": "rceil" if "rceil" in on else "floor"}
        g_round = "stochastic" if fp4 and "disable_sr" not in on else "nearest"
        return _operands((x_fmt, sc, None), (x_fmt, sc, None), (g_fmt, sc, g_round), fp4 and "disable_rht" not in on)
    return build


# The block-recipe registry, builder half: recipe name -> builder(switches on) -> the "*" LayerSpec dict. Its names
# and switches are choices.BLOCK_SWITCHES (torch-free, read by the config and the CLI); the switches every recipe
# shares (sr_headroom, wgrad_hp, hp_attn, hp_last) are applied by block_recipe, not by the builders.
BUILDERS = {
    "nvfp4": _nvfp4,
    "mxfp4": _mx("E2M1", "E2M1", fp4=True),
    "mxfp8": _mx("E4M3", "E4M3", fp4=False),
    "mxfp6": _mx("E2M3", "E3M2", fp4=False),
}
if set(BUILDERS) != set(BLOCK_SWITCHES):      # the two halves of one registry
    raise RuntimeError(f"block recipes without a builder or a switch list: {set(BUILDERS) ^ set(BLOCK_SWITCHES)}")


def block_recipe(name: str) -> tuple[dict, int]:
    """(layers: layer class -> LayerSpec dict or None, hp_last_blocks) of a recipe string (see module doc)."""
    base, on, hp_last = _parse(name)
    spec = BUILDERS[base](on)
    if "sr_headroom" in on:
        g = spec["grad_output"]
        g["scaling"] = {**g["scaling"], "headroom": 0.75}
    if "wgrad_hp" in on:
        spec["gemm"]["hp_gemms"] = ["wgrad"]
    layers = {"*": spec, "lm_head": None}
    if "hp_attn" in on:
        layers.update({"attn_qkv": None, "attn_out": None})
    return layers, hp_last
