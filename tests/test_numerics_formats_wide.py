"""16-bit grids (formats_wide.py): BF16 (E8M7) and FP16 (E5M10) against torch's own casts, bit for bit, and
stochastic rounding unbiased (Monte Carlo).  Oracle: `x.to(torch.bfloat16 / torch.float16).float()`, which rounds
to nearest-even and overflows to inf: our quantize(..., saturate=False)."""
from __future__ import annotations

import pytest
import torch

from altgrad_lib.numerics.formats import BUILTIN_FORMATS, FloatFormat, get_format

WIDE = [("bf16", torch.bfloat16), ("fp16", torch.float16)]


def _bits(x: torch.Tensor) -> torch.Tensor:
    return x.view(torch.int32)


def _same_as_cast(x: torch.Tensor, name: str, dt: torch.dtype) -> None:
    q = get_format(name).quantize(x, saturate=False)
    ref = x.to(dt).float()
    nan = torch.isnan(ref)
    assert torch.equal(torch.isnan(q), nan)
    bad = (_bits(q) != _bits(ref)) & ~nan                    # bitwise: -0 vs +0 counts
    assert not bool(bad.any()), (x[bad][:5], q[bad][:5], ref[bad][:5])


def _wide_values(dt: torch.dtype) -> torch.Tensor:
    """Every finite value of the 16-bit dtype, as float32 (from all 65536 codes)."""
    v = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(dt).float()
    return v[torch.isfinite(v)]


@pytest.mark.parametrize("name,dt", WIDE)
def test_random_float32_bit_patterns_match_torch_cast(name, dt):
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(-(2**31), 2**31, (1 << 22,), generator=gen, dtype=torch.int64).to(torch.int32).view(torch.float32)
    _same_as_cast(x, name, dt)                               # 4M patterns: every exponent, NaN, inf, fp32 subnormals


@pytest.mark.parametrize("name,dt", WIDE)
def test_ties_neighbours_subnormals_and_overflow_match_torch_cast(name, dt):
    """For every finite value v of the format: v, v +- half the gap to each neighbour (exact ties, both parities)
    and one fp32 ulp either side of each tie; plus the overflow tie max + half ULP, inf and NaN."""
    v = _wide_values(dt).double()
    nxt = torch.nextafter(v.to(dt), torch.tensor(float("inf"), dtype=dt)).double()
    fin = torch.isfinite(nxt)
    mid = ((v[fin] + nxt[fin]) / 2).float()                  # exact in fp32: 9 / 12 significant bits
    assert torch.equal(mid.double(), (v[fin] + nxt[fin]) / 2)
    up = torch.nextafter(mid, torch.tensor(float("inf")))
    down = torch.nextafter(mid, torch.tensor(float("-inf")))
    f = get_format(name)
    top = torch.tensor([f.max, f.max + f.max / 2**(f.mbits + 2), f.max * (1 + 2.0**-(f.mbits + 1)),
                        float("inf"), float("-inf"), float("nan")], dtype=torch.float64).float()
    x = torch.cat([v.float(), mid, up, down, top, -top])
    _same_as_cast(x, name, dt)
    tiny = torch.arange(0, 1 << 12, dtype=torch.int32).view(torch.float32)   # fp32 subnormals (below BF16's)
    _same_as_cast(torch.cat([tiny, -tiny]), name, dt)


@pytest.mark.parametrize("name,dt", WIDE)
def test_saturating_default_clamps_to_max_and_keeps_inf(name, dt):
    f = get_format(name)
    x = torch.tensor([f.max * 1.01, -f.max * 1.01, float("inf")])
    if f.max * 1.01 < 3.4e38:
        assert f.quantize(x).tolist() == [f.max, -f.max, float("inf")]


@pytest.mark.parametrize("name,dt", WIDE)
def test_stochastic_rounding_is_unbiased_and_lands_on_a_neighbour(name, dt):
    """N draws of x between grid neighbours lo < hi (lo, hi from torch's cast): every result is lo or hi and the
    mean is x within 3 sigma, sigma = (hi - lo) sqrt(p (1 - p) / N), p = (x - lo) / (hi - lo)."""
    f = get_format(name)
    gen = torch.Generator().manual_seed(1)
    n = 200_000
    cases = [1.0 + 0.3 * 2.0**-f.mbits, -3.7e-3, 1234.5678, 1.1e-7, 2.0**(f.emin - f.mbits) * 0.37]
    for xv in cases:
        x = torch.full((n,), xv)
        lo = x[:1].to(dt).float()
        lo = torch.where(lo.abs() > abs(xv), torch.nextafter(lo.to(dt), torch.zeros((), dtype=dt)).float(), lo)
        hi = torch.nextafter(lo.to(dt), torch.tensor(float("inf") if xv > 0 else float("-inf"), dtype=dt)).float()
        q = f.quantize(x, rounding="stochastic", generator=gen)
        assert bool(((q == lo) | (q == hi)).all()), (xv, lo, hi, q.unique())
        p = float((x[0] - lo) / (hi - lo))
        sigma = abs(float(hi - lo)) * (p * (1 - p) / n) ** 0.5
        assert 0 < p < 1 and abs(float(q.double().mean()) - xv) <= 3 * sigma, (xv, p)


def test_names_aliases_and_registry():
    assert get_format("bf16") is get_format("E8M7") is get_format("BFloat16")
    assert get_format("fp16") is get_format("E5M10") is get_format("half")
    bf, fp = get_format("bf16"), get_format("fp16")
    assert (bf.bits, bf.bias, bf.specials, bf.max) == (16, 127, "ieee", float(torch.finfo(torch.bfloat16).max))
    assert (fp.bits, fp.bias, fp.max, fp.min_subnormal) == (16, 15, 65504.0, 2.0**-24)
    assert "BF16" not in BUILTIN_FORMATS and "FP16" not in BUILTIN_FORMATS      # notebook 01's tables unchanged
    assert bf.encode(torch.tensor([1.0, -2.0])).dtype == torch.int32
    x = torch.randn(1000) * 100
    assert torch.equal(bf.decode(bf.encode(x)), bf.quantize(x))
    for bad in ("E8M8", "E6M9", "E5M11"):
        with pytest.raises(ValueError, match="<= 8"):
            get_format(bad)
    with pytest.raises(ValueError, match="16-bit"):
        FloatFormat("X", 8, 7, 127, specials="fn")          # 16 bits only with the IEEE convention
