"""Tests for altgrad_lib.notebook.plots: every figure is a Figure with labelled axes and a title naming its subject,
and draws the numbers of the table it is given (checked against the table, and E4M3's grid against ml_dtypes)."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import ml_dtypes
import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from altgrad_lib.notebook import analysis
from altgrad_lib.notebook import plots
from altgrad_lib.numerics.formats import format_summary_table


def _check(fig: Figure, title_has: str | None = None) -> None:
    assert isinstance(fig, Figure)
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert axes
    for ax in axes:
        if not ax.get_yticks().size:
            continue  # a tick strip without a y axis shares the x label of the panel below
        assert ax.get_xlabel() or ax.get_ylabel(), f"unlabelled axes in {fig}"
    if title_has is not None:
        titles = " ".join([ax.get_title() for ax in axes] + [fig._suptitle.get_text() if fig._suptitle else ""])
        assert title_has in titles, titles
    plt.close(fig)


@pytest.mark.parametrize("name", ["E4M3", "E2M2"])
def test_format_figures(name):
    _check(plots.format_grid(name, analysis.binade_counts(name)), name)
    _check(plots.rounding_error(analysis.rounding_error(name, n=500), name), name)
    _check(plots.ulp_stiffness(analysis.ulp_at_grid(name), name), name)
    _check(plots.sr_bias(analysis.sr_bias_variance(name, n_samples=200), name, 200), name)
    ax = plots.rounding_error(analysis.rounding_error(name, n=500), name).axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"


def _positive_e4m3_values() -> np.ndarray:
    """Every positive finite float8_e4m3fn value, from ml_dtypes (the oracle), ascending."""
    v = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    return np.sort(v[np.isfinite(v) & (v > 0)])


def test_format_figures_draw_the_tables_data():
    binades = analysis.binade_counts("E4M3")
    fig = plots.format_grid("E4M3", binades)
    ticks = np.sort([seg[0, 0] for seg in fig.axes[0].collections[0].get_segments()])   # one segment per value
    assert np.array_equal(ticks, _positive_e4m3_values())                     # one tick per positive value
    heights = [p.get_height() for p in fig.axes[1].containers[0]]
    assert heights == binades.n_values.tolist() and sum(heights) == len(ticks) == 126
    plt.close(fig)

    err = analysis.rounding_error("E4M3", n=500)
    fig = plots.rounding_error(err, "E4M3")
    floor = 2.0 ** -(3 + 12)
    rne = fig.axes[0].collections[1].get_offsets()                          # drawn after the SR cloud
    assert np.array_equal(rne[:, 0], err.x) and np.array_equal(rne[:, 1], err.rel_err_rne.clip(lower=floor))
    plt.close(fig)

    ulp = analysis.ulp_at_grid("E4M3")
    fig = plots.ulp_stiffness(ulp, "E4M3")
    up, down = fig.axes[0].lines[:2]
    assert np.array_equal(up.get_ydata(), ulp.ulp_up) and np.array_equal(down.get_ydata(), ulp.ulp_down)
    assert np.array_equal(fig.axes[1].lines[0].get_ydata(), ulp.rel_ulp_up)
    plt.close(fig)

    sr = analysis.sr_bias_variance("E4M3", n_samples=200)
    fig = plots.sr_bias(sr, "E4M3", 200)
    assert [p.get_height() for p in fig.axes[0].containers[0]] == pytest.approx(sr.bias_z.tolist())
    plt.close(fig)


def test_format_tradeoff():
    s = format_summary_table().reset_index()
    fig = plots.format_tradeoff(s, x="dynamic_range_log2", y="values_per_binade", label="format", highlight="E4M3")
    texts = " ".join(t.get_text() for t in fig.axes[0].texts)
    assert "E2M5" in texts and "E4M3" in texts  # every format is labelled (clustered ones share a label)
    _check(fig, "range vs precision")


def test_run_figures():
    rows = [(s, n, 3.0 - 0.1 * s) for s in range(5) for n in ("train/loss", "val/loss")]
    run = type("R", (), {"metrics": pd.DataFrame(rows, columns=["step", "name", "value"]), "dir": "x"})()
    fig = plots.loss_curves(analysis.loss_table({"bf16": run}), entropy=4.0, title="bf16 baseline")
    assert fig.axes[0].get_ylabel().startswith("cross-entropy")
    _check(fig, "bf16")
    sq = pd.DataFrame({"layer": ["a", "b"], "out_sqnr_db": [30.0, 25.0], "grad_in_sqnr_db": [20.0, float("inf")]})
    _check(plots.sqnr_bars(sq, title="fp8_hybrid"), "fp8_hybrid")
    hm = plots.sqnr_heatmap(pd.concat([sq.assign(backend="sim"), sq.assign(backend="torchao")]), title="fp8_hybrid")
    assert [t.get_text() for t in hm.axes[0].get_xticklabels()] == ["sim Y", "sim dX", "torchao Y", "torchao dX"]
    _check(hm, "fp8_hybrid")
    _check(plots.bars(pd.Series({"sim": 100.0, "torchao": 50.0}), "tokens/s", "throughput"), "throughput")


def test_loss_curves_delta_panel():
    rows = [(s, n, 3.0 - 0.1 * s) for s in range(5) for n in ("train/loss", "val/loss")]
    runs = {}
    for label, off in (("bf16", 0.0), ("fp8", 0.01)):
        m = pd.DataFrame([(s, n, v + off) for s, n, v in rows], columns=["step", "name", "value"])
        runs[label] = type("R", (), {"metrics": m, "dir": label})()
    fig = plots.loss_curves(analysis.loss_table(runs), baseline="bf16", title="fp8 vs bf16")
    assert len(fig.axes) == 2 and fig.axes[1].get_ylabel() == "loss - bf16 (nats)"
    y = next(ln for ln in fig.axes[1].lines if ln.get_label() == "fp8 val").get_ydata()
    assert y == pytest.approx([0.01] * 5)
    _check(fig, "fp8 vs bf16")


def test_lr_envelope():
    from helpers import lr_envelope_trials

    fig = plots.lr_envelope(lr_envelope_trials())
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and len(ax.get_legend().get_texts()) == 2
    assert sorted(ln.get_xdata()[0] for ln in ax.lines if ln.get_linestyle() == "--") == [1e-3, 1e-2]
    _check(fig, "LR stability envelope")


def _boxes_overlap(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def test_loss_curves_legend_never_covers_the_curves():
    """Notebook 04: 8 runs x train/val; the legend sat on the curves. Checked on the drawn figure:
    the legend's box lies outside every axes' box."""
    rows = [(s, n, 8.0 - 0.02 * s) for s in range(51) for n in ("train/loss", "val/loss") if n == "train/loss" or
            s % 25 == 0]
    runs = {lb: type("R", (), {"metrics": pd.DataFrame(rows, columns=["step", "name", "value"]), "dir": lb})()
            for lb in ("hp", "hp control", "E4M3", "E5M2", "E3M4", "E2M5", "E1M6", "E7M0")}
    fig = plots.loss_curves(analysis.loss_table(runs), entropy=6.26, title="formats vs hp", baseline="hp")
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    legends = [lg for ax in fig.axes for lg in ([ax.get_legend()] if ax.get_legend() else [])]
    assert len(legends) == 1
    box = legends[0].get_window_extent(r)
    assert not any(_boxes_overlap(box, ax.get_window_extent(r)) for ax in fig.axes)
    assert box.x1 <= fig.bbox.x1 + 1   # and it is not cut off
    texts = [t.get_text() for t in legends[0].get_texts()]
    assert texts[:8] == list(runs) and "val" in texts and "unigram entropy of the val tokens 6.26" in texts
    _check(fig, "formats vs hp")


def test_bars_labels_do_not_overlap():
    """Notebook 03's throughput bars: long variant names ran into each other. Checked on the drawn
    figure: no two tick labels and no value label and title share pixels, and every value label is inside."""
    tps = pd.Series({"hp s0": 35725.0, "hp control s0": 38534.0, "fp8_hybrid sim s0": 16460.0,
                     "fp8_hybrid torchao s0": 15250.0})
    fig = plots.bars(tps, "tokens / s", "throughput per variant")
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    ax = fig.axes[0]
    ticks = [t.get_window_extent(r) for t in ax.get_yticklabels() + ax.get_xticklabels() if t.get_text()]
    values = [t.get_window_extent(r) for t in ax.texts]
    assert len(values) == 4
    boxes = ticks + values + [ax.title.get_window_extent(r)]
    assert not any(_boxes_overlap(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    axbox = ax.get_window_extent(r)
    assert all(axbox.x0 <= v.x0 and v.x1 <= axbox.x1 for v in values)
    _check(fig, "throughput")
def test_paired_gaps_draws_each_seed_and_the_ci():
    from altgrad_lib.studies import claims
    rows = [{"label": lab, "seed": s, "freeze_blocks": fb, "final_val_loss": 5.0 + 0.1 * s + off}
            for s in range(3) for lab, fb, off in (("hp", False, 0.0), ("hp", True, 0.5), ("a", False, 0.05 + 0.01 * s),
                                                   ("b", False, 0.001 * (-1) ** s))]
    frame = pd.DataFrame(rows)
    t = claims.claims_table(frame, "label", "hp")
    gaps = claims.seed_gaps(frame[~frame.freeze_blocks], "label", "hp").rename(columns={"label": "level"})
    fig = plots.paired_gaps(gaps[gaps.level != "hp"], t, title="paired gaps")
    ax = fig.axes[0]
    from matplotlib.collections import PathCollection
    # 3 seeds x 2 levels
    assert sum(len(c.get_offsets()) for c in ax.collections if isinstance(c, PathCollection)) == 6
    _check(fig, "paired gaps")


def test_paired_gaps_refuses_gaps_without_the_baseline():
    """seed_gaps on a frame that lacks the baseline's rows gives NaN gaps: an empty figure would hide that."""
    from altgrad_lib.studies import claims
    rows = [{"label": lab, "seed": s, "final_val_loss": 5.0 + off} for s in range(2)
            for lab, off in (("hp", 0.0), ("a", 0.05 + 0.01 * s))]
    frame = pd.DataFrame(rows)
    t = claims.claims_table(frame, "label", "hp", delta=0.01)
    bad = claims.seed_gaps(frame[frame.label == "a"], "label", "hp").rename(columns={"label": "level"})
    with pytest.raises(ValueError, match="no finite per-seed gap for \\['a'\\]"):
        plots.paired_gaps(bad, t)
