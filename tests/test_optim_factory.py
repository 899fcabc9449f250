"""optim/factory.py: parameter groups from the recipe, grid storage replaces the weight quantizer, and bit-exact
resume of training after a simulated crash for every optimizer and every storage mode (tiny model)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import Crash, assert_same_state, crash_at

from altgrad_lib.errors import ConfigError
from altgrad_lib.numerics.formats import get_format
from altgrad_lib.optim.factory import build_optimizer
from altgrad_lib.quantize.linear import QuantizedLinear
from altgrad_lib.training.build import build_model
from altgrad_lib.training.loop import TrainConfig, train
from altgrad_lib.training.preflight import check_policy

TINY = dict(n_layer=1, n_head=2, n_embd=32, block_size=32, batch_size=4, max_docs=50, tokenizer="gpt2-512",
            max_steps=6, warmup_steps=2, eval_interval=3, eval_iters=1, ckpt_interval=3, recipe="fp8_hybrid",
            lr=2e-3)


def _model(cfg):
    torch.manual_seed(0)
    model, _ = build_model(cfg.model_config, 512, check_policy(cfg))
    return model


def test_groups_follow_the_recipe_and_grid_storage_drops_weight_quantizers():
    cfg = TrainConfig.from_dict({**TINY, "optimizer": "grid_adamw", "optim": {"storage": "grid_sr", "lr": 0.5}})
    model = _model(cfg)
    opt = build_optimizer(model, cfg.optim_config)
    fmt_groups = [g for g in opt.param_groups if g["fmt"] is not None]
    qlin = [m for m in model.modules() if isinstance(m, QuantizedLinear)]
    assert {id(p) for g in fmt_groups for p in g["params"]} == {id(m.weight) for m in qlin}
    assert all(g["fmt"] == "E4M3" and g["lr"] == 0.5 and g["lr_mult"] == 0.5 / 2e-3 for g in fmt_groups)
    assert all(g["weight_decay"] == pytest.approx(0.1 * 2e-3 / 0.5) for g in fmt_groups)   # AdamW's per-step decay
    hp = [g for g in opt.param_groups if g["fmt"] is None]
    assert all(g["lr"] == 2e-3 and g["storage"] == "fp32" for g in hp)
    assert all(m.w_quant is None for m in qlin)            # the stored weight is the forward weight
    f = get_format("E4M3")
    for m in qlin:
        s = opt.state[m.weight]["grid_scale"]
        assert torch.equal(f.quantize(m.weight.detach() * s), m.weight.detach() * s)


def test_weight_fmt_under_bf16_and_errors():
    cfg = TrainConfig.from_dict({**TINY, "recipe": "bf16", "optimizer": "adamw", "optim": {"storage": "kahan",
                                                                                           "weight_fmt": "E5M2"}})
    opt = build_optimizer(_model(cfg), cfg.optim_config)
    assert {g["fmt"] for g in opt.param_groups} == {"E5M2", None}
    bad = TrainConfig.from_dict({**TINY, "recipe": "bf16", "optim": {"storage": "grid_sr"}})
    with pytest.raises(ValueError, match="weight_fmt"):
        build_optimizer(_model(bad), bad.optim_config)
    with pytest.raises(ConfigError, match="needs backend 'sim'"):   # with the config, before any model
        TrainConfig.from_dict({**TINY, "backend": "torchao", "optim": {"storage": "grid_sr"}})


def _lines(d: Path) -> list[str]:
    return [ln for ln in (d / "metrics.csv").read_text().splitlines() if ",perf/" not in ln]


# every optimizer and every storage mode at least once; SR low-precision states and stats in the first
CASES = [("adamw", {"storage": "grid_sr", "state_m": "E4M3", "state_v": "E5M2", "state_min_numel": 512,
                    "state_rounding": "stochastic", "track_stats": True}),
         ("stiffness_adamw", {"storage": "fp32"}),
         ("grid_adamw", {"storage": "kahan", "track_stats": True}),
         ("madam", {"storage": "grid_rne"}),
         ("grid_sgd", {"storage": "grid_sr", "lr": 1.0})]


@pytest.mark.parametrize("optimizer, optim", CASES, ids=[c[0] for c in CASES])
def test_resume_after_crash_is_bit_exact(tmp_path, optimizer, optim):
    kw = {**TINY, "optimizer": optimizer, "optim": optim}
    ref = train(TrainConfig.from_dict({**kw, "out_dir": str(tmp_path / "ref")}), progress=False, verbose=False)
    cfg = TrainConfig.from_dict({**kw, "out_dir": str(tmp_path / "crash")})
    with pytest.raises(Crash):                      # after step 4: resumes from the step-3 checkpoint
        train(cfg, progress=False, verbose=False, on_step=crash_at(4))
    run = train(cfg, progress=False, verbose=False)
    assert run.status == "completed" and _lines(run.dir) == _lines(ref.dir)
    sa = torch.load(ref.dir / "checkpoints" / "last.pt", weights_only=False)
    sb = torch.load(run.dir / "checkpoints" / "last.pt", weights_only=False)
    assert_same_state(sa["model"], sb["model"], "model")
    assert_same_state(sa["optimizer"], sb["optimizer"], "optimizer")     # incl. SR generator, codes, scales
    if optim.get("track_stats"):
        assert any("optim/stall_rate" in ln for ln in _lines(ref.dir))


def test_an_unsigned_weight_grid_is_refused():
    # E8M0FNU (FloatFormat.signed=False) cannot hold a negative weight
    cfg = TrainConfig.from_dict({**TINY, "optimizer": "grid_adamw", "optim": {"weight_fmt": "E8M0FNU"}})
    with pytest.raises(ValueError, match=r"optim.weight_fmt='E8M0FNU': E8M0FNU has no sign bit, so it cannot be a "
                                         r"weight grid; use a signed format"):
        build_optimizer(_model(cfg), cfg.optim_config)


@pytest.mark.parametrize("recipe, storage, optimizer", [("nvfp4", "grid_sr", "grid_adamw"),
                                                        ("mxfp8", "error_feedback_sr", "adamw"),
                                                        ("mxfp4", "kahan", "adamw"),
                                                        ("nvfp4", "grid_rne", "grid_sgd")])
@pytest.mark.parametrize("weight_fmt", [None, "E4M3"])
def test_grid_storage_refuses_block_scaled_weights(recipe, storage, optimizer, weight_fmt):
    """Grid storage used to drop the recipe's block weight quantizer and keep each weight on ONE per-tensor grid
    (8 distinct |w| per tensor under nvfp4): a per-tensor model trained under the block recipe's name."""
    optim = {"storage": storage} if weight_fmt is None else {"storage": storage, "weight_fmt": weight_fmt}
    cfg = TrainConfig.from_dict({**TINY, "recipe": recipe, "optimizer": optimizer, "optim": optim})
    model = _model(cfg)
    with pytest.raises(ValueError) as ei:
        build_optimizer(model, cfg.optim_config)
    msg = str(ei.value)
    assert "\n" not in msg and f"optim.storage={storage!r} on recipe {recipe!r}" in msg and "block-scaled" in msg
    assert "'fp32'" in msg and "fp8_hybrid" in msg
    assert all(m.w_quant is not None for m in model.modules() if isinstance(m, QuantizedLinear))   # untouched
    fp32 = cfg.replace(optim={})
    build_optimizer(_model(fp32), fp32.optim_config)   # fp32 master: the recipe's own QDQ


def test_stored_weight_grids_name_the_grid_the_forward_uses():
    """fmt:E4M3 with error_feedback_sr storage on weight_fmt E2M1: the forward weight is on the E2M1 grid (the
    recipe's E4M3 weight quantizer is removed) but the layer table printed e4m3fn/cur/rne."""
    from altgrad_lib.optim.factory import stored_weight_grids

    cfg = TrainConfig.from_dict({**TINY, "recipe": "fmt:E4M3",
                                 "optim": {"storage": "error_feedback_sr", "weight_fmt": "E2M1"}})
    model = _model(cfg)
    grids = stored_weight_grids(model, cfg.optim_config)
    opt = build_optimizer(model, cfg.optim_config)
    qlin = {fqn: m for fqn, m in model.named_modules() if isinstance(m, QuantizedLinear)}
    assert set(grids) == set(qlin)
    assert set(grids.values()) == {f"{get_format('E2M1').short_str()}/pow2/error_feedback_sr"}
    f = get_format("E2M1")
    for m in qlin.values():                        # what the label says is what the forward gets
        s = opt.state[m.weight]["grid_scale"]
        assert m.w_quant is None and torch.equal(f.quantize(m.weight.detach() * s), m.weight.detach() * s)
    fp32 = cfg.replace(optim={"weight_fmt": "E2M1"}).optim_config
    assert stored_weight_grids(model, fp32) == {}    # fp32: the recipe's QDQ
