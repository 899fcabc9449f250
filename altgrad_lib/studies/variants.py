"""Notebook 05's experiment design as data: the optimizer / weight-storage variants and the runs of a format list.

    OPTIMIZER_VARIANTS            variant -> (optimizer, optim settings, the parameter that sets its lr or None)
    WIDE_FORMATS                  16-bit weight formats: no fake-quant recipe, the recipe is hp and the grid is
                                  `optim.weight_fmt` (a grid-stored weight is the forward weight)
    optimizer_runs(...)           label "<FMT> <variant>" -> TrainConfig overrides, and label -> (format, variant)
    reference_claims(...)         every run against the FP32-master run of its own format, paired by seed: one
                                  claims table, one Holm family

Labels are built here and their parts returned with them, so nothing splits a label back into its parts.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

import pandas as pd

from altgrad_lib.studies import claims

OPTIMIZER_VARIANTS: dict[str, tuple[str, dict[str, Any], str | None]] = {
    "adamw fp32": ("adamw", {"storage": "fp32"}, None),
    "adamw grid_rne": ("adamw", {"storage": "grid_rne"}, None),
    "adamw grid_sr": ("adamw", {"storage": "grid_sr"}, None),
    "stiffness_adamw": ("stiffness_adamw", {"storage": "fp32"}, None),
    "grid_adamw grid_rne": ("grid_adamw", {"storage": "grid_rne"}, "grid_lr"),
    "grid_adamw grid_sr": ("grid_adamw", {"storage": "grid_sr"}, "grid_lr"),
    "madam grid_sr": ("madam", {"storage": "grid_sr"}, "madam_lr"),
    "adamw error_feedback": ("adamw", {"storage": "error_feedback"}, None),
    "adamw error_feedback_sr": ("adamw", {"storage": "error_feedback_sr"}, None),
    "adamw fp32 m8v8": ("adamw", {"storage": "fp32", "state_m": "E4M3", "state_v": "E5M2"}, None),
    # the fixes of bench/results/state_precision.md (same m E4M3 / v E5M2 unless named)
    "adamw fp32 m8v8_sr": ("adamw", {"storage": "fp32", "state_m": "E4M3", "state_v": "E5M2",
                                     "state_rounding": "stochastic"}, None),
    "adamw fp32 m8v8_coat": ("adamw", {"storage": "fp32", "state_m": "E4M3", "state_v": "E4M3",
                                       "state_m_transform": "expand", "state_v_transform": "expand"}, None),
    "adamw fp32 m8v8_amax": ("adamw", {"storage": "fp32", "state_m": "E4M3", "state_v": "E5M2",
                                       "state_scale": "amax"}, None),
}
STATE_VARIANTS = tuple(v for v in OPTIMIZER_VARIANTS if " m8v8" in v)
# BF16 / FP16 have no fake-quant recipe here: forward unquantized (hp), the block Linears stored on the grid
WIDE_FORMATS = {"BF16": "bf16", "FP16": "fp16"}
HP, HP_CONTROL = "hp", "hp control"   # the shared baseline (torch AdamW, no quantization) and its frozen blocks
MASTER = "adamw fp32"   # today's path: FP32 master weights, fake-quantized forward


def optimizer_runs(formats: Iterable[str], variants: Iterable[str], pairs: Iterable[str] | None = None,
                   lrs: Mapping[str, float] | None = None,
                   stats_every: int = 10, osc_window: int | None = None
                   ) -> tuple[dict[str, dict[str, Any]], dict[str, tuple[str, str]]]:
    """(label -> TrainConfig overrides, label -> (format, variant)) for formats x variants plus the extra `pairs`
    ("<FMT> <variant>"); recipe `fmt:<FMT>` (WIDE_FORMATS: recipe hp and optim.weight_fmt), the variant's optimizer
    and optim settings with `track_stats` (and `osc_window` if given: measured steps per oscillation-ratio window),
    and its own lr from `lrs` (e.g. {"grid_lr": 1.0}) when it has one. Unknown variants or malformed pairs raise
    one line."""
    lrs = dict(lrs or {})
    if stats_every < 1:
        raise ValueError(f"stats_every={stats_every} must be >= 1 (measure every N-th optimizer step)")
    formats, variants = list(formats), list(variants)
    bad = [v for v in variants if v not in OPTIMIZER_VARIANTS]
    if bad:
        raise ValueError(f"variant(s) {bad} not in {tuple(OPTIMIZER_VARIANTS)}")
    jobs = [(f, v) for f in formats for v in variants]
    for pair in pairs or []:
        parts = pair.split(" ", 1) if isinstance(pair, str) else []
        if len(parts) != 2 or parts[1] not in OPTIMIZER_VARIANTS:
            raise ValueError(f"pairs entry {pair!r} must be '<FMT> <variant>' with a variant in "
                             f"{tuple(OPTIMIZER_VARIANTS)}")
        jobs.append((parts[0], parts[1]))
    overrides, parts_of = {}, {}
    for fmt, v in dict.fromkeys(jobs):
        name, optim, lr_param = OPTIMIZER_VARIANTS[v]
        if lr_param is not None and lr_param not in lrs:
            raise ValueError(f"variant {v!r} needs its lr {lr_param!r}; given: {sorted(lrs)}")
        optim = {**optim, **({"lr": lrs[lr_param]} if lr_param else {}), "track_stats": stats_every,
                 **({"osc_window": osc_window} if osc_window is not None else {})}
        wide = WIDE_FORMATS.get(str(fmt).upper())
        if wide:
            optim["weight_fmt"] = wide
        label = f"{fmt} {v}"
        overrides[label] = dict(recipe="hp" if wide else f"fmt:{fmt}", optimizer=name, optim=optim)
        parts_of[label] = (fmt, v)
    return overrides, parts_of


def parse_references(references: Iterable[str] | None) -> dict[str, str]:
    """["E7M0 adamw grid_sr"] -> {"E7M0": "adamw grid_sr"}: a format whose runs are compared with another variant
    than MASTER; a malformed entry raises one line."""
    out = {}
    for ref in references or []:
        parts = ref.split(" ", 1) if isinstance(ref, str) else []
        if len(parts) != 2 or parts[1] not in OPTIMIZER_VARIANTS:
            raise ValueError(f"references entry {ref!r} must be '<FMT> <variant>' with a variant in "
                             f"{tuple(OPTIMIZER_VARIANTS)}")
        out[parts[0]] = parts[1]
    return out


def reference_of(fmt: str, labels: Iterable[str], references: Mapping[str, str] | None = None) -> str:
    """The label a format's runs are compared with: "<FMT> <references[FMT]>" if given, else "<FMT> adamw fp32"
    (the FP32-master run of the same format), else `hp` when that format has no master run (the FP32 model; for a
    WIDE_FORMATS format that *is* the master run: its recipe is hp too)."""
    labels = set(labels)
    ref = (references or {}).get(fmt)
    if ref is not None:
        if f"{fmt} {ref}" not in labels:
            raise ValueError(f"reference {fmt} {ref!r} was not trained; runs of {fmt}: "
                             f"{sorted(lb for lb in labels if lb.startswith(fmt + ' '))}")
        return f"{fmt} {ref}"
    return f"{fmt} {MASTER}" if f"{fmt} {MASTER}" in labels else HP


def reference_claims(frame, parts: Mapping[str, tuple[str, str]], references: Mapping[str, str] | None = None,
                     value: str = "final_val_loss", smoke: bool = False):
    """Every run of `parts` against its format's reference (reference_of), paired by seed, as one claims table:
    per format, claims.claims_table(label vs reference, control `hp control`: the window is control − reference),
    then Holm and the verdicts over all rows together (one family). Columns: claims.COLUMNS plus format, variant,
    reference. `frame`: runs.frame() (label, seed, `value`, freeze_blocks). `smoke`: the control check failed (no
    verdicts, claims_table)."""
    labels = list(dict.fromkeys(frame.label))
    tables = []
    for fmt in dict.fromkeys(f for f, _ in parts.values()):
        ref = reference_of(fmt, labels, references)
        own = [lb for lb in labels if parts.get(lb, ("",))[0] == fmt and lb != ref]
        if not own or ref not in labels:
            continue
        sub = frame[frame.label.isin([*own, ref, HP_CONTROL])]
        t = claims.claims_table(sub, "label", ref, value=value, control_level=HP_CONTROL,
                                comparison=f"{fmt} vs {ref}", smoke=smoke)
        tables.append(t.assign(format=fmt, variant=[parts[lb][1] for lb in t.level], reference=ref))
    if not tables:
        return pd.DataFrame(columns=[*claims.COLUMNS, "format", "variant", "reference"])
    return claims.judge(pd.concat(tables, ignore_index=True))   # Holm, MDE and verdicts over all rows: one family


__all__ = ["OPTIMIZER_VARIANTS", "STATE_VARIANTS", "WIDE_FORMATS", "MASTER", "HP", "HP_CONTROL", "optimizer_runs",
           "parse_references", "reference_of", "reference_claims"]
