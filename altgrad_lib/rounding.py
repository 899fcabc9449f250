"""Rounding engine: map float tensors onto the grid of a small float format (used by formats.py).

Everything here is a pure function of a tensor plus Python constants held in `KernelParams`, so it traces
into a single fused kernel under torch.compile (no `.item()`, no data-dependent Python control flow).

Algorithm (|x| handled separately from the sign; the sign is re-attached at the end):
- normal range (|x| >= min_normal): integer arithmetic on the IEEE bit pattern of the *work* dtype
  (float32/int32, or float64/int64): add half-ULP-minus-one plus the kept lsb, then clear the dropped bits.
  This is round-to-nearest-even in the work format's binade, which is the target's binade too; a carry out
  of the mantissa correctly bumps the exponent.
- subnormal range (|x| < min_normal): scale by an exact power of two so the target's subnormal spacing
  becomes 1, round to an integer (`torch.round` is half-to-even), scale back.
- then overflow (result > max), infinities, NaN and the sign are applied per the format's conventions.

Work dtype: float32 unless the input is float64 or the format's range does not fit float32's normal range
(only e8m0fnu, min 2^-127), in which case float64 is used.  Every step is exact in the work dtype, so the
result equals infinitely-precise rounding of the *input value* (bf16/fp16 inputs are widened exactly).

Ties in formats without mantissa bits (E7M0, e8m0fnu) go to the even CODE (the exponent field's lsb), as
IEEE does for the significand's last bit.  Stochastic rounding follows gfloat's `RoundMode.Stochastic`:
the discarded fraction is first rounded-to-nearest-even to `k` bits, then the value rounds away from zero
iff fraction_k + r >= 2^k for a uniform integer r in [0, 2^k).  With the default k (23 bits for float32
work, 52 for float64) this is exactly unbiased for every input in the normal range.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

ROUNDING_MODES = ("nearest", "stochastic", "toward_zero")


@dataclass(frozen=True)
class KernelParams:
    """Python constants the kernel needs, precomputed once per format (see FloatFormat._kernel)."""

    mbits: int
    emin: int              # exponent of the smallest normal value
    max: float             # largest finite value
    min_normal: float      # 2**emin; below this the subnormal (or flush) path is used
    subnormals: bool
    specials: str          # "ieee" | "fn" | "fnuz" | "none"
    signed: bool
    has_zero: bool
    needs_f64: bool        # the format's range does not fit float32 normals
    bias: int


def _work_types(x_dtype: torch.dtype, p: KernelParams) -> tuple[torch.dtype, torch.dtype, int, int]:
    """(float dtype, same-width int dtype, mantissa bits, exponent bias) of the work format."""
    if x_dtype == torch.float64 or p.needs_f64:
        return torch.float64, torch.int64, 52, 1023
    return torch.float32, torch.int32, 23, 127


def default_sr_bits(x_dtype: torch.dtype, p: KernelParams) -> int:
    """Random bits used by stochastic rounding when sr_bits is None (full work precision)."""
    return _work_types(x_dtype, p)[2]


def random_bits(x: torch.Tensor, p: KernelParams, sr_bits: int | None, generator: torch.Generator | None) -> torch.Tensor:
    """Uniform integers in [0, 2^k) with x's shape, in the work int dtype (k = sr_bits or the default)."""
    _, idt, nman, _ = _work_types(x.dtype, p)
    k = nman if sr_bits is None else int(sr_bits)
    if not 1 <= k <= nman:
        raise ValueError(f"sr_bits={sr_bits} must be in [1, {nman}] for {x.dtype} input (None = {nman})")
    r = torch.empty(x.shape, dtype=idt, device=x.device)
    return r.random_(0, 2**k, generator=generator)


def quantize_tensor(
    x: torch.Tensor,
    p: KernelParams,
    rounding: str = "nearest",
    saturate: bool = True,
    rbits: torch.Tensor | None = None,
    sr_bits: int | None = None,
) -> torch.Tensor:
    """Round x onto the format's grid; same shape and dtype as x.

    rbits: for rounding="stochastic", uniform integers in [0, 2^k) (k = sr_bits, default full work
    precision), e.g. from `random_bits`.  Passing them explicitly makes stochastic rounding reproducible
    and testable bit-for-bit against gfloat.
    """
    if rounding not in ROUNDING_MODES:
        raise ValueError(f"rounding={rounding!r} is not one of {ROUNDING_MODES}")
    if not x.is_floating_point():
        raise TypeError(f"quantize expects a floating-point tensor, got {x.dtype}")
    out_dtype = x.dtype
    wdt, idt, nman, wbias = _work_types(out_dtype, p)
    xw = x.to(wdt)
    ax = xw.abs()
    shift = nman - p.mbits                      # work-format mantissa bits dropped in the normal range
    keep_mask = -(1 << shift)                   # ...11100..0 : clears the dropped bits
    # NaN bit patterns are clamped to +inf so the integer add below cannot overflow; NaN is restored last.
    a = ax.view(idt).clamp_max(_inf_bits(idt))

    # ---- normal range: integer RNE / truncation / stochastic on the bit pattern ----
    if rounding == "nearest":
        lsb = (a >> shift) & 1
        if p.mbits == 0 and (wbias - p.bias) % 2 == 1:
            lsb = lsb ^ 1                       # the format's code parity is the opposite of the work exponent's
        r_int = (a + ((1 << (shift - 1)) - 1) + lsb) & keep_mask
    elif rounding == "toward_zero":
        r_int = a & keep_mask
    else:
        if rbits is None:
            raise ValueError("stochastic rounding needs rbits (see random_bits)")
        k = nman if sr_bits is None else int(sr_bits)
        rbits = rbits.to(idt)
        if k >= shift:
            r_int = (a + (rbits >> (k - shift))) & keep_mask
        else:
            s2 = shift - k                      # first round the fraction to k bits (RNE), then add k random bits
            a1 = (a + ((1 << (s2 - 1)) - 1) + ((a >> s2) & 1)) & -(1 << s2)
            r_int = (a1 + (rbits << s2)) & keep_mask
    r_norm = r_int.view(wdt)

    # ---- subnormal range ----
    if p.subnormals:
        up = 2.0 ** (p.mbits - p.emin)          # exact power of two: subnormal spacing -> 1
        y = ax * up
        if rounding == "nearest":
            q = torch.round(y)
        elif rounding == "toward_zero":
            q = torch.floor(y)
        else:
            k = nman if sr_bits is None else int(sr_bits)
            fl = torch.floor(y)
            d = torch.round((y - fl) * (2.0**k))   # fraction RNE'd to k bits (exact ops)
            q = fl + ((d + rbits.to(wdt)) >= 2.0**k).to(wdt)
        r_sub = q * (1.0 / up)
        res = torch.where(ax < p.min_normal, r_sub, r_norm)
    else:
        # no subnormals means no zero either (e8m0fnu): the smallest value is the only candidate below it
        res = torch.where(ax < p.min_normal, torch.full_like(ax, p.min_normal), r_norm)

    # ---- overflow and infinities ----
    sat = saturate or p.specials == "none" or rounding == "toward_zero"
    if p.specials == "ieee":
        finite_over = (res > p.max) & (ax != math.inf)
        if sat:
            res = torch.where(finite_over, p.max, res)          # +-inf inputs stay +-inf (representable)
        else:
            res = torch.where(finite_over, math.inf, res)
    else:
        if saturate or p.specials == "none":
            res = res.clamp_max(p.max)                          # finite overflow and inf -> max
        else:
            if rounding == "toward_zero":
                res = torch.where((res > p.max) & (ax != math.inf), p.max, res)
            res = torch.where(res > p.max, math.nan, res)       # no inf code: overflow -> NaN

    # ---- sign, zero conventions, NaN ----
    if p.signed:
        res = torch.copysign(res, xw)
        if p.specials == "fnuz":
            res = torch.where(res == 0, 0.0, res)               # no -0 code
    else:
        # unsigned (e8m0fnu): negative values and zero are not representable -> NaN (as ml_dtypes)
        res = torch.where(xw > 0, res, math.nan)
    res = torch.where(torch.isnan(xw), math.nan, res)
    return res.to(out_dtype)


def _inf_bits(idt: torch.dtype) -> int:
    return 0x7F800000 if idt == torch.int32 else 0x7FF0000000000000
