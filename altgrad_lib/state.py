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
    counters), extra_state (SR generators) and the torch RNGs. Cheap enough to take every step."""
    param_keys = {k for k, _ in model.named_parameters(remove_duplicate=False)}
    sd = {k: (v.detach().clone() if torch.is_tensor(v) else copy.deepcopy(v))
          for k, v in model.state_dict().items() if k not in param_keys}
    rng = {"torch": torch.get_rng_state(), "cuda": None}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    return {"state": sd, "rng": rng}


def restore_snapshot(model: torch.nn.Module, snap: dict[str, Any]) -> None:
    model.load_state_dict(snap["state"], strict=False)
    torch.set_rng_state(snap["rng"]["torch"])
    if snap["rng"]["cuda"] is not None:
        torch.cuda.set_rng_state_all(snap["rng"]["cuda"])
