"""Tests for altgrad_lib.formats: registry, validation, grids/decode against torch, ml_dtypes and gfloat,
encode/decode round trips, ULP/stiffness and the printable tables.  Rounding lives in test_rounding.py."""
from __future__ import annotations

import math

import gfloat
import ml_dtypes
import numpy as np
import pytest
import torch
from gfloat import Domain, FormatInfo, RoundMode
from gfloat.formats import format_info_ocp_e8m0
from hypothesis import given, settings
from hypothesis import strategies as st

from altgrad_lib.formats import BUILTIN_FORMATS, FloatFormat, format_summary_table, get_format, stiffness

ALL = list(BUILTIN_FORMATS)
TORCH_REF = {"E4M3": torch.float8_e4m3fn, "E5M2": torch.float8_e5m2, "E4M3FNUZ": torch.float8_e4m3fnuz,
             "E5M2FNUZ": torch.float8_e5m2fnuz}
MLD_REF = {"E4M3": "float8_e4m3fn", "E5M2": "float8_e5m2", "E3M4": "float8_e3m4", "E4M3_IEEE": "float8_e4m3",
           "E4M3FNUZ": "float8_e4m3fnuz", "E5M2FNUZ": "float8_e5m2fnuz", "E4M3B11FNUZ": "float8_e4m3b11fnuz",
           "E8M0FNU": "float8_e8m0fnu", "E2M3": "float6_e2m3fn", "E3M2": "float6_e3m2fn", "E2M1": "float4_e2m1fn"}


# ------------------------------------------------------------------ helpers
def bits_equal(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Elementwise equality treating NaN == NaN and distinguishing -0 from +0."""
    a, b = a.double(), b.double()
    same = (a == b) & (torch.signbit(a) == torch.signbit(b))
    return same | (torch.isnan(a) & torch.isnan(b))


def assert_same(ours: torch.Tensor, ref: torch.Tensor, x: torch.Tensor, what: str) -> None:
    ok = bits_equal(ours, ref)
    if not bool(ok.all()):
        bad = (~ok).nonzero().flatten()[:8]
        rows = [(float(x.flatten()[i]), float(ours.flatten()[i]), float(ref.flatten()[i])) for i in bad]
        raise AssertionError(f"{what}: {int((~ok).sum())} mismatches of {ok.numel()}; (x, ours, ref): {rows}")


def all_bf16_as_f32() -> torch.Tensor:
    return torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(torch.bfloat16).float()


def probe_inputs(fmt: FloatFormat, n_random: int = 20000, seed: int = 0) -> torch.Tensor:
    """float32 inputs: all bf16 patterns, random values over the format's range, exact ties between grid
    neighbours and their f32 neighbours, values around max and the overflow threshold, specials."""
    g = torch.Generator().manual_seed(seed)
    v = fmt.values()
    lo, hi = math.log2(fmt.min_subnormal) - 3, math.log2(fmt.max) + 2
    rnd = torch.exp2(torch.rand(n_random, generator=g, dtype=torch.float64) * (hi - lo) + lo)
    rnd = rnd * torch.where(torch.rand(n_random, generator=g) < 0.5, -1.0, 1.0).double()
    top = torch.tensor([fmt.max, 2 * fmt.max, fmt.max * (1 + 2.0 ** -(fmt.mbits + 1))], dtype=torch.float64)
    mids = torch.cat([(v[1:] + v[:-1]) / 2, top, top * 1.0001])
    mids32 = mids.float()
    near = torch.cat([mids32, torch.nextafter(mids32, torch.tensor(math.inf)), torch.nextafter(mids32, torch.tensor(-math.inf))])
    specials = torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan, 1e-45, -1e-45, 3.4e38, -3.4e38])
    xs = torch.cat([all_bf16_as_f32(), rnd.float(), near, -near, v.float(), specials])
    return xs


def gfloat_info(fmt: FloatFormat) -> FormatInfo:
    """The same convention expressed as a gfloat FormatInfo (an independent implementation)."""
    nan_hi = {"ieee": 2**fmt.mbits - 1, "fn": 1, "fnuz": 0, "none": 0}[fmt.specials]
    return FormatInfo(fmt.name, fmt.bits, fmt.mbits + 1, bias=fmt.bias, is_signed=fmt.signed,
                      domain=Domain.Extended if fmt.specials == "ieee" else Domain.Finite,
                      has_nz=fmt.signed and fmt.specials != "fnuz", num_high_nans=nan_hi,
                      has_subnormals=fmt.subnormals, is_twos_complement=False)


def mld_round(x: torch.Tensor, name: str) -> torch.Tensor:
    dt = getattr(ml_dtypes, name)
    with np.errstate(invalid="ignore", over="ignore"):   # ml_dtypes warns when it produces NaN/inf
        return torch.from_numpy(np.asarray(x.numpy(), dtype=dt).astype(np.float32))


# ------------------------------------------------------------------ registry / validation
def test_lookup_aliases_and_case():
    assert get_format("e4m3") is get_format("E4M3FN") is get_format("float8_e4m3fn") is BUILTIN_FORMATS["E4M3"]
    assert get_format("float8_e4m3").name == "E4M3_IEEE"          # ml_dtypes' IEEE e4m3, not OCP
    assert get_format("Float6_E2M3FN").name == "E2M3"
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
    assert torch.equal(stiffness(torch.tensor([3.0]), "E4M3"), torch.tensor([0.25]))
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
