"""studies/budget.py: the dry run's cost and resolving-power estimate."""
from __future__ import annotations

from pathlib import Path

import pytest

from altgrad_lib.studies import budget
from altgrad_lib.studies.claims import mde
from altgrad_lib.training.config import TrainConfig

STUDIES = Path(__file__).resolve().parent.parent / "params" / "studies"


def test_run_seconds_scale_with_steps_and_the_sim_ratio():
    base = TrainConfig(n_layer=2, n_head=2, n_embd=64, block_size=64, batch_size=8, max_steps=100, eval_iters=2)
    hp = budget.run_seconds(base, 4097)
    assert budget.run_seconds(base.replace(max_steps=200), 4097) > 1.9 * hp
    sim = budget.run_seconds(base.replace(recipe="fp8_hybrid"), 4097)
    assert sim == pytest.approx(hp * budget.SIM_STEP_RATIO["eager"])
    compiled = budget.run_seconds(base.replace(compile=True), 4097)
    assert compiled == pytest.approx(hp + budget.COMPILE_WARMUP_S)


def test_dry_run_prints_the_estimate(capsys):
    from altgrad_lib.cli import main

    assert main(["study", "-f", str(STUDIES / "h100_formats.yaml"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "estimate (cuda" in out and "the study ~" in out
    assert f"MDE = {mde(3, 1.0):.3g} x the paired sd" in out       # claims.mde at the study's 3 seeds
