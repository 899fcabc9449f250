"""Tests for altgrad_lib.numerics.rounding (through FloatFormat.quantize): bit-exact RNE / toward-zero against torch
float8 casts, ml_dtypes and gfloat; stochastic rounding (Monte Carlo 3 sigma, seeding, bit-exact vs gfloat given
the same random bits); hypothesis properties; golden edge values; torch.compile == eager."""
from __future__ import annotations

import math

import gfloat
import numpy as np
import pytest
import torch
from gfloat import RoundMode
from gfloat.formats import format_info_ocp_e8m0
from hypothesis import given, settings
from hypothesis import strategies as st

from altgrad_lib.numerics.formats import get_format
from altgrad_lib.numerics.rounding import _bits_supported, _split_supported, quantize_tensor
from helpers import ALL, MLD_REF, TORCH_REF, assert_same, gfloat_info, mld_round, probe_inputs


# ------------------------------------------------------------------ RNE bit-exactness vs oracles
@pytest.mark.parametrize("name", list(TORCH_REF))
def test_rne_matches_torch_cast(name):
    """The generic bit-manipulation kernel (not the eager fast path) against torch's own casts."""
    fmt, dt = get_format(name), TORCH_REF[name]
    x = probe_inputs(fmt)
    # In range only: torch's out-of-range behaviour changed between versions (2.11's e4m3fn cast gives NaN
    # for |x| >= 464, 2.13 saturates), so overflow, inf and NaN are checked against the spec below instead.
    x = x[x.abs() <= fmt.max]
    ref = x.to(dt).float()
    for impl in ("float", "bits"):
        ours = quantize_tensor(x, fmt.kernel, "nearest", False, allow_native=False, impl=impl)
        assert_same(ours, ref, x, f"{name} vs torch ({impl})")
    assert torch.equal(fmt.encode(x, saturate=False), x.to(dt).view(torch.uint8)), "codes differ from torch"


def _overflow_spec(fmt, x: float, saturate: bool) -> float:
    """What a format's conventions say for NaN, +-inf and |x| far beyond max (module docstring of rounding)."""
    if math.isnan(x) or (not fmt.signed and x < 0):
        return math.nan
    sign = math.copysign(1.0, x)
    if fmt.specials == "ieee":
        return x if math.isinf(x) else (sign * fmt.max if saturate else sign * math.inf)
    if saturate or fmt.specials == "none":    # no inf code: saturate (formats with no NaN code always do)
        return sign * fmt.max
    return math.nan                           # fn / fnuz without saturation: overflow and inf -> NaN


@pytest.mark.parametrize("impl", ["auto", "float", "bits", "split"])
@pytest.mark.parametrize("saturate", [True, False])
@pytest.mark.parametrize("name", ALL)
def test_overflow_inf_nan_follow_the_spec_not_a_cast(name, saturate, impl):
    """Every format and path (including the eager torch-cast fast path) against the written conventions."""
    fmt = get_format(name)
    xs = [math.nan, math.inf, -math.inf, 2 * fmt.max, -2 * fmt.max, 500.0, -500.0, 1e30, -1e30]
    xs = [v for v in xs if abs(v) > fmt.max * (1 + 2.0 ** -fmt.mbits) or not math.isfinite(v)]
    x = torch.tensor(xs, dtype=torch.float32)
    got = _impl_quantize(fmt, x, impl, saturate=saturate)
    want = torch.tensor([_overflow_spec(fmt, v, saturate) for v in xs], dtype=torch.float32)
    assert torch.equal(torch.isnan(got), torch.isnan(want)), (name, xs, got.tolist(), want.tolist())
    nn = ~torch.isnan(want)
    assert torch.equal(got[nn], want[nn]), (name, xs, got.tolist(), want.tolist())


@pytest.mark.parametrize("name", list(TORCH_REF))
@pytest.mark.parametrize("sat", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_native_fast_path_equals_generic_kernel(name, sat, dtype):
    fmt = get_format(name)
    x = probe_inputs(fmt, n_random=5000).to(dtype)
    generic = quantize_tensor(x, fmt.kernel, "nearest", sat, allow_native=False)
    assert_same(fmt.quantize(x, saturate=sat), generic, x, f"{name} sat={sat} {dtype} native vs generic")


def _impl_quantize(fmt, x, impl, rounding="nearest", saturate=True):
    """impl "auto" = the public path (eager native/float); "float"/"bits" = one generic kernel, forced."""
    if impl == "auto":
        return fmt.quantize(x, rounding=rounding, saturate=saturate)
    if impl == "bits" and not _bits_supported(x.dtype, fmt.kernel):
        pytest.skip(f"impl='bits' does not support {fmt.name}")
    if impl == "split" and not (rounding == "nearest" and saturate and _split_supported(x.dtype, fmt.kernel)):
        pytest.skip(f"impl='split' does not support {fmt.name} {rounding} saturate={saturate} {x.dtype}")
    return quantize_tensor(x, fmt.kernel, rounding, saturate, allow_native=False, impl=impl)


@pytest.mark.parametrize("impl", ["auto", "bits"])
@pytest.mark.parametrize("name", list(MLD_REF))
def test_rne_matches_ml_dtypes(name, impl):
    fmt = get_format(name)
    x = probe_inputs(fmt)
    ours, ref = _impl_quantize(fmt, x, impl, saturate=False), mld_round(x, MLD_REF[name])
    keep = ~torch.isnan(x)      # "none" formats: ml_dtypes returns -0.0 for NaN, we keep NaN (documented)
    if name == "E8M0FNU":
        # ml_dtypes' e8m0 does not tie to even (0.75 -> 1.0); we round ties to the even code as gfloat does.
        mant = torch.frexp(x.double().abs())[0]
        tie = mant == 0.75
        assert int(tie.sum()) > 100
        assert_same(ours[tie], get_format(name).quantize(x[tie].double(), saturate=False).float(), x[tie], "e8m0 ties")
        keep &= ~tie
        # float32-subnormal inputs in (2^-127, 2^-126): ml_dtypes returns 2^-126 even just above 2^-127;
        # the nearest value (ours) is checked exactly here instead.
        low = (x.abs() < 2.0**-126) & (x > 0)
        expect = torch.where(x[low].double() <= 1.5 * 2.0**-127, 2.0**-127, 2.0**-126)
        assert torch.equal(ours[low].double(), expect)
        keep &= ~low
    assert_same(ours[keep], ref[keep], x[keep], f"{name} vs ml_dtypes")


@pytest.mark.parametrize("impl", ["auto", "float", "bits"])
@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("mode", ["nearest", "toward_zero"])
def test_rne_rtz_match_gfloat(name, mode, impl):
    fmt = get_format(name)
    fi = format_info_ocp_e8m0 if name == "E8M0FNU" else gfloat_info(fmt)
    x = probe_inputs(fmt, n_random=5000).double()
    x = x[torch.isfinite(x)]
    if not fmt.signed:
        x = x[x > 0]
        # below min gfloat's e8m0 returns values off the grid; the only candidate is min (ours)
        assert bool((fmt.quantize(x[x < fmt.min_normal], rounding=mode) == fmt.min_normal).all())
        x = x[x >= fmt.min_normal]
    rnd = RoundMode.TiesToEven if mode == "nearest" else RoundMode.TowardZero
    sat = fmt.specials == "none"   # gfloat raises on overflow for formats without NaN/inf unless saturating
    ref = torch.from_numpy(gfloat.round_ndarray(fi, x.numpy(), rnd, sat=sat))
    assert_same(_impl_quantize(fmt, x, impl, mode, sat), ref, x, f"{name} {mode} vs gfloat (float64, {impl})")
    ref_sat = torch.from_numpy(gfloat.round_ndarray(fi, x.numpy(), rnd, sat=True))
    assert_same(_impl_quantize(fmt, x.float(), impl, mode, True).double(), ref_sat, x, f"{name} sat (float32, {impl})")


SPLIT = [n for n in ALL if _split_supported(torch.float32, get_format(n).kernel)]


def test_split_covers_the_formats_weights_are_stored_in():
    assert {"E4M3", "E5M2", "E3M4", "E2M1", "E2M3", "E3M2", "E4M3_IEEE"} <= set(SPLIT)
    assert "E4M3FNUZ" not in SPLIT and "E7M0" not in SPLIT                  # no -0 code; M = 0 ties


@pytest.mark.parametrize("name", SPLIT)
def test_split_rne_matches_gfloat_saturated(name):
    """The float-only kernel (saturating nearest, float32) against gfloat, eager."""
    fmt = get_format(name)
    x = probe_inputs(fmt, n_random=5000)
    x = x[torch.isfinite(x)]
    ref = torch.from_numpy(gfloat.round_ndarray(gfloat_info(fmt), x.double().numpy(), RoundMode.TiesToEven, sat=True))
    assert_same(_impl_quantize(fmt, x, "split").double(), ref, x, f"{name} split vs gfloat")


def _tie_neighbourhoods(fmt) -> torch.Tensor:
    """Every fp32 value of the binade below min_normal (all mantissas, both signs), and for every fp32
    exponent the patterns at, one below and one above each rounding tie of the format, plus 0, inf, NaN."""
    p = fmt.kernel
    drop = 23 - p.mbits
    e_min = p.emin + 127
    full = [(torch.arange(1 << 23, dtype=torch.int32) | (e << 23)) for e in (e_min - 1,) if 0 <= e < 255]
    k = torch.arange(1 << p.mbits, dtype=torch.int32) << drop
    half = 1 << (drop - 1)
    ties = torch.cat([k + half + d for d in (-1, 0, 1)])
    near = [(ties | (e << 23)) for e in range(255)]
    bits = torch.cat(full + near + [torch.tensor([0, 0x7F800000, 0x7FC00000], dtype=torch.int32)])
    x = bits.view(torch.float32)
    return torch.cat([x, -x])


def test_split_is_cpu_only():
    """Triton contracts a*K - a into an FMA by default, which breaks the split; non-CPU tensors are refused
    (meta stands in for CUDA here: the check runs before any arithmetic)."""
    fmt = get_format("E4M3")
    with pytest.raises(ValueError, match="CPU tensors.*device meta"):
        quantize_tensor(torch.zeros(4, device="meta"), fmt.kernel, "nearest", True, allow_native=False, impl="split")


@pytest.mark.parametrize("name", SPLIT)
def test_split_compiled_equals_the_float_kernel_at_every_tie(name):
    """Compiled (what the optimizer's graphs run; inductor must not contract or reassociate the subtractions)
    against the eager float kernel at every tie of every binade, and on whole binades around min_normal."""
    fmt = get_format(name)
    x = _tie_neighbourhoods(fmt)
    ref = quantize_tensor(x, fmt.kernel, "nearest", True, allow_native=False, impl="float")
    try:
        got = torch.compile(lambda t: quantize_tensor(t, fmt.kernel, "nearest", True, allow_native=False))(x)
    except Exception as e:                                      # e.g. no C++ compiler for inductor
        pytest.skip(f"torch.compile is unavailable here: {type(e).__name__}: {e}")
    assert_same(got, ref, x, f"{name} split compiled vs float eager")
    assert_same(quantize_tensor(x, fmt.kernel, "nearest", True, impl="split"), ref, x, f"{name} split eager")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("name", ["E4M3", "E5M2", "E1M6", "E2M1"])
def test_input_dtypes(name, dtype):
    fmt = get_format(name)
    x = probe_inputs(fmt, n_random=2000).to(dtype)
    q = fmt.quantize(x)
    assert q.dtype == dtype and q.shape == x.shape
    if dtype != torch.float64:   # widening is exact, so the result equals the float32 path
        assert_same(q, fmt.quantize(x.float()).to(dtype), x, f"{name} {dtype}")


def test_float64_is_exact_not_double_rounded():
    fmt = get_format("E4M3")
    # 1.0625 is the tie between 1.0 and 1.125: a float64 input just above it must round up even though it
    # rounds to the tie in float32 (ml_dtypes' float64 cast gets this wrong; gfloat agrees with us).
    x = torch.tensor([1.0625 + 2**-40, 1.0625 - 2**-40, 1.0625], dtype=torch.float64)
    assert fmt.quantize(x).tolist() == [1.125, 1.0, 1.0]


# ------------------------------------------------------------------ golden edge values
GOLDEN = [  # (format, x, saturate, expected)
    ("E4M3", 485.0, True, 448.0), ("E4M3", 485.0, False, math.nan), ("E4M3", 400.0, True, 384.0),
    ("E4M3", 464.0, False, 448.0), ("E4M3", 464.5, False, math.nan), ("E4M3", 0.0019, True, 2.0**-9),
    ("E4M3", 2.0**-10, True, 0.0), ("E4M3", -(2.0**-10) * 1.01, True, -(2.0**-9)), ("E4M3", math.inf, True, 448.0),
    ("E4M3", -math.inf, False, math.nan), ("E4M3", 17.0, True, 16.0), ("E4M3", 19.0, True, 20.0),
    ("E5M2", 61440.0, False, math.inf), ("E5M2", 61439.0, False, 57344.0), ("E5M2", 61440.0, True, 57344.0),
    ("E5M2", math.inf, True, math.inf), ("E5M2", 2.0**-17, True, 0.0), ("E5M2", 3 * 2.0**-17, True, 2.0**-15),
    ("E3M4", 15.75, False, math.inf), ("E3M4", 15.74, False, 15.5),
    ("E4M3FNUZ", -(2.0**-12), True, 0.0), ("E4M3FNUZ", 248.0, False, math.nan), ("E4M3FNUZ", 248.0, True, 240.0),
    ("E7M0", 1.5, True, 2.0), ("E7M0", 0.75, True, 0.5), ("E7M0", 3.0, True, 2.0), ("E7M0", 6.0, True, 8.0),
    ("E7M0", 2.0**-63, True, 0.0), ("E7M0", 1.5 * 2.0**-63, True, 2.0**-62), ("E7M0", 1.5 * 2.0**63, True, 2.0**63),
    ("E7M0", 1.5 * 2.0**63, False, 2.0**63), ("E7M0", 1.6 * 2.0**63, False, math.nan), ("E7M0", -1.4, True, -1.0),
    ("E8M0FNU", 0.75, True, 0.5), ("E8M0FNU", 1.5, True, 2.0), ("E8M0FNU", 0.0, True, math.nan),
    ("E8M0FNU", -1.0, True, math.nan), ("E8M0FNU", 1e-45, True, 2.0**-127),
    ("E1M6", 1 / 64, True, 0.0), ("E1M6", 3 / 64, True, 2 / 32), ("E1M6", 3.953125, False, 3.9375),
    ("E1M6", 3.954, False, math.nan), ("E1M6", 3.96875, False, math.nan), ("E1M6", 3.97, True, 3.9375),
    ("E0M7", 0.5 / 128, True, 0.0), ("E0M7", 1.5 / 128, True, 2 / 128), ("E0M7", 0.99, False, math.nan),
    ("E0M7", 0.99, True, 126 / 128),
    ("E2M1", 2.5, True, 2.0), ("E2M1", 5.0, True, 4.0), ("E2M1", 7.0, False, 6.0), ("E2M1", 0.25, True, 0.0),
    ("E2M1", 0.75, True, 1.0), ("E2M1", math.inf, False, 6.0),
    ("E6M1", 2.0**33, True, 2.0**32), ("E6M1", 1.25, True, 1.0), ("E6M1", 1.75, True, 2.0),
    ("E3M4", 2.0**-7, True, 0.0), ("E3M4", 0.01, True, 2.0**-6), ("E3M4", math.inf, True, math.inf),
    ("E4M3_IEEE", 248.0, False, math.inf), ("E4M3_IEEE", 248.0, True, 240.0), ("E4M3_IEEE", 247.0, False, 240.0),
    ("E5M2FNUZ", 2.0**-18, True, 0.0), ("E5M2FNUZ", -(2.0**-18), True, 0.0),
    ("E5M2FNUZ", 3 * 2.0**-18, True, 2.0**-16),
    ("E4M3B11FNUZ", 31.0, False, math.nan), ("E4M3B11FNUZ", 31.0, True, 30.0),
    ("E4M3B11FNUZ", 2.0**-13, True, 2.0**-13),
    ("E2M3", 0.0625, True, 0.0), ("E2M3", 7.75, False, 7.5), ("E2M3", -7.0 - 1 / 16, True, -7.0),
    ("E3M2", 30.0, False, 28.0), ("E3M2", 2.0**-5, True, 0.0), ("E3M2", 3 * 2.0**-5, True, 2.0**-3),
    ("E2M5", 7.8125, False, 7.75), ("E2M5", 7.82, False, math.nan), ("E2M5", 1 / 64, True, 0.0),
]


@pytest.mark.parametrize("name,x,sat,expected", GOLDEN)
def test_golden(name, x, sat, expected):
    q = get_format(name).quantize(torch.tensor([x], dtype=torch.float32), saturate=sat).item()
    assert (math.isnan(q) and math.isnan(expected)) or \
        (q == expected and math.copysign(1, q) == math.copysign(1, expected)), (name, x, q)


def test_layout_and_autograd():
    fmt = get_format("E4M3")
    base = torch.randn(64, 48, generator=torch.Generator().manual_seed(0), requires_grad=True)
    x = base.t()[3:40:2]                                      # non-contiguous view with an offset
    q = fmt.quantize(x)
    assert q.shape == x.shape and not q.requires_grad       # quantize is not differentiable (STE lives in quant.py)
    assert torch.equal(q, fmt.quantize(x.detach().contiguous()))
    assert torch.equal(x, base.t()[3:40:2])                  # input untouched


def test_specials_and_signed_zero():
    x = torch.tensor([-0.0, math.nan, -math.nan, -1e-30])
    assert torch.signbit(get_format("E4M3").quantize(x)[[0, 3]]).all()          # -0 kept
    q = get_format("E4M3FNUZ").quantize(x)
    assert not torch.signbit(q[[0, 3]]).any()                                    # fnuz: no -0
    for name in ALL:
        assert torch.isnan(get_format(name).quantize(x)[1:3]).all()              # NaN stays NaN everywhere


# ------------------------------------------------------------------ stochastic rounding
@pytest.mark.parametrize("name", ALL)
def test_sr_unbiased_monte_carlo(name):
    fmt = get_format(name)
    v = fmt.values()
    pos = v[v > 0]
    # a subnormal/smallest interval, a middle one, one just below max, and a negative one
    idx = [0, len(pos) // 2, len(pos) - 2]
    g = torch.Generator().manual_seed(1234)
    n = 20000
    for i in idx:
        lo, hi = float(pos[i]), float(pos[i + 1])
        for frac in (0.3, 0.9):
            x0 = lo + frac * (hi - lo)
            for sgn in ((1.0, -1.0) if fmt.signed else (1.0,)):
                x = torch.full((n,), sgn * x0, dtype=torch.float32)
                q = fmt.quantize(x, rounding="stochastic", generator=g).double()
                assert set(q.abs().unique().tolist()) <= {lo, hi}, (name, x0)
                sigma = (hi - lo) * math.sqrt(frac * (1 - frac) / n)
                x0_32 = float(torch.tensor(x0, dtype=torch.float32))
                assert abs(float(q.mean()) - sgn * x0_32) < 3 * sigma + 1e-300, (name, x0)


def test_sr_reproducible_and_seeded():
    fmt = get_format("E4M3")
    x = torch.randn(4096, generator=torch.Generator().manual_seed(0))
    a = fmt.quantize(x, "stochastic", generator=torch.Generator().manual_seed(7))
    b = fmt.quantize(x, "stochastic", generator=torch.Generator().manual_seed(7))
    c = fmt.quantize(x, "stochastic", generator=torch.Generator().manual_seed(8))
    assert torch.equal(a.view(torch.int32), b.view(torch.int32)) and not torch.equal(a, c)


@pytest.mark.parametrize("name", ["E4M3", "E5M2", "E1M6", "E7M0", "E2M1", "E4M3FNUZ", "E8M0FNU", "E0M7"])
@pytest.mark.parametrize("k", [1, 3, 10, 23])
def test_sr_matches_gfloat_given_same_bits(name, k):
    fmt = get_format(name)
    fi = gfloat_info(fmt) if name != "E8M0FNU" else format_info_ocp_e8m0
    x = probe_inputs(fmt, n_random=4000)[65536:]          # skip the bf16 sweep to stay fast
    x = x[torch.isfinite(x) & (x.abs() <= fmt.max)]
    if not fmt.signed:
        x = x[x >= fmt.min_normal]
    r = torch.randint(0, 2**k, x.shape, generator=torch.Generator().manual_seed(k), dtype=torch.int32)
    ours = fmt.quantize_with_bits(x, r, sr_bits=k, saturate=True)
    ref = gfloat.round_ndarray(fi, x.double().numpy(), RoundMode.Stochastic, sat=True,
                               srbits=r.numpy().astype(np.int64), srnumbits=k)
    assert_same(ours, torch.from_numpy(ref), x, f"{name} SR k={k} vs gfloat")


@pytest.mark.parametrize("name", ["E4M3", "E5M2", "E2M1"])
@pytest.mark.parametrize("k", [24, 31, 32, 40, 62])
def test_sr_with_more_bits_than_fp32_matches_gfloat_in_the_normal_range(name, k):
    """Optimizer storage draws up to 62 counter_rng bits (int64); the fp32 kernel used to wrap them to int32 (biased
    for k >= 32).  In the normal range the discarded fraction has at most 23 bits, so gfloat's k-bit rule is exact
    with any k: ours must equal it bit for bit (the subnormal range keeps 23 bits, as the default k)."""
    fmt = get_format(name)
    x = probe_inputs(fmt, n_random=4000)[65536:]
    x = x[torch.isfinite(x) & (x.abs() <= fmt.max) & (x.abs() >= fmt.min_normal)]
    g = torch.Generator().manual_seed(k)
    r = (torch.randint(0, 2**31, x.shape, generator=g, dtype=torch.int64) << 31
         | torch.randint(0, 2**31, x.shape, generator=g, dtype=torch.int64)) >> (62 - k)
    ours = fmt.quantize_with_bits(x, r, sr_bits=k, saturate=True)
    ref = gfloat.round_ndarray(gfloat_info(fmt), x.double().numpy(), RoundMode.Stochastic, sat=True,
                               srbits=r.numpy(), srnumbits=k)
    assert_same(ours, torch.from_numpy(ref), x, f"{name} SR k={k} vs gfloat")


def test_sr_bits_behaviour():
    fmt = get_format("E4M3")
    g = torch.Generator().manual_seed(0)
    # 1.0 + 0.2 ulp: with 1 random bit the fraction RNEs to 0 -> always down; 0.3 ulp -> p=1/2; 0.8 ulp -> always up
    ulp = 0.125
    for frac, expect in ((0.2, 0.0), (0.3, 0.5), (0.8, 1.0)):
        x = torch.full((20000,), 1.0 + frac * ulp)
        p_up = float((fmt.quantize(x, "stochastic", generator=g, sr_bits=1) > 1.0).double().mean())
        assert abs(p_up - expect) < 0.02, (frac, p_up)
    with pytest.raises(ValueError, match="sr_bits"):
        fmt.quantize(torch.ones(3), "stochastic", sr_bits=0)


# ------------------------------------------------------------------ properties (hypothesis)
f32s = st.floats(width=32, allow_nan=False, allow_infinity=False)


@settings(max_examples=80, deadline=None)
@given(name=st.sampled_from(ALL), xs=st.lists(f32s, min_size=1, max_size=64), impl=st.sampled_from(["auto", "bits"]))
def test_properties(name, xs, impl):
    fmt = get_format(name)
    x = torch.tensor(xs, dtype=torch.float32)
    if not fmt.signed:
        x = x.abs() + 1e-30
    if impl == "bits" and not _bits_supported(x.dtype, fmt.kernel):
        impl = "auto"
    q = _impl_quantize(fmt, x, impl)
    assert torch.equal(fmt.quantize(q), q)                                          # idempotent
    assert bool(torch.isin(q.double(), fmt.values()).all())                          # on the grid
    xs_sorted = torch.sort(x).values
    qs = fmt.quantize(xs_sorted).double()
    assert bool((qs[1:] >= qs[:-1]).all())                                           # monotone
    inr = x.abs() <= fmt.max
    err = (q.double() - x.double()).abs()[inr]
    half = 0.5 * torch.maximum(fmt.ulp(x, "up"), fmt.ulp(x, "down")).double()[inr]
    assert bool((err <= half).all())                                                 # |error| <= ulp/2


@settings(max_examples=30, deadline=None)
@given(name=st.sampled_from(ALL), xs=st.lists(f32s, min_size=1, max_size=32),
       mode=st.sampled_from(["stochastic", "toward_zero"]))
def test_properties_other_modes(name, xs, mode):
    fmt = get_format(name)
    x = torch.tensor(xs, dtype=torch.float32)
    if not fmt.signed:
        x = x.abs() + 1e-30
    q = fmt.quantize(x, rounding=mode, generator=torch.Generator().manual_seed(0)).double()
    assert bool(torch.isin(q, fmt.values()).all())
    lo = fmt.quantize(x, rounding="toward_zero").double()
    if mode == "stochastic":   # SR lands on one of the two neighbours: q == RTZ or one step beyond it
        inr = (x.abs() < fmt.max)
        step = fmt.ulp(lo.float(), "up").double()
        assert bool(((q == lo) | ((q - lo).abs() - step).abs().le(0))[inr].all())
    else:
        # toward zero never grows |x|; a format without zero (e8m0fnu) has its smallest value as the only
        # candidate below it, which is then the result
        tiny = fmt.values().abs().min()
        below = x.double().abs() < tiny
        assert bool((q.abs() <= x.double().abs())[~below].all())
        assert bool((q[below] == tiny).all()) and (bool(below.any()) <= (not fmt.has_zero))


# ------------------------------------------------------------------ torch.compile
@pytest.mark.slow
def test_default_compile_of_several_formats_in_one_process():
    """torch.compile with default arguments (automatic dynamic) once per format, no reset in between: the
    second format used to crash (a float constant became a SymFloat and reached struct.pack)."""
    torch._dynamo.reset()
    x = probe_inputs(get_format("E4M3"), n_random=500)
    for name in ("E4M3", "E5M2", "E3M4", "E1M6", "E7M0", "E2M1"):
        fmt = get_format(name)
        got = torch.compile(lambda t, fmt=fmt: fmt.quantize(t))(x)
        assert_same(got, fmt.quantize(x), x, f"{name} compiled with defaults")


def test_compile_matches_eager_bitwise():
    torch._dynamo.config.recompile_limit = 64
    x = probe_inputs(get_format("E4M3"), n_random=2000)
    for name, sat, mode in (("E4M3", True, "nearest"), ("E5M2", False, "nearest"), ("E7M0", False, "nearest"),
                            ("E1M6", True, "toward_zero")):
        fmt = get_format(name)
        fn = torch.compile(lambda t, fmt=fmt, sat=sat, mode=mode: fmt.quantize(t, rounding=mode, saturate=sat),
                           dynamic=False)
        eager, comp = fmt.quantize(x, rounding=mode, saturate=sat), fn(x)
        assert torch.isnan(comp).sum() == torch.isnan(eager).sum() > 0
        ok = ~torch.isnan(eager)
        assert torch.equal(eager.view(torch.int32)[ok], comp.view(torch.int32)[ok]), name
    # stochastic with caller-supplied bits compiles and matches eager too
    fmt = get_format("E4M3")
    r = torch.randint(0, 2**23, x.shape, dtype=torch.int32, generator=torch.Generator().manual_seed(0))
    fn = torch.compile(lambda t, r: fmt.quantize_with_bits(t, r), dynamic=False)
    assert_same(fn(x, r), fmt.quantize_with_bits(x, r), x, "compiled SR")
    # ... and with a torch.Generator: the compiled graph draws the same bits as eager (no graph break)
    fn = torch.compile(lambda t, g: fmt.quantize(t, "stochastic", generator=g), dynamic=False)
    eager = fmt.quantize(x, "stochastic", generator=torch.Generator().manual_seed(5))
    assert_same(fn(x, torch.Generator().manual_seed(5)), eager, x, "compiled SR with generator")
