"""optim/base.py: bit-exact resume from state_dict for every optimizer x storage mode (SR generator, Kahan
buffers, low-precision states and scales, diagnostic counters), param-group handling, LR as a tensor."""
from __future__ import annotations

import io

import pytest
import torch
from helpers import assert_same_state

from altgrad_lib.optim.adamw import AdamW, GridAdamW, StiffnessAdamW
from altgrad_lib.optim.madam import Madam
from altgrad_lib.optim.sgd import GridSGD

OPTS = {"adamw": (AdamW, 1e-2), "stiffness_adamw": (StiffnessAdamW, 1e-2), "grid_adamw": (GridAdamW, 1.0),
        "madam": (Madam, 0.05), "grid_sgd": (GridSGD, 2.0)}
STORAGES = ["fp32", "grid_rne", "grid_sr", "kahan"]


def _model_params(seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(64, 80, generator=gen) * 0.02),     # 5120 >= 4096: low-precision states
            torch.nn.Parameter(torch.randn(16, 8, generator=gen) * 0.02), torch.nn.Parameter(1 + torch.zeros(8))]


def _make(name, storage, params, **extra):
    cls, lr = OPTS[name]
    kw = dict(track_stats=True, seed=5, **extra)
    if name in ("adamw", "grid_adamw") and storage == "grid_sr":
        kw.update(state_m={"fmt": "E4M3", "rounding": "stochastic"}, state_v="E5M2")
    groups = [{"params": params[:2], "fmt": "E4M3", "storage": storage, "weight_decay": 0.01},
              {"params": params[2:], "lr": 1e-3 if name == "grid_adamw" else lr}]
    return cls(groups, lr=lr, **kw)


def _steps(opt, params, gen, n):
    for _ in range(n):
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen)
        opt.step()


def _roundtrip(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=False)


@pytest.mark.parametrize("storage", STORAGES)
@pytest.mark.parametrize("name", list(OPTS))
def test_resume_is_bit_exact(name, storage):
    params = _model_params()
    opt = _make(name, storage, params)
    gen = torch.Generator().manual_seed(1)
    _steps(opt, params, gen, 3)
    saved = _roundtrip({"params": [p.detach().clone() for p in params], "opt": opt.state_dict(),
                        "gen": gen.get_state()})
    _steps(opt, params, gen, 3)                                   # the uninterrupted run
    params2 = _model_params(seed=9)                               # a fresh process: other init, then restore
    opt2 = _make(name, storage, params2)
    with torch.no_grad():
        for p, v in zip(params2, saved["params"]):
            p.copy_(v)
    opt2.load_state_dict(saved["opt"])
    gen2 = torch.Generator()
    gen2.set_state(saved["gen"])
    _steps(opt2, params2, gen2, 3)
    for a, b in zip(params, params2):
        assert torch.equal(a, b)
    assert_same_state(opt.state_dict(), opt2.state_dict())
    assert opt.stats.pop() == opt2.stats.pop()


def test_load_state_dict_needs_the_generator_entry():
    params = _model_params()
    opt = _make("adamw", "grid_sr", params)
    sd = opt.state_dict()
    del sd["altgrad"]
    with pytest.raises(ValueError, match="generator"):
        opt.load_state_dict(sd)


def test_lr_is_read_from_the_group_each_step():
    """A schedule writes group['lr']; the update uses it (through the per-group LR tensor)."""
    p = torch.nn.Parameter(torch.ones(4))
    opt = AdamW([p], lr=0.1, betas=(0.0, 0.0), eps=0.0)
    for lr in (0.1, 0.05, 0.0):
        before = p.detach().clone()
        opt.param_groups[0]["lr"] = lr
        p.grad = torch.ones(4)
        opt.step()
        torch.testing.assert_close(before - p.detach(), torch.full((4,), lr))


def test_add_param_group_initialises_grid_state():
    a, b = torch.nn.Parameter(torch.randn(8) * 0.02), torch.nn.Parameter(torch.randn(8) * 0.02)
    opt = GridAdamW([a], lr=1.0, fmt="E4M3", storage="grid_rne")
    opt.add_param_group({"params": [b], "fmt": "E5M2"})
    s = opt.state[b]["grid_scale"]
    from altgrad_lib.formats import get_format
    assert torch.equal(get_format("E5M2").quantize(b.detach() * s), b.detach() * s)


def test_compiled_update_matches_eager_and_lr_changes_do_not_recompile():
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    pa, pb = _model_params()[:1], _model_params()[:1]         # one tensor: one compilation (keeps the test short)
    eager, comp = GridAdamW(pa, lr=1.0, fmt="E4M3"), GridAdamW(pb, lr=1.0, fmt="E4M3", compile=True)
    gen = torch.Generator().manual_seed(3)
    graphs = None
    for i in range(4):
        for a, b in zip(pa, pb):
            a.grad = torch.randn(a.shape, generator=gen)
            b.grad = a.grad.clone()
        for o in (eager, comp):
            o.param_groups[0]["lr"] = 1.0 / (i + 1)          # a schedule
        eager.step(), comp.step()
        if i == 1:
            graphs = counters["stats"]["unique_graphs"]
    assert counters["stats"]["unique_graphs"] == graphs       # no new graph while the LR kept changing
    for a, b in zip(pa, pb):                                  # inductor may reorder fp32 ops: last-bit differences
        torch.testing.assert_close(a.detach(), b.detach(), rtol=1e-6, atol=1e-9)
