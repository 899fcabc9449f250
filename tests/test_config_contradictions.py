"""Settings that contradict each other only at some step of a run, and out-of-range flag values: each is refused in
one line naming both settings (or the flag) when the config loads, by `altgrad train --print-config` and by a
study's per-point check, before any training. Every check here is config construction, --print-config or a parse.
"""
from __future__ import annotations

import pytest
import yaml

from altgrad_lib.cli import main
from altgrad_lib.errors import ConfigError, UserError, number_arg
from altgrad_lib.training.config import TrainConfig
from altgrad_lib.training.preflight import check_config, tiny_model

BASE = dict(n_layer=2, n_head=2, n_embd=32, block_size=32, max_steps=20, warmup_steps=2)
FP8 = {"input": "E4M3", "weight": "E4M3", "grad_output": "E5M2"}


def accum_recipe(accum) -> dict:
    return {"name": "acc", "layers": {"*": {**FP8, "gemm": {"accum": accum}}}}


def refused(match: str, **kw) -> str:
    """The one-line ConfigError of TrainConfig(**BASE, **kw) plus the print-config checks."""
    with pytest.raises(ConfigError) as ei:
        check_config(TrainConfig(**{**BASE, **kw}))
    msg = str(ei.value)
    assert "\n" not in msg and match in msg, msg
    return msg


# ------------------------------------------------------------------ precision_schedule x gemm.accum
def test_the_runtime_switch_fails_on_an_accumulator_of_a_switched_gemm():
    """What the load check guards: the loop's own call at the switch's step (set_hp_gemms) raises GemmOptions'
    error for this recipe (the newcomer's traceback after ~37 s of training)."""
    from altgrad_lib.quantize.linear import set_hp_gemms

    cfg = TrainConfig(**BASE, recipe=accum_recipe({"fprop": "fp22"}))
    model, _ = tiny_model(cfg, cfg.quant_policy)
    with pytest.raises(ValueError, match="hp_gemms keeps in high precision"):
        set_hp_gemms(model, ("fprop",))


@pytest.mark.parametrize("accum, sched, gemms, kept", [
    ({"fprop": "fp22"}, {"fwd_hp_from": 15}, "fprop", "dgrad+wgrad"),
    ("fp22", {"bwd_hp_from": "decay"}, "dgrad+wgrad", "fprop"),            # one spec for all GEMMs names each
    ({"wgrad": "fp22"}, {"fwd_hp_from": 3, "bwd_hp_from": 10}, "wgrad", "none here"),     # caught at its phase
])
def test_accumulator_on_a_gemm_the_schedule_switches_is_refused_at_load(accum, sched, gemms, kept):
    key = next(k for k in sched if k.startswith("bwd" if "grad" in gemms else "fwd"))
    with pytest.raises(ConfigError) as ei:     # TrainConfig itself: no model, no preflight
        TrainConfig(**BASE, recipe=accum_recipe(accum), precision_schedule=sched)
    msg = str(ei.value)
    assert "\n" not in msg and f"TrainConfig.precision_schedule.{key}=" in msg, msg
    assert f"puts {gemms} in high precision" in msg and "layers['*'].gemm.accum models an accumulator" in msg, msg
    assert f"keeps quantized ({kept})" in msg, msg


def test_accumulator_the_schedule_never_switches_is_accepted():
    cfg = TrainConfig(**BASE, recipe=accum_recipe({"fprop": "fp22"}), precision_schedule={"bwd_hp_from": 15})
    check_config(cfg)
    TrainConfig(**BASE, recipe=accum_recipe({"fprop": "fp22"}))        # the recipe alone is valid


def test_print_config_refuses_the_newcomers_schedule_in_one_line(tmp_path, capsys):
    params = tmp_path / "acc.yaml"
    params.write_text(yaml.safe_dump({**BASE, "recipe": accum_recipe({"fprop": "fp22"}),
                                      "precision_schedule": {"fwd_hp_from": 15}, "out_dir": str(tmp_path / "runs")}))
    assert main(["train", "-f", str(params), "--print-config"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("altgrad: error: TrainConfig.precision_schedule."
                                                                 "fwd_hp_from=15 puts fprop in high precision"), err
    assert not (tmp_path / "runs").exists()


# ------------------------------------------------------------------ precision_schedule x attention
@pytest.mark.parametrize("key, points", [("fwd_hp_from", "qkv, o"), ("bwd_hp_from", "do, dqkv")])
def test_schedule_with_a_quantized_attention_core_is_refused(key, points):
    # the mxfp8 attention preset keeps S and dP in high precision (attention.py), so those two are not named
    msg = refused(f"TrainConfig.precision_schedule.{key}=5", recipe="nvfp4:mxfp8_attn",
                  precision_schedule={key: 5})
    assert f"attn keeps the attention core's {points} quantized" in msg, msg


def test_study_dry_run_refuses_a_point_whose_schedule_contradicts_its_recipe(tmp_path, capsys):
    study = tmp_path / "s.yaml"
    config = {**BASE, "out_dir": str(tmp_path / "runs"), "recipe": "nvfp4", "precision_schedule": {"fwd_hp_from": 5}}
    study.write_text(yaml.safe_dump({"name": "s", "config": config,
                                     "axes": {"recipe": ["nvfp4", "nvfp4:mxfp8_attn"], "seed": [0]}}))
    assert main(["study", "-f", str(study), "--dry-run", "--out", str(tmp_path / "study")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("altgrad study: error: study point {'recipe': 'nvfp4:mxfp8_attn', 'seed': 0}: ") and \
        "precision_schedule.fwd_hp_from=5" in err and "attn keeps the attention core's qkv, o quantized" in err, err
    assert not (tmp_path / "runs").exists() and not (tmp_path / "study").exists()


def test_attention_only_in_high_precision_blocks_is_no_contradiction():
    # hp_first=1 + hp_layers=[1]: no block runs the quantized attention core; lm_head keeps the switch meaningful
    cfg = TrainConfig(**BASE, recipe={"recipe": "nvfp4:mxfp8_attn", "hp_first_blocks": 1, "hp_layers": [1],
                                      "layers": {"lm_head": FP8}}, precision_schedule={"fwd_hp_from": 5})
    check_config(cfg)


# ------------------------------------------------------------------ precision_schedule x what the recipe keeps hp
def test_switch_of_gemms_the_recipe_already_keeps_in_high_precision_is_refused():
    dy_only = {"name": "dy_only", "layers": {"*": {"grad_output": "E5M2"}}}     # fprop has no quantized operand
    refused("switches fprop to high precision, but recipe 'dy_only' quantizes no fprop operand",
            recipe=dy_only, precision_schedule={"fwd_hp_from": 5})
    check_config(TrainConfig(**BASE, recipe=dy_only, precision_schedule={"bwd_hp_from": 5}))
    hp_fprop = {"name": "hp_fprop", "layers": {"*": {**FP8, "gemm": {"hp_gemms": ["fprop"]}}}}
    refused("quantizes no fprop operand", recipe=hp_fprop, precision_schedule={"fwd_hp_from": 5})
    # the only Linear that quantizes fprop is kept in high precision by hp_layers: named in the line
    via_hp_layers = {"name": "head", "hp_layers": ["lm_head"],
                     "layers": {"*": {"grad_output": "E5M2"}, "lm_head": FP8}}
    refused("hp_layers=lm_head keep them in high precision", recipe=via_hp_layers,
            precision_schedule={"fwd_hp_from": 5})


def test_print_config_leaves_the_recipes_gemms_as_they_were():
    """check_precision_schedule installs every phase on the tiny model with set_hp_gemms and undoes it."""
    from altgrad_lib.quantize.linear import QuantizedLinear
    from altgrad_lib.training.preflight import check_precision_schedule

    cfg = TrainConfig(**BASE, recipe="nvfp4", precision_schedule={"fwd_hp_from": 3, "bwd_hp_from": 6})
    model, _ = tiny_model(cfg, cfg.quant_policy)
    before = [m.gemm for m in model.modules() if isinstance(m, QuantizedLinear)]
    check_precision_schedule(cfg, cfg.quant_policy, model)
    assert [m.gemm for m in model.modules() if isinstance(m, QuantizedLinear)] == before


# ------------------------------------------------------------------ seeds and counts
def test_train_config_seed_beyond_what_the_loop_can_seed_is_refused():
    import numpy as np

    with pytest.raises(ValueError):   # the loop's seed_everything calls np.random.seed: its own limit
        np.random.seed(2**32)
    with pytest.raises(ConfigError, match=r"TrainConfig.seed=4294967296 is invalid; valid: an int in \[0, 4294967295]"):
        TrainConfig(seed=2**32)
    TrainConfig(seed=2**32 - 1)


@pytest.mark.parametrize("argv, line", [
    (["fidelity", "nvfp4", "--seed", "-1"], "--seed=-1 is invalid; valid: an int in [0, 4294967295]"),
    (["fidelity", "nvfp4", "--seed", "4294967296"], "--seed=4294967296 is invalid"),
    (["fidelity", "nvfp4", "--seed", "1.5"], "--seed=1.5 is invalid"),
    (["study", "-f", "missing.yaml", "--workers", "-2"], "--workers=-2 is invalid; valid: 0 (auto"),
    (["study", "-f", "missing.yaml", "--threads", "0"], "--threads=0 is invalid; valid: N >= 1"),
    (["study", "-f", "missing.yaml", "--max-seeds", "1"], "--max-seeds=1 is invalid; valid: an int in [2, "),
    (["study", "-f", "missing.yaml", "--seed-step", "0"], "--seed-step=0 is invalid"),
    (["study", "-f", "missing.yaml", "--cpus-per-run", "-1"], "--cpus-per-run=-1 is invalid; valid: a number >= 0"),
    (["study", "-f", "missing.yaml", "--gpus-per-run", "nan"], "--gpus-per-run=nan is invalid"),
])
def test_negative_or_absurd_counts_and_seeds_are_one_line(argv, line, capsys):
    """Refused while the arguments are parsed: the study file (missing here) is never read, nothing computed."""
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("altgrad: error: ") and err.count("\n") == 1
    assert line in err and "Traceback" not in err, err


def test_debug_shows_the_flags_traceback():
    with pytest.raises(UserError, match="--seed=-1 is invalid"):
        main(["fidelity", "nvfp4", "--seed", "-1", "--debug"])


def test_number_arg_takes_what_is_in_range():
    assert number_arg("--n", 0)("0") == 0 and number_arg("--n", 1, 3)("3") == 3
    assert number_arg("--x", 0, kind=float)("0.5") == 0.5
    for bad in ("-1", "4", "x", ""):
        with pytest.raises(UserError, match=f"--n={bad} is invalid; valid: an int in \\[1, 3\\]"):
            number_arg("--n", 1, 3)(bad)
    with pytest.raises(UserError, match="valid: a number >= 0"):
        number_arg("--x", 0, kind=float)("inf")
