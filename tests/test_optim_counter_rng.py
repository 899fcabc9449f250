"""optim/counter_rng.py: the counter-based SR bits are uniform, serially uncorrelated, deterministic, and a bulk
draw equals consecutive smaller draws (what lets base.py draw once per flat group)."""
from __future__ import annotations

import math

import pytest
import torch
from scipy import stats

from altgrad_lib.optim.counter_rng import hash_bits, seed_keys

N = 1 << 17


def _bits(seed=0, offset=0, n=N, k=23):
    return hash_bits(torch.tensor(offset, dtype=torch.int64), n, seed_keys(seed), k)


def test_every_bit_is_fair_and_top_byte_is_uniform():
    x = _bits()
    assert int(x.min()) >= 0 and int(x.max()) < 2**23
    sigma = math.sqrt(N) / 2
    for b in range(23):                                     # 23 bits at 4.5 sigma: false alarm ~ 1.6e-4
        ones = int(((x >> b) & 1).sum())
        assert abs(ones - N / 2) < 4.5 * sigma, (b, ones)
    counts = torch.bincount((x >> 15).long(), minlength=256).numpy()
    assert stats.chisquare(counts).pvalue > 1e-4


def test_no_serial_correlation_within_or_across_draws():
    x = _bits(n=2 * N).double() / 2**23
    a, b = x[:N], x[N:]                                     # a draw and the next one (the next step)
    for u, v in ((a[:-1], a[1:]), (a, b), (a[:-2], a[2:])):
        r = float(torch.corrcoef(torch.stack([u, v]))[0, 1])
        assert abs(r) < 4.5 / math.sqrt(u.numel()), r


def test_bulk_draw_equals_consecutive_draws_and_is_deterministic():
    full = _bits(seed=3, offset=1000, n=5000)
    parts = torch.cat([_bits(seed=3, offset=1000, n=1200), _bits(seed=3, offset=2200, n=3800)])
    assert torch.equal(full, parts)
    assert torch.equal(full, _bits(seed=3, offset=1000, n=5000))
    assert not torch.equal(full, _bits(seed=4, offset=1000, n=5000))
    hi = _bits(offset=2**33, n=5000)                        # offsets past 2^32 use the high word
    assert not torch.equal(hi, _bits(offset=0, n=5000))


def test_wide_draws_and_k_validation():
    x = _bits(n=N, k=52)
    assert int(x.min()) >= 0 and int(x.max()) < 2**52
    assert abs(float(x.double().mean()) / 2**52 - 0.5) < 4.5 * math.sqrt(1 / 12 / N)
    ones = int(((x >> 40) & 1).sum())                       # a bit from the second word
    assert abs(ones - N / 2) < 4.5 * math.sqrt(N) / 2
    with pytest.raises(ValueError, match="k=0"):
        _bits(k=0)
