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

Uses dynamo internals (torch._dynamo.eval_frame._debug_get_cache_entry_list, CacheEntry.code / .guard_manager,
torch._C._dynamo.guards.GlobalStateGuard; present in torch 2.11-2.13). Where one is missing or a signature's
entry cannot be identified, calls keep going through dynamo (the same numerics, dynamo's cost).
"""
from __future__ import annotations

import types
from typing import Callable

import torch

try:   # private: where missing, every call goes through dynamo
    from torch._C._dynamo.guards import GlobalStateGuard
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list
except ImportError:    # pragma: no cover - other torch versions
    GlobalStateGuard = _debug_get_cache_entry_list = None

MAX_SIGNATURES = 64    # per configuration (the cpu model has ~10 shapes per configuration); beyond: through dynamo


def _signature(args: tuple) -> tuple:
    """What dynamo's tensor guards of a kernel read from its arguments (None stays None)."""
    return tuple(None if a is None else
                 (type(a), a.shape, a.stride(), a.storage_offset(), a.dtype, a.device, a.requires_grad,
                  a.is_inference()) for a in args)


def _modes_active() -> bool:
    """A torch function or dispatch mode is active (dynamo guards on these; calls then go through dynamo)."""
    return torch._C._len_torch_function_stack() > 0 or torch._C._len_torch_dispatch_stack() > 0


class DirectKernel:
    """Call `compiled` (torch.compile of `fn`, dynamic, fullgraph) bypassing dynamo's lookup for known signatures."""

    def __init__(self, fn: Callable, compiled: Callable):
        self.dynamo = compiled              # the torch.compile'd callable (every call through dynamo)
        self._code = fn.__code__
        self._globals = fn.__globals__      # where dynamo installs the compiled graphs the bytecode calls
        self._names = self._code.co_varnames[:self._code.co_argcount]
        self._known: dict[tuple, tuple[Callable, object]] = {}   # signature -> (entry's bytecode, global state)
        self.direct_calls = 0               # calls that bypassed dynamo (tests check the path is taken)
        self.enabled = GlobalStateGuard is not None and _debug_get_cache_entry_list is not None

    def __call__(self, *args):
        sig = _signature(args)
        hit = self._known.get(sig)
        if hit is not None and hit[1].check() and not _modes_active():
            self.direct_calls += 1
            return hit[0](*args)
        out = self.dynamo(*args)            # compiles or recompiles where needed, checks every guard
        if hit is None and self.enabled and len(self._known) < MAX_SIGNATURES and not _modes_active():
            try:
                fn = self._entry_for(args)
            except Exception:   # a torch whose private cache-entry API differs: through dynamo from now on
                self.enabled = False
                return out
            if fn is not None:
                self._known[sig] = (fn, GlobalStateGuard())
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
