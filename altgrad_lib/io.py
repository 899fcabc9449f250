"""Files written so that a crash never leaves half of one: atomic writes, and tidy CSV values and truncation.

Every write goes to a temporary file in the same directory and is `os.replace`d over the target; checkpoints are
also fsync'ed (file and directory), because a lost checkpoint costs a run while a lost summary is re-written.
"""
from __future__ import annotations

import io
import json
import math
import os
from pathlib import Path
from typing import Any

import torch

def write_json(path: Path, obj: Any) -> None:
    """Atomic small-file write (tmp + os.replace) so readers never see half a JSON file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(obj, indent=2, default=str, allow_nan=True) + "\n")
    os.replace(tmp, path)


def write_csv(path: str | Path, frame: Any) -> None:
    """Atomic CSV write of a pandas frame (tmp + os.replace, no index): readers never see half a table."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    frame.to_csv(tmp, index=False)
    os.replace(tmp, path)


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
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write("".join(kept))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return dropped


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
