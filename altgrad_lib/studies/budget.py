"""What a study will cost and what it can resolve, before it runs (`altgrad study --dry-run` prints it).

Cost, per run: FLOPs per step from training.preflight.estimate_memory (6 · tokens · matmul params + attention)
times the steps (plus the evaluation's forward passes), divided by a sustained throughput, times the measured
step-cost ratio of a simulated recipe to the same model in high precision, plus compile warm-up. The throughput
is preflight's optimistic FLOPS_PER_S for the device, so the wall time is a lower bound, not a promise.

Resolving power: the minimum detectable effect of a paired comparison over n seeds is
MDE = (t_{1-α/2, n-1} + t_{power, n-1}) · sd_d / √n (studies/claims.py computes it per row from the runs). Before
the runs exist, sd_d is unknown; `reference_sd` (nats) lets the caller state an assumed one (e.g. the cpu
profile's measured sd, bench/results/cpu_profile.md), and the output says it is an assumption.
"""
from __future__ import annotations

import math
from typing import Any

# Step cost of a simulated (fake-quantized) recipe relative to high precision on the same model, measured with
# `bench/train_step.py --modes fp32:eager sim:eager fp32:compiled sim:compiled` (fp8_hybrid, CPU): compiled steps
# fuse the fake-quant into the surrounding kernels, eager steps pay a separate pass per quantized tensor.
SIM_STEP_RATIO = {"compiled": 1.08, "eager": 1.60}
COMPILE_WARMUP_S = 60.0     # one compile per process (each run is its own process in the study layer)


def mde(sd_d: float, n: int, alpha: float = 0.05, power: float = 0.8) -> float:
    """Smallest paired mean gap a two-sided paired t-test at `alpha` detects with `power` (normal-t approximation
    used by claims.py's per-row MDE as well: t quantiles at n − 1 degrees of freedom)."""
    from scipy import stats

    if n < 2 or not math.isfinite(sd_d):
        return math.nan
    df = n - 1
    return float((stats.t.ppf(1 - alpha / 2, df) + stats.t.ppf(power, df)) * sd_d / math.sqrt(n))


def run_seconds(cfg: Any, vocab_size: int, device: str | None = None) -> float:
    """Estimated wall seconds of one run of TrainConfig `cfg` (lower bound: optimistic sustained FLOP/s)."""
    from altgrad_lib.training.preflight import FLOPS_PER_S, estimate_memory

    dev = device or ("cuda" if str(cfg.device).startswith("cuda") else "cpu")
    flops_step = estimate_memory(cfg, vocab_size)["flops_per_step"]
    evals = cfg.max_steps // max(cfg.eval_interval, 1) + 1
    flops = flops_step * cfg.max_steps + flops_step / 3 * 2 * cfg.eval_iters * evals   # eval: forward only, 2 splits
    seconds = flops / FLOPS_PER_S.get(dev, FLOPS_PER_S["cpu"])
    quantized = cfg.recipe_name not in ("hp", "bf16")
    if quantized:
        seconds *= SIM_STEP_RATIO["compiled" if cfg.compile else "eager"]
    return seconds + (COMPILE_WARMUP_S if cfg.compile else 0.0)


def study_budget(study: Any, vocab_size: int, *, workers: int = 1, reference_sd: float | None = None,
                 device: str | None = None) -> list[str]:
    """Lines describing the study's cost (per run, all runs on `workers`) and its resolving power at its seeds."""
    points = study.expand()
    secs = [run_seconds(p.config, vocab_size, device) for p in points]
    seeds = sorted({p.config.seed for p in points})
    cfg0 = points[0].config
    tokens = cfg0.batch_size * cfg0.block_size * cfg0.max_steps
    lines = [f"estimate ({device or cfg0.device}, lower bound at preflight's sustained FLOP/s; sim recipes x"
             f"{SIM_STEP_RATIO['compiled' if cfg0.compile else 'eager']} of hp): {len(points)} runs, "
             f"{tokens / 1e6:.3g}M tokens each; one run ~{min(secs) / 60:.3g}-{max(secs) / 60:.3g} min, "
             f"the study ~{sum(secs) / max(workers, 1) / 3600:.3g} h on {workers} worker(s)"]
    if reference_sd is not None:
        lines.append(f"resolving power at {len(seeds)} seeds: MDE = {mde(reference_sd, len(seeds)):.3g} nats, assuming "
                     f"a paired sd of {reference_sd:.3g} nats (measured on the cpu profile, not on this one); the "
                     f"window (hp vs frozen-blocks control) is unknown until its runs exist")
    else:
        lines.append(f"resolving power at {len(seeds)} seeds: MDE = {mde(1.0, len(seeds)):.3g} x the paired sd of "
                     f"the comparison (unknown until the runs exist)")
    return lines
