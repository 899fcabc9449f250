"""A small GPT (nanoGPT-style) that the quantization experiments train.

Everything about the network lives here but its config (model_config.GPTConfig, torch-free: TrainConfig
takes its defaults from it): attention, MLP (GELU or SwiGLU), block, GPT.
Module names (`transformer.h[i].attn.c_attn`, `mlp.c_fc`, `lm_head`, ...) are the contract that
`altgrad_lib.quantize.recipes` matches layer classes against, so do not rename them.

Attention runs through `F.scaled_dot_product_attention(is_causal=True)`. For monitors that need
attention probabilities (entropy collapse is a known low-precision failure), `model.capture_attention()`
switches attention to an explicit softmax path only while the context is active. A policy with `attn:` puts
a low-precision attention module in `attention_op` (quantize/convert.py; this file does not import quantize/).
"""
from __future__ import annotations

import contextlib
import math
from typing import Callable, Iterator

import torch
import torch.nn as nn
import torch.nn.functional as F

from altgrad_lib.choices import COMPILE_SCOPES
from altgrad_lib.errors import check_choice
from altgrad_lib.model_config import GPTConfig   # here too: callers import it with GPT


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.dropout = config.dropout
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)  # q, k, v in one GEMM
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.capture: list[torch.Tensor] | None = None  # set by GPT.capture_attention()
        # set by quantize.convert for a policy with `attn:` (quantize/attention.py): a module
        # (q, k, v, dropout_p, capture) -> (B, T, C) in place of SDPA; None = the high-precision attention below
        self.attention_op: nn.Module | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        hs = C // self.n_head
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)          # 3 x (B, T, C)
        q = q.view(B, T, self.n_head, hs).transpose(1, 2)           # (B, nh, T, hs)
        k = k.view(B, T, self.n_head, hs).transpose(1, 2)           # (B, nh, T, hs)
        v = v.view(B, T, self.n_head, hs).transpose(1, 2)           # (B, nh, T, hs)
        if self.attention_op is not None:   # low-precision attention (it appends its probabilities to capture)
            y = self.attention_op(q, k, v, dropout_p=self.dropout if self.training else 0.0, capture=self.capture)
            return self.resid_dropout(self.c_proj(y))
        if self.capture is None:
            y = F.scaled_dot_product_attention(
                q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True
            )                                                        # (B, nh, T, hs)
        else:
            # explicit path, only for monitors: same math as SDPA, but the probabilities are kept
            att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)          # (B, nh, T, T)
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            att = att.masked_fill(~mask, float("-inf"))
            att = F.softmax(att, dim=-1)
            self.capture.append(att.detach())
            if self.training and self.dropout > 0:
                att = F.dropout(att, p=self.dropout)
            y = att @ v                                              # (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)             # (B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        hidden = config.mlp_hidden
        self.kind = config.mlp
        self.c_fc = nn.Linear(config.n_embd, hidden, bias=config.bias)
        if self.kind == "swiglu":
            self.c_gate = nn.Linear(config.n_embd, hidden, bias=config.bias)
        self.c_proj = nn.Linear(hidden, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind == "swiglu":
            h = F.silu(self.c_gate(x)) * self.c_fc(x)                # (B, T, hidden)
        else:
            h = F.gelu(self.c_fc(x))                                 # (B, T, hidden)
        return self.dropout(self.c_proj(h))                          # (B, T, C)


class Block(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))                              # (B, T, C)
        x = x + self.mlp(self.ln_2(x))                               # (B, T, C)
        return x


class GPT(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.padded_vocab_size, config.n_embd),
            wpe=nn.Embedding(config.block_size, config.n_embd),
            drop=nn.Dropout(config.dropout),
            h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            ln_f=nn.LayerNorm(config.n_embd, bias=config.bias),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.padded_vocab_size, bias=False)
        if config.tie_weights:
            self.lm_head.weight = self.transformer.wte.weight
        self.apply(self._init_weights)
        # GPT-2: residual projections scaled by 1/sqrt(2 * n_layer) so the residual stream does not grow with depth
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def num_params(self, non_embedding: bool = False) -> int:
        """Unique parameters (a tied lm_head is counted once); non_embedding drops wpe (and untied wte)."""
        n = sum(p.numel() for p in self.parameters())  # parameters() already de-duplicates tied tensors
        if non_embedding:
            n -= self.transformer.wpe.weight.numel()
        return n

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        B, T = idx.size()
        if T > self.config.block_size:
            raise ValueError(f"sequence length {T} > block_size {self.config.block_size}")
        pos = torch.arange(0, T, dtype=torch.long, device=idx.device)          # (T,)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))  # (B, T, C)
        for block in self.transformer.h:
            x = block(x)                                                        # (B, T, C)
        x = self.transformer.ln_f(x)                                            # (B, T, C)
        logits = self.lm_head(x)[..., :self.config.vocab_size]                  # (B, T, V): padding dropped
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.view(-1),
                                   ignore_index=-1)
        return logits, loss

    @contextlib.contextmanager
    def capture_attention(self) -> Iterator[list[torch.Tensor]]:
        """`with model.capture_attention() as probs: model(idx)` -> probs is a list of (B, nh, T, T), one per
        layer per forward. Outside the context attention goes back to SDPA (no overhead)."""
        probs: list[torch.Tensor] = []
        attns = [m for m in self.modules() if isinstance(m, CausalSelfAttention)]
        for m in attns:
            m.capture = probs
        try:
            yield probs
        finally:
            for m in attns:
                m.capture = None


def freeze_blocks(model: nn.Module) -> int:
    """The frozen-blocks control: no transformer-block parameter trains (embeddings, ln_f, lm_head still do).
    A format's loss gap means something only if the full model clearly beats this control. Returns the count."""
    frozen = [p for n, p in model.named_parameters() if n.startswith("transformer.h.")]
    for p in frozen:
        p.requires_grad_(False)
    return len(frozen)


def compile_gpt(model: GPT, scope: str = "model", backend: str = "inductor") -> Callable:
    """What the training loop calls for the model. "model": torch.compile of the whole model, one graph (the fastest
    steps). "blocks": each transformer block compiled in place (nn.Module.compile); the blocks share their code, so
    one graph serves them all (a block's own state stays an input), and embeddings, final norm and loss run eager.
    bench/results/train_step.md (2-core AMD EPYC, one thread, cold inductor cache, 4 x 64 model): builds 3.4-5.5x
    shorter (fp8_hybrid 47 -> 14 s, nvfp4 121 -> 31 s), steps 6-8 % slower."""
    units = compile_units(model, scope)
    if scope == "model":
        return torch.compile(model, backend=backend)
    for block in units:
        block.compile(backend=backend)
    return model


def compile_units(model: GPT, scope: str) -> list[nn.Module]:
    """The modules compile_gpt compiles one by one under `scope`: the model, or each transformer block."""
    check_choice("compile_scope", scope, COMPILE_SCOPES)
    return [model] if scope == "model" else list(model.transformer.h)
