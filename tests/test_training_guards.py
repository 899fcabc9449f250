"""Tests for altgrad_lib.training.guards (gradient-flow guard) and the frozen-blocks control of train()."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from altgrad_lib.training.guards import GradientFlowError, check_gradient_flow, dead_gradients
from altgrad_lib.model import GPT, GPTConfig
from altgrad_lib.quantize.recipes import get_policy
from altgrad_lib.quantize.convert import quantize_model, quantized_modules
from altgrad_lib.training.loop import TrainConfig, train

TINY = dict(n_layer=1, n_head=2, n_embd=32, block_size=32, batch_size=4, max_docs=50, tokenizer="gpt2-512",
            max_steps=6, warmup_steps=1, eval_interval=0, eval_iters=1, ckpt_interval=0, recipe="fp8_hybrid")


def _quantized_gpt() -> GPT:
    torch.manual_seed(0)
    m = GPT(GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=8, vocab_size=64))
    quantize_model(m, get_policy("fp8_hybrid"), verbose=False)
    return m


def _backward(m: GPT) -> None:
    x = torch.randint(0, 64, (2, 8))
    _, loss = m(x, x)
    loss.backward()


def _break_blocks(m: torch.nn.Module) -> None:
    """The torch 2.11 symptom, made on purpose: every block parameter's gradient is replaced by zeros."""
    for n, p in m.named_parameters():
        if ".h." in n:
            p.register_hook(torch.zeros_like)


def test_healthy_model_passes():
    m = _quantized_gpt()
    _backward(m)
    assert dead_gradients(m) == []
    check_gradient_flow(m, 1, quantized_modules(m))


def test_zeroed_block_gradients_are_named_quantized_layers_first():
    m = _quantized_gpt()
    _break_blocks(m)
    _backward(m)
    blocks = [n for n, _ in m.named_parameters() if ".h." in n]
    assert dead_gradients(m) == blocks   # brute force: exactly the params whose grads were zeroed, in order
    with pytest.raises(GradientFlowError) as e:
        check_gradient_flow(m, 7, quantized_modules(m))
    msg = str(e.value)
    assert "step 7" in msg and f"{len(blocks)} of {len(list(m.parameters()))}" in msg
    assert "(8 in quantized layers)" in msg and "transformer.h.0.attn.c_attn.weight" in msg


def test_missing_gradient_counts_and_frozen_params_do_not():
    m = _quantized_gpt()
    m.transformer.wpe.weight.requires_grad_(False)       # frozen: never expected to learn
    _backward(m)
    m.transformer.ln_f.weight.grad = None                # trainable but no gradient at all
    assert dead_gradients(m) == ["transformer.ln_f.weight"]


def test_train_stops_a_run_whose_blocks_get_no_gradient(tmp_path: Path):
    cfg = TrainConfig.from_dict({**TINY, "out_dir": str(tmp_path)})
    with pytest.raises(GradientFlowError, match="at step 1, .* in quantized layers"):
        train(cfg, progress=False, verbose=False, on_model=_break_blocks)
    assert not (cfg.run_dir / "checkpoints" / "last.pt").exists()
    assert not (cfg.run_dir / "summary.json").exists()


def test_guard_every_n_steps_and_off(tmp_path: Path):
    broken = {"on": False}

    def break_later(m):   # block gradients become zero once on_step has seen step 3
        for n, p in m.named_parameters():
            if ".h." in n:
                p.register_hook(lambda g: torch.zeros_like(g) if broken["on"] else g)

    def on_step(step, _metrics):
        broken["on"] = step >= 3

    cfg = TrainConfig.from_dict({**TINY, "out_dir": str(tmp_path / "a"), "grad_guard_interval": 2})
    with pytest.raises(GradientFlowError, match="at step 4"):   # checked at steps 1, 2, 4: not at 3
        train(cfg, progress=False, verbose=False, on_model=break_later, on_step=on_step)
    off = TrainConfig.from_dict({**TINY, "out_dir": str(tmp_path / "b"), "grad_guard_interval": -1})
    assert train(off, progress=False, verbose=False, on_model=_break_blocks).status == "completed"
    assert off.config_hash() == cfg.replace(grad_guard_interval=-1).config_hash()   # the guard changes no number


def test_freeze_blocks_trains_only_embeddings_and_head(tmp_path: Path):
    seen = {}

    def keep(m):
        seen["model"] = m
        seen["init"] = {n: p.detach().clone() for n, p in m.named_parameters()}

    cfg = TrainConfig.from_dict({**TINY, "out_dir": str(tmp_path), "freeze_blocks": True})
    assert cfg.config_hash() != cfg.replace(freeze_blocks=False).config_hash()
    assert train(cfg, progress=False, verbose=False, on_model=keep).status == "completed"
    for n, p in seen["model"].named_parameters():
        moved = not torch.equal(p.detach(), seen["init"][n])
        assert moved == (".h." not in n), f"{n}: moved={moved}"
