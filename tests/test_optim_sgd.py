"""optim/sgd.py: GridSGD's step is lr * S(w) * g against an explicit formula (the geoopt match is in
test_optim_manifold.py)."""
from __future__ import annotations

import torch

from altgrad_lib.numerics.formats import get_format
from altgrad_lib.optim.sgd import GridSGD


def test_grid_sgd_fp32_step_is_stiffness_times_gradient():
    f = get_format("E5M2")
    gen = torch.Generator().manual_seed(0)
    w0 = torch.randn(50, generator=gen)
    g = torch.randn(50, generator=gen)
    p = torch.nn.Parameter(w0.clone())
    opt = GridSGD([p], lr=0.3, fmt="E5M2", grid_exp=0, weight_decay=0.1)
    p.grad = g.clone()
    opt.step()
    expect = w0 - 0.3 * (f.ulp(w0, "up") * (g + 0.1 * w0))
    torch.testing.assert_close(p.detach(), expect, rtol=1e-6, atol=0)


def test_grid_sgd_without_format_is_sgd():
    p = torch.nn.Parameter(torch.ones(3))
    opt = GridSGD([p], lr=0.5, momentum=0.5)
    for _ in range(2):
        p.grad = torch.ones(3)
        opt.step()
    torch.testing.assert_close(p.detach(), torch.full((3,), 1 - 0.5 - 0.5 * 1.5))
