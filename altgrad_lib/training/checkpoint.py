"""Atomic, self-describing training checkpoints and the RNG capture/restore that makes resume exact.

A checkpoint is one `torch.save` dict: model state (incl. quantizer/scaler buffers and stochastic-rounding
generator extra_state), optimizer state, step (= LR-schedule step = data position, since batches are a
pure function of (seed, step)), every RNG, the config hash and library versions, and a sha256 `checksum` of
all of it (tensor bytes, shapes, dtypes, scalars): torch.load does not notice flipped bytes inside tensor data,
load_checkpoint does.

Writes go to a tmp file in the same directory, are fsync'ed, then `os.replace`d over the target, so a
crash mid-write leaves the previous checkpoint intact.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import torch

import altgrad_lib
from altgrad_lib.errors import UserError
from altgrad_lib.io import atomic_torch_save
from altgrad_lib.state import capture_rng_state, restore_rng_state

CHECKPOINT_FORMAT = 1


class CheckpointError(UserError, RuntimeError):
    """A checkpoint that cannot be used: missing keys, truncated/corrupt file, or another config."""


# ----------------------------------------------------------------------------------------------
# RNG state


# ----------------------------------------------------------------------------------------------
# atomic write


# ----------------------------------------------------------------------------------------------
# save / load


def save_checkpoint(path: str | Path, *, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                    step: int, config_hash: str, extra: dict[str, Any] | None = None) -> None:
    state = {
        "format": CHECKPOINT_FORMAT,
        "altgrad_version": altgrad_lib.__version__,
        "torch_version": torch.__version__,
        "config_hash": config_hash,
        "step": int(step),
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "rng": capture_rng_state(),
        "extra": extra or {},
    }
    state["checksum"] = state_checksum(state)
    atomic_torch_save(state, path)


def state_checksum(state: dict[str, Any]) -> str:
    """sha256 over every entry but "checksum", walked in order: path, dtype, shape and bytes of each tensor /
    ndarray, repr of each scalar or string (objects of other types: their type name only, never an address)."""
    h = hashlib.sha256()

    def walk(o: Any, path: str) -> None:
        if torch.is_tensor(o):
            t = o.detach().cpu().contiguous()
            h.update(f"{path}|{t.dtype}|{tuple(t.shape)}|".encode())
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
        elif isinstance(o, np.ndarray):
            a = np.ascontiguousarray(o)
            h.update(f"{path}|{a.dtype}|{a.shape}|".encode())
            h.update(a.tobytes())
        elif isinstance(o, dict):
            for k, v in o.items():
                walk(v, f"{path}/{k}")
        elif isinstance(o, (list, tuple)):
            for i, v in enumerate(o):
                walk(v, f"{path}/{i}")
        elif o is None or isinstance(o, (bool, int, float, str, bytes)):
            h.update(f"{path}={o!r}|".encode())
        else:
            h.update(f"{path}:{type(o).__name__}|".encode())

    walk({k: v for k, v in state.items() if k != "checksum"}, "")
    return h.hexdigest()


_REQUIRED = ("format", "config_hash", "step", "model", "optimizer", "rng")


def load_checkpoint(path: str | Path, expected_hash: str | None = None) -> dict[str, Any]:
    """Read and validate a checkpoint; raises CheckpointError naming the file and the problem."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    try:
        # weights_only=False: the RNG states hold numpy arrays/tuples; these files are written by
        # save_checkpoint() into our own run directory, never downloaded.
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # truncated zip, garbage bytes, ... -> one clear error type
        raise CheckpointError(
            f"checkpoint {path} is corrupt or truncated ({type(e).__name__}: {e}); "
            f"delete it (or the run dir) to restart the run") from e
    if not isinstance(state, dict) or any(k not in state for k in _REQUIRED):
        missing = [k for k in _REQUIRED if not isinstance(state, dict) or k not in state]
        raise CheckpointError(f"checkpoint {path} is not an altgrad checkpoint (missing keys {missing})")
    if state["format"] != CHECKPOINT_FORMAT:
        raise CheckpointError(f"checkpoint {path} has format {state['format']}, this code reads "
                              f"format {CHECKPOINT_FORMAT}")
    if "checksum" in state and state_checksum(state) != state["checksum"]:   # older checkpoints have none
        raise CheckpointError(f"checkpoint {path} is corrupt: its data no longer matches the checksum written "
                              f"with it (flipped bytes on disk?); delete it (or the run dir) to restart the run")
    if expected_hash is not None and state["config_hash"] != expected_hash:
        raise CheckpointError(
            f"checkpoint {path} was written for config hash {state['config_hash']}, but the current "
            f"config hash is {expected_hash}; use another run_name/out_dir or delete the run dir")
    return state


def restore_training_state(state: dict[str, Any], *, model: torch.nn.Module,
                           optimizer: torch.optim.Optimizer, path: str | Path = "<checkpoint>") -> int:
    """Load model/optimizer/RNG from a validated checkpoint dict; returns the step to resume after."""
    try:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
    except (RuntimeError, ValueError, KeyError) as e:
        raise CheckpointError(f"checkpoint {path} does not match the model/optimizer built from the "
                              f"config: {e}") from e
    restore_rng_state(state["rng"])
    return int(state["step"])


# ----------------------------------------------------------------------------------------------
# in-memory snapshot (divergence replay)


