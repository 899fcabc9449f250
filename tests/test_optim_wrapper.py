"""optim/wrapper.py: the naive recipe wrapped around torch's AdamW cancels inside a binade; the schedule and
state_dict work."""
from __future__ import annotations

import copy

import torch

from altgrad_lib.optim.wrapper import StiffnessWrapper


def test_wrapped_adamw_cancels_and_schedule_zero_is_identity():
    gen = torch.Generator().manual_seed(0)
    w0 = (1 + torch.rand(32, generator=gen)) * 2.0**-5            # one E4M3 binade (unscaled: S = 2^-8)
    grads = [torch.randn(32, generator=gen) for _ in range(10)]
    runs = {}
    for name, sched in (("full", None), ("off", lambda t: 0.0)):
        p = torch.nn.Parameter(w0.clone())
        inner = torch.optim.AdamW([p], lr=1e-5, eps=1e-12, foreach=False)
        opt = StiffnessWrapper(inner, "E4M3", sched)
        opt.grid_exp = [0]                                        # the unscaled grid: S = 2^-8 on this binade
        for g in grads:
            p.grad = g.clone()
            opt.step()
        runs[name] = p.detach()
    ref = torch.nn.Parameter(w0.clone())
    inner = torch.optim.AdamW([ref], lr=1e-5, eps=1e-12, foreach=False)
    for g in grads:
        ref.grad = g.clone()
        inner.step()
    assert torch.equal(runs["off"], ref.detach())
    moved = (ref.detach() - w0).abs()
    assert float(((runs["full"] - ref.detach()).abs() / moved).max()) < 1e-3


def test_wrapper_state_dict_round_trip():
    p = torch.nn.Parameter(torch.randn(8) * 0.1)
    opt = StiffnessWrapper(torch.optim.AdamW([p], lr=1e-3), "E5M2", lambda t: min(1.0, t / 4))
    for _ in range(3):
        p.grad = torch.randn(8)
        opt.step()
    sd = copy.deepcopy(opt.state_dict())              # state_dict() returns live tensors
    q = torch.nn.Parameter(p.detach().clone())
    opt2 = StiffnessWrapper(torch.optim.AdamW([q], lr=1e-3), "E5M2", lambda t: min(1.0, t / 4))
    opt2.load_state_dict(sd)
    assert opt2.t == 3 and opt2.grid_exp == opt.grid_exp
    g = torch.randn(8)
    p.grad, q.grad = g.clone(), g.clone()
    opt.step(), opt2.step()
    assert torch.equal(p, q)
    assert opt.short_str().startswith("stiffness_wrap[e5m2/S=ulp]")
