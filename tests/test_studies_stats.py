"""Tests for altgrad_lib.studies.stats: Welch's test against a hand computation (t, Welch–Satterthwaite df, p from the
t distribution's CDF by numerical integration), Student-t CIs and Hedges' g (the claims tables: test_studies_claims)."""
from __future__ import annotations

import math

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
