"""Tests for altgrad_lib.notebook.claims_view: the status banner is rewritten in place (a display update with the
same id), its words come from the claims headline, and the readable table keeps every claims number."""
from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest

from altgrad_lib.notebook import claims_view
from altgrad_lib.studies import claims


def _table():
    rows = []
    for s in range(3):
        hp = 5.0 + 0.1 * s
        for r, fb, v in (("hp", False, hp), ("hp", True, hp + 0.4), ("E2M1", False, hp + 0.05 + 0.001 * s),
                         ("fp8", False, hp + 0.002 * (-1) ** s)):
            rows.append({"recipe": r, "freeze_blocks": fb, "seed": s, "final_val_loss": v})
    return claims.claims_table(pd.DataFrame(rows), "recipe", "hp", positive_controls=["E2M1"])


def test_status_markdown_follows_the_headline():
    t = _table()
    smoke = claims_view.status_markdown(claims.headline(t, False, "baseline above the unigram entropy"))
    assert smoke.startswith("**SMOKE TEST: no claims are drawn from these runs.**")
    assert "baseline above the unigram entropy" in smoke
    ok = claims_view.status_markdown(claims.headline(t, True, ""))
    assert ok.startswith("**Claims:**") and "positive control E2M1: resolved" in ok


def test_banner_updates_its_display_in_place(monkeypatch):
    pytest.importorskip("IPython")
    import IPython.display as d

    sent = []

    class Handle:
        def update(self, obj):
            sent.append(("update", obj.data))

    monkeypatch.setattr(d, "display", lambda obj, display_id=None: sent.append(("display", obj.data)) or Handle())
    b = claims_view.StatusBanner()
    b.update(["SMOKE TEST, no claims drawn from these runs: x"])
    assert sent[0] == ("display", claims_view.PENDING) and sent[1][0] == "update"
    assert sent[1][1].startswith("**SMOKE TEST")
    b.set_header("profile cpu | seeds 0, 1 | code altgrad 0.1.0")   # the run line goes first and stays first
    b.update(["SMOKE TEST, no claims drawn from these runs: y"])
    assert sent[-1][1].startswith("`profile cpu | seeds 0, 1 | code altgrad 0.1.0`\n\n**SMOKE TEST")
    assert sent[-1][1].endswith("- SMOKE TEST, no claims drawn from these runs: y")


def test_readable_keeps_the_numbers():
    t = _table()
    r = claims_view.readable(t).set_index("level")
    row = t.set_index("level").loc["E2M1"]
    assert r.loc["E2M1", "verdict"] == row.verdict == "worse"
    g, lo, hi = (float(x) for x in re.fullmatch(r"(\S+) \[(\S+), (\S+)\]", r.loc["E2M1", "gap nats [CI]"]).groups())
    d = 2 - math.floor(math.log10(max(abs(row.gap_nats), abs(row.ci_lo), abs(row.ci_hi))))   # 3 significant
    assert (g, lo, hi) == (round(row.gap_nats, d), round(row.ci_lo, d), round(row.ci_hi, d))
    assert r.loc["E2M1", "MDE nats"] == f"{row.mde_nats:.3f}" and r.loc["fp8", "δ nats"] == "0.010"   # 3 decimals
    s = claims_view.verdict_sentence(t, "fp8")
    assert s.startswith(f"fp8: {t.set_index('level').loc['fp8', 'verdict']} (gap")
    assert claims_view.verdict_sentence(t, "nope") == "nope: no claim (not compared)"
    assert math.isfinite(row.mde_nats) and np.isfinite(t.p_holm).all()


def test_expectation_lines_follow_the_verdicts():
    """Agree / disagree / cannot tell come from the claims verdicts: E2M1 is worse in every seed (decisive), fp8
    alternates around hp by 0.002 (inconclusive or equivalent: never 'agrees' with 'worse')."""
    t = _table()
    lines = claims_view.expectation_lines(t, {"E2M1": ("worse", "paper A"), "fp8": ("worse", "paper B"),
                                              "absent": ("worse", "paper C")})
    assert len(lines) == 2 and lines[0].startswith("E2M1: agrees with paper A (worse vs hp")
    fp8 = t[t.level == "fp8"].iloc[0].verdict
    want = "not reproduced beyond ±δ" if fp8.startswith("equivalent") else "cannot tell"
    assert want in lines[1] and fp8 in lines[1] and "DISAGREES" not in lines[1]
    flipped = claims_view.expectation_lines(t, {"E2M1": ("better", "paper A")})
    assert flipped[0].startswith("E2M1: DISAGREES with paper A") and "finds worse" in flipped[0]
    # equivalence where a direction was expected bounds the effect by δ; equivalence expected and a difference
    # found is a disagreement
    eq = t.copy()
    eq.loc[eq.level == "E2M1", "verdict"] = "equivalent within ±0.04"
    assert claims_view.expectation_lines(eq, {"E2M1": ("worse", "paper A")})[0].startswith(
        "E2M1: not reproduced beyond ±δ: paper A reports worse vs hp, the bench finds equivalent within ±0.04")
    assert claims_view.expectation_lines(t, {"E2M1": ("equivalent", "paper A")})[0].startswith(
        "E2M1: DISAGREES with paper A: paper A reports equivalent vs hp, the bench finds worse")


def test_readable_shows_every_new_column_and_the_by_keys():
    """Issue 26: every view shows the diverged seeds, the CI at the verdict's level (labelled), equiv_bound, smoke,
    the value compared and the table's `by` keys even when the caller names none."""
    rows = []
    for lr in (1e-3, 2e-3):
        for s in range(3):
            hp = 5.0 + 0.1 * s + lr
            for r, v in (("hp", hp), ("E2M1", math.nan if s == 1 else hp + 0.05), ("fp8", hp + 0.0003 * (-1) ** s)):
                rows.append({"recipe": r, "lr": lr, "seed": s, "final_val_loss": v})
    t = claims.claims_table(pd.DataFrame(rows), "recipe", "hp", by=["lr"], positive_controls=["E2M1"])
    r = claims_view.readable(t)
    assert list(r.columns[:3]) == ["lr", "level", "verdict"] and (r.value == "final_val_loss").all()   # verdict first
    e2 = r[r.level == "E2M1"].iloc[0]
    assert e2.diverged == "1/3" and e2.verdict == "diverged in 1/3 seeds" and e2["baseline diverged"] == "0/3"
    fp8 = r[r.level == "fp8"].iloc[0]
    assert fp8.verdict == "equivalent within ±0.01" and fp8.CI == "90 % (TOST)" and not fp8.smoke
    row = t[t.level == "fp8"].iloc[0]
    bound = f"{row.equiv_bound:.3f}" if row.equiv_bound >= 0.001 else f"{row.equiv_bound:.2g}"   # 3 decimals, or
    assert fp8["equivalent within (90 % CI)"] == f"±{bound}" and row.equiv_bound < 0.01   # 2 significant below
    s = claims_view.verdict_sentence(t, "fp8")
    assert f"data support ±{bound} nats" in s and "90 % (TOST) CI" in s and "diverged 0/3" in s
    # a diverged known-harmful recipe agrees with a paper's "worse"
    assert claims_view.expectation_lines(t, {"E2M1": ("worse", "paper A")})[0].startswith(
        "E2M1: agrees with paper A (worse vs hp")
