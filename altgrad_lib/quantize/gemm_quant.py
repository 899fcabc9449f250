"""GEMM-faithful operand quantization for a linear layer, as TransformerEngine / torchao MX do it.

Each of the three GEMMs of `Y = X·Wᵀ` quantizes its own two operands along its own reduction dimension:

    fprop  Y  = X · Wᵀ     X (tokens, in) and W (out, in) blocked along `in`
    dgrad  dX = dY · W     dY (tokens, out) and W blocked along `out` (W's column-wise copy)
    wgrad  dW = dYᵀ · X    dY and X blocked along the tokens (batch × time flattened)

Each copy is one call of the operand's Quantizer with the GEMM's reduction dim as its axis (block_scaling.py's one MX
/ NVFP4 routine, per_row likewise). Every copy is quantized from the high-precision tensor
(``columnwise_source="hp"``, TE's default) or, for the column-wise copies, from the dequantized row-wise copy
(``"dequantized"``). A tensor whose scaling does not depend on a dimension (per-tensor kinds none/current/delayed) is
quantized once and the same copy serves every GEMM, which is what the old `QuantizedLinear` path does: with such specs
this path is bit-identical to it.
A GEMM listed in ``hp_gemms`` runs on the high-precision operands (TE's DisableQuantizationGEMM). An operand
listed in ``overrides`` (gemm_overrides.py) is quantized by its own Quantizer and spec, so no copy is shared
between it and the other GEMMs; a column-wise copy is taken from a dequantized row-wise one only when both come
from the same Quantizer.

Random Hadamard transform (RHT), off unless asked for (``rht``; the named recipes nvfp4 and mxfp4 turn it on for
wgrad, block_recipes.py): for a GEMM in ``rht`` both operands are multiplied along the reduction dim
by the block-diagonal orthogonal matrix M = diag(s)·H_d / sqrt(d) (H_d Sylvester-Hadamard, s a seeded ±1
sign vector kept in the layer's `rht_signs` buffer, so it is checkpointed) before quantization. RNG policy
``rht_rng``: "fixed" (that one vector for the whole run, as TransformerEngine) or "per_step" (Quartet-II's replica
re-draws the signs on every backward call: here s = counter_rng bits keyed by the layer's seed and the training step
in the layer's `rng_step` buffer, which the loop sets before each step, so a resumed run draws the same signs). Since
(A·M)(B·M)ᵀ = A·Bᵀ the GEMM is unchanged in exact arithmetic; only the quantization error changes. A
reduction dim that is not a multiple of d is zero-padded (zero rows add nothing to the product).

Accumulator precision (``accum``, off unless asked for): {gemm: AccumSpec} (numerics/accumulate.py). A GEMM with
an AccumSpec other than FP32 computes its product with `accumulate_matmul` (an accumulator format, per-add or
per-chunk rounding, FP32 promotion every N products); every other GEMM runs the plain FP32 matmul as before. In a
recipe: ``gemm: {accum: {wgrad: {fmt: fp22, promote_every: 128}}}``, or ``gemm: {accum: fp22}`` for every GEMM
not in hp_gemms (a GEMM kept in high precision runs the FP32 matmul, as TE's DisableQuantizationGEMM does).
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass, fields
from typing import Mapping

import torch
import torch.nn.functional as F
from torch import Tensor

from altgrad_lib.choices import RHT_RNG
from altgrad_lib.errors import check_keys
from altgrad_lib.numerics.accumulate import AccumSpec, accumulate_matmul
from altgrad_lib.numerics.counter_rng import hash_bits
from altgrad_lib.numerics.kernels import transposed
from altgrad_lib.quantize.gemm_overrides import (GEMMS, Overrides, normalize_overrides, operand_quantizer,
                                                 overrides_short_str, overrides_to_dict)

COLUMNWISE_SOURCES = ("hp", "dequantized")
Accums = tuple[tuple[str, AccumSpec], ...]   # (gemm, spec), in GEMMS order, FP32 entries dropped


def normalize_accum(value, hp_gemms: tuple[str, ...]) -> Accums:
    """`accum:` -> the canonical tuple. A format name, an AccumSpec or a spec dict (no GEMM key) applies to every
    GEMM not in hp_gemms; {gemm: spec} to the GEMMs named, which must not be in hp_gemms. One-line errors."""
    if isinstance(value, tuple) and all(isinstance(t, tuple) and len(t) == 2 for t in value):
        value = dict(value)
    if value is None:
        return ()
    if isinstance(value, Mapping) and any(k in GEMMS for k in value):
        bad = [g for g in value if g not in GEMMS]
        if bad:
            raise ValueError(f"GemmOptions.accum: unknown GEMM(s) {bad}; valid choices: {GEMMS} (or one AccumSpec "
                             f"for all: a format name or a dict of its fields)")
        per = {}
        for g, v in value.items():
            try:
                per[g] = AccumSpec.from_dict(v)
            except (ValueError, TypeError) as e:
                raise type(e)(f"GemmOptions.accum[{g!r}]: {e}") from None
        both = [g for g in GEMMS if g in per and g in hp_gemms and not per[g].is_fp32]
        if both:
            raise ValueError(f"GemmOptions.accum names {both}, which hp_gemms keeps in high precision (FP32 "
                             f"matmul); valid: accumulators only for GEMMs not in hp_gemms={list(hp_gemms)}")
    elif isinstance(value, (str, Mapping, AccumSpec)):
        keys = [f.name for f in fields(AccumSpec)]
        bad = sorted(set(value) - set(keys)) if isinstance(value, Mapping) else []
        if bad:
            raise ValueError(f"GemmOptions.accum: unknown key(s) {bad}; valid: GEMMs {GEMMS} (an AccumSpec each) "
                             f"or the AccumSpec keys {keys} (one for all)")
        try:
            spec = AccumSpec.from_dict(value)
        except (ValueError, TypeError) as e:
            raise type(e)(f"GemmOptions.accum: {e}") from None
        per = {g: spec for g in GEMMS if g not in hp_gemms}
    else:
        raise TypeError(f"GemmOptions.accum={value!r}: expected a format name, an AccumSpec dict, or "
                        f"{{gemm: spec}} with gemms {GEMMS}")
    return tuple((g, per[g]) for g in GEMMS if g in per and not per[g].is_fp32)


@dataclass(frozen=True)
class GemmOptions:
    """Per-GEMM switches of a GEMM-faithful QuantizedLinear (see the module docstring)."""

    hp_gemms: tuple[str, ...] = ()         # GEMMs kept in high precision, e.g. ("wgrad",)
    # GEMMs whose operands get the random Hadamard transform: none by default (no hardware MX recipe rotates);
    # a named recipe that does (nvfp4, mxfp4) writes it out
    rht: tuple[str, ...] = ()
    rht_dim: int = 16
    rht_rng: str = "fixed"                 # RHT_RNG: one sign vector per layer | re-drawn every step
    columnwise_source: str = "hp"          # COLUMNWISE_SOURCES
    # per-GEMM operand specs, {gemm: {operand: spec | null}} (gemm_overrides.py); normalized to a sorted tuple
    overrides: Overrides = ()
    # per-GEMM accumulator (numerics/accumulate.py), {gemm: AccumSpec | name | dict} or one spec for all; FP32 when
    # absent; normalized to a tuple (normalize_accum)
    accum: Accums = ()

    def __post_init__(self) -> None:
        for name in ("hp_gemms", "rht"):
            v = getattr(self, name)
            v = (v,) if isinstance(v, str) else tuple(v or ())
            bad = [g for g in v if g not in GEMMS]
            if bad:
                raise ValueError(f"GemmOptions.{name}={v!r}: unknown GEMM(s) {bad}; valid choices: {GEMMS}")
            object.__setattr__(self, name, v)
        d = self.rht_dim
        if isinstance(d, bool) or not isinstance(d, int) or d < 2 or d & (d - 1):
            raise ValueError(f"GemmOptions.rht_dim={d!r} is invalid; valid: a power of two >= 2 (TE uses 16)")
        if self.rht_rng not in RHT_RNG:
            raise ValueError(f"GemmOptions.rht_rng={self.rht_rng!r} is invalid; valid choices: {RHT_RNG}")
        if self.columnwise_source not in COLUMNWISE_SOURCES:
            raise ValueError(f"GemmOptions.columnwise_source={self.columnwise_source!r} is invalid; "
                             f"valid choices: {COLUMNWISE_SOURCES}")
        ov = normalize_overrides(self.overrides)
        both = sorted({g for g, _, _ in ov} & set(self.hp_gemms), key=GEMMS.index)
        if both:
            raise ValueError(f"GemmOptions.overrides names {both}, which hp_gemms keeps in high precision; "
                             f"valid: override only GEMMs not in hp_gemms={list(self.hp_gemms)}")
        object.__setattr__(self, "overrides", ov)
        object.__setattr__(self, "accum", normalize_accum(self.accum, self.hp_gemms))

    def accum_for(self, gemm: str) -> AccumSpec | None:
        """The GEMM's accumulator, None for the plain FP32 matmul."""
        return dict(self.accum).get(gemm)

    def to_dict(self) -> dict:
        out = {f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v
               for f in fields(self) if f.name not in ("overrides", "rht_rng", "accum")}
        if self.rht_rng != RHT_RNG[0]:   # only when set: recipes from before keep their dict (and run hashes)
            out["rht_rng"] = self.rht_rng
        if self.overrides:     # only when set: recipes without overrides keep their old dict (and run hashes)
            out["overrides"] = overrides_to_dict(self.overrides)
        if self.accum:         # likewise: FP32 everywhere keeps the old dict (and run hashes)
            out["accum"] = {g: spec.to_dict() for g, spec in self.accum}
        return out

    @classmethod
    def from_dict(cls, d: "Mapping | GemmOptions | None") -> "GemmOptions | None":
        if d is None or isinstance(d, GemmOptions):
            return d
        if not isinstance(d, Mapping):
            raise TypeError(f"GemmOptions: expected a dict or null, got {d!r}")
        check_keys(cls, d, "GemmOptions")
        return cls(**d)

    def short_str(self) -> str:
        parts = []
        if self.rht:    # the block size only when not TE's 16 (every earlier recipe prints as before)
            parts.append(f"rht{self.rht_dim if self.rht_dim != 16 else ''}:" + "+".join(self.rht)
                         + ("@step" if self.rht_rng == "per_step" else ""))
        if self.hp_gemms:
            parts.append("hp:" + "+".join(self.hp_gemms))
        if self.columnwise_source != "hp":
            parts.append("col:deq")
        if self.overrides:
            parts.append("ov:" + overrides_short_str(self.overrides))
        if self.accum:
            specs = {spec for _, spec in self.accum}
            if len(self.accum) == len(GEMMS) and len(specs) == 1:
                parts.append("acc:" + self.accum[0][1].short_str())
            else:
                parts.append("acc:" + "+".join(f"{g}={spec.short_str()}" for g, spec in self.accum))
        return ",".join(parts) or "plain"


# ------------------------------------------------------------------------------------------ Hadamard

def hadamard(d: int, dtype=torch.float64) -> Tensor:
    """Sylvester-Hadamard matrix of order d (entries ±1, H·Hᵀ = d·I)."""
    h = torch.ones(1, 1, dtype=dtype)
    while h.shape[0] < d:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h


def rht_signs(d: int, seed: int) -> Tensor:
    """A seeded ±1 vector (float32) for the random Hadamard transform."""
    g = torch.Generator().manual_seed(int(seed))
    return (torch.randint(0, 2, (d,), generator=g) * 2 - 1).to(torch.float32)


def layer_signs(layer) -> Tensor:
    """The sign vector a layer rotates with now: its fixed `rht_signs`, or (rht_rng "per_step") the counter_rng
    bits of (layer seed, step in `rng_step`): traceable, the step a tensor, so a compiled step never recompiles."""
    if layer.gemm.rht_rng != "per_step":
        return layer.rht_signs
    d = layer.rht_signs.numel()
    bits = hash_bits(layer.rng_step * d, d, layer.rht_keys, 1, device=layer.rht_signs.device)
    return (bits * 2 - 1).to(torch.float32)


_HADAMARD64: dict[tuple[int, str], Tensor] = {}   # (order, device) -> hadamard(d), once per process (eager)
# id(signs) -> (weakref to signs, its _version, dtype, M): eager, the last M of each live sign vector (a layer's fixed
# rht_signs serves every backward, and M is 4 small ops a call, several calls a step); an entry
# goes when its tensor does, and an in-place change of the signs (load_state_dict) bumps _version: recomputed
_RHT_M: dict[int, tuple] = {}


def rht_matrix(signs: Tensor, dtype=torch.float32) -> Tensor:
    """M = diag(s)·H_d / sqrt(d): orthogonal; entries ±2^-k exactly for d = 4^k (16: ±1/4). Eager callers share
    one M per sign vector and dtype: do not modify it in place."""
    compiling = torch.compiler.is_compiling()
    hit = None if compiling else _RHT_M.get(id(signs))
    if hit is not None and hit[0]() is signs and hit[1] == signs._version and hit[2] == dtype:
        return hit[3]
    d = signs.numel()
    # H on the signs' device: a CPU H times CUDA signs failed on the GPU only (seen on an H100)
    key = (d, str(signs.device))
    h = None if compiling else _HADAMARD64.get(key)   # ~16 small ops per eager call saved
    if h is None:
        h = hadamard(d).to(signs.device)
        if not compiling:
            _HADAMARD64[key] = h
    m = (signs.to(torch.float64)[:, None] * h / d**0.5).to(dtype=dtype)
    if not compiling and not signs.requires_grad and not signs.is_inference():   # (no version counter)
        k = id(signs)
        _RHT_M[k] = (weakref.ref(signs, lambda _, k=k: _RHT_M.pop(k, None)), signs._version, dtype, m)
    return m


def apply_rht(a: Tensor, signs: Tensor) -> Tensor:
    """A·blockdiag(M) along the last dim (zero-padded to a multiple of d): (R, K) -> (R, ceil(K/d)·d)."""
    d = signs.numel()
    k = a.shape[-1]
    kp = -(-k // d) * d
    if kp != k:
        a = F.pad(a, (0, kp - k))
    m = rht_matrix(signs, a.dtype)
    return (a.reshape(*a.shape[:-1], kp // d, d) @ m).reshape(*a.shape[:-1], kp)


# ------------------------------------------------------------------------------------------ operands

def per_tensor_quantizer(q) -> bool:
    """Scaling independent of the layout: one quantized copy serves every GEMM."""
    return q is None or q.per_tensor


def rowwise_copy(q, t: Tensor, train: bool, axis: int = -1) -> Tensor:
    """Quantize t along `axis` (the GEMM's reduction dim) with quantizer q (None = high precision)."""
    if q is None:
        return t
    if train:
        return q.quantize(t, axis=axis)
    with torch.no_grad():
        return q(t, axis=axis)  # eval: the quantizer's eval numerics (state read, never updated; SR -> RNE)


def row_copy(q, t: Tensor, train: bool, signs: Tensor | None) -> Tensor:
    """Operand t (R, K) reduced along K: rotated (K padded to a multiple of d) and quantized along K."""
    return rowwise_copy(q, t if signs is None else apply_rht(t, signs), train)


def col_copy(q, t: Tensor, train: bool, signs: Tensor | None) -> Tensor:
    """Operand t (R, K) reduced along R (a column-wise copy): quantized along R, returned as (R[padded], K)."""
    if signs is None:
        return rowwise_copy(q, t, train, axis=0)
    return row_copy(q, transposed(t), train, signs).t()    # rotated along R: the rotation wants R last


class _GemmFaithfulLinear(torch.autograd.Function):
    """Y = X·Wᵀ with each GEMM's operands quantized along its reduction dim (bias is added outside).

    The products use the calls of torch's own linear backward (dX = dY.mm(W), dW = (Xᵀ.mm(dY))ᵀ), so with
    per-tensor specs the result is bit-identical to autograd through F.linear on the quantized operands."""

    @staticmethod
    def forward(ctx, x, w, layer):
        opts: GemmOptions = layer.gemm
        train = layer.training
        x2 = x.reshape(-1, x.shape[-1])
        xf = wf = None
        if "fprop" in opts.hp_gemms:
            y = F.linear(x, w)
        else:
            signs = layer_signs(layer) if "fprop" in opts.rht else None
            xf = row_copy(operand_quantizer(layer, "fprop", "input"), x2, train, signs)
            wf = row_copy(operand_quantizer(layer, "fprop", "weight"), w, train, signs)
            acc = opts.accum_for("fprop")
            if acc is None:
                y = F.linear(xf.reshape(*x.shape[:-1], xf.shape[-1]), wf)
            else:
                y = accumulate_matmul(xf, wf.t(), acc).reshape(*x.shape[:-1], wf.shape[0])
            if signs is not None:          # padded / rotated copies are no use to the other GEMMs
                xf = wf = None
        ctx.layer, ctx.train, ctx.x_shape = layer, train, x.shape
        ctx.save_for_backward(x2, w, xf, wf)
        return y

    @staticmethod
    def backward(ctx, grad_y):
        layer, train = ctx.layer, ctx.train
        opts: GemmOptions = layer.gemm
        def q(gemm, role):
            return operand_quantizer(layer, gemm, role)

        # fprop's copies xf / wf serve another GEMM only when that GEMM's operand has the same Quantizer
        xq_f, wq_f = q("fprop", "input"), q("fprop", "weight")
        x2, w, xf, wf = ctx.saved_tensors
        dy2 = grad_y.reshape(-1, grad_y.shape[-1])
        deq = opts.columnwise_source == "dequantized"
        dy_once: dict[int, Tensor] = {}

        def dy_per_tensor(gq) -> Tensor:   # one quantized dY per Quantizer, for every GEMM that shares it
            if id(gq) not in dy_once:
                dy_once[id(gq)] = rowwise_copy(gq, dy2, train)
            return dy_once[id(gq)]

        grad_x = grad_w = g_d = gq_d = None
        if ctx.needs_input_grad[0]:
            if "dgrad" in opts.hp_gemms:
                grad_x = dy2.mm(w)
            else:
                signs = layer_signs(layer) if "dgrad" in opts.rht else None
                gq_d, wq = q("dgrad", "grad_output"), q("dgrad", "weight")
                g_d = (dy_per_tensor(gq_d) if signs is None and per_tensor_quantizer(gq_d)
                       else row_copy(gq_d, dy2, train, signs))
                same = wq is wq_f and wf is not None
                if signs is None and per_tensor_quantizer(wq) and same:
                    w_d = wf
                else:
                    w_d = col_copy(wq, wf if deq and same else w, train, signs)           # W blocked along `out`
                acc = opts.accum_for("dgrad")
                grad_x = g_d.mm(w_d) if acc is None else accumulate_matmul(g_d, w_d, acc)
            grad_x = grad_x.reshape(ctx.x_shape)
        if ctx.needs_input_grad[1]:
            if "wgrad" in opts.hp_gemms:
                grad_w = x2.t().mm(dy2).t()
            else:
                signs = layer_signs(layer) if "wgrad" in opts.rht else None
                xq, gq = q("wgrad", "input"), q("wgrad", "grad_output")
                same = xq is xq_f and xf is not None
                if signs is None and per_tensor_quantizer(xq) and same:
                    x_w = xf
                else:
                    x_w = col_copy(xq, xf if deq and same else x2, train, signs)          # X blocked along tokens
                if signs is None and per_tensor_quantizer(gq):
                    g_w = dy_per_tensor(gq)
                else:
                    # dgrad's row-wise copy, unless rotated along `out` (then it is dY·M, not dY)
                    row = deq and gq is gq_d and g_d is not None and "dgrad" not in opts.rht
                    g_w = col_copy(gq, g_d if row else dy2, train, signs)                  # dY along tokens
                acc = opts.accum_for("wgrad")
                grad_w = x_w.t().mm(g_w).t() if acc is None else accumulate_matmul(g_w.t(), x_w, acc)
        return grad_x, grad_w, None


def gemm_faithful_linear(x: Tensor, w: Tensor, layer) -> Tensor:
    """X·Wᵀ through _GemmFaithfulLinear; `layer` has x_quant, w_quant, g_quant, gemm, rht_signs (and gemm_quants,
    the overrides' Quantizers)."""
    return _GemmFaithfulLinear.apply(x, w, layer)
