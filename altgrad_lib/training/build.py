"""The model of a TrainConfig: its GPTConfig and the quantized GPT train() trains (one copy, used by preflight,
the training loop and the notebooks' model tables)."""
from __future__ import annotations

from typing import Any

import torch

from altgrad_lib.model import GPT, GPTConfig
from altgrad_lib.quantize.convert import quantize_model


def gpt_config(cfg: Any, vocab_size: int) -> Any:
    """The GPTConfig of TrainConfig `cfg` for a tokenizer of `vocab_size` tokens."""
    return GPTConfig(block_size=cfg.block_size, vocab_size=vocab_size, n_layer=cfg.n_layer, n_head=cfg.n_head,
                     n_embd=cfg.n_embd, dropout=cfg.dropout, bias=cfg.bias, mlp=cfg.mlp, tie_weights=cfg.tie_weights)


def build_model(cfg: Any, vocab_size: int, policy: Any, verbose: bool = False) -> tuple[torch.nn.Module, Any]:
    """The GPT of `cfg` quantized by `policy` (a resolved QuantPolicy) on CPU; returns (model, quantize_model's
    table). Draws the initial weights from the global torch RNG."""
    model = GPT(gpt_config(cfg, vocab_size))
    return model, quantize_model(model, policy, verbose=verbose)
