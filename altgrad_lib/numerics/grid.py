"""The grid an optimizer sees for one weight tensor: a format scaled by a fixed per-tensor power of two.

A weight tensor W of a quantized layer lives on `grid(fmt) * 2^-k`: the format's values divided by a power of
two chosen once, from W's first amax (`grid_exp`). A power of two keeps the grid's shape exact (it only shifts
the binades) and makes `quantize(w * 2^k) / 2^k` exact in fp32, so "on the grid" is a bitwise property:
`fmt.quantize(p * s) == p * s` with s = 2^k. k leaves `headroom` binades above the initial amax so weights can
grow before they saturate (E1M6 has a single binade width of levels, so for it k sets the resolution).

ULP and stiffness (design decisions, tested in tests/test_optim_grid.py):
- `step_ulp(w, delta_sign, fmt, s, mode)`: the spacing *in the direction the weight moves*. At a binade's lower
  edge (|w| a power of two in the normal range) the gap toward zero is half the gap away from zero, so a
  one-ULP step toward zero uses the down-ULP and lands on the neighbouring code instead of two codes away.
  mode "step" (default) = that rule; "up" / "down" / "mean" are the alternatives an ablation can pick.
- zero and subnormals: the fixed subnormal spacing (formats.ulp clamps exponents to [emin, emax]), so a weight
  at 0 moves k * min_subnormal: k codes away from zero.  The top binade's spacing is used at and above max.
- the seed's formula ("mantissa"): S = 2^(floor(log2|w|) - M) with no exponent clamp: 0 at w = 0 (a zero weight
  never moves), too small in the subnormal range.  Kept as an ablation; "ulp" is the exponent-aware form.
- damping: S + delta (absolute, in weight units), for both kinds.

`code_index` gives every finite grid value its signed ordinal (0 at zero, neighbours differ by 1), used to count
codes moved (diagnostics.py) and in tests.
"""
from __future__ import annotations

import math

import torch

from altgrad_lib.choices import STIFFNESS_KINDS, ULP_MODES
from altgrad_lib.numerics.formats import FloatFormat, get_format



def grid_exp(w: torch.Tensor, fmt: FloatFormat | str, headroom: int = 1) -> int:
    """k such that amax(w) * 2^k lies in [max / 2^(headroom+1), max / 2^headroom]; 0 for an all-zero tensor.

    BF16 (16 bits, fp32's 8 exponent bits): always 0, the plain bf16 grid as torch's cast and torchao store it; a
    power of two cannot widen fp32's own range, and k would exceed grid_scale's [-126, 126] for any |w| < 1."""
    fmt = get_format(fmt)
    if fmt.bits > 8 and fmt.ebits >= 8:
        return 0
    amax = float(w.detach().abs().max()) if w.numel() else 0.0
    if amax == 0 or not math.isfinite(amax):
        return 0
    return int(math.floor(math.log2(fmt.max / amax))) - int(headroom)


def grid_scale(k: int) -> torch.Tensor:
    """2^k as a 0-d fp32 tensor (exact for |k| <= 126)."""
    if not -126 <= k <= 126:
        raise ValueError(f"grid exponent k={k} outside [-126, 126]: 2^k is not an fp32 normal")
    return torch.tensor(2.0**k, dtype=torch.float32)


def to_grid(x: torch.Tensor, fmt: FloatFormat, s: torch.Tensor, rbits: torch.Tensor | None = None,
            sr_bits: int | None = None) -> torch.Tensor:
    """Round x onto grid(fmt) / s: nearest-even, or stochastic with the caller's random integers rbits."""
    xs = x * s
    q = fmt.quantize(xs) if rbits is None else fmt.quantize_with_bits(xs, rbits, sr_bits)
    return q / s


def _exp_field(x32: torch.Tensor) -> torch.Tensor:   # used by mantissa_stiffness
    """floor(log2|x|) of fp32 x from its bit pattern (int32; -127 for 0 and fp32 subnormals, 128 for inf/NaN)."""
    return ((x32.view(torch.int32) >> 23) & 0xFF) - 127


def fast_ulp(xs: torch.Tensor, fmt: FloatFormat, direction: str = "up",
             toward_zero: torch.Tensor | None = None) -> torch.Tensor:
    """formats.ulp(xs, direction) for fp32 xs, on the bit pattern (about 10x faster than frexp + ldexp on CPU).

    direction "step": "down" where `toward_zero`, else "up", in one pass.  Equal to fmt.ulp bitwise for every
    non-NaN input (tests/test_optim_grid.py); NaN gives the top spacing.  Falls back to fmt.ulp when a spacing
    of the format is not an fp32 normal (e.g. e8m0fnu)."""
    lo, hi = fmt.emin, max(fmt.emax, fmt.emin)
    if xs.dtype != torch.float32 or lo - fmt.mbits + 127 < 1 or hi - fmt.mbits + 127 > 254:
        if direction == "step":
            return torch.where(toward_zero, fmt.ulp(xs, "down"), fmt.ulp(xs, "up"))
        return fmt.ulp(xs, direction)
    bits = xs.view(torch.int32)
    e = ((bits >> 23) & 0xFF) - 127                  # floor(log2|x|); -127 for 0 / fp32 subnormals, 128 inf/NaN
    if direction != "up":                            # on a power of two the gap below is one binade lower
        pow2 = (bits & 0x7FFFFF) == 0
        e = e - (pow2 if direction == "down" else pow2 & toward_zero).to(torch.int32)
    return ((e.clamp(lo, hi) - fmt.mbits + 127) << 23).view(torch.float32)


def step_ulp(w: torch.Tensor, toward_zero: torch.Tensor | None, fmt: FloatFormat, s: torch.Tensor,
             mode: str = "step") -> torch.Tensor:
    """Grid spacing at w in weight units; `toward_zero` (bool, w's shape) says where the step shrinks |w|."""
    ws = w * s
    if mode == "up":
        sp = fast_ulp(ws, fmt, "up")
    elif mode == "down":
        sp = fast_ulp(ws, fmt, "down")
    elif mode == "mean":
        sp = 0.5 * (fast_ulp(ws, fmt, "up") + fast_ulp(ws, fmt, "down"))
    elif mode == "step":
        sp = fast_ulp(ws, fmt, "step", toward_zero)
    else:
        raise ValueError(f"ulp_mode={mode!r} is invalid; valid choices: {ULP_MODES}")
    return sp / s


def mantissa_stiffness(w: torch.Tensor, fmt: FloatFormat, s: torch.Tensor) -> torch.Tensor:
    """The seed's S = 2^(floor(log2|w|) - M) (no exponent clamp; 0 at w = 0), in weight units."""
    ws = (w * s).abs().float()
    biased = _exp_field(ws) - fmt.mbits + 127
    sp = (biased.clamp(1, 254) << 23).view(torch.float32)
    return torch.where((ws == 0) | (biased < 1), torch.zeros_like(ws), sp) / s   # below fp32's normals: 0


def stiffness(w: torch.Tensor, fmt: FloatFormat, s: torch.Tensor, kind: str = "ulp", damping: float = 0.0,
              toward_zero: torch.Tensor | None = None, ulp_mode: str = "up") -> torch.Tensor:
    """S(w) per STIFFNESS_KINDS plus damping; kind "ulp" uses step_ulp with ulp_mode."""
    if kind == "ulp":
        S = step_ulp(w, toward_zero, fmt, s, ulp_mode)
    elif kind == "mantissa":
        S = mantissa_stiffness(w, fmt, s)
    else:
        raise ValueError(f"stiffness={kind!r} is invalid; valid choices: {STIFFNESS_KINDS}")
    return S + damping if damping else S


def code_index(q: torch.Tensor, fmt: FloatFormat | str, s: torch.Tensor | float = 1.0) -> torch.Tensor:
    """Signed ordinal (int64) of grid values q (on grid(fmt)/s): 0 at +-0, +-1 at +-min_subnormal, ...

    Values off the grid get the ordinal of the next grid value at or above |q| (callers quantize first)."""
    fmt = get_format(fmt)
    mag = (q.detach().double() * (s.double() if torch.is_tensor(s) else s)).abs()
    vals = fmt.values().to(mag.device)
    nonneg = vals[vals >= 0]                        # 0 (if the format has it) and the positive values, ascending
    idx = torch.searchsorted(nonneg, mag.clamp_max(float(nonneg[-1])))
    if not fmt.has_zero:
        idx = idx + 1                               # no zero code: the smallest value is ordinal 1
    return torch.where(q < 0, -idx, idx)
