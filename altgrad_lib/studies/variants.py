"""Notebook 05's experiment design as data: the optimizer / weight-storage variants and the runs of a format list.

    OPTIMIZER_VARIANTS            variant -> (optimizer, optim settings, the parameter that sets its lr or None)
    optimizer_runs(...)           label "<FMT> <variant>" -> TrainConfig overrides, and label -> (format, variant)

Labels are built here and their parts returned with them, so nothing splits a label back into its parts.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

OPTIMIZER_VARIANTS: dict[str, tuple[str, dict[str, Any], str | None]] = {
    "adamw fp32": ("adamw", {"storage": "fp32"}, None),
    "adamw grid_rne": ("adamw", {"storage": "grid_rne"}, None),
    "adamw grid_sr": ("adamw", {"storage": "grid_sr"}, None),
    "stiffness_adamw": ("stiffness_adamw", {"storage": "fp32"}, None),
    "grid_adamw grid_rne": ("grid_adamw", {"storage": "grid_rne"}, "grid_lr"),
    "grid_adamw grid_sr": ("grid_adamw", {"storage": "grid_sr"}, "grid_lr"),
    "madam grid_sr": ("madam", {"storage": "grid_sr"}, "madam_lr"),
    "adamw fp32 m8v8": ("adamw", {"storage": "fp32", "state_m": "E4M3", "state_v": "E5M2"}, None),
}
MASTER = "adamw fp32"   # today's path: FP32 master weights, fake-quantized forward


def optimizer_runs(formats: Iterable[str], variants: Iterable[str], pairs: Iterable[str] | None = None,
                   lrs: Mapping[str, float] | None = None,
                   stats_every: int = 10) -> tuple[dict[str, dict[str, Any]], dict[str, tuple[str, str]]]:
    """(label -> TrainConfig overrides, label -> (format, variant)) for formats x variants plus the extra `pairs`
    ("<FMT> <variant>"); recipe `fmt:<FMT>`, the variant's optimizer and optim settings with `track_stats`, and its
    own lr from `lrs` (e.g. {"grid_lr": 1.0}) when it has one. Unknown variants or malformed pairs raise one line."""
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
            raise ValueError(f"pairs entry {pair!r} must be '<FMT> <variant>' with a variant in {tuple(OPTIMIZER_VARIANTS)}")
        jobs.append((parts[0], parts[1]))
    overrides, parts_of = {}, {}
    for fmt, v in dict.fromkeys(jobs):
        name, optim, lr_param = OPTIMIZER_VARIANTS[v]
        if lr_param is not None and lr_param not in lrs:
            raise ValueError(f"variant {v!r} needs its lr {lr_param!r}; given: {sorted(lrs)}")
        optim = {**optim, **({"lr": lrs[lr_param]} if lr_param else {}), "track_stats": stats_every}
        label = f"{fmt} {v}"
        overrides[label] = dict(recipe=f"fmt:{fmt}", optimizer=name, optim=optim)
        parts_of[label] = (fmt, v)
    return overrides, parts_of


__all__ = ["OPTIMIZER_VARIANTS", "MASTER", "optimizer_runs"]
