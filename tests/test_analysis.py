"""Tests for altgrad_lib.analysis: notebook numbers checked against oracles and closed forms.

Oracles: torch float8 dtypes, ml_dtypes and gfloat (rounding), the grid itself (ULP = neighbour
difference), Bernoulli mean/variance (stochastic rounding, 4σ bound over all probe points), and an
analytic signal-to-noise ratio (SQNR). Runtime budget: < 30 s on 2 cores.
"""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from altgrad_lib import analysis
from altgrad_lib.formats import BUILTIN_FORMATS, get_format

# Built-ins plus arbitrary ExMy that have no YAML and no reference dtype (the "-p fmt E2M2" path).
NOTEBOOK_FORMATS = ["E4M3", "E5M2", "E2M2", "E3M3"]


# ------------------------------------------------------------------------------------------ oracles

@pytest.fixture(scope="module")
def oracle_table():
    return analysis.oracle_agreement()  # every built-in format, ~5 s


@pytest.mark.parametrize("name", ["E4M3", "E5M2"])
def test_oracle_agreement_zero_mismatches_vs_torch_and_ml_dtypes(oracle_table, name):
    table = oracle_table[oracle_table.format == name]
    refs = set(table.reference)
    assert any(r.startswith("torch.") for r in refs), refs
    assert any(r.startswith("ml_dtypes.") for r in refs), refs
    assert "gfloat.round_ndarray" in refs
    assert (table.n_inputs == 65280).all()
    assert table.mismatches.sum() == 0, table


def test_oracle_agreement_all_builtins(oracle_table):
    """Zero mismatches for every shared convention; E8M0FNU differs only where its conventions differ."""
    assert set(oracle_table.format) == {get_format(n).name for n in BUILTIN_FORMATS}
    exact = oracle_table[oracle_table.format != "E8M0FNU"]
    assert exact.mismatches.sum() == 0, exact[exact.mismatches > 0]
    assert len(exact) >= 2 * len(BUILTIN_FORMATS) - 8  # torch/ml_dtypes rows exist, not only gfloat


def test_e8m0_mismatches_are_the_documented_conventions():
    """torch/ml_dtypes tie 1.5*2^k away from zero (we: even code) and round f32 subnormals differently;
    gfloat does not clamp underflow to 2^-127. Nothing else may differ."""
    f = get_format("E8M0FNU")
    x = analysis.all_bf16_values()
    x = x[x > 0]
    for ref in analysis.matching_references(f):
        theirs, ours = ref.cast(x), f.quantize(x, saturate=False)
        bad = ~((theirs == ours) | (theirs.isnan() & ours.isnan()))
        xb = x[bad].double()
        mant, _ = torch.frexp(xb)
        assert bad.sum() > 0
        assert ((mant == 0.75) | (xb < 2.0**-126)).all(), (ref.label, xb[(mant != 0.75) & (xb >= 2.0**-126)])
    import gfloat

    g = torch.from_numpy(gfloat.round_ndarray(analysis.gfloat_format_info(f), x.double().numpy(), sat=True))
    ours = f.quantize(x, saturate=True).double()
    bad = ~((g == ours) | (g.isnan() & ours.isnan()))
    assert (x[bad] < 2.0**-127).all()


def test_oracle_counting_detects_wrong_rounding():
    """The comparison can fail: truncation instead of RNE disagrees with torch on many patterns."""
    f = get_format("E4M3")
    x = analysis.all_bf16_values()
    ref = analysis.Reference("torch", "float8_e4m3fn", 4, 3, 7, "fn")
    wrong = f.quantize(x, rounding="toward_zero", saturate=True)
    assert analysis.count_mismatches(wrong, ref.cast(x)) > 1000
    assert analysis.count_mismatches(torch.tensor([0.0]), torch.tensor([-0.0])) == 1
    assert analysis.count_mismatches(torch.tensor([0.0]), torch.tensor([-0.0]), check_zero_sign=False) == 0
    assert analysis.count_mismatches(torch.tensor([math.nan]), torch.tensor([math.nan])) == 0


def test_matching_references_respect_convention():
    labels = {r.label for r in analysis.matching_references("E4M3")}
    assert {"torch.float8_e4m3fn", "ml_dtypes.float8_e4m3fn"} <= labels
    assert not any("fnuz" in lab for lab in labels)  # same bits, different convention
    assert analysis.matching_references("E3M3") == []


@pytest.mark.parametrize("name", ["E2M2", "E3M3"])
def test_arbitrary_exmy_agrees_with_gfloat(name):
    table = analysis.oracle_agreement([name])
    assert list(table.reference) == ["gfloat.round_ndarray"]
    assert table.mismatches.sum() == 0


# ------------------------------------------------------------------------------------------ anatomy

@pytest.mark.parametrize("name", NOTEBOOK_FORMATS)
def test_binade_counts(name):
    f = get_format(name)
    b = analysis.binade_counts(f)
    assert b.n_values.sum() == len(analysis.positive_values(f))
    normal = b[b.region == "normal"]
    assert (normal.n_values.iloc[:-1] == 2**f.mbits).all()  # each normal binade holds 2^m values ...
    assert 2**f.mbits - 2 <= normal.n_values.iloc[-1] <= 2**f.mbits  # ... but NaN/inf codes may take top ones
    assert (b[b.region == "subnormal"].n_values < 2**f.mbits).all()


@pytest.mark.parametrize("name", NOTEBOOK_FORMATS)
def test_rounding_error_bounds(name):
    f = get_format(name)
    df = analysis.rounding_error(f, n=4000, seed=1)
    normal = df[df.region == "normal"]
    assert normal.rel_err_rne.max() <= 2.0 ** -(f.mbits + 1) * (1 + 1e-6)  # unit roundoff
    assert normal.rel_err_sr.max() < 2.0 ** -f.mbits * (1 + 1e-6)         # SR: below one relative ulp
    assert normal.rel_err_sr.mean() > normal.rel_err_rne.mean()          # SR pays variance for unbiasedness


@pytest.mark.parametrize("name", NOTEBOOK_FORMATS)
def test_ulp_matches_grid_differences(name):
    f = get_format(name)
    df = analysis.ulp_at_grid(f)
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
    df = analysis.sr_bias_variance(name, n_samples=4000, seed=3)
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
    df = analysis.sr_bias_variance(f, n_samples=1000, seed=0)
    assert df.bias_z.abs().max() > 10


@pytest.mark.parametrize("name", NOTEBOOK_FORMATS)
def test_format_overview(name):
    ov = analysis.format_overview(name)["value"]
    f = get_format(name)
    assert float(ov["max"]) == f.max and ov["finite codes"] == f.n_finite   # shown as exact repr strings


def test_format_overview_never_shows_a_tiny_value_as_zero_or_a_missing_normal():
    ov = analysis.format_overview("E8M0FNU")["value"]
    assert float(ov["min_normal"]) == float(ov["min_subnormal"]) == 2.0**-127 and "0.0" not in ov.to_string().split()
    e0m7 = analysis.format_overview("E0M7")["value"]
    assert e0m7["min_normal"] == "none" and float(e0m7["min_subnormal"]) == 2.0**-7


# ------------------------------------------------------------------------------------------ SQNR

def test_sqnr_known_signal_plus_noise():
    g = torch.Generator().manual_seed(0)
    s = torch.randn(1_000_000, generator=g)
    n = 0.01 * torch.randn(1_000_000, generator=g)
    assert analysis.sqnr_db(s, s + n) == pytest.approx(40.0, abs=0.05)
    assert analysis.sqnr_db(s, s) == math.inf
    assert analysis.sqnr_db(s, 0.5 * s) == pytest.approx(20 * math.log10(2), abs=1e-9)


class _TinyLM(torch.nn.Module):
    """Two Linears and a loss, the (logits, loss) interface layer_sqnr expects."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.up = torch.nn.Linear(16, 32)
        self.down = torch.nn.Linear(32, 8)

    def forward(self, x, y):
        logits = self.down(torch.relu(self.up(x)))
        return logits, torch.nn.functional.cross_entropy(logits, y)


def test_layer_sqnr_identity_and_quantized_copy():
    model = _TinyLM()
    x, y = torch.randn(64, 16, requires_grad=True), torch.randint(0, 8, (64,))  # grad wrt x -> dX of layer 1
    same = analysis.layer_sqnr(model, _TinyLM(), x, y)
    assert list(same.layer) == ["up", "down"]
    assert np.isinf(same[["out_sqnr_db", "grad_in_sqnr_db", "grad_w_sqnr_db"]].to_numpy()).all()

    def to_e4m3(m, policy):  # weight-only fake quantization in place: a stand-in for surgery
        with torch.no_grad():
            for lin in (m.up, m.down):
                s = get_format("E4M3").max / lin.weight.abs().max()
                lin.weight.copy_(get_format("E4M3").quantize(lin.weight * s) / s)

    q = analysis.quantized_copy_sqnr(model, None, x, y, convert=to_e4m3)
    assert np.isfinite(q.out_sqnr_db).all()
    assert q.out_sqnr_db.between(15, 45).all(), q  # E4M3 (3 mantissa bits) gives ~25-30 dB


# ------------------------------------------------------------------------------------------ runs

def _fake_run(losses: list[float], name: str) -> SimpleNamespace:
    rows = []
    for step, v in enumerate(losses):
        rows += [(step, "train/loss", v + 0.1), (step, "val/loss", v), (step, "tokens_per_s", 1000.0)]
    return SimpleNamespace(dir=name, metrics=pd.DataFrame(rows, columns=["step", "name", "value"]),
                           diverged=False)


def test_run_summary_gap_and_loss_table():
    runs = {"bf16": _fake_run([3.0, 2.0], "a"), "fp8": _fake_run([3.0, 2.2], "b")}
    s = analysis.run_summary(runs, baseline="bf16").set_index("run")
    assert s.loc["fp8", "val_gap_pct"] == pytest.approx(10.0)
    assert s.loc["bf16", "val_ppl"] == pytest.approx(math.exp(2.0))
    lt = analysis.loss_table(runs)
    assert set(lt.split) == {"train", "val"} and len(lt) == 8


def test_provenance_banner_mentions_versions_and_seed():
    text = analysis.provenance_banner({"seed": 7, "fmt": "E4M3"})
    assert "torch" in text and "seed 7" in text and "git" in text and "fmt=E4M3" in text
    assert analysis.params_hash({"a": 1, "b": 2}) == analysis.params_hash({"b": 2, "a": 1})


@pytest.mark.parametrize("name", list(BUILTIN_FORMATS) + ["E1M1", "E3M3", "E6M0"])
def test_notebook01_pipeline_runs_for_every_format(name):
    """Every analysis call notebook 01 makes, at small sizes, for every built-in and a few ad-hoc ExMy."""
    f = get_format(name)
    assert analysis.binade_counts(f).n_values.sum() == len(analysis.positive_values(f))
    err = analysis.rounding_error(f, n=300)
    assert err.rel_err_rne.notna().all()
    ulp = analysis.ulp_at_grid(f)
    assert (ulp.ulp_up > 0).all() and (ulp.ulp_down > 0).all()
    sr = analysis.sr_bias_variance(f, n_samples=64)
    assert len(sr) >= 4 and sr.x.between(sr.lo, sr.hi).all()
    assert analysis.format_overview(f).loc["name", "value"] == f.name
