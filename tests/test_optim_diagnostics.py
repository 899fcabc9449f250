"""optim/diagnostics.py against brute-force Python loops on small tensors."""
from __future__ import annotations

import math
from collections import Counter

import pytest
import torch
from helpers import grid_ordinal_bruteforce

from altgrad_lib.numerics.formats import get_format
from altgrad_lib.optim.diagnostics import (StepStats, code_entropy_bits, code_usage, delta_code_hist, stall_rate)
from altgrad_lib.numerics.grid import grid_scale

F = get_format("E4M3")


def _pair(seed=0, n=300):
    gen = torch.Generator().manual_seed(seed)
    old = F.quantize(torch.randn(n, generator=gen))
    delta = torch.randn(n, generator=gen) * 0.1 * (torch.rand(n, generator=gen) < 0.8)   # some zero updates
    new = F.quantize(old + delta)
    return old, new, delta


def test_stall_rate_bruteforce():
    old, new, delta = _pair()
    asked = [i for i in range(len(old)) if float(delta[i]) != 0]
    stalled = [i for i in asked if float(new[i]) == float(old[i])]
    assert stall_rate(old, new, delta) == len(stalled) / len(asked)
    assert math.isnan(stall_rate(old, new, torch.zeros_like(delta)))


def test_delta_code_hist_bruteforce():
    old, new, _ = _pair(1)
    k = 3
    d = [b - a for a, b in zip(grid_ordinal_bruteforce(old.tolist(), F), grid_ordinal_bruteforce(new.tolist(), F))]
    c = Counter(max(-k, min(k, x)) for x in d)
    assert delta_code_hist(old, new, F, max_codes=k).tolist() == [c.get(i, 0) for i in range(-k, k + 1)]
    s = grid_scale(5)                                  # scaled grid: the same codes
    assert torch.equal(delta_code_hist(old / 32, new / 32, F, s, k), delta_code_hist(old, new, F, max_codes=k))


def test_code_usage_and_entropy_bruteforce():
    q = F.quantize(torch.randn(500, generator=torch.Generator().manual_seed(2)))
    counts = code_usage(q, F)
    c = Counter(q.tolist())
    n_pos = sum(1 for v in F._finite if v > 0)
    pos = sorted(v for v in F._finite if v > 0)
    grid = [-v for v in reversed(pos)] + [0.0] + pos
    assert len(counts) == 2 * n_pos + 1 and counts.tolist() == [c.get(v, 0) for v in grid]
    p = [v / 500 for v in c.values()]
    h = -sum(x * math.log2(x) for x in p)
    out = code_entropy_bits(counts, F)
    assert math.isclose(out["entropy_bits"], h, rel_tol=1e-12)
    assert math.isclose(out["entropy_frac"], h / math.log2(F.n_finite), rel_tol=1e-12)
    assert out["capacity_use"] == len(c) / len(grid)          # values used / finite values


def test_step_stats_accumulate_and_reset():
    st = StepStats(max_codes=4)
    pairs = [_pair(i) for i in range(3)]
    for old, new, delta in pairs:
        st.record(old, new, delta, F, torch.tensor(1.0))
    asked = sum(int((d != 0).sum()) for _, _, d in pairs)
    stalled = sum(int(((n == o) & (d != 0)).sum()) for o, n, d in pairs)
    hist = sum(delta_code_hist(o, n, F, max_codes=4) for o, n, _ in pairs).double()
    out = st.pop()
    assert out["optim/stall_rate"] == stalled / asked
    assert math.isclose(out["optim/frac_moved"], 1 - float(hist[4] / hist.sum()))
    assert math.isclose(out["optim/frac_dcode_1"], float((hist[3] + hist[5]) / hist.sum()))
    assert st.pop() == {}


def test_oscillation_ratio_against_a_hand_computation():
    """Two coordinates over 4 steps (3 deltas).  Coordinate 0 dithers around the boundary 0.5 of a unit grid:
    latent 0.49, 0.51, 0.49, 0.52 -> grid 0, 1, 0, 1: sum|ΔQ| = 3, sum|Δw| = 0.02 + 0.02 + 0.03 = 0.07.
    Coordinate 1 walks 1.0, 1.4, 1.8, 2.2 -> grid 1, 1, 2, 2: sum|ΔQ| = 1, sum|Δw| = 1.2.
    Ratio = (3 + 1) / (0.07 + 1.2) = 4 / 1.27."""
    from altgrad_lib.optim.diagnostics import StepStats, oscillation_ratio

    ws = [torch.tensor([0.49, 1.0]), torch.tensor([0.51, 1.4]), torch.tensor([0.49, 1.8]), torch.tensor([0.52, 2.2])]
    qs = [torch.tensor([0.0, 1.0]), torch.tensor([1.0, 1.0]), torch.tensor([0.0, 2.0]), torch.tensor([1.0, 2.0])]
    assert oscillation_ratio(qs, ws) == pytest.approx(4 / 1.27, rel=1e-6)
    assert oscillation_ratio(qs[:2], ws[:2]) == pytest.approx(1 / 0.42, rel=1e-6)      # (1 + 0) / (0.02 + 0.4)
    # StepStats: windows of 3 measured steps; the ratio is reported once its window closes
    st = StepStats(osc_window=3)
    fmt = get_format("E4M3")
    for t in range(3):
        st.record(qs[t], qs[t + 1], ws[t + 1] - ws[t], fmt, torch.tensor(1.0))
        if t < 2:
            st.end_step()
            assert "optim/osc_ratio" not in st.pop()
    st.end_step()
    out = st.pop()
    assert out["optim/osc_ratio"] == pytest.approx(4 / 1.27, rel=1e-6)
    assert out["optim/update_visibility"] == pytest.approx(0.5)           # the last step: 0 -> 1 moved, 2 -> 2 did not


def test_update_visibility_is_one_minus_the_fraction_bit_identical():
    """PULSE's S1 on a step where 3 of 8 stored values change: visibility 3/8 (stall rate over asked coordinates:
    6 asked, 3 of them unmoved -> 1/2)."""
    from altgrad_lib.optim.diagnostics import StepStats

    q0 = torch.tensor([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0])
    q1 = torch.tensor([0.0, 1.5, 2.0, 3.0, 4.5, 5.0, 6.5, 7.0])
    delta = torch.tensor([0.1, 0.6, 0.1, 0.1, 0.6, 0.0, 0.6, 0.0])
    st = StepStats()
    st.record(q0, q1, delta, get_format("E4M3"), torch.tensor(1.0))
    out = st.pop()
    assert out["optim/update_visibility"] == pytest.approx(3 / 8) and out["optim/stall_rate"] == pytest.approx(1 / 2)
