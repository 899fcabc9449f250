"""monitors/manifold.py: constraint residuals, svdvals, the optimizer's NS / dual-ascent residuals and the
constraint-violation budget, in the run's diagnostics.csv / events.csv (tiny runs)."""
from __future__ import annotations

import pytest
import torch

from altgrad_lib.monitors.config import DiagnosticsConfig
from altgrad_lib.monitors.writer import read_diagnostics, read_events
from altgrad_lib.numerics.matrix import gram_residual, sphere_residual, stiefel_scale
from altgrad_lib.training.checkpoint import load_checkpoint
from altgrad_lib.training.loop import TrainConfig, train

TINY = dict(n_layer=1, n_head=2, n_embd=32, block_size=32, batch_size=4, max_docs=50, tokenizer="gpt2-512",
            max_steps=2, warmup_steps=1, eval_interval=0, eval_iters=1, ckpt_interval=0, lr=2e-3)
LAYERS = {f"transformer.h.0.{m}" for m in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")}


def test_settings_and_their_one_line_errors():
    c = DiagnosticsConfig.from_value({"preset": "off", "manifold_interval": 5, "constraint_budget": "1e-3"})
    assert c.active_groups == ("manifold",) and c.interval_of("manifold") == 5 and c.constraint_budget == 1e-3
    assert "manifold@5" in c.short_str()
    assert "manifold" not in DiagnosticsConfig.from_value("full").active_groups      # in no preset
    for bad in ({"manifold_interval": -1}, {"constraint_budget": -0.5}, {"constraint_budget": "lots"}):
        with pytest.raises(ValueError) as e:
            DiagnosticsConfig.from_value({"preset": "off", **bad})
        assert "\n" not in str(e.value)


def test_unconstrained_run_rows_are_the_weights_residuals_and_no_event(tmp_path):
    """AdamW (no constraint): orth_residual / sphere_residual / sigma_max at the last step equal those recomputed
    from the final checkpoint's weights (numerics/matrix.py, torch.linalg.svdvals); a budget without a constraint
    raises no event."""
    cfg = TrainConfig.from_dict({**TINY, "out_dir": str(tmp_path), "optimizer": "adamw",
                                 "diagnostics": {"preset": "off", "manifold_interval": 1, "constraint_budget": 1e-9}})
    run = train(cfg, verbose=False, progress=False)
    d = read_diagnostics(run.dir)
    last = d[d.step == 2].set_index(["layer", "metric"])["value"]
    assert {lay for lay, _ in last.index} == LAYERS
    w = load_checkpoint(run.ckpt_path, cfg.config_hash())["model"]
    for layer in LAYERS:
        t = w[f"{layer}.weight"]
        assert last[(layer, "orth_residual")] == pytest.approx(gram_residual(t, stiefel_scale(t.shape)).item())
        assert last[(layer, "sphere_residual")] == pytest.approx(sphere_residual(t).item())
        assert last[(layer, "sigma_max")] == pytest.approx(torch.linalg.svdvals(t)[0].item())
    assert read_events(run.dir).empty


def test_manifold_muon_run_writes_dual_residuals_and_budget_events(tmp_path):
    """manifold_muon keeps orth_residual at fp32 rounding: a budget below that (1e-9) is crossed by every matrix at
    every measured step, one above it (1e-3) never."""
    rows = {}
    for budget in (1e-9, 1e-3):
        cfg = TrainConfig.from_dict({**TINY, "out_dir": str(tmp_path / str(budget)), "optimizer": "manifold_muon",
                                     "optim": {"dual_steps": 10},
                                     "diagnostics": {"preset": "off", "manifold_interval": 1,
                                                     "constraint_budget": budget}})
        run = train(cfg, verbose=False, progress=False)
        rows[budget] = (read_diagnostics(run.dir), read_events(run.dir))
    d, ev = rows[1e-9]
    assert set(d[d.metric == "dual_steps"].layer) == LAYERS and (d[d.metric == "dual_residual"].value >= 0).all()
    assert (d[d.metric == "cond"].value - 1).abs().max() < 1e-5
    viol = ev[ev.kind == "constraint_violation"]
    assert len(viol) == 2 * len(LAYERS) and (viol.threshold == 1e-9).all()
    assert rows[1e-3][1].empty


def test_muon_run_writes_its_ns_residual(tmp_path):
    """Keller Jordan's quintic leaves the singular values of O in about (0.7, 1.2), so ‖O - msign(U)‖ is not 0."""
    cfg = TrainConfig.from_dict({**TINY, "out_dir": str(tmp_path), "optimizer": "muon",
                                 "diagnostics": {"preset": "off", "manifold_interval": 1}})
    d = read_diagnostics(train(cfg, verbose=False, progress=False).dir)
    ns = d[d.metric == "ns_residual"]
    assert set(ns.layer) == LAYERS and len(ns) == 2 * len(LAYERS) and (ns.value > 0.01).all()
