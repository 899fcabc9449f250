"""The model of a TrainConfig: its GPTConfig and the quantized GPT train() trains (one copy, used by preflight,
the training loop and the notebooks' model tables)."""
from __future__ import annotations

from typing import Any

import torch

from altgrad_lib.model import GPT, GPTConfig
from altgrad_lib.quantize.convert import quantize_model
from altgrad_lib.quantize.recipes import QuantPolicy
from altgrad_lib.training.sub_configs import ModelConfig


def gpt_config(model: ModelConfig, vocab_size: int) -> GPTConfig:
    """The GPTConfig of `model` (TrainConfig.model_config) for a tokenizer of `vocab_size` tokens."""
    return GPTConfig(block_size=model.block_size, vocab_size=vocab_size, n_layer=model.n_layer, n_head=model.n_head,
                     n_embd=model.n_embd, dropout=model.dropout, bias=model.bias, mlp=model.mlp,
                     tie_weights=model.tie_weights)


def build_model(model: ModelConfig, vocab_size: int, policy: QuantPolicy, verbose: bool = False
                ) -> tuple[torch.nn.Module, Any]:
    """The GPT of `model` (TrainConfig.model_config) quantized by `policy` (TrainConfig.quant_policy) on CPU; returns
    (model, quantize_model's table). Draws the initial weights from the global torch RNG."""
    gpt = GPT(gpt_config(model, vocab_size))
    return gpt, quantize_model(gpt, policy, verbose=verbose)
