"""The eager quantizer's fast call path against the full one, bit for bit: a Quantizer whose kernels run as
kernel_direct plans (no bytecode, no dynamo lookup; the Scaler's and counters' updates inside the kernel) against an
identically seeded twin whose every kernel call goes through dynamo (mode "dynamo": the entry's bytecode and
AOTAutograd's wrappers) and one running the eager code (the oracle, itself tested against ml_dtypes / torchao /
gfloat in test_numerics_*). Outputs, scales seen by observers, gradients, every buffer (amax history, scale, eps hits,
updates, counters), the SR token and generator state; and the fallbacks when a plan's conditions do not hold."""
from __future__ import annotations

import pytest
import torch

from altgrad_lib.numerics import kernel_direct, kernels
from altgrad_lib.numerics.quantizer import Quantizer

SPECS = [   # (spec, count): per tensor / per row / delayed / none, RNE and SR, identity and clipped STE
    ({"fmt": "E4M3"}, True),                                                    # fp8_hybrid's X and W
    ({"fmt": "E5M2", "rounding": "stochastic", "ste": "clipped"}, True),        # SR, mask
    ({"fmt": "E3M4", "scaling": "per_row", "ste": "clipped"}, True),
    ({"fmt": "E4M3", "scaling": {"kind": "delayed", "history_len": 4}}, True),
    ({"fmt": "E5M2", "scaling": {"kind": "delayed", "history_len": 3, "reduce": "most_recent", "delayed_init": "one"},
      "rounding": "stochastic"}, False),                                        # count=False: no stats
    ({"fmt": "E1M6", "scaling": "none", "ste": "clipped"}, True),               # saturates
    ({"fmt": "E4M3", "rounding": "stochastic", "sr_rng": "per_call"}, True),
]
MODES = ("eager", "dynamo", "compiled")
ROUNDS = 4     # a signature's first call compiles / goes through dynamo, the second records its plan, then plans


def _inputs(r: int) -> list[torch.Tensor]:
    """Round r's inputs: the same shapes (signatures) every round, other values (a plan must not keep old ones)."""
    g = torch.Generator().manual_seed(r)
    x = torch.randn(48, 64, generator=g) * 3
    x[0, :6] = torch.tensor([0.0, -0.0, 1e-30, float("inf"), float("nan"), 1e6])
    return [x, torch.randn(2, 24, 32, generator=g), torch.zeros(16, 32)]   # all-zero: the amax floor fires


def _same(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    """Both None, or equal dtype, values and signs with NaN where the other has NaN."""
    if a is None or b is None:
        return a is None and b is None
    nan = a.isnan() if a.is_floating_point() else torch.zeros_like(a, dtype=torch.bool)
    return (a.dtype == b.dtype and a.shape == b.shape and torch.equal(nan, b.isnan() if b.is_floating_point() else nan)
            and torch.equal(a[~nan], b[~nan])
            and (not a.is_floating_point() or torch.equal(torch.signbit(a[~nan]), torch.signbit(b[~nan]))))


def _state(q: Quantizer) -> dict:
    sd = q.state_dict()
    extra = sd.pop("_extra_state")
    gen = q.generator()
    return {**sd, "token": q._rng_token[1:].clone(), "extra": {k: v for k, v in extra.items() if k != "rng_state"},
            "gen": None if gen is None else gen.get_state()}


def _one_call(q: Quantizer, mode: str, x: torch.Tensor, what: str, step: int):
    """One quantizer call in `mode` (forward with a backward, quantize or quantize_stateless): its outputs."""
    kernels.set_qdq_kernel(mode)
    if q.spec.sr_rng == "per_call" and what == "forward":
        q.set_rng_step(step)
    if what == "forward":
        xa = x.clone().requires_grad_(True)
        y = q(xa)
        g = torch.Generator().manual_seed(step)
        y.backward(torch.randn(y.shape, generator=g))
        return y.detach(), xa.grad
    if what == "quantize":
        return (q.quantize(x),)
    return (q.quantize_stateless(x),)


@pytest.fixture
def restore_mode():
    yield
    kernels.set_qdq_kernel(None)


def _run_twins(spec: dict, count: bool) -> list[Quantizer]:
    kernels.reset_kernels()
    twins = [Quantizer(spec, seed=7, count=count) for _ in MODES]
    seen = [[] for _ in MODES]
    for q, s in zip(twins, seen):
        q.observe(lambda ev, s=s: s.append((ev.scale, ev.eps_hits)))
    calls = ["forward", "quantize"] + ([] if twins[0].stateful else ["quantize_stateless"])
    for r in range(ROUNDS):
        for train in (True, False):
            for x in _inputs(r):
                for what in calls:
                    outs = []
                    for q, mode in zip(twins, MODES):
                        q.train(train)
                        outs.append(_one_call(q, mode, x, what, r))
                    for a, b, c in zip(*outs):
                        assert _same(a, b) and _same(a, c), (spec, r, train, tuple(x.shape), what)
                    states = [_state(q) for q in twins]
                    for k, v in states[0].items():
                        for other in states[1:]:
                            assert (_same(v, other[k]) if isinstance(v, torch.Tensor) or v is None
                                    else v == other[k]), (k, spec, r, train, what)
        for a, b, c in zip(*seen):     # the scale and eps hits every call used, as observers saw them
            assert _same(a[0], b[0]) and _same(a[0], c[0]) and _same(a[1], b[1]) and _same(a[1], c[1])
        assert len(seen[0]) == len(seen[1]) == len(seen[2])
    return twins


@pytest.mark.parametrize("spec,count", SPECS, ids=[str(i) for i in range(len(SPECS))])
def test_plans_are_bit_identical_to_dynamo_and_eager(spec, count, restore_mode):
    _run_twins(spec, count)
    direct = [k for k in kernels._compiled.values() if isinstance(k, kernel_direct.DirectKernel)]
    assert direct and not kernels._failed
    assert all(k.plan_calls > 0 for k in direct), [(k.direct_calls, k.plan_calls) for k in direct]


def test_state_after_training_matches_the_eager_path_step_by_step(restore_mode):
    """fp8_hybrid-like: the compiled twin's Scaler and counters after every call equal the eager twin's."""
    twins = _run_twins({"fmt": "E4M3"}, True)
    assert int(twins[2].scaler.n_updates) == int(twins[0].scaler.n_updates) > 0
    assert int(twins[2].scaler.eps_hits) > 0          # the all-zero input hit the amax floor, counted in the kernel


def _warm_kernel():
    """An E4M3 per-tensor Quantizer in "compiled" mode whose kernel has a plan for x: (quantizer, kernel, x)."""
    kernels.reset_kernels()
    kernels.set_qdq_kernel("compiled")
    q, x = Quantizer({"fmt": "E4M3"}, seed=0), torch.randn(32, 16)
    for _ in range(4):   # compiles; through dynamo (the entry is found); the plan recorded; the plan
        q.quantize(x)
    (kern,) = kernels._compiled.values()
    assert isinstance(kern, kernel_direct.DirectKernel) and kern.plan_calls == 1
    return q, kern, x


def test_plans_are_not_used_under_an_eval_frame_callback(restore_mode, monkeypatch):
    """Inside a frame dynamo watches, the bytecode (with its dynamo-disabling wrapper) runs instead: same bits."""
    q, kern, x = _warm_kernel()
    ref = q.quantize(x)
    monkeypatch.setattr(kernel_direct, "get_eval_frame_callback", lambda: object())
    direct, plans = kern.direct_calls, kern.plan_calls
    assert _same(q.quantize(x), ref)
    assert kern.direct_calls == direct + 1 and kern.plan_calls == plans


def test_no_plan_when_a_piece_is_not_recognized(restore_mode, monkeypatch):
    """A signature whose plan cannot be made runs its bytecode directly: same bits, no plan calls. Its arguments, not
    torch's wrappers, were the cause: no warning, the path is not recorded as off."""
    monkeypatch.setattr(kernel_direct, "_off", None)
    monkeypatch.setattr(kernel_direct._Plan, "_make", staticmethod(lambda *a: None))
    kernels.reset_kernels()
    kernels.set_qdq_kernel("compiled")
    q, ref = Quantizer({"fmt": "E4M3"}, seed=0), Quantizer({"fmt": "E4M3"}, seed=0)
    x = torch.randn(32, 16)
    for _ in range(5):
        kernels.set_qdq_kernel("compiled")
        y = q.quantize(x)
        kernels.set_qdq_kernel("eager")
        assert _same(y, ref.quantize(x))
    (kern,) = kernels._compiled.values()
    assert kern.plan_calls == 0 and kern.direct_calls == 3
    assert all(h.plan is False for h in kern._known.values())
    assert kernel_direct.off_reason() is None


def test_plans_off_when_the_wrappers_differ_say_so(restore_mode, monkeypatch):
    """A torch whose AOTAutograd wrappers differ (the private structure a plan reads): the bytecode runs instead, the
    same bits, and a warning says once why plans are off (the old code dropped them without a word)."""
    monkeypatch.setattr(kernel_direct, "_off", None)
    monkeypatch.setattr(kernel_direct._Plan, "_unwrap", staticmethod(lambda graph: (None, "a changed wrapper")))
    kernels.reset_kernels()
    kernels.set_qdq_kernel("compiled")
    q, ref = Quantizer({"fmt": "E4M3"}, seed=0), Quantizer({"fmt": "E4M3"}, seed=0)
    x = torch.randn(32, 16)
    for i in range(4):     # compiles; through dynamo; the plan is tried (the warning); the bytecode again
        kernels.set_qdq_kernel("compiled")
        if i == 2:
            with pytest.warns(RuntimeWarning, match="kernel_direct's plans off in torch .*: a changed wrapper"):
                y = q.quantize(x)
        else:
            y = q.quantize(x)
        kernels.set_qdq_kernel("eager")
        assert _same(y, ref.quantize(x))
    (kern,) = kernels._compiled.values()
    assert kern.plan_calls == 0 and kern.direct_calls == 2
    assert kernel_direct.off_reason().startswith("plans off in torch") and kernels.direct_path_off()


def _recorded_case():
    """The graph call a plan is made from, recorded: (graph, [(graph args, graph outputs)], call args, result)."""
    q, kern, x = _warm_kernel()
    (hit,) = kern._known.values()
    fn = hit.fn
    name = next(n for n in fn.__code__.co_names if n.startswith("__compiled_fn"))
    graph, seen = fn.__globals__[name], []
    args = (x.reshape(-1), q._rng_token, *(q.scaler.amax_history, q.scaler.scale, q.scaler.eps_hits,
                                                 q.scaler.n_updates, q.n_elements, q.n_saturated, q.n_underflow))

    def recorded(*a):
        out = graph(*a)
        seen.append((a, out))
        return out

    glb = dict(fn.__globals__)
    glb[name] = recorded
    with torch.no_grad():
        res = type(fn)(fn.__code__, glb, fn.__name__)(*args)
    return graph, seen, args, res


def test_plan_conditions_each_refuse(restore_mode):
    """_Plan._make accepts the real recording and refuses each piece it cannot prove fixed or handled."""
    graph, seen, args, res = _recorded_case()
    assert isinstance(kernel_direct._Plan._make(graph, seen, args, res), kernel_direct._Plan)
    (gargs, gout), = seen
    const = next(i for i, a in enumerate(gargs) if isinstance(a, torch.Tensor) and not any(a is b for b in args))
    size = next(i for i, a in enumerate(gargs) if isinstance(a, int))

    def changed(i, v):
        return [(gargs[:i] + (v,) + gargs[i + 1:], gout)]

    bumped = gargs[const].clone()
    bumped.add_(0)                                       # a constant the graph mutated: not a constant
    refused = {
        "mutated constant": changed(const, bumped),
        "aliases an input": changed(const, args[0][:1].reshape(())),
        "requires grad": changed(const, gargs[const].clone().requires_grad_(True)),
        "not 0-d": changed(const, gargs[const].reshape(1)),
        "int not a size": changed(size, 12345),
        "other type": changed(size, 1.5),
    }
    for why, rec in refused.items():
        assert kernel_direct._Plan._make(graph, rec, args, res) is None, why
    assert kernel_direct._Plan._make(graph, seen, args, (res[0].clone(),) + res[1:]) is None   # unknown output
    assert kernel_direct._Plan._make(graph, seen, args, list(res)) is None                    # not a tuple
    assert kernel_direct._Plan._make(lambda *a: None, seen, args, res) is None                # not disable-wrapped
