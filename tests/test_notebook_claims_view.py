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
    assert claims.no_claims(t, False) and not claims.no_claims(t, True) and not claims.no_claims(t, None)
    smoke = claims_view.status_markdown(claims.headline(t, False, "baseline above the unigram entropy"),
                                        claims.no_claims(t, False))
    assert smoke.startswith("**SMOKE TEST: no claims are drawn from these runs.**")
    assert "baseline above the unigram entropy" in smoke
    ok = claims_view.status_markdown(claims.headline(t, True, ""), claims.no_claims(t, True))
    assert ok.startswith("**Claims:**") and "positive control E2M1: resolved" in ok
    # a positive control that is NOT resolved (its verdict kind no harm) makes the runs carry no claims
    weak = t.assign(verdict_kind=t.verdict_kind.where(t.level != "E2M1", "inconclusive"))
    assert claims.no_claims(weak, True)
    assert claims_view.status_markdown(claims.headline(weak, True, ""), True).startswith("**SMOKE TEST")


def test_banner_updates_its_display_in_place(monkeypatch):
    pytest.importorskip("IPython")
    import IPython.display as d

    sent = []

    class Handle:
        def update(self, obj):
            sent.append(("update", obj.data))

    monkeypatch.setattr(d, "display", lambda obj, display_id=None: sent.append(("display", obj.data)) or Handle())
    b = claims_view.StatusBanner()
    b.update(["SMOKE TEST, no claims drawn from these runs: x"], True)
    assert sent[0] == ("display", claims_view.PENDING) and sent[1][0] == "update"
    assert sent[1][1].startswith("**SMOKE TEST")
    b.set_header("profile cpu | seeds 0, 1 | code altgrad 0.1.0")   # the run line goes first and stays first
    b.update(["SMOKE TEST, no claims drawn from these runs: y"], True)
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
    fp8, fp8_kind = t[t.level == "fp8"].iloc[0][["verdict", "verdict_kind"]]
    want = "not reproduced beyond ±δ" if fp8_kind == "equivalent" else "cannot tell"
    assert want in lines[1] and fp8 in lines[1] and "DISAGREES" not in lines[1]
    flipped = claims_view.expectation_lines(t, {"E2M1": ("better", "paper A")})
    assert flipped[0].startswith("E2M1: DISAGREES with paper A") and "finds worse" in flipped[0]
    # equivalence where a direction was expected bounds the effect by δ; equivalence expected and a difference
    # found is a disagreement
    eq = t.copy()
    eq.loc[eq.level == "E2M1", ["verdict", "verdict_kind"]] = ["equivalent within ±0.04", "equivalent"]
    assert claims_view.expectation_lines(eq, {"E2M1": ("worse", "paper A")})[0].startswith(
        "E2M1: not reproduced beyond ±δ: paper A reports worse vs hp, the bench finds equivalent within ±0.04")
    assert claims_view.expectation_lines(t, {"E2M1": ("equivalent", "paper A")})[0].startswith(
        "E2M1: DISAGREES with paper A: paper A reports equivalent vs hp, the bench finds worse")
    # the agreement comes typed with each line (what notebook 04 counts), from the kind, never the words
    said = claims_view.expectations(t, {"E2M1": ("equivalent", "paper A"), "fp8": ("worse", "paper B")})
    assert [a for a, _ in said] == ["contradicts", want]
    words_changed = t.assign(verdict="(reworded)")   # rewording a verdict changes no agreement
    assert [a for a, _ in claims_view.expectations(words_changed, {"E2M1": ("equivalent", "A")})] == ["contradicts"]


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
    row = t[t.level == "fp8"].iloc[0]
    assert fp8.verdict == f"equivalent within ±0.01 (a harm up to {row.ci_hi:+.2g} not excluded)"
    assert fp8.CI == "90 % (TOST)" and not fp8.smoke
    bound = f"{row.equiv_bound:.3f}" if row.equiv_bound >= 0.001 else f"{row.equiv_bound:.2g}"   # 3 decimals, or
    assert fp8["equivalent within (90 % CI)"] == f"±{bound}" and row.equiv_bound < 0.01   # 2 significant below
    s = claims_view.verdict_sentence(t, "fp8")
    assert f"data support ±{bound} nats" in s and "90 % (TOST) CI" in s and "diverged 0/3" in s
    # every printed verdict names its family (issue 47); E2M1's diverged rows have no p: 2 rows in Holm
    assert s.endswith("; Holm over 2 rows of recipe vs hp)")
    assert r._caption == "verdicts judged as: Holm over 2 rows of recipe vs hp" and "family" not in r.columns
    # a diverged known-harmful recipe agrees with a paper's "worse"
    assert claims_view.expectation_lines(t, {"E2M1": ("worse", "paper A")})[0].startswith(
        "E2M1: agrees with paper A (worse vs hp")


# --- claims_report: a notebook's claims block in one call (issue 25) -------------------------------------------------

def _index(control: bool = True, hp_loss: float = 5.0) -> pd.DataFrame:
    """A notebook's run frame: hp, its frozen-blocks control (when `control`), a harmful recipe, an equivalent one
    and one whose seed 1 diverged (NaN loss, status diverged): labels as notebooks 03-05 name them."""
    rows = []
    for s in range(3):
        hp = hp_loss + 0.1 * s
        for label, v in (("hp", hp), ("hp control", hp + 0.4), ("nvfp4:disable_rht", hp + 0.05 + 0.001 * s),
                         ("fp8", hp + 0.002 * (-1) ** s), ("E7M0", math.nan if s == 1 else hp + 0.03 + 0.001 * s)):
            if label == "hp control" and not control:
                continue
            rows.append({"label": label, "seed": s, "final_val_loss": v, "freeze_blocks": label == "hp control",
                         "status": "diverged" if math.isnan(v) else "completed"})
    return pd.DataFrame(rows)


class _Banner:
    def __init__(self):
        self.lines = None

    def update(self, lines, smoke, diverged=()):
        self.lines, self.smoke, self.diverged = list(lines), smoke, list(diverged)


def test_claims_report_is_the_claims_sequence():
    """One call = control_check -> claims_table (smoke when the check fails) -> report_lines -> status -> tables -> the
    rules: the same table and lines as the library's own steps (studies/claims.py, tested against scipy there), the
    diverged seed kept in its row, every table narrow, "none" for a missing number, no negative zero."""
    from altgrad_lib.notebook import table_view as tv

    f, banner = _index(), _Banner()
    rep = claims_view.claims_report(f, "label", "hp", control_level="hp control", entropy=6.0, status=banner,
                                    show=False)
    ctl, clear, sentence = claims.control_check(f, "label", "hp", control_level="hp control", entropy=6.0)
    t = claims.claims_table(f, "label", "hp", control_level="hp control", smoke=clear is False)
    pd.testing.assert_frame_equal(rep.claims, t)
    pd.testing.assert_frame_equal(rep.control, ctl)
    assert clear is True and rep.clear is True and rep.control_sentence == sentence
    assert rep.lines == claims.report_lines(t, clear, sentence)[:-1] == banner.lines and banner.smoke is False
    assert rep.rules == [claims.describe(t)] and "δ = 0.01 nats" in rep.rules[0] and "MDE" in rep.rules[0]
    e7 = t.set_index("level").loc["E7M0"]
    assert e7.verdict == "diverged in 1/3 seeds" and e7.n_seeds == 3 and e7.n == 2   # kept in its row
    assert rep.headline() == claims_view.claims_headline(t, rep.lines)
    assert rep.summary().splitlines()[0].startswith("Claims: the control check is clear")
    assert rep.verdict("E7M0") == claims_view.verdict_sentence(t, "E7M0")
    tables = rep.tables()
    assert len(tables) == 4 and list(tables[0].columns) == ["baseline loss", "control loss", "margin nats"]
    assert list(tables[1].columns[:2]) == ["level", "verdict"]   # the verdict first, in the first claims table
    seen = set().union(*(set(tb.columns) for tb in tables[1:]))
    assert set(claims_view.readable(t).columns) - {"control", "value", "smoke", "equivalent within (90 % CI)"} <= seen
    for tb in tables:
        text = str(tb)
        assert max(map(len, text.splitlines())) <= tv.WIDTH, text   # a JupyterLab column (table_view.WIDTH)
        assert "nan" not in text.lower() and "-0.000" not in text
    diverged = tables[3].formatted().set_index("level").loc["E7M0"]
    assert diverged["n pairs"] == "2" and tables[2].set_index("level").loc["E7M0", "diverged"] == "1/3"
    # the rows' one family said once above the verdicts (issue 47 item 4), not down a column
    assert tables[1]._caption.endswith("(verdicts judged as: Holm over 3 rows of label vs hp; value compared: "
                                       "final_val_loss; smoke test: no)") and "family" not in tables[1].columns


def test_claims_report_without_a_control_and_as_a_smoke_test():
    """No frozen-blocks control: the headline says the window is unknown (not a smoke test while hp is below the
    unigram entropy); above it the runs are a smoke test: no verdict but E7M0's "diverged in 1/3 seeds", which wins
    over the smoke test in its row and in the banner (issue 47 item 6: the banner said "smoke test")."""
    rep = claims_view.claims_report(_index(control=False), "label", "hp", entropy=6.0, show=False)
    assert rep.clear is None and rep.lines[0].startswith("no frozen-blocks control")
    assert not rep.claims.smoke.any() and "diverged in 1/3 seeds" in set(rep.claims.verdict)
    assert rep.tables()[2].set_index("level").loc["fp8", "beats control"] == "no control"
    smoke = claims_view.claims_report(_index(control=False), "label", "hp", entropy=4.0, show=False)
    div = smoke.claims.level == "E7M0"
    assert smoke.clear is False and (smoke.claims.verdict[~div] == claims.SMOKE).all()
    assert list(smoke.claims.verdict[div]) == ["diverged in 1/3 seeds"] and smoke.diverged == ["E7M0 in 1/3 seeds"]
    assert smoke.status().startswith("DIVERGED: E7M0 in 1/3 seeds: a harm. Otherwise a smoke test: no other claim")
    assert smoke.lines[0] == "DIVERGED: E7M0 in 1/3 seeds: a harm whatever the control check says"
    assert smoke.rules[0].startswith("SMOKE TEST")
    assert smoke.verdict("E7M0").startswith("E7M0: diverged in 1/3 seeds (gap ")
    banner = _Banner()
    claims_view.claims_report(_index(control=False), "label", "hp", entropy=4.0, show=False, status=banner)
    assert banner.smoke is True and banner.diverged == ["E7M0 in 1/3 seeds"]
    assert claims_view.status_markdown(["x"], True, ["E7M0 in 1/3 seeds"]).startswith("**DIVERGED: E7M0 in 1/3")


def test_claims_report_of_a_table_computed_elsewhere(tmp_path):
    """A table from train_until_resolved / two comparisons: used as is, one comparison's rows, the caller's rules;
    without a frame no control check is run; bad arguments are one line naming the choices, before anything."""
    f = _index()
    both = pd.concat([claims.claims_table(f, "label", "hp", control_level="hp control", comparison="vs hp"),
                      claims.claims_table(f[f.label != "hp"], "label", "fp8", control_level="hp control",
                                          comparison="vs fp8")], ignore_index=True)
    rep = claims_view.claims_report(f, "label", "hp", control_level="hp control", entropy=6.0, claims_table=both,
                                    comparison="vs fp8", rules=lambda t: ["rule A", f"{len(t)} rows"], show=False,
                                    write=tmp_path / "claims.csv")
    assert (rep.claims.comparison == "vs fp8").all() and rep.rules == ["rule A", f"{len(rep.claims)} rows"]
    assert rep.clear is True and sorted(pd.read_csv(tmp_path / "claims.csv").level) == sorted(rep.claims.level)
    abl = claims_view.claims_report(claims_table=both, comparison="vs hp", show=False)
    assert abl.control is None and abl.lines == [] and abl.rules == [claims.describe(abl.claims)]
    assert abl.headline() == "\n".join(abl.verdict(lv) for lv in abl.claims.level)
    with pytest.raises(ValueError, match=r"comparison='vs bf16' is not in the table; valid choices: \['vs fp8', "):
        claims_view.claims_report(claims_table=both, comparison="vs bf16", show=False)
    with pytest.raises(ValueError, match="give frame, axis and baseline"):
        claims_view.claims_report(f, "label", show=False)
    with pytest.raises(ValueError, match=r"keys=\['format'\] are not claims columns"):
        claims_view.claims_report(f, "label", "hp", keys=["format"], show=False)


def test_claims_report_shows_lines_tables_then_rules(monkeypatch, capsys):
    pytest.importorskip("IPython")
    import IPython.display as d

    shown = []
    monkeypatch.setattr(d, "display", lambda obj: shown.append(obj))
    rep = claims_view.claims_report(_index(), "label", "hp", control_level="hp control", entropy=6.0)
    out = capsys.readouterr().out
    assert out.startswith(rep.lines[0]) and out.rstrip().endswith(rep.rules[-1])   # the rules under the tables
    assert [type(x).__name__ for x in shown] == ["Table"] * 4


def test_claims_report_of_a_study(tmp_path):
    """study=: the study file's comparisons and control (Study.report); the lines before its rules go to the
    banner, the rules (a seed plan's sequential ones, or claims.describe) under the tables."""
    from pathlib import Path

    import yaml

    from altgrad_lib.studies.study import Study

    d = yaml.safe_load((Path(__file__).resolve().parent.parent / "params" / "studies" / "ci_formats.yaml").read_text())
    s = Study.from_dict(d, out_dir=str(tmp_path / "st"))
    idx = pd.DataFrame([{"run": p.name, "recipe": p.config.recipe_name, "freeze_blocks": p.config.freeze_blocks,
                         "seed": p.config.seed, "status": "completed",
                         "final_val_loss": 5.0 + 0.3 * p.config.freeze_blocks + 0.05 * p.config.seed
                         + 0.001 * (p.config.recipe_name != "hp")} for p in s.expand()])
    table, lines = s.report(idx, entropy=9.0, write=False)
    rep = claims_view.claims_report(idx, study=s, entropy=9.0, keys=["comparison"], show=False)
    pd.testing.assert_frame_equal(rep.claims, table)
    assert [*rep.lines, *rep.rules] == lines and rep.rules == [claims.describe(table)]
    assert rep.lines[-1].startswith("control check:") and list(rep.tables()[1].columns[:2]) == ["comparison", "level"]


def test_claims_tables_drop_a_key_the_level_spells():
    """05's rows are labelled "<FMT> <variant>" and also carry format / variant columns: the narrow tables lead with
    the level and the keys it does not spell (lr here); a key the caller names stays."""
    rows = []
    for lr in (1e-3, 2e-3):
        for s in range(3):
            for fmt, variant, v in (("E4M3", "adamw fp32", 5.0), ("E4M3", "adamw grid_sr", 5.01 + 0.001 * s)):
                rows.append({"label": f"{fmt} {variant}", "format": fmt, "variant": variant, "lr": lr, "seed": s,
                             "final_val_loss": v + 0.1 * s})
    t = claims.claims_table(pd.DataFrame(rows), "label", "E4M3 adamw fp32", by=["lr"])
    t = t.assign(format="E4M3", variant=t.level.str.removeprefix("E4M3 "), reference="E4M3 adamw fp32")   # as
    # variants.reference_claims names each row
    assert list(claims_view.readable(t).columns[:5]) == ["lr", "format", "variant", "reference", "level"]   # all
    assert [list(x.columns[:3]) for x in claims_view.claims_tables(t)] == [["lr", "reference", "level"]] * 3
    assert list(claims_view.claims_tables(t, keys=["format"])[0].columns[:4]) == ["format", "lr", "reference", "level"]
