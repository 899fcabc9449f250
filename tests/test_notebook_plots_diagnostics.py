"""Smoke tests for altgrad_lib.notebook.plots_diagnostics on real monitor rows (a few steps of a tiny model)."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pytest
import torch
from matplotlib.figure import Figure

from altgrad_lib.notebook import plots_diagnostics as pd_
from altgrad_lib.notebook.names import metric_name
from altgrad_lib.state import snapshot_state
from altgrad_lib.model import GPT, GPTConfig
from altgrad_lib.monitors import read_diagnostics
from altgrad_lib.monitors.config import DiagnosticsConfig
from altgrad_lib.monitors.diagnostics import Diagnostics
from altgrad_lib.quantize.convert import quantize_model


@pytest.fixture(scope="module")
def df(tmp_path_factory):
    out = tmp_path_factory.mktemp("diag")
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=2, n_head=2, n_embd=16, block_size=8, vocab_size=64))
    quantize_model(model, "fp8_hybrid", verbose=False)
    d = Diagnostics(DiagnosticsConfig(preset="full", interval=1), out, model, grad_clip=1.0)
    d.start(0, None)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(0)
    for step in range(1, 5):
        x = torch.randint(0, 64, (2, 8), generator=g)
        snap = snapshot_state(model)
        opt.zero_grad()
        _, loss = model(x, x)
        loss.backward()
        d.after_backward(step, x, x, snap)
        opt.step()
        d.after_step(step, loss.item(), 1.0, 1e-2)
    d.close()
    return read_diagnostics(out)


def _check(fig: Figure, title_has: str) -> None:
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    assert title_has in ax.get_title()
    if not ax.images and any(t.get_text().endswith(("all zero", "(all NaN)")) or "constant" in t.get_text()
                             for t in ax.texts):
        assert not ax.get_xticks().size   # a constant panel: one line of text, no axes to label
    else:
        assert ax.get_xlabel() and ax.get_ylabel()
    plt.close(fig)


def test_every_figure_draws_real_rows(df):
    layer = "transformer.h.0.mlp.c_fc"
    for metric, role in (("overflow_frac", "dY"), ("underflow_frac", "X"), ("stall_rate", "W"),
                         ("grad_snr_db", None)):
        _check(pd_.layer_step_heatmap(df, metric, role), metric_name(metric))
    _check(pd_.stiffness_field(df, layer), "Stiffness")
    _check(pd_.hist_at_steps(df, layer, "hist.dcode"), "Δcode")
    _check(pd_.hist_at_steps(df, layer, "hist.code", steps=[4]), "code usage")
    _check(pd_.attention_entropy(df), "entropy")
    _check(pd_.kurtosis(df), "Kurtosis")
    with pytest.raises(ValueError, match="no rows for metric"):
        pd_.layer_step_heatmap(df, "nope")


def test_images_have_no_grid_lines_over_their_cells(df):
    plt.rcParams["axes.grid"] = True          # as plots.setup does
    try:
        for fig in (pd_.layer_step_heatmap(df, "overflow_frac", "dY"),
                    pd_.stiffness_field(df, "transformer.h.0.mlp.c_fc")):
            ax = fig.axes[0]
            assert not any(g.get_visible() for g in ax.get_xgridlines() + ax.get_ygridlines())
            plt.close(fig)
    finally:
        plt.rcParams["axes.grid"] = False
