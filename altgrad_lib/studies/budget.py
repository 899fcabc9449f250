"""What a study will cost and what it can resolve, before it runs (`altgrad study --dry-run` prints it).

Cost, per run: FLOPs per step from training.preflight.estimate_memory (6 · tokens · matmul params + attention)
times the steps (plus the evaluation's forward passes), divided by a sustained throughput, times the measured
step-cost ratio of a simulated recipe to the same model in high precision, plus compile warm-up. The throughput
is preflight's optimistic FLOPS_PER_S for the device, so the wall time is a lower bound, not a promise.

Resolving power: the minimum detectable effect of a paired comparison over n seeds is proportional to the sd of
the per-seed differences (studies/claims.py's `mde`, 80 % power at α = 0.05, computed per row once the runs exist).
Before the runs exist that sd is unknown: the dry run prints the factor, and `reference_sd` (nats) lets a caller
state an assumed sd (the output then says it is an assumption).
"""
from __future__ import annotations

from typing import Any

from altgrad_lib.studies.claims import mde

# Step cost of a simulated (fake-quantized) recipe relative to high precision on the same model, measured with
# `bench/train_step.py --modes fp32:eager sim:eager fp32:compiled sim:compiled --steps 10 --warmup 3 --threads 1
# --n-layer 4 --n-embd 128 --block-size 128` (fp8_hybrid, CPU, one process, interleaved rounds): compiled steps fuse
# the fake-quant into the surrounding kernels, eager steps pay a separate pass per quantized tensor.
SIM_STEP_RATIO = {"compiled": 1.14, "eager": 1.43}
COMPILE_WARMUP_S = 60.0     # one compile per process (each run is its own process in the study layer)


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
        lines.append(f"resolving power at {len(seeds)} seeds: MDE = {mde(len(seeds), reference_sd):.3g} nats, assuming "
                     f"a paired sd of {reference_sd:.3g} nats (measured on the cpu profile, not on this one); the "
                     f"window (hp vs frozen-blocks control) is unknown until its runs exist")
    else:
        lines.append(f"resolving power at {len(seeds)} seeds: MDE = {mde(len(seeds), 1.0):.3g} x the paired sd of "
                     f"the comparison (unknown until the runs exist)")
    return lines
