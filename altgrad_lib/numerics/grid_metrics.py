"""Grid geometry of quantized weights (the stiffness view): pure functions (monitors/geometry.py's GridMonitor emits
them).

Every function takes weights w in their own units and the scale s the weight quantizer applies (the grid
point of w is Q(w·s), formats.py round-to-nearest; stochastic-rounding weights are described by their
nearest grid point). Pure tensor functions, no host sync, usable by the optimizer and notebooks:

    codes(w, fmt, s)                    uint8 code of Q(w·s) (formats.encode)
    grid_rank(w, fmt, s)                index of Q(w·s) in fmt.values() (ascending; −0 and +0 share a rank)
    rank_of_code(fmt)                   that index for every code (a lookup table)
    weight_ulp(w, fmt, s)               the stiffness S = ULP in weight units = fmt.ulp(w·s) / s
    misalignment(w, fmt, s)             |w·s − Q(w·s)| / ULP(w·s), in [0, ½] for round-to-nearest
    stall_mask / stall_rate(w0, w1, fmt, s)   |Δw·s| < ULP(w0·s)/2: the update is below half a grid step
    delta_code(w0, w1, fmt, s0, s1)     grid steps each weight moved: rank(w1) − rank(w0)
    update_lost(w0, w1, fmt, s0, s1)    ‖(Q(w1) − Q(w0)) − (w1 − w0)‖_F / ‖w1 − w0‖_F: the share of an update the
                                        forward does not see (0 = all of it; 1 = none, e.g. every |Δw·s| under half
                                        an ULP; > 1 when rounding moves weights further than the update; NaN for
                                        Δw = 0); each weight with its own step's scale, Q(w) = grid.to_grid
    delta_code_from_codes(c0, c1, fmt)  the same from known codes
    delta_code_hist(dc, max_abs)        counts for −max_abs..max_abs (the ends collect everything beyond)
    bit_names(fmt), bit_flip_fractions(c0, c1, fmt)   per code bit (MSB first: sign, e.., m..) flip fraction
    code_usage(codes, fmt)              counts per code (2**bits,); hist_entropy_bits(counts)
    capacity_use(counts, fmt)           distinct codes used / codes holding a finite value
    log2_hist(v, lo, hi)                counts of floor(log2 v) clamped to [lo, hi] (v > 0)
    window_bins(fmt)                    the log2 bins of a scaled tensor's histogram: the format's window
                                        (min subnormal .. max) and WINDOW_MARGIN binades beyond each end
    scaled_log2_hist(x, s, fmt)         counts of floor(log2 |x·s|) over window_bins(fmt): what the format sees
    hist_entropy_bits(counts)           −Σ p·log2 p
    grad_stiffness_corr(g, w, fmt, s)   Pearson correlation of log2|g| and log2 S over g ≠ 0

    unmoved_counts(q0, q1, asked)       (asked, asked and not moved): the realized stall the optimizer reports
    oscillation_sums(q0, q1, dw)        (sum|ΔQ|, sum|Δw|) of one step: TetraJet-v2's oscillation ratio over a window
    value_usage(w, fmt, s)              counts per finite grid value (ascending; ±0 one value)
    used_fraction(counts, available)    bins used / bins available (capacity_use per code or per value)

The one copy of this arithmetic: monitors/geometry.py and optim/stats.py (the optimizer's stall rate, Δcode, code
usage) calls these functions too. Two stall views on purpose: stall_rate here predicts from the master weights (the
update is below half an ULP); the optimizer's counts what happened (its update was asked and the grid value stayed).
"""
from __future__ import annotations

import math
from typing import Any

import torch

from altgrad_lib.numerics.grid import to_grid

_RANKS: dict[tuple[Any, str], torch.Tensor] = {}

def scaled_weight(w: torch.Tensor, s: Any) -> torch.Tensor:
    """w·s in fp32 (s broadcastable to w): the weight in its format's units."""
    return w.detach().float() * torch.as_tensor(s, dtype=torch.float32, device=w.device)


def codes(w: torch.Tensor, fmt: Any, s: Any = 1.0) -> torch.Tensor:
    return fmt.encode(scaled_weight(w, s))


def rank_of_code(fmt: Any, device: Any = "cpu") -> torch.Tensor:
    """(2**bits,) int64: index of each code's value in fmt.values() (NaN codes -> the rank of 0). Cached per
    (format, device): the optimizer's per-step statistics call it every step, and building it syncs."""
    key = (fmt, str(device))
    if key not in _RANKS:
        v = fmt.decode(torch.arange(2 ** fmt.bits)).double()
        vals = fmt.values()
        r = torch.searchsorted(vals, v.nan_to_num(nan=0.0, posinf=vals[-1].item(), neginf=vals[0].item()))
        _RANKS[key] = r.clamp_max(len(vals) - 1).to(device)
    return _RANKS[key]


def grid_rank(w: torch.Tensor, fmt: Any, s: Any = 1.0) -> torch.Tensor:
    return rank_of_code(fmt, w.device)[codes(w, fmt, s).long()]


def weight_ulp(w: torch.Tensor, fmt: Any, s: Any = 1.0) -> torch.Tensor:
    """The stiffness S of w: the grid spacing away from zero at w·s, in weight units (numerics/grid.stiffness is the
    optimizer's preconditioner built on the same spacing)."""
    return fmt.ulp(scaled_weight(w, s)) / torch.as_tensor(s, dtype=torch.float32, device=w.device)


def misalignment(w: torch.Tensor, fmt: Any, s: Any = 1.0) -> torch.Tensor:
    ws = scaled_weight(w, s)
    return (ws - fmt.quantize(ws)).abs() / fmt.ulp(ws)


def stall_mask(w0: torch.Tensor, w1: torch.Tensor, fmt: Any, s: Any = 1.0) -> torch.Tensor:
    return (scaled_weight(w1, s) - scaled_weight(w0, s)).abs() < fmt.ulp(scaled_weight(w0, s)) / 2


def stall_rate(w0: torch.Tensor, w1: torch.Tensor, fmt: Any, s: Any = 1.0) -> torch.Tensor:
    return stall_mask(w0, w1, fmt, s).double().mean()


def delta_code(w0: torch.Tensor, w1: torch.Tensor, fmt: Any, s0: Any = 1.0, s1: Any = 1.0) -> torch.Tensor:
    return grid_rank(w1, fmt, s1) - grid_rank(w0, fmt, s0)


def _q(w: torch.Tensor, fmt: Any, s: Any) -> torch.Tensor:
    return to_grid(w.detach().float(), fmt, torch.as_tensor(s, dtype=torch.float32, device=w.device))


def update_lost(w0: torch.Tensor, w1: torch.Tensor, fmt: Any, s0: Any = 1.0, s1: Any = 1.0) -> torch.Tensor:
    """0-d float64; the norms in float64 so a sub-ULP update's tiny difference is not lost again in the sum."""
    dw = w1.detach().double() - w0.detach().double()
    dq = _q(w1, fmt, s1).double() - _q(w0, fmt, s0).double()
    n = dw.norm()
    return torch.where(n > 0, (dq - dw).norm() / n, torch.full_like(n, float("nan")))


def delta_code_from_codes(c0: torch.Tensor, c1: torch.Tensor, fmt: Any) -> torch.Tensor:
    """delta_code when the codes are already known (rank lookup, no re-rounding)."""
    r = rank_of_code(fmt, c0.device)
    return r[c1.long()] - r[c0.long()]


def delta_code_hist(dc: torch.Tensor, max_abs: int) -> torch.Tensor:
    return torch.bincount((dc.clamp(-max_abs, max_abs) + max_abs).reshape(-1), minlength=2 * max_abs + 1)


def bit_names(fmt: Any) -> list[str]:
    sign = ["sign"] if fmt.signed else []
    return sign + [f"e{i}" for i in reversed(range(fmt.ebits))] + [f"m{i}" for i in reversed(range(fmt.mbits))]


def bit_flip_fractions(c0: torch.Tensor, c1: torch.Tensor, fmt: Any) -> torch.Tensor:
    """(bits,) fraction of codes whose bit flipped, MSB first (same order as bit_names)."""
    x = (c0.to(torch.int32) ^ c1.to(torch.int32)).reshape(-1)
    shifts = torch.arange(fmt.bits - 1, -1, -1, device=x.device, dtype=torch.int32)
    return ((x[:, None] >> shifts) & 1).double().mean(0)


def code_usage(c: torch.Tensor, fmt: Any) -> torch.Tensor:
    return torch.bincount(c.reshape(-1).long(), minlength=2 ** fmt.bits)


def hist_entropy_bits(counts: torch.Tensor) -> torch.Tensor:
    p = counts.double() / counts.sum().clamp_min(1)
    return -(p * torch.log2(torch.where(p > 0, p, 1.0))).sum()


def unmoved_counts(q0: torch.Tensor, q1: torch.Tensor, asked: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(number asked, number asked whose value did not change) as 0-d int64 tensors (no host sync)."""
    return asked.sum(), ((q1 == q0) & asked).sum()


def oscillation_sums(q0: torch.Tensor, q1: torch.Tensor, dw: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(sum |q1 - q0|, sum |dw|) as 0-d float64 tensors: the quantized weight's and the latent weight's travel in
    one step.  Their sums over a window of steps give TetraJet-v2's oscillation ratio sum|ΔQ(w)| / sum|Δw|: 1 when
    every grid move was earned by the latent update, >> 1 when the grid value flips back and forth around a
    rounding boundary while the latent weight barely moves."""
    return (q1.double() - q0.double()).abs().sum(), dw.double().abs().sum()


def value_usage(w: torch.Tensor, fmt: Any, s: Any = 1.0) -> torch.Tensor:
    """Counts per finite grid value of Q(w·s), ascending as fmt.values() (−0 and +0 are one value)."""
    return torch.bincount(grid_rank(w, fmt, s).reshape(-1), minlength=fmt.n_finite)


def used_fraction(counts: torch.Tensor, available: int) -> torch.Tensor:
    return (counts > 0).sum().double() / available


def finite_codes(fmt: Any) -> int:
    return int(torch.isfinite(fmt.decode(torch.arange(2 ** fmt.bits))).sum())


def capacity_use(counts: torch.Tensor, fmt: Any) -> torch.Tensor:
    """Codes used / codes holding a finite value (counts per code, code_usage)."""
    return used_fraction(counts, finite_codes(fmt))


def log2_hist(v: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
    """Counts of floor(log2 v) for v > 0 (finite), clamped to [lo, hi]: (hi − lo + 1,) bins."""
    v = v.reshape(-1)
    v = v[(v > 0) & torch.isfinite(v)]
    e = torch.frexp(v).exponent - 1            # exact floor(log2 v), no rounding of a log near powers of two
    return torch.bincount(e.clamp(lo, hi).long() - lo, minlength=hi - lo + 1)


WINDOW_MARGIN = 4   # binades drawn beyond the format's window on each side; the end bins hold everything further out


def window_bins(fmt: Any) -> tuple[int, int]:
    """(lo, hi): floor(log2 min_subnormal) − WINDOW_MARGIN .. floor(log2 max) + WINDOW_MARGIN. Fixed by the format
    alone (never by the data), so every step and run of one format shares its bins; a fixed [-24, 8] would cut
    E5M2's max (2^15.8) and E7M0's whole window."""
    return (math.floor(math.log2(fmt.min_subnormal)) - WINDOW_MARGIN,
            math.floor(math.log2(fmt.max)) + WINDOW_MARGIN)


def scaled_log2_hist(x: torch.Tensor, s: Any, fmt: Any) -> torch.Tensor:
    """Counts of floor(log2 |x·s|) over window_bins(fmt) (lo..hi, ends clamped), x·s in the quantizer's working
    precision (float32; float64 for a float64 x); exact zeros and non-finite values are not counted."""
    wdt = torch.float64 if x.dtype == torch.float64 else torch.float32
    xs = x.detach().to(wdt) * torch.as_tensor(s, device=x.device).detach().to(wdt)
    return log2_hist(xs.abs(), *window_bins(fmt))


def grad_stiffness_corr(g: torch.Tensor, w: torch.Tensor, fmt: Any, s: Any = 1.0) -> torch.Tensor:
    ls = torch.log2(weight_ulp(w, fmt, s).double()).reshape(-1)
    g = g.detach().double().reshape(-1)
    keep = (g != 0) & torch.isfinite(g)
    a, b = torch.log2(g[keep].abs()), ls[keep]
    a, b = a - a.mean(), b - b.mean()
    return (a @ b) / (a.norm() * b.norm())


