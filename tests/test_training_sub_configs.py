"""TrainConfig's data part (data_config), resolved recipe (quant_policy) and precision schedule (hp_schedule): frozen,
built once with the config, mistakes refused at construction, and the code below them takes only its own part (not
the whole TrainConfig); a train() builds no TrainConfig of its own but the stored one it compares a reused run to."""
from __future__ import annotations

import dataclasses
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from altgrad_lib.errors import ConfigError
from altgrad_lib.monitors.config import DiagnosticsConfig
from altgrad_lib.monitors.diagnostics import Diagnostics
from altgrad_lib.optim.config import OptimConfig
from altgrad_lib.optim.factory import build_optimizer
from altgrad_lib.quantize.recipes import QuantPolicy, get_policy
from altgrad_lib.training import config as config_module
from altgrad_lib.training import loop, preflight
from altgrad_lib.training.build import build_model, gpt_config
from altgrad_lib.training.config import TrainConfig, key_docs
from altgrad_lib.training.data import TokenCorpus
from altgrad_lib.training.sub_configs import DataConfig, ModelConfig

E2M1 = {"name": "E2M1-XW", "layers": {"*": {"input": "E2M1", "weight": "E2M1"}, "lm_head": None}}


def test_data_config_is_typed_frozen_canonical_and_built_once():
    cfg = TrainConfig(corpus="licenses", tokenizer="gpt2-4k", max_docs=30, block_size=16, batch_size=3, seed=5,
                      eval_iters=2)
    assert cfg.data_config == DataConfig(corpus="licenses", tokenizer="gpt2-4096", max_docs=30, block_size=16,
                                         batch_size=3, seed=5, eval_iters=2)
    assert cfg.tokenizer == "gpt2-4k"                      # the field (config.yaml, the hash) keeps its spelling
    assert cfg.data_config is cfg.data_config              # one object, built in __post_init__
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.data_config.batch_size = 4
    assert "data_config" not in cfg.to_dict() and cfg == TrainConfig.from_dict(cfg.to_dict())
    assert cfg.replace(batch_size=4).data_config.batch_size == 4      # rebuilt with every new config


def test_the_parts_are_declared_frozen_fields_not_keys():
    """Issue 48: the typed parts are fields of the frozen TrainConfig (init=False: built in __post_init__, not
    compared, not in config.yaml or the hash), and an instance holds nothing but its declared fields."""
    parts = {f.name for f in dataclasses.fields(TrainConfig) if not f.init}
    assert parts == {"optim_config", "hp_schedule", "diagnostics_config", "model_config", "data_config",
                     "_quant_policy"}
    assert not parts & set(TrainConfig.keys()) and not parts & {k for k, *_ in key_docs()}
    cfg = TrainConfig(recipe="fmt:E3M4", precision_schedule={"bwd_hp_from": 3}, max_steps=5)
    assert set(vars(cfg)) == {f.name for f in dataclasses.fields(TrainConfig)}   # no attribute beside the fields
    assert not parts & set(cfg.to_dict()) and cfg.config_hash() == TrainConfig.from_dict(cfg.to_dict()).config_hash()
    with pytest.raises(ConfigError, match=r"unknown TrainConfig key\(s\) \['optim_config'\]") as e:
        TrainConfig.from_dict({"optim_config": None})
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("recipe", ["fmt:e4m3fn", "fp8_hybrid:hp_last=1", E2M1])
def test_a_parsed_recipe_is_resolved_once_in_post_init(recipe):
    cfg = TrainConfig(recipe=recipe, backend="sim", seed=7)
    pol = vars(cfg)["_quant_policy"]                       # resolved before anyone asked for it
    assert isinstance(pol, QuantPolicy) and cfg.quant_policy is pol and cfg.quant_policy is cfg.quant_policy
    # the oracle: get_policy on the canonical recipe with the run's backend and seed, as preflight resolved it
    assert pol == get_policy(cfg.recipe, backend="sim", seed=7) and pol.seed == 7
    with pytest.raises(dataclasses.FrozenInstanceError):
        pol.seed = 1
    assert "_quant_policy" not in cfg.to_dict() and "quant_policy" not in cfg.to_dict()


def test_a_named_recipe_resolves_on_first_use_and_keeps_the_config_torch_free():
    code = ("import sys; from altgrad_lib.training.config import TrainConfig; "
            "c = TrainConfig(recipe='fp8_hybrid', backend='torchao', seed=3); c.data_config; "
            "assert 'torch' not in sys.modules; p = c.quant_policy; "
            "assert p is c.quant_policy and (p.name, p.backend, p.seed) == ('fp8_hybrid', 'torchao', 3), p")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parent.parent)


@pytest.mark.parametrize("change,needles", [
    (dict(tokenizer="gpt3"), ["TrainConfig.tokenizer", "'gpt3'", "valid", "gpt2-4k"]),
    (dict(tokenizer="gpt2-100"), ["TrainConfig.tokenizer", "N=100", "256 <= N"]),
    (dict(recipe="fp8_hybird"), ["TrainConfig.recipe", "fp8_hybird", "fp8_hybrid", "valid choices"]),
    (dict(recipe="nvfp4:bogus"), ["TrainConfig.recipe", "bogus", "valid switches", "disable_rht"]),
    (dict(recipe="fp8_hybrid:hp_last=x"), ["TrainConfig.recipe", "hp_last='x'", "int >= 0"]),
])
def test_bad_data_and_recipe_values_fail_at_construction(change, needles):
    """A ConfigError from TrainConfig(...) itself (no preflight, no corpus, no model), one line naming the valid
    values."""
    with pytest.raises(ConfigError) as ei:
        TrainConfig(**change)
    msg = str(ei.value)
    assert "\n" not in msg and all(n in msg for n in needles), msg


# (function, its parameter, the one sub-config it takes): none of them takes a TrainConfig
CONSUMERS = [
    (preflight.build_corpus, "data", DataConfig),
    (preflight.vocab_size_of, "data", DataConfig),
    (TokenCorpus.for_data, "data", DataConfig),
    (TokenCorpus.train_batch, "data", DataConfig),
    (TokenCorpus.val_batches, "data", DataConfig),
    (loop.evaluate, "data", DataConfig),
    (build_model, "model", ModelConfig),
    (build_model, "policy", QuantPolicy),
    (gpt_config, "model", ModelConfig),
    (build_optimizer, "oc", OptimConfig),
    (Diagnostics.for_run, "cfg", DiagnosticsConfig),
]


@pytest.mark.parametrize("fn,param,part", CONSUMERS, ids=[f"{f.__qualname__}.{p}" for f, p, _ in CONSUMERS])
def test_consumers_take_their_sub_config_only(fn, param, part):
    hints = typing.get_type_hints(fn)
    assert hints[param] is part
    assert TrainConfig not in hints.values()


def test_batches_of_a_data_part_are_get_batch_at_the_runs_seed_and_the_val_seed():
    """train() reads its batches through data_config (train_batch / val_batches): they are TokenCorpus.get_batch at
    the run's seed and shape for training, at VAL_SEED = 0 for validation (the same for every seed)."""
    cfg = TrainConfig(n_layer=1, n_head=2, n_embd=32, block_size=16, batch_size=2, max_docs=30, tokenizer="gpt2-512",
                      seed=4, eval_iters=2)
    corpus = preflight.build_corpus(cfg.data_config)
    x, y = corpus.train_batch(cfg.data_config, 3)
    x2, y2 = corpus.get_batch("train", 2, 16, seed=4, step=3)
    assert x.shape == (2, 16) and (x == x2).all() and (y == y2).all()
    vals = list(corpus.val_batches(cfg.data_config))
    assert len(vals) == 2 and all((v[0] == corpus.get_batch("val", 2, 16, seed=0, step=i)[0]).all()
                                  for i, v in enumerate(vals))
    assert (vals[0][0] != corpus.get_batch("val", 2, 16, seed=4, step=0)[0]).any()   # the val seed is not the run's


def test_a_run_builds_its_config_and_parts_once(tmp_path, monkeypatch):
    """train() fills run_name / out_dir on a copy (resolved) and hands its config down (preflight, the returned Run):
    the one construction is the caller's, with one OptimConfig and one parse of precision_schedule. Reusing the
    finished run reads its stored config.yaml back once (the run it compares against and returns, a different
    fact: its non-result fields are the stored run's)."""
    built = {"train": 0, "optim": 0, "schedule": 0}

    def counting(cls, key):
        orig = cls.__post_init__

        def post_init(self):
            built[key] += 1
            orig(self)
        monkeypatch.setattr(cls, "__post_init__", post_init)
    counting(TrainConfig, "train")
    counting(OptimConfig, "optim")
    parse = config_module.parse_precision_schedule
    monkeypatch.setattr(config_module, "parse_precision_schedule",
                        lambda cfg: (built.__setitem__("schedule", built["schedule"] + 1), parse(cfg))[1])
    # the tiny CPU run of test_training_schedule.py, 2 steps, with a switch so the schedule's consumers run
    cfg = TrainConfig(n_layer=1, n_head=2, n_embd=32, block_size=32, batch_size=4, max_docs=50, tokenizer="gpt2-512",
                      max_steps=2, warmup_steps=1, eval_interval=0, eval_iters=1, recipe="fp8_hybrid",
                      precision_schedule={"bwd_hp_from": 2}, out_dir=str(tmp_path))
    assert built == {"train": 1, "optim": 1, "schedule": 1}
    run = loop.train(cfg, progress=False, verbose=False)
    assert run.status == "completed" and run.config == cfg.resolved()
    assert built == {"train": 1, "optim": 1, "schedule": 1}              # nothing built again by the run
    again = loop.train(cfg, progress=False, verbose=False)
    assert again.reused and again.config == run.config
    assert built == {"train": 2, "optim": 2, "schedule": 2}              # the stored config.yaml, read back once
