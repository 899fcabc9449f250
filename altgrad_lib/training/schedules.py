"""What changes with the step of a run: the learning rate (warmup + cosine) and the GEMMs precision_schedule puts in
high precision (TrainConfig parses the schedule once into its hp_schedule, a sub_configs.PrecisionSchedule, and checks
each of its phases against the recipe: config.parse_precision_schedule, check_schedule_phases)."""
from __future__ import annotations

import math

from altgrad_lib.training.config import TrainConfig


def lr_at(it: int, cfg: TrainConfig) -> float:
    """Linear warmup over warmup_steps, then cosine from lr to min_lr at max_steps (it is 0-based)."""
    if it < cfg.warmup_steps:
        return cfg.lr * (it + 1) / (cfg.warmup_steps + 1)
    span = max(1, cfg.max_steps - cfg.warmup_steps)
    ratio = min(1.0, (it - cfg.warmup_steps) / span)
    return cfg.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (cfg.lr - cfg.min_lr)
