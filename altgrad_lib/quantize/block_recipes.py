"""Named block-scaled recipes (NVFP4, MX) with every technique a switch: "<recipe>[:<switch>[:<switch>...]]".

    nvfp4   TE's NVFP4BlockScaling defaults: E2M1 elements everywhere; X 1x16 RNE, W 16x16 tiles RNE,
            dY 1x16 stochastic rounding; random Hadamard transform on the wgrad operands (X and dY along the
            tokens); lm_head high precision (the attention matmuls always are)
    mxfp4   E2M1, MX blocks of 32 with E8M0 scales (FLOOR); X, W RNE; dY stochastic; RHT on wgrad (Tseng et
            al.'s MXFP4 backward); lm_head high precision
    mxfp8   E4M3 for X, W and dY, MX blocks of 32 (FLOOR), RNE, no RHT; lm_head high precision
    mxfp6   E2M3 for X and W, E3M2 for dY, MX blocks of 32 (FLOOR), RNE, no RHT; lm_head high precision

    fp8_blockwise, mxint8, nvint4, amdfp4, quartet2_nvidia, tetrajet_v2, fp4_all_the_way: see their builders below
    (sources: README's recipe table); mxfp8_rceil = mxfp8:rceil (choices.BLOCK_RECIPE_ALIASES)

Switches: disable_rht, disable_sr (dY round to nearest), disable_2d (nvfp4: W in 1x16 blocks), rceil (MX scale mode
RCEIL instead of FLOOR), sr_headroom (dY scaled by Tseng et al.'s 3/4 before rounding), wgrad_hp (the wgrad GEMM in
high precision), hp_attn (attention linears c_attn/c_proj in high precision too), four_over_six (4/6 block scales),
pow2_scales (fp8_blockwise: power-of-two scales), rht_all (nvint4: RHT on every GEMM), disable_sr_scale (Quartet-II
replicas: plain SR instead of SR x 17/16), mxfp8_attn (the attention core in MXFP8 too, TE's MXFP8 attention:
quantize/attention.py's "mxfp8" preset), hp_last=<N> (the last N transformer blocks in high precision; the NVFP4
paper keeps about 15 % of the linears, mostly at the end). E.g.
"nvfp4:disable_rht:hp_last=1".
The NVFP4 report's orderings (arXiv 2509.25149 App. E), nvfp4 / mxfp4 only: sr_x, sr_w (stochastic rounding of X /
W too, which the paper finds harmful), rht_fprop, rht_dgrad (the Hadamard transform on those GEMMs too, harmful there).
RNG policy (nvfp4 / mxfp4): rht_per_step (the Hadamard signs re-drawn every step, as Quartet-II's replica; default
one fixed vector per layer, as TransformerEngine), sr_per_call (SR bits keyed by (seed, step, call); default one
seeded stream per quantizer). Every recipe also takes hp_first / hp_last / hp_layers (recipes.split_hp_switches).
"""
from __future__ import annotations

from altgrad_lib.choices import (BLOCK_RECIPE_ALIASES, BLOCK_RECIPES, BLOCK_SWITCHES,  # one copy of the names
                                 unalias_recipe)


def is_block_recipe(name: str) -> bool:
    return unalias_recipe(name).split(":", 1)[0].strip().lower() in BLOCK_RECIPES


def _parse(name: str) -> tuple[str, set[str], int]:
    """(base, switches on, hp_last) of a recipe string; a repeated switch counts once, hp_last twice is an error."""
    # an alias's own switches first: 'mxfp8_rceil:hp_last=1' = 'mxfp8:rceil:hp_last=1'
    base, *switches = [p.strip() for p in unalias_recipe(name).split(":")]
    base = base.lower()
    if base not in BLOCK_RECIPES:
        raise ValueError(f"unknown block recipe {base!r}; valid choices: {BLOCK_RECIPES + tuple(BLOCK_RECIPE_ALIASES)}")
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


def _nv(elem: str = "E2M1", **scaling):
    """Builder of an NVFP4-shaped recipe (TE's NVFP4BlockScaling): X 1x16 RNE, W 16x16 tiles RNE, dY 1x16 SR, RHT on
    wgrad; `elem` the element format (INT4: NVINT4), `scaling` extra BlockScaling fields (UE5M3 scales: amdfp4)."""
    def build(on: set[str]) -> dict:
        nv = {"kind": "nvfp4", **scaling, **({"four_over_six": True} if "four_over_six" in on else {})}
        spec = _operands((elem, nv, None), (elem, {**nv, "tile_2d": "disable_2d" not in on}, None),
                         (elem, nv, "nearest" if "disable_sr" in on else "stochastic"), "disable_rht" not in on)
        if "rht_all" in on and "disable_rht" not in on:    # the rotation on every GEMM (2510.25602's NVINT4 + RHT)
            spec["gemm"]["rht"] = ["fprop", "dgrad", "wgrad"]
        return spec
    return build


def _mx(x_fmt: str, g_fmt: str, fp4: bool):
    """Builder of an MX recipe: E8M0 blocks of 32 (FLOOR, or RCEIL with the switch); FP4 adds SR on dY and RHT."""
    def build(on: set[str]) -> dict:
        sc = {"kind": "mx", "mode": "rceil" if "rceil" in on else "floor"}
        g_round = "stochastic" if fp4 and "disable_sr" not in on else "nearest"
        return _operands((x_fmt, sc, None), (x_fmt, sc, None), (g_fmt, sc, g_round), fp4 and "disable_rht" not in on)
    return build


def _fp8_blockwise(on: set[str]) -> dict:
    """DeepSeek-V3 / TE Float8BlockScaling: E4M3 everywhere (dY too), X and dY in 1x128 blocks, W in 128x128 tiles,
    one FP32 scale amax / 448 per block (pow2_scales: rounded down to a power of two, TE's default), RNE."""
    fb = {"kind": "fp8_block", **({"pow2": True} if "pow2_scales" in on else {})}
    return _operands(("E4M3", fb, None), ("E4M3", {**fb, "tile_2d": True}, None), ("E4M3", fb, "nearest"), False)


# Quartet-II's SR "scale override" 17/16 (schemes/nvidia.py, tetrajetv2.py): the block amax maps to 6 · 16/17, so a
# stochastically rounded element never needs the grid point above 6; in AltGrad's terms a headroom of 16/17
_Q2_HEADROOM = 16 / 17


def _quartet2_nvidia(on: set[str]) -> dict:
    """Quartet-II's replica of NVIDIA's NVFP4 recipe (IST-DASLab/Quartet-II schemes/nvidia.py): TE's nvfp4 with dY's
    stochastic rounding scaled by 17/16 (disable_sr_scale: TE's plain SR). Its Hadamard signs are re-drawn on every
    backward call and its SR seed is Python's randint per call; here the signs are fixed per layer and SR draws
    from the per-quantizer seeded stream (the RNG policy the recipe runs with)."""
    spec = _nv()(on)
    if "disable_sr" not in on and "disable_sr_scale" not in on:
        g = spec["grad_output"]
        g["scaling"] = {**g["scaling"], "headroom": _Q2_HEADROOM}
    return spec


def _sr_operand(on: set[str]) -> dict:
    """A backward operand in NVFP4 1x16 with stochastic rounding (RNE with disable_sr; 17/16 unless
    disable_sr_scale, for the Quartet-II replicas that use it)."""
    sc = {"kind": "nvfp4"}
    if "disable_sr" in on:
        return {"fmt": "E2M1", "scaling": sc, "rounding": "nearest"}
    return {"fmt": "E2M1", "scaling": sc, "rounding": "stochastic"}


def _tetrajet_v2(on: set[str]) -> dict:
    """Quartet-II's TetraJet-v2 replica (schemes/tetrajetv2.py; arXiv 2510.27527): X and W 1x16 RNE (no 2D, no 4/6);
    every backward operand (dY, and W for dgrad, X for wgrad) SR with the 17/16 scale; RHT (d = 32) on dgrad and
    wgrad. Differences: the replica re-quantizes the forward-quantized X and W for the backward, AltGrad the
    high-precision ones (gemm_quant takes a dequantized source only from the same quantizer); its signs are
    re-drawn per backward call, here fixed per layer. TetraJet-v2's OsciReset is the optimizer option
    optim.osc_reset (optim/osc_reset.py), not a recipe switch."""
    nv = {"kind": "nvfp4"}
    bwd = _sr_operand(on)
    if bwd["rounding"] == "stochastic" and "disable_sr_scale" not in on:
        bwd["scaling"] = {**nv, "headroom": _Q2_HEADROOM}
    spec = _operands(("E2M1", nv, None), ("E2M1", nv, None), (bwd["fmt"], bwd["scaling"], bwd["rounding"]),
                     False)
    rht = [] if "disable_rht" in on else ["dgrad", "wgrad"]
    spec["gemm"] = {"rht": rht, "hp_gemms": [], "rht_dim": 32,
                    "overrides": {"dgrad": {"weight": dict(bwd)}, "wgrad": {"input": dict(bwd)}}}
    return spec


def _fp4_all_the_way(on: set[str]) -> dict:
    """FP4 All the Way (Chmiel et al., arXiv 2505.19115): NVFP4 (1x16, E4M3 scales) for every operand, round to
    nearest in the forward GEMM, stochastic rounding in the backward (dgrad) and update (wgrad) GEMMs, i.e. dY
    everywhere and W, X in their backward copies; no RHT, no 2D weights."""
    nv = {"kind": "nvfp4"}
    bwd = _sr_operand(on)
    spec = _operands(("E2M1", nv, None), ("E2M1", nv, None), (bwd["fmt"], bwd["scaling"], bwd["rounding"]), False)
    spec["gemm"]["overrides"] = {"dgrad": {"weight": dict(bwd)}, "wgrad": {"input": dict(bwd)}}
    return spec


# The block-recipe registry, builder half: recipe name -> builder(switches on) -> the "*" LayerSpec dict. Its names
# and switches are choices.BLOCK_SWITCHES (torch-free, read by the config and the CLI); the switches every recipe
# shares (sr_headroom, wgrad_hp, hp_attn, hp_last) are applied by block_recipe, not by the builders.
BUILDERS = {
    "nvfp4": _nv(),
    "mxfp4": _mx("E2M1", "E2M1", fp4=True),
    "mxfp8": _mx("E4M3", "E4M3", fp4=False),
    "mxfp6": _mx("E2M3", "E3M2", fp4=False),
    "fp8_blockwise": _fp8_blockwise,
    "mxint8": _mx("INT8_OCP", "INT8_OCP", fp4=False),
    "nvint4": _nv("INT4"),
    "amdfp4": _nv(scale_fmt="UE5M3"),
    "quartet2_nvidia": _quartet2_nvidia,
    "tetrajet_v2": _tetrajet_v2,
    "fp4_all_the_way": _fp4_all_the_way,
}
if set(BUILDERS) != set(BLOCK_SWITCHES):      # the two halves of one registry
    raise RuntimeError(f"block recipes without a builder or a switch list: {set(BUILDERS) ^ set(BLOCK_SWITCHES)}")


def block_recipe_attn(name: str) -> str | None:
    """The attention preset a recipe string turns on (the mxfp8_attn switch), None = high-precision attention."""
    return "mxfp8" if "mxfp8_attn" in _parse(name)[1] else None


def block_recipe(name: str) -> tuple[dict, int]:
    """(layers: layer class -> LayerSpec dict or None, hp_last_blocks) of a recipe string (see module doc)."""
    base, on, hp_last = _parse(name)
    spec = BUILDERS[base](on)
    if "sr_headroom" in on:
        g = spec["grad_output"]
        g["scaling"] = {**g["scaling"], "headroom": 0.75}
    if "wgrad_hp" in on:
        spec["gemm"]["hp_gemms"] = ["wgrad"]
        ov = spec["gemm"].get("overrides")
        if ov:    # a GEMM kept in high precision has no operand overrides
            spec["gemm"]["overrides"] = {g: v for g, v in ov.items() if g != "wgrad"}
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
        # every stochastically rounded operand, the per-GEMM override copies (the replicas' backward copies) too
        ops = [spec[r] for r in ("input", "weight", "grad_output")]
        ops += [o for g in (spec["gemm"].get("overrides") or {}).values() for o in g.values() if o]
        sr = [o for o in ops if o.get("rounding") == "stochastic"]
        if not sr:
            raise ValueError(f"recipe {name!r}: sr_per_call sets the stochastic-rounding RNG, but nothing is "
                             f"rounded stochastically; valid: drop disable_sr or add sr_x / sr_w")
        for o in sr:
            o["sr_rng"] = "per_call"
    layers = {"*": spec, "lm_head": None}
    if "hp_attn" in on:
        layers.update({"attn_qkv": None, "attn_out": None})
    return layers, hp_last
