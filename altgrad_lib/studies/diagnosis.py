"""Why a format fails: the verdict per format and the mechanism table, from runs and their diagnostics.

Notebook 04's reading of a set of runs (one per format and seed, plus `hp` and its frozen-blocks control):

    verdict(rows, control, divergences)   "diverged in k/n seeds ...", "does not train ...", "trains: gap ..."
    collapse_step(run)                    first step whose train loss is non-finite or >= 2 x the lowest before it
    first_event(run)                      the first early-warning event of events.csv ("none" if none)
    mechanism(diag) / mechanism_table     the MECH columns (saturation, underflow, stall, gradient SNR, ...)

Runs are duck-typed (`.metrics` tidy frame with step/name/value, `.dir`, `.divergence`), diagnostics frames are
`monitors.read_diagnostics(run_dir)` (step, layer, role, metric, value), so the tests build both by hand.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping

import pandas as pd

from altgrad_lib.monitors.writer import read_events
from altgrad_lib.studies.stats import MIN_MARGIN_NATS
from altgrad_lib.studies.envelope import first_spike
from altgrad_lib.training.run_dir import divergence_where

# column -> (role, metric, aggregate over the run's layers and diagnostic steps); role None: any role
MECH: dict[str, tuple[str | None, str, str]] = {
    "X sat": ("X", "ctr.sat_frac", "mean"), "X under": ("X", "underflow_frac", "mean"),
    "W sat": ("W", "ctr.sat_frac", "mean"), "W under": ("W", "underflow_frac", "mean"),
    "W stall": ("W", "stall_rate", "mean"), "W stale": ("W", "staleness", "mean"),
    "W zeros": ("W", "zero_frac", "mean"), "W codes": ("W", "capacity_use", "mean"),
    "dY sat": ("dY", "ctr.sat_frac", "mean"), "dY under": ("dY", "underflow_frac", "mean"),
    "grad SNR dB": ("weight", "grad_snr_db", "median"), "grad cos": ("weight", "grad_cos", "median"),
    "kurtosis max": ("X", "kurtosis", "max"), "attn H min": (None, "attn_entropy", "min"),
}
QUANTIZER_METRICS = ("ctr.sat_frac", "overflow_frac", "underflow_frac")   # written only for quantized tensors
QUANT_ROLES = ("X", "W", "dY")


def collapse_step(run: Any, ratio: float = 2.0) -> int | None:
    """Step of the first train loss that is non-finite or >= ratio x the lowest loss before it (envelope's rule)."""
    m = run.metrics[run.metrics["name"] == "train/loss"].sort_values("step")
    return first_spike(pd.Series(m["value"].to_numpy(float), index=m["step"].to_numpy()), ratio)


def first_event(run: Any) -> str:
    """"<kind> at step <n> <layer>" of the first early-warning event in the run's events.csv, or "none".
    Notes that a number was unavailable ("unavailable:<what>") are not warnings and are skipped."""
    ev = read_events(Path(run.dir))   # empty frame when the run wrote no events.csv
    ev = ev[~ev["kind"].astype(str).str.startswith("unavailable")].sort_values("step", kind="stable")
    if ev.empty:
        return "none"
    e = ev.iloc[0]
    return f"{e['kind']} at step {int(e['step'])} {e['layer']}".rstrip()


def verdict(rows: pd.DataFrame, control: pd.Series, divergences: Mapping[str, dict | None]) -> str:
    """One format's verdict over its seeds.

    rows: its summary rows (run, seed, status, final_val_loss, val_gap_pct); control: the frozen-blocks control's
    final val loss by seed; divergences: run -> divergence record (train()'s divergence.json) for diverged runs.
    diverged (any seed) > does not train (val loss not MIN_MARGIN_NATS below the control's) > trains (gap).
    """
    n = len(rows)
    if n == 0:
        raise ValueError("verdict: no rows for this format")
    div = rows[rows["status"] == "diverged"]
    if len(div):
        d = divergences.get(div["run"].iloc[0]) or {}
        where = divergence_where(d)
        return (f"diverged in {len(div)}/{n} seeds; seed {int(div['seed'].iloc[0])}: at step {d.get('step', '?')}, "
                f"{where}")
    learned = rows["final_val_loss"].to_numpy(float) < control.loc[rows["seed"]].to_numpy(float) - MIN_MARGIN_NATS
    gap = rows["val_gap_pct"]
    spread = f" ± {gap.std():.2f}" if n > 1 else ""
    if learned.all():
        return f"trains: gap {gap.mean():+.2f} %{spread} (n={n})"
    return (f"does not train in {int((~learned).sum())}/{n} seeds: val loss not clearly below the control "
            f"(gap {gap.mean():+.2f} %{spread})")


def quantized_layers(diag: pd.DataFrame) -> set[str]:
    """Layers with a quantizer in this run: those with quantizer-only metrics on X / W / dY."""
    q = diag[diag["metric"].isin(QUANTIZER_METRICS) & diag["role"].isin(QUANT_ROLES)]
    return set(q["layer"])


def mechanism(diag: pd.DataFrame, quantized: set[str] | None = None) -> dict[str, float]:
    """The MECH columns of one run: each metric's rows (its role; on X / W / dY only the quantized layers, as the
    weights monitor writes W rows for every matrix), finite values only, aggregated; NaN when nothing measured it."""
    quantized = quantized_layers(diag) if quantized is None else quantized
    out = {}
    for col, (role, metric, agg) in MECH.items():
        v = diag[diag["metric"] == metric]
        if role is not None:
            v = v[v["role"] == role]
        if role in QUANT_ROLES and metric != "kurtosis":   # kurtosis of an input exists without a quantizer
            v = v[v["layer"].isin(quantized)]
        v = v["value"][v["value"].map(math.isfinite)]
        out[col] = float(getattr(v, agg)()) if len(v) else math.nan
    return out


def mechanism_table(diags: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per label (e.g. format), the MECH columns."""
    return pd.DataFrame({k: mechanism(d) for k, d in diags.items()}, index=list(MECH)).T


def verdict_table(summary: pd.DataFrame, runs: Mapping[str, Any], labels: list[str], control_label: str,
                  first_seed: int) -> tuple[dict[str, str], pd.DataFrame]:
    """Verdicts of `labels` (summary has columns label, run, seed, status, final_val_loss, val_gap_pct; runs are
    keyed "<label> s<seed>") and the table verdict / collapse starts / first event of each label's first seed."""
    control = summary[summary["label"] == control_label].set_index("seed")["final_val_loss"]
    divergences = {k: r.divergence for k, r in runs.items()}
    verdicts = {f: verdict(summary[summary["label"] == f], control, divergences) for f in labels}
    s0 = f" s{first_seed}"
    table = pd.DataFrame({f: {"verdict": verdicts[f], "collapse starts": collapse_step(runs[f + s0]),
                              "first event": first_event(runs[f + s0])} for f in labels}).T
    return verdicts, table


__all__ = ["MECH", "collapse_step", "first_event", "verdict", "quantized_layers", "mechanism", "mechanism_table",
           "verdict_table"]
