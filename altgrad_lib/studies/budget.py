"""What a study will cost and what it can resolve, before it runs (`altgrad study --dry-run` prints it).

Cost: measured on the machine the dry run runs on, not a constant. For each distinct run setting (everything in
the config but the seed and the names) `measure_run` trains a probe of the very run in this process, for
PROBE_STEPS steps in a temporary directory, with its evals, checkpoints and diagnostics due on chosen steps, and
times each step (train()'s on_step callback): a plain step, and what an eval (per batch), a checkpoint and a
diagnostics step add on top; the rest (preflight, model build, the step-0 eval, the first step's warm-up or
compile) is the run's set-up. `RunCost.seconds` scales these to the run's own steps and intervals. A study with
several worker processes also pays each worker's start (interpreter, imports, preflight's corpus load), and its
runs train side by side, slowing each other (shared cores, caches, memory bandwidth, other jobs on the box):
`side_by_side` starts the other workers as real processes (timing their start) and probes in all of them at once
(timing the slowdown of a step). The study's wall time is then this command's own start, a worker's start, and
the runs' seconds as the workers take them in order (`makespan`). Single probe samples on a shared machine are
noisy: the estimate is meant to be right within ~2x (tests/test_studies_budget.py compares it with real runs), not
to the second.
A device this machine lacks (cuda from a CPU box) cannot be measured: the dry run says so and gives preflight's
FLOP-count lower bound instead.

Resolving power: the minimum detectable effect of a paired comparison over n seeds is proportional to the sd of
the per-seed differences (studies/claims.py's `mde`, 80 % power at α = 0.05, computed per row once the runs exist).
Before the runs exist that sd is unknown: the dry run prints the factor, and `reference_sd` (nats) lets a caller
state an assumed sd (the output then says it is an assumption).
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from altgrad_lib.errors import exc_line
from altgrad_lib.monitors.config import INTERVAL_FIELDS
from altgrad_lib.studies.paired_stats import verdict_mde
from altgrad_lib.training.config import NON_RESULT_FIELDS
from altgrad_lib.training.loop import train
from altgrad_lib.training.preflight import FLOPS_PER_S, estimate_memory, resolve_device

# Probe schedule (1-based steps): eval every 4, diagnostics every 5 (and at step 1), checkpoint every 6, so steps 2, 3,
# 7, 9 and 11 are plain, 4 and 8 an eval only, 5 and 10 diagnostics only, 6 a checkpoint only (12 has eval + ckpt).
PROBE_STEPS = 12
PROBE_EVERY = {"eval": 4, "diag": 5, "ckpt": 6}
PROBE_EVAL_ITERS = 4     # eval batches per probe eval; an eval's cost is scaled per batch to the run's eval_iters


@dataclass(frozen=True)
class RunCost:
    """Measured seconds of one run's parts (see the module note)."""
    setup: float          # preflight, build, a PROBE_EVAL_ITERS-batch step-0 eval, step 1 (warm-up / compile)
    step: float           # one plain training step
    eval_batch: float     # one validation batch (an eval is 2 splits x eval_iters batches)
    ckpt: float           # one checkpoint
    diag: float           # what a diagnostics step adds

    def seconds(self, cfg: Any) -> float:
        """Wall seconds of a run of TrainConfig `cfg` (the setting the probe measured, any steps and intervals)."""
        n = cfg.max_steps
        evals = (n // cfg.eval_interval if cfg.eval_interval else 0) + (1 if not cfg.eval_interval
                                                                       or n % cfg.eval_interval else 0)
        ckpts = (n // cfg.ckpt_interval if cfg.ckpt_interval else 0) + (1 if not cfg.ckpt_interval
                                                                       or n % cfg.ckpt_interval else 0)
        diag = cfg.diagnostics_config
        diags = n // diag.every if diag.enabled else 0            # step 1's is part of the setup
        batches = 2 * cfg.eval_iters
        return (self.setup + self.eval_batch * 2 * (cfg.eval_iters - PROBE_EVAL_ITERS) + (n - 1) * self.step
                + evals * batches * self.eval_batch + ckpts * self.ckpt + diags * self.diag)


def cost_key(cfg: Any) -> str:
    """Runs that cost the same: the config without its seed and the fields that change no number or name."""
    d = {k: v for k, v in cfg.to_dict().items() if k not in (*NON_RESULT_FIELDS, "seed", "max_steps",
                                                               "eval_interval", "eval_iters")}
    d["diagnostics"] = cfg.diagnostics_config.to_dict()   # diagnostics do cost time
    return json.dumps(d, sort_keys=True, default=str)


def _probe_config(cfg: Any, out_dir: str) -> Any:
    diag = cfg.diagnostics_config
    d = "off"
    if diag.enabled:   # every group due on the same steps: its cost is paid at the main interval (an upper bound)
        d = {**diag.to_dict(), "interval": PROBE_EVERY["diag"], "group_intervals": {}}
        d.update({f: PROBE_EVERY["diag"] for f in INTERVAL_FIELDS.values() if d[f] > 0})
    # a precision switch at the same fraction of the probe's steps (it costs a recompile in a compiled run)
    sched = {k: v if v == "decay" else max(1, min(PROBE_STEPS, round(v * PROBE_STEPS / cfg.max_steps)))
             for k, v in cfg.precision_schedule.items()}
    return cfg.replace(max_steps=PROBE_STEPS, warmup_steps=min(cfg.warmup_steps, 2), eval_interval=PROBE_EVERY["eval"],
                       eval_iters=PROBE_EVAL_ITERS, ckpt_interval=PROBE_EVERY["ckpt"], diagnostics=d, out_dir=out_dir,
                       run_name="budget-probe", logger="none", precision_schedule=sched)


def measure_run(cfg: Any, threads: int | None = None) -> RunCost:
    """Train the probe of `cfg` in this process on `threads` torch threads (default: as now) and time its parts."""
    stamps: dict[int, float] = {}
    prev = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        with tempfile.TemporaryDirectory(prefix="altgrad-budget-") as tmp:
            probe = _probe_config(cfg, tmp)
            t0 = time.perf_counter()
            train(probe, resume=False, progress=False, verbose=False,
                  on_step=lambda step, m: stamps.__setitem__(step, time.perf_counter()))
    finally:
        torch.set_num_threads(prev)
    if len(stamps) < PROBE_STEPS:   # diverged (a result, not an error) before its last step: nothing to time
        raise RuntimeError(f"the probe stopped after step {max(stamps, default=0)} of {PROBE_STEPS} (diverged?)")
    d = {s: stamps[s] - stamps[s - 1] for s in range(2, PROBE_STEPS + 1)}
    step = statistics.median(d[s] for s in (2, 3, 7, 9, 11))   # the median: one interrupted step on a shared box
    return RunCost(setup=stamps[1] - t0, step=step,
                   eval_batch=max((d[4] + d[8]) / 2 - step, 0.0) / (2 * PROBE_EVAL_ITERS), ckpt=max(d[6] - step, 0.0),
                   diag=max((d[5] + d[10]) / 2 - step, 0.0) if probe.diagnostics != "off" else 0.0)


_WORKER = """import dataclasses, json, sys
from altgrad_lib.training.config import TrainConfig
from altgrad_lib.training.preflight import preflight
from altgrad_lib.studies.budget import measure_run
cfg = TrainConfig.from_dict(json.loads(sys.argv[1]))
preflight(cfg)
print("ready", flush=True)
sys.stdin.readline()
print(json.dumps(dataclasses.asdict(measure_run(cfg, int(sys.argv[2]) or None))), flush=True)
"""


def side_by_side(cfg: Any, workers: int, threads: int | None, alone: RunCost) -> tuple[float, float]:
    """(a worker's start in seconds, the slowdown of a step when `workers` runs train at once): starts workers - 1
    processes as a study's workers (interpreter, imports, preflight: the start), then probes `cfg` in all of them
    and in this process at the same time; the slowdown is the mean step time then over `alone.step`."""
    t0 = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-c", _WORKER, json.dumps(cfg.to_dict(), default=str),
                               str(threads or 0)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True) for _ in range(workers - 1)]
    try:
        for p in procs:
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError(f"a worker process could not start (exit {p.wait()})")
        start = time.perf_counter() - t0
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        steps = [measure_run(cfg, threads).step]
        steps += [json.loads(p.stdout.readline())["step"] for p in procs]
    finally:
        for p in procs:
            p.kill()
            p.wait()
    return start, max(statistics.mean(steps) / alone.step, 1.0)


def makespan(seconds: list[float], workers: int) -> float:
    """Wall seconds of jobs taken in order by `workers` workers, each starting the next job when it is free (as the
    local executor's process pool does): not sum / workers, which assumes runs of equal length."""
    free = [0.0] * max(workers, 1)
    for s in seconds:
        i = free.index(min(free))
        free[i] += s
    return max(free)


def process_age_seconds() -> float:
    """Seconds since this process started (Linux /proc; 0 where unknown): the dry run's own start and study checks,
    which the real study command repeats before its first run."""
    try:
        start_ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])   # field 22, starttime
        return max(float(Path("/proc/uptime").read_text().split()[0]) - start_ticks / os.sysconf("SC_CLK_TCK"), 0.0)
    except (OSError, ValueError, IndexError):
        return 0.0


def flops_lower_bound(cfg: Any, vocab_size: int, device: str) -> float:
    """Seconds of a run at preflight's optimistic sustained FLOP/s (a lower bound; for devices not on this machine)."""
    flops_step = estimate_memory(cfg, vocab_size)["flops_per_step"]
    evals = cfg.max_steps // max(cfg.eval_interval, 1) + 1
    flops = flops_step * cfg.max_steps + flops_step / 3 * 2 * cfg.eval_iters * evals   # eval: forward only, 2 splits
    return flops / FLOPS_PER_S.get(device, FLOPS_PER_S["cpu"])


def study_budget(study: Any, vocab_size: int, *, workers: int = 1, threads: int | None = None,
                 reference_sd: float | None = None, device: str | None = None, driver_s: float = 0.0,
                 holm_rows: int = 1) -> list[str]:
    """Lines describing the study's cost (per run, all runs on `workers`, each on `threads` torch threads) and its
    resolving power at its seeds. Costs are measured here (module note), once per distinct run setting; driver_s:
    seconds the study command spends before its first run (its start and checks), added to the study's time;
    holm_rows: the rows of the claims table (its Holm family), for the MDE the verdict is held to
    (paired_stats.verdict_mde)."""
    points = study.expand()
    cfg0 = points[0].config
    dev = device or resolve_device(str(cfg0.device))
    seeds = sorted({p.config.seed for p in points})
    run_tokens = sorted({p.config.batch_size * p.config.block_size * p.config.max_steps for p in points})
    tokens_txt = (f"{run_tokens[0] / 1e6:.3g}M" if len(run_tokens) == 1     # a ladder's runs differ
                  else f"{run_tokens[0] / 1e6:.3g}M-{run_tokens[-1] / 1e6:.3g}M")
    can_measure = dev.startswith("cpu") or (dev.startswith("cuda") and torch.cuda.is_available())
    if can_measure:
        costs: dict[str, RunCost | None] = {}
        failed = []
        t0 = time.perf_counter()
        for p in points:
            key = cost_key(p.config)
            if key not in costs:
                try:
                    costs[key] = measure_run(p.config, threads)
                except Exception as e:   # a probe that fails is reported; the study may still run
                    costs[key] = None
                    failed.append(f"not measured: the probe of {p.name} failed: {exc_line(e)}")
        measured = [p for p in points if costs[cost_key(p.config)] is not None]
        if not measured:
            return [*failed, "estimate: no probe could be timed"]
        secs = [costs[cost_key(p.config)].seconds(p.config) for p in measured]
        start, slow = 0.0, 1.0
        parallel = min(workers, len(measured))
        if parallel > 1:   # the runs' steps as they will be: `parallel` processes training at once
            try:
                start, slow = side_by_side(measured[0].config, parallel, threads, costs[cost_key(measured[0].config)])
            except Exception as e:   # reported: the runs alone are still an estimate
                failed.append(f"not measured: {parallel} workers side by side ({exc_line(e)}); runs timed alone")
            setups = [costs[cost_key(p.config)].setup for p in measured]
            secs = [u + (s - u) * slow for s, u in zip(secs, setups)]   # every part but the set-up, slowed alike
        total = driver_s + start + makespan(secs, workers)
        lines = [f"estimate ({dev}, measured here: {len(costs)} probe run(s) of {PROBE_STEPS} steps in "
                 f"{time.perf_counter() - t0:.1f} s, steps {slow:.2f}x slower with {parallel} at once): "
                 f"{len(points)} runs, {tokens_txt} tokens each; "
                 f"one run ~{min(secs):.3g}-{max(secs):.3g} s + a worker's start {start:.3g} s; "
                 f"the study ~{total / 60:.3g} min on {workers} worker(s) (with this command's start "
                 f"{driver_s:.3g} s; not counting the claims at the end)"
                 + (f"; {len(points) - len(measured)} run(s) not measured, not counted" if failed else ""), *failed]
    else:
        secs = [flops_lower_bound(p.config, vocab_size, dev) for p in points]
        lines = [f"estimate ({dev}: not on this machine, so not measured; lower bound at preflight's optimistic "
                 f"FLOP/s, without set-up, compile or simulation cost): {len(points)} runs, {tokens_txt} "
                 f"tokens each; one run >= {min(secs):.3g}-{max(secs):.3g} s, the study >= "
                 f"{sum(secs) / max(workers, 1) / 60:.3g} min on {workers} worker(s)"]
    power_txt = (f"the verdict's test: 80 % power at Holm's α/{holm_rows} over {holm_rows} row(s), with the sd's 80 % "
                 f"upper confidence bound")
    if reference_sd is not None:
        mde = verdict_mde(len(seeds), reference_sd, holm_rows)
        lines.append(f"resolving power at {len(seeds)} seeds: MDE = {mde:.3g} "
                     f"nats ({power_txt}), assuming "
                     f"a paired sd of {reference_sd:.3g} nats (measured on the cpu profile, not on this one); the "
                     f"window (hp vs frozen-blocks control) is unknown until its runs exist")
    else:
        mde = verdict_mde(len(seeds), 1.0, holm_rows)
        lines.append(f"resolving power at {len(seeds)} seeds: MDE = {mde:.3g} x the "
                     f"sample sd of the paired differences ({power_txt}) of "
                     f"the comparison (unknown until the runs exist)")
    return lines
