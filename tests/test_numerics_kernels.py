"""Compiled quantize-dequantize kernels (numerics/kernels.py) against the eager code they trace: outputs, signs,
gradients (both STEs), counters, scaler state and the stochastic-rounding stream bit for bit. The oracle is the
eager path of Quantizer (itself tested against ml_dtypes / torchao / gfloat in test_numerics_*), run on an
identically seeded twin."""
from __future__ import annotations

import warnings

import pytest
import torch

from altgrad_lib.errors import ConfigError
from altgrad_lib.numerics import kernel_direct, kernels
from altgrad_lib.numerics.quantizer import Quantizer

SPECS = [  # (spec, axis): per-tensor / per-row / delayed / SR / block kinds, along the last dim and along dim 0
    ({"fmt": "E4M3", "ste": "clipped"}, -1),
    ({"fmt": "E5M2", "rounding": "stochastic"}, -1),
    ({"fmt": "E3M4", "scaling": "per_row"}, 0),
    ({"fmt": "E4M3", "scaling": {"kind": "delayed", "history_len": 4}, "rounding": "stochastic"}, -1),
    ({"fmt": "E1M6", "scaling": "none"}, -1),            # saturates: the counters' mask must not clip the gradient
    ({"fmt": "E1M6", "scaling": "none", "ste": "clipped"}, 0),   # saturates: the clipped STE's mask is used
    # along the last dim: nvfp4 SR along dim 0 (wgrad's dY) is test_block_kernel_layout's first case; here,
    # through backward and eval too, it took 1.8x as long (this test alone, cold cache: 52 against 29 CPU-s)
    ({"fmt": "E2M1", "scaling": "nvfp4", "rounding": "stochastic"}, -1),
    ({"fmt": "E2M1", "scaling": {"kind": "nvfp4", "tile_2d": True}}, -1),
    ({"fmt": "E4M3", "scaling": "mx"}, 0),                # eval (no stats): inductor failed on frexp(float64) here
    ({"fmt": "E4M3", "rounding": "stochastic", "sr_rng": "per_call"}, -1),   # counter-based bits through the op
    ({"fmt": "E2M1", "scaling": "nvfp4", "rounding": "stochastic", "sr_rng": "per_call"}, -1),
]


def _inputs() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 96, generator=g) * 3
    x[0, :5] = torch.tensor([0.0, -0.0, 1e-30, float("inf"), float("nan")])
    return [x, torch.randn(4, 33, 48, generator=g), torch.randn(40, 64, generator=g) * 1e-3]


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal values and signs; NaN where the other has NaN (a NaN's sign and payload carry nothing)."""
    nan = a.isnan()
    return (torch.equal(nan, b.isnan()) and torch.equal(a[~nan], b[~nan])
            and torch.equal(torch.signbit(a[~nan]), torch.signbit(b[~nan])))


@pytest.fixture
def restore_mode():
    yield
    kernels.set_qdq_kernel(None)


@pytest.mark.parametrize("spec,axis", SPECS, ids=[str(i) for i in range(len(SPECS))])
def test_compiled_kernel_is_bit_identical_to_eager(spec, axis, restore_mode):
    kernels.reset_kernels()
    eager, comp = Quantizer(spec, seed=5), Quantizer(spec, seed=5)
    seen = {"eager": [], "comp": []}      # observers see the same scales (monitors read them)
    eager.observe(lambda ev: seen["eager"].append(ev))
    comp.observe(lambda ev: seen["comp"].append(ev))
    for train in (True, False):
        eager.train(train)
        comp.train(train)
        for x in _inputs():
            xa, xb = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
            kernels.set_qdq_kernel("eager")
            ya = eager(xa, axis=axis)
            za = eager.quantize(x, axis=axis) if train else None
            kernels.set_qdq_kernel("compiled")
            yb = comp(xb, axis=axis)
            zb = comp.quantize(x, axis=axis) if train else None
            gy = torch.randn_like(ya)
            ya.backward(gy)
            yb.backward(gy)
            assert _same(ya, yb), f"forward differs (train={train}, shape {tuple(x.shape)})"
            assert torch.equal(xa.grad, xb.grad), f"gradient differs (train={train}, shape {tuple(x.shape)})"
            if train:
                assert _same(za, zb), f"quantize() differs (shape {tuple(x.shape)})"
    assert kernels._compiled and not kernels._failed, kernels._failed
    assert len(seen["eager"]) == len(seen["comp"]) > 0
    for ea, eb in zip(seen["eager"], seen["comp"]):
        assert _same(ea.y, eb.y) and _same(ea.scale.expand_as(ea.x), eb.scale.expand_as(eb.x))
        assert ea.eps_hits is None and eb.eps_hits is None or torch.equal(ea.eps_hits, eb.eps_hits)
    sa, sb = eager.state_dict(), comp.state_dict()
    for k, v in sa.items():
        if torch.is_tensor(v):
            assert _same(v.double(), sb[k].double()), f"state {k}: {v} vs {sb[k]}"
        else:   # extra state: the SR generator advanced by the same draws
            assert v.get("rng_state") is None or torch.equal(v["rng_state"], sb[k]["rng_state"]), k


def test_auto_compiles_only_after_auto_after_calls(restore_mode):
    kernels.reset_kernels()
    kernels.set_qdq_kernel("auto")
    built = []
    cpu = torch.device("cpu")
    outs = [kernels.compiled_kernel("probe", cpu, lambda: built.append(1) or (lambda t: t + 1))
            for _ in range(kernels.AUTO_AFTER)]
    assert outs == [None] * kernels.AUTO_AFTER and not built
    assert kernels.compiled_kernel("other", torch.device("meta"), lambda: lambda t: t) is None   # CPU only
    assert kernels.compiled_kernel("probe", cpu, lambda: built.append(1) or (lambda t: t + 1)) is not None
    assert built == [1]
    kernels.reset_kernels()
    kernels.set_qdq_kernel("eager")
    assert kernels.compiled_kernel("probe", cpu, lambda: lambda t: t) is None


def test_failed_compile_warns_and_runs_the_function_eagerly(restore_mode):
    kernels.reset_kernels()
    kernels.set_qdq_kernel("compiled")

    def needs_a_host_value(t):   # fullgraph=True cannot trace the data-dependent Python branch
        return t * 2 if float(t.sum()) > 0 else t

    kern = kernels.compiled_kernel("bad", torch.device("cpu"), lambda: needs_a_host_value)
    with pytest.warns(RuntimeWarning, match="failed to build"):
        out = kern(torch.ones(3))
    assert torch.equal(out, torch.full((3,), 2.0)) and "bad" in kernels._failed
    assert kernels.compiled_kernel("bad", torch.device("cpu"), lambda: needs_a_host_value) is None


def test_bad_mode_is_refused(monkeypatch, restore_mode):
    with pytest.raises(ConfigError, match="valid choices: auto, compiled, eager"):
        kernels.set_qdq_kernel("fast")
    kernels.set_qdq_kernel(None)
    monkeypatch.setenv(kernels.QDQ_KERNEL_ENV, "fast")
    with pytest.raises(ConfigError, match="ALTGRAD_QDQ_KERNEL='fast'"):
        kernels.qdq_kernel_mode()


def test_default_mode_is_auto_and_eager_wins_over_a_compiled_kernel(monkeypatch, restore_mode):
    monkeypatch.delenv(kernels.QDQ_KERNEL_ENV, raising=False)
    kernels.set_qdq_kernel(None)
    assert kernels.qdq_kernel_mode() == "auto"
    kernels.reset_kernels()
    kernels.set_qdq_kernel("compiled")
    assert kernels.compiled_kernel("probe", torch.device("cpu"), lambda: lambda t: t + 1) is not None
    kernels.set_qdq_kernel("eager")      # a kernel compiled before is not used: eager means the eager code
    assert kernels.compiled_kernel("probe", torch.device("cpu"), lambda: lambda t: t + 1) is None


# Direct calls (kernel_direct.DirectKernel): after dynamo has run a kernel for a signature, later calls with it skip
# dynamo's lookup. Kernel level, so the stats and mask outputs are compared too; three identically seeded twins:
# the eager function (kernels' fallback), the kernel through dynamo (mode "dynamo"), the kernel called directly.
DIRECT_SPECS = [
    {"fmt": "E4M3", "ste": "clipped"},                                               # RNE, per tensor, mask
    {"fmt": "E5M2", "rounding": "stochastic"},                                       # SR, per tensor
    {"fmt": "E4M3", "scaling": {"kind": "delayed", "history_len": 4}, "rounding": "stochastic"},   # its buffers
    {"fmt": "E3M4", "scaling": "per_row"},
    {"fmt": "E2M1", "scaling": "nvfp4", "rounding": "stochastic"},                   # block, SR
    {"fmt": "E2M1", "scaling": {"kind": "nvfp4", "tile_2d": True}},                  # block, RNE, 16x16 tiles
    {"fmt": "E2M1", "scaling": "mx"},                                                # MX block, RNE
]


def _kernel_case(q: Quantizer, x: torch.Tensor):
    """(key, build, args) of q's kernel for x, as Quantizer._compiled_qdq / _compiled_block make them."""
    from altgrad_lib.numerics.quantizer import _sr_random_bits
    spec, rdt = q.spec, q._sr_dtype(q.spec, torch.float32)
    if q._block:
        return (("block", spec, True, rdt, -1), lambda: kernels.block_kernel_fn(spec, True, rdt, -1, _sr_random_bits),
                (x, q._rng_token))
    xf = x.reshape(-1, x.shape[-1]) if spec.scaling.kind == "per_row" else x.reshape(-1)
    # delayed: the scale read from the Scaler's buffers as scale_peek does (no update)
    sb = q.scaler._buffers
    bufs = ((sb["amax_history"], sb["scale"], sb["eps_hits"], sb["n_updates"]) if spec.scaling.kind == "delayed"
            else (None,) * 4)
    return (("qdq", spec, True, True, rdt, False, False),
            lambda: kernels.qdq_kernel_fn(spec, True, True, rdt, _sr_random_bits),
            (xf, q._rng_token, *bufs, *(None,) * 3))


@pytest.mark.parametrize("spec", DIRECT_SPECS, ids=[str(i) for i in range(len(DIRECT_SPECS))])
def test_direct_calls_are_taken_and_bit_identical(spec, restore_mode):
    kernels.reset_kernels()
    twins = [Quantizer(spec, seed=3) for _ in range(3)]
    cpu = torch.device("cpu")
    inputs = [x for x in _inputs() if x.dim() == 2] + [torch.randn(32, 96)]
    rounds = 3
    for _ in range(rounds):
        for x in inputs:
            outs = []
            for mode, q in zip(("eager", "dynamo", "compiled"), twins):
                key, build, args = _kernel_case(q, x)
                kernels.set_qdq_kernel("compiled" if mode == "eager" else mode)
                with torch.no_grad():
                    kern = kernels.compiled_kernel(key, cpu, build)
                    outs.append(build()(*args) if mode == "eager" else kern(*args))
            for a, b, c in zip(*outs):      # y, mask / y, n_sat, n_under / s, amax, eps hits
                assert (a is None) == (b is None) == (c is None)
                if a is not None:
                    assert _same(a, b) and _same(b, c) and a.dtype == b.dtype == c.dtype, (x.shape, a, b, c)
    direct = kernels._compiled[key]
    assert isinstance(direct, kernel_direct.DirectKernel) and not kernels._failed
    # the first call of each signature goes through dynamo; every later one is direct
    assert direct.direct_calls == (rounds - 1) * len(inputs), direct.direct_calls
    for q in twins[1:]:     # the same SR draws through the op: token counts and generator states agree
        assert torch.equal(q._rng_token[1:], twins[0]._rng_token[1:])
        g, g0 = q.generator(), twins[0].generator()
        assert g is None or torch.equal(g.get_state(), g0.get_state())


# Under dynamic=True a kernel lifts the floats it reads (a format's max, the headroom) to graph inputs. A Python
# decision on one (math.frexp, `!=`, clamp's scalar bound) specialized it, and AOT autograd's tensorify pass then
# made dynamo trace the whole kernel again: every block kernel was traced twice (~1.8 s more per kernel and process,
# inductor's cache warm). The pass runs in AOT autograd, so aot_eager shows a restart without inductor's compile.
TRACED_ONCE = [{"fmt": "E4M3", "ste": "clipped"},
               {"fmt": "E4M3", "scaling": {"kind": "delayed", "history_len": 4}, "rounding": "stochastic"},
               {"fmt": "E2M1", "scaling": "nvfp4", "rounding": "stochastic"},
               {"fmt": "E2M1", "scaling": {"kind": "nvfp4", "tile_2d": True}},
               {"fmt": "E2M1", "scaling": {"kind": "nvfp4", "four_over_six": True}},    # the grid's max: clamp only
               {"fmt": "E2M1", "scaling": {"kind": "nvfp4", "scale_fmt": "UE5M3"}},   # a grid built on first use
               {"fmt": "E4M3", "scaling": "mx"},                                            # frexp of the max
               {"fmt": "E2M1", "scaling": {"kind": "mx", "mode": "rceil", "headroom": 0.75}, "rounding": "stochastic"},
               {"fmt": "E4M3", "scaling": {"kind": "fp8_block", "tile_2d": True, "pow2": True}}]


def _analyses() -> tuple[int, int]:
    """(analyses dynamo began, analyses it restarted) in this process so far."""
    from torch._dynamo.utils import compilation_time_metrics as m
    return len(m.get("compile_attempt_0", [])), len(m.get("compile_attempt_1", []))


@pytest.mark.parametrize("spec", TRACED_ONCE, ids=[str(i) for i in range(len(TRACED_ONCE))])
def test_a_kernel_is_traced_once(spec):
    from torch.fx.experimental import _config as fx_config
    q = Quantizer(spec, seed=0)      # alive: the SR op draws through its handle
    key, build, args = _kernel_case(q, torch.randn(64, 96))
    torch._dynamo.reset()
    began, restarted = _analyses()
    with torch.no_grad(), fx_config.patch(use_duck_shape=False):     # as kernels.compiled_kernel calls it
        torch.compile(build(), dynamic=True, fullgraph=True, backend="aot_eager")(*args)
    assert _analyses() == (began + 1, restarted), (_analyses(), began, restarted)


def _e4m3_kernel_compiled():
    """An E4M3 per-tensor kernel in "compiled" mode after its compiling call: (the kernel, its args)."""
    kernels.reset_kernels()
    kernels.set_qdq_kernel("compiled")
    key, build, args = _kernel_case(Quantizer({"fmt": "E4M3"}, seed=0), torch.randn(64, 32))
    with torch.no_grad():
        kernels.compiled_kernel(key, torch.device("cpu"), build)(*args)    # compiles
    return kernels.compiled_kernel(key, torch.device("cpu"), build), args


def test_direct_calls_go_through_dynamo_when_global_state_changes(restore_mode):
    direct, args = _e4m3_kernel_compiled()
    with torch.no_grad():
        ref = direct(*args)
    assert direct.direct_calls == 0        # the signature's first call after compiling went through dynamo
    with torch.no_grad():
        assert _same(direct(*args)[0], ref[0]) and direct.direct_calls == 1
    with torch.enable_grad():               # another grad mode: dynamo's global-state guard, not the direct path
        assert _same(direct(*args)[0], ref[0]) and direct.direct_calls == 1


def test_direct_calls_fall_back_to_dynamo_when_the_private_api_differs(restore_mode, monkeypatch):
    """A torch whose cache-entry API changed: the kernel keeps working through dynamo (same bits), never raises, and
    says so once, with the reason (the old code switched itself off without a word): a RuntimeWarning, and
    off_reason() / kernels.direct_path_off(), which a run writes into summary.json."""
    def broken(code):
        raise AttributeError("no cache entries in this torch")

    monkeypatch.setattr(kernel_direct, "_off", None)     # this test's own record (restored after it)
    monkeypatch.setattr(kernel_direct, "_debug_get_cache_entry_list", broken)
    k, args = _e4m3_kernel_compiled()
    with torch.no_grad(), pytest.warns(RuntimeWarning, match=r"kernel_direct's direct calls off in torch .*: reading "
                                       r"dynamo's cache entries raised AttributeError: no cache entries in this torch"):
        ref = k(*args)      # its first call after compiling: dynamo's entry is looked for
    with torch.no_grad():
        again = k(*args)
    assert not k.enabled and k.direct_calls == 0
    assert _same(again[0], ref[0])
    why = kernel_direct.off_reason()
    assert why.startswith("direct calls off in torch") and kernels.direct_path_off() == why
    with warnings.catch_warnings(record=True) as caught:    # once per process: a second cause adds no warning
        warnings.simplefilter("always")
        kernel_direct._switch_off("plans", "another cause")
    assert not caught and kernel_direct.off_reason() == why


def test_the_direct_path_is_on_in_this_torch(restore_mode, monkeypatch):
    """kernel_direct's fast path rests on private dynamo internals (its docstring); where a torch changes them, the
    kernels keep their numerics and lose the path (a warning, summary.json's kernel_direct_off). This test is how a
    torch is checked: it runs on 2.13 and on 2.11 (make test-torch211) and fails where direct calls or plans are off.
    A per-tensor kernel (the Scaler's and counters' updates inside), an nvfp4 block kernel with SR and the transpose
    kernel: once warm (a signature's first call compiles, its second goes through dynamo to find the entry, the third
    records the plan), a call is a plan (no dynamo lookup, no bytecode)."""
    monkeypatch.setattr(kernel_direct, "_off", None)     # this test's own record
    assert kernel_direct._MISSING is None, kernel_direct._MISSING
    kernels.reset_kernels()
    kernels.set_qdq_kernel("compiled")
    x = torch.randn(32, 64, generator=torch.Generator().manual_seed(0))
    calls = [Quantizer(spec, seed=0).quantize for spec in
             ({"fmt": "E4M3"}, {"fmt": "E2M1", "scaling": "nvfp4", "rounding": "stochastic"})] + [kernels.transposed]
    for call in calls:
        for _ in range(4):
            call(x)
    kinds = {key[0]: k for key, k in kernels._compiled.items()}
    assert set(kinds) == {"qdq", "block", "transpose"} and not kernels._failed, (list(kinds), kernels._failed)
    assert all(isinstance(k, kernel_direct.DirectKernel) and k.enabled for k in kinds.values())
    before = {kind: (k.direct_calls, k.plan_calls) for kind, k in kinds.items()}
    for call in calls:
        call(x)
    grew = {kind: (k.direct_calls - before[kind][0], k.plan_calls - before[kind][1]) for kind, k in kinds.items()}
    assert grew == {"qdq": (1, 1), "block": (1, 1), "transpose": (1, 1)}, (grew, kernel_direct.off_reason())
    assert kernel_direct.off_reason() is None and kernels.direct_path_off() is None, kernel_direct.off_reason()


# Fewer kernels and graphs per process (bench/results/run_fixed_costs.md): each one is a dynamo trace (~0.3-1 s
# with inductor's cache warm) and, on a cold cache, a C++ compile (seconds), paid again by every process.
def _graphs(kern) -> int:
    """How many graphs dynamo holds for a compiled kernel (its cache entries)."""
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list
    return len(_debug_get_cache_entry_list(kern._code))


@pytest.mark.parametrize("spec", [{"fmt": "E4M3"}, {"fmt": "E3M4", "scaling": "per_row"},
                                  {"fmt": "E2M1", "scaling": "nvfp4"}], ids=["tensor", "per_row", "block"])
def test_one_graph_serves_activations_and_weights_of_every_shape(spec, restore_mode):
    """The callers flatten x (a view of it) so that one dynamic graph serves every shape; dynamo traced a view with
    its base, so a 3-d activation's view and a 2-d weight's view each compiled a graph of their own (the old code:
    3 graphs for a per-tensor format on these inputs). Values: test_compiled_kernel_is_bit_identical_to_eager."""
    torch._dynamo.reset()
    kernels.reset_kernels()
    kernels.set_qdq_kernel("compiled")
    q = Quantizer(spec, seed=0)
    g = torch.Generator().manual_seed(0)
    for shape in [(4, 16, 64), (64, 64), (2, 8, 64), (256, 64), (64, 256), (3, 5, 32)]:   # activations, weights
        q(torch.randn(*shape, generator=g))
    assert len(kernels._compiled) == 1 and not kernels._failed, kernels._failed
    assert _graphs(next(iter(kernels._compiled.values()))) == 1


@pytest.mark.parametrize("spec", [{"fmt": "E2M1", "scaling": "nvfp4"},
                                  {"fmt": "E2M1", "scaling": "nvfp4", "rounding": "stochastic"},
                                  {"fmt": "E2M1", "scaling": "mx", "rounding": "stochastic"},
                                  {"fmt": "E4M3"}, {"fmt": "E3M4", "scaling": "per_row"}],
                         ids=["block-rne", "block-sr", "mx-sr", "tensor", "per_row"])
def test_eval_uses_the_training_forward_kernel(spec, restore_mode):
    """Eval (no counters, no state update; stochastic rounding becomes nearest) runs the kernel that a
    round-to-nearest training forward of the format compiles instead of compiling one of its own (the old code: two
    kernels, where eval ran first at step 0 of every run; per-tensor / per-row kinds until 2026-11-27): a block kind
    drops its counts, a per-tensor / per-row kind's kernel updates scratch copies of the Scaler's and the counters'
    buffers. Its outputs equal the eager eval path's and the quantizer's state (buffers) is left as it was."""
    kernels.reset_kernels()
    kernels.set_qdq_kernel("compiled")
    rne = {**spec, "rounding": "nearest"}
    comp, twin, ref = Quantizer(rne, seed=0), Quantizer(spec, seed=0), Quantizer(spec, seed=0)
    x = torch.randn(4, 16, 64, generator=torch.Generator().manual_seed(1)) * 3
    twin.eval()
    before = {k: v.clone() for k, v in twin.state_dict().items() if torch.is_tensor(v)}
    y_eval = twin(x)                         # eval first, as a run's step-0 evaluation
    assert all(torch.equal(v, twin.state_dict()[k]) for k, v in before.items())   # eval updates no state
    comp(x)                                  # training forward, round to nearest, counting
    assert len(kernels._compiled) == 1 and not kernels._failed, (list(kernels._compiled), kernels._failed)
    assert int(comp.n_elements) == x.numel() and int(twin.n_elements) == 0   # eval counts nothing
    y_again = twin(x * 0.5)                  # again, through the kernel itself (the first call compiled it)
    assert all(torch.equal(v, twin.state_dict()[k]) for k, v in before.items())
    kernels.set_qdq_kernel("eager")
    ref.eval()
    assert _same(ref(x), y_eval) and _same(ref(x * 0.5), y_again)


def test_importing_the_training_loop_does_not_import_dynamo():
    """torch._dynamo (~2-3 s to import) comes with the first kernel a process compiles, not with the package: an hp
    run, an eager process or a notebook kernel whose runs train in workers never pays it."""
    import subprocess
    import sys
    code = "import sys, altgrad_lib.training.loop; print('torch._dynamo' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


@pytest.mark.parametrize("recipe", ["fp8_hybrid", "nvfp4"])
def test_a_run_compiles_only_its_training_kernels_one_graph_each(recipe, tmp_path, restore_mode):
    """A whole run (evaluations at step 0, mid-way and at the end included) compiles exactly the kernels one training
    step and one evaluation forward of its model compile, each as one dynamo graph: eval reuses the training
    forward's kernels (no kernel of its own: per-tensor ones without the state update) and the model's activation
    and weight shapes share each kernel's graph (the old code: fp8_hybrid 3 kernels in 8 graphs, then 3 in 3, nvfp4
    6 kernels; bench/results/run_fixed_costs.md). The oracle for
    "which kernels": a bare training step and an eval forward of the same model, built as train() builds it
    (preflight)."""
    from altgrad_lib.training.config import TrainConfig
    from altgrad_lib.training.loop import train
    from altgrad_lib.training.preflight import preflight

    cfg = TrainConfig.from_dict(dict(recipe=recipe, max_steps=2, eval_interval=1, eval_iters=2, diagnostics="off",
                                     n_layer=1, n_embd=32, n_head=2, block_size=32, batch_size=4,
                                     tokenizer="gpt2-256", out_dir=str(tmp_path)))
    kernels.set_qdq_kernel("compiled")
    torch._dynamo.reset()
    kernels.reset_kernels()
    train(cfg, resume=False, progress=False, verbose=False)
    run_kernels = dict(kernels._compiled)
    assert run_kernels and not kernels._failed, kernels._failed
    assert all(_graphs(k) == 1 for k in run_kernels.values()), {k[:1]: _graphs(v) for k, v in run_kernels.items()}
    # ("qdq", spec, want_mask, want_stats, rdt, update, count): every per-tensor kernel is one that updates state
    assert all(k[5] for k in run_kernels if k[0] == "qdq"), [k for k in run_kernels if k[0] == "qdq" and not k[5]]
    kernels.reset_kernels()
    corpus, _, _, (model, _, _) = preflight(cfg.resolved())
    x, y = corpus.train_batch(cfg.resolved().data_config, 0)
    model.train()
    model(x, y)[1].backward()
    model.eval()
    with torch.no_grad():
        model(x, y)
    assert set(kernels._compiled) == set(run_kernels)


def test_transposed_is_the_eager_transpose(restore_mode):
    """kernels.transposed (gemm_quant's column-wise RHT copies): compiled, the same values and contiguous strides as
    t.t().contiguous() for every shape, one graph, later calls direct; with grad it stays ATen's (autograd)."""
    kernels.set_qdq_kernel("compiled")
    kernels.reset_kernels()
    g = torch.Generator().manual_seed(0)
    for shape in [(1024, 256), (64, 96), (33, 7), (96, 64)]:
        t = torch.randn(*shape, generator=g)
        t[0, :3] = torch.tensor([-0.0, float("inf"), float("nan")])
        for _ in range(2):
            y, ref = kernels.transposed(t), t.t().contiguous()
            assert y.stride() == ref.stride() and _same(y, ref)
    kern = kernels._compiled[("transpose",)]
    assert _graphs(kern) == 1 and kern.direct_calls >= 3     # each shape's second call (the first: dynamo)
    w = torch.randn(8, 4, requires_grad=True)
    kernels.transposed(w).sum().backward()
    assert torch.equal(w.grad, torch.ones(8, 4))
