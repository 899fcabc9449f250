"""The pairing invariant the claims tables rest on (studies/claims.py): runs that differ only in their recipe (or in
freeze_blocks) start from the same weights and see the same batches when they share a seed. Trained through the
real train() with the hooks it offers: on_model sees the model after quantization, and every batch the loop asks the
corpus for is recorded. A recipe that drew random numbers before the weights were initialised, or a loop that fed
quantized runs other batches, fails here."""
from __future__ import annotations

import pytest
import torch
from helpers import SR_DELAYED

from altgrad_lib.training.data import TokenCorpus
from altgrad_lib.training.loop import TrainConfig, train

TINY = dict(n_layer=1, n_head=2, n_embd=32, block_size=32, batch_size=4, max_docs=50, tokenizer="gpt2-512",
            max_steps=3, warmup_steps=1, eval_interval=0, eval_iters=1, ckpt_interval=0)
E2M1 = {"name": "E2M1-XWdY", "layers": {"*": {"input": "E2M1", "weight": "E2M1", "grad_output": "E2M1"},
                                         "lm_head": None}}


_GET_BATCH = TokenCorpus.get_batch   # the real one: each _trace patches it anew


def _trace(tmp_path, monkeypatch, **kw):
    """(the float parameters right after the model is built and quantized, the train batches of the first steps)."""
    batches = []
    real = _GET_BATCH

    def spy(self, split, batch_size, block_size, seed, step, device=None):
        x, y = real(self, split, batch_size, block_size, seed, step, device)
        if split == "train":
            batches.append((step, x.clone(), y.clone()))
        return x, y

    monkeypatch.setattr(TokenCorpus, "get_batch", spy)
    init = {}

    def on_model(model):
        init.update({k: v.detach().clone() for k, v in model.named_parameters()})

    cfg = TrainConfig.from_dict({**TINY, "out_dir": str(tmp_path / str(len(list(tmp_path.iterdir())))), **kw})
    train(cfg, progress=False, verbose=False, on_model=on_model)
    return init, batches


@pytest.mark.parametrize("other", [dict(recipe="fp8_hybrid"), dict(recipe=E2M1), dict(recipe=SR_DELAYED),
                                   dict(recipe="fmt:E7M0"), dict(freeze_blocks=True)])
def test_same_seed_same_init_and_batches_whatever_the_recipe(tmp_path, monkeypatch, other):
    init_hp, batches_hp = _trace(tmp_path, monkeypatch, recipe="hp", seed=1)
    init_v, batches_v = _trace(tmp_path, monkeypatch, **{"recipe": "hp", "seed": 1, **other})
    assert init_hp.keys() == init_v.keys() and len(init_hp) > 4
    for k in init_hp:
        assert torch.equal(init_hp[k], init_v[k]), f"{other}: initial {k} differs from hp's"
    assert len(batches_hp) == len(batches_v) == TINY["max_steps"]
    for (s1, x1, y1), (s2, x2, y2) in zip(batches_hp, batches_v):
        assert s1 == s2 and torch.equal(x1, x2) and torch.equal(y1, y2), f"{other}: batch of step {s1} differs"


def test_another_seed_changes_both(tmp_path, monkeypatch):
    """The check can fail: a different seed gives other weights and other batches."""
    init0, b0 = _trace(tmp_path, monkeypatch, seed=0)
    init1, b1 = _trace(tmp_path, monkeypatch, seed=1)
    assert not all(torch.equal(init0[k], init1[k]) for k in init0)
    assert not torch.equal(b0[0][1], b1[0][1])
