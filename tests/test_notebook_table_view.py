"""Tests for altgrad_lib.notebook.table_view: digits checked against Python's own rounding (format(v, ".3g") is the
oracle for "3 significant"), synthetic frames with NaN, -0.0, tiny and 7-digit values, text width, and that the
notebook tables (claims_view.readable, tables.*, dashboard.next_gpu_hour) display through it. The old formatting
(DataFrames printed by pandas, "+.4f" gaps, "" for NaN) fails these: NaN printed "nan"/"", "-0.0000", lines of
200+ characters."""
from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest

from altgrad_lib.notebook import table_view as tv

VALUES = [v * s for v in np.logspace(-5.5, 5.5, 57) for s in (1, -1)]
SCI7 = re.compile(r"\d\.\d{4,}e[+-]\d")   # "1.234567e-05": more than 3 significant digits in scientific notation


def _rounded(v: float) -> float:
    """The oracle: 3 significant digits (Python's ".3g"), whole numbers from 100 up (plain notation never drops an
    integer digit: 1389 stays 1389, not 1390)."""
    return float(format(v, ".3g")) if abs(v) < 100 else float(round(v))


def _sig(text: str) -> int:
    digits = re.sub(r"e.*$", "", text).lstrip("+-").replace(".", "").lstrip("0")
    return len(digits)


@pytest.mark.parametrize("v", VALUES)
def test_gap_is_three_significant_and_signed(v):
    s = tv.gap(v)
    assert float(s) == pytest.approx(_rounded(v), rel=0, abs=1e-6) and "e" not in s
    assert s[0] in "+-" and (s[0] == "-") == (v < 0)
    assert _sig(s) >= 3 or abs(v) < 1e-4   # 6 decimals at most hold 3 significant down to 1e-4 nats


@pytest.mark.parametrize("v", VALUES)
def test_number_has_three_significant_and_no_long_scientific(v):
    s = tv.number(v)
    want = _rounded(v) if 1e-3 <= abs(v) < 1e6 else float(format(v, ".3g"))   # scientific outside: 3 significant
    assert float(s) == pytest.approx(want, rel=1e-9) and not SCI7.search(s)
    assert ("e" in s) == (not 1e-3 <= abs(v) < 1e6)


@pytest.mark.parametrize("v", [*np.logspace(-6, 0, 40), 0.9995])
def test_p_value_two_significant_or_below_floor(v):
    s = tv.p_value(v)
    if v < 0.001:
        assert s == "< 0.001"
    else:
        assert float(s) == float(format(v, ".2g")) and _sig(s) == 2 or float(s) == 1.0


def test_nan_is_none_and_zero_has_no_sign():
    for f in (tv.number, tv.gap, tv.margin, tv.db, tv.p_value, tv.pct, tv.loss, tv.whole):
        assert f(math.nan) == tv.NONE and f(None) == tv.NONE
    assert tv.number(-0.0) == "0" and tv.number(-1e-9) == "-1.00e-09"   # a tiny value is a value, -0.0 is zero
    for f in (tv.gap, tv.db, tv.pct, tv.loss, tv.whole):   # what rounds to zero at their digits has no sign
        for z in (-0.0, -1e-9, 1e-9):
            assert not f(z).startswith(("-", "+")), (f.__name__, z, f(z))
    assert tv.margin(-0.0) == "0.000"
    assert tv.db(-0.04) == "0.0" and tv.db(25.46) == "25.5" and tv.db(-12.35) == "-12.3"   # 1 decimal
    assert tv.margin(0.0123) == "0.012" and tv.margin(0.01) == "0.010"                       # 3 decimals
    assert float(tv.margin(0.00031)) == 0.00031                                             # not "0.000"
    assert tv.gap_ci(0.0001, -0.0199, 0.0201) == "+0.0001 [-0.0199, +0.0201]"   # decimals of the widest, aligned
    assert tv.gap_ci(0.45, 0.44, 0.46) == "+0.450 [+0.440, +0.460]" and tv.gap_ci(0.01, math.nan, 1) == "+0.0100"


def _synthetic() -> pd.DataFrame:
    return pd.DataFrame({"level": ["E4M3", "E5M2", "E7M0"], "verdict": ["equivalent within ±0.01", "worse", "none"],
                         "gap_nats": [-0.0, 1.234567e-5, 0.4512345], "p_holm": [math.nan] * 3,
                         "out_sqnr_db": [25.123456, -0.0001, math.nan], "final_val_loss": [3.14159265, math.nan, 7.5],
                         "diverged_at_step": [math.nan, 12.0, math.nan], "tokens_per_s": [1234567.8, 0.0, 12.5],
                         "overflow_frac": [1.234567e-7, 0.0, 0.5]})


def test_table_display_of_nan_negative_zero_and_tiny_values():
    frame = _synthetic()
    t = tv.table(frame, first=["level", "verdict"])
    text, html = t.to_string(), t._repr_html_()
    for out in (text, html):
        assert "nan" not in out.lower().replace("none", "") and not re.search(r"-0\.0+\b(?![1-9])", out)
        assert not SCI7.search(out) and "1.23e-05" not in out          # a gap is plain: +0.0000123
    assert "p_holm" not in text.splitlines()[0] and "no value in any row" in text and "p_holm" in text
    assert " 25.1 " in text + " " and "3.142" in text and "+0.451" in text and "12" in text
    assert html == tv.table(frame.copy(), first=["level", "verdict"])._repr_html_()   # stable ids: clean diffs
    assert "<th" in html and ">0<" not in html.replace(">0</td>", "")
    assert all(len(line) <= tv.WIDTH for line in text.splitlines() if "no value in any row" not in line)
    assert repr(t) == text and str(t) == text
    # the numbers are untouched and derived frames are plain DataFrames
    pd.testing.assert_frame_equal(pd.DataFrame(t), frame[list(t.columns)])
    assert type(t.round(2)) is pd.DataFrame and type(t[t.level == "E4M3"]) is pd.DataFrame
    assert t.to_string(index=False, float_format="{:.1f}".format) == frame[list(t.columns)].to_string(
        index=False, float_format="{:.1f}".format)                 # explicit pandas formatting: pandas' rendering


def test_wide_table_is_split_into_blocks_that_repeat_the_keys():
    frame = pd.DataFrame({"level": ["a", "b"], **{f"column number {i}": [0.5 * i, 1.0] for i in range(14)}})
    assert max(len(ln) for ln in frame.to_string().splitlines()) > tv.WIDTH   # pandas alone: too wide
    text = tv.table(frame, keys=["level"]).to_string()
    blocks = text.split("\n\n")
    assert len(blocks) > 1 and all(b.splitlines()[0].lstrip().startswith("level") for b in blocks)
    assert all(len(line) <= tv.WIDTH for line in text.splitlines())
    assert sum(b.splitlines()[0].count("column number") for b in blocks) == 14   # every column once


def test_readable_displays_narrow_with_the_verdict_first_and_none_at_one_seed():
    from altgrad_lib.notebook import claims_view
    from altgrad_lib.studies import claims

    rows = [{"recipe": r, "seed": 0, "final_val_loss": v} for r, v in (("hp", 5.0), ("fp8", 5.0003), ("E2M1", 5.3))]
    t = claims.claims_table(pd.DataFrame(rows), "recipe", "hp", positive_controls=["E2M1"])   # n = 1: no p-values
    r = claims_view.readable(t)
    assert list(r.columns[:2]) == ["level", "verdict"]
    text = r.to_string(index=False)
    assert all(len(line) <= tv.WIDTH for line in text.splitlines() if "no value in any row" not in line)
    cap = "verdicts judged as: Holm over 1 row of recipe vs hp"   # the rows' one family, above them (issue 47)
    assert r._caption == cap and text.startswith(cap + "\n")
    body = text.removeprefix(cap + "\n")
    assert all(b.splitlines()[0].split()[0] == "level" for b in body.split("\n\n"))   # the level leads each block
    assert (r["p Holm"] == tv.NONE).all() and "p Holm" in text.splitlines()[-1]        # named, not an empty column
    assert "nan" not in text and "-0.0" not in text
    html = r._repr_html_()
    assert html.index(">verdict<") < html.index(">n pairs<") and "nan" not in html


def test_notebook_tables_return_display_tables():
    from types import SimpleNamespace

    from altgrad_lib.notebook import dashboard, tables

    def run(losses, tps):
        rows = []
        for step, v in enumerate(losses):
            rows += [(step, "train/loss", v + 0.1), (step, "val/loss", v), (step, "tokens_per_s", tps)]
        return SimpleNamespace(dir="x", metrics=pd.DataFrame(rows, columns=["step", "name", "value"]), diverged=False)

    s = tables.run_summary({"hp": run([3.0, 2.0], 1234567.8), "fp8": run([3.0, 2.0], 1000.0)}, baseline="hp")
    assert isinstance(s, tv.Table) and s.final_val_loss.tolist() == [2.0, 2.0]    # numbers untouched
    text = s.to_string()
    assert "-0.0" not in text and "0.0 %" in text and "2.000" in text and "1,234,568" in text
    idx = pd.DataFrame({"recipe": ["x", "y"], "seed": [0, 0], "status": ["completed", "diverged"],
                        "diverged_at_step": [math.nan, 7.0], "final_val_loss": [3.0, math.nan]})
    g = dashboard.next_gpu_hour(idx, ["recipe"])
    assert isinstance(g, tv.Table) and list(g.columns[:2]) == ["recipe", "verdict"]
    assert "nan" not in g.to_string() and " 7" in g.to_string()


def test_an_integer_index_prints_as_text():
    """06's index table has an int index: its text rendering must not assume string labels (crashed before)."""
    t = tv.table(pd.DataFrame({"final_val_loss": [2.4723, 2.4693]}, index=pd.Index([3, 14], name="seed")))
    text = repr(t)
    assert "seed" in text and "14" in text and "2.472" in text
