"""The figures low-precision training papers publish, drawn from AltGrad's runs and claims.

    seed_losses(runs, split)            tidy (label, seed, step, loss) of every run of a train_variants result
    gap_over_training(losses, baseline, delta)   (a) loss − baseline of the same seed over training: mean line, a band
                                        over the seeds (min..max), the ±δ equivalence band (NVFP4 report, torchao docs)
    forest(claims)                      (e) every level's final gap vs the baseline with its CI and ±δ, ordered by the
                                        exponent / mantissa split of its format
    layer_grid(diags)                   (c) per-layer amax, scale, under- and overflow of X / W / dY, one marker per
                                        format, in one grid (TransformerEngine's precision-debug view)
    scaled_weight_hist(diag, fmt)       (b) for the weights W: the share of each layer's |w·s| per binade against the
                                        format's window (min subnormal, min normal, max), as Micikevicius et al. draw
                                        X, W and dY (the monitors record the log2 histogram of W only)

Conventions as plots.py: labelled axes with units (names.py), legends outside the data, dpi from plots.setup.
"""
from __future__ import annotations

import math
import re
from typing import Any, Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from altgrad_lib.notebook.names import METRICS, ROLES, layer_name, metric_name
from altgrad_lib.notebook.plots import CONTROL_MARKERS
from altgrad_lib.numerics.formats import FloatFormat, get_format
from altgrad_lib.studies.results import VAL_LOSS, TRAIN_LOSS, find_metric, metrics_wide

_EXMY = re.compile(r"\bE(\d+)M(\d+)")


def seed_losses(runs: Any, split: str = "val") -> pd.DataFrame:
    """(label, seed, step, loss) of every run of a `train_variants` result (its `labels`: key -> (label, seed))."""
    frames = []
    for key, run in runs.items():
        w = metrics_wide(run)
        col = find_metric(w.columns, *(VAL_LOSS if split == "val" else TRAIN_LOSS))
        if col is None:
            continue
        label, seed = runs.labels[key]
        d = w[["step", col]].dropna().rename(columns={col: "loss"})
        frames.append(d.assign(label=label, seed=int(seed)))
    return pd.concat(frames, ignore_index=True)[["label", "seed", "step", "loss"]]


def _names_a_control(label: str) -> bool:
    return any(m in str(label) for m in CONTROL_MARKERS)


def gap_over_training(losses: pd.DataFrame, baseline: str, delta: float | None = None, *, split: str = "val",
                      title: str = "") -> Figure:
    """(a) loss − `baseline`'s loss of the same seed at the same step, per label: the mean over seeds (line), the
    seeds' min..max (band, with 2+ seeds) and ±`delta` (grey). Controls (frozen blocks) are left out: their gap is
    the window, not a format's cost."""
    base = losses[losses.label == baseline][["seed", "step", "loss"]].rename(columns={"loss": "base"})
    if base.empty:
        raise ValueError(f"baseline {baseline!r} not among the labels {sorted(losses.label.unique())}")
    d = losses[(losses.label != baseline) & ~losses.label.map(_names_a_control)].merge(base, on=["seed", "step"])
    d = d.assign(gap=d.loss - d.base)
    fig, ax = plt.subplots(figsize=(9, 4))
    if delta is not None and np.isfinite(delta):
        ax.axhspan(-delta, delta, color="0.88", zorder=0, label=f"±δ = {delta:g} nats")
    ax.axhline(0, color="k", lw=0.8)
    n_seeds = d.seed.nunique()
    for i, (label, g) in enumerate(d.groupby("label", sort=False)):
        s = g.groupby("step").gap.agg(["mean", "min", "max", "count"])
        color = f"C{i % 10}"
        n = int(s["count"].max())
        ax.plot(s.index, s["mean"], marker=".", color=color, label=f"{label} (mean of {n})" if n > 1 else label)
        if s["count"].max() > 1:
            ax.fill_between(s.index, s["min"], s["max"], color=color, alpha=0.18, lw=0)
    ax.set_xlabel("training step")
    ax.set_ylabel(f"{metric_name(f'{split}/loss')} − {baseline}, same seed (nats/token)")
    band = "band: min..max over seeds; " if n_seeds > 1 else ""
    ax.set_title(title or f"gap to {baseline} over training ({n_seeds} seed(s); {band}grey: ±δ)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    return fig


def exmy(level: Any) -> tuple[int, int] | None:
    """(exponent bits, mantissa bits) of the first ExMy in a level's name ("E4M3-XWdY" -> (4, 3)); None if none."""
    m = _EXMY.search(str(level))
    return (int(m.group(1)), int(m.group(2))) if m else None


def forest(claims: pd.DataFrame, *, baseline: str | None = None, title: str = "") -> Figure:
    """(e) One row per claims row: the final gap (nats) vs the baseline of the same seed, its CI at the level its
    verdict uses (`ci_lo`/`ci_hi`, `ci_level`), ±δ (grey), the verdict in the row's label. Rows ordered by their
    format's exponent bits (range) against mantissa bits (precision); levels without an ExMy last, in table order."""
    t = claims.reset_index(drop=True)
    key = [(0, *exmy(lv)) if exmy(lv) else (1, i, 0) for i, lv in enumerate(t.level)]
    t = t.iloc[sorted(range(len(t)), key=lambda i: key[i])].reset_index(drop=True)
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(t) + 1.8))
    for y, r in enumerate(t.itertuples()):
        if np.isfinite(r.delta_nats):
            ax.plot([-r.delta_nats, r.delta_nats], [y, y], color="0.8", lw=8, solid_capstyle="butt", zorder=0)
        ci = np.isfinite(r.ci_lo) and np.isfinite(r.ci_hi)
        err = [[r.gap_nats - r.ci_lo], [r.ci_hi - r.gap_nats]] if ci else None
        ax.errorbar([r.gap_nats], [y], xerr=err, fmt="o", capsize=3, color="C0" if ci else "C3")
    ax.axvline(0, color="k", lw=0.8)
    labels = []
    for r in t.itertuples():
        split = exmy(r.level)
        bits = f" [{split[0]} exp / {split[1]} man bits]" if split else ""
        n = f"n={int(r.n)}" + ("" if np.isfinite(r.ci_lo) else ", no CI")
        labels.append(f"{r.level}{bits}\n{str(r.verdict).split(' (')[0]} ({n})")
    ax.set_yticks(range(len(t)), labels, fontsize=8)
    ax.set_ylim(len(t) - 0.5, -0.5)
    base = baseline or (t.baseline.iloc[0] if "baseline" in t and len(t) else "baseline")
    ax.set_xlabel(f"final loss − {base} of the same seed (nats/token)")
    ax.set_title(title or f"every level against {base}, by exponent / mantissa bits\n"
                 "bars: CI at each verdict's level; grey: ±δ; red: no CI")
    fig.tight_layout()
    return fig


GRID_METRICS = ("amax", "scale", "underflow_frac", "overflow_frac")
_LOG = {"amax", "scale", "ctr.amax", "ctr.scale"}


def layer_grid(diags: Mapping[str, pd.DataFrame], metrics: Sequence[str] = GRID_METRICS,
               roles: Sequence[str] = ("X", "W", "dY"), *, title: str = "") -> Figure:
    """(c) Rows: metrics (amax, scale, underflow, overflow: the numerics monitor, mean over the diagnostic steps);
    columns: the tensors X, W, dY; x: the quantized layers in depth order; one marker per run (format). A panel with
    no rows says "not recorded", one whose values are all zero says "all zero" (a flat line at 0 says nothing)."""
    frames = {k: d for k, d in diags.items() if d is not None and len(d)}
    if not frames:
        raise ValueError("no diagnostics to draw (every run was trained with diagnostics off)")
    fig, axes = plt.subplots(len(metrics), len(roles), figsize=(4 * len(roles), 2.4 * len(metrics) + 0.8),
                             squeeze=False, sharex=True)
    layers: list[str] = []
    for d in frames.values():
        sel = d[d.metric.isin(metrics) & d.role.isin(roles)]
        layers += [lyr for lyr in dict.fromkeys(sel.layer) if lyr not in layers]
    x = {lyr: i for i, lyr in enumerate(layers)}
    handles = {}
    for i, metric in enumerate(metrics):
        for j, role in enumerate(roles):
            ax = axes[i, j]
            vals = []
            for k, (label, d) in enumerate(frames.items()):
                sel = d[(d.metric == metric) & (d.role == role)]
                if sel.empty:
                    continue
                m = sel.groupby("layer", sort=False).value.mean()
                vals.append(m.to_numpy(float))
                h = ax.plot([x[lyr] for lyr in m.index], m.to_numpy(float), marker="os^Dvx<>"[k % 8], ls="none",
                            color=f"C{k % 10}", label=label, alpha=0.85)[0]
                handles.setdefault(label, h)
            allv = np.concatenate(vals) if vals else np.array([])
            fin = allv[np.isfinite(allv)]
            note = ("not recorded" if not vals else "not measurable (all NaN)" if not fin.size
                    else "all zero" if np.all(fin == 0) else None)
            if note:
                for ln in list(ax.lines):
                    ln.remove()
                ax.text(0.5, 0.5, note, ha="center", va="center", transform=ax.transAxes, fontsize=9, color="0.3")
                ax.set_yticks([])
            elif metric in _LOG and fin.min() > 0:
                ax.set_yscale("log", base=2)
            if i == 0:
                ax.set_title(ROLES.get(role, role))
            name, unit = METRICS.get(metric, (metric, ""))
            if j == 0:
                ax.set_ylabel(f"{name}\n({unit})" if unit else name, fontsize=8)
            elif not note and unit:
                ax.set_ylabel(f"({unit})", fontsize=8)
    for ax in axes[-1]:
        ax.set_xticks(range(len(layers)), [layer_name(lyr) for lyr in layers], rotation=60, ha="right", fontsize=7)
    fig.suptitle(title or "per layer: max |x|, scale, under- and overflow (mean over diagnostic steps)")
    fig.legend(list(handles.values()), list(handles), loc="upper left", bbox_to_anchor=(1.0, 0.95), frameon=False,
               fontsize=8)
    fig.tight_layout()
    return fig


def scaled_weight_hist(diag: pd.DataFrame, fmt: FloatFormat | str, *, step: int | None = None,
                       title: str = "") -> Figure:
    """(b) For each quantized layer: bars of the share of its weights per binade of |w·s| (the weights monitor's
    `hist.log2w` shifted by log2 of the W scale at the same step: what the format sees), against the format's
    window: grey below the smallest normal, red lines at the smallest subnormal (below it: zero) and at max (above
    it: clamped). The histogram's edge bins also hold the values clamped into them. Layers without a W scale (not
    quantized, or block-scaled) are left out and named in the title."""
    f = get_format(fmt)
    h = diag[diag.metric.str.startswith("hist.log2w:") & (diag.role == "W")]
    sc = diag[diag.metric.isin(["scale", "ctr.scale"]) & (diag.role == "W")]
    steps = sorted(set(h.step) & set(sc.step))
    if not steps:
        raise ValueError("no step with both the weights' log2 histogram (weights monitor) and a W scale")
    step = steps[-1] if step is None else step
    h, sc = h[h.step == step], sc[sc.step == step]
    # the numerics monitor's scale at that step; else the quantizer counter's (its last call)
    scale = sc[sc.metric == "scale"].groupby("layer").value.first().combine_first(
        sc[sc.metric == "ctr.scale"].groupby("layer").value.first())
    layers = [lyr for lyr in dict.fromkeys(h.layer) if lyr in scale.index and scale[lyr] > 0]
    left_out = [layer_name(lyr) for lyr in dict.fromkeys(h.layer) if lyr not in layers]
    ncols = min(4, len(layers))
    nrows = math.ceil(len(layers) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.3 * ncols, 2.3 * nrows + 1.0), sharex=True, sharey=True,
                             squeeze=False)
    lo, mn, hi = math.log2(f.min_subnormal), math.log2(f.min_normal), math.log2(f.max)
    for ax, layer in zip(axes.flat, layers):
        d = h[h.layer == layer]
        k = d.metric.str.split(":").str[1].astype(int).to_numpy() + math.log2(scale[layer])
        if mn > lo:
            ax.axvspan(lo, mn, color="0.88", zorder=0)
        ax.bar(k, d.value.to_numpy(), width=1.0, align="edge", color="C0")
        for x in (lo, hi):
            ax.axvline(x, color="C3", lw=1)
        ax.set_title(layer_name(layer), fontsize=8)
    for ax in axes.flat[len(layers):]:
        ax.set_visible(False)
    for ax in axes[-1]:
        ax.set_xlabel("log2 |w·s| (binade)")
    for ax in axes[:, 0]:
        ax.set_ylabel("fraction of weights")
    note = f"; not scaled, left out: {', '.join(left_out)}" if left_out else ""
    fig.suptitle(title or f"{f.name} weights at step {step}: |w·s| per binade; red: min subnormal and max, "
                 f"grey: subnormal{note}", fontsize=9)
    fig.tight_layout()
    return fig
