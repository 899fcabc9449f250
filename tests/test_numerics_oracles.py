"""Tests for altgrad_lib.numerics.oracles: our rounding agrees with torch float8 dtypes, ml_dtypes and gfloat on every
finite bf16 pattern, and the agreement count can fail (truncation, zero sign).
"""
from __future__ import annotations

import math

import pytest
import torch

from altgrad_lib.numerics import oracles
from altgrad_lib.numerics.formats import BUILTIN_FORMATS, get_format


@pytest.fixture(scope="module")
def oracle_table():
    return oracles.oracle_agreement()  # every built-in format, ~5 s


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
    x = oracles.all_bf16_values()
    x = x[x > 0]
    for ref in oracles.matching_references(f):
        theirs, ours = ref.cast(x), f.quantize(x, saturate=False)
        bad = ~((theirs == ours) | (theirs.isnan() & ours.isnan()))
        xb = x[bad].double()
        mant, _ = torch.frexp(xb)
        assert bad.sum() > 0
        assert ((mant == 0.75) | (xb < 2.0**-126)).all(), (ref.label, xb[(mant != 0.75) & (xb >= 2.0**-126)])
    import gfloat

    g = torch.from_numpy(gfloat.round_ndarray(oracles.gfloat_format_info(f), x.double().numpy(), sat=True))
    ours = f.quantize(x, saturate=True).double()
    bad = ~((g == ours) | (g.isnan() & ours.isnan()))
    assert (x[bad] < 2.0**-127).all()


def test_oracle_counting_detects_wrong_rounding():
    """The comparison can fail: truncation instead of RNE disagrees with torch on many patterns."""
    f = get_format("E4M3")
    x = oracles.all_bf16_values()
    ref = oracles.Reference("torch", "float8_e4m3fn", 4, 3, 7, "fn")
    wrong = f.quantize(x, rounding="toward_zero", saturate=True)
    assert oracles.count_mismatches(wrong, ref.cast(x)) > 1000
    assert oracles.count_mismatches(torch.tensor([0.0]), torch.tensor([-0.0])) == 1
    assert oracles.count_mismatches(torch.tensor([0.0]), torch.tensor([-0.0]), check_zero_sign=False) == 0
    assert oracles.count_mismatches(torch.tensor([math.nan]), torch.tensor([math.nan])) == 0


def test_matching_references_respect_convention():
    labels = {r.label for r in oracles.matching_references("E4M3")}
    assert {"torch.float8_e4m3fn", "ml_dtypes.float8_e4m3fn"} <= labels
    assert not any("fnuz" in lab for lab in labels)  # same bits, different convention
    assert oracles.matching_references("E3M3") == []


@pytest.mark.parametrize("name", ["E2M2", "E3M3"])
def test_arbitrary_exmy_agrees_with_gfloat(name):
    table = oracles.oracle_agreement([name])
    assert list(table.reference) == ["gfloat.round_ndarray"]
    assert table.mismatches.sum() == 0


def test_the_table_names_the_version_of_each_library_that_computed_a_row(oracle_table):
    """A new release of a reference can change a row (ml_dtypes 0.7.0 rounds E8M0FNU's ties otherwise): the row says
    which release computed it."""
    from importlib import metadata

    libs = oracle_table.reference.str.split(".").str[0]
    assert set(libs) == {"torch", "ml_dtypes", "gfloat"}
    for lib, version in zip(libs, oracle_table.version):
        assert version == metadata.version(lib).split("+", 1)[0]
