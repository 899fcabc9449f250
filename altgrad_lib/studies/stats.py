"""Study statistics primitives and the frozen-blocks control rule.

The claims tables themselves (paired by seed: verdicts) are `studies/claims.py`, their row statistics (Holm, TOST,
MDE) `studies/paired_stats.py`; this module keeps what they and the notebooks build on:

  - mean_ci: mean ± 95 % CI (Student t with n − 1 degrees of freedom: mean ± t₀.₉₇₅ · s / √n),
  - welch: Welch's unpaired t-test (scipy.stats.ttest_ind(equal_var=False)) with the 95 % CI of the difference,
    the claims tables' secondary column,
  - hedges_g: Cohen's d with the pooled SD, times J = 1 − 3 / (4 (n₁ + n₂) − 9) (small-sample bias correction),
  - the frozen-blocks control (`control_table`, `control_verdict`, `assert_beats_control`): a format's loss gap
    against the baseline means something only if the baseline itself learned more than the embeddings can. The
    *frozen-blocks control* (TrainConfig.freeze_blocks) trains the same model with every transformer block frozen,
    so only the embeddings, the final LayerNorm and the (tied) lm_head learn. `control_table` reads notebook-02-style
    run labels "<variant> s<seed>"; claims.control_check does the same on a tidy frame with int seeds.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import pandas as pd

def mean_ci(x: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """(mean, half-width) of the Student-t confidence interval; half-width NaN with fewer than 2 values."""
    from scipy import stats

    a = np.asarray(x, dtype=float)
    if len(a) == 0:
        return math.nan, math.nan
    if len(a) < 2:
        return float(a.mean()), math.nan
    t = stats.t.ppf(0.5 + confidence / 2, len(a) - 1)
    return float(a.mean()), float(t * a.std(ddof=1) / math.sqrt(len(a)))


def hedges_g(a: Sequence[float], b: Sequence[float]) -> float:
    """Hedges' g of a against b: (mean a − mean b) / pooled SD, times the small-sample correction J."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    na, nb = len(a), len(b)
    if na < 2 or nb < 2:
        return math.nan
    sp = math.sqrt(((na - 1) * a.var(ddof=1) + (nb - 1) * b.var(ddof=1)) / (na + nb - 2))
    if sp == 0:
        return math.nan if a.mean() == b.mean() else math.copysign(math.inf, a.mean() - b.mean())
    return float((a.mean() - b.mean()) / sp * (1 - 3 / (4 * (na + nb) - 9)))


def welch(a: Sequence[float], b: Sequence[float]) -> dict[str, float]:
    """Welch's t-test of a vs b: t, Welch–Satterthwaite df, two-sided p, and the 95 % CI of mean a − mean b."""
    from scipy import stats

    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    nan = {"t": math.nan, "df": math.nan, "p": math.nan, "diff": math.nan, "diff_lo": math.nan, "diff_hi": math.nan}
    if len(a) < 2 or len(b) < 2:
        return {**nan, "diff": float(a.mean() - b.mean()) if len(a) and len(b) else math.nan}
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    diff = float(a.mean() - b.mean())
    if va + vb == 0:  # identical constant samples: no noise at all, the test is undefined
        return {**nan, "diff": diff}
    res = stats.ttest_ind(a, b, equal_var=False)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = float(stats.t.ppf(0.975, df) * math.sqrt(va + vb))
    return {"t": float(res.statistic), "df": float(df), "p": float(res.pvalue), "diff": diff,
            "diff_lo": diff - half, "diff_hi": diff + half}


# ----------------------------------------------------------------------------------------------
# the frozen-blocks control and per-seed gaps

MIN_MARGIN_NATS = 0.1   # smallest control-minus-baseline val loss we call a clear win (nats/token)


def _per_seed(summary: pd.DataFrame, variant: str, value: str) -> pd.Series:
    rows = summary[summary.run.str.fullmatch(rf"{variant} s\d+")]
    if rows.empty:
        raise ValueError(f"no runs labelled '{variant} s<seed>' in the summary; labels: {list(summary.run)}")
    return pd.Series(rows[value].to_numpy(), index=rows.run.str.extract(r" s(\d+)$")[0].astype(int).to_numpy(),
                     name=variant)


def control_table(summary: pd.DataFrame, baseline: str, control: str,
                  value: str = "final_val_loss") -> pd.DataFrame:
    """Per seed: the baseline's and the control's final val loss and margin = control − baseline (nats)."""
    b, c = _per_seed(summary, baseline, value), _per_seed(summary, control, value)
    df = pd.DataFrame({"baseline": b, "control": c}).rename_axis("seed")
    df["margin"] = df.control - df.baseline
    return df


def control_verdict(table: pd.DataFrame, min_margin: float = MIN_MARGIN_NATS,
                    entropy: float | None = None) -> tuple[bool, str]:
    """(clear, sentence): the baseline beats the control in every seed by >= max(min_margin, 3 σ_seed) and, when
    `entropy` (the unigram entropy of the evaluation tokens, nats) is given, its loss is below it in every seed.

    σ_seed is the seed-to-seed standard deviation of the baseline's loss (0 with one seed), so a margin
    that seed noise alone could produce never counts as clear. A model above the unigram entropy has not learned
    even the token frequencies: beating a control that is worse still says nothing about its blocks.
    """
    if table.empty:
        return False, "no seed has both a baseline and a frozen-blocks control run"
    if table[["baseline", "control"]].isna().any().any():
        return False, "a baseline or control run has no final val loss (diverged or unfinished)"
    sd = float(table.baseline.std(ddof=1)) if len(table) > 1 else 0.0
    need = max(min_margin, 3 * sd)
    worst = float(table.margin.min())
    above = entropy is not None and math.isfinite(entropy) and float(table.baseline.max()) >= entropy
    clear = math.isfinite(worst) and worst >= need and not above
    # "unigram entropy of the val split": the one name of this number (notebook/names.py TERMS), never "the entropy"
    unigram = (f"; its loss {float(table.baseline.max()):.3f} is {'NOT ' if above else ''}below the unigram entropy "
               f"of the val split ({entropy:.3f} nats)" if entropy is not None and math.isfinite(entropy) else "")
    return clear, (f"baseline beats the frozen-blocks control by {worst:.3f} nats in the worst of {len(table)} "
                   f"seed(s) (needed >= {need:.3f} = max({min_margin}, 3 x seed sd {sd:.3f}){unigram}: "
                   f"{'clear' if clear else 'NOT clear — lengthen or resize the profile before reading gaps'}")


def assert_beats_control(table: pd.DataFrame, min_margin: float = MIN_MARGIN_NATS) -> str:
    """control_verdict, raising AssertionError unless the win is clear; returns the sentence."""
    clear, sentence = control_verdict(table, min_margin)
    assert clear, sentence
    return sentence
