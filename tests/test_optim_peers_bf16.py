"""BF16 weight storage against the peers that ship it: torchao's `_AdamW(bf16_stochastic_round=True)` (SR) and
optimi's `AdamW(kahan_sum=True)` (Kahan-compensated BF16).  Not bitwise (other RNG, other op order): in
expectation / against the fp32-master trajectory.

Toy problem chosen so that the fp32-master trajectory is known exactly and SR's expectation equals it: betas = (0, 0)
(m = g, v = g^2: the moments are exact in every implementation, also in the peers' bf16 state buffers, so the
only difference left is how the weight is stored) and a gradient that does not depend on w.  Then the step is
w <- w (1 - lr wd) - lr g / (|g| + eps), linear in w, so unbiased rounding keeps E[w_t] = the master w_t.  n
coordinates with the same init and gradients are n independent SR samples.  lr = 1e-3 is ~1/8 of BF16's spacing
at |w| ~ 1: round-to-nearest would stall, every movement comes from the storage rule."""
from __future__ import annotations

import pytest
import torch

from altgrad_lib.optim.adamw import AdamW

N, T, LR, WD, EPS = 8192, 150, 1e-3, 0.01, 1e-8


def _grads():
    gen = torch.Generator().manual_seed(0)
    signs = torch.where(torch.rand(T, generator=gen) < 0.8, 1.0, -1.0)     # a drift with reversals
    return [signs[t] * (0.5 + torch.rand((), generator=gen)) for t in range(T)]


def _master(grads):
    w = torch.ones((), dtype=torch.float64)
    for g in grads:
        w = w * (1 - LR * WD) - LR * g.double() / (g.double().abs() + EPS)
    return float(w)


def _run(opt, p, grads):
    for g in grads:
        p.grad = torch.full(p.shape, float(g), dtype=p.dtype)
        opt.step()
    return p.detach().double()


def test_ours_and_torchao_bf16_sr_keep_bf16_weights_and_agree_in_expectation():
    ao = pytest.importorskip("torchao.optim")
    grads, master = _grads(), None
    master = _master(grads)
    p = torch.nn.Parameter(torch.ones(N))
    ours = _run(AdamW([p], lr=LR, betas=(0.0, 0.0), eps=EPS, weight_decay=WD, fmt="bf16", storage="grid_sr",
                      seed=3), p, grads)
    assert torch.equal(p.detach(), p.detach().bfloat16().float())             # on the bf16 grid, bitwise
    q = torch.nn.Parameter(torch.ones(N, dtype=torch.bfloat16))
    theirs = _run(ao._AdamW([q], lr=LR, betas=(0.0, 0.0), eps=EPS, weight_decay=WD, bf16_stochastic_round=True),
                  q, grads)
    assert q.dtype == torch.bfloat16
    se = {k: float(v.std() / N**0.5) for k, v in (("ours", ours), ("torchao", theirs))}
    for k, v in (("ours", ours), ("torchao", theirs)):
        assert abs(float(v.mean()) - master) <= 3 * se[k], (k, float(v.mean()), master, se[k])
        assert float(v.std()) > 0                                  # SR really ran (RNE gives one value)
    assert abs(float(ours.mean() - theirs.mean())) <= 3 * (se["ours"] ** 2 + se["torchao"] ** 2) ** 0.5
    # round-to-nearest on the same problem stalls at 1.0 (the updates are below half a spacing)
    r = torch.nn.Parameter(torch.ones(4))
    assert torch.equal(_run(AdamW([r], lr=LR, betas=(0.0, 0.0), eps=EPS, weight_decay=WD, fmt="bf16",
                                  storage="grid_rne"), r, grads), torch.ones(4, dtype=torch.float64))


def test_ours_and_optimi_kahan_bf16_track_the_master_trajectory():
    """Kahan storage is deterministic: stored = Q_rne(master + rounding of the compensation buffer), so the stored
    bf16 weight is within half a bf16 spacing of the master (the master ends in [0.5, 1): spacing 2^-8) plus the
    bf16 buffer's own rounding (<= 2^-9 of |comp| <= 2^-9)."""
    optimi = pytest.importorskip("optimi")
    grads = _grads()
    master = _master(grads)
    p = torch.nn.Parameter(torch.ones(4))
    ours = _run(AdamW([p], lr=LR, betas=(0.0, 0.0), eps=EPS, weight_decay=WD, fmt="bf16", storage="kahan",
                      kahan_dtype="bf16"), p, grads)
    q = torch.nn.Parameter(torch.ones(4, dtype=torch.bfloat16))
    theirs = _run(optimi.AdamW([q], lr=LR, betas=(0.0, 0.0), eps=EPS, weight_decay=WD, kahan_sum=True,
                               foreach=False), q, grads)
    assert torch.equal(p.detach(), p.detach().bfloat16().float()) and q.dtype == torch.bfloat16
    for v in (ours, theirs):
        assert float((v - master).abs().max()) <= 2.0**-9 + 2.0**-18, (v, master)
    assert 0.5 <= master < 1 and abs(master - 1.0) > 2.0**-5     # far from 1.0, where round-to-nearest stalls
