"""Human names for what the figures show: one table from the metric keys the monitors and the trainer log
(`ctr.sat_frac`, `val/loss`, `optim/stall_rate`) to a name and a unit, and the layer shorthand
(`transformer.h.0.attn.c_attn`, `h.0.a.c_attn`) to "block 0 attn QKV".

    metric_name(key)    "saturated fraction"               (the key itself if it is not in the table)
    metric_label(key)   "saturated fraction (fraction of elements)": an axis or colour-bar label
    column_label(col)   the same for a table column ("dynamic_range_log2") or a metric key
    layer_name(fqn)     "block 0 attn QKV"
    term(key)           one name per term printed with a number (TERMS: unigram entropy per split, the two binade
                        counts, the two stall rates); unigram_entropy_name(split), run_label(...) for runs

Every plotting function of notebook/ labels its axes, titles and legends through these, and
notebook/figure_check.py rejects a figure that shows a key of METRICS or a layer shorthand as text.
"""
from __future__ import annotations

import re
from typing import Any, Sequence

# key -> (name, unit); unit "" = a pure number whose name says what it counts (an axis label then carries no
# bracket). Keys of the monitors (monitors/__init__.py lists them), of the trainer (metrics.jsonl) and of the
# optimizer statistics (optim/diagnostics.py).
METRICS: dict[str, tuple[str, str]] = {
    "overflow_frac": ("overflow fraction", "fraction of elements"),
    "underflow_frac": ("underflow fraction (new zeros)", "fraction of elements"),
    "flush_frac": ("flushed-to-zero fraction", "fraction of elements"),
    "subnormal_frac": ("subnormal fraction", "fraction of elements"),
    "ctr.sat_frac": ("saturated fraction", "fraction of elements"),
    "ctr.flush_frac": ("flushed-to-zero fraction", "fraction of elements"),
    "ctr.eps_hits": ("scale floor hits", "count"),
    "ctr.scale": ("scale s", "multiplier"),
    "ctr.amax": ("max |x|", "tensor units"),
    "sat_frac": ("saturated fraction", "fraction of elements"),
    "stall_rate": ("predicted stall: |Δw| under half an ULP", "fraction of weights"),   # TERMS["stall_rate"]
    "moved_frac": ("weights that changed code", "fraction of weights"),
    "staleness": ("stale weights", "fraction of weights"),
    "grad_snr_db": ("gradient SNR vs FP32 shadow", "dB"),
    "grad_cos": ("gradient cosine vs FP32 shadow", "cosine"),
    "sqnr_db": ("SQNR", "dB"),
    "out_sqnr_db": ("output Y SQNR", "dB"),
    "grad_in_sqnr_db": ("input gradient dX SQNR", "dB"),
    "grad_w_sqnr_db": ("weight gradient dW SQNR", "dB"),
    "kurtosis": ("excess kurtosis of the input", "dimensionless"),
    "attn_entropy": ("attention entropy", "nats"),
    "misalignment_mean": ("mean misalignment", "ULPs"),
    "code_entropy_bits": ("code entropy", "bits"),
    "capacity_use": ("codes used / finite codes", "fraction"),
    "codes_used": ("codes used", "count"),
    "dead_frac": ("dead units", "fraction of units"),
    "fired_frac": ("units that fired", "fraction of units"),
    "zero_frac": ("zeros", "fraction of elements"),
    "frac_at_max": ("values at the format's max", "fraction of elements"),
    "clipped_frac": ("clipped", "fraction of elements"),
    "grad_norm": ("gradient norm", "L2 norm"),
    "grad_norm_total": ("total gradient norm", "L2 norm"),
    "grad_stiffness_corr": ("gradient-stiffness correlation", "Pearson r"),
    "stiffness_entropy_bits": ("stiffness entropy", "bits"),
    "log2S_mean": ("mean log2 stiffness", "log2 ULP"),
    "update_ratio": ("update size ||Δw|| / ||w||", "ratio"),
    "update_lost": ("update lost to weight rounding ||ΔQ(w) − Δw|| / ||Δw||", "fraction of ||Δw||"),
    "amax": ("max |x|", "tensor units"),
    "scale": ("scale s", "multiplier"),
    "mse": ("mean squared error", "squared tensor units"),
    "blk_flush_max": ("worst block's flushed fraction", "fraction of a block's elements"),
    "blk_log2s_std": ("spread of block scales", "std of log2 s"),
    "val/loss": ("validation loss", "nats/token"),
    "val/ppl": ("validation perplexity", "exp(nats)"),
    "train/loss": ("training loss", "nats/token"),
    "train/lr": ("learning rate", "per step"),
    "train/grad_norm": ("gradient norm before clipping", "L2 norm"),
    "perf/tokens_per_s": ("throughput", "tokens/s"),
    "throughput/tokens_per_s": ("throughput", "tokens/s"),
    "optim/stall_rate": ("realized stall: update rounded away", "fraction of updated weights"),   # TERMS
    "optim/update_visibility": ("weights moved per step", "fraction of weights"),
    "optim/mean_abs_dcode": ("mean |Δcode| per weight and step", "codes"),
    "optim/frac_moved": ("weights moved per step", "fraction of weights"),
    "optim/frac_dcode_1": ("weights moved by one code", "fraction of weights"),
    "optim/frac_dcode_ge2": ("weights moved by ≥ 2 codes", "fraction of weights"),
    "optim/osc_ratio": ("oscillation ratio Σ|ΔQ| / Σ|Δw|", "ratio"),
    "optim/osc_reset_frac": ("oscillation resets", "fraction of weights"),
}
# Table columns that figures plot (numerics.formats.format_summary_table, quantize.layer_sqnr): name, unit.
COLUMNS: dict[str, tuple[str, str]] = {
    "dynamic_range_log2": ("dynamic range incl. subnormals, log2(max/min subnormal)", "binades"),   # TERMS
    "normal_binades": ("binades of the normal range", "binades"),                                  # TERMS
    "values_per_binade": ("values per binade", "count"),
    "n_finite": ("finite values", "count"),
    "out_sqnr_db": ("Y (output)", "dB"),
    "grad_in_sqnr_db": ("dX (input grad)", "dB"),
    "grad_w_sqnr_db": ("dW (weight grad)", "dB"),
    "overflow_rate": ("overflow", "fraction of elements"),
    "stiffness_var": ("stiffness variance over layers", "log2 ULP²"),
}
# One definition per name: the terms the notebooks print next to a number, each named by what it is computed from,
# so two different numbers never share a name. key -> (name, definition).
TERMS: dict[str, tuple[str, str]] = {
    "unigram_entropy_train": ("unigram entropy of the train split",
                              "-Σ p log p of the train split's token frequencies, nats/token "
                              "(TokenCorpus.unigram_entropy('train')): the no-context line drawn on loss plots"),
    "unigram_entropy_val": ("unigram entropy of the val split",
                            "the same over the val split (TokenCorpus.unigram_entropy('val'), Study.eval_entropy): "
                            "the bound of the control check (claims.control_check) and of the banners"),
    "normal_binades": ("binades of the normal range",
                       "emax - emin + 1: the exponents that hold normal values (formats.format_summary_table)"),
    "dynamic_range_log2": ("dynamic range incl. subnormals",
                           "log2(max / min_subnormal) in binades (format_summary_table dynamic_range_log2, "
                           "anatomy.format_overview 'binades (max/min_subnormal)')"),
    "stall_rate": ("predicted stall",
                   "share of a layer's weights whose update |Δw·s| is under half an ULP of w·s, from the master "
                   "weights (monitors grid group, numerics.grid_metrics.stall_rate; notebooks 04 and 06)"),
    "optim/stall_rate": ("realized stall",
                         "among the weights the optimizer asked to move (non-zero update), the share whose stored "
                         "grid value stayed the same (optim.stats; notebook 05)"),
}


def term(key: str) -> str:
    """The one name of a term of TERMS ("unigram_entropy_val" -> "unigram entropy of the val split")."""
    if key not in TERMS:
        raise KeyError(f"unknown term {key!r}; terms: {sorted(TERMS)}")
    return TERMS[key][0]


def unigram_entropy_name(split: str) -> str:
    """"unigram entropy of the train split" / "... val split": the entropy is always named with its split."""
    return term(f"unigram_entropy_{split}")


# Metrics whose values are shares of something: never negative, so their colour scales start at 0.
FRACTIONS = frozenset(k for k, (_, unit) in METRICS.items() if unit.startswith("fraction"))

ROLES = {"X": "input X", "W": "weight W", "dY": "output gradient dY", "weight": "weight W"}
_LINEAR = {("attn", "c_attn"): "attn QKV", ("attn", "c_proj"): "attn out", ("mlp", "c_fc"): "MLP up",
           ("mlp", "c_proj"): "MLP down", ("mlp", "c_gate"): "MLP gate"}
_SHORT = {"a": "attn", "m": "mlp"}
_BLOCK = re.compile(r"^(?:transformer\.)?h\.(\d+)(?:\.(attn|mlp|a|m)(?:\.(\w+))?)?$")
_OTHER = re.compile(r"^(?:transformer\.)?h\.(\d+)\.(.+)$")
_PARTS = {"ln_1": "LayerNorm 1", "ln_2": "LayerNorm 2"}
_WHOLE = {"ln_f": "final LayerNorm", "lm_head": "LM head", "transformer.lm_head": "LM head",
          "transformer.wte": "token embedding",
          "wte": "token embedding", "transformer.wpe": "position embedding", "wpe": "position embedding"}


def metric_name(key: str) -> str:
    """The human name of a metric key ("val/loss" -> "validation loss"); the key itself when it is unknown."""
    return METRICS[key][0] if key in METRICS else key


def metric_label(key: str) -> str:
    """An axis label: "validation loss (nats/token)"."""
    if key not in METRICS:
        return key
    name, unit = METRICS[key]
    return f"{name} ({unit})" if unit else name


def column_label(col: str, note: str = "") -> str:
    """An axis label for a table column or a metric key: "dynamic range max/min subnormal (binades, log2 scale)"."""
    name, unit = COLUMNS.get(col) or METRICS.get(col) or (col, "")
    inside = ", ".join(x for x in (unit, note) if x)
    return f"{name} ({inside})" if inside else name


def layer_name(layer: str) -> str:
    """"transformer.h.0.attn.c_attn" or "h.0.a.c_attn" -> "block 0 attn QKV"; "…h.1.attn" -> "block 1 attn"."""
    layer = layer.removeprefix("_orig_mod.")
    if layer in _WHOLE:
        return _WHOLE[layer]
    m = _BLOCK.match(layer)
    if not m:
        other = _OTHER.match(layer)   # a block's LayerNorm or any other part: "h.0.ln_1" -> "block 0 LayerNorm 1"
        if other:
            block, rest = other.groups()
            return f"block {block} {_PARTS.get(rest, rest.replace('.', ' '))}"
        return _WHOLE.get(layer.removeprefix("transformer."), layer.removeprefix("transformer."))
    block, part, lin = m.groups()
    part = _SHORT.get(part, part)
    if part is None:
        return f"block {block}"
    if lin is None:
        return f"block {block} {part if part == 'attn' else 'MLP'}"
    return f"block {block} {_LINEAR.get((part, lin), f'{part} {lin}')}"


def _seeds_text(seeds: Sequence[int]) -> str:
    s = sorted({int(x) for x in seeds})
    if len(s) == 1:
        return f"seed {s[0]}"
    if s == list(range(s[0], s[-1] + 1)):
        return f"seeds {s[0]}–{s[-1]}"
    return "seeds " + ", ".join(map(str, s))


def run_label(label: str, config: Any = None, seeds: Sequence[int] = (), profile: str | None = None) -> str:
    """A run named by what it is, not only by its variant label: "hp: recipe hp, 2L × 64d, 50 steps, seeds 0–2, cpu
    profile". Three notebooks' "hp" are three different runs (different steps, sizes, seeds); a legend, title or
    banner that shows a number of one of them names it with this. `config` is a TrainConfig (or anything with
    recipe, n_layer, n_embd, max_steps); parts that are not given are left out."""
    parts = []
    if config is not None:
        recipe = getattr(config, "recipe", None)
        parts.append(f"recipe {recipe if isinstance(recipe, str) else 'custom'}")
        if getattr(config, "n_layer", None) is not None and getattr(config, "n_embd", None) is not None:
            parts.append(f"{config.n_layer}L × {config.n_embd}d")
        if getattr(config, "max_steps", None) is not None:
            parts.append(f"{config.max_steps} steps")
    if len(seeds):
        parts.append(_seeds_text(seeds))
    if profile:
        parts.append(f"{profile} profile")
    return f"{label}: {', '.join(parts)}" if parts else str(label)
