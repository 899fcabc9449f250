"""numerics/counter_rng.py: the counter-based SR bits are uniform, serially uncorrelated, deterministic, and a bulk
draw equals consecutive smaller draws (what lets base.py draw once per flat group)."""
from __future__ import annotations

import math

import pytest
import torch
from scipy import stats

from altgrad_lib.numerics.counter_rng import hash_bits, seed_keys

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


@pytest.mark.parametrize("k, x0", [(1, 1.0625), (23, 1.03), (24, 1.03), (31, 1.03), (32, 1.03), (40, 1.03),
                                   (62, 1.03)])
def test_grid_sr_storage_is_unbiased_at_every_accepted_sr_bits(k, x0):
    """optim.sr_bits accepts 1..62 (SR_BITS_MAX); storage.write(grid_sr) rounds with these bits.  Monte Carlo: the
    mean of the stored values is x0 within 3 sigma (sigma of a two-point distribution).  Before the fix the fp32
    kernel wrapped k >= 32 bits to int32: 1.03 onto E4M3 gave mean 0.984 at k = 32 and 1.0 every time at k = 40.
    k = 1 keeps gfloat's rule (the fraction first rounded to 1 bit), so its input sits half an ULP above 1."""
    from altgrad_lib.choices import SR_BITS_MAX
    from altgrad_lib.numerics.formats import get_format
    from altgrad_lib.optim.storage import write

    assert SR_BITS_MAX == 62 and k <= SR_BITS_MAX
    fmt, n = get_format("E4M3"), N
    lo, hi = 1.0, 1.125                                      # E4M3's neighbours of x0
    x = torch.full((n,), x0)
    p = torch.empty_like(x)
    write(p, x, "grid_sr", fmt, torch.tensor(1.0), rbits=_bits(seed=3, n=n, k=k), sr_bits=k)
    assert set(p.unique().tolist()) <= {lo, hi}
    frac = (float(torch.tensor(x0)) - lo) / (hi - lo)
    sigma = (hi - lo) * math.sqrt(frac * (1 - frac) / n)
    assert abs(float(p.double().mean()) - float(torch.tensor(x0))) < 3 * sigma
