"""Tests for altgrad_lib.notebook.plots: every figure is a Figure with labelled axes and a title naming its subject."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from altgrad_lib.notebook import analysis  # noqa: E402
from altgrad_lib.notebook import plots
from altgrad_lib.numerics.formats import format_summary_table  # noqa: E402


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
    rows = []
    for recipe, crit in (("bf16", 0.1), ("fmt:E5M2", 0.01)):
        for lr in (1e-3, 1e-2, 1e-1, 1.0, 10.0):
            reason = "stable" if lr < crit else ("above_initial" if lr < 1 else "diverged")
            rows.append({"recipe": recipe, "lr": lr, "stable": reason == "stable", "reason": reason,
                         "final_val_loss": float("nan") if reason == "diverged" else 5 + lr})
    fig = plots.lr_envelope(pd.DataFrame(rows))
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and len(ax.get_legend().get_texts()) == 2
    assert sorted(ln.get_xdata()[0] for ln in ax.lines if ln.get_linestyle() == "--") == [1e-3, 1e-2]
    _check(fig, "LR stability envelope")


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
    assert sum(len(c.get_offsets()) for c in ax.collections if isinstance(c, PathCollection)) == 6   # 3 seeds x 2 levels
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
