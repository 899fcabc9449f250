"""Everything about a TrainConfig that can be checked before a run directory exists.

`train()` calls `preflight(cfg)` first: recipe and backend, tokenizer, device, memory and time, the corpus (built
here: its content hash is part of the run's identity), the model with its quantization (built here, from the run's
seed, and handed to train(): one full-size model per run; sizes are estimated on the meta device), and a writable
out_dir. Every failure is a one-line `ConfigError`, so a mistake never leaves a run
directory behind and the CLI can print it without a traceback.

`estimate_memory` is deliberately simple: fp32 weights + grads + two AdamW moments (16 bytes per parameter,
parameters counted exactly on a meta-device model), the activations saved for backward (18 floats per token per
layer plus the vocab-wide logits; measured with saved_tensors_hooks at 16-22 for the GELU/SwiGLU, hp/FP8
recipes), the quantized weight copies simulated Linears save, and two vocab-wide float rows per token of
backward transients (logit gradients).
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any, Iterator, NamedTuple

import torch

from altgrad_lib.choices import SCHEDULE_GEMMS
from altgrad_lib.errors import ConfigError, SizeWarning, UserError, one_line
from altgrad_lib.model import GPT, freeze_blocks
from altgrad_lib.optim import factory   # factory.build_optimizer: as a module attribute, so tests can spy on it
from altgrad_lib.quantize.attention import ATTN_POINTS, QuantizedAttention
from altgrad_lib.quantize.recipes import QuantPolicy, layer_class_of
from altgrad_lib.quantize.convert import quantize_model
from altgrad_lib.quantize.linear import QuantizedLinear, quantized_gemms, set_hp_gemms
from altgrad_lib.quantize.hw_fp8 import check_hw_gemm, hw_dtype
from altgrad_lib.training.build import build_model, gpt_config
from altgrad_lib.training.config import TrainConfig
from altgrad_lib.training.data import TokenCorpus
from altgrad_lib.training.sub_configs import DataConfig
from altgrad_lib.training.tokenizers import get_tokenizer

ACT_FLOATS_PER_TOKEN_LAYER = 18   # saved-for-backward floats per token per block, in units of n_embd
WARN_FRACTION = 0.5               # warn above this share of the available memory, refuse above 1
# optimistic sustained FLOP/s: the time estimate is a lower bound ("at least"), never a promise
FLOPS_PER_S = {"cpu": 1e11, "cuda": 2e14}
WARN_HOURS = 1.0
TINY_VOCAB = 64                   # check_optimizer's model: one padded vocab row block
# the attention core's quantizer points (quantize/attention.py) in the direction each precision_schedule key switches:
# forward Q, K, V / P / O, backward dO / dP / dQKV
SCHEDULE_ATTN_POINTS = {"fwd_hp_from": ATTN_POINTS[:3], "bwd_hp_from": ATTN_POINTS[3:]}


@contextlib.contextmanager
def as_config_error(what: str, kinds: tuple[type[BaseException], ...] = (ValueError, TypeError)) -> Iterator[None]:
    """Re-raise the validation errors of library code as a ConfigError prefixed with the config key."""
    try:
        yield
    except UserError:
        raise
    except kinds as e:
        raise ConfigError(f"{what}: {one_line(e)}") from e


def check_policy(cfg: TrainConfig) -> QuantPolicy:
    """The config's resolved recipe (TrainConfig.quant_policy); for a hardware backend every quantized operand must
    be one it can run (hw_fp8 imports torch: checked here, not in TrainConfig)."""
    policy = cfg.quant_policy
    if policy.backend != "sim":
        with as_config_error(f"TrainConfig.backend={policy.backend!r} with recipe {cfg.recipe_name!r}"):
            for cls, spec in policy.layers.items():
                if spec is not None:
                    for role in ("input", "weight", "grad_output"):
                        hw_dtype(getattr(spec, role), policy.backend, role, cls)
                    check_hw_gemm(policy.backend, spec, cls)
    return policy


def resolve_device(name: str) -> str:
    """TrainConfig.device with "auto" resolved here: "cuda" when CUDA is available, else "cpu" (the one place
    that decides it: training, executors.auto_workers and the envelope's workers all ask this)."""
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name


def check_device(name: str) -> torch.device:
    name = resolve_device(name)
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ConfigError(f"TrainConfig.device={name!r} but CUDA is not available here; use 'auto' or 'cpu'")
        dev = torch.device(name)
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ConfigError(f"TrainConfig.device={name!r} but only {torch.cuda.device_count()} CUDA device(s) exist")
        return dev
    return torch.device(name)


def vocab_size_of(data: DataConfig) -> int:
    """The vocabulary of `data`'s tokenizer (TrainConfig.data_config), before any corpus is built."""
    with as_config_error("TrainConfig.tokenizer", (ValueError, RuntimeError, OSError)):   # r50k ranks unreadable
        return get_tokenizer(data.tokenizer).n_vocab


def tiny_model(cfg: TrainConfig, policy: QuantPolicy) -> tuple[torch.nn.Module, list[dict[str, Any]]]:
    """The run's modules (every block: which weights the recipe quantizes, hp_last, what the factory puts on a grid)
    at a tiny width, quantized by `policy` and frozen as the run's; returns (model, quantize_model's rows). Widths
    are multiples of 16, as the FP8 GEMMs of the hardware backends need. The global RNG is left as it was."""
    gcfg = dataclasses.replace(gpt_config(cfg.model_config, TINY_VOCAB), n_head=1, n_embd=16, block_size=8)
    with torch.random.fork_rng(devices=[]):
        model = GPT(gcfg)
        with as_config_error(f"TrainConfig.recipe={cfg.recipe_name!r}"):
            rows = quantize_model(model, policy, verbose=False)
    if cfg.freeze_blocks:
        freeze_blocks(model)
    return model, rows


def check_quantizes_something(cfg: TrainConfig, policy: QuantPolicy, rows: list[dict[str, Any]]) -> None:
    """A recipe that quantizes some layer class but no Linear of this model (hp_last >= n_layer, with lm_head in
    high precision) would train an all-high-precision model under its name: refused."""
    if any(spec is not None for spec in policy.layers.values()) and all(r["backend"] == "-" for r in rows):
        hp = [f"{k}={n}" for k, n in (("hp_first", policy.hp_first_blocks), ("hp_last", policy.hp_last_blocks)) if n]
        why = (f"{' + '.join(hp)} keeps all {cfg.n_layer} block(s) in high precision"
               if policy.hp_first_blocks + policy.hp_last_blocks >= cfg.n_layer
               else "no Linear of this model matches its layer classes")
        raise ConfigError(f"TrainConfig.recipe={cfg.recipe_name!r} quantizes no Linear of this model ({why}), so "
                          f"it would train a high-precision model under its name; valid: hp_first + hp_last < n_layer="
                          f"{cfg.n_layer}, or recipe 'hp' for a high-precision run")


def check_precision_schedule(cfg: TrainConfig, policy: QuantPolicy, model: torch.nn.Module) -> None:
    """precision_schedule against the model the recipe builds (`model`: tiny_model's; TrainConfig checked each
    phase against the recipe's text): each key must switch a GEMM that some Linear quantizes here (not one the recipe's
    gemm.hp_gemms, operand specs or hp_first / hp_last / hp_layers already keep in high precision), the attention
    core must not stay quantized in the direction a key switches (the switch reaches Linears only), and every phase
    is installed with set_hp_gemms, the loop's own call, then undone. One line naming both settings."""
    sched = cfg.hp_schedule
    layers = [m for m in model.modules() if isinstance(m, QuantizedLinear)]
    attn = [m for m in model.modules() if isinstance(m, QuantizedAttention)]
    hp = [f"{k}={v}" for k, v in (("hp_first", policy.hp_first_blocks), ("hp_last", policy.hp_last_blocks),
                                  ("hp_layers", "+".join(map(str, policy.hp_layers)))) if v]
    for key, first in sched.starts:
        switch = f"TrainConfig.precision_schedule.{key}={cfg.precision_schedule[key]!r}"
        gemms = SCHEDULE_GEMMS[key]
        if not any(g in quantized_gemms(m) for m in layers for g in gemms):
            raise ConfigError(f"{switch} switches {'+'.join(gemms)} to high precision, but recipe {cfg.recipe_name!r} "
                              f"quantizes no {'+'.join(gemms)} operand of this model (its gemm.hp_gemms / operand "
                              f"specs{', ' + ', '.join(hp) if hp else ''} keep them in high precision), so the switch "
                              f"changes nothing; valid: a recipe that quantizes {'+'.join(gemms)}, or no {key}")
        points = [p for p in SCHEDULE_ATTN_POINTS.get(key, ()) if attn and getattr(policy.attn, p) is not None]
        if points:
            raise ConfigError(f"{switch} switches the Linears' {'+'.join(gemms)} to high precision, but recipe "
                              f"{cfg.recipe_name!r} attn keeps the attention core's {', '.join(points)} quantized "
                              f"(the switch reaches Linears only), so from step {first} the run is not what the "
                              f"schedule says; valid: attn null (no mxfp8_attn switch), or no {key}")
    try:
        for first in sched.switch_steps:
            with as_config_error(f"TrainConfig.precision_schedule={cfg.precision_schedule} from step {first}"):
                set_hp_gemms(model, sched.hp_gemms_at(first))
    finally:
        set_hp_gemms(model, ())


def check_optimizer(cfg: TrainConfig, policy: QuantPolicy | None = None, model: torch.nn.Module | None = None) -> None:
    """Build the optimizer `cfg` asks for with optim.factory.build_optimizer itself (the code path of the run) on
    `model` (default: tiny_model's), then drop it: whatever the factory or an optimizer refuses (a grid storage
    with no weight format, block-scaled weights on a grid, a bad or unsigned format) fails here in one line, before
    any data or run directory. torch AdamW (the default) has no settings to check."""
    if cfg.optim_config.is_torch_adamw:
        return
    if model is None:
        model, _ = tiny_model(cfg, policy if policy is not None else check_policy(cfg))
    with torch.random.fork_rng(devices=[]), \
            as_config_error(f"TrainConfig.optimizer={cfg.optimizer!r} with optim={cfg.optim}"):
        factory.build_optimizer(model, cfg.optim_config, torch.device("cpu"))


def check_settings(cfg: TrainConfig) -> QuantPolicy:
    """Every setting of `cfg` that needs no data, device or directory (the tokenizer's name: TrainConfig itself):
    recipe x backend (and that it quantizes something on this model), optimizer. `altgrad study` checks each point
    with it before training any; returns the policy."""
    policy = check_policy(cfg)
    model, rows = tiny_model(cfg, policy)
    check_quantizes_something(cfg, policy, rows)
    check_precision_schedule(cfg, policy, model)
    for key, n in (("hp_first", policy.hp_first_blocks), ("hp_last", policy.hp_last_blocks)):
        if n > cfg.n_layer:   # with lm_head quantized the run would train, but not what its name says
            raise ConfigError(f"TrainConfig.recipe={cfg.recipe_name!r}: {key}={n} exceeds n_layer={cfg.n_layer}; "
                              f"valid: 0 <= {key} <= n_layer")
    check_optimizer(cfg, policy, model)
    return policy


def check_config(cfg: TrainConfig) -> tuple[QuantPolicy, torch.device]:
    """The cheap checks (no corpus, no full-size model): check_settings and the device. Used by --print-config."""
    return check_settings(cfg), check_device(cfg.device)


# ----------------------------------------------------------------------------------------------
# sizes


def _meta_model(cfg: TrainConfig, vocab_size: int) -> torch.nn.Module:
    """The GPT on the meta device: exact shapes, no memory, any size."""
    with torch.device("meta"):
        return GPT(gpt_config(cfg.model_config, vocab_size))


def count_params(cfg: TrainConfig, vocab_size: int, model: torch.nn.Module | None = None) -> int:
    return sum(p.numel() for p in (model or _meta_model(cfg, vocab_size)).parameters())


def quantized_weight_numel(cfg: TrainConfig, vocab_size: int, policy: QuantPolicy | None = None,
                           model: torch.nn.Module | None = None) -> int:
    """Weights whose quantized copy a simulated quantized Linear saves for backward (`policy`: the resolved
    recipe, `model`: the meta model, when the caller has them)."""
    policy = policy if policy is not None else check_policy(cfg)
    n = 0
    for fqn, m in (model or _meta_model(cfg, vocab_size)).named_modules():
        cls = layer_class_of(fqn) if isinstance(m, torch.nn.Linear) else None
        spec = policy.spec_for(cls) if cls is not None else None
        n += m.weight.numel() if spec is not None and spec.weight is not None else 0
    return n


def estimate_memory(cfg: TrainConfig, vocab_size: int, policy: QuantPolicy | None = None) -> dict[str, float]:
    """Bytes a training step needs, by part (see the module docstring), and FLOPs per step."""
    meta = _meta_model(cfg, vocab_size)
    gcfg = meta.config
    n_params = count_params(cfg, vocab_size, meta)
    wq = 4 * quantized_weight_numel(cfg, vocab_size, policy, meta)
    tokens = cfg.batch_size * cfg.block_size
    vp, c, n_layer = gcfg.padded_vocab_size, cfg.n_embd, cfg.n_layer
    act = 4 * tokens * (ACT_FLOATS_PER_TOKEN_LAYER * n_layer * c + vp)
    transient = 4 * tokens * 2 * vp
    state = 16 * n_params
    matmul_params = n_params - vp * c - cfg.block_size * c                       # embeddings are lookups
    flops = 6 * tokens * (matmul_params + vp * c) + 6 * n_layer * tokens * cfg.block_size * c  # + causal attention
    return {"params": float(n_params), "weights_grads_adam": float(state), "activations": float(act),
            "quantized_weight_copies": float(wq), "backward_transients": float(transient),
            "total": float(state + act + wq + transient),
            "flops_per_step": float(flops)}


def available_memory(device: torch.device) -> float:
    """Free bytes on the device: CUDA free memory, else MemAvailable (Linux) or physical memory."""
    if device.type == "cuda":
        return float(torch.cuda.mem_get_info(device)[0])
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return float(line.split()[1]) * 1024
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def _gib(b: float) -> str:
    return f"{b / 2**30:.3g} GiB"


def check_size(cfg: TrainConfig, vocab_size: int, device: torch.device, available: float | None = None,
               policy: QuantPolicy | None = None) -> dict:
    """Refuse a run whose estimate does not fit the device; warn (SizeWarning) when it is huge or slow."""
    est = estimate_memory(cfg, vocab_size, policy)
    avail = available_memory(device) if available is None else available
    parts = (f"{est['params'] / 1e6:.3g}M params: weights+grads+AdamW {_gib(est['weights_grads_adam'])}, "
             f"activations {_gib(est['activations'])}, backward {_gib(est['backward_transients'])}")
    if est["total"] > avail:
        raise ConfigError(f"this config needs about {_gib(est['total'])} on {device.type} ({parts}) but only "
                          f"{_gib(avail)} is available; reduce batch_size, block_size={cfg.block_size}, "
                          f"n_embd or n_layer")
    if est["total"] > WARN_FRACTION * avail:
        warnings.warn(f"this config needs about {_gib(est['total'])} of the {_gib(avail)} available on "
                      f"{device.type} ({parts})", SizeWarning, stacklevel=2)
    hours = est["flops_per_step"] * cfg.max_steps / FLOPS_PER_S.get(device.type, FLOPS_PER_S["cpu"]) / 3600
    if hours > WARN_HOURS:
        warnings.warn(f"{cfg.max_steps} steps of {est['flops_per_step']:.3g} FLOPs take at least ~{hours:.3g} h "
                      f"on {device.type} (at an optimistic {FLOPS_PER_S.get(device.type, 1e11):.0e} FLOP/s)",
                      SizeWarning, stacklevel=2)
    return est


# ----------------------------------------------------------------------------------------------
# corpus, model, out_dir


def build_corpus(data: DataConfig) -> TokenCorpus:
    """The corpus of `data` (TrainConfig.data_config), long enough for one block in each split."""
    with as_config_error("TrainConfig.corpus", (ValueError, RuntimeError, OSError)):
        corpus = TokenCorpus.for_data(data)
    for split in ("train", "val"):
        n = len(corpus.split_data(split))
        if n < data.block_size + 1:
            raise ConfigError(f"corpus {data.corpus!r} (max_docs={data.max_docs}) has {n} {split} tokens, fewer than "
                              f"block_size+1={data.block_size + 1}; lower block_size or raise max_docs")
    return corpus


class BuiltModel(NamedTuple):
    """The run's quantized model as train() trains it, built by check_model."""
    model: torch.nn.Module
    rows: list[dict[str, Any]]      # quantize_model's table
    rng_after: torch.Tensor         # the CPU RNG state right after the build from seed_everything(cfg.seed)


def check_model(cfg: TrainConfig, vocab_size: int, policy: QuantPolicy | None = None) -> BuiltModel:
    """Build the model and quantize it as train() will (shapes against FP8 GEMMs, ...), drawing the initial weights
    from torch.manual_seed(cfg.seed) as train()'s seed_everything does; returns it with the RNG state the build
    left, so train() continues from exactly there. The caller's global RNG is restored."""
    with torch.random.fork_rng(devices=[]), as_config_error(f"TrainConfig.recipe={cfg.recipe_name!r}"):
        torch.manual_seed(cfg.seed)
        model, rows = build_model(cfg.model_config, vocab_size, policy if policy is not None else check_policy(cfg))
        return BuiltModel(model, rows, torch.get_rng_state())


def check_out_dir(out_dir: str | Path) -> None:
    """out_dir exists (created if needed) and a file can be written in it."""
    d = Path(out_dir)
    try:
        d.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=d, prefix=".altgrad-write-test-"):
            pass
    except OSError as e:
        raise ConfigError(f"out_dir {d} is not writable ({one_line(e)}); set out_dir or $ALTGRAD_OUTPUTS to a "
                          f"writable directory") from e


class Preflight(NamedTuple):
    corpus: TokenCorpus
    device: torch.device
    policy: QuantPolicy             # TrainConfig.quant_policy: resolved once, for every check and for train()
    built: BuiltModel               # the model train() trains (check_model)


def preflight(cfg: TrainConfig) -> Preflight:
    """All checks, cheapest first; returns what they built for train(): the corpus, the device, the resolved recipe
    and the quantized model. Writes nothing but out_dir."""
    cfg = cfg.resolved()
    policy, device = check_config(cfg)
    vocab = vocab_size_of(cfg.data_config)
    check_size(cfg, vocab, device, policy=policy)
    corpus = build_corpus(cfg.data_config)
    built = check_model(cfg, corpus.vocab_size, policy)
    check_out_dir(cfg.out_dir)
    return Preflight(corpus, device, policy, built)
