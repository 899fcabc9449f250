"""Figures for the notebooks: each function takes a table from `analysis.py` and returns a Figure.

Conventions: labelled axes with units, log scales where magnitudes span binades, the format in the
title, subnormal region shaded grey, modest size (8, 4) and dpi (set by `setup`) so committed
notebooks stay small.
"""
from __future__ import annotations

import math
import warnings
from typing import Iterable

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from altgrad_lib.notebook.figure_check import MIN_DPI, watch_displayed
from altgrad_lib.notebook.names import COLUMNS, column_label, layer_name
from altgrad_lib.numerics.formats import FloatFormat, get_format

FIGSIZE = (8, 4)
DPI = 120   # 80 dpi gave 640 px wide figures with 7-9 px text; figure_check requires >= MIN_DPI
# Runs that are controls, not variants: the Δ panel of loss_curves leaves them out (their +0.45 nats set its range)
CONTROL_MARKERS = ("freeze_blocks", "frozen", "control")
SUBNORMAL_STYLE = dict(color="0.85", zorder=0, label="subnormal")


def setup(dpi: int = DPI) -> None:
    """Notebook-wide style: grid, readable fonts, dpi >= MIN_DPI (a lower `dpi` is raised to DPI, with a warning);
    in a notebook, every figure it displays goes through figure_check (its last cell prints the summary)."""
    if dpi < MIN_DPI:
        warnings.warn(f"plots.setup(dpi={dpi}): below {MIN_DPI} dpi figure text is unreadable; using {DPI}",
                      stacklevel=2)
        dpi = DPI
    plt.rcParams.update({"figure.dpi": dpi, "savefig.dpi": dpi, "figure.figsize": FIGSIZE,
                         "axes.grid": True, "grid.alpha": 0.3, "font.size": 9,
                         "axes.spines.top": False, "axes.spines.right": False})
    watch_displayed()   # in a notebook: every displayed figure is checked; figure_check.displayed_summary() says how


def _shade_subnormal(ax, fmt: FloatFormat, lo: float) -> None:
    if fmt.min_subnormal < fmt.min_normal:  # only formats with subnormals have a region to shade
        ax.axvspan(lo, fmt.min_normal, **SUBNORMAL_STYLE)


def format_grid(fmt: FloatFormat | str, binades: pd.DataFrame) -> Figure:
    """Top: every positive value on a log axis. Bottom: values per binade (precision per octave)."""
    f = get_format(fmt)
    v = f.values().double().numpy()
    v = v[v > 0]
    fig, (ax0, ax1) = plt.subplots(2, 1, figsize=(8, 4.5), sharex=True, height_ratios=(1, 2))
    ax0.vlines(v, 0, 1, lw=0.6, color="C0")
    _shade_subnormal(ax0, f, v[0] / 2)
    ax0.set_xscale("log", base=2)
    ax0.set_yticks([])
    ax0.set_title(f"{f.name} ({f.short_str()}): {len(v)} positive values, "
                  f"{v[0]:.3g} … {v[-1]:.4g}")
    ax0.legend(loc="upper left", fontsize=8) if f.min_subnormal < f.min_normal else None
    ax1.bar(binades.lo, binades.n_values, width=binades.lo, align="edge",
            color=["0.6" if r == "subnormal" else "C0" for r in binades.region], edgecolor="white")
    ax1.set_xscale("log", base=2)
    ax1.set_xlabel("|value| (log2 scale)")
    ax1.set_ylabel("values per binade (count)")
    ax1.set_xlim(v[0] / 2, v[-1] * 2)
    fig.tight_layout()
    return fig


def rounding_error(df: pd.DataFrame, fmt: FloatFormat | str) -> Figure:
    """Relative error of RNE and one SR draw vs magnitude, with the unit roundoff 2^-(m+1)."""
    f = get_format(fmt)
    fig, ax = plt.subplots(figsize=FIGSIZE)
    floor = 2.0 ** -(f.mbits + 12)  # exact or near-exact hits drawn at the bottom instead of vanishing
    ax.scatter(df.x, df.rel_err_sr.clip(lower=floor), s=2, alpha=0.3, color="C1", label="stochastic (1 draw)")
    ax.scatter(df.x, df.rel_err_rne.clip(lower=floor), s=2, alpha=0.5, color="C0", label="nearest-even")
    ax.axhline(2.0 ** -(f.mbits + 1), color="k", ls="--", lw=1, label=f"$2^{{-{f.mbits + 1}}}$ unit roundoff")
    _shade_subnormal(ax, f, df.x.min())
    ax.axvline(f.max, color="C3", lw=1, label="max")
    ax.set(xscale="log", yscale="log", xlabel="|x| (log scale)", ylabel="relative error |Q(x)−x|/|x| (dimensionless)",
           title=f"{f.name}: relative rounding error vs magnitude")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_ylim(floor / 2, 4)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, fontsize=8, markerscale=4)
    fig.tight_layout()
    return fig


def ulp_stiffness(df: pd.DataFrame, fmt: FloatFormat | str) -> Figure:
    """Left: ULP up/down (= stiffness S) at each grid value. Right: ulp/|w|, the smallest relative move."""
    f = get_format(fmt)
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=FIGSIZE)
    for ax, cols, ylabel in ((ax0, ("ulp_up", "ulp_down"), "ULP: absolute spacing (units of w)"),
                             (ax1, ("rel_ulp_up", "rel_ulp_down"), "relative spacing ULP/|w| (dimensionless)")):
        ax.step(df.w, df[cols[0]], where="post", color="C0", label="up (away from 0)")
        ax.step(df.w, df[cols[1]], where="post", color="C1", ls="--", label="down (toward 0)")
        _shade_subnormal(ax, f, df.w.min())
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ax.set(xlabel="|w| on the grid (log2 scale)", ylabel=ylabel)
    ax0.legend(fontsize=8, loc="upper left")   # ULP grows with |w|: the upper left is empty
    fig.suptitle(f"{f.name}: grid spacing = stiffness S, and relative spacing (subnormals shaded)")
    fig.tight_layout()
    return fig


def sr_bias(df: pd.DataFrame, fmt: FloatFormat | str, n_samples: int) -> Figure:
    """Monte Carlo SR bias in standard errors (should be inside ±3) and variance vs ulp² p(1-p)."""
    f = get_format(fmt)
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=FIGSIZE)
    idx = np.arange(len(df))
    colors = {a: f"C{i}" for i, a in enumerate(df.anchor.unique())}
    ax0.bar(idx, df.bias_z, color=[colors[a] for a in df.anchor])
    ax0.axhspan(-3, 3, color="0.9", zorder=0, label="±3σ")
    ax0.set(xlabel="probe point (grouped by binade)", ylabel="bias (standard errors)",
            title=f"bias, {n_samples} draws per point")
    ax0.xaxis.get_major_locator().set_params(integer=True)   # probe points are whole numbers, no 2.5 ticks
    ax0.set_ylim(-5, 5)   # the ±3σ band in the middle, room above it for the legend
    ax0.legend(fontsize=8, loc="upper right")
    for a, c in colors.items():
        d = df[df.anchor == a]
        ax1.plot(d.frac, d["var"] / (d.hi - d.lo) ** 2, "o", color=c, label=a)
    p = np.linspace(0, 1, 101)
    ax1.plot(p, p * (1 - p), "k--", lw=1, label="p(1-p)")
    ax1.set(xlabel="p = (x − lo)/ulp (fraction of an ulp)", ylabel="Var[Q(x)] (ulp²)", title="variance")
    ax1.set_ylim(0, 0.4)   # p(1-p) peaks at 0.25: room above it for the legend
    ax1.legend(fontsize=8, loc="upper center", ncol=3)
    fig.suptitle(f"{f.name}: stochastic rounding is unbiased with Bernoulli variance")
    fig.tight_layout()
    return fig


def format_tradeoff(summary: pd.DataFrame, x: str, y: str, label: str = "format",
                    highlight: str | None = None, color_by: str = "bits") -> Figure:
    """Scatter of two summary-table columns (e.g. dynamic range vs values per binade), one dot per format.

    Formats that land on (almost) the same point share one label, so E4M3's variants stay readable.
    """
    fig, ax = plt.subplots(figsize=FIGSIZE)
    groups = sorted(summary[color_by].unique()) if color_by in summary else [None]
    for i, g in enumerate(groups):
        d = summary if g is None else summary[summary[color_by] == g]
        ax.scatter(d[x], d[y], s=30, color=f"C{i}", zorder=3, label=None if g is None else f"{g} {color_by}")
    if highlight is not None and (summary[label] == highlight).any():
        h = summary[summary[label] == highlight]
        ax.scatter(h[x], h[y], s=120, facecolors="none", edgecolors="C3", lw=2, zorder=4, label=highlight)
    for yv, d in summary.sort_values(x).groupby(y):
        cluster: list = []
        for r in [row for _, row in d.iterrows()] + [None]:
            if cluster and (r is None or r[x] - cluster[-1][x] > 2.0):  # within 2 binades: one label
                xs = np.mean([c[x] for c in cluster])
                ax.annotate(", ".join(str(c[label]) for c in cluster), (xs, yv), textcoords="offset points",
                            xytext=(4, 5), fontsize=7)
                cluster = []
            if r is not None:
                cluster.append(r)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set(xlabel=column_label(x, "log2 scale"), ylabel=column_label(y, "log2 scale"),
           title="range vs precision across formats")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.tight_layout()
    return fig


def loss_curves(losses: pd.DataFrame, entropy: float | None = None, title: str = "loss",
                log_x: bool = False, baseline: str | None = None, controls: Iterable[str] | None = None) -> Figure:
    """Train (thin) and val (markers) cross-entropy per run; dashed line = `entropy`, the unigram entropy of the
    validation tokens (TokenCorpus.unigram_entropy("val"): the one the control check compares with).

    With `baseline` (a label in `losses`), a lower panel shows each run's loss minus the baseline's at the
    same step, which is where differences of 1e-3 nats between near-identical curves become visible. Controls
    (`controls`; default the labels naming CONTROL_MARKERS, e.g. "hp freeze_blocks") stay out of that panel: a
    frozen-blocks control sits ~0.5 nats above and would set its range; the panel names them and their final gap.
    """
    labels = list(dict.fromkeys(losses.label))
    controls = ([lb for lb in labels if any(m in str(lb) for m in CONTROL_MARKERS)] if controls is None
                else [lb for lb in controls if lb in labels])
    left_out = []
    width = FIGSIZE[0] + 1.5 + 0.05 * max((len(str(lb)) for lb in labels), default=0)   # + the legend column
    if baseline is None:
        fig, ax = plt.subplots(figsize=(width, FIGSIZE[1]))
        axd = None
    else:
        fig, (ax, axd) = plt.subplots(2, 1, figsize=(width, 5.5), sharex=True, height_ratios=(2, 1))
    for i, label in enumerate(labels):
        d = losses[losses.label == label]
        tr, va = d[d.split == "train"], d[d.split == "val"]
        if len(tr):
            ax.plot(tr.step, tr.loss, color=f"C{i}", lw=0.8, alpha=0.6, label=f"{label} train")
        if len(va):
            ax.plot(va.step, va.loss, "o-", color=f"C{i}", ms=3, label=f"{label} val")
        if axd is not None and label in controls and label != baseline:
            left_out.append(label)
        elif axd is not None and label != baseline:
            for split, style in (("train", dict(lw=0.8, alpha=0.5)), ("val", dict(marker="o", ms=3))):
                mine = d[d.split == split].set_index("step").loss
                ref = losses[(losses.label == baseline) & (losses.split == split)].set_index("step").loss
                delta = (mine - ref).dropna()
                axd.plot(delta.index, delta.values, color=f"C{i}", label=f"{label} {split}", **style)
    if entropy is not None:
        ax.axhline(entropy, color="k", ls="--", lw=1, label=f"unigram entropy of the val tokens {entropy:.2f}")
    if log_x:
        ax.set_xscale("log")
    ax.set(ylabel="cross-entropy (nats/token)", title=title)
    # one legend for both panels, outside the axes so that it never covers a curve (04 has 9+ runs): a colour
    # per run, then what the line styles mean
    from matplotlib.lines import Line2D
    handles = [Line2D([], [], color=f"C{i}", marker="o", ms=3, label=str(lb)) for i, lb in enumerate(labels)]
    handles += [Line2D([], [], color="k", lw=0.8, alpha=0.6, label="train (every step)"),
                Line2D([], [], color="k", marker="o", ms=3, label="val")]
    if entropy is not None:
        handles.append(Line2D([], [], color="k", ls="--", lw=1,
                              label=f"unigram entropy of the val tokens {entropy:.2f}"))
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    if axd is not None:
        axd.axhline(0, color="k", lw=0.8)
        axd.set(xlabel="step", ylabel=f"loss - {baseline} (nats)")
        axd.xaxis.get_major_locator().set_params(integer=True)   # whole steps (shared with ax)
        if left_out:
            gaps = []
            for lb in left_out:
                d = losses[losses.label == lb]
                split = "val" if (d.split == "val").any() else "train"
                mine = d[d.split == split].set_index("step").loss
                ref = losses[(losses.label == baseline) & (losses.split == split)].set_index("step").loss
                delta = (mine - ref).dropna()
                gaps.append(f"{lb} ({delta.iloc[-1]:+.2f} at step {delta.index[-1]})" if len(delta) else str(lb))
            axd.set_title("not drawn here (controls, off this scale): " + ", ".join(gaps), fontsize=8)
    else:
        ax.set_xlabel("step")
        ax.xaxis.get_major_locator().set_params(integer=True)   # whole steps
    fig.tight_layout()
    return fig


def sqnr_bars(df: pd.DataFrame, title: str = "per-layer SQNR vs FP32",
              cols: Iterable[str] = ("out_sqnr_db", "grad_in_sqnr_db", "grad_w_sqnr_db")) -> Figure:
    """Grouped bars: SQNR (dB) of output, input grad and weight grad for every Linear, in depth order."""
    cols = [c for c in cols if c in df.columns]
    fig, ax = plt.subplots(figsize=(8, 4))
    idx = np.arange(len(df))
    w = 0.8 / max(len(cols), 1)
    finite = df[cols].replace([np.inf, -np.inf], np.nan)
    for i, c in enumerate(cols):
        ax.bar(idx + (i - (len(cols) - 1) / 2) * w, finite[c], width=w, label=COLUMNS.get(c, (c, ""))[0])
    ax.set_xticks(idx, [layer_name(lb) for lb in df.layer], rotation=60, ha="right", fontsize=7)
    ax.set(ylabel="SQNR (dB, higher = closer to FP32)", title=title)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.tight_layout()
    return fig


def bars(values: pd.Series, ylabel: str, title: str, fmt: str = "{:.0f}") -> Figure:
    """Labelled horizontal bar chart (e.g. throughput per run): names on the y axis never collide however long
    they are (03's "fp8_hybrid torchao s0"), values at the bar ends, first entry on top. `ylabel` names the
    quantity (on the value axis, which is horizontal here)."""
    n = len(values)
    fig, ax = plt.subplots(figsize=(8, 1.0 + 0.4 * max(n, 1)))   # >= 850 px at DPI
    pos = np.arange(n)[::-1]
    ax.barh(pos, values.values, color=[f"C{i}" for i in range(n)])
    ax.set_yticks(pos, values.index.astype(str))
    for y, v in zip(pos, values.values):
        if not (isinstance(v, float) and math.isnan(v)):
            ax.annotate(" " + fmt.format(v), (v, y), ha="left", va="center", fontsize=8)
    finite = [float(v) for v in values.values if v == v and abs(v) != math.inf]
    if finite and max(finite) > 0:
        ax.set_xlim(0, max(finite) * 1.18)   # room for the value labels inside the axes
    ax.set(xlabel=ylabel, title=title)
    fig.tight_layout()
    return fig


def paired_gaps(gaps: pd.DataFrame, claims: pd.DataFrame, title: str = "paired gap vs baseline") -> Figure:
    """Per level of a claims table: each seed's paired gap (variant − baseline of the same seed, `gaps` columns
    level, seed, gap_nats) as dots, the mean with its 95 % paired CI (claims gap_lo..gap_hi) as a bar, ±δ shaded."""
    levels = list(claims.level)
    lost = [lv for lv in levels if claims[claims.level == lv].n.iloc[0] > 0
            and not np.isfinite(gaps[gaps.level == lv].gap_nats.to_numpy(float)).any()]
    if lost:   # e.g. seed_gaps computed on a frame without the baseline's rows
        raise ValueError(f"paired_gaps: no finite per-seed gap for {lost}, though the claims table pairs them")
    fig, ax = plt.subplots(figsize=(max(8.0, 1.1 * len(levels) + 2), 3.5))   # >= 850 px at DPI
    for i, lv in enumerate(levels):
        r = claims[claims.level == lv].iloc[0]
        d = gaps[gaps.level == lv]
        ax.scatter(np.full(len(d), i) + np.linspace(-0.12, 0.12, len(d)) if len(d) > 1 else [i] * len(d),
                   d.gap_nats, s=14, color=f"C{i % 10}", alpha=0.7, zorder=3)
        lo, hi = r.gap_lo, r.gap_hi
        yerr = [[r.gap_nats - lo], [hi - r.gap_nats]] if np.isfinite(lo) and np.isfinite(hi) else None
        ax.errorbar([i + 0.25], [r.gap_nats], yerr=yerr, fmt="D", color=f"C{i % 10}", capsize=3, ms=5, zorder=4)
    deltas = claims.delta_nats.dropna()
    if len(deltas):
        ax.axhspan(-float(deltas.iloc[0]), float(deltas.iloc[0]), color="0.9", zorder=0, label="±δ")
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    ax.axhline(0.0, color="0.4", lw=0.8)
    ax.set_xticks(range(len(levels)), [str(lv) for lv in levels], rotation=20, ha="right", fontsize=8)
    ax.set(ylabel="val loss gap vs baseline (nats)", xlabel="recipe (dots: seeds; diamond: mean, 95 % CI)",
           title=title)
    fig.tight_layout()
    return fig


def sqnr_heatmap(df: pd.DataFrame, title: str = "per-layer SQNR vs FP32 (dB)") -> Figure:
    """Heatmap layer x (backend, quantity) of SQNR in dB, annotated; layers in depth order."""
    import seaborn as sns

    quantities = {"out_sqnr_db": "Y", "grad_in_sqnr_db": "dX", "grad_w_sqnr_db": "dW"}
    backends = list(dict.fromkeys(df.backend)) if "backend" in df else [""]
    layers = list(dict.fromkeys(df.layer))
    cols = {}
    for b in backends:
        d = (df[df.backend == b] if b else df).set_index("layer").reindex(layers)
        for q, short in quantities.items():
            if q in d:
                cols[f"{b} {short}".strip()] = d[q].replace([np.inf, -np.inf], np.nan)
    mat = pd.DataFrame(cols).rename(index=layer_name)
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(layers) + 1.5))
    sns.heatmap(mat, annot=True, fmt=".1f", cmap="viridis", cbar_kws={"label": "SQNR (dB)"}, ax=ax,
                annot_kws={"fontsize": 7})
    ax.grid(False)
    ax.set(xlabel="backend and tensor (Y = output, dX = input grad, dW = weight grad)", ylabel="Linear layer",
           title=title)
    ax.tick_params(axis="y", labelsize=7)
    fig.tight_layout()
    return fig


def lr_envelope(trials: pd.DataFrame, by: str = "recipe", title: str = "LR stability envelope") -> Figure:
    """Final validation loss vs learning rate (log x), one line per `by` value (format / recipe), from the trial
    table of `envelope.find_stable_lr` / `lr_sweep`. Unstable trials are marked ×: diverged ones at the top
    edge (they have no final loss), blown-up ones at their loss; dashed lines mark each line's largest stable lr."""
    fig, ax = plt.subplots(figsize=FIGSIZE)
    finite = trials["final_val_loss"][trials["final_val_loss"].map(lambda v: v == v and abs(v) != math.inf)]
    top = float(finite.max()) * 1.05 if len(finite) else 1.0
    for i, (key, g) in enumerate(trials.groupby(by, sort=True)):
        g = g.sort_values("lr")
        color = f"C{i % 10}"
        done = g[g["reason"] != "diverged"]
        ax.plot(done["lr"], done["final_val_loss"], "-", color=color, lw=1, label=str(key))
        ok = g[g["stable"]]
        ax.plot(ok["lr"], ok["final_val_loss"], "o", color=color, ms=4)
        bad = g[~g["stable"] & (g["reason"] != "diverged")]
        ax.plot(bad["lr"], bad["final_val_loss"], "x", color=color, ms=7)
        div = g[g["reason"] == "diverged"]
        ax.plot(div["lr"], [top] * len(div), "x", color=color, ms=7, clip_on=False)
        if len(ok):
            ax.axvline(float(ok["lr"].max()), color=color, ls="--", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("peak learning rate (log scale)")
    ax.set_ylabel("final validation loss (nats/token)")
    ax.set_title(f"{title}: o stable, x unstable (top edge: diverged), -- largest stable lr")
    ax.set_ylim(top=top * 1.02)
    ax.legend(fontsize=8, title=by, title_fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.tight_layout()
    return fig
