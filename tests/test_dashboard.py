"""Tests for altgrad_lib.dashboard: figures draw what the frames hold (checked on the artists), the widgets'
callbacks redraw when driven programmatically, and the next-GPU-hour table counts runs by hand."""
from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from altgrad_lib import dashboard  # noqa: E402


def _metrics():
    rows = []
    for recipe, off in (("bf16", 0.0), ("fp8", 0.5)):
        for seed in (0, 1):
            for step in (0, 10, 20):
                rows.append(("%s-s%d" % (recipe, seed), recipe, seed, step, "val/loss", 5 - step / 10 + off + seed))
                rows.append(("%s-s%d" % (recipe, seed), recipe, seed, step, "train/grad_norm", 1 + seed))
    return pd.DataFrame(rows, columns=["run", "recipe", "seed", "step", "name", "value"])


def test_curves_plot_the_seed_mean_per_level():
    fig = dashboard.curves(_metrics(), "val/loss", "recipe")
    lines = fig.axes[0].get_lines()
    assert [ln.get_label() for ln in lines] == ["recipe=bf16 (n=2)", "recipe=fp8 (n=2)"]
    np.testing.assert_allclose(lines[0].get_ydata(), [5.5, 4.5, 3.5])     # mean of seeds 0 and 1
    np.testing.assert_allclose(lines[1].get_ydata(), [6.0, 5.0, 4.0])


def test_dashboard_callbacks_redraw():
    pytest.importorskip("ipywidgets")
    d = dashboard.Dashboard(_metrics(), ["recipe", "seed"])
    assert d.fig.axes[0].get_ylabel() == "val/loss"
    d.metric.value = "train/grad_norm"                                   # widget callback -> redraw
    assert d.fig.axes[0].get_ylabel() == "train/grad_norm"
    d.hue.value = "seed"
    assert [ln.get_label() for ln in d.fig.axes[0].get_lines()] == ["seed=0 (n=2)", "seed=1 (n=2)"]
    d.filters["recipe"].value = "fp8"
    assert set(d.selection().recipe) == {"fp8"}
    assert [ln.get_label() for ln in d.fig.axes[0].get_lines()] == ["seed=0 (n=1)", "seed=1 (n=1)"]


def test_parallel_coordinates_scale_and_name_missing_columns():
    f = pd.DataFrame({"recipe": ["a", "a", "b"], "loss": [1.0, 3.0, 4.0], "gn": [1.0, 1.0, 2.0],
                      "overflow": [math.nan] * 3})
    fig = dashboard.parallel_coordinates(f, "recipe", ["loss", "gn", "overflow", "stall"])
    lines = fig.axes[0].get_lines()
    np.testing.assert_allclose(lines[0].get_ydata(), [0, 0])                # a: loss 2, gn 1 = the minima
    np.testing.assert_allclose(lines[1].get_ydata(), [1, 1])                # b: loss 4, gn 2 = the maxima
    assert "not recorded: overflow, stall" in fig.axes[0].get_title()


def test_next_gpu_hour_counts():
    idx = pd.DataFrame({"run": list("abcd"), "recipe": ["x", "x", "y", "y"], "seed": [0, 1, 0, 1],
                        "status": ["completed", "completed", "completed", "diverged"],
                        "diverged_at_step": [math.nan, math.nan, math.nan, 7.0],
                        "final_val_loss": [3.0, 3.2, 2.9, math.nan]})
    ev = pd.DataFrame({"run": ["d", "d"], "step": [5, 6]})
    t = dashboard.next_gpu_hour(idx, ["recipe"], ev).set_index("recipe")
    assert t.loc["x", "verdict"] == "stable" and t.loc["x", "mean_final_val_loss"] == pytest.approx(3.1)
    assert t.loc["y", "verdict"] == "diverges" and t.loc["y", "first_divergence_step"] == 7
    assert t.loc["y", "warning_lead_steps"] == 2


def test_layer_heatmap_and_export(tmp_path):
    diag = pd.DataFrame({"step": [0, 0, 10, 10], "layer": ["h.0", "h.1"] * 2, "role": "weight", "metric": "rms",
                         "value": [1.0, 2.0, 3.0, 4.0]})
    fig = dashboard.layer_heatmap(diag, "rms")
    np.testing.assert_allclose(fig.axes[0].images[0].get_array(), [[1, 3], [2, 4]])
    paths = dashboard.export_figures({"heat": fig}, tmp_path)
    assert sorted(p.name for p in paths) == ["heat.png", "heat.svg"] and all(p.stat().st_size > 0 for p in paths)


def test_diagnostic_summary_by_hand_and_run_files(tmp_path):
    d = pd.DataFrame({"step": [0, 0, 10, 10, 10, 10, 20],
                      "layer": ["a", "b", "a", "b", "a", "b", "a"], "role": ["X", "X", "X", "X", "W", "W", "W"],
                      "metric": ["overflow_frac", "overflow_frac", "overflow_frac", "overflow_frac",
                                 "log2S_mean", "log2S_mean", "stall_rate"],
                      "value": [0.5, 0.7, 0.1, 0.3, -6.0, -8.0, 0.25]})
    t = dashboard.diagnostic_summary({"r": d}).set_index("run")
    assert t.loc["r", "overflow_rate"] == pytest.approx(0.2)        # step 10 (its last), mean of 0.1 and 0.3
    assert t.loc["r", "stiffness_var"] == pytest.approx(1.0)        # population variance of -6, -8
    assert t.loc["r", "stall_rate"] == pytest.approx(0.25)
    assert math.isnan(dashboard.diagnostic_summary({"q": d[d.metric == "stall_rate"]}).overflow_rate.iloc[0])
    (tmp_path / "r1").mkdir()
    (tmp_path / "r1" / "events.csv").write_text("step,kind,layer,value,threshold\n3,unavailable:dY,,,\n9,loss_spike,,5.0,4.0\n")
    idx = pd.DataFrame({"run": ["r1", "r2"], "run_dir": [str(tmp_path / "r1"), str(tmp_path / "r2")]})
    ev = dashboard.read_run_files(idx, "events.csv")
    assert list(ev) == ["r1"]
    w = dashboard.warning_events(ev)
    assert w.step.tolist() == [9] and w.run.tolist() == ["r1"]
    assert dashboard.warning_events({}) is None
