"""studies/budget.py: the dry run's cost and resolving-power estimate."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
from scipy import stats

from altgrad_lib.studies import budget
from altgrad_lib.training.config import TrainConfig

STUDIES = Path(__file__).resolve().parent.parent / "params" / "studies"


def test_mde_is_the_paired_t_formula():
    # hand: n = 3 -> df 2: t_0.975 = 4.3027, t_0.80 = 1.0607; (4.3027 + 1.0607) / sqrt(3) = 3.0966 per unit sd
    assert budget.mde(1.0, 3) == pytest.approx(3.0966, abs=1e-3)
    assert budget.mde(0.01, 5) == pytest.approx((stats.t.ppf(0.975, 4) + stats.t.ppf(0.8, 4)) * 0.01 / math.sqrt(5))
    assert math.isnan(budget.mde(1.0, 1))


def test_mde_has_the_power_it_claims():
    """Monte Carlo: a true paired gap equal to the MDE is detected by ttest_rel in ~80 % of draws (the t-quantile
    formula is an approximation of the noncentral-t power, slightly conservative at small n)."""
    import numpy as np

    rng = np.random.default_rng(0)
    n, sd = 5, 0.02
    gap = budget.mde(sd, n)
    hits = sum(stats.ttest_1samp(rng.normal(gap, sd, n), 0.0).pvalue < 0.05 for _ in range(4000))
    assert 0.75 <= hits / 4000 <= 0.90


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
    assert "estimate (cuda" in out and "the study ~" in out and "MDE = 3.1 x the paired sd" in out
