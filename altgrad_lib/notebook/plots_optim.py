"""Notebook 05's figures of the optimizer statistics (optim_view's frames), one style for both: a colour per weight
format, a line style per storage mode (solid: the FP32 master, dashed: error feedback, dotted: the others).

    step_curves(per_step, parts, master)   stall rate and update visibility over training, one line per run
    ulp_steps(summary, per_step, parts, a, b, master)   the codes moved per weight and step, and the mean step in
                                          ULPs over training, of two runs on one grid
"""
from __future__ import annotations

from typing import Mapping

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from altgrad_lib.notebook.names import metric_label


def run_style(parts: Mapping[str, tuple[str, str]], master: str) -> dict[str, dict]:
    """label -> plot keywords: colour by format (first appearance in `parts`), line style by storage mode."""
    formats = list(dict.fromkeys(f for f, _ in parts.values()))
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    colors = {f: cycle[i % len(cycle)] for i, f in enumerate(formats)}
    return {lb: dict(color=colors[f], ls="-" if v == master else "--" if "error_feedback" in v else ":")
            for lb, (f, v) in parts.items()}


def step_curves(per_step: pd.DataFrame, parts: Mapping[str, tuple[str, str]], master: str) -> Figure:
    """Left: stall rate (updates rounded away); right: update visibility (stored values changed per step, log y);
    means over seeds at each logged step. The two are not complements: the stall rate counts only coordinates
    whose update was non-zero."""
    style = run_style(parts, master)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4), sharex=True)
    for label in dict.fromkeys(per_step.label):
        c = per_step[per_step.label == label]
        for ax, m in zip(axes, ("stall_rate", "update_visibility")):
            ax.plot(c.step, c[m], label=label, lw=1, marker=".", ms=3, **style[label])
    axes[0].set_title("stall rate (updates rounded away)")
    axes[1].set_title("update visibility (stored values changed per step)")
    axes[0].set_ylabel(metric_label("optim/stall_rate"))
    axes[1].set_ylabel(metric_label("optim/update_visibility"))
    axes[0].set_ylim(-0.02, 1.02)
    if (per_step.update_visibility > 0).any():
        axes[1].set_yscale("log")
    for ax in axes:
        ax.set_xlabel("training step")
        ax.xaxis.get_major_locator().set_params(integer=True)   # whole steps
    axes[1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    return fig


def ulp_steps(summary: pd.DataFrame, per_step: pd.DataFrame, parts: Mapping[str, tuple[str, str]], a: str, b: str,
              master: str) -> Figure:
    """Left: the share of weights moved by 0, 1 and >= 2 codes per step (mean over training and seeds, log y);
    right: mean |Δcode| per weight and step over training (under SR: the mean step in ULPs). Runs `a` and `b`."""
    style = run_style(parts, master)
    fig, (axd, axs) = plt.subplots(1, 2, figsize=(12, 3.8))
    for i, lb in enumerate((a, b)):
        s = summary.loc[lb]
        shares = [1 - s.update_visibility, s.frac_dcode_1, s.frac_dcode_ge2]
        axd.bar(np.arange(3) + 0.4 * i, shares, width=0.4, label=lb, color=style[lb]["color"],
                hatch=None if i == 0 else "//", edgecolor="white" if i == 0 else "k", alpha=1 if i == 0 else 0.6)
        c = per_step[per_step.label == lb]
        axs.plot(c.step, c.mean_abs_dcode, marker=".", label=lb, **style[lb])
    axd.set_xticks(np.arange(3) + 0.2, ["0 codes", "1 code", "≥ 2 codes"])
    axd.set_yscale("log")
    axd.set_ylabel("share of weights per step (fraction of weights)")
    axd.set_title(f"{parts[a][0]}: codes moved per weight and step")
    # which bar is which run: below the axis, where it covers no bar
    axd.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncols=2, frameon=False)
    axs.set_yscale("log")
    axs.set_xlabel("training step")
    axs.xaxis.get_major_locator().set_params(integer=True)   # whole steps
    axs.set_ylabel(metric_label("optim/mean_abs_dcode"))
    axs.set_title(f"{parts[a][0]}: step size in ULPs over training")
    axs.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    return fig


def storage_forest(claims: pd.DataFrame, formats: list[str], n_seeds: int) -> Figure:
    """Notebook 05's claims as a forest: one row per (storage mode x weight format) level, its paired gap to the
    reference of the same seed with the 95 % CI (claims' gap_lo / gap_hi; none at one seed) and the row's ±δ as a
    grey band; colour by weight format (claims' `format` column)."""
    fig, ax = plt.subplots(figsize=(9, 0.4 * len(claims) + 1.6))
    colors = dict(zip(formats, plt.rcParams["axes.prop_cycle"].by_key()["color"] * 3))
    for y, r in enumerate(claims.itertuples()):
        err = None if np.isnan(r.gap_lo) else [[r.gap_nats - r.gap_lo], [r.gap_hi - r.gap_nats]]
        ax.errorbar([r.gap_nats], [y], xerr=err, fmt="o", capsize=3, color=colors[r.format])
        if np.isfinite(r.delta_nats):   # the equivalence margin of this row
            ax.plot([-r.delta_nats, r.delta_nats], [y, y], color="0.7", lw=6, alpha=0.5, zorder=0)
    ax.axvline(0, color="k", lw=1)
    ax.set_yticks(range(len(claims)),
                  [f"{r.level}  vs {r.reference.removeprefix(r.format + ' ')}" for r in claims.itertuples()])
    ax.invert_yaxis()
    ax.set_xlabel("final val loss − reference of the same seed (nats/token)")
    ax.set_title(f"storage mode × weight format against the FP32-master run ({n_seeds} seed(s))\n"
                 "bars: paired 95 % CI; grey: ±δ")
    return fig
