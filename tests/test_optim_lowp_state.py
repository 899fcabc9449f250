"""optim/lowp_state.py: round trips against an independent per-block reference, SR, small tensors, bytes."""
from __future__ import annotations

import math

import pytest
import torch

from altgrad_lib.numerics.formats import get_format
from altgrad_lib.optim.lowp_state import StateFormat


def reference(x: torch.Tensor, fmt: str, block: int) -> torch.Tensor:
    """Per-block loop: s = 2^floor(log2(max / amax)) (Python math), Q(x s) / s with our RNE."""
    f = get_format(fmt)
    flat = x.flatten()
    out = torch.empty_like(flat)
    b = block or flat.numel()
    for i in range(0, flat.numel(), b):
        blk = flat[i:i + b]
        amax = float(blk.abs().max())
        s = torch.tensor(2.0 ** math.floor(math.log2(f.max / amax)) if amax > 0 else 1.0)
        out[i:i + b] = f.quantize(blk * s) / s
    return out.view(x.shape)


@pytest.mark.parametrize("fmt", ["E4M3", "E5M2", "E3M4", "E2M1"])
@pytest.mark.parametrize("block", [0, 256, 100])
def test_round_trip_equals_the_reference(fmt, block):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(37, 50, generator=gen) * torch.logspace(-6, 0, 50)     # wide range, ragged last block
    x[3] = 0.0
    sf = StateFormat(fmt=fmt, block=block)
    codes, scale = sf.encode(x)
    assert codes.dtype == torch.uint8
    y = sf.decode(codes, scale, x)
    assert torch.equal(y, reference(x, fmt, block))
    # relative error of the largest element in each block: at most half an ULP
    assert float(((y - x).abs() / x.abs().max()).max()) <= 2.0 ** -get_format(fmt).mbits


def test_stochastic_state_rounding_is_unbiased_3sigma():
    n = 40000
    x = torch.full((n,), 0.3)
    x[0] = 1.0                                   # block amax 1 -> E4M3 scale 256: 0.3*256 = 76.8 between 72, 80
    sf = StateFormat(fmt="E4M3", block=0, rounding="stochastic")
    y = sf.decode(*sf.encode(x, torch.Generator().manual_seed(0)), x)[1:]
    lo, hi = 72 / 256, 80 / 256
    p = (0.3 - lo) / (hi - lo)
    sigma = (hi - lo) * math.sqrt(p * (1 - p) / (n - 1))
    assert set(y.unique().tolist()) == {lo, hi}
    assert abs(float(y.double().mean()) - 0.3) < 3 * sigma


def test_bytes_and_small_tensors():
    sf = StateFormat(fmt="E4M3", block=256)
    codes, scale = sf.encode(torch.randn(4096))
    assert StateFormat.nbytes(codes, scale) == 4096 + 16 * 4          # 1.016 bytes per element
    assert sf.applies_to(4096) and not sf.applies_to(4095)
    assert sf.short_str() == "e4m3fn/b256/rne"
    with pytest.raises(ValueError, match="valid choices"):
        StateFormat(rounding="up")
