"""Tests for altgrad_lib.monitors.writer: append + flush, exact float round trip, resume truncation."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from altgrad_lib.monitors.writer import (DIAG_FILE, DIAG_HEADER, EVENTS_FILE, EVENTS_HEADER, TidyWriter,
                                         read_diagnostics, read_events)


def test_rows_round_trip_and_survive_a_torn_line(tmp_path):
    w = TidyWriter(tmp_path / DIAG_FILE, DIAG_HEADER)
    rows = [(1, "transformer.h.0.mlp.c_fc", "X", "overflow_frac", 0.1), (1, "", "", "clipped", 1.0),
            (2, "a", "dY", "amax", math.nan), (3, "a", "W", "hist.log2w:-7", 1 / 3), (3, "a", "W", "x", math.inf)]
    w.write(rows)
    df = read_diagnostics(tmp_path)            # readable at once: every write is flushed
    assert list(df.columns) == ["step", "layer", "role", "metric", "value"] and len(df) == 5
    assert df["value"].iloc[3] == 1 / 3 and math.isnan(df["value"].iloc[2]) and df["value"].iloc[4] == math.inf
    assert df["layer"].iloc[1] == "" and df["step"].dtype == "int64"
    w.close()
    with open(tmp_path / DIAG_FILE, "a") as fh:
        fh.write("4,a,W,amax,0.")              # a crash mid-line
    assert TidyWriter(tmp_path / DIAG_FILE, DIAG_HEADER).truncate(2) == 3   # the two step-3 rows and the torn line
    df = read_diagnostics(tmp_path)
    assert df["step"].tolist() == [1, 1, 2]
    with pytest.raises(ValueError, match="commas"):
        w.write([(5, "a,b", "X", "m", 1.0)])


def test_events_and_fresh_start(tmp_path):
    w = TidyWriter(tmp_path / EVENTS_FILE, EVENTS_HEADER)
    w.write([(7, "loss_spike", "", 9.5, 6.25)])
    w.sync()
    ev = read_events(tmp_path)
    assert ev.to_dict("records") == [{"step": 7, "kind": "loss_spike", "layer": "", "value": 9.5, "threshold": 6.25}]
    w.truncate(-1)
    assert not (tmp_path / EVENTS_FILE).exists() and len(read_events(tmp_path)) == 0
    empty = read_diagnostics(tmp_path)         # no file yet: an empty table with the right columns
    assert isinstance(empty, pd.DataFrame) and list(empty.columns) == ["step", "layer", "role", "metric", "value"]
