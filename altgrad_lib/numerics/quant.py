"""Fake quantization of a QuantSpec (quant_spec.py): the differentiable fake_quant (straight-through estimators) and
the scale -> quantize -> unscale it shares with the stateful Quantizer (quantizer.py): qdq, FakeQuantFn,
StraightThrough; sqnr_db, the error measure of a quantized copy.

A fake-quantized tensor is `Q(x * s) / s` in the input dtype, where `s` comes from scaling.py and `Q` is the
format's rounding (formats.py). Gradients use a straight-through estimator (STE):
- "identity": dQ/dx = 1 everywhere;
- "clipped":  dQ/dx = 1 where |x*s| <= fmt.max, 0 where the input saturated.

One autograd.Function does scale -> quantize -> unscale and saves only the saturation mask (clipped STE) or
nothing (identity STE). Everything is free of host syncs.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from altgrad_lib.numerics.block_scaling import STORES_IN_KERNEL, BlockScaling, stored_in_kernel, block_qdq
from altgrad_lib.numerics.quant_spec import QuantSpec
from altgrad_lib.numerics.rounding import random_bits
from altgrad_lib.numerics.scaling import Scaler, stateless_scale


def sqnr_db(ref: Tensor, approx: Tensor) -> float:
    """Signal-to-quantization-noise ratio in dB, 10·log10(Σref² / Σ(ref − approx)²), in float64; +inf when
    identical, -inf for an all-zero reference. Each 6.02 dB is one bit of agreement."""
    ref, approx = ref.detach().double(), approx.detach().double()
    noise = float((ref - approx).pow(2).sum())
    signal = float(ref.pow(2).sum())
    if noise == 0:
        return math.inf
    return 10 * math.log10(signal / noise) if signal > 0 else -math.inf


# ----------------------------------------------------------------------------------------------------------
# Numerics


def qdq(x: Tensor, s: Tensor, spec: QuantSpec, generator, want_mask: bool, want_stats: bool,
         rbits: Tensor | None = None):
    """Scale -> quantize -> unscale. Returns (y, saturation mask | None, n_saturated, n_underflow).

    Stochastic rounding uses `rbits` when given (pre-drawn, see quantizer._sr_random_bits), else draws from `generator`.
    """
    cdt = torch.float64 if x.dtype == torch.float64 else torch.float32
    xs = x.detach().to(cdt) * s
    if rbits is not None:
        q = spec.fmt.quantize_with_bits(xs, rbits, sr_bits=spec.sr_bits, saturate=spec.saturate)
    else:
        q = spec.fmt.quantize(
            xs, rounding=spec.rounding, saturate=spec.saturate, generator=generator, sr_bits=spec.sr_bits
        )
    y = q / s
    if y.dtype != x.dtype:   # never a no-op .to(): see FakeQuantFn (torch 2.11 compiled zero-gradient bug)
        y = y.to(x.dtype)
    over = xs.abs() > spec.fmt.kernel.max if (want_mask or want_stats) else None
    if want_stats:
        n_sat = over.sum()
        under = (xs != 0) & (q == 0)
        if STORES_IN_KERNEL and torch.compiler.is_compiling():
            # Inside a compiled model y's consumer is a GEMM: inductor stored y there, after the counts (and sorted
            # it next to the GEMM for memory), so the counts took a pass of their own over x that recomputed x's
            # producer (a GELU's erf) and the rounding. Stored here and read by the count, y comes first and shares
            # one loop with the counts (what that saves a step: bench/results/train_step.md). Same counts: y == y is
            # False only where y is NaN, i.e. q is, where q == 0 is already.
            y = stored_in_kernel(y)
            under = under & (y == y)
        n_under = under.sum()
    else:
        n_sat = n_under = None
    return y, over, n_sat, n_under


def add_counts(n_elements: Tensor, n_saturated: Tensor, n_underflow: Tensor, numel: int, n_sat: Tensor,
               n_under: Tensor) -> None:
    """A Quantizer's counters after a call of qdq with want_stats (its n_sat, n_under), in place: never `+=`, which
    re-assigns a module's buffer (Module.__setattr__), a side effect torch.compile cannot keep inside an
    autograd.Function (a graph break and a re-trace per weight shape in every GEMM-faithful layer). kernels.py's
    compiled kernels trace it with the counters as their inputs."""
    n_elements.add_(numel)
    n_saturated.add_(n_sat)
    n_underflow.add_(n_under)


class FakeQuantFn(torch.autograd.Function):
    """y = Q(x*s)/s with a straight-through gradient (identity, or masked where |x*s| > fmax)."""

    @staticmethod
    def forward(ctx, x, s, spec, generator, want_stats, rbits=None):
        clipped = spec.ste == "clipped"
        y, over, n_sat, n_under = qdq(x, s, spec, generator, clipped, want_stats, rbits)
        ctx.clipped = clipped
        if clipped:
            ctx.save_for_backward(over)
        if not want_stats:
            # Two distinct tensors: returning one tensor object twice makes dynamo map both outputs to one
            # backward input ("Placeholder node not found in env" when compiling with backward).
            n_sat = torch.zeros((), dtype=torch.int64, device=x.device)
            n_under = torch.zeros((), dtype=torch.int64, device=x.device)
        ctx.mark_non_differentiable(n_sat, n_under)
        return y, n_sat, n_under

    @staticmethod
    def backward(ctx, grad_y, _g_sat, _g_under):
        if ctx.clipped:
            (over,) = ctx.saved_tensors
            grad_x = grad_y.masked_fill(over, 0.0)
        else:
            grad_x = grad_y
        return grad_x, None, None, None, None, None


class StraightThrough(torch.autograd.Function):
    """Returns the precomputed y; the gradient reaches x unchanged (identity STE of block kinds)."""

    @staticmethod
    def forward(ctx, x, y):
        return y

    @staticmethod
    def backward(ctx, grad_y):
        return grad_y, None


class ClippedStraightThrough(torch.autograd.Function):
    """Returns the precomputed y; the gradient is zeroed where `over` (|x*s| > fmax): FakeQuantFn's clipped STE
    for a y computed elsewhere (kernels.py's compiled kernels)."""

    @staticmethod
    def forward(ctx, x, y, over):
        ctx.save_for_backward(over)
        return y

    @staticmethod
    def backward(ctx, grad_y):
        (over,) = ctx.saved_tensors
        return grad_y.masked_fill(over, 0.0), None, None


def fake_quant(x: Tensor, spec: QuantSpec | dict | str, scaler: Scaler | None = None, generator=None) -> Tensor:
    """Differentiable fake quantization Q(x*s)/s with the STE of `spec`.

    Without a scaler the scale is computed statelessly (none/current/per_row; delayed raises).
    `generator` feeds stochastic rounding (None = torch's global RNG).
    """
    if not isinstance(spec, QuantSpec):
        spec = QuantSpec.from_dict(spec)  # a format name or a YAML-style dict
    if isinstance(spec.scaling, BlockScaling):
        bits = None if generator is None else (lambda t: random_bits(t, spec.fmt.kernel, spec.sr_bits, generator))
        y, _, _ = block_qdq(x, spec.fmt, spec.scaling, spec.rounding, bits, spec.sr_bits)
        return StraightThrough.apply(x, y)
    if scaler is None:
        s, _ = stateless_scale(x, spec.fmt, spec.scaling)
    else:
        s = scaler.scale_for(x)
    y, _, _ = FakeQuantFn.apply(x, s, spec, generator, False)
    return y
