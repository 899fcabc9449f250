"""optim/stats.py against brute-force Python loops on small tensors."""
from __future__ import annotations

import math
from collections import Counter

import torch
from helpers import grid_ordinal_bruteforce

from altgrad_lib.numerics.formats import get_format
from altgrad_lib.optim.stats import (StepStats, code_entropy_bits, code_usage, delta_code_hist, stall_rate)
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
