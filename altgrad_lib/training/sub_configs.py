"""TrainConfig's model and data parts and its precision schedule as typed frozen sub-configs (TrainConfig builds
them once, in __post_init__).

Free of torch and numpy, like config.py: training/build.py takes a ModelConfig, training/data.py and preflight's
corpus checks a DataConfig, the loop, preflight and the doctor a PrecisionSchedule, never the whole TrainConfig.
All are views: derived from TrainConfig's fields, never written to config.yaml or hashed.
"""
from __future__ import annotations

from dataclasses import dataclass

from altgrad_lib.choices import SCHEDULE_GEMMS


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


@dataclass(frozen=True)
class PrecisionSchedule:
    """TrainConfig.precision_schedule parsed and checked (config.parse_precision_schedule, once per config): each
    key with the first (1-based) step from which its GEMMs (choices.SCHEDULE_GEMMS) run in high precision, 'decay'
    resolved to warmup_steps + 1 (where schedules.lr_at's cosine starts). Empty (falsy) = no switch."""

    starts: tuple[tuple[str, int], ...] = ()   # (key, first step), in the order the schedule gives them

    def __bool__(self) -> bool:
        return bool(self.starts)

    def hp_gemms_at(self, step: int) -> tuple[str, ...]:
        """The GEMMs in high precision at (1-based) training `step`."""
        return tuple(g for key, first in self.starts if step >= first for g in SCHEDULE_GEMMS[key])

    @property
    def switch_steps(self) -> tuple[int, ...]:
        """The steps at which the set of high-precision GEMMs changes, ascending."""
        return tuple(sorted({first for _, first in self.starts}))
