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

import copy
import hashlib
import io
import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from altgrad_lib.errors import UserError

CHECKPOINT_FORMAT = 1


class CheckpointError(UserError, RuntimeError):
    """A checkpoint that cannot be used: missing keys, truncated/corrupt file, or another config."""


# ----------------------------------------------------------------------------------------------
# RNG state


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


# ----------------------------------------------------------------------------------------------
# atomic write


def _write_payload(fh: Any, data: bytes) -> None:
    """Single seam for the bytes hitting disk (tests patch it to simulate a kill mid-write)."""
    fh.write(data)


def _fsync_dir(d: Path) -> None:
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_torch_save(obj: Any, path: str | Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    torch.save(obj, buf)
    # pid in the name: two writers never share a tmp file; leftovers from a killed writer are removed
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    try:
        with open(tmp, "wb") as fh:
            _write_payload(fh, buf.getvalue())
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    _fsync_dir(path.parent)


def remove_stale_tmp(directory: str | Path) -> list[Path]:
    """Delete tmp files left by a writer that died mid-checkpoint; returns what was removed."""
    d = Path(directory)
    removed = []
    if d.is_dir():
        for p in d.glob(".*.tmp.*"):
            p.unlink(missing_ok=True)
            removed.append(p)
    return removed


# ----------------------------------------------------------------------------------------------
# save / load


def save_checkpoint(path: str | Path, *, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                    step: int, config_hash: str, extra: dict[str, Any] | None = None) -> None:
    import altgrad_lib

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
