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
    kw = {"track_stats": True, "seed": 5, **extra}
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


def _check_resume(make, n):
    """n steps, a save, n more steps; a fresh optimizer (other init, then restored) takes the same n steps bit for
    bit. Returns both optimizers."""
    params = _model_params()
    opt = make(params)
    gen = torch.Generator().manual_seed(1)
    _steps(opt, params, gen, n)
    saved = _roundtrip({"params": [p.detach().clone() for p in params], "opt": opt.state_dict(),
                        "gen": gen.get_state()})
    _steps(opt, params, gen, n)                                   # the uninterrupted run
    params2 = _model_params(seed=9)                               # a fresh process: other init, then restore
    opt2 = make(params2)
    with torch.no_grad():
        for p, v in zip(params2, saved["params"]):
            p.copy_(v)
    opt2.load_state_dict(saved["opt"])
    gen2 = torch.Generator()
    gen2.set_state(saved["gen"])
    _steps(opt2, params2, gen2, n)
    for a, b in zip(params, params2):
        assert torch.equal(a, b)
    assert_same_state(opt.state_dict(), opt2.state_dict())
    return opt, opt2


@pytest.mark.parametrize("storage", STORAGES)
@pytest.mark.parametrize("name", list(OPTS))
def test_resume_is_bit_exact(name, storage):
    opt, opt2 = _check_resume(lambda ps: _make(name, storage, ps), 3)
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
    from altgrad_lib.numerics.formats import get_format
    assert torch.equal(get_format("E5M2").quantize(b.detach() * s), b.detach() * s)


def _flat_groups(name, storage, params, **extra):
    """_make without low-precision states (those keep the per-parameter path)."""
    cls, lr = OPTS[name]
    groups = [{"params": params[:2], "fmt": "E4M3", "storage": storage, "weight_decay": 0.01},
              {"params": params[2:], "lr": 1e-3 if name == "grid_adamw" else lr}]
    return cls(groups, lr=lr, seed=5, **extra)


@pytest.mark.parametrize("storage", STORAGES)
@pytest.mark.parametrize("name", list(OPTS))
def test_flat_group_step_equals_the_per_parameter_loop(name, storage):
    """The flat path (one update per group) against the per-parameter loop (taken with track_stats=True):
    same elementwise arithmetic and the same SR bits, so the same weights and states bitwise."""
    pa, pb = _model_params(), _model_params()
    flat, loop = _flat_groups(name, storage, pa), _flat_groups(name, storage, pb, track_stats=True)
    assert flat._flat[0] is not None and flat._flat[1] is not None
    ga, gb = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    _steps(flat, pa, ga, 4)
    _steps(loop, pb, gb, 4)
    for a, b in zip(pa, pb):
        assert torch.equal(a, b)
    sa, sb = flat.state_dict(), loop.state_dict()
    del sa["altgrad"]["stats"], sb["altgrad"]["stats"]
    assert_same_state(sa, sb)
    for k in (k for k in flat._flat[0]["state"] if flat.state[pa[0]][k].shape == pa[0].shape):   # (not Madam's bound)
        ptrs = {flat.state[p][k].untyped_storage().data_ptr() for p in pa[:2]}   # views of the group's flat buffer
        assert ptrs == {flat._flat[0]["state"][k].untyped_storage().data_ptr()}


def test_missing_gradient_moves_the_group_to_the_per_parameter_loop():
    pa, pb = _model_params(), _model_params()
    a, b = _flat_groups("grid_adamw", "grid_sr", pa), _flat_groups("grid_adamw", "grid_sr", pb, track_stats=True)
    gen_a, gen_b = torch.Generator().manual_seed(2), torch.Generator().manual_seed(2)
    for i in range(3):
        for o, ps, gen in ((a, pa, gen_a), (b, pb, gen_b)):
            for j, p in enumerate(ps):
                p.grad = None if (i == 1 and j == 1) else torch.randn(p.shape, generator=gen)
            o.step()
    assert a._flat[0]["synced"] is False and int(a.state[pa[1]]["step"]) == 2 and int(a.state[pa[0]]["step"]) == 3
    for x, y in zip(pa, pb):
        assert torch.equal(x, y)


def _compile_or_skip():
    try:
        torch.compile(lambda x: x + 1)(torch.ones(2))
    except Exception as e:                                      # e.g. no C++ compiler for inductor
        pytest.skip(f"torch.compile is unavailable here: {type(e).__name__}: {e}")


@pytest.mark.parametrize("storage", ["fp32", "grid_sr"])
def test_compiled_update_matches_eager_and_lr_changes_do_not_recompile(storage):
    from torch._dynamo.utils import counters

    _compile_or_skip()
    torch._dynamo.reset()
    pa, pb = _model_params(), _model_params()
    eager = _flat_groups("grid_adamw", storage, pa)
    comp = _flat_groups("grid_adamw", storage, pb, compile=True)
    gen = torch.Generator().manual_seed(3)
    g0 = counters["stats"]["unique_graphs"]
    for i in range(4):
        for a, b in zip(pa, pb):
            a.grad = torch.randn(a.shape, generator=gen)
            b.grad = a.grad.clone()
        for o in (eager, comp):
            for grp in o.param_groups:
                grp["lr"] = grp["lr"] / (i + 1)             # a schedule
        if i == 0:
            eager.step(), comp.step()                       # compiles: one graph per param group, one for consts
            graphs = counters["stats"]["unique_graphs"] - g0
            continue
        with torch._dynamo.config.patch(error_on_recompile=True):   # a recompilation raises
            eager.step(), comp.step()
    # a graph per group + the bias corrections
    assert graphs == 3 and counters["stats"]["unique_graphs"] - g0 == graphs
    assert eager.sr_offset == comp.sr_offset
    for a, b in zip(pa, pb):                                  # inductor may reorder fp32 ops: last-bit differences
        if storage == "fp32":
            torch.testing.assert_close(a.detach(), b.detach(), rtol=1e-6, atol=1e-9)
        else:                                                 # same SR bits; a last-bit difference of w_new can
            assert (a != b).float().mean() < 1e-3             # flip a rounding decision only at a code boundary
    s = comp.state[pb[0]]["grid_scale"]
    from altgrad_lib.numerics.formats import get_format
    assert storage == "fp32" or torch.equal(get_format("E4M3").quantize(pb[0].detach() * s), pb[0].detach() * s)


@pytest.mark.parametrize("name,storage", [("grid_adamw", "grid_sr"), ("madam", "kahan"), ("adamw", "fp32")])
def test_eager_chunks_inside_and_across_tensors_match_the_loop(name, storage, monkeypatch):
    """Eager flat steps work in CHUNK-element pieces; with a small CHUNK the pieces cut tensors and span them."""
    import altgrad_lib.optim.base as base

    monkeypatch.setattr(base, "CHUNK", 1000)
    pa, pb = _model_params(), _model_params()
    flat, loop = _flat_groups(name, storage, pa), _flat_groups(name, storage, pb, track_stats=True)
    assert len(flat._flat[0]["chunks"]) == 6 and len(flat._flat[0]["chunks"][-1][2]) == 2   # 5248 elements
    _steps(flat, pa, torch.Generator().manual_seed(1), 3)
    _steps(loop, pb, torch.Generator().manual_seed(1), 3)
    for a, b in zip(pa, pb):
        assert torch.equal(a, b)


def test_compiled_grid_sr_resume_is_bit_exact():
    """compile=True: the SR counter and the flat states round-trip through state_dict exactly."""
    _compile_or_skip()
    _check_resume(lambda ps: _flat_groups("grid_adamw", "grid_sr", ps, compile=True), 2)


@pytest.mark.parametrize("storage", ["fp32", "grid_sr"])
def test_track_stats_every_n_steps_measures_those_steps_only_and_changes_no_weight(storage):
    runs = {}
    for every in (False, True, 3):
        params = _model_params()
        opt = _make("adamw", storage, params, **({} if every is True else {"track_stats": every}))
        gen, popped = torch.Generator().manual_seed(1), []
        for _ in range(7):
            _steps(opt, params, gen, 1)
            popped.append(bool(opt.stats.pop()))
        runs[every] = ([p.detach().clone() for p in params], popped, opt)
    for every in (True, 3):                       # the measuring path takes the same steps bit for bit
        for a, b in zip(runs[False][0], runs[every][0]):
            assert torch.equal(a, b)
    assert runs[True][1] == [True] * 7 and runs[False][1] == [False] * 7
    assert runs[3][1] == [True, False, False, True, False, False, True]   # steps 1, 4, 7
    opt = runs[3][2]
    fresh = _make("adamw", storage, _model_params(), track_stats=3)
    fresh.load_state_dict(_roundtrip(opt.state_dict()))                    # the step count survives a resume
    assert fresh._calls == 7
