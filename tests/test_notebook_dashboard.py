"""Tests for altgrad_lib.notebook.dashboard: figures draw what the frames hold (checked on the artists), the widgets'
callbacks redraw when driven programmatically, and the next-GPU-hour table counts runs by hand."""
from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd
import pytest

from altgrad_lib.notebook import dashboard


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
    assert d.fig.axes[0].get_ylabel() == "validation loss (nats/token)"   # names.METRICS, not the raw key
    d.metric.value = "train/grad_norm"                                   # widget callback -> redraw
    assert d.fig.axes[0].get_ylabel() == "gradient norm before clipping (L2 norm)"
    d.hue.value = "seed"    # colour by seed: still one line per configuration (recipe), never two recipes pooled
    assert [ln.get_label() for ln in d.fig.axes[0].get_lines()] == [
        "seed=0 | bf16 (n=1)", "seed=0 | fp8 (n=1)", "seed=1 | bf16 (n=1)", "seed=1 | fp8 (n=1)"]
    d.filters["recipe"].value = "fp8"
    assert set(d.selection().recipe) == {"fp8"}
    assert [ln.get_label() for ln in d.fig.axes[0].get_lines()] == ["seed=0 (n=1)", "seed=1 (n=1)"]


def _study_with_control():
    """A study frame as 06 builds it: hp and fp8 over 2 seeds, plus hp's frozen-blocks control (much worse), and an
    optimizer axis on top: 4 configurations, none of which may be pooled with another."""
    rows = []
    for recipe, fb, opt, off in (("hp", False, "adamw", 0.0), ("hp", True, "adamw", 2.0), ("fp8", False, "adamw", 0.1),
                                 ("fp8", False, "madam", 0.3)):
        for seed in (0, 1):
            run = f"{recipe}-{fb}-{opt}-s{seed}"
            for step in (0, 10):
                rows.append((run, recipe, fb, opt, seed, step, "val/loss", 5 - step / 10 + off + 0.01 * seed))
    return pd.DataFrame(rows, columns=["run", "recipe", "freeze_blocks", "optimizer", "seed", "step", "name", "value"])


def test_every_grouping_keeps_the_control_apart():
    m = _study_with_control()
    keys = ["recipe", "freeze_blocks", "optimizer", "seed"]
    configs = m.groupby(["recipe", "freeze_blocks", "optimizer"]).run.unique().map(frozenset)
    for hue in keys:
        assert dashboard.group_keys(m, hue, keys)[0] == hue
        fig = dashboard.curves(m, "val/loss", hue, keys=keys)
        lines = fig.axes[0].get_lines()
        n_lines = m.groupby(dashboard.group_keys(m, hue, keys)).ngroups
        assert len(lines) == n_lines >= 4, hue
        hp = [ln for ln in lines if ln.get_label().startswith("recipe=hp (")]
        assert not hp or len(hp) == 1 and np.allclose(hp[0].get_ydata(), [5.005, 4.005])   # the control not in it
    # each group of group_keys holds runs of exactly one configuration
    for hue in keys:
        for _, g in m.groupby(dashboard.group_keys(m, hue, keys)):
            assert any(set(g.run.unique()) <= c for c in configs)
    labels = dashboard.config_label(m.drop_duplicates("run"), ["recipe", "freeze_blocks", "optimizer"])
    assert sorted(set(labels)) == ["fp8 adamw", "fp8 madam", "hp adamw", "hp freeze_blocks adamw"]
    table = dashboard.next_gpu_hour(m.drop_duplicates("run").assign(status="completed", diverged_at_step=np.nan,
                                                                    final_val_loss=1.0),
                                    ["recipe", "freeze_blocks", "optimizer"])
    assert len(table) == 4 and (table.runs == 2).all()
    fig = dashboard.Dashboard(m, keys).fig if _has_widgets() else dashboard.curves(m, "val/loss", "recipe", keys=keys)
    assert len(fig.axes[0].get_lines()) == 4   # the dashboard's default view: colour by recipe, 4 configurations


def _has_widgets():
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        return False
    return True


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
    (tmp_path / "r1" / "events.csv").write_text("step,kind,layer,value,threshold\n3,unavailable:dY,,,\n"
                                                "9,loss_spike,,5.0,4.0\n")
    idx = pd.DataFrame({"run": ["r1", "r2"], "run_dir": [str(tmp_path / "r1"), str(tmp_path / "r2")]})
    ev = dashboard.read_run_files(idx, "events.csv")
    assert list(ev) == ["r1"]
    w = dashboard.warning_events(ev)
    assert w.step.tolist() == [9] and w.run.tolist() == ["r1"]
    assert dashboard.warning_events({}) is None


def _diag_with_hists():
    rows = []
    for step in (5, 10):
        for layer, shift in (("h.0.mlp.c_fc", 0), ("h.0.attn.c_attn", 1)):
            rows += [(step, layer, "W", f"hist.log2w:{k}", v) for k, v in ((-4 - shift, 0.25), (-3 - shift, 0.75))]
            rows += [(step, layer, "weight", "grad_norm", 0.1 * step + shift), (step, layer, "bias", "grad_norm", 9.0)]
    rows.append((5, "h.0.mlp.c_fc", "X", "ctr.sat_frac", 0.0))   # other metrics are ignored
    return pd.DataFrame(rows, columns=["step", "layer", "role", "metric", "value"])


def _lines_by_label(ax):
    return {ln.get_label(): (list(ln.get_xdata()), list(ln.get_ydata())) for ln in ax.get_lines()}


def test_drilldown_figure_draws_the_rows_and_names_missing_data():
    fig = dashboard.drilldown(_diag_with_hists(), "E4M3")
    w, g = _lines_by_label(fig.axes[0]), _lines_by_label(fig.axes[1])
    assert w == {"block 0 attn QKV (step 10)": ([-5, -4], [0.25, 0.75]),          # labels: names.layer_name
                 "block 0 MLP up (step 10)": ([-4, -3], [0.25, 0.75])}
    assert g["block 0 MLP up"] == ([5, 10], [0.5, 1.0]) and g["block 0 attn QKV"] == ([5, 10], [1.5, 2.0])  # no bias
    one = _lines_by_label(dashboard.drilldown(_diag_with_hists(), "E4M3", layer="h.0.mlp.c_fc").axes[0])
    assert set(one) == {"block 0 MLP up (step 10)", "block 0 MLP up (step 5)"}   # one layer: first step too
    empty = dashboard.drilldown(None, "hp")
    texts = [t.get_text() for ax in empty.axes for t in ax.texts]
    assert any("no weight histograms" in t for t in texts) and any("no per-layer gradient norms" in t for t in texts)
    assert dashboard.drilldown_layers(_diag_with_hists()) == ["h.0.attn.c_attn", "h.0.mlp.c_fc"]
    assert dashboard.drilldown_layers(None) == []


def test_drilldown_callbacks_redraw_and_static_figures():
    pytest.importorskip("ipywidgets")
    d = dashboard.DrillDown({"E4M3": _diag_with_hists(), "hp": None}, runs={"E4M3": "fmt-s0-abc"})
    assert d.fig._suptitle.get_text() == "E4M3 (fmt-s0-abc)"
    assert list(d.layer.options) == [dashboard.ALL, "h.0.attn.c_attn", "h.0.mlp.c_fc"]
    d.layer.value = "h.0.attn.c_attn"                                       # widget callback -> redraw
    assert set(_lines_by_label(d.fig.axes[1])) == {"block 0 attn QKV"}
    d.config.value = "hp"                                                   # no diagnostics: layers reset, message
    assert list(d.layer.options) == [dashboard.ALL] and d.layer.value == dashboard.ALL
    assert d.fig._suptitle.get_text() == "hp"
    assert any("no weight histograms" in t.get_text() for t in d.fig.axes[0].texts)
    figs = d.show(static=True)                                              # papermill: one figure per format
    assert list(figs) == ["E4M3", "hp"] and len(figs["E4M3"].axes[0].get_lines()) == 2
    with pytest.raises(ValueError, match="no configurations"):
        dashboard.DrillDown({})


def test_a_saved_dashboard_shows_one_line_not_its_widgets_repr():
    """What a saved or untrusted notebook shows for a dashboard is its text form: one line saying how to get the
    interactive view, not `VBox(children=(HBox(...`."""
    import ipywidgets as w

    from altgrad_lib.notebook.dashboard import LIVE_NOTE, live_box

    box = live_box(w, [w.HBox([w.Dropdown(options=["a", "b"])])])
    assert isinstance(box, w.VBox) and repr(box) == LIVE_NOTE and "VBox(" not in repr(box)
    assert box._repr_mimebundle_()["text/plain"] == LIVE_NOTE


def test_shown_paths_carry_no_machine_directory(tmp_path, monkeypatch):
    from altgrad_lib.paths import shown

    monkeypatch.setenv("ALTGRAD_OUTPUTS", str(tmp_path))
    assert shown(tmp_path / "studies" / "x" / "study.csv") == "<outputs>/studies/x/study.csv"
    assert shown("/elsewhere/file.csv") == "/elsewhere/file.csv"


def test_curves_by_config_name_each_configuration_once():
    """Notebook 06 drew "config=hp freeze_blocks | hp freeze_blocks (n=2)": the config label already names every key."""
    m = _study_with_control()
    keys = ["recipe", "freeze_blocks", "optimizer"]
    m["config"] = dashboard.config_label(m, keys)
    fig = dashboard.curves(m, "val/loss", "config", keys=keys)
    labels = sorted(ln.get_label() for ln in fig.axes[0].get_lines())
    names = [lb.rsplit(" (n=", 1)[0] for lb in labels]
    assert names == ["fp8 adamw", "fp8 madam", "hp adamw", "hp freeze_blocks adamw"]


def test_heatmap_plan_draws_varying_metrics_and_names_constant_ones():
    """06's layer x step section drew four "overflow: all zero" panels while underflow varied: a constant panel is
    text, the panels go to the telling metrics that vary, in their order; other metrics are not drawn."""
    rows = []
    for step in (1, 2, 3):
        for layer in ("h.0.attn.c_attn", "h.0.mlp.c_fc"):
            rows += [{"step": step, "layer": layer, "role": "x", "metric": "overflow_frac", "value": 0.0},
                     {"step": step, "layer": layer, "role": "x", "metric": "sqnr_db", "value": 30.0 - step},
                     {"step": step, "layer": layer, "role": "x", "metric": "underflow_frac", "value": 0.01 * step},
                     {"step": step, "layer": layer, "role": "x", "metric": "amax", "value": float(step + len(layer))}]
    diag = pd.DataFrame(rows)
    hp = diag[diag.metric == "amax"]                        # a run that records no format metric
    drawn, constant = dashboard.heatmap_plan({"r1": diag, "r2": hp}, {"E1M6": "r1", "hp": "r2"})
    assert drawn == [("underflow_frac", "E1M6", "r1"), ("sqnr_db", "E1M6", "r1")]
    assert constant == [("overflow_frac", "E1M6", "all zero")]
    drawn, constant = dashboard.heatmap_plan({"r1": diag}, {"E1M6": "r1"}, n_metrics=1)
    assert drawn == [("underflow_frac", "E1M6", "r1")] and constant == []
    drawn, _ = dashboard.heatmap_plan({"r1": diag}, {"E1M6": "r1"}, n_figures=1)
    assert drawn == [("underflow_frac", "E1M6", "r1")]
    assert dashboard.heatmap_plan({}, {}) == ([], [])
