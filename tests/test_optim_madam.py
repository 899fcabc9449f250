"""optim/madam.py: the multiplicative update against a scalar Python loop, no sign flips, the 0/0 guard."""
from __future__ import annotations

import math

import torch

from altgrad_lib.optim.madam import Madam


def madam_reference(w0, grads, lr, beta2=0.999, p_scale=3.0, g_bound=10.0):
    """Per-coordinate Python loop of the published rule (float64)."""
    n = len(w0)
    mx = p_scale * math.sqrt(sum(x * x for x in w0) / n)
    w, v = list(w0), [0.0] * n
    for t, g in enumerate(grads, start=1):
        for i in range(n):
            v[i] = beta2 * v[i] + (1 - beta2) * g[i] ** 2
            vhat = v[i] / (1 - beta2**t)
            gn = g[i] / math.sqrt(vhat) if vhat > 0 else 0.0
            gn = max(-g_bound, min(g_bound, gn))
            sgn = (w[i] > 0) - (w[i] < 0)
            w[i] = max(-mx, min(mx, w[i] * math.exp(-lr * gn * sgn)))
    return w


def test_madam_matches_the_scalar_reference():
    gen = torch.Generator().manual_seed(0)
    w0 = (torch.randn(40, generator=gen) * 0.5).tolist() + [0.0]
    grads = [torch.randn(41, generator=gen).tolist() for _ in range(8)]
    grads[0][5] = 0.0                                      # v = 0 at the first step: the 0/0 guard
    p = torch.nn.Parameter(torch.tensor(w0))
    opt = Madam([p], lr=0.1)
    for g in grads:
        p.grad = torch.tensor(g)
        opt.step()
    torch.testing.assert_close(p.detach().double(), torch.tensor(madam_reference(w0, grads, 0.1), dtype=torch.float64),
                               rtol=1e-5, atol=1e-7)
    assert p[-1].item() == 0.0                             # a zero weight stays zero


def test_madam_never_flips_a_sign_even_with_large_steps():
    gen = torch.Generator().manual_seed(1)
    w0 = torch.randn(500, generator=gen)
    for storage, fmt in (("fp32", None), ("grid_sr", "E7M0"), ("grid_rne", "E4M3")):
        p = torch.nn.Parameter(w0.clone())
        opt = Madam([p], lr=0.5, weight_decay=0.5, fmt=fmt, storage=storage)
        start = p.detach().clone()
        for _ in range(20):
            p.grad = torch.randn(500, generator=gen) * 100
            opt.step()
        s_new = torch.sign(p.detach())
        assert torch.all((s_new == torch.sign(start)) | (s_new == 0)), storage


def test_madam_step_is_rounded_away_on_e4m3_under_rne():
    """lr = 0.01: |Δw| / |w| <= 0.01 * g_bound... first step |ĝ| = 1, i.e. 1 % < half an ULP (3.1-6.25 %)."""
    gen = torch.Generator().manual_seed(2)
    p = torch.nn.Parameter(torch.randn(1000, generator=gen))
    opt = Madam([p], lr=0.01, fmt="E4M3", storage="grid_rne", p_scale=100.0)   # no clamp at 3 RMS here
    before = p.detach().clone()
    p.grad = torch.randn(1000, generator=gen)
    opt.step()
    assert torch.equal(p.detach(), before)
