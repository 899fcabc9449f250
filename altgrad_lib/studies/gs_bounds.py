"""Group-sequential boundaries: the mathematics behind seeds until resolved (sequential.py runs the looks).

  looks          n_1 = min, min + step, ..., max seeds (the last look is max); information fraction t_k = n_k / max
  spending       Lan & DeMets (1983) α-spending: "pocock" α·ln(1 + (e − 1)·t) (default: spends early, so a large
                 effect resolves at the first looks and its seeds stop there) or "obf" 2 − 2Φ(z_{1−α/2} / √t)
                 (O'Brien–Fleming-type: almost nothing before the last look)
  boundaries     the z boundaries that spend exactly α(t_k) − α(t_{k−1}) at look k under H0, by the recursive
                 numerical integration of Armitage, McPherson & Rowe (1969) (Jennison & Turnbull 2000, ch. 19):
                 the score statistic S_k has independent N(0, t_k − t_{k−1}) increments; its sub-density on the
                 continuation region is carried from look to look on a Simpson grid. Two-sided boundaries spend
                 α/2 per side (the ldbounds / gsDesign convention), one-sided ones α.
  t, not z       with 3-10 seeds the paired statistic is Student t, and carrying each z boundary's nominal p over
                 to t with df = n_k − 1 (the "significance level approach") gave 5.7-5.9 % false calls for 5 % at
                 3..8 seeds. So the bounds actually used (`nominal_bounds`) are those at which the *t* statistics
                 spend exactly α(t_k) − α(t_{k−1}) under H0: their null distribution does not depend on σ, so it is
                 simulated once (T_SIMS tables, a fixed stream: the bounds are deterministic). At large df they
                 equal the integrated z boundaries' (a test checks it); a look rejects when its paired-t p ≤ bound.
  worse/better   Holm over the table's rows with group-sequential boundaries (Maurer & Bretz 2013, "Multiple
                 testing in group sequential trials using graphical approaches"): a row is rejected when its p at
                 any of its looks is ≤ that look's two-sided bound at level α / r (r = rows not yet rejected);
                 each rejection raises the others' level, as Holm does. Family-wise false worse/better ≤ α.
  equivalent     the two one-sided TOST tests, each with one-sided boundaries at α: equivalent when TOST's p
                 (the larger of the two) is ≤ the look's one-sided bound. False "equivalent" (|gap| ≥ δ) ≤ α.

`sequential_calls` applies worse/better and equivalent to one table at every look; the verdicts and the looks
themselves are sequential.py's.
"""
from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import numpy as np
from scipy import optimize, special

from altgrad_lib.studies.paired_stats import ALPHA

SPENDING = ("pocock", "obf")
_GRID_H = 0.01        # Simpson grid step of the recursive integration, in sd units of the score at each look
_TAIL = 10.0          # one-sided boundaries: the continuation region is cut at −10 sd (mass ~1e-23)
T_SIMS, T_SEED = 400_000, 20260   # null tables simulated for the t bounds (`nominal_bounds`); MC sd of α/8 ≈ 2 %


def spend(kind: str, t: Any, alpha: float) -> np.ndarray:
    """Cumulative α spent at information fractions t (Lan & DeMets 1983): "obf" 2 − 2Φ(z_{1−α/2}/√t), "pocock"
    α·ln(1 + (e − 1)t); both equal α at t = 1."""
    t = np.clip(np.asarray(t, dtype=float), 0.0, 1.0)
    if kind == "obf":
        with np.errstate(divide="ignore"):
            return 2 * special.ndtr(-special.ndtri(1 - alpha / 2) / np.sqrt(t))
    if kind == "pocock":
        return alpha * np.log1p((math.e - 1) * t)
    raise ValueError(f"spending={kind!r} is not a spending function; valid: {list(SPENDING)}")


def _simpson(lo: float, hi: float, step: float) -> tuple[np.ndarray, np.ndarray]:
    n = max(2, int(math.ceil((hi - lo) / step)))
    n += n % 2                                           # Simpson needs an even number of intervals
    x = np.linspace(lo, hi, n + 1)
    w = np.ones(n + 1)
    w[1:-1:2], w[2:-1:2] = 4.0, 2.0
    return x, w * (hi - lo) / n / 3


def boundaries(t: Any, cum_alpha: Any, sides: int = 1) -> np.ndarray:
    """z boundaries b_k at information fractions t (increasing, in (0, 1]) such that under H0 the probability of
    first crossing at look k is cum_alpha[k] − cum_alpha[k−1]: one-sided (Z_k ≥ b_k) or two-sided symmetric
    (|Z_k| ≥ b_k, cum_alpha the total of both sides). Recursive numerical integration (module docstring); +inf
    where a look spends nothing."""
    if sides not in (1, 2):
        raise ValueError(f"sides={sides!r}; valid: 1, 2")
    t = np.asarray(t, dtype=float)
    inc = np.diff(np.concatenate([[0.0], np.asarray(cum_alpha, dtype=float)]))
    if len(t) != len(inc) or np.any(np.diff(t) <= 0) or t[0] <= 0 or t[-1] > 1 + 1e-12 or np.any(inc < 0):
        raise ValueError(f"boundaries: t {t.tolist()} must increase in (0, 1] and cum_alpha {list(cum_alpha)} must "
                         "not decrease, one per look")
    out = np.empty(len(t))
    grid = wdens = None                  # S_{k-1} grid and Simpson weight x sub-density on its continuation region
    prev = 0.0
    for k, (info, a) in enumerate(zip(t, inc)):
        sd, root = math.sqrt(info - prev), math.sqrt(info)

        def exit_p(c: float) -> float:   # P(cross at look k, not before) for boundary c
            if grid is None:
                return float(sides * special.ndtr(-c))
            p = wdens @ special.ndtr((grid - c * root) / sd)
            if sides == 2:
                p += wdens @ special.ndtr((-c * root - grid) / sd)
            return float(p)

        lo_c = 0.0 if sides == 2 else -_TAIL
        if a <= 0 or exit_p(60.0) >= a:
            out[k] = math.inf
        else:
            out[k] = optimize.brentq(lambda c: exit_p(c) - a, lo_c, 60.0, xtol=1e-12, rtol=1e-12)
        top = min(out[k], _TAIL) * root
        x, w = _simpson(-top if sides == 2 else -_TAIL * root, top, _GRID_H * root)
        if grid is None:
            dens = np.exp(-0.5 * (x / sd) ** 2) / (sd * math.sqrt(2 * math.pi))
        else:
            dens = np.exp(-0.5 * ((x[:, None] - grid[None, :]) / sd) ** 2) @ wdens / (sd * math.sqrt(2 * math.pi))
        grid, wdens, prev = x, w * dens, info
    return out


def z_nominal_bounds(looks: tuple[int, ...], n_max: int, alpha: float, spending: str, sides: int) -> np.ndarray:
    """Nominal p of each look's z boundary (`boundaries`) for a design that spends `alpha` in total (two-sided: α/2
    per side), information fraction n_k / n_max: the known-variance design, and the large-df limit of
    `nominal_bounds`."""
    t = np.asarray(looks, dtype=float) / n_max
    return sides * special.ndtr(-boundaries(t, _cum(looks, n_max, alpha, spending, sides), sides))


def _cum(looks: tuple[int, ...], n_max: int, alpha: float, spending: str, sides: int) -> np.ndarray:
    t = np.asarray(looks, dtype=float) / n_max
    return 2 * spend(spending, t, alpha / 2) if sides == 2 else spend(spending, t, alpha)


@lru_cache(maxsize=32)
def _null_p(looks: tuple[int, ...], sides: int) -> np.ndarray:
    """(T_SIMS, K) p-values of the paired t-test at each look under H0, from one fixed stream (the bounds are a
    deterministic function of the plan). Per look only the running sum and sum of squares are drawn: a block of
    j new N(0, 1) values adds B ~ N(0, j) to the sum and B²/j + χ²(j − 1) to the sum of squares, independently."""
    rng = np.random.default_rng(T_SEED)
    s = q = np.zeros(T_SIMS)
    prev, out = 0, np.empty((T_SIMS, len(looks)))
    for k, n in enumerate(looks):
        j = n - prev
        b = rng.standard_normal(T_SIMS) * math.sqrt(j)
        s, q, prev = s + b, q + b * b / j + (rng.chisquare(j - 1, T_SIMS) if j > 1 else 0.0), n
        tstat = (s / n) / np.sqrt(np.maximum(q - s * s / n, 1e-300) / (n - 1) / n)
        out[:, k] = sides * special.stdtr(n - 1, -np.abs(tstat) if sides == 2 else -tstat)
    return out


@lru_cache(maxsize=256)
def nominal_bounds(looks: tuple[int, ...], n_max: int, alpha: float, spending: str, sides: int) -> np.ndarray:
    """Nominal p bound of each look for the paired t-test (reject when the look's p ≤ it): the bounds at which the
    probability, under H0, of first crossing at look k is exactly the spending function's increment, for the t
    statistics themselves (their null distribution does not depend on σ, so it is simulated once: T_SIMS tables,
    a fixed stream). Two-sided: α/2 per side; one-sided at `alpha`; information fraction n_k / n_max. Carrying the
    z boundaries' nominal p over to t with df = n_k − 1 ("significance level approach") is not enough at 3-8 seeds:
    the t statistics of successive looks are less correlated than z's, and it gave 5.9 % false calls for 5 % (one
    row, Pocock, 3..8 seeds); tests/test_studies_sequential.py shows that, and that these bounds tend to the z
    boundaries' (`z_nominal_bounds`) at large df."""
    inc = np.diff(np.concatenate([[0.0], _cum(looks, n_max, alpha, spending, sides)]))
    p = _null_p(tuple(looks), sides)
    alive = np.ones(len(p), dtype=bool)
    out = np.zeros(len(looks))
    for k in range(len(looks)):
        count = int(round(inc[k] * len(p)))
        q = p[alive, k]
        if count >= 1 and len(q):
            out[k] = np.partition(q, count - 1)[count - 1]
            alive &= p[:, k] > out[k]
    return out


def holm_bounds(looks: tuple[int, ...], n_max: int, m: int, alpha: float = ALPHA,
                spending: str = "pocock") -> np.ndarray:
    """(m, K): row r − 1 holds the two-sided nominal p bounds of each look at Holm's level α / r."""
    return np.stack([nominal_bounds(tuple(looks), n_max, alpha / r, spending, 2) for r in range(1, max(m, 1) + 1)])


def sequential_calls(p_two: np.ndarray, p_tost: np.ndarray, bounds2: np.ndarray,
                     bound1: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The group-sequential worse/better and equivalence calls of one table (one Holm family), vectorized over
    leading axes (simulations): p_two, p_tost (..., m, K) the paired-t and TOST p of each row at each look (NaN
    where the row was not looked at), bounds2 `holm_bounds` (>= m rows), bound1 (K,) the one-sided bounds at α.
    Returns (significant, equivalent, divisor), each (..., m): divisor r is the Holm level α / r a row was
    rejected at, or the last level it was held to."""
    p_two, p_tost = np.asarray(p_two, dtype=float), np.asarray(p_tost, dtype=float)
    m = p_two.shape[-2]
    in_family = np.isfinite(p_two).any(-1)
    size = in_family.sum(-1)
    rejected = np.zeros(p_two.shape[:-1], dtype=bool)
    divisor = np.broadcast_to(np.clip(size, 1, None)[..., None], rejected.shape).copy()
    for _ in range(m):                           # Holm step-down: each rejection raises the others' level
        left = np.clip(size - rejected.sum(-1), 1, None)
        thr = bounds2[np.minimum(left, len(bounds2)) - 1]          # (..., K)
        new = (p_two <= thr[..., None, :]).any(-1) & ~rejected & in_family
        divisor = np.where(rejected, divisor, left[..., None])
        if not new.any():
            break
        rejected |= new
    return rejected, (p_tost <= np.asarray(bound1)).any(-1), divisor


__all__ = ["SPENDING", "spend", "boundaries", "z_nominal_bounds", "nominal_bounds", "holm_bounds", "sequential_calls"]
