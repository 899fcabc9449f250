"""Value transforms and unsigned formats for low-precision optimizer states (used by lowp_state.StateFormat).

Why (bench/results/state_precision.md): with round-to-nearest, Adam's v (updated by v <- 0.999 v + 0.001 g^2)
cannot decay on an 8-bit grid: a relative change of 1e-3 is far below half an ULP (E5M2: 2^-3), so v keeps
the large early values.  The transforms below change what is rounded; stochastic rounding (StateFormat's
rounding="stochastic") changes how.

Transforms (applied to a block before it is scaled and rounded; inverted after decoding):
  none    x
  sqrt    sign(x) sqrt|x|: for v, the square-root domain (the quantity Adam divides by); halves v's dynamic
          range in binades, so its relative precision doubles
  expand  COAT's dynamic range expansion (arXiv 2410.19313): per block, y = sign(x) (|x| / amax)^k with
          k = log(R_fmt) / log(R_x), R_x = amax / (smallest nonzero |x|) of the block and
          R_fmt = 2^emax / min_normal of the format, so the block's range fills the format's normal range
          (k > 1 expands a narrow block, k < 1 compresses a wide one); y is scaled by 2^emax (exact) and
          rounded.  Stored per block: amax and k (fp32), so 8 bytes per block instead of 4.  R_x = 1 (one
          distinct magnitude) or an all-zero block: k = 1.  Our choice, not from the paper: R_fmt uses the
          smallest *normal* value (below it the grid loses relative precision).

Unsigned formats for v (v >= 0 wastes the sign bit of every named format): "UE<x>M<y>" with x + y = 8 is
the generic convention of formats.FloatFormat.generic (bias 2^(x-1) - 1, subnormals, NaN at all-ones, no
inf) without a sign bit, e.g. UE5M3 (E5M2's range, one more mantissa bit) or UE4M4.
"""
from __future__ import annotations

import math
import re

import torch

from altgrad_lib.choices import STATE_TRANSFORMS as TRANSFORMS  # noqa: F401  (lowp_state imports it from here)
from altgrad_lib.numerics.formats import FloatFormat, get_format

_UNSIGNED = re.compile(r"^ue(\d)m(\d)$")
_UNSIGNED_CACHE: dict[tuple[int, int], FloatFormat] = {}


def state_format(name: str | FloatFormat) -> FloatFormat:
    """A format by name: formats.get_format's names plus the unsigned "UE<x>M<y>" (x + y = 8, x >= 1)."""
    if isinstance(name, str):
        m = _UNSIGNED.match(name.strip().lower())
        if m:
            e, mb = int(m.group(1)), int(m.group(2))
            if e < 1 or e + mb != 8:
                raise ValueError(f"format {name!r}: an unsigned state format needs x >= 1 and x + y = 8 "
                                 f"(e.g. 'UE5M3', 'UE4M4')")
            if (e, mb) not in _UNSIGNED_CACHE:      # one object per name (identity-stable, as get_format's)
                _UNSIGNED_CACHE[(e, mb)] = FloatFormat(f"UE{e}M{mb}", e, mb, 2 ** (e - 1) - 1, signed=False,
                                                       specials="fn", note="unsigned generic convention")
            return _UNSIGNED_CACHE[(e, mb)]
    return get_format(name)


def emax_pow2(fmt: FloatFormat) -> float:
    """2^emax: the largest power of two <= fmt.max."""
    return 2.0 ** (math.frexp(fmt.max)[1] - 1)


def signed_sqrt(x: torch.Tensor) -> torch.Tensor:
    return x.sign() * x.abs().sqrt()


def signed_square(y: torch.Tensor) -> torch.Tensor:
    return y * y.abs()


def expand(xb: torch.Tensor, fmt: FloatFormat) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, aux) for blocks xb (n_blocks, block): y = sign(x) (|x|/amax)^k 2^emax, aux = [amax, k] per block."""
    a = xb.abs()
    amax = a.amax(dim=1)
    amin = torch.where(a > 0, a, torch.full_like(a, math.inf)).amin(dim=1)
    log_rx = torch.where((amax > 0) & (amin < amax), (amax / amin).log(), torch.zeros_like(amax))
    log_rf = math.log(emax_pow2(fmt) / fmt.min_normal)
    k = torch.where(log_rx > 0, log_rf / log_rx.clamp_min(1e-30), torch.ones_like(amax))
    r = a / torch.where(amax > 0, amax, torch.ones_like(amax))[:, None]
    y = xb.sign() * r.pow(k[:, None]) * emax_pow2(fmt)
    return y, torch.stack([amax, k], dim=1)


def contract(q: torch.Tensor, aux: torch.Tensor, fmt: FloatFormat) -> torch.Tensor:
    """The inverse of expand on decoded values q (n_blocks, block)."""
    amax, k = aux[:, 0:1], aux[:, 1:2]
    r = (q.abs() / emax_pow2(fmt)).pow(1.0 / k)
    return q.sign() * r * amax
