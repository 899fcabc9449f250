"""Tests for altgrad_lib.training.build: the one GPTConfig-from-TrainConfig, and how often one train() builds a
model and resolves its recipe (preflight builds both once; the loop trains what it built)."""
from __future__ import annotations

import sys

import torch

from altgrad_lib.model import GPT
from altgrad_lib.quantize import recipes
from altgrad_lib.training.build import build_model, gpt_config
from altgrad_lib.training.config import TrainConfig
from altgrad_lib.training.loop import train

TINY = dict(n_layer=1, n_head=2, n_embd=32, block_size=32, batch_size=4, max_docs=30, tokenizer="gpt2-512",
            max_steps=1, eval_iters=1, recipe="fp8_hybrid")


def test_gpt_config_carries_every_model_field_of_the_train_config():
    cfg = TrainConfig(**{**TINY, "mlp": "swiglu", "bias": True, "tie_weights": False, "dropout": 0.1, "n_layer": 3})
    g = gpt_config(cfg.model_config, 513)
    assert (g.block_size, g.vocab_size, g.n_layer, g.n_head, g.n_embd, g.dropout, g.bias, g.mlp, g.tie_weights) == \
        (32, 513, 3, 2, 32, 0.1, True, "swiglu", False)
    torch.manual_seed(0)
    model, table = build_model(cfg.model_config, 513, recipes.get_policy("fp8_hybrid"))
    assert model.config == g and len(table) == 3 * 5 + 1   # swiglu: qkv, attn out, up, gate, down; + lm_head


def test_one_train_builds_its_models_and_resolves_its_recipe_once(tmp_path, monkeypatch):
    builds, resolved = [], []
    init, get_policy = GPT.__init__, recipes.get_policy

    def counting_init(self, *a, **k):
        # "meta" inside the size estimate's device context; the width tells preflight's tiny model from full size
        builds.append((str(torch.empty(0).device), a[0].n_embd))
        init(self, *a, **k)

    def counting_get_policy(p, *a, **k):
        # resolutions by the training layer (a QuantPolicy passed through is not one)
        if not isinstance(p, recipes.QuantPolicy) and "altgrad_lib/training/" in sys._getframe(1).f_code.co_filename:
            resolved.append(p)
        return get_policy(p, *a, **k)

    monkeypatch.setattr(GPT, "__init__", counting_init)
    monkeypatch.setattr(recipes, "get_policy", counting_get_policy)
    run = train(TrainConfig(**{**TINY, "out_dir": str(tmp_path)}), progress=False, verbose=False)
    assert run.status == "completed"
    # preflight's tiny-width model (check_settings: what the recipe quantizes in every block, the optimizer's grids),
    # the size estimate (meta device), and one full-size model: preflight's check_model builds it, train() trains it
    width = TINY["n_embd"]
    assert builds == [("cpu", 16), ("meta", width), ("cpu", width)] and width > 16
    assert resolved == ["fp8_hybrid"]
