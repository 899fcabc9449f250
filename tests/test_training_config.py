"""Tests for altgrad_lib.training.config: strict keys/types, coercions, YAML + overrides, hash scope, LR schedule."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from altgrad_lib.errors import ConfigError, ConfigTypeError
from altgrad_lib.monitors.config import DiagnosticsConfig
from altgrad_lib.training.config import KEY_ALIASES, TrainConfig, key_docs
from altgrad_lib.training.schedules import lr_at


def test_config_unknown_key_lists_valid_keys():
    with pytest.raises(ValueError, match="unknown TrainConfig key") as ei:
        TrainConfig.from_dict({"lr": 1e-3, "learning_rate": 1.0})
    assert "learning_rate" in str(ei.value) and "warmup_steps" in str(ei.value)


@pytest.mark.parametrize("key,value", [("n_layer", "2"), ("n_layer", 2.5), ("n_layer", True), ("compile", 1),
                                       ("lr", "fast"), ("corpus", 3), ("max_docs", 1.5), ("recipe", 3)])
def test_config_wrong_types_fail(key, value):
    with pytest.raises(TypeError, match=f"TrainConfig.{key}") as ei:
        TrainConfig.from_dict({key: value})
    assert "valid keys" in str(ei.value)


def test_config_coercions_and_choices():
    c = TrainConfig.from_dict({"lr": 1, "min_lr": 0, "grad_clip": "1e-1", "max_docs": None})
    assert isinstance(c.lr, float) and c.lr == 1.0 and c.grad_clip == 0.1 and c.max_docs is None
    for bad in ({"precision": "fp16"}, {"device": "tpu"}, {"backend": "x"}, {"mlp": "relu"}):
        with pytest.raises(ValueError, match="valid choices"):
            TrainConfig.from_dict(bad)
    with pytest.raises(ValueError, match="divisible"):
        TrainConfig(n_embd=30, n_head=4)
    with pytest.raises(ValueError, match="min_lr"):
        TrainConfig(lr=1e-4, min_lr=1e-3)


def test_config_yaml_and_overrides(tmp_path):
    p = tmp_path / "x.yaml"
    p.write_text("lr: 3e-4\nn_layer: 3\nrecipe: {name: custom, recipe: fp8_hybrid}\n")
    c = TrainConfig.from_yaml(p, ["n_layer=1", "compile=true", "max_docs=null", "run_name=abc"])
    assert c.lr == 3e-4 and c.n_layer == 1 and c.compile is True and c.max_docs is None and c.run_name == "abc"
    assert c.recipe == {"name": "custom", "recipe": "fp8_hybrid"} and c.recipe_name == "custom"
    assert TrainConfig.from_yaml(p, {"seed": 3}).seed == 3
    with pytest.raises(ValueError, match="key=value"):
        TrainConfig.from_yaml(p, ["n_layer"])
    assert TrainConfig.from_dict(yaml.safe_load(yaml.safe_dump(c.to_dict()))) == c


def test_config_hash_covers_exactly_the_result_fields():
    base = TrainConfig()
    h = base.config_hash()
    for k, v in {"run_name": "x", "out_dir": "/tmp/y", "ckpt_interval": 7, "log_interval": 3}.items():
        assert base.replace(**{k: v}).config_hash() == h, k
    for k, v in {"lr": 2e-3, "seed": 1, "recipe": "fp8_hybrid", "eval_interval": 7, "precision": "bf16"}.items():
        assert base.replace(**{k: v}).config_hash() != h, k
    assert TrainConfig(lr=1).config_hash() == TrainConfig(lr=1.0).config_hash()
    assert base.auto_run_name() == f"hp-s0-{h[:8]}"
    assert base.short_str().startswith("hp[sim]")


def test_lr_schedule_warmup_then_cosine():
    c = TrainConfig(lr=1e-3, min_lr=1e-4, warmup_steps=4, max_steps=20)
    lrs = [lr_at(i, c) for i in range(20)]
    assert all(a < b for a, b in zip(lrs[:4], lrs[1:5]))                    # warmup rises
    assert lrs[4] == pytest.approx(1e-3)
    assert all(a >= b for a, b in zip(lrs[4:], lrs[5:]))                    # cosine decays
    assert lr_at(20, c) == pytest.approx(1e-4) and lr_at(100, c) == pytest.approx(1e-4)


PARAMS = Path(__file__).resolve().parents[1] / "params"


@pytest.mark.parametrize("profile", ["cpu", "h100"])
def test_training_params_files_are_valid_and_02_03_share_the_baseline(profile):
    # notebooks take the TrainConfig keys from their parameters; notebook 03 reuses 02's bf16 run only if
    # both files give the same config hash
    cfgs = {}
    for nb in ("02_bf16_baseline", "03_fp8_baseline"):
        f = PARAMS / nb / f"{profile}.yaml"
        if not f.exists():
            pytest.skip(f"{f} not present")
        d = yaml.safe_load(f.read_text()) or {}
        cfgs[nb] = TrainConfig.from_dict({k: v for k, v in d.items() if k in TrainConfig.keys() or k in KEY_ALIASES})
    baseline_03 = cfgs["03_fp8_baseline"].replace(recipe="hp")
    assert cfgs["02_bf16_baseline"].config_hash() == baseline_03.config_hash()


def test_bf16_recipe_is_an_alias_recorded_as_hp():
    # "bf16" quantized nothing and ran in fp32: the old name still works but every record says "hp"
    old, new = TrainConfig(recipe="bf16"), TrainConfig(recipe="hp")
    assert old.recipe == "hp" and old == new and old.config_hash() == new.config_hash()
    assert old.to_dict()["recipe"] == "hp" and old.auto_run_name().startswith("hp-s0-")
    assert TrainConfig.from_yaml(None, ["recipe=bf16"]).short_str().startswith("hp[sim]")
    assert TrainConfig(recipe="bf16", precision="bf16").precision == "bf16"   # the autocast dtype is untouched


def test_compile_model_is_the_notebook_name_of_compile(tmp_path):
    assert TrainConfig.from_dict({"compile_model": True}).compile is True
    p = tmp_path / "nb.yaml"
    p.write_text("compile_model: true\nmax_steps: 3\n")   # a notebook params file, as `altgrad train -f` reads it
    c = TrainConfig.from_yaml(p)
    assert c.compile is True and "compile_model" not in c.to_dict()
    with pytest.raises(ValueError, match="give only one"):
        TrainConfig.from_dict({"compile_model": True, "compile": False})


# ------------------------------------------------------------------ input errors
@pytest.mark.parametrize("key,value", [("lr", "1e1000"), ("lr", float("inf")), ("min_lr", float("nan")),
                                       ("grad_clip", float("inf")), ("dropout", float("nan"))])
def test_non_finite_floats_are_refused(key, value):
    with pytest.raises(ConfigError, match=f"TrainConfig.{key}=.* not a finite number"):
        TrainConfig.from_dict({key: value})
    with pytest.raises(ConfigError, match="not a finite number"):
        TrainConfig.from_yaml(None, [f"{key}={value}"])


def test_every_error_is_a_one_line_config_error(tmp_path):
    bad_yaml = tmp_path / "malformed.yaml"
    bad_yaml.write_text("lr: 3e-4\nrecipe: [fp8\nseed: 1\n")
    cases = [
        (lambda: TrainConfig.from_yaml(bad_yaml), [str(bad_yaml), "invalid YAML", "line 3"]),
        (lambda: TrainConfig.from_yaml(tmp_path), [str(tmp_path), "is a directory"]),
        (lambda: TrainConfig.from_yaml(tmp_path / "nope.yaml"), ["nope.yaml", "no such"]),
        (lambda: TrainConfig.from_yaml(None, ["lr=[0.1"]), ["lr=[0.1", "not valid YAML"]),
        (lambda: TrainConfig.from_dict({"n_layers": 2}), ["n_layers", "did you mean 'n_layer'"]),
        (lambda: TrainConfig.from_dict({"n_layer": "two"}), ["TrainConfig.n_layer"]),
        (lambda: TrainConfig.from_dict({"backend": "tpu"}), ["valid choices"]),
    ]
    for fn, needles in cases:
        with pytest.raises(ConfigError) as ei:
            fn()
        msg = str(ei.value)
        assert "\n" not in msg and all(n in msg for n in needles), msg
    assert issubclass(ConfigError, ValueError) and issubclass(ConfigTypeError, TypeError)


def test_every_key_has_a_meaning_and_the_validators_choices():
    docs = {k: (d, meaning, ch) for k, d, meaning, ch in key_docs()}
    assert list(docs) == TrainConfig.keys()
    for k, (default, meaning, _) in docs.items():
        assert len(meaning) > 10 and default == getattr(TrainConfig(), k), k
    # the choices shown are the very tuples the validators use (one source), not a copy
    from altgrad_lib import choices
    from altgrad_lib.training import data
    from altgrad_lib.quantize import recipes as surgery
    from altgrad_lib.training import tokenizers
    assert docs["backend"][2] is choices.BACKENDS and docs["mlp"][2] is choices.MLP_KINDS
    assert docs["precision"][2] is choices.PRECISIONS and docs["recipe"][2] is surgery.RECIPES
    assert docs["corpus"][2] is data.CORPORA and set(tokenizers.TOKENIZER_ALIASES) <= set(docs["tokenizer"][2])
    assert set(choices.DEVICES) <= set(docs["device"][2])


@pytest.mark.parametrize("recipe, match", [
    ("fp8_hybird", r"^TrainConfig.recipe='fp8_hybird': unknown recipe 'fp8_hybird'; did you mean 'fp8_hybrid'\?; "
                   r"valid choices: \('hp', 'fp8_hybrid'"),
    ("fmt:E9M9", r"^TrainConfig.recipe='fmt:E9M9': format 'E9M9': need 1 \+ x \+ y <= 8 bits.*valid built-ins: E4M3"),
    ("fmt:", r"expected 'fmt:<FMT>' or 'fmt:<FMT>:<GRAD_FMT>'"),
    ({"name": "x", "layers": {"attn": {"input": "E4M3"}}}, r"unknown layer class 'attn'; valid: \('\*', 'attn_qkv'"),
    ({"name": "x", "layers": {"*": {"inputs": "E4M3"}}}, r"LayerSpec: unknown key\(s\) \['inputs'\]; valid keys"),
    ({"layers": {"*": None}}, r"'name' \(or 'recipe'\) is required"),
])
def test_recipe_is_validated_by_train_config(recipe, match):
    # the recipe was the only setting TrainConfig did not check
    with pytest.raises(ConfigError, match=match) as ei:
        TrainConfig(recipe=recipe)
    assert "\n" not in str(ei.value)


def test_format_aliases_are_one_run_identity():
    # The canonical spellings' names and hashes were computed on the code before this change
    # (commit c11fe59), so runs recorded under them are still found and reused.
    canon = TrainConfig(recipe="fmt:E4M3")
    assert (canon.auto_run_name(), canon.config_hash()[:16]) == ("fmt_E4M3-s0-2dda0a57", "2dda0a579050553b")
    for alias in ("fmt:e4m3", "fmt:e4m3fn", "FMT:float8_e4m3fn", " fmt:E4M3"):
        c = TrainConfig(recipe=alias)
        assert c.recipe == "fmt:E4M3" and c.auto_run_name() == canon.auto_run_name(), alias
        assert c.config_hash() == canon.config_hash(), alias
    assert TrainConfig(recipe="fmt:e3m4:e4m3fn").auto_run_name() == "fmt_E3M4_E4M3-s0-7df8ae54"
    mix = {"name": "mix", "layers": {"*": {"input": "E4M3", "weight": {"fmt": "E4M3", "rounding": "nearest"},
                                           "grad_output": "E5M2"}}}
    assert TrainConfig(recipe=mix).config_hash()[:16] == "8d5332ac02fa5e3f"
    aliased = {"name": "mix", "layers": {"*": {"input": "e4m3fn", "weight": {"fmt": "float8_e4m3fn",
                                                                               "rounding": "nearest"},
                                               "grad_output": "fp8_e5m2"}}}
    assert TrainConfig(recipe=aliased).recipe == mix
    assert TrainConfig(recipe=aliased).config_hash()[:16] == "8d5332ac02fa5e3f"
    grid = dict(optimizer="grid_adamw", optim={"storage": "grid_sr", "weight_fmt": "E4M3"})
    assert TrainConfig(**grid).auto_run_name() == "hp-grid_adamw-grid_sr-s0-a1aa5f12"
    assert TrainConfig(**{**grid, "optim": {"storage": "grid_sr", "weight_fmt": "e4m3fn"}}).optim == grid["optim"]
    # E8M0 and E8M0FNU: one format, refused under either name as an operand format (no sign bit)
    for name in ("fmt:E8M0", "fmt:E8M0FNU", "fmt:e8m0fnu"):
        with pytest.raises(ConfigError, match="format E8M0FNU has no sign bit"):
            TrainConfig(recipe=name)


def test_diagnostics_off_survives_yaml(tmp_path):
    # YAML 1.1 reads `off` as False
    assert TrainConfig.from_yaml(None, ["diagnostics=off"]).diagnostics == "off"
    p = tmp_path / "x.yaml"
    p.write_text("diagnostics: off\n")
    assert TrainConfig.from_yaml(p).diagnostics == "off"
    assert TrainConfig.from_yaml(None, ["diagnostics=cheap"]).diagnostics == "cheap"
    dotted = TrainConfig.from_yaml(None, ["diagnostics.preset=off", "diagnostics.interval=5"])
    assert dotted.diagnostics["preset"] == "off"
    assert TrainConfig.from_yaml(p, ["diagnostics.interval=5"]).diagnostics == \
        TrainConfig.from_yaml(None, ["diagnostics.interval=5"]).diagnostics        # `off` in the file, then a field
    assert TrainConfig.from_yaml(None, ["diagnostics=off"]) == TrainConfig(diagnostics="off")


def test_train_config_import_and_named_recipes_stay_torch_free():
    import subprocess
    import sys

    code = ("import sys; from altgrad_lib.training.config import TrainConfig; "
            "[TrainConfig(recipe=r) for r in ('hp', 'bf16', 'fp8_hybrid', 'fp8_e4m3')]; "
            "assert 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parent.parent)



def test_diagnostics_off_with_a_sub_key_is_a_contradiction():
    """`-p diagnostics=off -p diagnostics.fisher_interval=5` resolved to the full preset."""
    with pytest.raises(ConfigError) as ei:
        TrainConfig.from_yaml(None, ["diagnostics=off", "diagnostics.fisher_interval=5"])
    msg = str(ei.value)
    assert "\n" not in msg and "diagnostics=off contradicts diagnostics.fisher_interval=5" in msg
    assert "diagnostics.preset=off" in msg
    only = TrainConfig.from_yaml(None, ["diagnostics.preset=off", "diagnostics.fisher_interval=5"])
    assert only.diagnostics_config.active_groups == ("fisher",)
    full = TrainConfig.from_yaml(None, ["diagnostics.fisher_interval=5"])      # documented: no preset means full
    assert full.diagnostics_config.preset == "full"


def test_an_oscillation_reset_that_never_comes_is_refused():
    """osc_reset's first reset follows step start + window (optim/osc_reset.py); beyond max_steps the run trained
    with no reset and no note."""
    base = dict(recipe="fp8_hybrid", max_steps=20)
    for optim in ({"osc_reset": True, "osc_reset_period": 300},
                  {"osc_reset": True, "osc_reset_window": 10, "osc_reset_start": 11}):
        with pytest.raises(ConfigError) as ei:
            TrainConfig(**base, optim=optim)
        assert "\n" not in str(ei.value) and "max_steps=20" in str(ei.value) and "no reset" in str(ei.value)
    TrainConfig(**base, optim={"osc_reset": True, "osc_reset_window": 10, "osc_reset_start": 10})   # resets at 20


def test_sub_configs_are_typed_frozen_and_built_with_the_config():
    """build_optimizer / Diagnostics / build_model take TrainConfig's typed parts, built once in __post_init__ (no
    re-parsing of `optim` / `diagnostics` in each room); the fields, config.yaml and the hash are untouched."""
    import dataclasses

    from altgrad_lib.optim.config import OptimConfig
    from altgrad_lib.training.config import ModelConfig

    cfg = TrainConfig(optimizer="grid_adamw", optim={"storage": "grid_sr", "weight_fmt": "e4m3fn"}, lr=2e-3,
                      beta2=0.99, seed=3, recipe="fmt:E4M3", diagnostics="cheap", n_embd=32)
    oc = cfg.optim_config
    assert isinstance(oc, OptimConfig) and not oc.is_torch_adamw and oc.on_grid
    assert (oc.name, oc.storage, oc.weight_fmt) == ("grid_adamw", "grid_sr", "E4M3")     # canonical format name
    assert (oc.train_lr, oc.weight_decay, oc.betas, oc.seed, oc.recipe) == (2e-3, 0.1, (0.9, 0.99), 3, "fmt:E4M3")
    assert cfg.optim == {"storage": "grid_sr", "weight_fmt": "E4M3"}                   # the record stays a dict
    assert cfg.diagnostics_config == DiagnosticsConfig(preset="cheap") and cfg.diagnostics == "cheap"
    assert cfg.model_config == ModelConfig(n_layer=2, n_head=2, n_embd=32, block_size=64, mlp="gelu",
                                           tie_weights=True, dropout=0.0, bias=False)
    for part in (oc, cfg.diagnostics_config, cfg.model_config):
        with pytest.raises(dataclasses.FrozenInstanceError):
            part.seed = 1
    assert TrainConfig().optim_config.is_torch_adamw
    assert cfg.replace(lr=1e-3).optim_config.train_lr == 1e-3             # rebuilt with every new config
    assert "optim_config" not in cfg.to_dict() and cfg == TrainConfig.from_dict(cfg.to_dict())


def test_grid_storage_on_a_hardware_backend_is_refused_with_the_config():
    with pytest.raises(ConfigError, match=r"optim.storage='grid_sr' needs backend 'sim' \(got 'torchao'\)"):
        TrainConfig(backend="torchao", recipe="fp8_hybrid", optim={"storage": "grid_sr"})


def test_compile_scope_is_checked_and_hashed_only_when_set():
    with pytest.raises(ConfigError, match=r"compile_scope='block' is invalid; did you mean 'blocks'"):
        TrainConfig(compile=True, compile_scope="block")
    with pytest.raises(ConfigError, match=r"compile_scope='blocks' with compile=False: nothing is compiled"):
        TrainConfig(compile_scope="blocks")          # refused, not silently ignored
    # the default leaves every earlier hash as it was (test_config_run_hashes.py); blocks is a run of its own
    assert TrainConfig(compile=True, compile_scope="blocks").config_hash() != TrainConfig(compile=True).config_hash()


def test_the_model_defaults_are_one():
    """A default TrainConfig's model is GPTConfig() (vocabulary aside: the tokenizer's): TrainConfig's model keys
    read GPTConfig's defaults instead of keeping a second set (they used to differ: 2 x 64 here, 4 x 128 there)."""
    import dataclasses

    from altgrad_lib.model_config import GPTConfig
    from altgrad_lib.training.build import gpt_config
    from altgrad_lib.training.sub_configs import ModelConfig

    shared = {f.name for f in dataclasses.fields(GPTConfig)} & set(TrainConfig.keys())
    assert shared == {f.name for f in dataclasses.fields(ModelConfig)}      # every model key has a GPTConfig field
    assert gpt_config(TrainConfig().model_config, GPTConfig().vocab_size) == GPTConfig()
    docs = {k: default for k, default, _, _ in key_docs()}
    assert {k: docs[k] for k in shared} == {k: getattr(GPTConfig(), k) for k in shared}
