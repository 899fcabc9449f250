"""Notebook 05's figures (notebook/plots_optim.py) pass the figure check and keep one style for both figures."""
from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import pytest

from altgrad_lib.notebook import plots, plots_optim
from altgrad_lib.notebook.figure_check import figure_problems
from altgrad_lib.notebook.optim_view import step_summary

MASTER = "adamw fp32"
PARTS = {"E4M3 adamw fp32": ("E4M3", MASTER), "E4M3 adamw error_feedback_sr": ("E4M3", "adamw error_feedback_sr"),
         "E7M0 adamw fp32": ("E7M0", MASTER), "E7M0 grid_adamw grid_sr": ("E7M0", "grid_adamw grid_sr")}


def _per_step() -> pd.DataFrame:
    rows = []
    for i, label in enumerate(PARTS):
        for step in range(5, 35, 5):
            vis = 0.02 * (i + 1)
            rows.append({"label": label, "step": step, "stall_rate": 0.9 - 0.1 * i, "update_visibility": vis,
                         "mean_abs_dcode": vis * (1 + 0.5 * i), "frac_dcode_1": vis * 0.9, "frac_dcode_ge2": vis * 0.1})
    return pd.DataFrame(rows)


@pytest.fixture(autouse=True)
def _style():
    plots.setup()
    yield
    plt.close("all")


def test_step_curves_pass_the_check_and_style_runs_by_format_and_storage():
    fig = plots_optim.step_curves(_per_step(), PARTS, MASTER)
    assert figure_problems(fig) == []
    lines = {ln.get_label(): ln for ln in fig.axes[0].lines}
    assert lines["E4M3 adamw fp32"].get_color() == lines["E4M3 adamw error_feedback_sr"].get_color()
    assert lines["E4M3 adamw fp32"].get_color() != lines["E7M0 adamw fp32"].get_color()
    assert [lines[k].get_linestyle() for k in PARTS] == ["-", "--", "-", ":"]
    assert fig.axes[0].get_ylabel() == "realized stall: update rounded away (fraction of updated weights)"


def test_ulp_steps_pass_the_check_and_use_the_same_colours():
    per_step = _per_step()
    summary = step_summary(per_step.assign(seed=0), PARTS)
    a, b = "E7M0 grid_adamw grid_sr", "E7M0 adamw fp32"
    fig = plots_optim.ulp_steps(summary, per_step, PARTS, a, b, MASTER)
    assert figure_problems(fig) == []
    curves = plots_optim.step_curves(per_step, PARTS, MASTER)
    colour = {ln.get_label(): ln.get_color() for ln in curves.axes[0].lines}
    assert {ln.get_label(): ln.get_color() for ln in fig.axes[1].lines} == {a: colour[a], b: colour[b]}
    # left: the three shares of run a, 0 codes = 1 - visibility
    heights = [p.get_height() for p in fig.axes[0].patches[:3]]
    assert heights == pytest.approx([1 - 0.08, 0.072, 0.008])


def _storage_claims() -> pd.DataFrame:
    nan = float("nan")
    return pd.DataFrame([
        {"format": "E4M3", "level": "E4M3 adamw error_feedback_sr", "reference": "E4M3 adamw fp32",
         "gap_nats": 0.004, "gap_lo": -0.002, "gap_hi": 0.010, "delta_nats": 0.01},
        {"format": "E7M0", "level": "E7M0 grid_adamw grid_sr", "reference": "E7M0 adamw fp32",
         "gap_nats": 0.30, "gap_lo": 0.21, "gap_hi": 0.39, "delta_nats": 0.01},
        {"format": "E7M0", "level": "E7M0 adamw bf16", "reference": "E7M0 adamw fp32",   # one seed: no CI
         "gap_nats": 0.05, "gap_lo": nan, "gap_hi": nan, "delta_nats": 0.01}])


def test_storage_forest_passes_the_check_with_one_row_per_level():
    fig = plots_optim.storage_forest(_storage_claims(), ["E4M3", "E7M0"], 3)
    assert figure_problems(fig) == []
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == [
        "E4M3 adamw error_feedback_sr  vs adamw fp32", "E7M0 grid_adamw grid_sr  vs adamw fp32",
        "E7M0 adamw bf16  vs adamw fp32"]
    points = [c for c in ax.containers]   # one errorbar container per row, coloured by format
    assert len(points) == 3 and points[1].lines[0].get_color() == points[2].lines[0].get_color()
    assert points[0].lines[0].get_color() != points[1].lines[0].get_color()
