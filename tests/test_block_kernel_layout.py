"""The block kernels' faster layouts against the routine they replace, bit for bit (numerics/block_scaling.py).

- Blocks along a dim other than the last are quantized in place, (pre, n_blocks, B, post), instead of on
  x.movedim(axis, -1) (the routine block_qdq ran before, still its path for 2D tiles and 4/6): same y, the same
  counts, the same stochastic-rounding draws for the same elements, the generator left in the same state.
- 2D tiles of a 2-d tensor along dim 0 are its tiles along dim 1 (block_scaling.same_tiles_axis): the first test
  checks them against the moved routine too, the compiled test that one kernel serves both.
- Under torch.compile the per-block scales are stored (stored_in_kernel) and a dim that is a multiple of the
  block is not padded: the compiled kernels (numerics/kernels.py, via Quantizer) against the eager code, same checks.
The eager routine is itself checked against torchao / gfloat in test_numerics_block_scaling.py and
test_block_recipes_new.py. Cases: dims not a multiple of the block, a middle axis of a 3D tensor, zeros, +-0,
inf and NaN, blocks whose scales are subnormal or clamp at the scale format's floor, outliers.
"""
from __future__ import annotations

import pytest
import torch
from helpers import assert_same

from altgrad_lib.numerics import kernels
from altgrad_lib.numerics.block_scaling import BlockScaling, block_qdq
from altgrad_lib.numerics.formats import get_format
from altgrad_lib.numerics.quantizer import Quantizer
from altgrad_lib.numerics.rounding import random_bits

CONFIGS = [  # (element format, BlockScaling fields): every block kind and option block_qdq has
    ("E2M1", {"kind": "nvfp4"}),
    ("E2M1", {"kind": "nvfp4", "tile_2d": True}),
    ("E2M1", {"kind": "nvfp4", "four_over_six": True}),
    ("E2M1", {"kind": "nvfp4", "scale_fmt": "UE5M3", "block_size": 8}),
    ("E2M1", {"kind": "mx"}),
    ("E2M1", {"kind": "mx", "mode": "rceil", "headroom": 0.75}),
    ("E4M3", {"kind": "mx"}),
    ("E5M2", {"kind": "mx", "block_size": 16}),
    ("E3M2", {"kind": "mx"}),
    ("E4M3", {"kind": "fp8_block", "block_size": 32}),
    ("E4M3", {"kind": "fp8_block", "block_size": 16, "pow2": True, "tile_2d": True}),
]


def _inputs() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    a = torch.randn(64, 96, generator=g) * 3
    a[0, :6] = torch.tensor([0.0, -0.0, 1e-30, float("inf"), float("nan"), -1e-41])
    a[40:, 7] = 0                                                   # zero blocks along dim 0
    a[8:24] *= 1e-38                                                # subnormal scales (MX), scale floor (nvfp4)
    b = torch.randn(5, 37, 48, generator=g)                         # 37: not a multiple of any block
    c = torch.randn(50, 17, generator=g) * torch.where(torch.rand(50, 17, generator=g) < 0.05, 1e4, 1.0)
    return [a, b, c]


def _cases():
    for fmt, sc in CONFIGS:
        for rounding in ("nearest", "stochastic"):
            yield pytest.param(fmt, sc, rounding, id=f"{BlockScaling(**sc).short_str()}-{fmt}-{rounding[:2]}")


@pytest.mark.parametrize("fmt_name,scaling,rounding", list(_cases()))
def test_blocks_along_an_axis_equal_the_routine_on_the_moved_tensor(fmt_name, scaling, rounding):
    fmt, cfg = get_format(fmt_name), BlockScaling(**scaling)
    for x in _inputs():
        for axis in range(x.dim() - 1):      # every dim but the last (the last is the routine itself)
            ga, gb = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
            ref = block_qdq(x.movedim(axis, -1), fmt, cfg, rounding, lambda t: random_bits(t, fmt.kernel, None, ga),
                            None, True)
            ref = (ref[0].movedim(-1, axis), *ref[1:])
            got = block_qdq(x, fmt, cfg, rounding, lambda t: random_bits(t, fmt.kernel, None, gb), None, True, axis)
            where = f"{tuple(x.shape)} axis {axis}"
            assert_same(got[0], ref[0], x, where)
            assert torch.equal(got[1], ref[1]) and torch.equal(got[2], ref[2]), f"counts differ: {where}"
            assert torch.equal(ga.get_state(), gb.get_state()), f"a different number of draws: {where}"


@pytest.fixture
def restore_mode():
    yield
    kernels.set_qdq_kernel(None)


# the recipes' configurations (nvfp4, mxfp4; mxfp8's E4M3 MX is in test_numerics_kernels) and the options with
# their own per-block code
COMPILED = [("E2M1", {"kind": "nvfp4"}, "stochastic"), ("E2M1", {"kind": "nvfp4", "tile_2d": True}, "nearest"),
            ("E2M1", {"kind": "mx"}, "stochastic"),
            ("E2M1", {"kind": "mx", "mode": "rceil", "headroom": 0.75}, "nearest"),
            ("E4M3", {"kind": "fp8_block", "block_size": 32, "pow2": True}, "nearest")]


@pytest.mark.parametrize("fmt_name,scaling,rounding", COMPILED,
                         ids=[f"{BlockScaling(**s).short_str()}-{f}-{r[:2]}" for f, s, r in COMPILED])
def test_compiled_block_kernels_equal_eager(fmt_name, scaling, rounding, restore_mode):
    kernels.reset_kernels()
    spec = {"fmt": fmt_name, "scaling": scaling, "rounding": rounding}
    eager, comp = Quantizer(spec, seed=5), Quantizer(spec, seed=5)
    a, b, _ = _inputs()
    # a compile each: blocks along the last dim, then (the first configuration only: the layout code is shared by
    # every kind, each compile costs ~15 s of the test command) along dim 0 and padded
    layouts = ((a, -1), (a, 0), (b, 1)) if (fmt_name, scaling, rounding) == COMPILED[0] else ((a, -1),)
    tiles = scaling.get("tile_2d", False)
    if tiles:    # a 2-d weight's 16 x 16 tiles along dim 0 (its dgrad copy) are its tiles along dim 1: one kernel
        layouts = ((a, -1), (a, 0))
    for x, axis in layouts:
        kernels.set_qdq_kernel("eager")
        ya = eager.quantize(x, axis=axis)
        kernels.set_qdq_kernel("compiled")
        yb = comp.quantize(x, axis=axis)
        assert_same(yb, ya, x, f"{tuple(x.shape)} axis {axis}")
    assert kernels._compiled and not kernels._failed, kernels._failed
    if tiles:
        assert len(kernels._compiled) == 1, list(kernels._compiled)
    assert eager.stats() == comp.stats()
    if rounding == "stochastic":
        assert torch.equal(eager.generator().get_state(), comp.generator().get_state())
