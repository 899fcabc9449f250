"""What notebook 05 shows of the optimizer statistics (`optim/*` metrics, optim/diagnostics.py) and of its claims.

    optim_curves(runs, parts)     long frame: label, seed, step and every optim/* metric (prefix dropped)
    step_summary(curves, labels)  per label, means over training and seeds: the step in codes (ULPs), visibility,
                                  jumps >= 2 codes, the oscillation ratio
    ulp_sentences(summary, a, b)  the prose comparing two runs' steps on one grid, computed from the summary
    markdown_table(path)          the first Markdown table of a results file (bench/results/*.md) as a frame

Under stochastic rounding a step of u ULPs (|u| < 1) moves the stored weight by one code with probability |u|,
so `mean_abs_dcode` (mean |Δcode| per coordinate and step) is an unbiased estimate of the mean |step| in ULPs;
with round-to-nearest it is not (sub-half-ULP steps read 0: the stall).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterable, Mapping

import pandas as pd

from altgrad_lib.notebook import claims_view
from altgrad_lib.notebook.analysis import metrics_wide
from altgrad_lib.studies.verdicts import Kind, Verdict, not_excluded

METRICS = ("stall_rate", "update_visibility", "mean_abs_dcode", "frac_dcode_1", "frac_dcode_ge2", "osc_ratio")


def optim_curves(runs: Any, parts: Mapping[str, tuple[str, str]]) -> pd.DataFrame:
    """One row per (run, logged step) of the runs in `parts` (hp and its control have no optim/* metrics)."""
    out = []
    for key, (label, seed) in runs.labels.items():
        if label not in parts:
            continue
        w = metrics_wide(runs[key])
        cols = [c for c in w.columns if c.startswith("optim/")]
        opt = w[["step", *cols]].dropna(how="all", subset=cols)   # eval-only rows carry no optim/* metric
        opt = opt.rename(columns=lambda c: c.removeprefix("optim/"))
        out.append(opt.assign(label=label, seed=int(seed)))
    if not out:
        return pd.DataFrame(columns=["label", "seed", "step", *METRICS])
    return pd.concat(out, ignore_index=True)


def step_summary(curves: pd.DataFrame, labels: Iterable[str] | None = None) -> pd.DataFrame:
    """Per label (in `labels` order, default all): means over logged steps and seeds of METRICS present."""
    cols = [m for m in METRICS if m in curves]
    s = curves.groupby("label", sort=False)[cols].mean()
    return s if labels is None else s.reindex([lb for lb in labels if lb in s.index])


def ulp_sentences(summary: pd.DataFrame, a: str, b: str, code_ratio: float | None = 2.0) -> list[str]:
    """Sentences comparing run `a` with run `b` from step_summary rows: mean step in codes, the share of weights
    moved per step, jumps of >= 2 codes, the oscillation ratio. `code_ratio`: the factor one code changes |w| by
    on this grid (2 for E7M0; None to leave it out)."""
    ra, rb = summary.loc[a], summary.loc[b]
    ratio = ra.mean_abs_dcode / rb.mean_abs_dcode if rb.mean_abs_dcode > 0 else math.inf
    sr = " (= its mean step in ULPs: stored with SR)" if a.endswith("_sr") else ""
    lines = [f"{a}: mean |Δcode| per weight and step {ra.mean_abs_dcode:.4f}{sr}, "
             f"{ratio:.1f}× that of {b} ({rb.mean_abs_dcode:.4f}).",
             f"Weights moved per step (update visibility): {ra.update_visibility:.2%} vs {rb.update_visibility:.2%}; "
             f"by 2 codes or more: {ra.frac_dcode_ge2:.2%} vs {rb.frac_dcode_ge2:.2%}."]
    if code_ratio:
        steps = 1 / ra.update_visibility if ra.update_visibility > 0 else math.inf
        lines.append(f"One code is a factor {code_ratio:g} in |w| on this grid: under {a} a weight is multiplied or "
                     f"divided by {code_ratio:g} about every {steps:.0f} steps "
                     f"(under {b}: every {1 / rb.update_visibility if rb.update_visibility > 0 else math.inf:.0f}).")
    if "osc_ratio" in summary and pd.notna(ra.osc_ratio) and pd.notna(rb.osc_ratio):
        lines.append(f"Oscillation ratio Σ|ΔQ|/Σ|Δw| (TetraJet-v2): {ra.osc_ratio:.3f} vs {rb.osc_ratio:.3f}.")
    return lines


def markdown_table(path: str | Path) -> pd.DataFrame:
    """The first pipe table of a Markdown file (header row, separator, rows) as strings."""
    rows = []
    for line in Path(path).read_text().splitlines():
        if line.startswith("|"):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif rows:
            break
    if len(rows) < 2:
        raise ValueError(f"{path}: no Markdown table found")
    return pd.DataFrame(rows[2:], columns=rows[0])


def result_statement(table: pd.DataFrame, level: str, what: str) -> str:
    """One plain sentence on `what` from the claims row of `level` (a claims table with `reference`): a verdict
    "worse" is called a negative result, "inconclusive" says the seeds cannot tell and gives the MDE."""
    r = table[table.level == level]
    if r.empty:
        return f"{what}: not measured in this profile ({level} was not trained)."
    r = r.iloc[0]
    ref = r.get("reference", r.baseline)
    v = Verdict.from_row(r)   # decided by its kind; r.verdict is the words printed
    # the CI at the level the verdict was tested at (the table's ci_level), labelled; else the 95 % paired-t CI
    if math.isfinite(r.get("ci_lo", math.nan)):
        seq = math.isfinite(r.get("p_bound", math.nan))
        ci = f" [{r.ci_lo:+.4f}, {r.ci_hi:+.4f}] {claims_view.ci_label(v.kind, r.ci_level, seq)} CI"
    else:
        ci = f" [{r.gap_lo:+.4f}, {r.gap_hi:+.4f}] 95 % CI" if math.isfinite(r.gap_lo) else ""
    gap = f"{r.gap_nats:+.4f} nats{ci} against {ref}, {r.signs}" + (f"; {v.family}" if v.family else "")
    noted = v.n_diverged_baseline > 0   # the words carry "(baseline diverged in k/n seeds: pairs dropped)"
    if v.kind is Kind.DIVERGED:
        return f"Negative result: {what} {r.verdict} ({gap} over the seeds that did not)."
    if v.kind in (Kind.WORSE, Kind.BELOW_CONTROL):
        control = f"; {r.control}" if (v.kind is Kind.BELOW_CONTROL or noted) and "control" in r else ""
        return f"Negative result: {what} is {r.verdict} ({gap}{control}; Holm p {r.p_holm:.3g})."
    if v.kind is Kind.BETTER:
        return f"{what} is better ({gap}; Holm p {r.p_holm:.3g})."
    if v.kind is Kind.EQUIVALENT:
        left = not_excluded(v.harm_bound, v.lower_is_better)   # what the equivalence leaves possible
        note = (f" (baseline diverged in {v.n_diverged_baseline}/{v.n_seeds} seeds: pairs dropped)" if noted else "")
        return (f"{what} is equivalent within ±{v.delta:.3g} nats{note}{', ' + left if left else ''} ({gap}; TOST p "
                f"{r.p_tost:.3g}).")
    if v.kind is Kind.NOT_TRAINING and not noted:
        return (f"{what}: not training its blocks ({gap}; {r.control}): it is not below the frozen-blocks control "
                f"in every seed, so its gap says it failed to train, whatever its p.")
    mde = f"; MDE {r.mde_nats:.4f} nats" if math.isfinite(r.mde_nats) else ""
    return f"{what}: {r.verdict} ({gap}{mde}): these seeds cannot tell, which is not 'no effect'."


__all__ = ["METRICS", "optim_curves", "step_summary", "ulp_sentences", "markdown_table", "result_statement"]
