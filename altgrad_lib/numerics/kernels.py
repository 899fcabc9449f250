"""Compiled quantize-dequantize kernels for eager callers: one torch.compile'd function per quantizer
configuration, cached for the process (qdq_kernel_fn / block_kernel_fn build the eager functions, compiled_kernel
decides when to compile them; quantizer.py calls them).

Why: an eager fake quantization launches 15-40 small ATen ops (scale, round, unscale, counters; a block format
with its scales ~90), each a pass over a 64-256 wide activation, and on the cpu profile's model those ops cost
more than the GEMMs (bench/results/train_step.md). Inductor fuses one call into one or two loops. The traced
function is the eager one (quant.qdq, block_scaling.block_qdq), and rounding.py's compiled kernels are
bit-identical to its eager ones, so the output is too (tests/test_numerics_kernels.py); stochastic rounding draws
through the altgrad::sr_random_bits op, so the random stream is the same.

Modes (`set_qdq_kernel` or $ALTGRAD_QDQ_KERNEL; not part of a run's config: the numerics do not change):
  "auto"      (default) CPU tensors: a configuration is compiled once it has been called AUTO_AFTER times in
              this process (a cpu-model step makes 8-48 calls, so from the first or second step on); accelerators
              stay eager (their small ops are cheap launches). Chosen by measurement (bench/results/train_step.md,
              AMD EPYC, one thread, cpu profile model): eager steps at 1.63x fp32 instead of 2.60x (fp8_hybrid)
              and 4.7x instead of 6.8x (nvfp4). The compile costs a fresh process ~3 s (fp8_hybrid) to ~12 s
              (nvfp4) with torch's on-disk inductor cache warm (/tmp/torchinductor_$USER, which spawned study
              workers share: 7 s and 42 s with it empty), so it pays in a 600-step study run, not in a test:
              tests/conftest.py pins "eager" (the numerics/quantize test files took 2.9x as long under auto);
  "compiled"  compile at the first call (CPU and accelerators);
  "eager"     never compile;
  "dynamo"    as "compiled", but every call goes through torch.compile's frame hook (the path before the direct
              calls below; for comparison, and a way around them should they ever misbehave).
Inside a torch.compile'd model nothing is compiled here: the model's graph already fuses the same code.
If compiling a configuration fails (e.g. no C++ compiler for inductor, an inductor bug), a warning says why and
that configuration runs eager for the rest of the process (the kernel's function, called as is: same numerics).

Each configuration gets a function with its own code object, so dynamo's per-code cache (8 entries by default)
holds only that configuration's variants (dtype, contiguity); shapes are dynamic, so the model's many
activation and weight shapes share one compiled kernel.

Direct calls (kernel_direct.py): once dynamo has run a kernel for an argument signature (shapes, strides, dtypes,
...), later calls with that signature run the code dynamo chose for it (its cache entry's transformed bytecode:
the same compiled graph, the same argument handling) without dynamo's frame hook and guard evaluation, which cost
~30-80 us per call, about as much as a small kernel itself (bench/results/train_step.md); from the next call on,
without that bytecode either (kernel_direct's plans). The qdq kernels also update the Quantizer's state in place
(the Scaler's buffers, delayed scaling's scale included, and the counters, passed as inputs): one compiled call
instead of 8-30 small eager ops around it (bench/results/quantizer_call.md).
"""
from __future__ import annotations

import sys
import types
import warnings
from typing import Callable, Hashable

import torch
from torch.fx.experimental import _config as fx_config

from altgrad_lib.errors import ProcessMode, exc_line
from altgrad_lib.numerics.block_scaling import block_qdq
from altgrad_lib.numerics.quant import add_counts, qdq
from altgrad_lib.numerics.quant_spec import QuantSpec
from altgrad_lib.numerics.scaling import compact_scale, delayed_scale, record_into

QDQ_KERNEL_MODES = ("auto", "compiled", "eager", "dynamo")
QDQ_KERNEL_ENV = "ALTGRAD_QDQ_KERNEL"
AUTO_AFTER = 32        # auto: calls of one configuration before it is compiled (a step of the cpu model: 8-48)

_MODE = ProcessMode("quantize kernel mode", QDQ_KERNEL_ENV, QDQ_KERNEL_MODES, "auto")
_calls: dict[Hashable, int] = {}      # configuration -> eager calls so far (auto)
_compiled: dict[Hashable, Callable] = {}   # configuration -> DirectKernel (first_call while it compiles)
_failed: dict[Hashable, str] = {}     # configuration -> its compile error (eager from then on)


def set_qdq_kernel(mode: str | None) -> None:
    """Choose how eager quantizers run: "auto", "compiled", "eager" or "dynamo" (None: back to $ALTGRAD_QDQ_KERNEL /
    auto)."""
    _MODE.set(mode)


def qdq_kernel_mode() -> str:
    """The mode in force: set_qdq_kernel's, else $ALTGRAD_QDQ_KERNEL, else "auto"."""
    return _MODE.get()


def _own_code(fn: Callable, name: str) -> Callable:
    """A copy of fn with a code object of its own (dynamo keys its cache on the code object)."""
    code = fn.__code__.replace(co_name=name)
    return types.FunctionType(code, fn.__globals__, name, fn.__defaults__, fn.__closure__)


def _counting(key: Hashable, build: Callable[[], Callable]) -> tuple[Hashable, Callable[[], Callable]]:
    """A block-scaled configuration that does not count (want_stats False: eval, count=False) is served by the
    kernel of the same configuration that does, and the caller drops the counts: the outputs it uses are computed by
    the same code (the counts are extra outputs of block_qdq, the values do not depend on them). Eval's block kernels
    are then the training forward's, not more to trace and compile in every process (bench/results/
    run_fixed_costs.md). Keys as quantizer.py's _compiled_block ("block", spec, want_stats, rdt, axis) make them.
    Per-tensor / per-row ("qdq") keys are not mapped here: their training kernels update the Scaler's and the
    counters' buffers in place, so quantizer.py's _compiled_qdq calls the training kernel for eval itself, with
    scratch copies of those buffers."""
    if not (isinstance(key, tuple) and len(key) > 2 and key[0] == "block") or key[2] is not False:
        return key, build
    return key[:2] + (True,) + key[3:], lambda: _bind(build(), want_stats=True)


def _base_free(compiled: Callable) -> Callable:
    """compiled, called with views detached from their bases (the same tensor: shape, strides, storage). Dynamo
    traces a view input together with its base and guards on the base's sizes, so the flattened inputs of
    _compiled_qdq (x.detach().reshape(-1): a view of a 3-d activation or of a 2-d weight) recompiled a kernel
    per base rank and size relation (fp8_hybrid: 8 graphs for 3 kernels, ~0.4 s each per process); a detached
    view is no view (x._base None), so every flattened shape shares the one dynamic graph. Without duck sizing:
    a first input whose dims happen to be equal (a 64 x 64 weight, per_row) would otherwise tie them in the
    graph and recompile for the next shape. Only calls that reach dynamo come here (DirectKernel's direct path
    runs the graphs without it)."""
    def call(*args):
        with fx_config.patch(use_duck_shape=False):
            return compiled(*(a.detach() if isinstance(a, torch.Tensor) and a._is_view() else a for a in args))
    return call


def compiled_kernel(key: Hashable, device: torch.device, build: Callable[[], Callable]) -> Callable | None:
    """The compiled kernel of configuration `key` (build() makes its eager function), or None: run eager now."""
    key, build = _counting(key, build)
    if torch.compiler.is_compiling() or key in _failed:
        return None
    mode = qdq_kernel_mode()     # first: "eager" runs eager even where a kernel was compiled before
    if mode == "eager":
        return None
    fn = _compiled.get(key)
    if fn is not None:
        return getattr(fn, "dynamo", fn) if mode == "dynamo" else fn   # a DirectKernel's path through dynamo
    if mode == "auto" and device.type != "cpu":
        return None
    if mode == "auto":
        n = _calls.get(key, 0) + 1
        _calls[key] = n
        if n <= AUTO_AFTER:
            return None
    fn = build()
    own = _own_code(fn, f"qdq_kernel_{len(_compiled)}")
    compiled = _base_free(torch.compile(own, dynamic=True, fullgraph=True))

    def first_call(*args):
        """Compiles on the way; where that fails, this configuration stays eager (fn as is) and a warning says so."""
        try:
            out = compiled(*args)
        except Exception as e:   # e.g. inductor without a C++ compiler (Interrupted is no Exception: it passes)
            _failed[key] = exc_line(e, 250)
            _compiled.pop(key, None)
            warnings.warn(f"a compiled quantize kernel failed to build ({_failed[key]}); its quantizers run eager "
                          f"(slower, same numerics). {QDQ_KERNEL_ENV}=eager skips compiling.", RuntimeWarning,
                          stacklevel=3)
            return fn(*args)
        # local: kernel_direct imports torch._dynamo (seconds), which a process that never compiles (hp runs, eager
        # mode, notebook kernels that train in workers) need not pay; a process that compiles has it by now
        from altgrad_lib.numerics.kernel_direct import DirectKernel
        _compiled[key] = DirectKernel(own, compiled)
        return out

    _compiled[key] = first_call
    return first_call


def reset_kernels() -> None:
    """Forget compiled kernels, call counts and compile failures, as in a fresh process (tests). The compiled graphs
    are dynamo's: a test that wants them gone too calls reset_compiler(), then this."""
    _calls.clear()
    _compiled.clear()
    _failed.clear()


def reset_compiler() -> None:
    """torch.compiler.reset() (dynamo forgets every compiled graph: the training loop's precision-schedule switch
    under compile=True), with the kernels here dropped too: a DirectKernel would otherwise keep calling, without
    dynamo, the graphs of the signatures it knows, code dynamo dropped, while a call that reaches dynamo compiles the
    kernel anew beside them. Each kernel is built again at its next call (inductor's on-disk cache spares the C++
    compile). Call counts (auto) and compile failures stay: they describe this process's calls and compiler, which
    the reset does not change (a failed kernel would fail again, and warn again)."""
    torch.compiler.reset()
    _compiled.clear()


def direct_path_off() -> str | None:
    """Why kernel_direct's direct calls or plans are off in this process, or None: on, or no kernel compiled (a
    run's summary.json records a reason as kernel_direct_off)."""
    # not imported: no kernel was compiled, and importing it would import torch._dynamo (first_call's comment)
    kd = sys.modules.get(f"{__package__}.kernel_direct")
    return None if kd is None else kd.off_reason()


# ----------------------------------------------------------------------------------------------------------
# The eager functions that compiled_kernel compiles (one per configuration): the same code as Quantizer's eager
# path, with the SR bits drawn by `draw(x, token, dtype)` (quantizer's altgrad::sr_random_bits op: the same
# stream) and the scale computed inside (stateless kinds).
#
# A kernel reads its configuration from module globals (_SPEC, ...) that _bind gives each copy its own values of,
# not from a closure: under dynamic=True dynamo makes the ints of a closure's objects symbolic (the block size:
# inductor's loops over a symbolic block vectorize badly) but specializes those read from globals, and lifts
# their floats (format max, ...) to inputs, which inductor compiles to faster loops than the same floats as
# constants, or every dim marked dynamic (bench/results/train_step.md).

_SPEC = _WANT_MASK = _WANT_STATS = _RDT = _AXIS = _DRAW = _RECORD = _COUNT = None   # each copy's own


def _bind(body: Callable, **config) -> Callable:
    """A copy of body whose globals hold `config` (upper-cased, with a leading underscore)."""
    g = dict(body.__globals__)
    g.update({f"_{k.upper()}": v for k, v in config.items()})
    return types.FunctionType(body.__code__, g, body.__name__, body.__defaults__, body.__closure__)


def _qdq_body(x: torch.Tensor, token: torch.Tensor, history, scale, eps_hits, n_updates,
              n_elements, n_saturated, n_underflow):
    amax = hits = None
    delayed = _SPEC.scaling.kind == "delayed"
    if delayed:    # from the Scaler's buffers: updated as scale_for does (record), read as scale_peek does
        s = delayed_scale(x, _SPEC.fmt, _SPEC.scaling, history, scale, eps_hits, n_updates, _RECORD)
    elif _SPEC.scaling.kind == "none":
        s = torch.ones((), dtype=torch.float32, device=x.device)
    else:
        s, amax, hits = compact_scale(x, _SPEC.fmt, _SPEC.scaling)
    rbits = None if _RDT is None else _DRAW(x, token, _RDT)
    y, over, n_sat, n_under = qdq(x, s, _SPEC, None, _WANT_MASK, _WANT_STATS, rbits)
    # the state updates the eager path makes after the call, in place on the buffers (in the kernel: cheaper than
    # as separate small ops)
    if _RECORD and not delayed:
        record_into(history, scale, eps_hits, n_updates, s, amax, hits)
    if _COUNT:
        add_counts(n_elements, n_saturated, n_underflow, x.numel(), n_sat, n_under)
    # the mask only where the STE needs it: a bool output costs ~10x the rest of the kernel (inductor CPU); what the
    # kernel put into the buffers itself is not returned (each output: an allocation and wrapper work a call)
    if _RECORD:
        amax = hits = None
    if _COUNT:
        n_sat = n_under = None
    return y, over if _WANT_MASK else None, s, amax, hits, n_sat, n_under


def qdq_kernel_fn(spec: QuantSpec, want_mask: bool, want_stats: bool, rdt: torch.dtype | None,
                  draw: Callable, record: bool = False, count: bool = False) -> Callable:
    """kernel(x, token, history, scale, eps_hits, n_updates, n_elements, n_saturated, n_underflow) -> (y, mask, s,
    amax, eps hits, n_sat, n_under): the scale from x (amax and hits None for kinds "none" and "delayed"; delayed:
    from the Scaler's buffers, history .. n_updates), then quant.qdq; rdt: the SR
    bits' dtype (None: nearest). record: the Scaler's buffers updated as scale_for does (amax, eps hits returned as
    None); count (with want_stats): the Quantizer's counters (n_elements .. n_underflow) updated as Quantizer._count
    does (n_sat, n_under returned as None). Buffers not used may be None."""
    return _bind(_qdq_body, spec=spec, want_mask=want_mask, want_stats=want_stats, rdt=rdt, draw=draw,
                 record=record, count=count)


def _block_body(x: torch.Tensor, token: torch.Tensor):
    bits = None if _RDT is None else (lambda xs: _DRAW(xs, token, _RDT))
    return block_qdq(x, _SPEC.fmt, _SPEC.scaling, _SPEC.rounding, bits, _SPEC.sr_bits, want_stats=_WANT_STATS,
                     axis=_AXIS)


def block_kernel_fn(spec: QuantSpec, want_stats: bool, rdt: torch.dtype | None, axis: int,
                    draw: Callable) -> Callable:
    """kernel(x, token) -> block_qdq's (y, n_sat, n_under)."""
    return _bind(_block_body, spec=spec, want_stats=want_stats, rdt=rdt, axis=axis, draw=draw)


def _transpose_body(t: torch.Tensor):
    return (t.t().contiguous(),)     # a tuple: DirectKernel makes plans for tuple returns only


def transposed(t: torch.Tensor) -> torch.Tensor:
    """t.t().contiguous() of a 2-d t: the same tensor (values, contiguous strides), by a compiled kernel where the
    mode compiles (compiled_kernel's rules). Inductor's tiled transpose, called direct, took ~0.45x ATen's copy on
    the cpu model's 1024 x 64-256 operands (one thread, AMD EPYC: 73 against 167 us for 1024 x 256); gemm_quant's
    column-wise RHT copies transpose 16 of them a step (bench/results/block_step.md)."""
    eager = t.dim() != 2 or (t.requires_grad and torch.is_grad_enabled())     # autograd through it: ATen's
    kern = None if eager else compiled_kernel(("transpose",), t.device, lambda: _transpose_body)
    if kern is None:
        return t.t().contiguous()
    with torch.no_grad():
        return kern(t.detach())[0]
