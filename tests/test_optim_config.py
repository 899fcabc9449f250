"""optim/config.py and the TrainConfig fields: one-line errors naming the valid choices, defaults keep every
earlier run's config hash."""
from __future__ import annotations

import hashlib
import json

import pytest

from altgrad_lib.optim.config import OPTIMIZERS, OptimConfig
from altgrad_lib.training.config import NON_RESULT_FIELDS, NUMERICS_VERSION, TrainConfig


@pytest.mark.parametrize("optimizer, optim, match", [
    ("lion", {}, "valid choices: \\('adamw'"),
    ("grid_adamw", {"storage": "fp16"},
     "valid choices: \\('fp32', 'grid_rne', 'grid_sr', 'kahan', 'error_feedback', 'error_feedback_sr'\\)"),
    ("madam", {"ulp_mode": "step"}, "do not apply to optimizer 'madam'; valid keys"),
    ("grid_adamw", {"ulp_mode": "left"}, "valid choices"),
    ("grid_adamw", {"lr": -1}, "number > 0"),
    ("adamw", {"state_m": 8}, "format name"),
    ("adamw", {"compile": "yes"}, "True, False"),
])
def test_bad_values_fail_in_one_line(optimizer, optim, match):
    with pytest.raises(ValueError, match=match) as ei:
        TrainConfig(optimizer=optimizer, optim=optim)
    assert "\n" not in str(ei.value)


def test_defaults_and_peak_lr():
    assert OptimConfig.from_dict("adamw", {}).is_torch_adamw
    assert not OptimConfig.from_dict("adamw", {"storage": "fp32"}).is_torch_adamw
    assert OptimConfig.from_dict("grid_adamw", {}).peak_lr(2e-3) == 1.0
    assert OptimConfig.from_dict("madam", {}).peak_lr(2e-3) == 0.01
    assert OptimConfig.from_dict("stiffness_adamw", {}).peak_lr(2e-3) == 2e-3
    assert set(OPTIMIZERS) == {"adamw", "stiffness_adamw", "grid_adamw", "madam", "grid_sgd", "muon", "manifold_muon"}


def test_default_optimizer_fields_do_not_change_the_hash():
    cfg = TrainConfig()
    # precision_schedule and compile_scope, like the optim fields, are hashed only when set (the runs from before
    # keep their hash)
    d = {k: v for k, v in cfg.to_dict().items()
         if k not in NON_RESULT_FIELDS and k not in ("optimizer", "optim", "precision_schedule", "compile_scope")}
    d["_numerics_version"] = NUMERICS_VERSION
    old = hashlib.sha256(json.dumps(d, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert cfg.config_hash() == old
    assert TrainConfig(optimizer="madam").config_hash() != old
    assert TrainConfig(optim={"storage": "fp32"}).config_hash() != old


def test_yaml_overrides_reach_the_optim_section(tmp_path):
    cfg = TrainConfig.from_yaml(None, ["optimizer=grid_adamw", "optim={storage: grid_sr, lr: 0.5}"])
    assert cfg.optim == {"storage": "grid_sr", "lr": 0.5}
    assert TrainConfig.from_dict(cfg.to_dict()) == cfg
