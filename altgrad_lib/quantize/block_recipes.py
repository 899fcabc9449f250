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
The NVFP4 report's orderings (arXiv 2509.25149 App. E), nvfp4 / mxfp4 only: sr_x, sr_w (stochastic rounding of X /
W too, which the paper finds harmful), rht_fprop, rht_dgrad (the Hadamard transform on those GEMMs too, harmful there).
RNG policy (nvfp4 / mxfp4): rht_per_step (the Hadamard signs re-drawn every step, as Quartet-II's replica; default
one fixed vector per layer, as TransformerEngine), sr_per_call (SR bits keyed by (seed, step, call); default one
seeded stream per quantizer). Every recipe also takes hp_first / hp_last / hp_layers (recipes.split_hp_switches).
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


def block_recipe(name: str) -> tuple[dict, int]:
    """(layers: layer class -> LayerSpec dict or None, hp_last_blocks) of a recipe string (see module doc)."""
    base, on, hp_last = _parse(name)
    mode = "rceil" if "rceil" in on else "floor"
    if base == "nvfp4":
        x_fmt = w_fmt = g_fmt = "E2M1"
        x_sc, g_sc = {"kind": "nvfp4"}, {"kind": "nvfp4"}
        w_sc = {"kind": "nvfp4", "tile_2d": "disable_2d" not in on}
    else:
        x_fmt, g_fmt = {"mxfp4": ("E2M1", "E2M1"), "mxfp8": ("E4M3", "E4M3"), "mxfp6": ("E2M3", "E3M2")}[base]
        w_fmt = x_fmt
        x_sc = w_sc = g_sc = {"kind": "mx", "mode": mode}
    fp4 = base in ("nvfp4", "mxfp4")
    g_round = "stochastic" if fp4 and "disable_sr" not in on else "nearest"
    if "sr_headroom" in on:
        g_sc = {**g_sc, "headroom": 0.75}
    spec = {
        "input": {"fmt": x_fmt, "scaling": x_sc},
        "weight": {"fmt": w_fmt, "scaling": w_sc},
        "grad_output": {"fmt": g_fmt, "scaling": g_sc, "rounding": g_round},
        "gemm": {"rht": ["wgrad"] if fp4 and "disable_rht" not in on else [],
                 "hp_gemms": ["wgrad"] if "wgrad_hp" in on else []},
    }
    for sw, role in (("sr_x", "input"), ("sr_w", "weight")):
        if sw in on:
            spec[role]["rounding"] = "stochastic"
    rht = {g for g in ("fprop", "dgrad") if f"rht_{g}" in on} | set(spec["gemm"]["rht"])
    spec["gemm"]["rht"] = [g for g in ("fprop", "dgrad", "wgrad") if g in rht]
    if "rht_per_step" in on:
        if not rht:
            raise ValueError(f"recipe {name!r}: rht_per_step re-draws the Hadamard signs, but no GEMM is rotated; "
                             f"valid: drop disable_rht or add rht_fprop / rht_dgrad")
        spec["gemm"]["rht_rng"] = "per_step"
    if "sr_per_call" in on:
        sr = [r for r in ("input", "weight", "grad_output") if spec[r].get("rounding") == "stochastic"]
        if not sr:
            raise ValueError(f"recipe {name!r}: sr_per_call sets the stochastic-rounding RNG, but nothing is "
                             f"rounded stochastically; valid: drop disable_sr or add sr_x / sr_w")
        for r in sr:
            spec[r]["sr_rng"] = "per_call"
    layers = {"*": spec, "lm_head": None}
    if "hp_attn" in on:
        layers.update({"attn_qkv": None, "attn_out": None})
    return layers, hp_last
