"""DirectKernel: a torch.compile'd quantize kernel (kernels.compiled_kernel) called without dynamo's per-call cost.

A call of a torch.compile'd function goes through dynamo's frame hook: it looks up the function's cache entries and
evaluates their guards (tensor dtypes, sizes and strides, the symbolic-shape relations, global state), then runs
the entry's transformed bytecode, which calls the compiled graph. For a quantize kernel on the cpu profile's
model that lookup costs ~30-80 us a call against a kernel of 30-500 us (bench/results/train_step.md). The guards'
answer depends only on what `_signature` reads (each argument's type, shape, strides, offset, dtype, device,
autograd flags) and on the global state that dynamo's GlobalStateGuard checks (grad mode, autocast, ...): the
kernels' configuration lives in their own frozen globals (kernels._bind). So the first call of each signature goes
through dynamo, and the cache entry whose guards pass for it (the one dynamo ran) is remembered; later calls with
that signature, under the same global state and with no torch function / dispatch mode active, run the entry's
bytecode as a plain function: the same compiled graph with the same argument handling, hence the same output bits
and the same stochastic-rounding draws.

Plans (one level further down): the entry's bytecode only builds the compiled graph's argument list (the call's
tensors, its sizes, the floats dynamo lifted to 0-d tensors: read from the kernel's frozen configuration), calls
the graph through a dynamo-disabling wrapper and AOTAutograd's forward wrapper, and picks the return tuple out of
the graph's outputs: ~20 us of Python a call. For a known signature all of that is fixed, so the first direct call
of a signature runs the bytecode once with the graph call recorded (_Plan.capture) and later calls rebuild the same
argument list (the call's tensors in their slots, the recorded constants elsewhere) and call AOTAutograd's runtime
wrapper (the same compiled graph, the same input-mutation and output handling) themselves. A plan is only made
where every piece is recognized: each graph argument is one of the call's tensors, an int that is one of their
sizes / strides / offsets (fixed by the signature), or a fresh 0-d tensor the graph leaves unmutated; each returned
value is a graph output, one of the call's arguments, or None; the wrappers are the expected ones with no
parameters bound. Otherwise the signature keeps running its bytecode (the path above).

Uses dynamo internals (torch._dynamo.eval_frame._debug_get_cache_entry_list, CacheEntry.code / .guard_manager,
torch._C._dynamo.guards.GlobalStateGuard, the disable wrapper's __wrapped__ and AOTAutograd's forward closure;
present in torch 2.11-2.13). Where one is missing or differs, calls keep going through dynamo (direct calls off) or
through the entry's bytecode (plans off): the same numerics at dynamo's cost. That is said once per process (a
RuntimeWarning with the reason; off_reason() gives it, and a run records it in summary.json as kernel_direct_off),
and tests/test_numerics_kernels.py::test_the_direct_path_is_on_in_this_torch, run on torch 2.13 and 2.11
(make test-torch211), fails where either is off. A signature whose entry cannot be identified (e.g. dynamo ran the
kernel eagerly past its recompile limit) or whose plan's pieces are not all recognized (_Plan._make) is no API
change: it keeps the slower path without a warning.
"""
from __future__ import annotations

import inspect
import types
import warnings
from typing import Callable

import torch

from altgrad_lib.errors import exc_line

try:   # private: where missing, every call goes through dynamo (_switch_off says so at the first kernel)
    from torch._C._dynamo.eval_frame import get_eval_frame_callback
    from torch._C._dynamo.guards import GlobalStateGuard
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list
    _MISSING = None
except ImportError as e:    # pragma: no cover - other torch versions
    GlobalStateGuard = _debug_get_cache_entry_list = get_eval_frame_callback = None
    _MISSING = exc_line(e)

MAX_SIGNATURES = 64    # per configuration (the cpu model has ~10 shapes per configuration); beyond: through dynamo
_off: str | None = None   # why direct calls or plans went off in this process (the first reason); None: on


def off_reason() -> str | None:
    """Why kernel_direct's direct calls or plans are off in this process (the first reason), or None: on (as far as
    the kernels compiled so far went)."""
    return _off


def _switch_off(what: str, reason: str) -> None:
    """Record why `what` ("direct calls" / "plans") is off; the first time in the process, a warning says so: a
    speed-up lost to a torch whose private API differs (module docstring), with the numerics unchanged."""
    global _off
    if _off is not None:
        return
    _off = f"{what} off in torch {torch.__version__}: {reason}"
    warnings.warn(f"quantize kernels: kernel_direct's {_off}; the kernels run through dynamo's per-call lookup "
                  f"instead (same numerics, slower). tests/test_numerics_kernels.py::"
                  f"test_the_direct_path_is_on_in_this_torch checks a torch for this", RuntimeWarning, stacklevel=3)


def _signature(args: tuple) -> tuple:
    """What dynamo's tensor guards of a kernel read from its arguments (None stays None)."""
    return tuple(None if a is None else
                 (type(a), a.shape, a.stride(), a.storage_offset(), a.dtype, a.device, a.requires_grad,
                  a.is_inference()) for a in args)


def _modes_active() -> bool:
    """A torch function or dispatch mode is active (dynamo guards on these; calls then go through dynamo)."""
    return torch._C._len_torch_function_stack() > 0 or torch._C._len_torch_dispatch_stack() > 0


class _Plan:
    """A signature's call of its compiled graph without the entry's bytecode (module docstring: Plans)."""

    __slots__ = ("target", "template", "slots", "outs")

    def __init__(self, target: Callable, template: list, slots: tuple, outs: tuple):
        self.target = target        # AOTAutograd's runtime wrapper: takes the graph's argument list
        self.template = template    # the graph's arguments, the call's tensors' places None
        self.slots = slots          # (place in template, index of the call's argument)
        self.outs = outs            # per returned value: (0, graph output index) | (1, argument index) | (2, None)

    def __call__(self, args: tuple) -> tuple:
        a = self.template.copy()
        for pos, j in self.slots:
            a[pos] = args[j]
        out = self.target(a)
        return tuple(out[i] if kind == 0 else args[i] if kind == 1 else None for kind, i in self.outs)

    @staticmethod
    def capture(fn: Callable, args: tuple) -> tuple[object, _Plan | None]:
        """Run the entry's bytecode fn on args with its graph call recorded: (its result, the plan or None)."""
        names = [n for n in fn.__code__.co_names if n.startswith("__compiled_fn")]
        graph = fn.__globals__.get(names[0]) if len(names) == 1 else None
        if graph is None:
            _switch_off("plans", f"the entry's bytecode calls {len(names)} '__compiled_fn' globals, not one graph")
            return fn(*args), None
        seen: list = []

        def recorded(*a):
            out = graph(*a)
            seen.append((a, out))
            return out

        glb = dict(fn.__globals__)
        glb[names[0]] = recorded
        res = types.FunctionType(fn.__code__, glb, fn.__name__)(*args)
        try:
            plan = _Plan._make(graph, seen, args, res) if len(seen) == 1 else None
            why = _Plan._unwrap(graph)[1] if plan is None else None
        except Exception as e:   # pragma: no cover - an unexpected wrapper structure: keep the bytecode
            plan, why = None, exc_line(e)
        if why is not None:      # the wrappers differ (a torch change), not this signature's arguments
            _switch_off("plans", why)
        return res, plan

    @staticmethod
    def _unwrap(graph: Callable) -> tuple[Callable | None, str | None]:
        """AOTAutograd's runtime wrapper behind the graph the entry's bytecode calls, or (None, why not): the
        private structure a plan relies on (the module docstring's Plans)."""
        if not getattr(graph, "_torchdynamo_disable", False):
            return None, "the compiled graph is not wrapped by dynamo's disable"
        fwd = getattr(graph, "__wrapped__", None)       # aot_module_simplified's forward(*runtime_args)
        code = getattr(fwd, "__code__", None)
        if code is None or not code.co_flags & inspect.CO_VARARGS or not fwd.__closure__:
            return None, "the disable wrapper's __wrapped__ is not AOTAutograd's forward(*args) closure"
        cells = dict(zip(code.co_freevars, (c.cell_contents for c in fwd.__closure__)))
        target = getattr(cells.get("compiled_fn"), "compiled_fn", None)   # SerializableCompiledFunction's
        if not callable(target) or "params_buffers_flat" not in cells:
            return None, "AOTAutograd's forward closure has no compiled_fn.compiled_fn / params_buffers_flat"
        if cells["params_buffers_flat"] != []:
            return None, None     # a graph with parameters: not a kernel's (no API change)
        return target, None

    @staticmethod
    def _make(graph: Callable, seen: list, args: tuple, res: object) -> _Plan | None:
        (gargs, gout), = seen
        target = _Plan._unwrap(graph)[0]
        if target is None or not isinstance(gout, list):
            return None
        tensors = [(j, a) for j, a in enumerate(args) if isinstance(a, torch.Tensor)]
        ints = {n for _, a in tensors for n in (*a.shape, *a.stride(), a.storage_offset())}
        ptrs = {a.untyped_storage().data_ptr() for _, a in tensors}
        template, slots = [], []
        for pos, v in enumerate(gargs):
            j = next((j for j, a in tensors if v is a), None)
            if j is not None:
                slots.append((pos, j))
                v = None
            elif isinstance(v, bool) or not isinstance(v, (int, torch.Tensor)):
                return None
            elif isinstance(v, int):
                if v not in ints:          # a size fixed by the signature, nothing else
                    return None
            elif (type(v) is not torch.Tensor or v.dim() or v.requires_grad or v._version
                  or v.untyped_storage().data_ptr() in ptrs):
                return None                # only fresh, unmutated 0-d constants (dynamo's lifted floats)
            template.append(v)
        if not isinstance(res, tuple):
            return None
        outs = []
        for r in res:
            if r is None:
                outs.append((2, None))
                continue
            i = next((i for i, o in enumerate(gout) if r is o), None)
            j = next((j for j, a in enumerate(args) if r is a), None)
            if i is not None:
                outs.append((0, i))
            elif j is not None:
                outs.append((1, j))
            else:
                return None
        return _Plan(target, template, tuple(slots), tuple(outs))


class _Known:
    """A signature's cache entry: its bytecode as a function, the global state it was found under, its plan."""

    __slots__ = ("fn", "state", "plan")

    def __init__(self, fn: Callable, state):
        self.fn, self.state = fn, state
        self.plan: _Plan | None | bool = None     # None: not tried yet; False: none (the bytecode runs)


class DirectKernel:
    """Call `compiled` (torch.compile of `fn`, dynamic, fullgraph) bypassing dynamo's lookup for known signatures."""

    def __init__(self, fn: Callable, compiled: Callable):
        self.dynamo = compiled              # the torch.compile'd callable (every call through dynamo)
        self._code = fn.__code__
        self._globals = fn.__globals__      # where dynamo installs the compiled graphs the bytecode calls
        self._names = self._code.co_varnames[:self._code.co_argcount]
        self._known: dict[tuple, _Known] = {}   # signature -> its entry
        self.direct_calls = 0               # calls that bypassed dynamo (tests check the path is taken)
        self.plan_calls = 0                 # of those, calls that also skipped the entry's bytecode (a plan)
        self.enabled = _MISSING is None
        self.plans = self.enabled           # False: direct calls run the bytecode (no plans)
        if _MISSING is not None:            # pragma: no cover - other torch versions
            _switch_off("direct calls", _MISSING)

    def __call__(self, *args):
        sig = _signature(args)
        hit = self._known.get(sig)
        if hit is not None and hit.state.check() and not _modes_active():
            self.direct_calls += 1
            plan = hit.plan
            if plan and get_eval_frame_callback() is None:   # else: the bytecode's dynamo-disabling wrapper
                self.plan_calls += 1
                return plan(args)
            if plan is None and self.plans:
                out, hit.plan = _Plan.capture(hit.fn, args)
                hit.plan = hit.plan or False
                return out
            return hit.fn(*args)
        out = self.dynamo(*args)            # compiles or recompiles where needed, checks every guard
        if hit is None and self.enabled and len(self._known) < MAX_SIGNATURES and not _modes_active():
            try:
                fn = self._entry_for(args)
            except Exception as e:   # a torch whose private cache-entry API differs: through dynamo from now on
                self.enabled = False
                _switch_off("direct calls", f"reading dynamo's cache entries raised {exc_line(e)}")
                return out
            if fn is not None:
                self._known[sig] = _Known(fn, GlobalStateGuard())
        return out

    def _entry_for(self, args: tuple) -> Callable | None:
        """The bytecode of the cache entry dynamo runs for args (the first whose guards pass), as a function."""
        f_locals = dict(zip(self._names, args))
        for entry in _debug_get_cache_entry_list(self._code):
            if entry.guard_manager.check(f_locals):
                code = entry.code
                if code.co_argcount != len(args) or code.co_freevars:
                    return None
                return types.FunctionType(code, self._globals, self._code.co_name)
        return None
