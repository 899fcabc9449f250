"""Tests for altgrad_lib.numerics.formats: registry, validation, grids/decode against torch, ml_dtypes and gfloat,
encode/decode round trips, ULP/stiffness and the printable tables.  Rounding lives in test_rounding.py."""
from __future__ import annotations

import math

import gfloat
import ml_dtypes
import numpy as np
import pytest
import torch
from gfloat.formats import format_info_ocp_e8m0

from altgrad_lib.numerics.formats import BUILTIN_FORMATS, FloatFormat, format_summary_table, get_format

from helpers import ALL, MLD_REF, TORCH_REF, assert_same, bits_equal, gfloat_info, mld_round, probe_inputs  # noqa: F401


# ------------------------------------------------------------------ registry / validation
def test_lookup_aliases_and_case():
    assert get_format("e4m3") is get_format("E4M3FN") is get_format("float8_e4m3fn") is BUILTIN_FORMATS["E4M3"]
    assert get_format("float8_e4m3").name == "E4M3_IEEE"          # ml_dtypes' IEEE e4m3, not OCP
    assert get_format("Float6_E2M3FN").name == "E2M3"
    with pytest.warns(UserWarning, match="'e8m0' resolves to E8M0FNU"):   # not a generic ExMy: said out loud
        assert get_format("e8m0").name == "E8M0FNU"
    g = get_format("E3M3")                                       # generic convention
    assert (g.bias, g.specials, g.subnormals, g.bits) == (3, "fn", True, 7)
    for name in ALL:
        f = get_format(name)
        assert get_format(f.short_str()) is f and get_format(f) is f


@pytest.mark.parametrize("bad", ["E9M9", "E0M0", "E4M4", "E8M1", "garbage", "E-1M3", ""])
def test_invalid_names_raise(bad):
    with pytest.raises(ValueError) as ei:
        get_format(bad)
    msg = str(ei.value)
    assert "E4M3" in msg and ("<= 8" in msg)


def test_dataclass_validation():
    with pytest.raises(ValueError, match="specials"):
        FloatFormat("X", 4, 3, 7, specials="weird")
    with pytest.raises(ValueError, match="<= 8"):
        FloatFormat("X", 5, 3, 15)
    with pytest.raises(ValueError, match="fnuz"):
        FloatFormat("X", 4, 3, 8, signed=False, specials="fnuz")
    with pytest.raises(ValueError, match="ieee"):
        FloatFormat("X", 7, 0, 63, specials="ieee")
    with pytest.raises(ValueError, match="no positive finite"):
        get_format("E1M0")
    with pytest.raises(Exception):
        BUILTIN_FORMATS["E4M3"].bias = 8                          # frozen
    # the smallest valid generic formats still work end to end
    e2m0 = get_format("E2M0")
    assert e2m0.values().tolist() == [-2.0, -1.0, 0.0, 1.0, 2.0]          # bias 1: 0, 2^0, 2^1; 3 = NaN
    assert e2m0.quantize(torch.tensor([0.7, 1.5, 3.0, -0.2, 0.5])).tolist() == [1.0, 2.0, 2.0, -0.0, 0.0]


# ------------------------------------------------------------------ grids against the references
@pytest.mark.parametrize("name", list(MLD_REF))
def test_decode_all_codes_matches_ml_dtypes(name):
    fmt = get_format(name)
    codes = torch.arange(2**fmt.bits, dtype=torch.uint8)
    ref = codes.numpy().view(getattr(ml_dtypes, MLD_REF[name])).astype(np.float32)
    assert_same(fmt.decode(codes), torch.from_numpy(ref), codes, f"{name} decode")
    fi = ml_dtypes.finfo(getattr(ml_dtypes, MLD_REF[name]))
    assert fmt.max == float(fi.max)
    assert fmt.min_normal == float(fi.smallest_normal)
    assert fmt.min_subnormal == float(fi.smallest_subnormal)


@pytest.mark.parametrize("name", list(TORCH_REF))
def test_decode_all_codes_matches_torch(name):
    fmt = get_format(name)
    codes = torch.arange(256, dtype=torch.uint8)
    assert_same(fmt.decode(codes), codes.view(TORCH_REF[name]).float(), codes, f"{name} decode")
    assert fmt.max == torch.finfo(TORCH_REF[name]).max


@pytest.mark.parametrize("name", ALL)
def test_decode_all_codes_matches_gfloat(name):
    fmt = get_format(name)
    fi = format_info_ocp_e8m0 if name == "E8M0FNU" else gfloat_info(fmt)
    ref = torch.tensor([gfloat.decode_float(fi, c).fval for c in range(2**fmt.bits)], dtype=torch.float64)
    codes = torch.arange(2**fmt.bits, dtype=torch.uint8)
    assert_same(fmt.decode(codes), ref, codes, f"{name} decode vs gfloat")
    assert fmt.max == fi.max


@pytest.mark.parametrize("name", ALL)
def test_values_encode_decode_roundtrip(name):
    fmt = get_format(name)
    codes = torch.arange(2**fmt.bits, dtype=torch.uint8)
    dec = fmt.decode(codes)
    fin = dec[torch.isfinite(dec)].double()
    v = fmt.values()
    assert torch.equal(v, torch.unique(fin)) and bool((v[1:] > v[:-1]).all())
    assert fmt.n_finite == v.numel()
    # every non-NaN code survives decode -> encode (including -0 and +-inf); NaN codes map to a NaN code
    enc = fmt.encode(dec)
    nan = torch.isnan(dec)
    assert torch.equal(enc[~nan], codes[~nan])
    if bool(nan.any()):
        assert bool(torch.isnan(fmt.decode(enc[nan])).all())


def test_generic_formats_documented_grids():
    e1m6 = get_format("E1M6")
    v = e1m6.values()
    assert torch.allclose(v[1:] - v[:-1], torch.full_like(v[1:], 1 / 32)) and e1m6.max == 3.9375
    e7m0 = get_format("E7M0")
    pos = e7m0.values()[e7m0.values() > 0]
    assert torch.equal(pos, torch.exp2(torch.arange(-62, 64, dtype=torch.float64)))
    e0m7 = get_format("E0M7")
    assert torch.equal(e0m7.values(), torch.arange(-126, 127, dtype=torch.float64) / 128)
    assert get_format("E6M1").max == 2.0**32 and get_format("E2M5").max == 7.75


# ------------------------------------------------------------------ ULP / stiffness
@pytest.mark.parametrize("name", ALL)
def test_ulp_matches_grid_neighbours(name):
    fmt = get_format(name)
    v = fmt.values()
    pos = v[v >= 0] if fmt.has_zero else v
    up = fmt.ulp(pos[:-1].float(), "up").double()
    assert torch.equal(up, pos[1:] - pos[:-1])
    down = fmt.ulp(pos[1:].float(), "down").double()
    assert torch.equal(down, pos[1:] - pos[:-1])
    mid = ((pos[1:] + pos[:-1]) / 2).float()                # strictly inside an interval both agree
    assert torch.equal(fmt.ulp(mid, "up").double(), pos[1:] - pos[:-1])
    assert torch.equal(fmt.ulp(-mid, "down").double(), pos[1:] - pos[:-1])


def test_ulp_against_ml_dtypes_nextafter_and_edges():
    fmt = get_format("E4M3")
    dt = ml_dtypes.float8_e4m3fn
    one = np.array(1.0, dtype=dt)
    assert float(np.nextafter(one, np.array(2.0, dtype=dt))) - 1.0 == float(fmt.ulp(torch.tensor([1.0]), "up"))
    assert 1.0 - float(np.nextafter(one, np.array(0.0, dtype=dt))) == float(fmt.ulp(torch.tensor([1.0]), "down"))
    e1m6 = get_format("E1M6")   # bias 0: every |w| < 2 is subnormal -> spacing 2^-5, not 2^(floor(log2|w|)-6)
    w = torch.tensor([1e-6, 0.01, 0.3, 1.0, 1.99, 0.0])
    assert torch.equal(e1m6.ulp(w), torch.full_like(w, 2.0**-5))
    assert float(fmt.ulp(torch.tensor([0.0]))) == fmt.min_subnormal
    assert float(fmt.ulp(torch.tensor([1e6]))) == 32.0 and float(fmt.ulp(torch.tensor([math.inf]))) == 32.0
    assert math.isnan(float(fmt.ulp(torch.tensor([math.nan]))))
    assert torch.equal(get_format("E4M3").ulp(torch.tensor([3.0])), torch.tensor([0.25]))
    with pytest.raises(ValueError, match="direction"):
        fmt.ulp(torch.ones(1), "sideways")


# ------------------------------------------------------------------ tables
def test_tables():
    for name in ALL:
        fmt = get_format(name)
        ct = fmt.convention_table()
        assert ct.loc["bias", "value"] == fmt.bias and ct.loc["specials", "value"] == fmt.specials
        gt = fmt.grid_table()
        assert len(gt) == 2**fmt.bits and set(gt["class"]) <= {"zero", "subnormal", "normal", "inf", "nan"}
        assert get_format(fmt.short_str()) is fmt
    summary = format_summary_table(["E4M3", "E5M2", "E7M0"])
    assert summary.loc["E4M3", "max"] == 448.0 and summary.loc["E7M0", "values_per_binade"] == 1


# ------------------------------------------------------------------ what the tables show
def test_tables_show_tiny_and_huge_values_exactly():
    # pandas prints a float in an object column with 6 decimals: 2^-127 became "0.0"; the oracle is ml_dtypes
    fi = ml_dtypes.finfo(ml_dtypes.float8_e8m0fnu)
    ct = get_format("E8M0FNU").convention_table()["value"]
    assert float(ct["min_normal"]) == float(fi.smallest_normal) == 2.0**-127
    assert float(ct["min_subnormal"]) == 2.0**-127 and float(ct["max"]) == float(fi.max)
    assert "0.0" not in ct.to_string().split()            # no value rendered as zero in the printed table


def test_fixed_point_format_has_no_normal_numbers():
    f = get_format("E0M7")
    assert not f.has_normals and f.min_normal > f.max       # 2^emin is only the subnormal threshold here
    assert f.convention_table().loc["min_normal", "value"] == "none"
    s = format_summary_table(["E0M7", "E4M3"])
    assert math.isnan(s.loc["E0M7", "min_normal"]) and s.loc["E0M7", "normal_binades"] == 0
    assert s.loc["E4M3", "min_normal"] == 2.0**-6
    assert all(get_format(n).has_normals for n in ALL if get_format(n).ebits > 0)


def test_aliases_are_shown_and_exmy_lookalikes_warn():
    ct = get_format("E8M0FNU").convention_table()
    assert "e8m0" in ct.loc["aliases", "value"].split(", ")
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")                       # canonical names and plain aliases stay silent
        for n in ("E8M0FNU", "e4m3", "float8_e4m3fn", "E3M4", "E2M3"):
            get_format(n)


def test_cached_tables_are_not_handed_out_for_writing():
    # encode/decode/values share cached tensors of the format's tables (formats._TENSORS); a caller writing to
    # values()' result must not change what the format encodes next.
    fmt = get_format("E4M3")
    x = torch.tensor([0.3, -1.7, 448.0])
    codes = fmt.encode(x)
    v = fmt.values()
    v.fill_(0.0)
    assert torch.equal(fmt.encode(x), codes)
    assert torch.equal(fmt.values(), torch.tensor(sorted(set(fmt.values().tolist())), dtype=torch.float64))
    assert float(fmt.values()[-1]) == 448.0
