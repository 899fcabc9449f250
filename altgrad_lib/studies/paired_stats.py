"""The statistics a claims table is built of (studies/claims.py), on paired-by-seed differences d = variant − baseline:
the exact sign-flip p, Holm's step-down adjustment, TOST, the paired t-test's power and minimum detectable effect
(with the upper confidence bound of the sd), one row's numbers (paired_row) and the paired-t CI at any level (ci_at).
What each column means and the verdict rules: claims.py's docstring.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from altgrad_lib.studies.stats import welch

ALPHA = 0.05
POWER = 0.80
SD_CONFIDENCE = 0.80           # the MDE uses this one-sided upper confidence bound of the paired sd
PERM_MAX_N = 16                # exact sign-flip p up to 2^16 patterns; NaN above


def sign_flip_p(d: Sequence[float], max_n: int = PERM_MAX_N) -> float:
    """Exact two-sided sign-flip permutation p of mean(d) = 0: the share of the 2ⁿ sign patterns s with
    |mean(s·d)| ≥ |mean(d)| (the observed pattern included). NaN for n < 1 or n > max_n."""
    d = np.asarray(d, dtype=float)
    n = len(d)
    if n < 1 or n > max_n:
        return math.nan
    signs = 1 - 2 * ((np.arange(2**n)[:, None] >> np.arange(n)) & 1)   # (2^n, n) every ± pattern
    stat = np.abs(signs @ d)
    return float(np.mean(stat >= abs(d.sum()) * (1 - 1e-12)))       # relative slack: ties by float rounding count


def holm(p: Sequence[float]) -> np.ndarray:
    """Holm's step-down adjusted p-values (family-wise error ≤ α); NaN entries stay NaN and are not counted."""
    p = np.asarray(p, dtype=float)
    out = np.full(len(p), math.nan)
    ok = np.flatnonzero(np.isfinite(p))
    m = len(ok)
    running = 0.0
    for rank, i in enumerate(ok[np.argsort(p[ok], kind="stable")]):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out


def tost_p(d: Sequence[float], delta: float) -> float:
    """TOST p of |mean(d)| < delta: the larger of the one-sided paired t-tests mean(d) > −δ and mean(d) < +δ."""
    from scipy import stats

    d = np.asarray(d, dtype=float)
    if len(d) < 2 or not delta > 0:
        return math.nan
    if d.std(ddof=1) == 0:                       # no noise: the mean is the truth
        return 0.0 if abs(d.mean()) < delta else 1.0
    lo = stats.ttest_1samp(d, -delta, alternative="greater").pvalue
    hi = stats.ttest_1samp(d, delta, alternative="less").pvalue
    return float(max(lo, hi))


def power_paired(effect: float, n: int, sd: float, alpha: float = ALPHA) -> float:
    """Power of the two-sided paired t-test at α to detect a true mean difference `effect` (noncentral t)."""
    from scipy import integrate, stats

    df = n - 1
    tc = float(stats.t.ppf(1 - alpha / 2, df))
    nc = effect * math.sqrt(n) / sd
    p = float(stats.nct.sf(tc, df, nc) + stats.nct.cdf(-tc, df, nc))
    if math.isfinite(p):
        return p
    # scipy's nct returns NaN for df = 1 and a large nc: P(|Z + nc| > tc·√(V/df)), V ~ χ²(df), integrated over V
    log_norm = -(df / 2) * math.log(2) - math.lgamma(df / 2)

    def given(v: float) -> float:
        if v <= 0:
            return 0.0
        s = tc * math.sqrt(v / df)
        tails = 0.5 * math.erfc((s - nc) / math.sqrt(2)) + 0.5 * math.erfc((s + nc) / math.sqrt(2))
        return tails * math.exp(log_norm + (df / 2 - 1) * math.log(v) - v / 2)

    return float(integrate.quad(given, 0, math.inf, limit=200)[0])


def mde(n: int, sd: float, alpha: float = ALPHA, power: float = POWER) -> float:
    """Smallest true |mean difference| the two-sided paired t-test at α detects with `power`, for n pairs of
    difference sd `sd` (same unit as sd). NaN for n < 2 or a non-finite sd; 0 when sd is 0."""
    from scipy import optimize

    if n < 2 or not math.isfinite(sd):
        return math.nan
    if sd == 0:
        return 0.0
    hi = sd
    while power_paired(hi, n, sd, alpha) < power:
        hi *= 2
    return float(optimize.brentq(lambda e: power_paired(e, n, sd, alpha) - power, 0.0, hi, xtol=1e-10 * sd))


def sd_upper(sd: float, n: int, confidence: float = SD_CONFIDENCE) -> float:
    """One-sided upper confidence bound of a normal sd from its sample sd over n values: sd·√((n−1)/χ²_{1−c, n−1})
    ((n−1)s²/σ² ~ χ²(n−1)); NaN for n < 2."""
    from scipy import stats

    if n < 2 or not math.isfinite(sd):
        return math.nan
    return float(sd * math.sqrt((n - 1) / stats.chi2.ppf(1 - confidence, n - 1)))


def verdict_mde(n: int, sd: float, m: int = 1, alpha: float = ALPHA, power: float = POWER) -> float:
    """The MDE the verdict can be held to: `mde` of the two-sided paired t at α/m (m rows in the Holm family;
    conservative, Holm rejects whenever this Bonferroni test does) with sd = sd_upper(sd, n) (80 % UCB).

    Why a UCB and not an sd pooled over the rows: the rows of one table differ in noise by an order of magnitude
    (a 4-bit recipe against an 8-bit one), so a pooled sd would understate the MDE of the noisy rows; the UCB keeps
    each row's own sd and pays for its uncertainty (×2.1 at 3 seeds, ×1.6 at 5)."""
    return mde(n, sd_upper(sd, n), alpha / max(1, m), power)


def paired_row(variant: Sequence[float], baseline: Sequence[float], delta: float = math.nan,
               alpha: float = ALPHA, power: float = POWER, lower_is_better: bool = True) -> dict[str, Any]:
    """Statistics of one comparison from values aligned by seed (the pairs: no diverged seed): the columns of the
    module docstring from n to mde_nats (p_holm and the verdict-level CI excepted, they need the whole table; the
    MDE here is that of a lone row, m = 1)."""
    from scipy import stats

    v, b = np.asarray(variant, dtype=float), np.asarray(baseline, dtype=float)
    d = v - b
    n = len(d)
    row: dict[str, Any] = {"n": n, "mean": float(v.mean()) if n else math.nan,
                           "mean_baseline": float(b.mean()) if n else math.nan,
                           "gap_nats": float(d.mean()) if n else math.nan}
    sd = float(d.std(ddof=1)) if n >= 2 else math.nan
    se = sd / math.sqrt(n) if n >= 2 else math.nan
    half = float(stats.t.ppf(0.975, n - 1) * se) if n >= 2 else math.nan
    row.update(gap_lo=row["gap_nats"] - half, gap_hi=row["gap_nats"] + half, sd_nats=sd)
    row["p_paired"] = float(stats.ttest_rel(v, b).pvalue) if n >= 2 and sd > 0 else math.nan
    row["p_perm"] = sign_flip_p(d)
    worse = int((d > 0).sum()) if lower_is_better else int((d < 0).sum())
    better = int((d < 0).sum()) if lower_is_better else int((d > 0).sum())
    row["signs"] = (f"worse in {worse}/{n}" if worse >= better else f"better in {better}/{n}") if n else ""
    row["p_welch"] = welch(v, b)["p"]
    row["delta_nats"] = delta
    row["p_tost"] = tost_p(d, delta)
    half90 = float(stats.t.ppf(1 - alpha, n - 1) * se) if n >= 2 else math.nan   # TOST's 1 − 2α CI
    row["equiv_bound"] = abs(row["gap_nats"]) + half90
    row["mde_nats"] = verdict_mde(n, sd, 1, alpha, power)
    return row


def ci_at(gap: Any, sd: Any, n: Any, level: Any) -> tuple[np.ndarray, np.ndarray]:
    """Paired-t CI gap ± t_{(1+level)/2, n−1} · sd/√n at `level` (arrays or scalars; NaN where n < 2)."""
    from scipy import stats

    gap, sd, n, level = (np.asarray(x, dtype=float) for x in (gap, sd, n, level))
    with np.errstate(invalid="ignore"):
        half = np.where(n >= 2, stats.t.ppf(0.5 + level / 2, np.maximum(n - 1, 1)) * sd / np.sqrt(np.maximum(n, 1)),
                        math.nan)
    return gap - half, gap + half


__all__ = ["ALPHA", "POWER", "SD_CONFIDENCE", "PERM_MAX_N", "sign_flip_p", "holm", "tost_p", "power_paired", "mde",
           "sd_upper", "verdict_mde", "paired_row", "ci_at"]
