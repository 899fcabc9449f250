"""Tests for altgrad_lib.io: the one atomic write (a crash never leaves half a file, durable writes are fsync'ed),
and that no other module writes its files with its own tmp + os.replace."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from altgrad_lib import io as aio

PKG = Path(__file__).resolve().parent.parent / "altgrad_lib"


def test_atomic_write_replaces_the_whole_file_or_nothing(tmp_path):
    p = tmp_path / "a.txt"
    aio.atomic_write_text(p, "first\n")
    aio.atomic_write_bytes(p, b"second\n")
    assert p.read_text() == "second\n"
    with pytest.raises(KeyboardInterrupt), aio.atomic_file(p) as fh:
        fh.write(b"half of the th")
        raise KeyboardInterrupt("simulated crash mid-write")
    assert p.read_text() == "second\n" and [q.name for q in tmp_path.iterdir()] == ["a.txt"]


def test_durable_writes_fsync_the_file_and_its_directory(tmp_path, monkeypatch):
    synced = []
    real = aio.os.fsync
    monkeypatch.setattr(aio.os, "fsync", lambda fd: synced.append(fd) or real(fd))
    aio.atomic_write_text(tmp_path / "summary.json", "{}")
    assert synced == []                                 # a lost summary is re-written: no fsync
    aio.atomic_write_text(tmp_path / "metrics.csv", "step,name,value\n", durable=True)
    assert len(synced) == 2                             # the file, then the directory entry


def test_a_killed_writer_leaves_a_name_remove_stale_tmp_knows(tmp_path):
    with pytest.raises(RuntimeError), aio.atomic_file(tmp_path / "last.pt") as fh:
        left = Path(fh.name)
        raise RuntimeError
    left.write_bytes(b"torn")                           # what SIGKILL would have left behind
    assert aio.remove_stale_tmp(tmp_path) == [left]


def test_no_module_writes_files_with_its_own_tmp_and_replace():
    own = [f"{p.relative_to(PKG)}:{i}" for p in PKG.rglob("*.py") if p.name != "io.py"
           for i, line in enumerate(p.read_text().splitlines(), 1)
           if re.search(r"\bos\.(replace|rename)\(|\btmp\w*\.(replace|rename)\(", line.split("#")[0])]
    assert own == []
