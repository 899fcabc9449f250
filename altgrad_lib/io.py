"""Files written so that a crash never leaves half of one: atomic writes, and tidy CSV values and truncation.

Every write goes through `atomic_file`: a temporary file in the same directory (named per process and call, so
two writers never share one), `os.replace`d over the target. `durable=True` also fsyncs the file and its
directory before returning; checkpoints and truncated metrics use it, because losing them costs a run, while a
lost summary, index or config is re-written by the next call.
"""
from __future__ import annotations

import contextlib
import io
import json
import math
import os
import uuid
from pathlib import Path
from typing import Any, BinaryIO, Iterator

import torch


@contextlib.contextmanager
def atomic_file(path: str | Path, *, durable: bool = False) -> Iterator[BinaryIO]:
    """A binary file handle whose content replaces `path` only when the block ends without an exception; the
    temporary file is removed otherwise (a killed process leaves `.<name>.tmp.<pid>.<id>`: remove_stale_tmp)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}.{uuid.uuid4().hex[:8]}")
    try:
        with open(tmp, "wb") as fh:
            yield fh
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    if durable:
        _fsync_dir(path.parent)


def atomic_write_bytes(path: str | Path, data: bytes, *, durable: bool = False) -> None:
    with atomic_file(path, durable=durable) as fh:
        fh.write(data)


def atomic_write_text(path: str | Path, text: str, *, durable: bool = False) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), durable=durable)


def write_json(path: Path, obj: Any) -> None:
    """Atomic small-file write so readers never see half a JSON file (non-finite floats as NaN / Infinity)."""
    atomic_write_text(path, json.dumps(obj, indent=2, default=str, allow_nan=True) + "\n")


def write_csv(path: str | Path, frame: Any) -> None:
    """Atomic CSV write of a pandas frame (no index): readers never see half a table."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, frame.to_csv(index=False))


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text())


def fmt_value(v: float) -> str:
    # repr round-trips float64 exactly; "nan"/"inf" are read back by pandas as NaN/inf
    v = float(v)
    return repr(v) if math.isfinite(v) else ("nan" if math.isnan(v) else ("inf" if v > 0 else "-inf"))


def truncate_csv(path: str | Path, keep_through_step: int, header: str) -> int:
    """Drop rows with step > `keep_through_step` (and a torn last line from a crash); atomic rewrite.

    Called on resume so the file equals the one an uninterrupted run writes. Returns rows dropped.
    Any tidy CSV whose first column is the step works (`header` names its columns, e.g. diagnostics.csv).
    """
    path = Path(path)
    if not path.exists():
        return 0
    kept, dropped, ncols = [header], 0, header.count(",") + 1
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(keepends=True)):
        if i == 0 and line == header:
            continue
        parts = line.rstrip("\n").split(",")
        ok = line.endswith("\n") and len(parts) == ncols
        try:
            ok = ok and int(parts[0]) <= keep_through_step
        except ValueError:
            ok = False
        if ok:
            kept.append(line)
        else:
            dropped += 1
    atomic_write_text(path, "".join(kept), durable=True)
    return dropped


def _write_payload(fh: Any, data: bytes) -> None:
    """Single seam for a checkpoint's bytes hitting disk (tests patch it to simulate a kill mid-write)."""
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
    with atomic_file(path, durable=True) as fh:
        _write_payload(fh, buf.getvalue())


def remove_stale_tmp(directory: str | Path) -> list[Path]:
    """Delete tmp files left by a writer that died mid-write (atomic_file's names); returns what was removed."""
    d = Path(directory)
    removed = []
    if d.is_dir():
        for p in d.glob(".*.tmp.*"):
            p.unlink(missing_ok=True)
            removed.append(p)
    return removed
