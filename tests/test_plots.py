"""Tests for altgrad_lib.plots: every figure is a Figure with labelled axes and a title naming its subject."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from altgrad_lib import analysis, plots  # noqa: E402
from altgrad_lib.formats import format_summary_table  # noqa: E402


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
    num = [c for c in s.columns if pd.api.types.is_numeric_dtype(s[c])]
    label = "name" if "name" in s.columns else s.columns[0]
    _check(plots.format_tradeoff(s, num[0], num[1], label=label))


def test_run_figures():
    rows = [(s, n, 3.0 - 0.1 * s) for s in range(5) for n in ("train/loss", "val/loss")]
    run = type("R", (), {"metrics": pd.DataFrame(rows, columns=["step", "name", "value"]), "dir": "x"})()
    fig = plots.loss_curves(analysis.loss_table({"bf16": run}), entropy=4.0, title="bf16 baseline")
    assert fig.axes[0].get_ylabel().startswith("cross-entropy")
    _check(fig, "bf16")
    sq = pd.DataFrame({"layer": ["a", "b"], "out_sqnr_db": [30.0, 25.0], "grad_in_sqnr_db": [20.0, float("inf")]})
    _check(plots.sqnr_bars(sq, title="fp8_hybrid"), "fp8_hybrid")
    _check(plots.bars(pd.Series({"sim": 100.0, "torchao": 50.0}), "tokens/s", "throughput"), "throughput")
