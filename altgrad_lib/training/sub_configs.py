"""TrainConfig's model and data parts as typed frozen sub-configs (TrainConfig builds them once, in __post_init__).

Free of torch and numpy, like config.py: training/build.py takes a ModelConfig, training/data.py and preflight's
corpus checks a DataConfig, never the whole TrainConfig. Both are views: derived from TrainConfig's fields, never
written to config.yaml or hashed.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelConfig:
    """The GPT's shape (training/build.gpt_config adds the tokenizer's vocab size): TrainConfig's model keys."""

    n_layer: int
    n_head: int
    n_embd: int
    block_size: int
    mlp: str
    tie_weights: bool
    dropout: float
    bias: bool


@dataclass(frozen=True)
class DataConfig:
    """What the data of a run depends on: TrainConfig's data keys and the batch shape. `tokenizer` is the canonical
    name ('gpt2-4k' -> 'gpt2-4096', the token cache's key); batches are a function of (seed, step, batch_size,
    block_size) only (data.TokenCorpus.train_batch / val_batches), so a resumed run sees the same data."""

    corpus: str              # a name in choices.CORPORA or a path to .txt files
    tokenizer: str           # canonical: 'gpt2' or 'gpt2-<N>'
    max_docs: int | None     # first N documents of each split (None = all)
    block_size: int          # tokens per sequence
    batch_size: int          # sequences per training / validation batch
    seed: int                # the order of the training batches
    eval_iters: int          # fixed validation batches per eval
