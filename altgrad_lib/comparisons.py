"""Run comparisons the notebooks assert on: the frozen-blocks control and per-seed loss gaps.

Statistics over seeds (mean ± CI, Welch test, effect size) live in stats.py (`claims_table`, `gap_pct`).

A format's loss gap against the baseline means something only if the baseline itself learned more than
the embeddings can: the *frozen-blocks control* (TrainConfig.freeze_blocks) trains the same model with every
transformer block frozen, so only the embeddings, the final LayerNorm and the (tied) lm_head learn. A profile
whose baseline does not beat that control by a clear margin is too short or too small to compare formats
(and a run whose blocks silently got no gradient lands right on the control).

Run labels follow analysis.train_variants: "<variant> s<seed>".
"""
from __future__ import annotations

import math

import pandas as pd

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


def control_verdict(table: pd.DataFrame, min_margin: float = MIN_MARGIN_NATS) -> tuple[bool, str]:
    """(clear, sentence): the baseline beats the control in every seed by >= max(min_margin, 3 σ_seed).

    σ_seed is the seed-to-seed standard deviation of the baseline's loss (0 with one seed), so a margin
    that seed noise alone could produce never counts as clear.
    """
    if table[["baseline", "control"]].isna().any().any():
        return False, "a baseline or control run has no final val loss (diverged or unfinished)"
    sd = float(table.baseline.std(ddof=1)) if len(table) > 1 else 0.0
    need = max(min_margin, 3 * sd)
    worst = float(table.margin.min())
    clear = math.isfinite(worst) and worst >= need
    return clear, (f"baseline beats the frozen-blocks control by {worst:.3f} nats in the worst of {len(table)} "
                   f"seed(s) (needed >= {need:.3f} = max({min_margin}, 3 x seed sd {sd:.3f})): "
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
