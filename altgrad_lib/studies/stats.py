"""Study statistics: claims that must survive seed noise.

`claims_table(frame, axis, baseline)` compares every level of one axis (a format, an optimizer, ...) with a
baseline level, separately for each combination of the `by` columns, over seeds:

  - mean ± 95 % CI of each side (Student t with n − 1 degrees of freedom: mean ± t₀.₉₇₅ · s / √n),
  - the difference of means with its Welch 95 % CI,
  - Welch's t-test (unequal variances; scipy.stats.ttest_ind(equal_var=False)), two-sided p-value,
  - effect size **Hedges' g**: Cohen's d with the pooled SD, times J = 1 − 3 / (4 (n₁ + n₂) − 9), which
    removes d's upward bias at the handful of seeds a study has; sign = variant − baseline,
  - a verdict: "not distinguishable from noise" when p ≥ 0.05 or the two 95 % CIs overlap; otherwise
    "better" / "worse" (lower is better for losses: `lower_is_better`).

Input is a tidy frame, one row per run: axis columns (recipe, backend, optimizer, lr, ...), `seed`, and the
value (default `final_val_loss`; NaN for a diverged run, which is left out of the statistics and counted).
`study.Study.results()` and `results.run_frame()` produce such frames, so nothing parses run labels.
`gap_pct` restates a claims table's difference in % of the baseline mean.
The frozen-blocks control (`control_table`, `control_verdict`, `with_seed_gaps`) is the second half: a format's
loss gap against the baseline means something only if the baseline itself learned more than the embeddings can.
The *frozen-blocks control* (TrainConfig.freeze_blocks) trains the same model with every transformer block frozen,
so only the embeddings, the final LayerNorm and the (tied) lm_head learn.
"""
from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

NOISE = "not distinguishable from noise"
ALPHA = 0.05


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


def compare(variant: Sequence[float], baseline: Sequence[float], lower_is_better: bool = True,
            alpha: float = ALPHA) -> dict[str, Any]:
    """One claims-table row (without the labels): both sides' mean ± CI, Welch test, Hedges' g, verdict."""
    v, b = np.asarray(variant, dtype=float), np.asarray(baseline, dtype=float)
    mv, hv = mean_ci(v)
    mb, hb = mean_ci(b)
    w = welch(v, b)
    row = {"n": len(v), "mean": mv, "ci95": hv, "n_baseline": len(b), "mean_baseline": mb, "ci95_baseline": hb,
           "diff": w["diff"], "diff_lo": w["diff_lo"], "diff_hi": w["diff_hi"], "t": w["t"], "df": w["df"],
           "p": w["p"], "hedges_g": hedges_g(v, b)}
    row["verdict"] = verdict(row, lower_is_better, alpha)
    return row


def verdict(row: Mapping[str, Any], lower_is_better: bool = True, alpha: float = ALPHA) -> str:
    if row["n"] < 2 or row["n_baseline"] < 2:
        return f"too few seeds (n = {row['n']} vs {row['n_baseline']}; need >= 2 each)"
    p = row["p"]
    overlap = abs(row["mean"] - row["mean_baseline"]) <= row["ci95"] + row["ci95_baseline"]
    if not (p < alpha) or overlap:   # NaN p (no noise to test against) also counts as undecided
        return NOISE
    return "better" if (row["diff"] < 0) == lower_is_better else "worse"


def claims_table(frame: pd.DataFrame, axis: str, baseline: Any, by: Iterable[str] = (),
                 value: str = "final_val_loss", seed: str = "seed", lower_is_better: bool = True,
                 alpha: float = ALPHA) -> pd.DataFrame:
    """Every level of `axis` against `baseline`, per combination of the `by` columns, over seeds.

    Runs with a NaN value (diverged, failed) are left out of the statistics and counted in `n_nonfinite`.
    """
    by = list(by)
    missing = sorted({axis, seed, value, *by} - set(frame.columns))
    if missing:
        raise ValueError(f"claims_table: column(s) {missing} not in the frame; columns: {list(frame.columns)}")
    if not (frame[axis] == baseline).any():
        raise ValueError(f"claims_table: baseline {axis}={baseline!r} not in the frame; "
                         f"levels: {sorted(frame[axis].astype(str).unique())}")
    rows = []
    groups = frame.groupby(by, dropna=False, sort=True) if by else [((), frame)]
    for key, g in groups:
        key = key if isinstance(key, tuple) else (key,)
        base = g[g[axis] == baseline]
        bvals = base[value].to_numpy(dtype=float)
        for level in [lv for lv in pd.unique(g[axis]) if lv != baseline]:
            sub = g[g[axis] == level]
            vals = sub[value].to_numpy(dtype=float)
            row = {**dict(zip(by, key)), axis: level, "baseline": baseline,
                   **compare(vals[np.isfinite(vals)], bvals[np.isfinite(bvals)], lower_is_better, alpha)}
            row["n_nonfinite"] = int((~np.isfinite(vals)).sum())
            row["n_nonfinite_baseline"] = int((~np.isfinite(bvals)).sum())
            rows.append(row)
    return pd.DataFrame(rows)


def gap_pct(table: pd.DataFrame) -> pd.DataFrame:
    """A claims_table with the difference also in percent of the baseline mean: gap_pct, gap_pct_lo, gap_pct_hi
    = 100 · (diff, diff_lo, diff_hi) / mean_baseline (the Welch CI of the difference, rescaled; the baseline
    mean is treated as fixed, so this is the loss gap a reader compares with "within 1 %")."""
    scale = 100.0 / table["mean_baseline"]
    return table.assign(gap_pct=table["diff"] * scale, gap_pct_lo=table["diff_lo"] * scale,
                        gap_pct_hi=table["diff_hi"] * scale)


def seed_labels(frame: pd.DataFrame, variant: str | Sequence[str], seed: str = "seed") -> pd.DataFrame:
    """The frame with a `run` column "<variant> s<seed>": the labels the control table works on."""
    cols = [variant] if isinstance(variant, str) else list(variant)
    name = frame[cols].astype(str).agg(" ".join, axis=1)
    return frame.assign(run=name + " s" + frame[seed].astype(int).astype(str))


def control_check(frame: pd.DataFrame, variant: str | Sequence[str], baseline: str, control: str,
                  value: str = "final_val_loss", seed: str = "seed") -> tuple[pd.DataFrame, bool, str]:
    """The frozen-blocks rule below on a tidy frame: (per-seed table, clear, sentence).

    `baseline` / `control` are values of the `variant` column(s) (joined by spaces when several).
    """
    from altgrad_lib.studies.stats import control_table, control_verdict

    table = control_table(seed_labels(frame, variant, seed), baseline, control, value)
    clear, sentence = control_verdict(table)
    return table, clear, sentence


def seed_table(summary: pd.DataFrame, value: str = "val_gap_pct") -> pd.DataFrame:
    """Mean, std and count over seeds of one summary column, per variant (run labels "<variant> s<seed>")."""
    variant = summary.run.str.replace(r" s\d+$", "", regex=True)
    return summary.groupby(variant)[value].agg(["mean", "std", "count"]).rename_axis("variant")


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
    unigram = (f"; its loss {float(table.baseline.max()):.3f} is {'NOT ' if above else ''}below the unigram entropy "
               f"{entropy:.3f} of the evaluation tokens" if entropy is not None and math.isfinite(entropy) else "")
    return clear, (f"baseline beats the frozen-blocks control by {worst:.3f} nats in the worst of {len(table)} "
                   f"seed(s) (needed >= {need:.3f} = max({min_margin}, 3 x seed sd {sd:.3f}){unigram}: "
                   f"{'clear' if clear else 'NOT clear — lengthen or resize the profile before reading gaps'}")


def assert_beats_control(table: pd.DataFrame, min_margin: float = MIN_MARGIN_NATS) -> str:
    """control_verdict, raising AssertionError unless the win is clear; returns the sentence."""
    clear, sentence = control_verdict(table, min_margin)
    assert clear, sentence
    return sentence


def with_seed_gaps(summary: pd.DataFrame, baseline: str, value: str = "final_val_loss") -> pd.DataFrame:
    """Copy of a run_summary with val_gap_pct = 100 · (L − L_baseline) / L_baseline, each run against the
    baseline of its *own* seed ("<baseline> s<seed>"), so seed-to-seed spread never leaks into a gap."""
    out = summary.copy()
    seed = out.run.str.extract(r" s(\d+)$")[0]
    if seed.isna().any():
        raise ValueError(f"run labels must end in ' s<seed>'; got {list(out.run[seed.isna()])}")
    base = _per_seed(summary, baseline, value)
    missing = sorted(set(seed.astype(int)) - set(base.index))
    if missing:
        raise ValueError(f"no '{baseline} s<seed>' run for seed(s) {missing}; labels: {list(summary.run)}")
    ref = seed.astype(int).map(base)
    out["val_gap_pct"] = 100 * (out[value] - ref) / ref
    return out
