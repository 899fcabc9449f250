"""GPTConfig: the GPT's shape (model.py builds the network from it), torch-free so that TrainConfig can take its
model keys' defaults from here without importing torch (`altgrad train --help` stays instant)."""
from __future__ import annotations

import math
from dataclasses import dataclass

from altgrad_lib.choices import MLP_KINDS


@dataclass(frozen=True)
class GPTConfig:
    """The GPT's shape. Its defaults are the one copy of the model defaults: TrainConfig's model keys read them
    (training/config.py); vocab_size comes from the tokenizer there."""

    block_size: int = 64       # max sequence length
    vocab_size: int = 4096
    n_layer: int = 2
    n_head: int = 2
    n_embd: int = 64
    dropout: float = 0.0
    bias: bool = False         # bias in Linear and LayerNorm
    mlp: str = "gelu"          # "gelu" | "swiglu" (SwiGLU creates activation outliers, an FP8 stress case)
    tie_weights: bool = True   # lm_head.weight is transformer.wte.weight
    # wte / lm_head rows padded to a multiple of this (nanoGPT: 50257 -> 50304). FP8 GEMMs (torch._scaled_mm,
    # torchao) need dimensions divisible by 16, and GEMMs are faster on round sizes; the padded logits are
    # dropped before the loss, so the rows are never predicted (their gradient is zero). 1 = no padding.
    vocab_multiple: int = 64

    def __post_init__(self) -> None:
        for name in ("block_size", "vocab_size", "n_layer", "n_head", "n_embd", "vocab_multiple"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"GPTConfig.{name} must be a positive int, got {v!r}")
        if self.n_embd % self.n_head != 0:
            raise ValueError(
                f"GPTConfig: n_embd={self.n_embd} must be divisible by n_head={self.n_head} "
                f"(valid n_head: {[h for h in range(1, self.n_embd + 1) if self.n_embd % h == 0]})"
            )
        if self.mlp not in MLP_KINDS:
            raise ValueError(f"GPTConfig.mlp={self.mlp!r} unknown; valid choices: {MLP_KINDS}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"GPTConfig.dropout={self.dropout!r} must be in [0, 1)")

    @property
    def padded_vocab_size(self) -> int:
        """Rows of wte / lm_head: vocab_size rounded up to a multiple of vocab_multiple."""
        m = self.vocab_multiple
        return (self.vocab_size + m - 1) // m * m

    @property
    def mlp_hidden(self) -> int:
        # SwiGLU uses 2/3 of 4*C (rounded to a multiple of 16, fp8 GEMM-friendly) to keep params ~equal to GELU
        if self.mlp == "swiglu":
            return int(math.ceil(8 * self.n_embd / 3 / 16) * 16)
        return 4 * self.n_embd

    def short_str(self) -> str:
        return (f"L{self.n_layer}H{self.n_head}C{self.n_embd}T{self.block_size}V{self.vocab_size}"
                f"-{self.mlp}{'-tied' if self.tie_weights else ''}")
