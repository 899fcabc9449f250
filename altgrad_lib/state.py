"""Process state that exact resume needs: every RNG, and snapshots of a model's tensors (for replay / rollback)."""
from __future__ import annotations

import copy
import random
from typing import Any

import numpy as np
import torch

def capture_rng_state() -> dict[str, Any]:
    st: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": np.random.get_state(),
        "python": random.getstate(),
        "cuda": None,
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        st["cuda"] = torch.cuda.get_rng_state_all()
    return st


def restore_rng_state(st: dict[str, Any]) -> None:
    torch.set_rng_state(st["torch"])
    np.random.set_state(st["numpy"])
    random.setstate(st["python"])
    if st.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(st["cuda"])


def snapshot_state(model: torch.nn.Module) -> dict[str, Any]:
    """Everything but the parameters that one training step mutates: buffers (scaler amax history,
    counters), extra_state (SR generators) and the torch RNGs. Fresh tensors, the caller's to keep (the training
    loop's per-step snapshot is Snapshots', the same values into the same tensors every step)."""
    return {"state": _state_dict_state(model), "rng": _rng_now()}


def _state_dict_state(model: torch.nn.Module) -> dict[str, Any]:
    param_keys = {k for k, _ in model.named_parameters(remove_duplicate=False)}
    return {k: (v.detach().clone() if torch.is_tensor(v) else copy.deepcopy(v))
            for k, v in model.state_dict().items() if k not in param_keys}


def _rng_now() -> dict[str, Any]:
    rng = {"torch": torch.get_rng_state(), "cuda": None}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    return rng


class Snapshots:
    """snapshot_state of one model, step after step, without model.state_dict() and a clone per buffer (on the cpu
    profile's fp8_hybrid model: 168 buffers, 24 quantizers' extra state).

    The (key, module, buffer name) list of the non-parameter state_dict entries is built once (and checked against
    state_dict's keys; a model with state_dict hooks or keys it does not explain takes state_dict's path every time).
    Each take() reads every buffer from its module (so a buffer re-assigned since, e.g. by a device move, is the new
    one) and copies all of them in one torch._foreach_copy_ into the same tensors of its own every call, so a
    snapshot is valid until the next take() (the training loop uses it within its step; snapshot_state's tensors
    are the caller's to keep). Extra state (a Quantizer's SR generator) is get_extra_state()'s value, deep-copied
    unless the module's class sets `extra_state_is_fresh` (a new object every call, nothing shared). The values
    are state_dict's, so restore_snapshot / load_state_dict(strict=False) restore exactly that state."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self._bufs, self._extra = self._plan(model)
        self._src: list[torch.Tensor] = []
        self._dst: list[torch.Tensor] = []

    @staticmethod
    def _plan(model: torch.nn.Module):
        """([(key, module, buffer name)], [(key, module, fresh)]), or (None, None): state_dict's path."""
        mods = list(model.named_modules(remove_duplicate=False))
        if any(m._state_dict_hooks or m._state_dict_pre_hooks for _, m in mods):
            return None, None
        def join(prefix, name):
            return f"{prefix}.{name}" if prefix else name

        bufs = [(join(p, name), m, name) for p, m in mods
                for name, b in m._buffers.items() if b is not None and name not in m._non_persistent_buffers_set]
        extra = [(join(p, "_extra_state"), m, bool(getattr(type(m), "extra_state_is_fresh", False)))
                 for p, m in mods if type(m).get_extra_state is not torch.nn.Module.get_extra_state]
        params = {k for k, _ in model.named_parameters(remove_duplicate=False)}
        keys = sorted(k for k in model.state_dict(keep_vars=True) if k not in params)
        if keys != sorted(k for k, _, _ in bufs + extra):
            return None, None
        return bufs, extra

    def _state(self) -> dict[str, Any]:
        if self._bufs is None:
            return _state_dict_state(self.model)
        src = [m._buffers[name] for _, m, name in self._bufs]
        if len(src) != len(self._src) or any(a is not b for a, b in zip(src, self._src)):
            self._src = src
            self._dst = [torch.empty_like(b, memory_format=torch.preserve_format) for b in src]
        if src:
            with torch.no_grad():
                torch._foreach_copy_(self._dst, src)
        out: dict[str, Any] = {k: d for (k, _, _), d in zip(self._bufs, self._dst)}
        for key, m, fresh in self._extra:
            v = m.get_extra_state()
            out[key] = v if fresh else copy.deepcopy(v)
        return out

    def take(self) -> dict[str, Any]:
        """The model's buffers and extra state now, and the torch (and CUDA) RNG states."""
        return {"state": self._state(), "rng": _rng_now()}


def restore_snapshot(model: torch.nn.Module, snap: dict[str, Any]) -> None:
    model.load_state_dict(snap["state"], strict=False)
    torch.set_rng_state(snap["rng"]["torch"])
    if snap["rng"]["cuda"] is not None:
        torch.cuda.set_rng_state_all(snap["rng"]["cuda"])
