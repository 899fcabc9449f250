"""TrainConfig.precision_schedule (the NVFP4 report's forward-to-high-precision switch, arXiv 2509.25149 App. D)
and the step-keyed RNG policies through the training loop: validated before compute, no hash change when unset, and
a run killed before or after the switch resumes bit-exactly. Tiny runs (1 layer, C=32, T=32, <= 6 steps)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from helpers import Crash, assert_same_state, crash_at

from altgrad_lib.errors import ConfigError
from altgrad_lib.training.loop import TrainConfig, train
from altgrad_lib.training.sub_configs import PrecisionSchedule

TINY = dict(n_layer=1, n_head=2, n_embd=32, block_size=32, batch_size=4, max_docs=50, tokenizer="gpt2-512",
            max_steps=6, warmup_steps=1, eval_interval=3, eval_iters=2, ckpt_interval=2)
RECIPE = "nvfp4:rht_per_step:sr_per_call"     # every step-keyed RNG in play across the switch


def tiny(tmp: Path, **kw) -> TrainConfig:
    return TrainConfig.from_dict({**TINY, "out_dir": str(tmp), "recipe": RECIPE, **kw})


def losses(run) -> dict[int, float]:
    return run.metric("train/loss")


def result_lines(run_dir: Path) -> list[str]:
    return [ln for ln in (run_dir / "metrics.csv").read_text().splitlines() if ",perf/" not in ln]


def test_schedule_is_validated_before_compute():
    base = dict(TINY, recipe="fp8_hybrid")
    for sched, msg in [({"fwd_hp_form": 3}, "unknown key(s) ['fwd_hp_form']; did you mean 'fwd_hp_from'?"),
                       ({"fwd_hp_from": 7}, "fwd_hp_from=7 is invalid; valid: 'decay' or a step in [1, max_steps=6]"),
                       ({"bwd_hp_from": 0}, "bwd_hp_from=0 is invalid"),
                       ({"fwd_hp_from": "soon"}, "fwd_hp_from='soon' is invalid")]:
        with pytest.raises(ConfigError, match=re.escape(msg)):
            TrainConfig(**base, precision_schedule=sched)
    with pytest.raises(ConfigError, match="has no decay"):
        TrainConfig(**{**base, "min_lr": 1e-3, "lr": 1e-3}, precision_schedule={"fwd_hp_from": "decay"})
    with pytest.raises(ConfigError, match="nothing to switch"):
        TrainConfig(**{**base, "recipe": "hp"}, precision_schedule={"fwd_hp_from": 2})
    cfg = TrainConfig(**base, precision_schedule={"fwd_hp_from": "decay", "bwd_hp_from": 5})
    sched = cfg.hp_schedule                                       # parsed once, with the config
    assert sched is cfg.hp_schedule and isinstance(sched, PrecisionSchedule)
    assert sched.starts == (("fwd_hp_from", 2), ("bwd_hp_from", 5))   # decay: cosine starts after warmup_steps=1
    assert sched.hp_gemms_at(1) == () and sched.hp_gemms_at(2) == ("fprop",)
    assert sched.hp_gemms_at(6) == ("fprop", "dgrad", "wgrad") and sched.switch_steps == (2, 5)
    assert not TrainConfig(**base).hp_schedule                     # no schedule: empty, falsy


def test_unset_schedule_keeps_every_hash():
    # hashes computed on the code before precision_schedule and the RNG policy existed
    assert TrainConfig().config_hash() == "476a64bff36303c0b8563bd0ec57b191e548465a83fb381f0d17baf9e289290e"
    assert TrainConfig(recipe="nvfp4", precision_schedule={}).config_hash() == \
        "2907c923ca52e178bb963d2fb1b2e815f6db66c0cf35875b21bd52acb10e45b0"
    assert TrainConfig(recipe="nvfp4", precision_schedule={"fwd_hp_from": 3}).config_hash() != \
        TrainConfig(recipe="nvfp4").config_hash()


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """(no schedule, forward to hp from step 4): the uninterrupted runs the resumed ones are compared against."""
    tmp = tmp_path_factory.mktemp("straight")
    return (train(tiny(tmp), progress=False, verbose=False),
            train(tiny(tmp, precision_schedule={"fwd_hp_from": 4}), progress=False, verbose=False))


def test_the_switch_changes_the_steps_from_its_step_on(straight):
    plain, switched = (losses(r) for r in straight)
    assert all(plain[s] == switched[s] for s in (1, 2, 3))          # same numerics before the switch (bit-equal)
    assert all(plain[s] != switched[s] for s in (4, 5, 6))          # fprop in high precision from step 4


@pytest.mark.parametrize("kill_at", [2, 5])                         # a checkpoint before / after the switch
def test_a_run_killed_before_or_after_the_switch_resumes_bit_exactly(straight, tmp_path, kill_at):
    ref = straight[1]
    cfg = tiny(tmp_path, precision_schedule={"fwd_hp_from": 4}, ckpt_interval=1 if kill_at == 5 else 2)
    with pytest.raises(Crash):
        train(cfg, progress=False, verbose=False, on_step=crash_at(kill_at))
    run = train(cfg, progress=False, verbose=False)
    assert run.status == "completed" and result_lines(run.dir) == result_lines(ref.dir)
    a = torch.load(run.dir / "checkpoints" / "last.pt", weights_only=False)
    b = torch.load(ref.dir / "checkpoints" / "last.pt", weights_only=False)
    assert_same_state(a["model"], b["model"], "model")   # params, per-step RHT step, per-call SR (step, call)
    assert_same_state(a["optimizer"], b["optimizer"], "optimizer")
