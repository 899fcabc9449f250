"""Fidelity report of a recipe: what AltGrad simulates exactly, what approximately, what not at all.

`fidelity_report("nvfp4")` (CLI: `altgrad fidelity nvfp4 [--json]`) reads the resolved QuantPolicy and, per layer
class x GEMM (fprop / dgrad / wgrad) x operand (X, W, dY), shows the operand's format, scaling, rounding and RHT as
the recipe sets them, then quantize-dequantizes a fixed synthetic operand through the same code path as training
(gemm_quant's row-wise / column-wise copies along the GEMM's reduction dim) and compares it with every independent
implementation of that format and scaling that exists here:

- per-tensor / per-row kinds: torch float8 casts and ml_dtypes casts of the same convention, and gfloat (any ExMy),
  each applied to x·s with the scale s of AltGrad's Scaler (the reference checks the rounding, not the scale rule)
  and saturated explicitly (clamped to +-fmax before the cast when the spec saturates; a library's own overflow
  rule is never inherited);
- block kinds (numerics/oracles.py), each row marked "library" (code someone else wrote) or "hand" (a slow reference
  we wrote from the paper's or spec's equations, named "hand reference from <paper/spec>"; its element and scale
  roundings are library casts or the grid's definition, never AltGrad's kernel):
  MX: torchao MXTensor.to_mx (elements E4M3, E5M2, E2M3, E3M2, E2M1), else gfloat's quantize_block (FLOOR; MXINT8
  with the symmetric ±127/64 element), and the hand reference from OCP MX 1.0 (any element, RCEIL, headroom);
  NVFP4: torchao NVFP4Tensor.to_nvfp4 (E2M1, E4M3 scales, 1x16; 16x16 tiles composed from it) and the hand reference
  from the NVFP4 report, which alone covers INT4 elements (NVINT4), UE5M3 scales (amdfp4), 4/6 and the SR headroom;
  fp8_block: torchao's torch_blockwise_scale_act_quant_lhs (1x128) / torch_blockwise_scale_weight_quant (128x128)
  and the hand reference from TE Float8BlockScaling, which alone covers pow2 scales. A library joins only where it
  implements exactly the operand's kind and options. References see the operand with the GEMM's reduction dim last
  (transposed here, independently of AltGrad's axis handling), rotated by the same RHT when the GEMM has one. The
  summary lists "bit-exact vs a library" apart from "exact vs a reference we wrote from the paper's equations".

A stochastic-rounding operand is compared through its round-to-nearest twin (same scales and grid) and gets a
Monte-Carlo unbiasedness check: N draws by the operand's Quantizer, the sign-aligned total bias
Z = sum_i sign(x_i)(mean_i - x_i) / sqrt(sum_i var_i / N) (var_i: each element's sample variance over the draws;
sign-aligned so that a bias toward zero, e.g. saturation, does not cancel between signs), pass when |Z| <= 3. It also
measures the fraction of elements above the format's max after scaling (SR can only round them down) and Z without
them: when that Z passes, saturation is the measured cause, and a headroom (the sr_headroom switch) removes it.

The synthetic operands: X (64 tokens x 128 in), W (96 out x 128 in), dY (64 x 96), seeded Gaussians with 1 % of
the elements multiplied by 30..300 (outliers). They are the same for every layer class; the report measures the
quantizer, not a model's activations.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

import numpy as np
import torch
from torch import Tensor

from altgrad_lib.numerics import oracles
from altgrad_lib.choices import BLOCK_SWITCHES
from altgrad_lib.numerics.block_scaling import BlockScaling, elementwise_scale
from altgrad_lib.numerics.quant import sqnr_db
from altgrad_lib.numerics.quant_spec import QuantSpec
from altgrad_lib.numerics.quantizer import Quantizer
from altgrad_lib.numerics.scaling import stateless_scale
from altgrad_lib.quantize.fidelity_text import db_str, render_text
from altgrad_lib.quantize.gemm_overrides import GEMM_OPERANDS, GEMMS, ROLE_LABEL
# row_copy / col_copy are gemm_quant's operand copies (rotation + quantization along the GEMM's reduction dim):
# the report runs the exact code path of training, so it imports them rather than re-typing them
from altgrad_lib.quantize.gemm_quant import col_copy, row_copy, apply_rht, rht_signs
from altgrad_lib.quantize.hw_fp8 import quiet_torchao_import
from altgrad_lib.quantize.recipes import SUFFIX_TO_CLASS, LAYER_CLASSES, LayerSpec, QuantPolicy, get_policy

SHAPES = {"input": (64, 128), "weight": (96, 128), "grad_output": (64, 96)}   # X (T, in), W (out, in), dY (T, out)
OPERAND_NOTE = ("synthetic operands, seed {seed}: X 64x128, W 96x128, dY 64x96, Gaussian with 1 % outliers "
                "(x30..x300); the same for every layer class")
N_SR_DRAWS = 128
SR_Z_BOUND = 3.0
FP32_ACCUM = "FP32 (as torch.matmul)"
# the GEMM's reduction dim of each operand, as a name, and whether the operand tensor has it last
_REDUCE = {("fprop", "input"): ("in", True), ("fprop", "weight"): ("in", True),
           ("dgrad", "grad_output"): ("out", True), ("dgrad", "weight"): ("out", False),
           ("wgrad", "grad_output"): ("tokens", False), ("wgrad", "input"): ("tokens", False)}
ALWAYS_HP = ("token and position embeddings", "LayerNorm", "softmax", "residual adds", "the loss")


def synthetic_operand(role: str, seed: int = 0) -> Tensor:
    """The fixed synthetic operand of a role (see the module docstring). Drawn by numpy's PCG64, whose normals are the
    same on every CPU (torch.randn's differ between instruction sets), so the report prints the same numbers."""
    rng = np.random.default_rng([seed, ("input", "weight", "grad_output").index(role)])
    shape = SHAPES[role]
    x = rng.standard_normal(shape, dtype=np.float32)
    mask = rng.random(shape) < 0.01
    x = np.where(mask, x * (30 + 270 * rng.random(shape, dtype=np.float32)), x).astype(np.float32)
    return torch.from_numpy(x)


# ----------------------------------------------------------------------------- one operand against its references

def _fmt_cell(spec: QuantSpec) -> dict:
    sc = spec.scaling
    return {"format": spec.fmt.name, "scaling": sc.short_str(), "rounding": spec.rounding,
            "saturate": spec.saturate, "spec": spec.short_str()}


def _compare(ours: Tensor, ref: Tensor, name: str, zero_sign: bool, source: str = "library") -> dict:
    """One reference row; source: "library" (code someone else wrote) or "hand" (ours, from the paper)."""
    mism = oracles.count_mismatches(ours, ref, check_zero_sign=zero_sign)
    s = sqnr_db(ref, ours)
    err = float((ours.double() - ref.double()).abs().nan_to_num(nan=math.inf).max()) if ours.numel() else 0.0
    return {"reference": name, "source": source, "exact": mism == 0,
            "sqnr_db": None if math.isinf(s) and s > 0 else round(s, 1), "max_abs_err": err,
            "mismatches": mism, "n": ours.numel()}


def _per_tensor_refs(t: Tensor, ours: Tensor, spec: QuantSpec, q: Quantizer) -> list[dict]:
    """Element references on x·s (s: the scale AltGrad's Scaler used), saturated explicitly."""
    f, sc = spec.fmt, spec.scaling
    if sc.kind == "delayed":     # a fresh Quantizer's first call: the scale it recorded
        s = q.scaler.scale.clone()
    else:
        s, _ = stateless_scale(t, f, sc)
    xs = t.float() * s
    if spec.saturate:            # explicit, never the library's overflow rule
        xs = xs.clamp(-f.max, f.max)
    zero_sign = f.specials != "fnuz"
    rows = []
    for ref in oracles.matching_references(f):
        with np.errstate(invalid="ignore", over="ignore"):
            rows.append(_compare(ours, ref.cast(xs) / s, ref.label, zero_sign))
    try:
        import gfloat
    except ImportError:    # optional: the report says which references ran
        return rows
    codes = gfloat.round_ndarray(oracles.gfloat_format_info(f), xs.double().numpy(), sat=spec.saturate)
    rows.append(_compare(ours, (torch.from_numpy(codes).float() / s), "gfloat.round_ndarray", zero_sign))
    return rows


# the papers / specs the hand references are written from (oracles.nv_reference, fp8_block_reference, mx_reference)
_NV_PAPER = {"E2M1": "NVFP4 report (2509.25149)", "INT4": "NVINT4 (2510.25602)"}


def _hand_label(f, sc: BlockScaling) -> str:
    """'hand reference from <paper/spec> [+ option (source)]...' of a block spec."""
    if sc.kind == "mx":
        parts = ["OCP MX 1.0"] + (["RCEIL (2506.08027)"] if sc.mode == "rceil" else [])
    elif sc.kind == "fp8_block":
        parts = ["TE Float8BlockScaling" + (" pow2" if sc.pow2 else "")]
    else:
        parts = [_NV_PAPER.get(f.name, "the NVFP4 report (2509.25149)")]
        parts += (["UE5M3 scales (amdfp4)"] if sc.scale_fmt == "UE5M3" else [])
        parts += (["4/6 (2512.02010)"] if sc.four_over_six else [])
    parts += [f"headroom {sc.headroom:.4g}"] if sc.headroom != 1.0 else []
    return "hand reference from " + " + ".join(parts)


def _block_refs(t: Tensor, ours: Tensor, spec: QuantSpec) -> tuple[list[dict], str]:
    """References of a block spec on t (reduction dim last): the libraries that implement exactly this kind and
    these options (torchao, gfloat), then the hand reference written from the paper's equations; (rows, note)."""
    f, sc = spec.fmt, spec.scaling
    b, plain = sc.block_size, sc.headroom == 1.0
    lib: list[tuple[str, Any]] = []
    if sc.kind == "mx":
        whole = t.shape[-1] % b == 0
        if plain and f.name in oracles.TORCHAO_MX_ELEMS:
            lib.append(("torchao to_mx", lambda: oracles.torchao_mx(t, f, sc.mode, b)))
        elif plain and sc.mode == "floor" and whole:    # gfloat's MX block quantizer is FLOOR only
            lib.append(("gfloat quantize_block" + (" (INT8 ±127/64)" if f.name == "INT8_OCP" else ""),
                        lambda: oracles.gfloat_mx(t, f, b)))
        hand = (lambda: oracles.mx_reference(t, f, sc.mode, b, sc.headroom)) if whole else None
    elif sc.kind == "nvfp4":
        if plain and f.name == "E2M1" and b == 16 and sc.scale_fmt == "E4M3" and not sc.four_over_six:
            if not sc.tile_2d:
                lib.append(("torchao to_nvfp4", lambda: oracles.torchao_nvfp4(t)))
            elif t.shape[0] % 16 == 0 and t.shape[1] % 16 == 0:
                lib.append(("torchao to_nvfp4, 16x16 composed", lambda: oracles.torchao_nvfp4_2d(t)))
        def hand():
            return oracles.nv_reference(t, f, sc.scale_fmt, b, sc.tile_2d, sc.four_over_six, sc.headroom)
    else:   # fp8_block
        if plain and not sc.pow2 and f.name in ("E4M3", "E5M2"):
            fn = oracles.TORCHAO_BLOCKWISE_FNS[1 if sc.tile_2d else 0]
            lib.append((f"torchao {fn}", lambda: oracles.torchao_fp8_blockwise(t, f, b, sc.tile_2d)))
        def hand():
            return oracles.fp8_block_reference(t, f, b, sc.tile_2d, sc.pow2, sc.headroom)
    rows, missing = [], []
    for label, ref in lib:
        try:
            rows.append(_compare(ours, ref(), label, True, "library"))
        except ImportError as e:        # an optional library, or a torchao without that code: said, not hidden
            missing.append(f"{label} unavailable ({e})")
    if hand is not None:
        rows.append(_compare(ours, hand(), _hand_label(f, sc), True, "hand"))
    return rows, "; ".join(missing)


def _altgrad_copy(q: Quantizer, x: Tensor, gemm: str, role: str, signs: Tensor | None,
                  classic: bool) -> tuple[Tensor, Tensor]:
    """(AltGrad's quantized copy, the same-oriented input it rounded), both with the reduction dim last.

    The classic path quantizes each operand once along its last dim (every GEMM shares that copy); the GEMM-faithful
    path makes gemm_quant's row-wise (reduction dim last) or column-wise (reduction dim first) copy."""
    if classic:
        return q.quantize(x), x
    _, last = _REDUCE[(gemm, role)]
    if last:
        out = row_copy(q, x, True, signs)
        ref_in = x if signs is None else apply_rht(x, signs)
        return out, ref_in
    out = col_copy(q, x, True, signs).t()             # back to the reduction dim last, as the reference sees it
    xt = x.t().contiguous()
    return out, xt if signs is None else apply_rht(xt, signs)


def check_operand(spec: QuantSpec, gemm: str, role: str, rht: int | None = None, classic: bool = False,
                  seed: int = 0, n_sr: int = N_SR_DRAWS) -> dict:
    """One operand of one GEMM: AltGrad's copy of the synthetic operand against every reference (see module doc)."""
    x = synthetic_operand(role, seed)
    signs = None if rht is None else rht_signs(rht, seed)
    det = (replace(spec, rounding="nearest", sr_bits=None, sr_rng="per_quantizer") if spec.rounding == "stochastic"
           else spec)
    q = Quantizer(det, seed=seed, count=False)
    ours, t = _altgrad_copy(q, x, gemm, role, signs, classic)
    if isinstance(spec.scaling, BlockScaling):
        refs, note = _block_refs(t, ours, det)
    else:
        refs, note = _per_tensor_refs(t, ours, det, q), ""
    if not refs and not note:
        note = f"no reference: {spec.fmt.name} is in no library (only AltGrad's kernel)"
    dim, _ = _REDUCE[(gemm, role)]
    out = {**_fmt_cell(spec), "along": "last dim (classic path: one copy for all GEMMs)" if classic else dim,
           "rht": f"RHT d={rht}" if rht else "", "q_sqnr_db": round(sqnr_db(t, ours), 1), "references": refs,
           "note": note + ("; stochastic rounding: its round-to-nearest twin is compared" if det is not spec else "")}
    if spec.rounding == "stochastic":
        out["sr"] = sr_unbiasedness(spec, gemm, role, rht, classic, seed, n_sr)
    return out


def _scaled(t: Tensor, spec: QuantSpec) -> Tensor:
    """The operand as the element format sees it before rounding (t · scale, · headroom), in the fp32 operation
    order of the quantizer: block_qdq's x · enc · h, or x · s with the Scaler's per-tensor / per-row scale."""
    sc = spec.scaling
    if isinstance(sc, BlockScaling):
        xs = t.float() * elementwise_scale(t, spec.fmt, replace(sc, headroom=1.0))
        return xs * sc.headroom if sc.headroom != 1.0 else xs
    if sc.kind == "delayed":     # a fresh Quantizer's first call: the scale it recorded
        q = Quantizer(replace(spec, rounding="nearest", sr_bits=None, sr_rng="per_quantizer"), count=False)
        q.quantize(t)
        return t.float() * q.scaler.scale
    return t.float() * stateless_scale(t, spec.fmt, sc)[0]


def _sr_headroom_recipes() -> str:
    return ", ".join(b for b, sw in BLOCK_SWITCHES.items() if "sr_headroom" in sw)


def _sr_why(spec: QuantSpec, ok: bool, sat_frac: float, z_u: float) -> str:
    """Why the Monte-Carlo verdict is what it is: the saturated elements (above fmax after the scale rounded), where
    SR can only round toward zero, are the measured cause when the bias disappears without them."""
    fmax, pct = spec.fmt.max, f"{100 * sat_frac:.2g} %"
    if ok:
        return "unbiased" + (f" ({pct} of the elements saturate above ±{fmax:g}, within the bound)" if sat_frac
                             else "")
    if sat_frac and abs(z_u) <= SR_Z_BOUND:
        h = spec.scaling.headroom if isinstance(spec.scaling, BlockScaling) else 1.0
        fix = (f"its headroom {h:.4g} is not enough" if h != 1.0 else
               f"a headroom before rounding fixes it (the sr_headroom switch of {_sr_headroom_recipes()}: x3/4)")
        return (f"biased toward zero by saturation: {pct} of the elements lie above ±{fmax:g} after the scale "
                f"rounding, where SR can only round down; without them |Z| = {abs(z_u):.2f}; {fix}")
    if sat_frac:
        return (f"biased beyond saturation: without the {pct} saturated elements |Z| = {abs(z_u):.2f} still "
                f"exceeds {SR_Z_BOUND:g}")
    return "biased with no element saturated: the rounding itself"


def _z(t: Tensor, mean: Tensor, var: Tensor, n: int) -> float:
    bias = float((torch.sign(t) * (mean - t)).sum())
    se = math.sqrt(float(var.sum()) / n)
    return bias / se if se > 0 else (0.0 if bias == 0 else math.copysign(math.inf, bias))


def sr_unbiasedness(spec: QuantSpec, gemm: str, role: str, rht: int | None = None, classic: bool = False,
                    seed: int = 0, n: int = N_SR_DRAWS) -> dict:
    """Mean of n SR draws of the synthetic operand (as the GEMM sees it) vs the exact value (module docstring), and
    the fraction of its elements that saturate (|x · scale| > fmax), with Z recomputed without them."""
    x = synthetic_operand(role, seed)
    signs = None if rht is None else rht_signs(rht, seed)
    _, t = _altgrad_copy(Quantizer(spec, seed=seed, count=False), x, gemm, role, signs, classic)
    # the n draws in one call on n stacked copies (reduction dim last): every scale kind of a QuantSpec is per
    # tensor, per row or per block of the last two dims, so each copy gets the scales of one call on t alone; the
    # axis handling of the training path is what check_operand's deterministic comparison checks
    d = Quantizer(spec, seed=seed, count=False).quantize(t.expand(n, *t.shape).contiguous()).double()
    sat = _scaled(t, spec).abs() > spec.fmt.max
    t = t.double()
    mean, var = d.mean(0), d.var(0)
    z = _z(t, mean, var, n)
    keep = ~sat
    z_u = _z(t[keep], mean[keep], var[keep], n)
    ok = abs(z) <= SR_Z_BOUND
    sat_frac = float(sat.double().mean())
    return {"draws": n, "z": round(z, 2), "bound": SR_Z_BOUND, "pass": ok,
            "rel_bias": float((torch.sign(t) * (mean - t)).sum() / t.abs().sum()) if float(t.abs().sum()) else 0.0,
            "saturated_frac": sat_frac, "z_unsaturated": round(z_u, 2), "why": _sr_why(spec, ok, sat_frac, z_u)}


# ----------------------------------------------------------------------------- the whole recipe

def _operand_spec(lspec: LayerSpec, gemm: str, role: str) -> QuantSpec | None:
    opts = lspec.gemm_options
    for g, r, s in (opts.overrides if opts is not None else ()):
        if g == gemm and r == role:
            return s
    return getattr(lspec, role)


def _specs(policy: QuantPolicy) -> list[QuantSpec]:
    """Every operand spec of the policy (roles and overrides)."""
    out = []
    for _, lspec in _groups(policy):
        if lspec is not None:
            out += [_operand_spec(lspec, g, r) for g in GEMMS for r in GEMM_OPERANDS[g]]
    return [s for s in out if s is not None]


def _accum_str(opts, gemm: str) -> str:
    """The accumulator model of one GEMM: GemmOptions.accum_for(gemm) (numerics/accumulate.py's AccumSpec)."""
    spec = opts.accum_for(gemm) if opts is not None else None
    return FP32_ACCUM if spec is None else f"{spec.short_str()} ({spec.model} model)"


def _attn_str(policy: QuantPolicy) -> str | None:
    attn = getattr(policy, "attn", None)
    if attn is None:
        return None
    return attn.short_str() if hasattr(attn, "short_str") else str(attn)


def _groups(policy: QuantPolicy) -> list[tuple[list[str], LayerSpec | None]]:
    """Layer classes grouped by identical LayerSpec, in LAYER_CLASSES order."""
    out: list[tuple[list[str], LayerSpec | None]] = []
    for cls in LAYER_CLASSES:
        spec = policy.spec_for(cls)
        for classes, s in out:
            if s == spec:
                classes.append(cls)
                break
        else:
            out.append(([cls], spec))
    return out


@dataclass
class FidelityReport:
    """The report of one recipe: `print(report)` (text), `report.to_dict()` / `report.to_json()` (machine use)."""
    recipe: str
    policy: dict
    backend: str
    seed: int
    layers: list[dict] = field(default_factory=list)
    touches: dict = field(default_factory=dict)
    attention: str = "high precision"
    summary: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"recipe": self.recipe, "backend": self.backend, "policy": self.policy,
                "operands_note": OPERAND_NOTE.format(seed=self.seed), "summary": self.summary,
                "touches": self.touches, "attention": self.attention, "layers": self.layers}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, allow_nan=False)

    def __str__(self) -> str:
        return render_text(self)

    def __repr__(self) -> str:      # a notebook cell ending in the report shows the text
        return render_text(self)


def fidelity_report(recipe: "str | Mapping | QuantPolicy", seed: int = 0, n_sr: int = N_SR_DRAWS) -> FidelityReport:
    """The fidelity report of a named recipe, a recipe dict or a QuantPolicy (module docstring). A bad recipe raises
    get_policy's one-line ValueError (naming the valid choices) before anything is computed."""
    policy = get_policy(recipe)
    if any(isinstance(s.scaling, BlockScaling) for s in _specs(policy)):
        with quiet_torchao_import():    # its import-time log lines dropped, before the references import it
            import torchao.prototype.mx_formats.mx_tensor
            import torchao.prototype.mx_formats.nvfp4_tensor  # noqa: F401
    cache: dict[tuple, dict] = {}
    layers = []
    for classes, lspec in _groups(policy):
        entry: dict[str, Any] = {"layer_classes": classes, "spec": None if lspec is None else lspec.short_str(),
                                 "gemms": []}
        if lspec is not None:
            opts = lspec.gemm_options
            classic = opts is None
            entry["path"] = "classic (per-tensor copies shared by the GEMMs)" if classic else "GEMM-faithful"
            for gemm in GEMMS:
                g: dict[str, Any] = {"gemm": gemm, "accumulation": _accum_str(opts, gemm), "operands": []}
                g["high_precision"] = bool(opts is not None and gemm in opts.hp_gemms)
                for role in GEMM_OPERANDS[gemm]:
                    spec = None if g["high_precision"] else _operand_spec(lspec, gemm, role)
                    row: dict[str, Any] = {"operand": ROLE_LABEL[role], "role": role}
                    if spec is not None:
                        rht = opts.rht_dim if opts is not None and gemm in opts.rht else None
                        key = (json.dumps(spec.to_dict(), sort_keys=True), role, None if classic else gemm, rht)
                        if key not in cache:
                            cache[key] = check_operand(spec, gemm, role, rht, classic, seed, n_sr)
                        row.update(cache[key])
                    g["operands"].append(row)
                entry["gemms"].append(g)
        layers.append(entry)
    rep = FidelityReport(recipe=policy.name, policy=policy.to_dict(), backend=policy.backend, seed=seed,
                         layers=layers, attention=_attn_str(policy) or "high precision")
    rep.touches = _touches(policy)
    rep.summary = _summary(rep, policy)
    return rep


def _touches(policy: QuantPolicy) -> dict:
    modules = {cls: sorted(s for s, c in SUFFIX_TO_CLASS.items() if c == cls) for cls in LAYER_CLASSES}
    q = [c for c in LAYER_CLASSES if policy.spec_for(c) is not None]
    hp = [c for c in LAYER_CLASSES if policy.spec_for(c) is None]
    attn = _attn_str(policy)
    always = list(ALWAYS_HP) + ([] if attn else ["attention matmuls (Q·Kᵀ, P·V)"])
    return {"quantized": q, "high_precision": hp, "modules": modules, "always_high_precision": always,
            "hp_last_blocks": policy.hp_last_blocks}


def _where(items: list[tuple[str, str, str]]) -> str:
    """'X fprop, W dgrad', prefixed by the layer classes when the recipe has more than one quantized group."""
    groups: dict[str, list[str]] = {}
    for cls, g, op in items:
        groups.setdefault(cls, []).append(f"{op} {g}")
    if len(groups) == 1 and "" in groups:
        return ", ".join(groups[""])
    return "; ".join(f"{cls}: {', '.join(v)}" for cls, v in groups.items())


def _summary(rep: FidelityReport, policy: QuantPolicy) -> dict:
    exact: dict[str, list] = {}
    hand: dict[str, list] = {}
    approx: list[str] = []
    loose: dict[str, list] = {}
    sr: dict[str, list] = {}
    rht = set()
    several = sum(1 for e in rep.layers if e["spec"]) > 1
    for entry in rep.layers:
        cls = ", ".join(entry["layer_classes"]) if several else ""
        for g in entry["gemms"]:
            for op in g["operands"]:
                if "spec" not in op:
                    continue
                label = f"{op['spec']}" + (f" +{op['rht']}" if op["rht"] else "")
                twin = label + (" (its RNE twin)" if "sr" in op else "")
                if op["rht"]:
                    rht.add(op["rht"])
                refs = op["references"]
                libs = " / ".join(dict.fromkeys(r["reference"] for r in refs if r["source"] == "library"))
                hands = " / ".join(dict.fromkeys(r["reference"] for r in refs if r["source"] == "hand"))
                if refs and all(r["exact"] for r in refs) and libs:
                    exact.setdefault(f"{twin}: bit-exact vs {libs}" + (f"; also vs {hands}" if hands else ""),
                                     []).append((cls, g["gemm"], op["operand"]))
                elif refs and all(r["exact"] for r in refs):
                    hand.setdefault(f"{twin}: exact vs a reference we wrote from the paper's equations, not a "
                                    f"library: {hands}", []).append((cls, g["gemm"], op["operand"]))
                elif refs:
                    bad = [r for r in refs if not r["exact"]]
                    worst = min(bad, key=lambda r: r["sqnr_db"] if r["sqnr_db"] is not None else math.inf)
                    loose.setdefault(f"{twin}: {worst['mismatches']} of {worst['n']} elements differ from "
                                     f"{worst['reference']} (SQNR {db_str(worst['sqnr_db'])} dB)", []).append(
                        (cls, g["gemm"], op["operand"]))
                else:
                    loose.setdefault(f"{label}: {op['note'].split(';')[0]}", []).append((cls, g["gemm"], op["operand"]))
                if "sr" in op:
                    s = op["sr"]
                    sr.setdefault(f"{op['spec']}: stochastic rounding {'unbiased' if s['pass'] else 'BIASED'} "
                                  f"(Monte-Carlo {s['draws']} draws, |Z| = {abs(s['z']):.2f} vs bound "
                                  f"{s['bound']:g}){'' if s['pass'] else ': ' + s['why']}; its random bits are "
                                  f"AltGrad's generator, not a hardware RNG",
                                  []).append((cls, g["gemm"], op["operand"]))
    quantized = any(e["spec"] for e in rep.layers)
    ex = [f"{k} ({_where(v)})" for k, v in exact.items()]
    approx = [f"{k} ({_where(v)})" for k, v in {**loose, **sr}.items()]
    approx += [f"{r}: the rotation is computed in fp32 by AltGrad (the references see the same rotated operand; "
               f"a fused hardware RHT kernel is not cross-checked)" for r in sorted(rht)]
    nots = []
    accs = {g["accumulation"] for e in rep.layers for g in e["gemms"] if not g["high_precision"]}
    if quantized and FP32_ACCUM in accs:
        nots.append("accumulation inside the low-precision GEMMs: " + FP32_ACCUM + "; FP8 tensor cores keep fewer "
                    "bits (DeepSeek-V3 measured ~14 on H800) unless partial sums are promoted; a recipe's "
                    "`gemm: {accum: fp22}` simulates that accumulator")
    # a modelled accumulator is a model of the hardware's (numerics/accumulate.py says what it models), bit-equal
    # to its own slow loop but not cross-checked against a tensor core here (bench/gpu_accum_crosscheck.py does)
    approx += [f"accumulation {a}: a model of a low-precision accumulator, not cross-checked against a GPU"
               for a in sorted(accs - {FP32_ACCUM})]
    hand_extra = []
    if quantized and rep.attention == "high precision":
        nots.append("attention matmuls (Q·Kᵀ, P·V): high precision, not in any low-precision format (`attn: fp8` or "
                    "`attn: mxfp8` on a recipe quantizes them)")
    elif rep.attention != "high precision":
        hand_extra.append(f"attention quantization points {rep.attention}: TE's FP8-attention points, bit-exact vs "
                          f"a hand-written reference attention (tests/test_attention_quant.py); accumulation FP32")
    if not quantized:
        ex.append("nothing is quantized: every GEMM runs in the model's precision (TrainConfig.precision)")
    if policy.backend != "sim":
        approx.insert(0, f"backend {policy.backend}: training casts with the library's own FP8 dtypes; this "
                         f"report checks the simulator's numerics of the same specs")
    return {"exactly_simulated": ex,
            "exact_vs_hand_reference": [f"{k} ({_where(v)})" for k, v in hand.items()] + hand_extra,
            "approximately": approx, "not_simulated": nots}
