"""Tests for altgrad_lib.numerics.anatomy against closed forms and the grid itself: binade counts, unit roundoff,
ULP = neighbour difference, Bernoulli mean/variance of stochastic rounding (4σ over all probe points).
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from altgrad_lib.numerics import anatomy
from altgrad_lib.numerics.formats import BUILTIN_FORMATS, get_format

# Built-ins plus arbitrary ExMy that have no YAML and no reference dtype (the "-p fmt E2M2" path).
NOTEBOOK_FORMATS = ["E4M3", "E5M2", "E2M2", "E3M3"]


@pytest.mark.parametrize("name", NOTEBOOK_FORMATS)
def test_binade_counts(name):
    f = get_format(name)
    b = anatomy.binade_counts(f)
    assert b.n_values.sum() == len(anatomy.positive_values(f))
    normal = b[b.region == "normal"]
    assert (normal.n_values.iloc[:-1] == 2**f.mbits).all()  # each normal binade holds 2^m values ...
    assert 2**f.mbits - 2 <= normal.n_values.iloc[-1] <= 2**f.mbits  # ... but NaN/inf codes may take top ones
    assert (b[b.region == "subnormal"].n_values < 2**f.mbits).all()


@pytest.mark.parametrize("name", NOTEBOOK_FORMATS)
def test_rounding_error_bounds(name):
    f = get_format(name)
    df = anatomy.rounding_error(f, n=4000, seed=1)
    normal = df[df.region == "normal"]
    assert normal.rel_err_rne.max() <= 2.0 ** -(f.mbits + 1) * (1 + 1e-6)  # unit roundoff
    assert normal.rel_err_sr.max() < 2.0 ** -f.mbits * (1 + 1e-6)         # SR: below one relative ulp
    assert normal.rel_err_sr.mean() > normal.rel_err_rne.mean()          # SR pays variance for unbiasedness


@pytest.mark.parametrize("name", NOTEBOOK_FORMATS)
def test_ulp_matches_grid_differences(name):
    f = get_format(name)
    df = anatomy.ulp_at_grid(f)
    v = df.w.to_numpy()
    np.testing.assert_allclose(df.ulp_up.to_numpy()[:-1], np.diff(v), rtol=0)
    np.testing.assert_allclose(df.ulp_down.to_numpy()[1:], np.diff(v), rtol=0)
    # at a binade boundary above min_normal the spacing toward zero is half the spacing away from zero
    k = f.emin + 1
    row = df[df.w == 2.0**k].iloc[0]
    assert row.ulp_up == 2 * row.ulp_down == 2.0 ** (k - f.mbits)
    # at min_normal both sides have the subnormal spacing
    row = df[df.w == f.min_normal].iloc[0]
    assert row.ulp_up == row.ulp_down == f.min_subnormal


@pytest.mark.parametrize("name", NOTEBOOK_FORMATS)
def test_sr_bias_variance_monte_carlo(name):
    df = anatomy.sr_bias_variance(name, n_samples=4000, seed=3)
    assert len(df) >= 8
    assert df.bias_z.abs().max() < 4.0, df  # 4σ over ~16 points: false alarm rate ~1e-3
    assert df.var_ratio.between(0.8, 1.25).all(), df


def test_sr_detects_biased_rounding(monkeypatch):
    """If 'stochastic' were secretly RNE the bias test fails (the test has teeth)."""
    f = get_format("E4M3")
    orig = type(f).quantize

    def rne_only(self, x, rounding="nearest", **kw):
        return orig(self, x, rounding="nearest", saturate=kw.get("saturate", True))

    monkeypatch.setattr(type(f), "quantize", rne_only)
    df = anatomy.sr_bias_variance(f, n_samples=1000, seed=0)
    assert df.bias_z.abs().max() > 10


@pytest.mark.parametrize("name", NOTEBOOK_FORMATS)
def test_format_overview(name):
    ov = anatomy.format_overview(name)["value"]
    f = get_format(name)
    assert float(ov["max"]) == f.max and ov["finite codes"] == f.n_finite   # shown as exact repr strings


def test_format_overview_never_shows_a_tiny_value_as_zero_or_a_missing_normal():
    ov = anatomy.format_overview("E8M0FNU")["value"]
    assert float(ov["min_normal"]) == float(ov["min_subnormal"]) == 2.0**-127 and "0.0" not in ov.to_string().split()
    e0m7 = anatomy.format_overview("E0M7")["value"]
    assert e0m7["min_normal"] == "none" and float(e0m7["min_subnormal"]) == 2.0**-7



@pytest.mark.parametrize("name", list(BUILTIN_FORMATS) + ["E1M1", "E3M3", "E6M0"])
def test_notebook01_pipeline_runs_for_every_format(name):
    """Every analysis call notebook 01 makes, at small sizes, for every built-in and a few ad-hoc ExMy."""
    f = get_format(name)
    assert anatomy.binade_counts(f).n_values.sum() == len(anatomy.positive_values(f))
    err = anatomy.rounding_error(f, n=300)
    assert err.rel_err_rne.notna().all()
    ulp = anatomy.ulp_at_grid(f)
    assert (ulp.ulp_up > 0).all() and (ulp.ulp_down > 0).all()
    sr = anatomy.sr_bias_variance(f, n_samples=64)
    assert len(sr) >= 4 and sr.x.between(sr.lo, sr.hi).all()
    assert anatomy.format_overview(f).loc["name", "value"] == f.name


@pytest.mark.parametrize("name", ["E4M3", "E5M2", "E3M4", "E2M5"])
def test_expected_sqnr_matches_monte_carlo_rounding(name):
    """Monte Carlo: 400k values log-uniform over whole normal binades below max, rounded by ml_dtypes'/torch's
    cast of the format (torch.float8 for E4M3/E5M2) or our RNE (E3M4, E2M5), SQNR measured directly; the formula
    is its expectation, so the two agree within 0.1 dB (the Monte-Carlo sd here is ~0.01 dB)."""
    f = get_format(name)
    lo = math.ceil(math.log2(f.min_normal))
    n_binades = min(3, math.floor(math.log2(f.max)) - lo)   # whole binades below max (E2M5's top one ends at 7.75)
    u = torch.rand(400_000, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    x = torch.exp2(u * n_binades + lo)
    if name in ("E4M3", "E5M2"):
        q = x.float().to(torch.float8_e4m3fn if name == "E4M3" else torch.float8_e5m2).double()
    else:
        q = f.quantize(x.float()).double()
    measured = 10 * math.log10(float((x * x).sum() / ((x - q) ** 2).sum()))
    assert anatomy.expected_sqnr_db(f) == pytest.approx(measured, abs=0.1)
