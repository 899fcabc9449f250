"""TrainConfig: the flat, frozen, validated training config (maps 1:1 onto YAML / papermill parameters).

Its parts are built and validated once, in `__post_init__`, as typed frozen sub-configs that the code below the
training layer takes instead of the whole config: `model_config` (sub_configs.ModelConfig: training/build.py),
`data_config` (sub_configs.DataConfig: training/data.py, preflight's corpus), `optim_config` (optim/config.OptimConfig:
optim/factory.build_optimizer), `diagnostics_config` (monitors/config.DiagnosticsConfig: monitors/diagnostics),
`hp_schedule` (sub_configs.PrecisionSchedule: the loop, preflight, the doctor) and `quant_policy` (the recipe resolved
to a quantize/recipes.QuantPolicy: build_model, preflight). They are declared fields with init=False (key_fields:
the keys are the init fields), so they are not keys: config.yaml, the config hash, the help and == read the keys
only. `resolved()` fills run_name / out_dir without building them again, so a run builds its TrainConfig once
(tests/test_training_sub_configs.py).

Kept free of torch so `altgrad train --help` and config parsing are instant (a `fmt:` or dict recipe, or a named
format, is checked by the torch-based parsers, imported only then; so is the QuantPolicy of a plain named recipe,
resolved on first use); `altgrad_lib.training.loop` re-exports it.
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
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Union, get_args, get_origin, get_type_hints

import yaml

from altgrad_lib.choices import (BACKENDS, BLOCK_SWITCHES, COMPILE_SCOPES, CORPORA, DEVICES, LOGGERS, NAMED_RECIPES,
                                 OPTIMIZERS, PRECISIONS, RECIPES, SCHEDULE_GEMMS, SEED_RANGE, TOKENIZERS,
                                 unalias_recipe)
from altgrad_lib.choices import MLP_KINDS as MLPS
from altgrad_lib.errors import ConfigError, ConfigTypeError, check_choice, did_you_mean, invalid, one_line
from altgrad_lib.model_config import GPTConfig   # torch-free: the model keys' defaults (one copy)
from altgrad_lib.monitors.config import DiagnosticsConfig
from altgrad_lib.optim.config import OptimConfig, canonical_optim   # torch-free unless a format is named
from altgrad_lib.paths import runs_dir, slug
from altgrad_lib.training.sub_configs import DataConfig, ModelConfig, PrecisionSchedule
from altgrad_lib.training.tokenizers import canonical_tokenizer_name   # imports tiktoken, not torch

if TYPE_CHECKING:   # imports torch: the QuantPolicy is resolved only where torch is in (module docstring)
    from altgrad_lib.quantize.recipes import QuantPolicy

# fields that do not change any number the run produces; everything else goes into config_hash()
NON_RESULT_FIELDS = ("run_name", "out_dir", "ckpt_interval", "log_interval", "grad_guard_interval", "logger",
                     "diagnostics")   # monitors never change training (tests/test_monitors_diagnostics.py)
# Bump whenever a code change can change any run's numbers (rounding, scaling, model init, data order, ...).
# It is part of every config hash, so runs made by other numerics are never reused as if they were ours.
# 2: explicit E4M3 saturation, eval-mode quantizers read-only, vocab padded to a multiple of 64.
# 3: grid_sr optimizer storage draws its SR bits from a counter-based hash (numerics/counter_rng.py), not a Generator.
NUMERICS_VERSION = 3
# Other names accepted for a key. Notebooks call the compile flag `compile_model` (a global `compile` would shadow
# the builtin), and their params/*.yaml files also go to `altgrad train -f`.
KEY_ALIASES = {"compile_model": "compile"}
# fields added after runs existed: hashed only when set, so every earlier run keeps its hash (and run name)
_HASHED_IF_SET = {"optimizer": "adamw", "optim": {}, "precision_schedule": {}, "compile_scope": "model"}


# ----------------------------------------------------------------------------------------------
# config


def _key(default: Any, help: str, choices: tuple[str, ...] | None = None) -> Any:
    """A TrainConfig field with its meaning and valid choices: the one source of `altgrad train --help`.
    A dict default is given through a factory (a fresh copy per config)."""
    meta = {"help": help, "choices": choices}
    if isinstance(default, dict):
        return dataclasses.field(default_factory=lambda: copy.deepcopy(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def key_fields(cls: type) -> list[dataclasses.Field]:
    """The keys of a config: its init fields (TrainConfig's typed parts are fields built in __post_init__)."""
    return [f for f in fields(cls) if f.init]


def _built() -> Any:
    """A typed part of TrainConfig: a frozen field built in __post_init__ from the keys, not a key itself (not in
    config.yaml, the hash, the help or ==)."""
    return dataclasses.field(init=False, repr=False, compare=False)


def key_docs() -> list[tuple[str, Any, str, tuple[str, ...] | None]]:
    """(key, default, meaning, choices or None) of every TrainConfig key, in declaration order."""
    return [(f.name, f.default if f.default is not dataclasses.MISSING else f.default_factory(), f.metadata["help"],
             f.metadata["choices"]) for f in key_fields(TrainConfig)]


@dataclass(frozen=True)
class TrainConfig:
    """Flat training config (maps 1:1 onto papermill parameters / YAML). Defaults = a tiny CI run."""

    run_name: str = _key("", 'run directory name under out_dir; "" -> "<recipe>-s<seed>-<hash8>"')
    out_dir: str = _key("", 'parent of run directories; "" -> <project root>/outputs/runs (or $ALTGRAD_OUTPUTS/runs)')
    seed: int = _key(0, "seed of init, data order, dropout and stochastic rounding")
    # data
    corpus: str = _key("licenses", "training text", CORPORA)
    tokenizer: str = _key("gpt2-4k", "GPT-2 BPE, full or truncated to its first N merges (vocab N+1)", TOKENIZERS)
    max_docs: int | None = _key(None, "keep only the first N documents of each split (null = all)")
    # model (defaults: model_config.GPTConfig's, the one copy)
    n_layer: int = _key(GPTConfig.n_layer, "transformer blocks")
    n_head: int = _key(GPTConfig.n_head, "attention heads (n_embd must be divisible by it)")
    n_embd: int = _key(GPTConfig.n_embd, "model width")
    block_size: int = _key(GPTConfig.block_size, "context length in tokens")
    mlp: str = _key(GPTConfig.mlp, "MLP of each block (swiglu: gated, an activation-outlier stress case for FP8)", MLPS)
    tie_weights: bool = _key(GPTConfig.tie_weights, "lm_head shares the token embedding matrix")
    dropout: float = _key(GPTConfig.dropout, "dropout probability in [0, 1)")
    bias: bool = _key(GPTConfig.bias, "biases in Linear and LayerNorm")
    # quantization
    recipe: str | dict = _key("hp", "quantization recipe name ('bf16' is an alias of 'hp': high precision, nothing "
                                    "quantized), or a per-layer policy dict "
                                      "{name, backend, layers: {<layer class>|'*': {input, weight, grad_output, "
                                      "gemm}}} (gemm: per-GEMM switches and operand overrides, gemm_overrides.py); "
                                      "block recipes take ':'-switches "
                                      f"{', '.join(dict.fromkeys(sw for v in BLOCK_SWITCHES.values() for sw in v))} "
                                      "(block_recipes.py)",
                              RECIPES)
    backend: str = _key("sim", "sim = simulated formats (any ExMy); torchao / scaled_mm = real FP8 GEMMs "
                               "(E4M3/E5M2 only)", BACKENDS)
    freeze_blocks: bool = _key(False, "control run: transformer blocks frozen, only embeddings / ln_f / lm_head train")
    precision_schedule: dict = _key({}, "GEMMs switched to high precision during the run: {fwd_hp_from: <step> | "
                                        "decay, bwd_hp_from: <step> | decay}: from that (1-based) step on, every "
                                        "quantized Linear runs fprop (fwd) or dgrad + wgrad (bwd) unquantized (the "
                                        "NVFP4 report, arXiv 2509.25149 App. D); decay = the first step after "
                                        "warmup, where the cosine decay starts; {} = never", ("{}", "{fwd_hp_from: S}",
                                                                                          "{bwd_hp_from: S}"))
    # optimization
    batch_size: int = _key(8, "sequences per step")
    max_steps: int = _key(50, "optimizer steps")
    lr: float = _key(1e-3, "peak learning rate (AdamW), reached after warmup_steps")
    min_lr: float = _key(1e-4, "learning rate at max_steps (cosine decay), 0 <= min_lr <= lr")
    warmup_steps: int = _key(5, "linear warmup steps")
    weight_decay: float = _key(0.1, "AdamW weight decay of matrices (not of gains and biases)")
    beta1: float = _key(0.9, "AdamW beta1 in [0, 1)")
    beta2: float = _key(0.95, "AdamW beta2 in [0, 1)")
    grad_clip: float = _key(1.0, "clip the global gradient norm to this; 0 = no clipping (the norm is still logged)")
    precision: str = _key("fp32", "autocast dtype of the forward (fp32 = autocast off)", PRECISIONS)
    compile: bool = _key(False, "torch.compile the model")
    compile_scope: str = _key("model", "with compile: model = one graph (the fastest steps); blocks = each "
                                       "transformer block, one graph shared by all (a 2-5x shorter compile, steps "
                                       "4-8 % slower: model.compile_gpt)", COMPILE_SCOPES)
    device: str = _key("auto", "auto = cuda if available else cpu", (*DEVICES, "cuda:<i>"))
    deterministic: bool = _key(False, "torch.use_deterministic_algorithms (needed for bit-exact resume on GPU)")
    # optimizer (altgrad_lib.optim; its config.py documents every optim key)
    optimizer: str = _key("adamw", "optimizer (altgrad_lib/optim): adamw = torch AdamW on fp32 master weights; "
                                   "muon / manifold_muon = orthogonalized updates on the block matrices (the latter "
                                   "on the Stiefel manifold), AdamW on the rest; the others "
                                   "step in grid units of the weight format", OPTIMIZERS)
    optim: dict = _key({}, "optimizer settings (optim/config.py), e.g. {storage: grid_sr, lr: 1.0}; {} with adamw "
                           "= torch AdamW")
    # bookkeeping
    eval_interval: int = _key(25, "steps between validation evals; 0 = only at step 0 and at the end")
    eval_iters: int = _key(4, "validation batches per eval (the same batches in every eval and run)")
    ckpt_interval: int = _key(25, "steps between checkpoints; 0 = only at the end")
    log_interval: int = _key(1, "steps between train metric rows")
    grad_guard_interval: int = _key(0, "gradient-flow guard: 0 = first step of each process; N > 0 = also every "
                                       "N steps; -1 = off")
    logger: str = _key("none", "mirror metrics and diagnostics to W&B (offline, in the run dir) or TensorBoard "
                               "(tracking.py)", LOGGERS)
    diagnostics: str | dict = _key("off", "training diagnostics (altgrad_lib/monitors): a preset or a dict of "
                                          "DiagnosticsConfig fields; -p diagnostics.interval=25 sets one field (a dict "
                                          "without 'preset' means 'full')", ("off", "cheap", "full", "{field: value}"))

    # -- the typed parts: built once in __post_init__ from the keys above (frozen views; the keys stay the record)
    optim_config: OptimConfig = _built()             # optimizer + optim with the run's lr, weight_decay, betas, seed
    hp_schedule: PrecisionSchedule = _built()        # precision_schedule parsed: each key's first step
    diagnostics_config: DiagnosticsConfig = _built()
    model_config: ModelConfig = _built()
    data_config: DataConfig = _built()               # the tokenizer under its canonical name
    # the recipe resolved (quantize/recipes.QuantPolicy, imports torch): in __post_init__ for a recipe it parsed,
    # else on first use (quant_policy)
    _quant_policy: Any = dataclasses.field(init=False, repr=False, compare=False, default=None)

    def __post_init__(self) -> None:
        if self.diagnostics is False:   # YAML 1.1 reads `-p diagnostics=off` as False
            object.__setattr__(self, "diagnostics", "off")
        elif isinstance(self.diagnostics, Mapping) and self.diagnostics.get("preset") is False:   # .preset=off
            object.__setattr__(self, "diagnostics", {**self.diagnostics, "preset": "off"})
        hints = _field_types()
        for f in key_fields(type(self)):
            object.__setattr__(self, f.name, _coerce(f.name, getattr(self, f.name), hints[f.name]))
        for f in key_fields(type(self)):   # inf / nan would pass every range check below and poison the run
            v = getattr(self, f.name)
            if isinstance(v, float) and not math.isfinite(v):
                raise ConfigError(f"TrainConfig.{f.name}={v!r} is not a finite number")
        if isinstance(self.recipe, dict):
            object.__setattr__(self, "recipe", copy.deepcopy(self.recipe))  # never alias the caller's dict
        elif isinstance(self.recipe, str):   # an alias is recorded, hashed and printed under its canonical name
            object.__setattr__(self, "recipe", unalias_recipe(self.recipe))
        if self.recipe not in NAMED_RECIPES:  # fmt:<FMT>, a dict or a typo: get_policy's parser (imports torch)
            from altgrad_lib.quantize.recipes import canonical_recipe   # local: imports torch (see the line above)
            try:   # canonical format names: aliases of one format are one run identity
                object.__setattr__(self, "recipe", canonical_recipe(self.recipe))
            except (ValueError, TypeError) as e:
                raise ConfigError(f"TrainConfig.recipe={self.recipe!r}: {one_line(e)}") from e
        try:
            # weight_fmt under its canonical name first, so the part is built once, as recorded; one-line errors
            # naming the valid choices / keys; the run's part (lr, betas, ...) is checked below
            object.__setattr__(self, "optim", canonical_optim(copy.deepcopy(self.optim)))
            oc = OptimConfig.from_dict(self.optimizer, self.optim, train_lr=self.lr, weight_decay=self.weight_decay,
                                       betas=(self.beta1, self.beta2), seed=self.seed, recipe=self.recipe_name)
        except (ValueError, TypeError) as e:
            raise ConfigError(f"TrainConfig.optimizer/optim: {one_line(e)}") from e
        if oc.on_grid and self.backend != "sim":
            raise ConfigError(f"TrainConfig: optim.storage={oc.storage!r} needs backend 'sim' (got "
                              f"{self.backend!r}); valid storage for hardware backends: 'fp32'")
        object.__setattr__(self, "optim_config", oc)
        if oc.osc_reset and oc.osc_reset_start + oc.osc_reset_window > self.max_steps:
            # the first round resets after step start + window (optim/osc_reset.py), whatever the period
            raise ConfigError(f"TrainConfig: optim.osc_reset's first reset comes after step osc_reset_start + "
                              f"osc_reset_window = {oc.osc_reset_start} + {oc.osc_reset_window} > max_steps="
                              f"{self.max_steps}, so the run would train with no reset; lower osc_reset_window / "
                              f"osc_reset_start or raise max_steps")
        object.__setattr__(self, "precision_schedule", copy.deepcopy(self.precision_schedule))
        # one-line errors: unknown key, step out of range, "decay" without a decay; every consumer reads the result
        object.__setattr__(self, "hp_schedule", parse_precision_schedule(self))
        for name, choices in (("precision", PRECISIONS), ("backend", BACKENDS), ("mlp", MLPS), ("logger", LOGGERS),
                              ("compile_scope", COMPILE_SCOPES)):
            check_choice(f"TrainConfig.{name}", getattr(self, name), choices, ConfigError)
        if self.compile_scope != "model" and not self.compile:
            raise ConfigError(f"TrainConfig.compile_scope={self.compile_scope!r} with compile=False: nothing is "
                              f"compiled; valid: compile=True, or compile_scope='model' (the default)")
        if self.device not in DEVICES and not re.fullmatch(r"cuda:\d+", self.device):
            raise invalid("TrainConfig.device", self.device, (*DEVICES, "cuda:<i>"), ConfigError)
        for name in ("n_layer", "n_head", "n_embd", "block_size", "batch_size", "max_steps", "eval_iters",
                     "log_interval"):
            if getattr(self, name) < 1:
                raise ConfigError(f"TrainConfig.{name}={getattr(self, name)!r} must be >= 1")
        if self.grad_guard_interval < -1:
            raise ConfigError(f"TrainConfig.grad_guard_interval={self.grad_guard_interval!r} must be -1 (off), "
                             f"0 (first step only) or N > 0 (also every N steps)")
        for name in ("warmup_steps", "eval_interval", "ckpt_interval", "seed"):
            if getattr(self, name) < 0:
                raise ConfigError(f"TrainConfig.{name}={getattr(self, name)!r} must be >= 0")
        if self.seed > SEED_RANGE[1]:   # what the loop's np.random.seed takes
            raise invalid("TrainConfig.seed", self.seed, f"an int in [{SEED_RANGE[0]}, {SEED_RANGE[1]}]", ConfigError)
        if self.max_docs is not None and self.max_docs < 1:
            raise ConfigError(f"TrainConfig.max_docs={self.max_docs!r} must be >= 1 or None")
        if self.n_embd % self.n_head:
            raise ConfigError(f"TrainConfig: n_embd={self.n_embd} must be divisible by n_head={self.n_head}")
        if not (self.lr > 0 and 0 <= self.min_lr <= self.lr):
            raise ConfigError(f"TrainConfig: need lr > 0 and 0 <= min_lr <= lr, got lr={self.lr}, min_lr={self.min_lr}")
        for name in ("beta1", "beta2", "dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ConfigError(f"TrainConfig.{name}={getattr(self, name)!r} must be in [0, 1)")
        if self.weight_decay < 0 or self.grad_clip < 0:
            raise ConfigError("TrainConfig: weight_decay and grad_clip must be >= 0")
        if "/" in self.run_name or "\\" in self.run_name or self.run_name in (".", ".."):
            raise ConfigError(f"TrainConfig.run_name={self.run_name!r} must be a plain directory name")
        if not isinstance(self.recipe, (str, dict)) or (isinstance(self.recipe, str) and not self.recipe):
            raise ConfigError(f"TrainConfig.recipe={self.recipe!r} must be a recipe name or a policy dict")
        try:
            diag = DiagnosticsConfig.from_value(self.diagnostics)          # one-line error on a bad value
        except (ValueError, TypeError) as e:
            raise ConfigError(f"TrainConfig.diagnostics: {one_line(e)}") from e
        if isinstance(self.diagnostics, dict):
            object.__setattr__(self, "diagnostics", diag.to_dict())      # every field explicit in config.yaml
        object.__setattr__(self, "diagnostics_config", diag)
        object.__setattr__(self, "model_config", _part(ModelConfig, self))
        try:   # one line naming the valid names; the field keeps its spelling (and the hash), the part is canonical
            object.__setattr__(self, "data_config", _part(DataConfig, self, tokenizer=canonical_tokenizer_name(
                self.tokenizer)))
        except ValueError as e:
            raise ConfigError(f"TrainConfig.tokenizer: {one_line(e)}") from e
        # a recipe parsed above (torch imported) is resolved here; a plain named one cannot fail and would import
        # torch only to resolve it: on first use (quant_policy)
        object.__setattr__(self, "_quant_policy", None if self.recipe in NAMED_RECIPES else _resolve_policy(self))
        if self.precision_schedule:   # every phase against the recipe now, not at its step (torch: quant_policy)
            check_schedule_phases(self)

    # -- the lazily resolved part
    @property
    def quant_policy(self) -> QuantPolicy:
        """The recipe resolved with this run's backend and seed (quantize.recipes.get_policy): what build_model
        and preflight take. One object per config: resolved in __post_init__, or for a plain named recipe (hp,
        fp8_hybrid, ...: nothing to get wrong, and torch to import) on first use."""
        if self._quant_policy is None:
            object.__setattr__(self, "_quant_policy", _resolve_policy(self))
        return self._quant_policy

    # -- construction
    @classmethod
    def keys(cls) -> list[str]:
        return [f.name for f in key_fields(cls)]

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "TrainConfig":
        if not isinstance(d, Mapping):
            raise ConfigTypeError(f"TrainConfig.from_dict expects a mapping, got {type(d).__name__}")
        d = _fold_dotted(d)
        both = [(a, k) for a, k in KEY_ALIASES.items() if a in d and k in d]
        if both:
            raise ConfigError(f"TrainConfig: {both[0][0]!r} is another name for {both[0][1]!r}; give only one of them")
        d = {KEY_ALIASES.get(k, k): v for k, v in d.items()}
        unknown = sorted(set(d) - set(cls.keys()))
        if unknown:
            hint = "".join(f"{h[:-1]} for {k!r}?" for k in unknown if (h := did_you_mean(k, cls.keys())))
            raise ConfigError(f"unknown TrainConfig key(s) {unknown}{hint}; valid keys: {cls.keys()}")
        return cls(**dict(d))

    @classmethod
    def from_yaml(cls, path: str | Path | None = None,
                  overrides: Mapping[str, Any] | list[str] | tuple[str, ...] | None = None) -> "TrainConfig":
        """YAML file (optional) + overrides ({"lr": 3e-4} or ["lr=3e-4", ...], values parsed as YAML)."""
        d: dict[str, Any] = {}
        if path is not None:
            loaded = _load_yaml_file(Path(path))
            if loaded is not None and not isinstance(loaded, dict):
                raise ConfigError(f"{path}: expected a YAML mapping of TrainConfig keys, got {type(loaded).__name__}")
            d.update(loaded or {})
        ov = parse_overrides(overrides)
        if (d.get("diagnostics") in ("off", False) and "diagnostics" not in ov
                and any(isinstance(k, str) and k.startswith("diagnostics.") for k in ov)):
            del d["diagnostics"]   # `off` in the file, a field on the command line: the command line wins
        d.update(ov)
        return cls.from_dict(d)

    def replace(self, **changes: Any) -> "TrainConfig":
        return self.from_dict({**self.to_dict(), **changes})

    # -- views
    def to_dict(self) -> dict[str, Any]:
        return {f.name: copy.deepcopy(getattr(self, f.name)) for f in key_fields(type(self))}

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
        """`<recipe>[-<backend>][-<optimizer>[-<storage>][-m<fmt>v<fmt>]][-frozen]-s<seed>-<hash8>` (backend when not
        sim): readable, unique by hash.
        Every notebook and study that trains this config lands in this one directory (and reuses it)."""
        parts = [self.recipe_name] + ([self.backend] if self.backend != "sim" else [])
        oc = self.optim_config
        if not oc.is_torch_adamw:
            parts.append(oc.name)
            if oc.on_grid:
                parts.append(oc.storage)
            if oc.state_m or oc.state_v:
                parts.append(f"m{oc.state_m or 'fp32'}v{oc.state_v or 'fp32'}")
        if self.freeze_blocks:
            parts.append("frozen")
        return f"{'-'.join(map(slug, parts))}-s{self.seed}-{self.config_hash()[:8]}"

    def resolved(self) -> "TrainConfig":
        """run_name and out_dir filled in (absolute), everything else unchanged; self when both already are.
        A copy, not a new construction: neither field enters a part, and their one check (run_name a plain name)
        was made at construction or holds for an auto name (a slug), so nothing is validated or built again."""
        run_name = self.run_name or self.auto_run_name()
        out_dir = str(Path(self.out_dir).expanduser().resolve() if self.out_dir else runs_dir())
        if (run_name, out_dir) == (self.run_name, self.out_dir):
            return self
        new = copy.copy(self)   # shares the frozen parts (a lazy quant_policy resolves on the copy's first use)
        object.__setattr__(new, "run_name", run_name)
        object.__setattr__(new, "out_dir", out_dir)
        return new

    @property
    def run_dir(self) -> Path:
        r = self.resolved()
        return Path(r.out_dir) / r.run_name

    def short_str(self) -> str:
        return (f"{self.recipe_name}[{self.backend}] L{self.n_layer}H{self.n_head}C{self.n_embd}T{self.block_size}"
                f"-{self.mlp} {self.corpus}/{self.tokenizer} B{self.batch_size} steps={self.max_steps} "
                f"lr={self.lr:g} {self.precision} seed={self.seed}")


def _part(cls: type, cfg: TrainConfig, **resolved: Any) -> Any:
    """A sub-config of `cfg`: its fields are TrainConfig keys of the same name, `resolved` the ones spelled anew."""
    return cls(**{**{f.name: getattr(cfg, f.name) for f in key_fields(cls)}, **resolved})


def _resolve_policy(cfg: TrainConfig) -> QuantPolicy:
    from altgrad_lib.quantize.recipes import get_policy   # local: imports torch (module docstring)
    try:   # the recipe is canonical and checked by now: a failure here would be a recipe x backend / seed mistake
        return get_policy(cfg.recipe, backend=cfg.backend, seed=cfg.seed)
    except (ValueError, TypeError) as e:
        raise ConfigError(f"TrainConfig.recipe={cfg.recipe_name!r}: {one_line(e)}") from e


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
    raise ConfigTypeError(f"TrainConfig.{name}={value!r} has type {type(value).__name__}, expected {names}; "
                    f"valid keys: {TrainConfig.keys()}")


# dict-valued fields that accept dotted keys ("diagnostics.interval": 25); how a string value becomes a dict
_DOTTED_BASE = {"diagnostics": lambda v: {} if v == "off" or v is False else {"preset": v},
                "recipe": lambda v: {"recipe": v}}


def _fold_dotted(d: Mapping[str, Any]) -> dict[str, Any]:
    """{"diagnostics": "cheap", "diagnostics.interval": 1} -> {"diagnostics": {"preset": "cheap", "interval": 1}}.
    Other keys with a dot are left alone (and rejected as unknown)."""
    out = dict(d)
    for key in [k for k in d if isinstance(k, str) and "." in k and k.split(".")[0] in _DOTTED_BASE]:
        head, *path = key.split(".")
        if head == "diagnostics" and head in d and d[head] in ("off", False, None):
            raise ConfigError(f"TrainConfig: diagnostics=off contradicts {key}={d[key]!r} (a sub-key turns "
                              f"diagnostics on); drop diagnostics=off (a dict without 'preset' means 'full'), or "
                              f"set diagnostics.preset=off to record only what {key} switches on")
        base = out.get(head, getattr(TrainConfig, head))
        base = copy.deepcopy(base) if isinstance(base, Mapping) else _DOTTED_BASE[head](base)
        cur = base
        for part in path[:-1]:
            cur = cur.setdefault(part, {})
            if not isinstance(cur, dict):
                raise ConfigError(f"TrainConfig key {key!r}: {part!r} is not a mapping")
        cur[path[-1]] = out.pop(key)
        out[head] = base
    return out


def parse_overrides(overrides: Mapping[str, Any] | list[str] | tuple[str, ...] | None) -> dict[str, Any]:
    if overrides is None:
        return {}
    if isinstance(overrides, Mapping):
        return dict(overrides)
    out: dict[str, Any] = {}
    for item in overrides:
        key, sep, val = str(item).partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"override {item!r} is not of the form key=value; valid keys: {TrainConfig.keys()}")
        try:
            out[key.strip()] = yaml.safe_load(val) if val.strip() else ""
        except yaml.YAMLError as e:
            raise ConfigError(f"override {item!r}: the value is not valid YAML ({_yaml_problem(e)}); quote it "
                              f"to pass a string") from e
    return out


def _yaml_problem(e: "yaml.YAMLError") -> str:
    mark = getattr(e, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return one_line(getattr(e, "problem", None) or e) + where


def _load_yaml_file(path: Path) -> Any:
    """A params file parsed as YAML; every way it can be unusable is a ConfigError naming the file."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such params file") from None
    except IsADirectoryError:
        raise ConfigError(f"{path} is a directory; -f expects a YAML file of TrainConfig keys") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read it ({one_line(e)})") from e
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: invalid YAML: {_yaml_problem(e)}") from e


def parse_precision_schedule(cfg: TrainConfig) -> PrecisionSchedule:
    """precision_schedule parsed (TrainConfig.__post_init__ calls it once; read TrainConfig.hp_schedule): key -> first
    (1-based) step of its high-precision GEMMs ("decay" = step warmup_steps + 1, where lr_at's cosine starts);
    ConfigError naming the bad value and the valid ones."""
    sched = cfg.precision_schedule
    bad = sorted(set(sched) - set(SCHEDULE_GEMMS))
    if bad:
        raise ConfigError(f"TrainConfig.precision_schedule: unknown key(s) {bad}{did_you_mean(bad[0], SCHEDULE_GEMMS)};"
                          f" valid keys: {tuple(SCHEDULE_GEMMS)}")
    if sched and cfg.recipe == "hp":
        raise ConfigError(f"TrainConfig.precision_schedule={sched} with recipe 'hp': nothing is quantized, so there is "
                          f"nothing to switch to high precision; valid: a quantized recipe, or precision_schedule={{}}")
    if sched and cfg.backend != "sim":
        raise ConfigError(f"TrainConfig.precision_schedule={sched} with backend={cfg.backend!r}: the switch is "
                          f"simulated (GemmOptions.hp_gemms); valid: backend 'sim'")
    out = []
    for key, v in sched.items():
        if v == "decay":
            if cfg.min_lr >= cfg.lr:
                raise ConfigError(f"TrainConfig.precision_schedule.{key}='decay' but the LR schedule has no decay "
                                  f"(min_lr={cfg.min_lr:g} = lr); valid: a step in [1, max_steps={cfg.max_steps}], "
                                  f"or min_lr < lr")
            v = cfg.warmup_steps + 1
            if v > cfg.max_steps:
                raise ConfigError(f"TrainConfig.precision_schedule.{key}='decay': the decay would start at step {v}, "
                                  f"after max_steps={cfg.max_steps}; valid: warmup_steps < max_steps, or a step")
        elif isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= cfg.max_steps:
            raise ConfigError(f"TrainConfig.precision_schedule.{key}={v!r} is invalid; valid: 'decay' or a step in "
                              f"[1, max_steps={cfg.max_steps}]")
        out.append((key, v))
    return PrecisionSchedule(tuple(out))


def check_schedule_phases(cfg: TrainConfig) -> None:
    """Every phase of precision_schedule against the recipe, at load (TrainConfig calls it when it has a schedule):
    each quantized layer class's GemmOptions from each switch on, built as the loop will build them
    (quantize.linear.scheduled_gemm), so a recipe setting the switch contradicts (an accumulator on a GEMM it puts in
    high precision) is one line naming both before any step, not a traceback at the switch. The checks that need
    the model (what the switch changes on it, attention): preflight.check_precision_schedule."""
    sched = cfg.hp_schedule
    from altgrad_lib.quantize.gemm_overrides import GEMMS   # local: imports torch (module docstring), as below
    from altgrad_lib.quantize.linear import scheduled_gemm

    for key, first in sorted(sched.starts, key=lambda kv: kv[1]):
        switch = f"TrainConfig.precision_schedule.{key}={cfg.precision_schedule[key]!r}"
        for cls, spec in cfg.quant_policy.layers.items():
            opts = None if spec is None else spec.gemm_options
            acc = [g for g in SCHEDULE_GEMMS[key] if opts is not None and opts.accum_for(g) is not None]
            if acc:
                kept = [g for g in GEMMS if g not in sched.hp_gemms_at(cfg.max_steps) and g not in opts.hp_gemms]
                raise ConfigError(f"{switch} puts {'+'.join(acc)} in high precision from step {first} (the FP32 "
                                  f"matmul), but recipe {cfg.recipe_name!r} layers[{cls!r}].gemm.accum models an "
                                  f"accumulator on {'+'.join(acc)}; valid: gemm.accum only on GEMMs the schedule "
                                  f"keeps quantized ({'+'.join(kept) or 'none here'}), or no {key}")
            if spec is not None:
                try:
                    scheduled_gemm(opts, sched.hp_gemms_at(first))
                except (ValueError, TypeError) as e:
                    raise ConfigError(f"{switch} contradicts recipe {cfg.recipe_name!r} layers[{cls!r}].gemm from "
                                      f"step {first}: {one_line(e)}") from e
