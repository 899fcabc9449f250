"""Tests for altgrad_lib.training.preflight: exact parameter counts, the activation estimate against the tensors
autograd really saves, refusal / warnings on size, and config mistakes caught before any run directory exists."""
from __future__ import annotations

import os

import pytest
import torch

from altgrad_lib.training import preflight as pf
from altgrad_lib.errors import ConfigError, SizeWarning
from altgrad_lib.model import GPT
from altgrad_lib.training.build import build_model, gpt_config
from altgrad_lib.training.config import TrainConfig
from altgrad_lib.training.loop import seed_everything

TINY = dict(n_layer=1, n_head=2, n_embd=32, block_size=32, batch_size=4, max_docs=30, tokenizer="gpt2-512",
            max_steps=2, eval_iters=1)


def _saved_for_backward_bytes(cfg: TrainConfig, vocab: int) -> int:
    """Bytes of the distinct storages autograd saves in one training forward (parameters excluded)."""
    torch.manual_seed(0)
    model, _ = build_model(cfg.model_config, vocab, pf.check_policy(cfg))
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        s = t.untyped_storage()
        if s.data_ptr() not in params:
            seen[s.data_ptr()] = max(seen.get(s.data_ptr(), 0), s.nbytes())
        return t

    x = torch.randint(0, vocab, (cfg.batch_size, cfg.block_size))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x, x)
    return sum(seen.values())


@pytest.mark.parametrize("kw", [dict(), dict(mlp="swiglu", bias=True), dict(tie_weights=False, n_layer=3),
                                dict(n_embd=96, n_head=3, block_size=80)])
def test_param_count_is_exact(kw):
    cfg = TrainConfig(**{**TINY, **kw})
    assert pf.count_params(cfg, 513) == sum(p.numel() for p in GPT(gpt_config(cfg.model_config, 513)).parameters())


@pytest.mark.parametrize("kw", [dict(), dict(n_layer=4, n_embd=128, n_head=4), dict(mlp="swiglu"),
                                dict(recipe="fp8_hybrid_all", n_embd=128, n_head=4, block_size=64),
                                dict(block_size=128, batch_size=2, n_layer=3)])
def test_activation_estimate_matches_what_autograd_saves(kw):
    cfg = TrainConfig(**{**TINY, **kw})
    e = pf.estimate_memory(cfg, 4097)
    est = e["activations"] + e["quantized_weight_copies"]
    measured = _saved_for_backward_bytes(cfg, 4097)
    assert 0.75 < est / measured < 1.33, (est, measured)


def test_size_is_refused_when_it_cannot_fit_and_warned_when_huge():
    cfg = TrainConfig(**TINY)
    need = pf.estimate_memory(cfg, 513)["total"]
    cpu = torch.device("cpu")
    with pytest.raises(ConfigError, match="needs about .* but only .* available") as ei:
        pf.check_size(cfg, 513, cpu, available=need * 0.9)
    assert "\n" not in str(ei.value)
    with pytest.warns(SizeWarning, match="needs about"):
        pf.check_size(cfg, 513, cpu, available=need * 1.5)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pf.check_size(cfg, 513, cpu, available=need * 10)           # small and fast: silent
    long = TrainConfig(**{**TINY, "block_size": 50000, "batch_size": 1, "max_steps": 5000})
    with pytest.warns(SizeWarning, match=r"take at least ~\d"):
        pf.check_size(long, 513, cpu, available=1e15)
    # a block_size=200000 default-sized run needs far more than a workstation has
    huge = pf.estimate_memory(TrainConfig(block_size=200_000), 4097)
    assert huge["total"] > 64 * 2**30


@pytest.mark.parametrize("change,needles", [
    (dict(recipe="fp8_hybird"), ["TrainConfig.recipe", "fp8_hybird", "fp8_hybrid"]),
    (dict(recipe={"attn_qkv": {"input": "E4M3"}}), ["TrainConfig.recipe", "attn_qkv", "layers"]),
    (dict(recipe={"name": "x", "layers": {"*": {"input": "E9M9"}}}), ["E9M9"]),
    (dict(backend="torchao", recipe="fmt:E3M4"), ["torchao", "e3m4", "backend='sim'"]),
    (dict(tokenizer="gpt3"), ["TrainConfig.tokenizer", "gpt3"]),
    (dict(corpus="licences"), ["TrainConfig.corpus", "licences", "licenses"]),
    (dict(corpus="eurlex"), ["eurlex", "licenses"]),
    (dict(block_size=4096, max_docs=1), ["block_size+1=4097", "max_docs"]),
])
def test_mistakes_are_one_line_config_errors_before_any_directory(tmp_path, change, needles, monkeypatch):
    monkeypatch.setenv("ALTGRAD_OFFLINE", "1")
    with pytest.raises(ConfigError) as ei:   # a recipe mistake already fails in TrainConfig, the rest in preflight
        pf.preflight(TrainConfig(**{**TINY, "out_dir": str(tmp_path / "runs"), "run_name": "x", **change}))
    msg = str(ei.value)
    assert "\n" not in msg and all(n in msg for n in needles), msg
    assert not (tmp_path / "runs" / "x").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_a_gpu_is_a_config_error():
    for name in ("cuda", "cuda:1"):
        with pytest.raises(ConfigError, match="CUDA is not available"):
            pf.check_device(name)
    assert pf.check_device("auto").type == "cpu"


def test_unwritable_out_dir_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="not writable"):
        pf.check_out_dir("/proc/altgrad-test/runs")                  # procfs: nothing can be created there
    f = tmp_path / "a_file"
    f.write_text("x")
    with pytest.raises(ConfigError, match="not writable"):
        pf.check_out_dir(f / "runs")                                  # a file where a directory must be
    if os.geteuid() != 0:                                             # root ignores permission bits
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o555)
        with pytest.raises(ConfigError, match="not writable"):
            pf.check_out_dir(ro)
    pf.check_out_dir(tmp_path / "new" / "runs")
    assert not list((tmp_path / "new" / "runs").iterdir())           # the write test leaves nothing behind


def test_model_check_leaves_the_global_rng_alone():
    cfg = TrainConfig(**TINY)
    torch.manual_seed(123)
    pf.check_model(cfg, 513)
    after = torch.rand(3)
    torch.manual_seed(123)
    assert torch.equal(after, torch.rand(3))


@pytest.mark.parametrize("change, needles", [
    (dict(optim={"storage": "grid_sr"}),
     ["optim.storage='grid_sr'", "no trainable weight has a format", "recipe 'hp'"]),
    (dict(optim={"storage": "grid_sr"}, recipe="fp8_hybrid", freeze_blocks=True),
     ["no trainable weight has a format", "freeze_blocks=True"]),
    (dict(optim={"state_m": "E9M9"}), ["TrainConfig.optimizer='grid_adamw'", "format 'E9M9'", "valid built-ins"]),
    (dict(optim={"weight_fmt": "E8M0FNU"}), ["optim.weight_fmt='E8M0FNU'", "no sign bit"]),
])
def test_optimizer_settings_fail_in_preflight_before_any_directory(tmp_path, change, needles):
    # these passed preflight / --print-config, then train() raised a traceback after
    # creating the run directory
    cfg = TrainConfig(**{**TINY, "out_dir": str(tmp_path / "runs"), "run_name": "x", "optimizer": "grid_adamw",
                         **change})
    for check in (pf.check_config, pf.preflight):
        with pytest.raises(ConfigError) as ei:
            check(cfg)
        assert "\n" not in str(ei.value) and all(n in str(ei.value) for n in needles), str(ei.value)
    assert not (tmp_path / "runs").exists()


def test_a_bad_weight_format_fails_in_train_config():
    with pytest.raises(ConfigError, match=r"TrainConfig.optimizer/optim: format 'E4M33': need .*valid built-ins"):
        TrainConfig(**TINY, optimizer="grid_adamw", optim={"weight_fmt": "E4M33"})


def test_preflight_builds_the_optimizer_with_the_factory(monkeypatch):
    # one copy of the optimizer's rules: preflight calls optim.factory.build_optimizer itself (on a tiny model)
    import altgrad_lib.optim.factory as factory

    seen = []

    def spy(model, cfg, device=None):
        seen.append(sorted({type(m).__name__ for m in model.modules()}))
        raise ValueError("refused by the factory")

    monkeypatch.setattr(factory, "build_optimizer", spy)
    cfg = TrainConfig(**TINY, recipe="fp8_hybrid", optimizer="grid_sgd")
    with pytest.raises(ConfigError, match="TrainConfig.optimizer='grid_sgd' with optim={}: refused by the factory"):
        pf.check_config(cfg)
    assert "QuantizedLinear" in seen[0]                               # the recipe's quantized modules
    pf.check_config(TrainConfig(**TINY))                              # torch AdamW: nothing to build
    assert len(seen) == 1


def test_a_valid_optimizer_passes_and_leaves_the_rng_alone():
    cfg = TrainConfig(**TINY, recipe="fp8_hybrid", optimizer="grid_adamw",
                      optim={"storage": "grid_sr", "state_m": "E4M3", "state_v": "E5M2"})
    before = torch.random.get_rng_state()
    pf.check_config(cfg)
    assert torch.equal(torch.random.get_rng_state(), before)        # the real build draws the same init


def test_the_optimizer_check_sees_every_block_of_the_model(monkeypatch):
    """check_optimizer's model had one block: with hp_last=1 on a 2-block model it saw no quantized weight and
    refused grid storage the run itself accepts."""
    import altgrad_lib.optim.factory as factory

    real, seen = factory.build_optimizer, []

    def spy(model, optim_config, device=None):
        seen.append(model)
        return real(model, optim_config, device)

    monkeypatch.setattr(factory, "build_optimizer", spy)
    recipe = {"recipe": "fp8_hybrid", "hp_last_blocks": 1}
    cfg = TrainConfig(**{**TINY, "n_layer": 2}, recipe=recipe, optimizer="grid_adamw", optim={"storage": "grid_sr"})
    pf.check_config(cfg)                                   # accepted, as the run accepts it
    (model,) = seen                                        # the optimizer was built, on a model of both blocks
    assert len(model.transformer.h) == 2
    kinds = {n: type(m).__name__ for n, m in model.named_modules() if n.endswith(("c_attn", "c_proj", "c_fc"))}
    assert {n.split(".")[2] for n, k in kinds.items() if k == "QuantizedLinear"} == {"0"}   # block 0 quantized
    assert {n.split(".")[2] for n, k in kinds.items() if k == "Linear"} == {"1"}            # hp_last=1: block 1


@pytest.mark.parametrize("recipe, n_layer", [("nvfp4:disable_rht:hp_last=1", 1), ("nvfp4:hp_last=5", 2),
                                             ({"recipe": "fp8_hybrid", "hp_last_blocks": 2}, 2)])
def test_a_recipe_that_quantizes_nothing_on_the_model_is_refused(tmp_path, recipe, n_layer):
    """These trained an all-hp model under the recipe's name ("0/5 Linear quantized" was the only hint)."""
    cfg = TrainConfig(**{**TINY, "n_layer": n_layer, "out_dir": str(tmp_path / "runs"), "run_name": "x"},
                      recipe=recipe)
    for check in (pf.check_config, pf.preflight):
        with pytest.raises(ConfigError) as ei:
            check(cfg)
        msg = str(ei.value)
        assert "\n" not in msg and "quantizes no Linear of this model" in msg and f"n_layer={n_layer}" in msg, msg
    assert not (tmp_path / "runs").exists()
    pf.check_config(TrainConfig(**{**TINY, "n_layer": n_layer}, recipe="hp"))       # hp quantizes nothing by design


def test_check_model_builds_what_seed_everything_and_build_model_would():
    """train() trains preflight's model (one full-size build per run): the same weights and quantizers as
    seed_everything(cfg.seed) + build_model, and the RNG state that build leaves (dropout continues from there)."""
    cfg = TrainConfig(**{**TINY, "seed": 7, "dropout": 0.1})
    built = pf.check_model(cfg, 513)
    seed_everything(7)
    model, rows = build_model(cfg.model_config, 513, pf.check_policy(cfg))
    assert rows == built.rows and torch.equal(built.rng_after, torch.get_rng_state())
    sa, sb = model.state_dict(), built.model.state_dict()
    assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa if torch.is_tensor(sa[k]))
