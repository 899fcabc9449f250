"""optim/grid.py: the scaled grid, the ULP in the step's direction, stiffness variants, code ordinals."""
from __future__ import annotations

import math

import pytest
import torch
from helpers import grid_ordinal_bruteforce

from altgrad_lib.numerics.formats import BUILTIN_FORMATS, get_format
from altgrad_lib.numerics.grid import (code_index, fast_ulp, grid_exp, grid_scale, mantissa_stiffness, step_ulp,
                                      stiffness, to_grid)

FMTS = ["E4M3", "E5M2", "E3M4", "E1M6", "E7M0", "E2M1"]


def probe() -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(20000, generator=g) * 10.0 ** torch.randint(-12, 8, (20000,), generator=g).float()
    edges = torch.tensor([0.0, -0.0, math.inf, -math.inf, 2.0**-130, 1.0, 2.0, 0.5, 448.0, 500.0, 2.0**-9, 2.0**-6])
    return torch.cat([x, edges, -edges])


@pytest.mark.parametrize("name", list(BUILTIN_FORMATS))
@pytest.mark.parametrize("direction", ["up", "down"])
def test_fast_ulp_equals_formats_ulp(name, direction):
    f = get_format(name)
    x = probe()
    assert torch.equal(fast_ulp(x, f, direction), f.ulp(x, direction))
    tz = torch.rand(x.shape, generator=torch.Generator().manual_seed(1)) < 0.5
    assert torch.equal(fast_ulp(x, f, "step", tz), torch.where(tz, f.ulp(x, "down"), f.ulp(x, "up")))


@pytest.mark.parametrize("name", FMTS)
def test_code_index_matches_bruteforce(name):
    f = get_format(name)
    vals = f.values()
    assert code_index(vals.float(), f).tolist() == grid_ordinal_bruteforce(vals.tolist(), f)
    k = 3                                          # a scaled grid: same ordinals
    assert code_index(vals.float() / 2**k, f, grid_scale(k)).tolist() == grid_ordinal_bruteforce(vals.tolist(), f)


@pytest.mark.parametrize("name", FMTS)
def test_step_ulp_lands_on_the_neighbour_code(name):
    """For every grid value w: w -+ step_ulp lands exactly on the next code in that direction (mode 'step')."""
    f = get_format(name)
    s = torch.tensor(1.0)
    vals = f.values().float()
    pos = vals[(vals > 0) & (vals < f.max)]
    for sgn in (1.0, -1.0):
        w = sgn * pos
        for away in (True, False):
            toward_zero = torch.full_like(w, not away, dtype=torch.bool)
            sp = step_ulp(w, toward_zero, f, s, "step")
            new = w + (sgn if away else -sgn) * sp
            assert torch.equal(f.quantize(new), new), "lands on the grid"
            d = (torch.tensor(grid_ordinal_bruteforce(new.tolist(), f))
                 - torch.tensor(grid_ordinal_bruteforce(w.tolist(), f)))
            assert torch.all(d == (sgn if away else -sgn)), (name, sgn, away)


def test_down_ulp_is_half_at_a_binade_lower_edge():
    f = get_format("E4M3")
    w = torch.tensor([1.0, 0.25, 2.0**-6])          # 2^-6 = min normal: the gap below is the subnormal spacing
    up, down = step_ulp(w, torch.ones(3, dtype=torch.bool), f, torch.tensor(1.0), "up"), \
        step_ulp(w, torch.ones(3, dtype=torch.bool), f, torch.tensor(1.0), "down")
    assert down.tolist() == [2.0**-4, 2.0**-6, 2.0**-9] and up.tolist() == [2.0**-3, 2.0**-5, 2.0**-9]
    mean = step_ulp(w, None, f, torch.tensor(1.0), "mean")
    assert torch.equal(mean, (up + down) / 2)


def test_zero_and_subnormals_use_the_subnormal_spacing():
    f = get_format("E4M3")
    w = torch.tensor([0.0, 2.0**-9, 3 * 2.0**-9])
    sp = step_ulp(w, torch.tensor([False, True, True]), f, torch.tensor(1.0), "step")
    assert sp.tolist() == [2.0**-9] * 3 == [f.min_subnormal] * 3


def test_mantissa_stiffness_is_the_seed_formula():
    """S = 2^(floor(log2|w|) - M), unclamped: 0 at zero, below the subnormal spacing in the subnormal range."""
    f = get_format("E4M3")
    w = torch.tensor([0.0, 2.0**-12, 0.3, -5.0, 1000.0])
    expect = [0.0] + [2.0 ** (math.floor(math.log2(abs(v))) - 3) for v in w.tolist()[1:]]
    assert mantissa_stiffness(w, f, torch.tensor(1.0)).tolist() == expect
    ulp = stiffness(w, f, torch.tensor(1.0), "ulp")
    assert ulp[0] == f.min_subnormal and ulp[1] == f.min_subnormal      # exponent-aware: clamped to emin
    assert ulp[4] == 2.0 ** (8 - 3)                                       # ... and to emax (1000 > max 448)
    assert torch.equal(stiffness(w, f, torch.tensor(1.0), "ulp", damping=1e-3), ulp + 1e-3)


def test_grid_exp_and_to_grid():
    f = get_format("E4M3")
    w = torch.randn(1000) * 0.02
    k = grid_exp(w, f, headroom=1)
    amax = float(w.abs().max())
    assert f.max / 4 < amax * 2.0**k <= f.max / 2
    s = grid_scale(k)
    q = to_grid(w, f, s)
    assert torch.equal(f.quantize(q * s), q * s)
    assert torch.equal(q, f.quantize(w * 2.0**k) / 2.0**k)
    assert grid_exp(torch.zeros(5), f) == 0
    with pytest.raises(ValueError, match="outside"):
        grid_scale(200)
