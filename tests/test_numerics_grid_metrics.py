"""Tests for altgrad_lib.monitors.geometry against brute-force Python loops and ml_dtypes / numpy / scipy."""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
import scipy.stats
import torch

from altgrad_lib.numerics.formats import get_format
from altgrad_lib.numerics import grid_metrics as grid

E4M3 = get_format("E4M3")


def _weights(n: int = 400, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    w0 = torch.randn(n, generator=g) * 0.05
    w0[:5] = torch.tensor([0.0, 1e-9, -0.3, 500.0, -1e-3])
    upd = torch.randn(n, generator=g) * torch.where(torch.rand(n, generator=g) < 0.5, 1e-5, 5e-3)
    return w0, w0 + upd


def _py_ulp(v: float, fmt=E4M3) -> float:
    """ULP at v (the gap above |v|'s binade start) by hand: 2^(clamp(floor(log2|v|), emin, emax) - mbits)."""
    if v == 0:
        e = fmt.emin
    else:
        e = min(max(math.frexp(abs(v))[1] - 1, fmt.emin), fmt.emax)
    return 2.0 ** (e - fmt.mbits)


def _ml_codes(x: np.ndarray) -> np.ndarray:
    x = np.clip(x, -448, 448).astype(np.float32)      # our E4M3 saturates; ml_dtypes would give NaN
    return x.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)


S = 7.5   # a non-power-of-two scale: every function works in scaled units


def test_codes_match_ml_dtypes():
    w0, _ = _weights()
    assert np.array_equal(grid.codes(w0, E4M3, S).numpy(), _ml_codes(w0.numpy() * S))


def test_stall_rate_matches_a_python_loop():
    w0, w1 = _weights()
    # the same float32 products w·s as the library, then Python floats from there on
    a32, b32 = (w0 * torch.tensor(S)).tolist(), (w1 * torch.tensor(S)).tolist()
    expect = [abs(b - a) < _py_ulp(a) / 2 for a, b in zip(a32, b32)]
    mask = grid.stall_mask(w0, w1, E4M3, S)
    assert mask.tolist() == expect
    assert float(grid.stall_rate(w0, w1, E4M3, S)) == pytest.approx(sum(expect) / len(expect), abs=0)
    assert 0 < sum(expect) < len(expect)   # both kinds present, so the test can fail either way


def test_delta_code_and_bit_flips_match_a_python_loop():
    w0, w1 = _weights()
    s0, s1 = 7.5, 6.0
    vals = sorted({float(v) for v in E4M3.values().tolist()})
    c0, c1 = _ml_codes(w0.numpy() * np.float32(s0)), _ml_codes(w1.numpy() * np.float32(s1))
    v0 = c0.view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    v1 = c1.view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    expect = [vals.index(float(b) + 0.0) - vals.index(float(a) + 0.0) for a, b in zip(v0, v1)]
    dc = grid.delta_code(w0, w1, E4M3, s0, s1)
    assert dc.tolist() == expect
    hist = grid.delta_code_hist(dc, 2)
    assert hist.tolist() == [sum(d <= -2 for d in expect), expect.count(-1), expect.count(0), expect.count(1),
                             sum(d >= 2 for d in expect)]
    flips = grid.bit_flip_fractions(torch.from_numpy(c0), torch.from_numpy(c1), E4M3)
    brute = [sum((int(a) ^ int(b)) >> (7 - i) & 1 for a, b in zip(c0, c1)) / len(c0) for i in range(8)]
    assert flips.tolist() == pytest.approx(brute, abs=0)
    assert grid.bit_names(E4M3) == ["sign", "e3", "e2", "e1", "e0", "m2", "m1", "m0"]


def test_code_usage_entropy_and_capacity():
    w0, _ = _weights(2000)
    c = grid.codes(w0, E4M3, S)
    counts = grid.code_usage(c, E4M3)
    ref = np.bincount(_ml_codes(w0.numpy() * np.float32(S)), minlength=256)
    assert counts.tolist() == ref.tolist()
    assert float(grid.hist_entropy_bits(counts)) == pytest.approx(scipy.stats.entropy(ref, base=2), rel=1e-12)
    finite = int(np.isfinite(np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32)).sum())
    assert finite == 254
    assert float(grid.capacity_use(counts, E4M3)) == pytest.approx((ref > 0).sum() / finite, abs=0)


def test_misalignment_stiffness_and_log2_hist():
    w0, _ = _weights()
    ws = (w0 * torch.tensor(S)).tolist()
    q = _ml_codes(np.array(ws, dtype=np.float32)).view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    expect = [abs(a - b) / _py_ulp(a) for a, b in zip(ws, q)]
    got = grid.misalignment(w0, E4M3, S)
    assert got.tolist() == pytest.approx(expect, rel=1e-6, abs=1e-7)
    assert max(expect) <= 0.5 + 1e-6 or max(abs(a) for a in ws) > 448   # saturated values may exceed ½
    st = grid.weight_ulp(w0, E4M3, S)
    assert st.tolist() == pytest.approx([_py_ulp(a) / S for a in ws], rel=1e-6)
    v = torch.tensor([0.0, 1e-30, 0.3, 0.5, 0.7, 3.0, 1e9, -1.0, float("nan")])
    h = grid.log2_hist(v, -4, 2)
    pos = [x for x in v.tolist() if x > 0 and math.isfinite(x)]
    ref = np.bincount([min(max(math.floor(math.log2(x)), -4), 2) + 4 for x in pos], minlength=7)
    assert h.tolist() == ref.tolist()
    assert float(grid.hist_entropy_bits(h)) == pytest.approx(scipy.stats.entropy(ref, base=2), rel=1e-12)


def test_grad_stiffness_corr_matches_numpy():
    w0, _ = _weights()
    g = torch.randn(w0.shape, generator=torch.Generator().manual_seed(3)) * w0.abs()   # |g| grows with |w|
    g[10] = 0.0
    keep = g != 0
    a = np.log2(np.abs(g[keep].double().numpy()))
    b = np.log2(grid.weight_ulp(w0, E4M3, S)[keep].double().numpy())
    assert float(grid.grad_stiffness_corr(g, w0, E4M3, S)) == pytest.approx(np.corrcoef(a, b)[0, 1], rel=1e-9)


def test_delta_code_from_codes_equals_delta_code():
    w0, w1 = _weights()
    c0, c1 = grid.codes(w0, E4M3, 3.0), grid.codes(w1, E4M3, 2.5)
    assert torch.equal(grid.delta_code_from_codes(c0, c1, E4M3), grid.delta_code(w0, w1, E4M3, 3.0, 2.5))


def test_value_usage_and_unmoved_counts_match_a_python_loop():
    w0, w1 = _weights()
    vals = sorted({float(v) for v in E4M3.values().tolist()})
    q0 = _ml_codes(w0.numpy() * np.float32(S)).view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    q1 = _ml_codes(w1.numpy() * np.float32(S)).view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    usage = grid.value_usage(w0, E4M3, S)
    assert usage.tolist() == [sum(1 for a in q0 if float(a) + 0.0 == v) for v in vals]
    assert float(grid.used_fraction(usage, len(vals))) == len({float(a) + 0.0 for a in q0}) / len(vals)
    asked = torch.rand(len(w0), generator=torch.Generator().manual_seed(4)) < 0.7
    n, stuck = grid.unmoved_counts(torch.from_numpy(q0), torch.from_numpy(q1), asked)
    brute = [i for i in range(len(q0)) if bool(asked[i])]
    assert int(n) == len(brute) and int(stuck) == sum(1 for i in brute if q0[i] == q1[i])
    assert 0 < int(stuck) < int(n)


@pytest.mark.parametrize("name, dtype", [("E4M3", ml_dtypes.float8_e4m3fn), ("E5M2", ml_dtypes.float8_e5m2)])
def test_scaled_log2_hist_matches_numpy_over_the_formats_window(name, dtype):
    """floor(log2 |x·s|) counted by numpy on the float32 product, clamped to ml_dtypes' window (smallest subnormal
    .. max) widened by WINDOW_MARGIN binades; zeros and non-finite values not counted."""
    fi = ml_dtypes.finfo(dtype)
    lo = math.floor(math.log2(float(fi.smallest_subnormal))) - grid.WINDOW_MARGIN
    hi = math.floor(math.log2(float(fi.max))) + grid.WINDOW_MARGIN
    assert grid.window_bins(get_format(name)) == (lo, hi)
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(4000) * np.exp2(rng.uniform(-30, 30, 4000))).astype(np.float32)
    x[:7] = [0.0, -0.0, np.inf, -np.inf, np.nan, 2.0 ** -40, 2.0 ** 40]
    s = np.float32(3.7)
    xs = np.abs(x * s)                                     # float32, as the quantizer's working precision
    keep = np.isfinite(xs) & (xs > 0)
    k = np.clip(np.floor(np.log2(xs[keep].astype(np.float64))), lo, hi).astype(int)
    ref = np.bincount(k - lo, minlength=hi - lo + 1)
    got = grid.scaled_log2_hist(torch.from_numpy(x), torch.tensor(s), get_format(name))
    assert got.tolist() == ref.tolist() and got.sum() == len(x) - 5
    assert ref[0] > 0 and ref[-1] > 0                      # both end bins collect what lies beyond
