"""optim/manifold.py: geoopt's RiemannianSGD on FP8Manifold takes bitwise the steps of our GridSGD; points stay
on the grid under RiemannianAdam; the metric is consistent with egrad2rgrad."""
from __future__ import annotations

import geoopt
import pytest
import torch

from altgrad_lib.numerics.formats import get_format
from altgrad_lib.optim.manifold import FP8Manifold
from altgrad_lib.optim.sgd import GridSGD


@pytest.mark.parametrize("fmt", ["E4M3", "E5M2", "E7M0"])
def test_riemannian_sgd_equals_grid_sgd(fmt):
    """geoopt: g + wd w -> S(w) (g + wd w) -> Q(w - lr ·) ; ours: the same in fp32, storage grid_rne, S = ULP up.

    Without momentum only: geoopt's buffer holds Riemannian gradients (seeded with the first raw gradient), ours
    Euclidean ones, so with momentum the two differ as soon as S changes — the math says they should."""
    momentum = 0.0
    scale = 2.0**4
    M = FP8Manifold(fmt, scale=scale)
    gen = torch.Generator().manual_seed(0)
    w0 = M.projx(torch.randn(64, 32, generator=gen) * 0.1)
    a = geoopt.ManifoldParameter(w0.clone(), manifold=M)
    b = torch.nn.Parameter(w0.clone())
    oa = geoopt.optim.RiemannianSGD([a], lr=0.5, weight_decay=0.01, momentum=momentum)
    ob = GridSGD([b], lr=0.5, weight_decay=0.01, momentum=momentum, fmt=fmt, storage="grid_rne", grid_exp=4)
    moved = 0.0
    for _ in range(5):
        g = torch.randn(64, 32, generator=gen)
        a.grad, b.grad = g.clone(), g.clone()
        oa.step()
        ob.step()
        assert torch.equal(a.data, b.data)
        moved = max(moved, float((a.data != w0).float().mean()))
    assert moved > 0.05


def test_points_stay_on_the_grid_under_riemannian_adam_and_sr():
    M = FP8Manifold("E4M3", scale=8.0, stochastic=True, seed=1)
    f = get_format("E4M3")
    gen = torch.Generator().manual_seed(1)
    p = geoopt.ManifoldParameter(M.projx(torch.randn(100, generator=gen) * 0.1), manifold=M)
    opt = geoopt.optim.RiemannianAdam([p], lr=0.05)
    start = p.data.clone()
    for _ in range(5):
        p.grad = torch.randn(100, generator=gen)
        opt.step()
        assert torch.equal(f.quantize(p.data * 8), p.data * 8)
    assert not torch.equal(p.data, start)
    assert M.check_point_on_manifold(p.data)
    assert not M.check_point_on_manifold(p.data + 1e-3)


def test_metric_matches_egrad2rgrad():
    """<rgrad, v>_x = <egrad, v> (Euclidean): the defining property of the Riemannian gradient."""
    M = FP8Manifold("E5M2")
    x = M.projx(torch.randn(50))
    e, v = torch.randn(50), torch.randn(50)
    torch.testing.assert_close(M.inner(x, M.egrad2rgrad(x, e), v), (e * v).sum(), rtol=1e-5, atol=1e-6)


def test_scale_must_be_a_power_of_two():
    with pytest.raises(ValueError, match="power of two"):
        FP8Manifold("E4M3", scale=3.0)
