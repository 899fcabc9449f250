"""studies/budget.py: the dry run's cost (measured on this machine) and resolving-power estimate."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from altgrad_lib.studies import budget
from altgrad_lib.studies.paired_stats import verdict_mde
from altgrad_lib.training import checkpoint as ckpt
from altgrad_lib.training.config import TrainConfig
from altgrad_lib.training.loop import train

ROOT = Path(__file__).resolve().parent.parent
STUDIES = ROOT / "params" / "studies"


def test_run_cost_counts_the_evals_checkpoints_and_diagnostics_a_real_run_makes(tmp_path, monkeypatch):
    """RunCost.seconds with one unit cost at a time counts what the training loop really does: the eval rows in
    metrics.csv, the checkpoint writes, the diagnostics steps in diagnostics.csv (all after step 1, whose share
    is in the set-up), and the steps."""
    saves = []
    real_save = ckpt.save_checkpoint
    monkeypatch.setattr(ckpt, "save_checkpoint", lambda *a, **k: saves.append(k["step"]) or real_save(*a, **k))
    cfg = TrainConfig(n_layer=1, n_head=2, n_embd=32, block_size=16, batch_size=4, max_steps=11, eval_interval=4,
                      eval_iters=1, ckpt_interval=3, warmup_steps=1, tokenizer="gpt2-256",
                      diagnostics={"preset": "cheap", "interval": 5}, out_dir=str(tmp_path))
    run = train(cfg, resume=False, progress=False, verbose=False)
    metrics = pd.read_csv(run.dir / "metrics.csv")             # long: step, name, value
    evals = metrics[metrics.name == "val/loss"].step
    diag_steps = set(pd.read_csv(run.dir / "diagnostics.csv").step)
    unit = dict(setup=0.0, step=0.0, eval_batch=0.0, ckpt=0.0, diag=0.0)
    def seconds(**one):
        return budget.RunCost(**{**unit, **one}).seconds(cfg)

    assert seconds(step=1.0) == cfg.max_steps - 1
    # an eval is 2 splits x eval_iters batches; the probe's step-0 eval (PROBE_EVAL_ITERS batches) is in the set-up
    assert seconds(eval_batch=1.0) == 2 * cfg.eval_iters * (evals > 0).sum() + 2 * (cfg.eval_iters
                                                                                   - budget.PROBE_EVAL_ITERS)
    assert seconds(ckpt=1.0) == len(saves)
    assert seconds(diag=1.0) == len(diag_steps - {1})


def _study_yaml(tmp_path: Path) -> Path:
    """2 runs of the cpu profile (params/02_bf16_baseline/cpu.yaml: its model, batch, evals and diagnostics),
    hp and fp8_hybrid, few steps."""
    f = tmp_path / "two.yaml"
    f.write_text(f"name: budget_check\nbase: {ROOT / 'params' / '02_bf16_baseline' / 'cpu.yaml'}\n"
                 "config: {max_steps: 60, eval_interval: 30, eval_iters: 8}\n"
                 "axes: {recipe: [hp, fp8_hybrid]}\n")
    return f


def test_dry_run_estimate_is_within_2x_of_the_real_study(tmp_path):
    """The dry run's estimate (probes measured on this machine) against the same study really run, as separate
    processes on 2 workers, right after it: each run (between its steps alone and its steps plus a worker's
    start) and the whole command within 2x (issue 27: the constant-based estimate was
    30-200x too low). Timing on a shared machine: both are measured under the same load."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "ALTGRAD_OUTPUTS": str(tmp_path / "out")}
    cmd = [sys.executable, "-m", "altgrad_lib.cli", "study", "-f", str(_study_yaml(tmp_path)), "--workers", "2"]
    dry = subprocess.run(cmd + ["--dry-run"], env=env, capture_output=True, text=True, timeout=600)
    assert dry.returncode == 0, dry.stderr
    m = re.search(r"one run ~([\d.e+-]+)-([\d.e+-]+) s \+ a worker's start ([\d.e+-]+) s; the study ~([\d.e+-]+) min",
                  dry.stdout)
    assert m, dry.stdout
    lo, hi, start, study_min = map(float, m.groups())
    t0 = time.perf_counter()
    real = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - t0
    assert real.returncode == 0, real.stderr
    runs = pd.read_csv(tmp_path / "out" / "studies" / "budget_check" / "study.csv")
    assert len(runs) == 2 and (runs.status == "completed").all()
    # one run per worker, each its worker's first. A run's seconds are timed inside the worker, from the job's
    # start: they hold the part of a worker's start that happens in the job (preflight's corpus load, first
    # compiles) but not the interpreter and the imports done when the job is unpickled, which `start` counts. So a
    # run lies between its steps alone and its steps plus a whole start; the whole command is checked below.
    for s in runs.seconds:
        assert lo / 2 <= s <= 2 * (hi + start), (s, lo, hi, start)
    assert study_min * 60 / 2 <= wall <= 2 * study_min * 60, (wall, study_min, dry.stdout)


def test_a_device_not_here_is_not_measured_and_says_so(capsys):
    from altgrad_lib.cli import main

    if budget.torch.cuda.is_available():
        pytest.skip("a GPU is here: the h100 study is measured")
    assert main(["study", "-f", str(STUDIES / "h100_formats.yaml"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "estimate (cuda: not on this machine, so not measured" in out and "the study >= " in out
    # the verdict's MDE (paired_stats.verdict_mde) at the study's 3 seeds over its Holm family: one row per recipe
    # but hp
    m = len(yaml.safe_load((STUDIES / "h100_formats.yaml").read_text())["axes"]["recipe"]) - 1
    assert m > 1 and f"MDE = {verdict_mde(3, 1.0, m):.3g} x the sample sd" in out and f"α/{m} over {m} row(s)" in out


def test_a_probe_that_fails_is_reported_and_left_out(monkeypatch):
    """A probe that raises (or diverges before its last step) is one line of the estimate, not a traceback: the
    dry run's point checks have passed, so the study may still be run."""
    from types import SimpleNamespace

    good = TrainConfig(recipe="hp", max_steps=10)
    bad = TrainConfig(recipe="fp8_hybrid", max_steps=10)

    def fake(cfg, threads=None):
        if cfg.recipe == "fp8_hybrid":
            raise RuntimeError("the probe stopped after step 3 of 8 (diverged?)\nsecond line")
        return budget.RunCost(setup=1.0, step=0.5, eval_batch=0.0, ckpt=0.0, diag=0.0)

    monkeypatch.setattr(budget, "measure_run", fake)
    study = SimpleNamespace(expand=lambda: [SimpleNamespace(config=good, name="hp-s0"),
                                            SimpleNamespace(config=bad, name="fp8-s0")])
    lines = budget.study_budget(study, 4097, workers=1, device="cpu")
    assert "one run ~5.5-5.5 s" in lines[0] and "1 run(s) not measured, not counted" in lines[0], lines
    assert lines[1] == ("not measured: the probe of fp8-s0 failed: RuntimeError: the probe stopped after step 3 of "
                        "8 (diverged?)"), lines


def test_makespan_takes_the_jobs_in_order_on_free_workers():
    # the local executor's pool hands the next job to the first free worker: 2 workers, jobs 3, 1, 1, 1
    # -> worker A: 3; worker B: 1 + 1 + 1 = 3 (sum / workers would say 3 as well); jobs 5, 1 -> 5, not 3
    assert budget.makespan([3.0, 1.0, 1.0, 1.0], 2) == 3.0
    assert budget.makespan([5.0, 1.0], 2) == 5.0
    assert budget.makespan([1.0, 1.0, 1.0], 1) == 3.0


def test_the_dry_run_sizes_its_workers_as_the_study_will(monkeypatch):
    """Device "auto" on a GPU box: the run gets one worker (executors.auto_workers); the dry run's estimate used to
    read "auto" as CPU and assume one worker per core."""
    import types

    import torch

    from altgrad_lib.studies import cli
    from altgrad_lib.studies.executors import auto_workers

    seen = {}
    monkeypatch.setattr(budget, "study_budget", lambda points, n_vocab, workers, **kw: seen.update(w=workers) or [])
    monkeypatch.setattr("os.cpu_count", lambda: 4)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.delenv("ALTGRAD_WORKERS", raising=False)
    cfg = TrainConfig(tokenizer="gpt2-256")
    assert cfg.device == "auto"
    cli._budget([types.SimpleNamespace(config=cfg)] * 3, workers=None)
    assert seen["w"] == auto_workers(3, cfg.device) == 1
