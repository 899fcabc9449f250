"""TrainConfig: the flat, frozen, validated training config (maps 1:1 onto YAML / papermill parameters).

Kept free of torch so `altgrad train --help` and config parsing are instant; `altgrad_lib.train` re-exports it.
Unknown keys and wrongly typed values fail at once, naming the valid keys (types come from the annotations).
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import json
import math
import re
import types
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping, Union, get_args, get_origin, get_type_hints

import yaml

from altgrad_lib.choices import BACKENDS, DEVICES, PRECISIONS
from altgrad_lib.choices import MLP_KINDS as MLPS

# fields that do not change any number the run produces; everything else goes into config_hash()
NON_RESULT_FIELDS = ("run_name", "out_dir", "ckpt_interval", "log_interval", "grad_guard_interval")
# Bump whenever a code change can change any run's numbers (rounding, scaling, model init, data order, ...).
# It is part of every config hash, so runs made by other numerics are never reused as if they were ours.
# 2: explicit E4M3 saturation, eval-mode quantizers read-only, vocab padded to a multiple of 64.
NUMERICS_VERSION = 2
# fields added after runs existed: hashed only when set, so every earlier run keeps its hash (and run name)
_HASHED_IF_SET = {"optimizer": "adamw", "optim": {}}


# ----------------------------------------------------------------------------------------------
# config


@dataclass(frozen=True)
class TrainConfig:
    """Flat training config (maps 1:1 onto papermill parameters / YAML). Defaults = a tiny CI run."""

    run_name: str = ""                 # "" -> "<recipe>-s<seed>-<hash8>"
    out_dir: str = ""                  # "" -> <project root>/outputs/runs (or $ALTGRAD_OUTPUTS/runs)
    seed: int = 0
    # data
    corpus: str = "licenses"
    tokenizer: str = "gpt2-4k"
    max_docs: int | None = None
    # model
    n_layer: int = 2
    n_head: int = 2
    n_embd: int = 64
    block_size: int = 64
    mlp: str = "gelu"
    tie_weights: bool = True
    dropout: float = 0.0
    bias: bool = False
    # quantization
    recipe: str | dict = "bf16"        # recipe name (surgery.RECIPES, "fmt:E3M4", ...) or a per-layer policy dict
    backend: str = "sim"
    freeze_blocks: bool = False        # control run: transformer blocks frozen, only embeddings / ln_f / lm_head train
    # optimization
    batch_size: int = 8
    max_steps: int = 50
    lr: float = 1e-3
    min_lr: float = 1e-4
    warmup_steps: int = 5
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0             # 0 = no clipping (the norm is still logged)
    precision: str = "fp32"            # autocast dtype for the forward: "fp32" (off) | "bf16"
    compile: bool = False
    device: str = "auto"
    deterministic: bool = False        # torch.use_deterministic_algorithms (needed for bit-exact resume on GPU)
    # optimizer (altgrad_lib.optim; its config.py documents every optim key)
    optimizer: str = "adamw"           # adamw | stiffness_adamw | grid_adamw | madam | grid_sgd
    optim: dict = field(default_factory=dict)   # e.g. {storage: grid_sr, lr: 1.0}; {} with adamw = torch AdamW
    # bookkeeping
    eval_interval: int = 25            # 0 = evaluate only at step 0 and at the end
    eval_iters: int = 4
    ckpt_interval: int = 25            # 0 = checkpoint only at the end
    log_interval: int = 1
    grad_guard_interval: int = 0       # gradient-flow guard (guards.py): first step of each process; N > 0 also
                                       # every N steps; -1 = off

    def __post_init__(self) -> None:
        hints = _field_types()
        for f in fields(self):
            object.__setattr__(self, f.name, _coerce(f.name, getattr(self, f.name), hints[f.name]))
        if isinstance(self.recipe, dict):
            object.__setattr__(self, "recipe", copy.deepcopy(self.recipe))  # never alias the caller's dict
        object.__setattr__(self, "optim", copy.deepcopy(self.optim))
        from altgrad_lib.optim.config import OptimConfig   # torch-free
        OptimConfig.from_dict(self.optimizer, self.optim)  # one-line errors naming the valid choices / keys
        _check_choice("precision", self.precision, PRECISIONS)
        _check_choice("backend", self.backend, BACKENDS)
        _check_choice("mlp", self.mlp, MLPS)
        if self.device not in DEVICES and not re.fullmatch(r"cuda:\d+", self.device):
            raise ValueError(f"TrainConfig.device={self.device!r} invalid; valid choices: {DEVICES} or 'cuda:<i>'")
        for name in ("n_layer", "n_head", "n_embd", "block_size", "batch_size", "max_steps", "eval_iters",
                     "log_interval"):
            if getattr(self, name) < 1:
                raise ValueError(f"TrainConfig.{name}={getattr(self, name)!r} must be >= 1")
        if self.grad_guard_interval < -1:
            raise ValueError(f"TrainConfig.grad_guard_interval={self.grad_guard_interval!r} must be -1 (off), "
                             f"0 (first step only) or N > 0 (also every N steps)")
        for name in ("warmup_steps", "eval_interval", "ckpt_interval", "seed"):
            if getattr(self, name) < 0:
                raise ValueError(f"TrainConfig.{name}={getattr(self, name)!r} must be >= 0")
        if self.max_docs is not None and self.max_docs < 1:
            raise ValueError(f"TrainConfig.max_docs={self.max_docs!r} must be >= 1 or None")
        if self.n_embd % self.n_head:
            raise ValueError(f"TrainConfig: n_embd={self.n_embd} must be divisible by n_head={self.n_head}")
        if not (self.lr > 0 and 0 <= self.min_lr <= self.lr):
            raise ValueError(f"TrainConfig: need lr > 0 and 0 <= min_lr <= lr, got lr={self.lr}, min_lr={self.min_lr}")
        for name in ("beta1", "beta2", "dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"TrainConfig.{name}={getattr(self, name)!r} must be in [0, 1)")
        if self.weight_decay < 0 or self.grad_clip < 0:
            raise ValueError("TrainConfig: weight_decay and grad_clip must be >= 0")
        if "/" in self.run_name or "\\" in self.run_name or self.run_name in (".", ".."):
            raise ValueError(f"TrainConfig.run_name={self.run_name!r} must be a plain directory name")
        if not isinstance(self.recipe, (str, dict)) or (isinstance(self.recipe, str) and not self.recipe):
            raise ValueError(f"TrainConfig.recipe={self.recipe!r} must be a recipe name or a policy dict")

    # -- construction
    @classmethod
    def keys(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "TrainConfig":
        if not isinstance(d, Mapping):
            raise TypeError(f"TrainConfig.from_dict expects a mapping, got {type(d).__name__}")
        unknown = sorted(set(d) - set(cls.keys()))
        if unknown:
            raise ValueError(f"unknown TrainConfig key(s) {unknown}; valid keys: {cls.keys()}")
        return cls(**dict(d))

    @classmethod
    def from_yaml(cls, path: str | Path | None = None,
                  overrides: Mapping[str, Any] | list[str] | tuple[str, ...] | None = None) -> "TrainConfig":
        """YAML file (optional) + overrides ({"lr": 3e-4} or ["lr=3e-4", ...], values parsed as YAML)."""
        d: dict[str, Any] = {}
        if path is not None:
            loaded = yaml.safe_load(Path(path).read_text())
            if loaded is not None and not isinstance(loaded, dict):
                raise ValueError(f"{path}: expected a YAML mapping of TrainConfig keys, got {type(loaded).__name__}")
            d.update(loaded or {})
        d.update(parse_overrides(overrides))
        return cls.from_dict(d)

    def replace(self, **changes: Any) -> "TrainConfig":
        return self.from_dict({**self.to_dict(), **changes})

    # -- views
    def to_dict(self) -> dict[str, Any]:
        return {f.name: copy.deepcopy(getattr(self, f.name)) for f in fields(self)}

    def config_hash(self) -> str:
        """sha256 over the canonical JSON of every field that can change the run's numbers + NUMERICS_VERSION."""
        d = {k: v for k, v in self.to_dict().items() if k not in NON_RESULT_FIELDS
             and not (k in _HASHED_IF_SET and v == _HASHED_IF_SET[k])}
        d["_numerics_version"] = NUMERICS_VERSION
        return hashlib.sha256(json.dumps(d, sort_keys=True, separators=(",", ":")).encode()).hexdigest()

    @property
    def recipe_name(self) -> str:
        if isinstance(self.recipe, str):
            return self.recipe
        return str(self.recipe.get("name", "custom"))

    def auto_run_name(self) -> str:
        slug = re.sub(r"[^A-Za-z0-9_.+-]+", "_", self.recipe_name).strip("_") or "custom"
        return f"{slug}-s{self.seed}-{self.config_hash()[:8]}"

    def resolved(self) -> "TrainConfig":
        """run_name and out_dir filled in (absolute), everything else unchanged."""
        from altgrad_lib.runs import runs_dir  # lazy: runs.py pulls in pandas

        out = Path(self.out_dir).expanduser().resolve() if self.out_dir else runs_dir()
        return dataclasses.replace(self, run_name=self.run_name or self.auto_run_name(), out_dir=str(out))

    @property
    def run_dir(self) -> Path:
        r = self.resolved()
        return Path(r.out_dir) / r.run_name

    def short_str(self) -> str:
        return (f"{self.recipe_name}[{self.backend}] L{self.n_layer}H{self.n_head}C{self.n_embd}T{self.block_size}"
                f"-{self.mlp} {self.corpus}/{self.tokenizer} B{self.batch_size} steps={self.max_steps} "
                f"lr={self.lr:g} {self.precision} seed={self.seed}")


def _field_types() -> dict[str, Any]:
    global _HINTS
    if _HINTS is None:
        _HINTS = get_type_hints(TrainConfig)
    return _HINTS


_HINTS: dict[str, Any] | None = None


def _coerce(name: str, value: Any, hint: Any) -> Any:
    """Value checked against the field annotation; ints become floats for float fields."""
    options = get_args(hint) if get_origin(hint) in (Union, types.UnionType) else (hint,)
    for tp in options:
        base = get_origin(tp) or tp
        if tp is type(None) and value is None:
            return None
        if base is bool and isinstance(value, bool):
            return value
        if base is int and isinstance(value, int) and not isinstance(value, bool):
            return value
        if base is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if base is float and isinstance(value, str):
            # YAML 1.1 reads "3e-4" (no dot) as a string; accept it when it is a number
            with contextlib.suppress(ValueError):
                return float(value)
        if base is str and isinstance(value, str):
            return value
        if base is dict and isinstance(value, Mapping):
            return dict(value)
    names = " | ".join(getattr(get_origin(t) or t, "__name__", str(t)) for t in options)
    raise TypeError(f"TrainConfig.{name}={value!r} has type {type(value).__name__}, expected {names}; "
                    f"valid keys: {TrainConfig.keys()}")


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"TrainConfig.{name}={value!r} invalid; valid choices: {choices}")


def parse_overrides(overrides: Mapping[str, Any] | list[str] | tuple[str, ...] | None) -> dict[str, Any]:
    if overrides is None:
        return {}
    if isinstance(overrides, Mapping):
        return dict(overrides)
    out: dict[str, Any] = {}
    for item in overrides:
        key, sep, val = str(item).partition("=")
        if not sep or not key.strip():
            raise ValueError(f"override {item!r} is not of the form key=value; valid keys: {TrainConfig.keys()}")
        out[key.strip()] = yaml.safe_load(val) if val.strip() else ""
    return out


def lr_at(it: int, cfg: TrainConfig) -> float:
    """Linear warmup over warmup_steps, then cosine from lr to min_lr at max_steps (it is 0-based)."""
    if it < cfg.warmup_steps:
        return cfg.lr * (it + 1) / (cfg.warmup_steps + 1)
    span = max(1, cfg.max_steps - cfg.warmup_steps)
    ratio = min(1.0, (it - cfg.warmup_steps) / span)
    return cfg.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (cfg.lr - cfg.min_lr)
