"""bench/verdict_stability.py: the agreement rule of issue 47 item 5 (a row may change verdict between float paths
only where its CI touches ±δ), on hand-made claims tables."""
from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from altgrad_lib.studies.verdicts import KIND_COLUMN

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import verdict_stability


def _table(rows):
    cols = ["comparison", "level", "verdict", KIND_COLUMN, "gap_nats", "ci_lo", "ci_hi", "delta_nats"]
    return pd.DataFrame([("recipe vs hp", lev, kind, kind, (lo + hi) / 2, lo, hi, 0.01) for lev, kind, lo, hi in rows],
                        columns=cols)


def test_a_flip_is_allowed_only_where_the_ci_touches_delta():
    native = _table([("E4M3", "equivalent", -0.004, 0.004),     # inside ±δ on both: must agree
                     ("E7M0", "worse", 0.006, 0.02),           # touches +δ: may flip
                     ("E1M6", "worse", 0.02, 0.04)])           # beyond +δ on both paths, yet flips below
    default = _table([("E4M3", "equivalent", -0.003, 0.005),
                      ("E7M0", "inconclusive", -0.001, 0.02),
                      ("E1M6", "inconclusive", 0.015, 0.035)])
    t = verdict_stability.stability_table({"native": native, "default": default}).set_index("level")
    assert t.loc["E4M3", ["same", "near ±δ", "allowed"]].tolist() == [True, False, True]
    assert t.loc["E7M0", ["same", "near ±δ", "allowed"]].tolist() == [False, True, True]
    assert t.loc["E1M6", ["same", "near ±δ", "allowed"]].tolist() == [False, False, False]
    assert t.loc["E7M0", "verdict (default)"] == "inconclusive" and t.loc["E7M0", "gap [CI] (native)"] == \
        "+0.0130 [+0.0060, +0.0200]"


def test_a_row_missing_on_one_path_is_not_called_the_same():
    t = verdict_stability.stability_table({"a": _table([("x", "worse", 0.02, 0.04)]), "b": _table([])})
    assert t.same.tolist() == [False]


def test_run_differences_are_the_spread_over_paths():
    f = {"a": pd.DataFrame({"run": ["r1", "r2"], "final_val_loss": [2.5, 2.6]}),
         "b": pd.DataFrame({"run": ["r1", "r2", "r3"], "final_val_loss": [2.5, 2.604, 9.0]})}
    d = verdict_stability.run_differences(f).set_index("run").spread_nats
    assert d.index.tolist() == ["r1", "r2"] and d["r1"] == 0 and abs(d["r2"] - 0.004) < 1e-12
