"""Tidy diagnostics files next to metrics.csv, and their readers.

    diagnostics.csv   step,layer,role,metric,value      one row per number (long / tidy format)
    events.csv        step,kind,layer,value,threshold   one row per early-warning event or "unavailable" note

Why CSV and not parquet: the run must not lose rows when it is killed, so every diagnostic step appends
and flushes its rows (a parquet file is written whole or per row group and a torn one is unreadable); a
resumed run drops the rows after its checkpoint with the same atomic rewrite as metrics.csv
(io.truncate_csv), so a killed-and-resumed run leaves the same file as an uninterrupted one.
`pd.read_csv` reads it in one call (read_diagnostics / read_events fix the dtypes); values are written
with repr(), so floats round-trip exactly. Names never contain commas (layer = module fqn).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

import pandas as pd

from altgrad_lib.io import fmt_value, truncate_csv

DIAG_FILE = "diagnostics.csv"
EVENTS_FILE = "events.csv"
DIAG_HEADER = "step,layer,role,metric,value\n"
EVENTS_HEADER = "step,kind,layer,value,threshold\n"
_DTYPES = {DIAG_FILE: {"step": "int64", "layer": "str", "role": "str", "metric": "str", "value": "float64"},
           EVENTS_FILE: {"step": "int64", "kind": "str", "layer": "str", "value": "float64",
                         "threshold": "float64"}}


class TidyWriter:
    """Append-only CSV writer: write(rows) appends and flushes; truncate(step) for resume."""

    def __init__(self, path: str | Path, header: str):
        self.path, self.header = Path(path), header
        self._fh = None

    def _open(self) -> None:
        if self._fh is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            new = not self.path.exists() or self.path.stat().st_size == 0
            self._fh = open(self.path, "a", encoding="utf-8")
            if new:
                self._fh.write(self.header)

    def write(self, rows: Iterable[tuple]) -> None:
        lines = []
        for r in rows:
            lines.append(",".join(_cell(c) for c in r) + "\n")
        if not lines:
            return
        self._open()
        self._fh.write("".join(lines))
        self._fh.flush()

    def truncate(self, keep_through_step: int) -> int:
        """Drop rows after `keep_through_step` (-1: all rows, a fresh start). Returns rows dropped."""
        self.close()
        if keep_through_step < 0:
            self.path.unlink(missing_ok=True)
            return 0
        return truncate_csv(self.path, keep_through_step, header=self.header)

    def sync(self) -> None:
        if self._fh is not None:
            self._fh.flush()
            os.fsync(self._fh.fileno())

    def close(self) -> None:
        if self._fh is not None and not self._fh.closed:
            self._fh.close()
        self._fh = None


def _cell(c: object) -> str:
    if isinstance(c, bool):
        return str(int(c))
    if isinstance(c, int):
        return str(c)
    if isinstance(c, float):
        return fmt_value(c)
    s = str(c)
    if "," in s or "\n" in s:
        raise ValueError(f"diagnostics names must not contain commas or newlines: {s!r}")
    return s


def _read(path: Path, name: str) -> pd.DataFrame:
    dt = _DTYPES[name]
    if not path.exists():
        return pd.DataFrame({k: pd.Series(dtype=v) for k, v in dt.items()})
    df = pd.read_csv(path, float_precision="round_trip", dtype=dt, keep_default_na=False,
                     na_values={"value": ["nan", "NaN"], "threshold": ["nan", "NaN"]})
    return df


def read_diagnostics(run_dir: str | Path) -> pd.DataFrame:
    """The run's diagnostics.csv as a tidy DataFrame (step, layer, role, metric, value); empty if none."""
    return _read(Path(run_dir) / DIAG_FILE, DIAG_FILE)


def read_events(run_dir: str | Path) -> pd.DataFrame:
    """The run's events.csv (step, kind, layer, value, threshold); empty if none."""
    return _read(Path(run_dir) / EVENTS_FILE, EVENTS_FILE)
