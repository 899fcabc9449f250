"""Attention in low precision: formats on the tensors of the two attention matmuls, at TransformerEngine's
quantizer points, with the softmax in high precision.

Causal attention of one head, d = head dim, c = 1/sqrt(d) (TE's UnfusedDotProductAttention with
NVTE_UnfusedDPA_Emulate_FP8=1, dot_product_attention/backends.py, FP8EmulationFunc; TE's names, which are
FlashAttention's swapped: TE's "S" is the softmax OUTPUT and its "dP" the gradient of the softmax INPUT):

    forward    Q, K, V -> [qkv]      A = c·(Q·Kᵀ), causal mask, P = softmax(A) (fp32)
               P -> [s]              O = P·V -> [o]            (O is what c_proj receives)
    backward   dO -> [do]            dP_ = dO·Vᵀ, dV = Pᵀ·dO, dA = softmax_backward(dP_, P) (fp32)
               dA -> [dp]            dQ = c·dA·K, dK = c·dAᵀ·Q, then dQ, dK, dV -> [dqkv]  (what c_attn receives)

Each [point] is a QuantSpec (None = high precision): any format, per-tensor current / delayed scaling, or block
kinds (MX, NVFP4). A per-tensor kind quantizes a tensor once and that copy serves every matmul; Q, K and V (and
dQ, dK, dV) share ONE scale, from the amax of the three together, as TE's combine_and_quantize does. A block
kind blocks each matmul's operands along that matmul's reduction dim, as the hardware does (and as cuDNN's MXFP8
attention asks for with TE's columnwise copies): Q and K along d for Q·Kᵀ and along the sequence for dK / dQ;
V along the sequence for P·V and along d for dO·Vᵀ; P along the keys for P·V and along the queries for Pᵀ·dO;
dO along d for dO·Vᵀ and along the queries for Pᵀ·dO; dA along the keys for dA·K and along the queries for dAᵀ·Q;
O along the channels (B, T, C), the reduction dim of c_proj; dQ, dK, dV along d. Every copy is quantized from
the high-precision tensor. (TE's software emulation keeps one rowwise copy per tensor; with per-tensor scaling
the two agree bit for bit.) TE's MXFP8 attention passes S and dP through in high precision (its kernel handles
them internally): the "mxfp8" preset does the same.

Hadamard (torchao's FP8 attention: "qkv" or "v"): an orthogonal M = diag(s)·H_n/sqrt(n) (gemm_quant.rht_matrix;
block-diagonal when n < d; signs in the module's `had_signs` buffer, so checkpoints carry them). "qkv" rotates Q,
K and V along d, "v" only V; (Q·M)(K·M)ᵀ = Q·Kᵀ, and O = (P·(V·M))·Mᵀ. The kernel works in the rotated basis: its
inputs Q, K, V and dO (= dO·M) are rotated before they are quantized (that is the point of the rotation), its
outputs O and dQ, dK, dV are rotated back (in high precision) before [o] / [dqkv], which feed the linears.
Dropout on P (before [s], as TE) draws its mask from torch's global RNG.

`AttnSpec` is the frozen config (a QuantPolicy's `attn:` key); `QuantizedAttention` the module quantize_model
installs as each CausalSelfAttention's `attention_op`; `_QuantAttentionFn` the autograd.Function whose explicit
backward holds the backward quantizer points.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Mapping

import torch
import torch.nn as nn
from torch import Tensor
from torch.autograd.function import once_differentiable

from altgrad_lib.numerics.quantizer import Quantizer
from altgrad_lib.numerics.quant_spec import QuantSpec
from altgrad_lib.quantize.gemm_overrides import operand_spec
from altgrad_lib.quantize.gemm_quant import per_tensor_quantizer, rowwise_copy, apply_rht, rht_matrix, rht_signs

ATTN_POINTS = ("qkv", "s", "o", "do", "dp", "dqkv")
HADAMARD_MODES = ("none", "qkv", "v")
# named attention recipes (AttnSpec.preset): TE's Float8CurrentScaling / DelayedScaling with Format.HYBRID (E4M3
# forward, E5M2 backward) and TE's MXFP8BlockScaling (E4M3 everywhere; S and dP in high precision)
_CUR4, _CUR5 = {"fmt": "E4M3"}, {"fmt": "E5M2"}
_DLY4, _DLY5 = {"fmt": "E4M3", "scaling": "delayed"}, {"fmt": "E5M2", "scaling": "delayed"}
_MX = {"fmt": "E4M3", "scaling": "mx"}
ATTN_PRESETS: dict[str, dict] = {
    "fp8": {"qkv": _CUR4, "s": _CUR4, "o": _CUR4, "do": _CUR5, "dp": _CUR5, "dqkv": _CUR5},
    "fp8_delayed": {"qkv": _DLY4, "s": _DLY4, "o": _DLY4, "do": _DLY5, "dp": _DLY5, "dqkv": _DLY5},
    "mxfp8": {"qkv": _MX, "s": None, "o": _MX, "do": _MX, "dp": None, "dqkv": _MX},
}


@dataclass(frozen=True)
class AttnSpec:
    """Quantizer points of the attention core (see the module docstring); None = high precision."""

    qkv: QuantSpec | None = None    # Q, K, V before Q·Kᵀ and P·V (one shared scale when per-tensor)
    s: QuantSpec | None = None      # TE's S: the softmax output P before P·V
    o: QuantSpec | None = None      # the attention output O (what c_proj receives)
    do: QuantSpec | None = None     # dO before dO·Vᵀ and Pᵀ·dO
    dp: QuantSpec | None = None     # TE's dP: the gradient of the softmax input before dA·K and dAᵀ·Q
    dqkv: QuantSpec | None = None   # dQ, dK, dV (what c_attn's backward receives)
    hadamard: str = "none"          # HADAMARD_MODES
    hadamard_dim: int = 0           # n of the rotation, a power of two dividing d; 0 = d (torchao: the head dim)

    def __post_init__(self) -> None:
        for p in ATTN_POINTS:   # "E4M3", a QuantSpec dict or a QuantSpec; an unsigned format is refused
            object.__setattr__(self, p, operand_spec(getattr(self, p), f"attn.{p}", _ROLE[p]))
        if self.hadamard not in HADAMARD_MODES:
            raise ValueError(f"attn.hadamard={self.hadamard!r} is invalid; valid choices: {HADAMARD_MODES}")
        n = self.hadamard_dim
        if isinstance(n, bool) or not isinstance(n, int) or n < 0 or (n and n & (n - 1)) or n == 1:
            raise ValueError(f"attn.hadamard_dim={n!r} is invalid; valid: 0 (the head dim) or a power of two >= 2")

    @property
    def is_quantized(self) -> bool:
        return any(getattr(self, p) is not None for p in ATTN_POINTS)

    @classmethod
    def from_value(cls, value: "str | Mapping | AttnSpec | None") -> "AttnSpec | None":
        """None, a preset name ("fp8", "fp8_delayed", "mxfp8"), an AttnSpec, or a dict of AttnSpec fields,
        optionally starting from {"preset": name} (the other keys override it)."""
        if value is None or isinstance(value, AttnSpec):
            return value
        if isinstance(value, str):
            value = {"preset": value}
        if not isinstance(value, Mapping):
            raise TypeError(f"attn={value!r}: expected null, a preset name {tuple(ATTN_PRESETS)} or a dict")
        d = dict(value)
        valid = [f.name for f in fields(cls)] + ["preset"]
        bad = sorted(set(d) - set(valid))
        if bad:
            raise ValueError(f"attn: unknown key(s) {bad}; valid keys: {', '.join(valid)}")
        preset = d.pop("preset", None)
        if preset is not None:
            if preset not in ATTN_PRESETS:
                raise ValueError(f"attn preset {preset!r} is unknown; valid choices: {tuple(ATTN_PRESETS)}")
            d = {**ATTN_PRESETS[preset], **d}
        return cls(**d)

    def to_dict(self) -> dict:
        """Every field explicit (config.yaml shows them; from_value(to_dict()) == self)."""
        out: dict[str, Any] = {p: None if getattr(self, p) is None else getattr(self, p).to_dict()
                               for p in ATTN_POINTS}
        out.update(hadamard=self.hadamard, hadamard_dim=self.hadamard_dim)
        return out

    def short_str(self) -> str:
        """e.g. "qkv:e4m3fn/cur/rne s:e4m3fn/cur/rne ... had:v" (high-precision points left out)."""
        parts = [f"{p}:{getattr(self, p).short_str()}" for p in ATTN_POINTS if getattr(self, p) is not None]
        if self.hadamard != "none":
            parts.append(f"had:{self.hadamard}" + (f"{self.hadamard_dim}" if self.hadamard_dim else ""))
        return " ".join(parts) or "hp"


# the tensor check_signed names in its error; P >= 0 is refused an unsigned format too (the only unsigned one,
# E8M0FNU, is the MX scale format, never an element format)
_ROLE = {"qkv": "Q/K/V", "s": "P", "o": "O", "do": "dO", "dp": "dP", "dqkv": "dQ/dK/dV"}


# ------------------------------------------------------------------------------------------ the module

class QuantizedAttention(nn.Module):
    """(q, k, v) of shape (B, nh, T, d) -> causal attention output (B, T, nh·d) with the AttnSpec's quantizer
    points. One Quantizer per point (submodules: delayed-scaling history, counters and SR state checkpoint)."""

    def __init__(self, spec: AttnSpec, head_dim: int, seed_of=lambda point: 0, fqn: str = ""):
        """seed_of(point) -> the seed of that point's Quantizer (convert.py: linear.module_seed of the module)."""
        super().__init__()
        self.spec = spec
        n = spec.hadamard_dim or head_dim
        if spec.hadamard != "none" and (head_dim % n or n & (n - 1)):
            raise ValueError(f"{fqn or 'attention'}: attn.hadamard_dim={n} must be a power of two dividing the "
                             f"head dim {head_dim} (n_embd / n_head); valid: 0 with a power-of-two head dim, or "
                             f"one of {[2**i for i in range(1, head_dim.bit_length()) if head_dim % 2**i == 0]}")
        self.quants = nn.ModuleDict({p: Quantizer(getattr(spec, p), seed=seed_of(p))
                                     for p in ATTN_POINTS if getattr(spec, p) is not None})
        if spec.hadamard != "none":
            self.register_buffer("had_signs", rht_signs(n, seed_of("had")))

    def q(self, point: str) -> Quantizer | None:
        return self.quants[point] if point in self.quants else None

    def forward(self, q: Tensor, k: Tensor, v: Tensor, dropout_p: float = 0.0,
                capture: list | None = None) -> Tensor:
        dev = q.device.type
        if torch.is_autocast_enabled(dev):
            # as QuantizedLinear: the quantized matmuls and the softmax run in fp32, only the output takes the
            # autocast dtype
            out_dtype = torch.get_autocast_dtype(dev)
            with torch.autocast(dev, enabled=False):
                y = _QuantAttentionFn.apply(q.float(), k.float(), v.float(), self, dropout_p, capture)
            return y.to(out_dtype)
        return _QuantAttentionFn.apply(q, k, v, self, dropout_p, capture)

    def extra_repr(self) -> str:
        return self.spec.short_str()


# ------------------------------------------------------------------------------------------ helpers

def _joint(qz: Quantizer | None, ts: tuple[Tensor, ...], train: bool) -> tuple[Tensor, ...]:
    """Per-tensor kinds: Q, K, V (or dQ, dK, dV) quantized as one tensor (one amax, one scale), TE's
    combine_and_quantize; returns the dequantized parts."""
    if qz is None:
        return ts
    flat = rowwise_copy(qz, torch.cat([t.reshape(-1) for t in ts]), train)
    out, i = [], 0
    for t in ts:
        out.append(flat[i:i + t.numel()].view(t.shape))
        i += t.numel()
    return tuple(out)


def _copy(qz: Quantizer | None, t: Tensor, axis: int, train: bool, shared: Tensor | None) -> Tensor:
    """The copy of t one matmul reads: high precision (no quantizer), the shared per-tensor copy, or t quantized
    along `axis` (that matmul's reduction dim)."""
    if qz is None:
        return t
    if per_tensor_quantizer(qz) and shared is not None:
        return shared
    return rowwise_copy(qz, t, train, axis=axis)


def _rot(t: Tensor, signs: Tensor | None) -> Tensor:
    return t if signs is None else apply_rht(t, signs)


def _unrot(t: Tensor, signs: Tensor | None) -> Tensor:
    """t·blockdiag(M)ᵀ along the last dim (d is a multiple of n: no padding)."""
    if signs is None:
        return t
    n = signs.numel()
    m = rht_matrix(signs, t.dtype)
    return (t.reshape(*t.shape[:-1], t.shape[-1] // n, n) @ m.t()).reshape(t.shape)


class _QuantAttentionFn(torch.autograd.Function):
    """Causal attention with the AttnSpec's quantize-dequantize points; explicit backward (module docstring)."""

    @staticmethod
    def forward(ctx, q, k, v, op: QuantizedAttention, dropout_p: float, capture):
        spec, train = op.spec, op.training
        B, H, T, d = q.shape
        c = 1.0 / math.sqrt(d)
        sq = op.had_signs if spec.hadamard == "qkv" else None
        sv = op.had_signs if spec.hadamard in ("qkv", "v") else None
        q, k, v = _rot(q, sq), _rot(k, sq), _rot(v, sv)
        qz, sz = op.q("qkv"), op.q("s")
        shared = _joint(qz, (q, k, v), train) if qz is not None and per_tensor_quantizer(qz) else (None, None, None)
        q_f = _copy(qz, q, -1, train, shared[0])                 # Q·Kᵀ reduces over d
        k_f = _copy(qz, k, -1, train, shared[1])
        v_f = _copy(qz, v, -2, train, shared[2])                 # P·V reduces over the keys
        a = (q_f @ k_f.transpose(-2, -1)) * c                    # (B, H, T, T)
        causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
        p = torch.softmax(a.masked_fill(~causal, float("-inf")), dim=-1)
        if capture is not None:
            capture.append(p.detach())                           # the high-precision probabilities
        mask, p_sm = None, p
        if dropout_p > 0.0 and train:
            mask = torch.empty_like(p).bernoulli_(1.0 - dropout_p) / (1.0 - dropout_p)
            p = p * mask
        p_f = _copy(sz, p, -1, train, None)                      # TE's S, along the keys
        o = _unrot(p_f @ v_f, sv)                                # (B, H, T, d)
        y = o.transpose(1, 2).reshape(B, T, H * d)
        y = _copy(op.q("o"), y, -1, train, None)                 # along C: c_proj's reduction dim
        ctx.op, ctx.train, ctx.c = op, train, c
        ctx.save_for_backward(q, k, v, p_sm, p, q_f, k_f, v_f, p_f, mask)
        return y

    @staticmethod
    @once_differentiable   # the quantizers run without autograd: a double backward (curvature) must fail loudly
    def backward(ctx, grad_y):
        op, train, c = ctx.op, ctx.train, ctx.c
        spec = op.spec
        q, k, v, p_sm, p, q_f, k_f, v_f, p_f, mask = ctx.saved_tensors
        B, H, T, d = q.shape
        sq = op.had_signs if spec.hadamard == "qkv" else None
        sv = op.had_signs if spec.hadamard in ("qkv", "v") else None
        qz, sz, doz, dpz = op.q("qkv"), op.q("s"), op.q("do"), op.q("dp")
        g = _rot(grad_y.reshape(B, T, H, d).transpose(1, 2), sv)             # dO in the kernel's basis
        g_once = rowwise_copy(doz, g, train) if doz is not None and per_tensor_quantizer(doz) else None
        g_d = _copy(doz, g, -1, train, g_once)                   # dO·Vᵀ reduces over d
        g_t = _copy(doz, g, -2, train, g_once)                   # Pᵀ·dO reduces over the queries
        v_d = _copy(qz, v, -1, train, v_f)
        p_t = _copy(sz, p, -2, train, p_f)
        dv = p_t.transpose(-2, -1) @ g_t
        dpp = g_d @ v_d.transpose(-2, -1)                        # dL/dP (after dropout)
        if mask is not None:
            dpp = dpp * mask
        # autograd's softmax backward, then the causal mask's (zero where masked)
        causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
        da = torch.ops.aten._softmax_backward_data(dpp, p_sm, -1, dpp.dtype).masked_fill(~causal, 0.0)
        da_once = rowwise_copy(dpz, da, train) if dpz is not None and per_tensor_quantizer(dpz) else None
        da_k = _copy(dpz, da, -1, train, da_once)                # dA·K reduces over the keys
        da_q = _copy(dpz, da, -2, train, da_once)                # dAᵀ·Q reduces over the queries
        k_t = _copy(qz, k, -2, train, k_f)
        q_t = _copy(qz, q, -2, train, q_f)
        dq = (da_k * c) @ k_t
        dk = (da_q * c).transpose(-2, -1) @ q_t
        dq, dk, dv = _unrot(dq, sq), _unrot(dk, sq), _unrot(dv, sv)
        dqz = op.q("dqkv")
        if dqz is not None and per_tensor_quantizer(dqz):
            dq, dk, dv = _joint(dqz, (dq, dk, dv), train)
        elif dqz is not None:
            dq, dk, dv = (rowwise_copy(dqz, t, train, axis=-1) for t in (dq, dk, dv))
        return dq, dk, dv, None, None, None
