"""Figures of the training monitors: each function takes the tidy table of `monitors.read_diagnostics(run_dir)`
(columns step, layer, role, metric, value) and returns a Figure.

    layer_step_heatmap(df, metric, role)   layer × step image of one metric (overflow, underflow, stall, SNR, ...)
    stiffness_field(df, layer)             log2 ULP histogram of a layer's weights over training
    hist_at_steps(df, layer, prefix)       Δcode ("hist.dcode") or code-usage ("hist.code") bars at chosen steps
    attention_entropy(df, seq_len, reference)  per-head attention entropy over training, against uniform attention
    kurtosis(df)                           excess kurtosis of each Linear's input over training
Conventions as plots.py: labelled axes with units, the metric and role in the title (names.py: human names
for metric keys and layers, one table), modest size.
"""
from __future__ import annotations

from typing import Iterable

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from altgrad_lib.notebook.names import (
    FRACTIONS,
    ROLES,
    layer_name,
    metric_label,
    metric_name,
)

FIGSIZE = (8, 4)


def constant_text(vals: np.ndarray) -> str | None:
    """"all zero" / "constant v" / "not measurable …" when `vals` would draw a one-colour image, else None."""
    fin = vals[np.isfinite(vals)]
    if fin.size and fin.min() != fin.max():
        return None
    return "not measurable at any step (all NaN)" if not fin.size else "all zero" if fin.max() == 0 else \
        f"constant {fin.max():.4g}"


def constant_panel(ax, vals: np.ndarray, what: str) -> bool:
    """Write "all zero" / "constant v" / "not measurable" on `ax` instead of drawing a constant or all-NaN image
    (a one-colour image with a ±0.1 colour bar says nothing, and reads as a scale of negative fractions);
    returns True when it did."""
    text = constant_text(vals)
    if text is None:
        return False
    ax.text(0.5, 0.5, f"{what}: {text}", ha="center", va="center", fontsize=10, transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.grid(False)
    return True


def _select(df: pd.DataFrame, metric: str, role: str | None) -> pd.DataFrame:
    d = df[df["metric"] == metric]
    if role is not None:
        d = d[d["role"] == role]
    if d.empty:
        have = sorted(df["metric"].unique())[:20]
        raise ValueError(f"no rows for metric={metric!r}, role={role!r}; metrics present include {have}")
    return d


def layer_step_heatmap(df: pd.DataFrame, metric: str, role: str | None = None, *, log: bool = False,
                       title: str | None = None) -> Figure:
    """Layer × step image of one metric (NaN = not measurable, drawn blank)."""
    d = _select(df, metric, role)
    order = {lyr: i for i, lyr in enumerate(dict.fromkeys(d["layer"]))}   # depth order, not alphabetical
    d = d.assign(rname=d["layer"].map(layer_name) + np.where(d["role"].ne(""), " " + d["role"], ""))
    rows = d.assign(o=d["layer"].map(order)).sort_values(["o", "role"], kind="stable")["rname"]
    grid = d.pivot_table(index="rname", columns="step", values="value", aggfunc="last", dropna=False)
    grid = grid.reindex(list(dict.fromkeys(rows)))
    names = list(grid.index)
    raw = grid.to_numpy(dtype=float)
    what = ROLES.get(role, role) if role else "all tensors"
    rows_h = 1 if constant_text(raw) is not None else len(grid)   # a one-line note needs no room per layer
    fig, ax = plt.subplots(figsize=(8, max(2.5, 0.28 * rows_h + 1.2)))
    ax.set_title(title or f"{metric_name(metric)} per layer over training ({what})")
    if constant_panel(ax, raw, metric_name(metric)):
        fig.tight_layout()
        return fig
    vals = np.log10(np.where(raw > 0, raw, np.nan)) if log else raw
    # a share is never negative: its colour scale starts at 0 (a log scale has no 0)
    lo = 0.0 if metric in FRACTIONS and not log else None
    im = ax.imshow(vals, aspect="auto", interpolation="nearest", cmap="viridis", vmin=lo)
    ax.grid(False)   # plots.setup turns grids on: lines over an image hide cells
    ax.set_yticks(range(len(grid)), names, fontsize=7)
    steps = grid.columns.to_numpy()
    ticks = np.unique(np.linspace(0, len(steps) - 1, min(8, len(steps))).astype(int))
    ax.set_xticks(ticks, steps[ticks])
    ax.set_xlabel("training step")
    ax.set_ylabel("layer / tensor")
    label = metric_label(metric) if metric_label(metric) != metric else f"{metric} (as logged)"
    fig.colorbar(im, ax=ax, label=f"log10 of {label}" if log else label)
    fig.tight_layout()
    return fig


def _hist_frame(df: pd.DataFrame, layer: str, prefix: str, role: str = "W") -> pd.DataFrame:
    d = df[(df["layer"] == layer) & (df["role"] == role) & df["metric"].str.startswith(prefix + ":")]
    if d.empty:
        raise ValueError(f"no {prefix}:<bin> rows for layer {layer!r}; layers: {sorted(df['layer'].unique())[:12]}")
    d = d.assign(bin=d["metric"].str.slice(len(prefix) + 1))
    return d.pivot_table(index="bin", columns="step", values="value", aggfunc="last").fillna(0.0)


def stiffness_field(df: pd.DataFrame, layer: str) -> Figure:
    """Share of a layer's weights per grid spacing log2 ULP(w·s) at each diagnostic step.

    The monitor (monitors/geometry.py) bins the ULP of the *scaled* weight w·s, in the format's own units, so the
    axis says w·s (the weight's own ULP is ULP(w·s)/s). Rows that hold no weight at any step are cropped: on
    E7M0 the bins run over the whole exponent range, most of it empty."""
    h = _hist_frame(df, layer, "hist.log2ulp")
    h = h.loc[sorted(h.index, key=int)]
    held = np.flatnonzero((h.to_numpy() > 0).any(axis=1))
    if held.size:
        h = h.iloc[held[0]:held[-1] + 1]   # crop the empty ends only: an empty row inside stays visible
    fig, ax = plt.subplots(figsize=(8, 3.5))
    im = ax.imshow(h.to_numpy(), aspect="auto", origin="lower", interpolation="nearest", cmap="magma")
    ax.grid(False)
    ax.set_yticks(range(len(h)), h.index)
    steps = h.columns.to_numpy()
    ticks = np.unique(np.linspace(0, len(steps) - 1, min(8, len(steps))).astype(int))
    ax.set_xticks(ticks, steps[ticks])
    ax.set_xlabel("training step")
    ax.set_ylabel("log2 ULP(w·s) (format units)")
    fig.colorbar(im, ax=ax, label="fraction of weights")
    ax.set_title(f"Stiffness field: grid spacing ULP(w·s) at {layer_name(layer)}'s scaled weights over training")
    fig.tight_layout()
    return fig


def hist_at_steps(df: pd.DataFrame, layer: str, prefix: str = "hist.dcode", steps: Iterable[int] | None = None
                  ) -> Figure:
    """Bars of a histogram metric ("hist.dcode", "hist.code", "hist.log2w") at a few steps (default first/last)."""
    h = _hist_frame(df, layer, prefix)
    try:
        h = h.loc[sorted(h.index, key=int)]
    except ValueError:
        h = h.loc[sorted(h.index, key=lambda b: int(b, 16))]   # codes "0x3A"
    cols = list(steps) if steps is not None else sorted({h.columns.min(), h.columns.max()})
    fig, ax = plt.subplots(figsize=FIGSIZE)
    x = np.arange(len(h))
    w = 0.8 / len(cols)
    for i, s in enumerate(cols):
        ax.bar(x + i * w, h[s].to_numpy(), width=w, label=f"step {s}")
    if prefix == "hist.dcode":
        ax.set_yscale("log")   # 95-100 % of the weights sit at Δcode 0: a linear axis hides every other bar
    step_every = max(1, len(h) // 24)
    ax.set_xticks(x[::step_every] + 0.4 - w / 2, list(h.index)[::step_every], rotation=90 if len(h) > 12 else 0,
                  fontsize=7)
    labels = {"hist.dcode": ("grid steps moved in one optimizer step (Δcode; ends = that or more)", "Δcode"),
              "hist.code": ("code (hex)", "code usage"), "hist.log2w": ("floor(log2 |w|)", "log2|w|"),
              "hist.log2ulp": ("log2 ULP", "stiffness")}
    xl, name = labels.get(prefix, (prefix, prefix))
    ax.set_xlabel(xl)
    ax.set_ylabel("fraction of weights" + (" (log scale)" if prefix == "hist.dcode" else ""))
    ax.set_title(f"{name} histogram of {layer_name(layer)}")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.tight_layout()
    return fig


def _lines(df: pd.DataFrame, metric: str, ylabel: str, title: str, log: bool = False) -> Figure:
    d = _select(df, metric, None)
    fig, ax = plt.subplots(figsize=(FIGSIZE[0] + 2, FIGSIZE[1]))   # + the legend column
    for (layer, role), g in d.groupby(["layer", "role"], sort=True):
        ax.plot(g["step"], g["value"], lw=1, label=f"{layer_name(layer)} {ROLES.get(role, role)}")
    if log:
        ax.set_yscale("symlog")
    ax.set_xlabel("training step")
    ax.xaxis.get_major_locator().set_params(integer=True)   # whole steps
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.tight_layout()
    return fig


def uniform_entropy(seq_len: int) -> float:
    """Mean entropy (nats) of uniform causal attention over `seq_len` positions: row t attends to t tokens with
    entropy ln t, averaged over the rows as monitors/activations.attention_entropy averages."""
    return float(np.mean(np.log(np.arange(1, seq_len + 1))))


def attention_entropy(df: pd.DataFrame, seq_len: int | None = None, reference: float | None = None,
                      reference_label: str = "hp") -> Figure:
    """Per-head attention entropy over training. The y axis spans 0 .. the uniform-attention entropy (`seq_len`
    given) or at least 0 .. the data, so a drift of 0.003 nats stays small; `reference` (e.g. the hp run's final
    mean entropy) is drawn dashed."""
    fig = _lines(df, "attn_entropy", "attention entropy (nats)",
                 "Attention entropy per head (a drop precedes divergence: Zhai et al.)")
    ax = fig.axes[0]
    top = float(np.nanmax(_select(df, "attn_entropy", None)["value"]))
    if seq_len is not None:
        u = uniform_entropy(seq_len)
        ax.axhline(u, color="k", ls=":", lw=1, label=f"uniform attention over T={seq_len} ({u:.2f})")
        top = max(top, u)
    if reference is not None:
        ax.axhline(reference, color="0.3", ls="--", lw=1, label=f"{reference_label} ({reference:.2f})")
        top = max(top, reference)
    ax.set_ylim(0.0, top * 1.08)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return fig


def kurtosis(df: pd.DataFrame) -> Figure:
    return _lines(df, "kurtosis", "excess kurtosis (dimensionless, symlog scale)",
                  "Kurtosis of each Linear's input (outliers)", log=True)

