"""The training loop and the eager quantize kernels (numerics/kernels.py, kernel_direct.py): a precision-schedule
switch under compile=True rebuilds the kernels with dynamo's graphs, and a run records in summary.json when
kernel_direct's fast path was off in its process. Tiny runs (1 layer, C=32, T=32, <= 4 steps)."""
from __future__ import annotations

import json
from pathlib import Path

from altgrad_lib.numerics import kernel_direct, kernels
from altgrad_lib.training import loop
from altgrad_lib.training.loop import TrainConfig, train

TINY = dict(n_layer=1, n_head=2, n_embd=32, block_size=32, batch_size=4, max_docs=50, tokenizer="gpt2-512",
            max_steps=4, warmup_steps=1, eval_interval=4, eval_iters=2, ckpt_interval=2)


def tiny(tmp: Path, **kw) -> TrainConfig:
    return TrainConfig.from_dict({**TINY, "out_dir": str(tmp), **kw})


def _stale_signatures(kern: kernel_direct.DirectKernel) -> int:
    """A DirectKernel's known signatures whose code is no longer one of dynamo's cache entries for the kernel: calls
    that run, without dynamo, a graph dynamo dropped."""
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list
    live = [e.code for e in _debug_get_cache_entry_list(kern._code)]
    return sum(not any(h.fn.__code__ is c for c in live) for h in kern._known.values())


def test_a_switch_under_compile_rebuilds_the_quantize_kernels(tmp_path, monkeypatch):
    """compile=True: the switch resets dynamo (the GEMM options are constants of the compiled graph) and, with it,
    the eager quantize kernels (kernels.reset_compiler): none keeps calling the graphs dynamo dropped (the old code
    reset dynamo only: every kernel compiled before the switch did). The model runs eager here (compile_gpt stubbed)
    so that its quantizers call the kernels, as an eager model's in the same process (a notebook's) do; a
    compile=False run first compiles the same kernels. Both runs' losses are equal bit for bit, on either side of
    the switch (the rebuilt kernels are the same code)."""
    monkeypatch.setattr(loop, "compile_gpt", lambda model, scope="model": model)
    kernels.set_qdq_kernel("compiled")
    try:
        cfg = tiny(tmp_path, recipe="fp8_hybrid", precision_schedule={"fwd_hp_from": 3})
        plain = train(cfg.replace(run_name="plain"), progress=False, verbose=False)
        before = dict(kernels._compiled)
        assert before and all(isinstance(k, kernel_direct.DirectKernel) for k in before.values())
        switched = train(cfg.replace(run_name="compiled", compile=True), progress=False, verbose=False)
        after = dict(kernels._compiled)
    finally:
        kernels.set_qdq_kernel(None)
    assert plain.status == switched.status == "completed"
    ref, got = plain.metric("train/loss").to_dict(), switched.metric("train/loss").to_dict()
    assert got == ref and sorted(ref) == [1, 2, 3, 4]
    assert after and not any(after.get(key) is k for key, k in before.items())      # rebuilt after the switch
    assert all(k.direct_calls > 0 for k in after.values())                           # and called directly since
    assert not any(_stale_signatures(k) for k in after.values()), {key[:1]: _stale_signatures(k)
                                                                    for key, k in after.items()}


def test_a_run_records_when_the_direct_path_was_off(tmp_path, monkeypatch):
    """summary.json's kernel_direct_off: the reason kernel_direct gave (here set by hand: the path is on in the
    installed torch, tests/test_numerics_kernels.py::test_the_direct_path_is_on_in_this_torch); absent while on."""
    cfg = tiny(tmp_path, recipe="hp", max_steps=2, eval_interval=2)
    monkeypatch.setattr(kernel_direct, "_off", None)
    on = train(cfg.replace(run_name="on"), progress=False, verbose=False)
    why = "direct calls off in torch 9.9: reading dynamo's cache entries raised AttributeError: gone"
    monkeypatch.setattr(kernel_direct, "_off", why)
    off = train(cfg.replace(run_name="off"), progress=False, verbose=False)
    assert "kernel_direct_off" not in json.loads((on.dir / "summary.json").read_text())
    assert json.loads((off.dir / "summary.json").read_text())["kernel_direct_off"] == why
