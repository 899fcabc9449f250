"""Figures of the training monitors: each function takes the tidy table of `monitors.read_diagnostics(run_dir)`
(columns step, layer, role, metric, value) and returns a Figure.

    layer_step_heatmap(df, metric, role)   layer × step image of one metric (overflow, underflow, stall, SNR, ...)
    stiffness_field(df, layer)             log2 ULP histogram of a layer's weights over training
    hist_at_steps(df, layer, prefix)       Δcode ("hist.dcode") or code-usage ("hist.code") bars at chosen steps
    attention_entropy(df)                  per-head attention entropy over training
    kurtosis(df)                           excess kurtosis of each Linear's input over training
Conventions as plots.py: labelled axes with units, the metric and role in the title, modest size.
"""
from __future__ import annotations

from typing import Iterable

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

FIGSIZE = (8, 4)
UNITS = {"overflow_frac": "fraction of elements", "underflow_frac": "fraction of elements (TE: new zeros)",
         "flush_frac": "fraction of elements", "subnormal_frac": "fraction of elements",
         "ctr.sat_frac": "fraction of elements", "ctr.flush_frac": "fraction of elements",
         "stall_rate": "fraction of weights", "moved_frac": "fraction of weights", "staleness": "fraction of weights",
         "grad_snr_db": "dB (vs FP32 shadow)", "grad_cos": "cosine (vs FP32 shadow)", "sqnr_db": "dB",
         "kurtosis": "excess kurtosis", "attn_entropy": "nats", "misalignment_mean": "ULPs",
         "code_entropy_bits": "bits", "capacity_use": "codes used / finite codes", "dead_frac": "fraction of units",
         "grad_norm": "L2 norm", "amax": "max |x|", "scale": "scale s", "mse": "mean squared error",
         "blk_flush_max": "fraction of a block's elements", "blk_log2s_std": "log2 of the block scale"}
ROLE_NAMES = {"X": "input X", "W": "weight W", "dY": "output gradient dY"}


def short_layer(layer: str) -> str:
    """A layer's name for plot labels: "transformer.h.0.attn.c_attn" -> "h.0.a.c_attn"."""
    return layer.replace("transformer.", "").replace(".attn.", ".a.").replace(".mlp.", ".m.")


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
    d = d.assign(row=d["layer"].map(short_layer) + np.where(d["role"].ne(""), "/" + d["role"], ""))
    grid = d.pivot_table(index="row", columns="step", values="value", aggfunc="last", dropna=False)
    vals = grid.to_numpy(dtype=float)
    if log:
        vals = np.log10(np.where(vals > 0, vals, np.nan))
    fig, ax = plt.subplots(figsize=(8, max(2.5, 0.28 * len(grid) + 1.2)))
    im = ax.imshow(vals, aspect="auto", interpolation="nearest", cmap="viridis")
    ax.grid(False)   # plots.setup turns grids on: lines over an image hide cells
    ax.set_yticks(range(len(grid)), grid.index, fontsize=7)
    steps = grid.columns.to_numpy()
    ticks = np.unique(np.linspace(0, len(steps) - 1, min(8, len(steps))).astype(int))
    ax.set_xticks(ticks, steps[ticks])
    ax.set_xlabel("training step")
    ax.set_ylabel("layer / tensor")
    unit = UNITS.get(metric, metric)
    fig.colorbar(im, ax=ax, label=f"log10 {unit}" if log else unit)
    what = ROLE_NAMES.get(role, role) if role else "all tensors"
    ax.set_title(title or f"{metric} per layer over training ({what})")
    fig.tight_layout()
    return fig


def _hist_frame(df: pd.DataFrame, layer: str, prefix: str, role: str = "W") -> pd.DataFrame:
    d = df[(df["layer"] == layer) & (df["role"] == role) & df["metric"].str.startswith(prefix + ":")]
    if d.empty:
        raise ValueError(f"no {prefix}:<bin> rows for layer {layer!r}; layers: {sorted(df['layer'].unique())[:12]}")
    d = d.assign(bin=d["metric"].str.slice(len(prefix) + 1))
    return d.pivot_table(index="bin", columns="step", values="value", aggfunc="last").fillna(0.0)


def stiffness_field(df: pd.DataFrame, layer: str) -> Figure:
    """Share of a layer's weights per grid spacing log2 ULP (in scaled units) at each diagnostic step."""
    h = _hist_frame(df, layer, "hist.log2ulp")
    h = h.loc[sorted(h.index, key=int)]
    fig, ax = plt.subplots(figsize=(8, 3.5))
    im = ax.imshow(h.to_numpy(), aspect="auto", origin="lower", interpolation="nearest", cmap="magma")
    ax.grid(False)
    ax.set_yticks(range(len(h)), h.index)
    steps = h.columns.to_numpy()
    ticks = np.unique(np.linspace(0, len(steps) - 1, min(8, len(steps))).astype(int))
    ax.set_xticks(ticks, steps[ticks])
    ax.set_xlabel("training step")
    ax.set_ylabel("log2 ULP at w·s (grid units)")
    fig.colorbar(im, ax=ax, label="fraction of weights")
    ax.set_title(f"Stiffness field S = ULP(w) of {short_layer(layer)} over training")
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
    step_every = max(1, len(h) // 24)
    ax.set_xticks(x[::step_every] + 0.4 - w / 2, list(h.index)[::step_every], rotation=90 if len(h) > 12 else 0,
                  fontsize=7)
    labels = {"hist.dcode": ("grid steps moved in one optimizer step (Δcode; ends = that or more)", "Δcode"),
              "hist.code": ("code (hex)", "code usage"), "hist.log2w": ("floor(log2 |w|)", "log2|w|"),
              "hist.log2ulp": ("log2 ULP", "stiffness")}
    xl, name = labels.get(prefix, (prefix, prefix))
    ax.set_xlabel(xl)
    ax.set_ylabel("fraction of weights")
    ax.set_title(f"{name} histogram of {short_layer(layer)}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def _lines(df: pd.DataFrame, metric: str, ylabel: str, title: str, log: bool = False) -> Figure:
    d = _select(df, metric, None)
    fig, ax = plt.subplots(figsize=FIGSIZE)
    for (layer, role), g in d.groupby(["layer", "role"], sort=True):
        ax.plot(g["step"], g["value"], lw=1, label=f"{short_layer(layer)}/{role}")
    if log:
        ax.set_yscale("symlog")
    ax.set_xlabel("training step")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    return fig


def attention_entropy(df: pd.DataFrame) -> Figure:
    return _lines(df, "attn_entropy", "entropy (nats)",
                  "Attention entropy per head (a drop precedes divergence: Zhai et al.)")


def kurtosis(df: pd.DataFrame) -> Figure:
    return _lines(df, "kurtosis", "excess kurtosis (symlog)", "Kurtosis of each Linear's input (outliers)", log=True)

