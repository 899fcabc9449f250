"""Tests for altgrad_lib.studies.stats: Welch's test against a hand computation (t, Welch–Satterthwaite df, p from the
t distribution's CDF by numerical integration), Student-t CIs, Hedges' g, verdicts and the claims table."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from altgrad_lib.studies import stats


def _mean(x):
    return sum(x) / len(x)


def _var(x):
    m = _mean(x)
    return sum((v - m) ** 2 for v in x) / (len(x) - 1)


def _t_sf(t: float, df: float, n: int = 200_000) -> float:
    """P(T > t) for Student t with df degrees of freedom: midpoint rule on the density out to t + 2000."""
    c = math.gamma((df + 1) / 2) / (math.sqrt(df * math.pi) * math.gamma(df / 2))
    hi = t + 2000.0
    # substitute u = t + s^2 to put the mass near t: integrate density(t + s^2) * 2s ds over s in [0, sqrt(hi - t)]
    smax = math.sqrt(hi - t)
    hs = smax / n
    tot = 0.0
    for i in range(n):
        s = (i + 0.5) * hs
        u = t + s * s
        tot += c * (1 + u * u / df) ** (-(df + 1) / 2) * 2 * s
    return tot * hs


def test_welch_against_hand_computation():
    a = [3.10, 3.25, 3.18, 3.30]          # e.g. a format's final val loss over 4 seeds
    b = [3.02, 3.05, 3.01]                # the baseline's over 3 seeds
    va, vb = _var(a) / len(a), _var(b) / len(b)
    t = (_mean(a) - _mean(b)) / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    p = 2 * _t_sf(abs(t), df)
    w = stats.welch(a, b)
    assert w["t"] == pytest.approx(t, rel=1e-12)
    assert w["df"] == pytest.approx(df, rel=1e-12)
    assert w["p"] == pytest.approx(p, rel=1e-4)
    assert 0.001 < w["p"] < 0.05                     # this example is a real difference
    assert w["diff"] == pytest.approx(_mean(a) - _mean(b))
    # the 95 % CI of the difference ends where the shifted difference has p = 0.05 exactly
    for bound in (w["diff_lo"], w["diff_hi"]):
        assert 2 * _t_sf(abs(w["diff"] - bound) / math.sqrt(va + vb), df) == pytest.approx(0.05, rel=1e-3)
    assert w["diff_lo"] < w["diff"] < w["diff_hi"]


def test_mean_ci_is_student_t():
    x = [1.0, 2.0, 4.0]
    m, h = stats.mean_ci(x)
    # t_{0.975, 2} = 4.302652729911275 (tables)
    assert m == pytest.approx(7 / 3) and h == pytest.approx(4.302652729911275 * math.sqrt(_var(x) / 3), rel=1e-9)
    assert math.isnan(stats.mean_ci([1.0])[1])


def test_hedges_g_hand_computed():
    a, b = [2.0, 4.0, 6.0], [1.0, 2.0, 3.0]
    sp = math.sqrt((2 * _var(a) + 2 * _var(b)) / 4)
    assert stats.hedges_g(a, b) == pytest.approx((4 - 2) / sp * (1 - 3 / (4 * 6 - 9)))
    assert stats.hedges_g(b, a) == pytest.approx(-stats.hedges_g(a, b))


def _frame(rng_seed=0):
    rng = np.random.default_rng(rng_seed)
    rows = []
    for seed in range(4):
        rows.append({"recipe": "bf16", "lr": 1e-3, "seed": seed, "final_val_loss": 3.0 + 0.01 * rng.standard_normal()})
        rows.append({"recipe": "fp8", "lr": 1e-3, "seed": seed, "final_val_loss": 3.5 + 0.01 * rng.standard_normal()})
        rows.append({"recipe": "e3m4", "lr": 1e-3, "seed": seed, "final_val_loss": 3.0 + 0.01 * rng.standard_normal()})
        rows.append({"recipe": "e2m1", "lr": 1e-3, "seed": seed,
                     "final_val_loss": math.nan if seed == 0 else 2.5 + 0.01 * rng.standard_normal()})
    return pd.DataFrame(rows)


def test_claims_table_verdicts():
    t = stats.claims_table(_frame(), "recipe", "bf16", by=["lr"]).set_index("recipe")
    assert set(t.index) == {"fp8", "e3m4", "e2m1"}
    assert t.loc["fp8", "verdict"] == "worse" and t.loc["fp8", "p"] < 1e-6 and t.loc["fp8", "hedges_g"] > 10
    assert t.loc["e2m1", "verdict"] == "better" and t.loc["e2m1", "n"] == 3 and t.loc["e2m1", "n_nonfinite"] == 1
    # same distribution as the baseline: a difference of pure noise must not be called a result
    assert t.loc["e3m4", "verdict"] == stats.NOISE
    assert (t.lr == 1e-3).all()
    up = stats.claims_table(_frame(), "recipe", "bf16", lower_is_better=False).set_index("recipe")
    assert up.loc["fp8", "verdict"] == "better"


def test_verdict_noise_when_cis_overlap_even_if_p_small():
    row = {"n": 3, "n_baseline": 3, "p": 0.01, "mean": 1.0, "ci95": 0.3, "mean_baseline": 1.5, "ci95_baseline": 0.3,
           "diff": -0.5}
    assert stats.verdict(row) == stats.NOISE
    assert stats.verdict({**row, "ci95": 0.1, "ci95_baseline": 0.1}) == "better"
    assert stats.verdict({**row, "ci95": 0.1, "ci95_baseline": 0.1, "p": 0.2}) == stats.NOISE
    assert stats.verdict({**row, "n": 1}).startswith("too few seeds")


def test_claims_table_names_missing_columns_and_baseline():
    with pytest.raises(ValueError, match=r"\['optimizer'\]"):
        stats.claims_table(_frame(), "optimizer", "adamw")
    with pytest.raises(ValueError, match="baseline recipe='bf8'.*levels"):
        stats.claims_table(_frame(), "recipe", "bf8")


def test_control_check_reuses_comparisons_rule():
    f = pd.DataFrame({"recipe": ["bf16"] * 3 + ["bf16"] * 3, "freeze_blocks": [False] * 3 + [True] * 3,
                      "seed": [0, 1, 2] * 2, "final_val_loss": [3.0, 3.1, 3.2, 3.31, 3.41, 3.51]})
    table, clear, sentence = stats.control_check(f, ["recipe", "freeze_blocks"], "bf16 False", "bf16 True")
    assert clear and list(table.index) == [0, 1, 2] and table.margin.tolist() == pytest.approx([0.31] * 3)
    f.loc[5, "final_val_loss"] = 3.4   # margin 0.2 < 3 sd = 0.3
    assert not stats.control_check(f, ["recipe", "freeze_blocks"], "bf16 False", "bf16 True")[1]


def test_gap_pct_rescales_the_welch_interval_by_the_baseline_mean():
    # baseline (4, 4.2, 4.4): mean 4.2; variant (4.4, 4.6, 4.8): diff 0.4 nats = 9.5238 % of 4.2
    f = pd.DataFrame({"v": ["hp"] * 3 + ["x"] * 3, "seed": [0, 1, 2] * 2,
                      "final_val_loss": [4.0, 4.2, 4.4, 4.4, 4.6, 4.8]})
    t = stats.gap_pct(stats.claims_table(f, "v", "hp")).iloc[0]
    half = 2.7764451051977987 * math.sqrt(2 * 0.04 / 3)   # Welch df = 4 for equal variances and n
    assert t.gap_pct == pytest.approx(100 * 0.4 / 4.2)
    assert t.gap_pct_lo == pytest.approx(100 * (0.4 - half) / 4.2) and t.gap_pct_hi == pytest.approx(100 * (0.4 + half) / 4.2)
