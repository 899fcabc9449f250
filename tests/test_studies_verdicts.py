"""studies/verdicts.py: the typed verdict (Kind, Verdict) the claims statistics produce, checked against scipy's
tests; its words byte-for-byte what claims.csv and the committed notebooks print; one-line errors."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from altgrad_lib.io import write_csv
from altgrad_lib.studies import claims
from altgrad_lib.studies.sequential import _judged
from altgrad_lib.studies.verdicts import (FAMILY_COLUMN, KIND_COLUMN, Kind, Verdict, decide, family_words, short_words,
                                         verdict_words, words)


def test_construction_and_the_row_it_reads_back():
    v = Verdict(Kind.EQUIVALENT, n=3, n_seeds=3, gap=0.001, ci_lo=-0.004, ci_hi=0.006, level=0.9, p=0.8,
                p_tost=0.01, delta=0.01, mde=0.02, family="Holm over 2 rows of recipe vs hp")
    assert v.kind is Kind.EQUIVALENT and not v.harm and not v.open and not v.sequential
    assert verdict_words(v) == "equivalent within ±0.01 (a harm up to +0.006 not excluded)"
    with pytest.raises(Exception):   # frozen
        v.kind = Kind.WORSE
    row = {"level": "E4M3", KIND_COLUMN: "worse", "n": 4, "n_seeds": 5, "n_diverged": 0, "n_diverged_baseline": 1,
           "gap_nats": 0.03, "ci_lo": 0.01, "ci_hi": 0.05, "ci_level": 0.975, "p_holm": 0.01, "p_tost": 0.9,
           "delta_nats": 0.01, "mde_nats": 0.02, FAMILY_COLUMN: "Holm over 2 rows of recipe vs hp"}
    back = Verdict.from_row(row)
    assert back.kind is Kind.WORSE and back.harm and (back.n, back.n_seeds, back.n_diverged_baseline) == (4, 5, 1)
    assert (back.gap, back.ci_lo, back.ci_hi, back.level, back.p, back.delta) == (0.03, 0.01, 0.05, 0.975, 0.01, 0.01)
    assert back.family == "Holm over 2 rows of recipe vs hp" and math.isnan(back.p_bound)
    assert verdict_words(back) == "worse (baseline diverged in 1/5 seeds: pairs dropped)"


@pytest.mark.parametrize("make, match", [
    (lambda: Kind.of("equivalent within ±0.01"), r"^verdict kind 'equivalent within ±0.01' is invalid; valid: \["),
    (lambda: Verdict("worse", n=3, n_seeds=3), r"^Verdict kind='worse' must be a Kind; valid: \["),
    (lambda: Verdict(Kind.WORSE, n=-1, n_seeds=3), r"^Verdict n=-1 must be a non-negative integer$"),
    (lambda: Verdict(Kind.WORSE, n=3, n_seeds=2.5), r"^Verdict n_seeds=2.5 must be a non-negative integer$"),
    (lambda: Verdict.from_row({"level": "mxfp4", "verdict": "worse"}),
     r"^claims row of level 'mxfp4' has no verdict_kind \(None\); valid kinds: \["),
])
def test_bad_values_fail_in_one_line_naming_them(make, match):
    with pytest.raises(ValueError, match=match) as e:
        make()
    assert "\n" not in str(e.value)


def test_rule_order_and_the_words_each_kind_prints():
    """decide's order (claims.py's rules 0-6) and the exact words the committed notebooks and claims.csv hold."""
    base = dict(n=3, sig=True, eq=True, harmful=True, delta=0.01)
    assert decide(**base, smoke=True, n_diverged=1) is Kind.DIVERGED   # a divergence wins over a smoke test
    assert decide(**base, smoke=True) is Kind.SMOKE
    assert decide(**base, n_diverged=1) is Kind.DIVERGED
    assert decide(**{**base, "n": 1}) is Kind.TOO_FEW
    assert decide(**base, control_ok=False) is Kind.BELOW_CONTROL
    assert decide(**{**base, "sig": False}, control_ok=False) is Kind.NOT_TRAINING
    assert decide(**{**base, "harmful": False}, control_ok=False) is Kind.NOT_TRAINING
    assert decide(**base) is Kind.WORSE and decide(**{**base, "harmful": False}) is Kind.BETTER
    assert decide(**{**base, "sig": False}) is Kind.EQUIVALENT
    assert decide(**{**base, "sig": False, "eq": False}) is Kind.INCONCLUSIVE
    assert decide(**{**base, "sig": False, "eq": False, "delta": math.nan}) is Kind.NO_DELTA
    said = {k: words(k, n=1, n_seeds=3, n_diverged=2, delta=0.01) for k in Kind}
    assert said == {Kind.SMOKE: "smoke test: no verdict", Kind.DIVERGED: "diverged in 2/3 seeds",
                    Kind.TOO_FEW: "too few seeds (n = 1 pairs; need >= 2)",
                    Kind.BELOW_CONTROL: "worse (below its frozen-blocks control)",
                    Kind.NOT_TRAINING: "not training its blocks", Kind.WORSE: "worse", Kind.BETTER: "better",
                    Kind.EQUIVALENT: "equivalent within ±0.01", Kind.INCONCLUSIVE: "inconclusive",
                    Kind.NO_DELTA: "inconclusive (equivalence not tested: state delta)"}
    assert words(Kind.SMOKE, n_diverged_baseline=1, n_seeds=3) == "smoke test: no verdict"   # no note on a smoke
    assert {k for k in Kind if k.harm} == {Kind.WORSE, Kind.BELOW_CONTROL, Kind.NOT_TRAINING, Kind.DIVERGED}
    assert {k for k in Kind if k.open} == {Kind.INCONCLUSIVE, Kind.NO_DELTA, Kind.TOO_FEW}


def _holm(p):
    """Holm's step-down adjusted p (Holm 1979), written out here as the oracle."""
    order = np.argsort(p)
    out, running = np.empty(len(p)), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p) - rank) * p[i]))
        out[i] = running
    return out


def test_kinds_follow_scipys_tests_on_random_tables():
    """Each row's kind is the rule applied to scipy's paired t (Holm-adjusted over the table) and TOST p-values,
    the CI level 90 % beside equivalent, and every row names its family."""
    rng = np.random.default_rng(48)
    seen = set()
    for trial in range(25):
        n, gaps = 4, rng.choice([0.0, 0.002, 0.03, -0.03], size=4)
        rows = []
        for s in range(n):
            hp = 3.0 + rng.normal(0, 0.05)
            rows += [{"recipe": "hp", "freeze_blocks": False, "seed": s, "final_val_loss": hp},
                     {"recipe": "hp", "freeze_blocks": True, "seed": s, "final_val_loss": hp + 0.5}]
            rows += [{"recipe": f"r{k}", "freeze_blocks": False, "seed": s,
                      "final_val_loss": hp + g + rng.normal(0, 0.004)} for k, g in enumerate(gaps)]
        frame = pd.DataFrame(rows)
        t = claims.claims_table(frame, "recipe", "hp")
        base = frame[(frame.recipe == "hp") & ~frame.freeze_blocks].set_index("seed").final_val_loss
        p, tost = [], []
        for lv in t.level:
            v = frame[frame.recipe == lv].set_index("seed").final_val_loss
            d = (v - base).to_numpy()
            p.append(sps.ttest_rel(v, base).pvalue)
            tost.append(max(sps.ttest_1samp(d, -0.01, alternative="greater").pvalue,
                            sps.ttest_1samp(d, 0.01, alternative="less").pvalue))
        ph = _holm(np.array(p))
        for r, ph_i, tost_i in zip(t.to_dict("records"), ph, tost):
            want = (Kind.WORSE if r["gap_nats"] > 0 else Kind.BETTER) if ph_i < 0.05 else \
                Kind.EQUIVALENT if tost_i < 0.05 else Kind.INCONCLUSIVE
            v = Verdict.from_row(r)
            assert v.kind is want, (trial, r["level"], ph_i, tost_i)
            assert v.p == pytest.approx(ph_i) and v.p_tost == pytest.approx(tost_i)
            # Holm judged the row at α·p/p_holm <= α (p_holm >= p): its CI at least 95 %
            assert v.level == pytest.approx(0.90) if want is Kind.EQUIVALENT else v.level >= 0.95 - 1e-12
            assert v.family == "Holm over 4 rows of recipe vs hp"
            seen.add(want)
    assert seen == {Kind.WORSE, Kind.BETTER, Kind.EQUIVALENT, Kind.INCONCLUSIVE}   # every branch was exercised


def test_a_reworded_verdict_changes_no_statistic(tmp_path):
    """claims.csv written and read back: the kinds and families survive, and a table whose words were changed keeps
    its positive-control state and headline (decided by the kind)."""
    rows = []
    for s in range(3):
        hp = 3.0 + 0.01 * s
        rows += [{"recipe": "hp", "freeze_blocks": False, "seed": s, "final_val_loss": hp},
                 {"recipe": "hp", "freeze_blocks": True, "seed": s, "final_val_loss": hp + 0.4},
                 {"recipe": "E2M1", "freeze_blocks": False, "seed": s, "final_val_loss": hp + 0.05 + 0.001 * s}]
    t = claims.claims_table(pd.DataFrame(rows), "recipe", "hp", positive_controls=["E2M1"])
    write_csv(tmp_path / "claims.csv", t)
    back = pd.read_csv(tmp_path / "claims.csv")
    assert [Verdict.from_row(r) for r in back.to_dict("records")] == [Verdict.from_row(r)
                                                                     for r in t.to_dict("records")]
    reworded = t.assign(verdict="something else")
    assert claims.headline(reworded, True)[0].startswith("positive control E2M1: resolved (something else by")
    assert not claims.no_claims(reworded, True)


def test_the_sequential_verdict_uses_the_rule_without_made_up_p_values():
    """sequential._judged passes its group-sequential calls to verdicts.decide: the row's own p-values stay, the
    kind follows the calls, and the family names the sequential Holm."""
    r = {"n": 4, "n_seeds": 4, "n_diverged": 0, "n_diverged_baseline": 0, "gap_nats": 0.02, "sd_nats": 0.01,
         "p_holm": 0.9, "p_tost": 0.9, "delta_nats": 0.01, "smoke": False, "positive_control": "?"}
    out = _judged(r, True, False, 0.01, 0.02, 0.05, True, "pocock group-sequential Holm over 3 rows of x")
    assert out[KIND_COLUMN] == "worse" and out["verdict"] == "worse" and out["positive_control"] == "resolved"
    assert out["ci_level"] == pytest.approx(0.99) and out[FAMILY_COLUMN].endswith("over 3 rows of x")
    eq = _judged(r, False, True, 0.01, 0.02, 0.05, True)
    assert eq[KIND_COLUMN] == "equivalent" and eq["ci_level"] == pytest.approx(0.96)
    assert eq["positive_control"] == "NOT resolved"


def test_an_equivalence_says_the_harm_its_ci_does_not_exclude():
    """Issue 47 item 6: a recipe with a real harm of ~+0.005 nats read "equivalent within ±0.01" at 6 seeds, true
    at δ, silent on the harm left possible. The words name the CI's bound on the harmful side (the gap is variant −
    baseline: above 0 is a harm when lower is better), here checked against scipy's paired-t 90 % CI (TOST's)."""
    rng = np.random.default_rng(3)
    base = 3.0 + rng.normal(0, 0.05, 6)
    d = 0.0048 + np.array([-0.006, 0.005, 0.007, -0.004, 0.002, -0.004])   # a harm of +0.0048, 6 seeds
    f = pd.DataFrame([{"recipe": r, "seed": s, "final_val_loss": b + (g if r == "x" else 0.0)}
                      for s, (b, g) in enumerate(zip(base, d)) for r in ("hp", "x")])
    r = claims.claims_table(f, "recipe", "hp").iloc[0]
    lo, hi = sps.t.interval(0.90, len(d) - 1, loc=d.mean(), scale=sps.sem(d))   # scipy's 90 % CI (TOST at α)
    assert Kind.of(r[KIND_COLUMN]) is Kind.EQUIVALENT and hi < 0.01 and d.mean() > 0
    assert r.verdict == f"equivalent within ±0.01 (a harm up to {hi:+.2g} not excluded)"
    assert r.ci_hi == pytest.approx(hi) and r.ci_lo == pytest.approx(lo)
    # the harmful side follows the comparison's direction; a CI wholly on the side of a benefit leaves no harm
    assert words(Kind.EQUIVALENT, delta=0.01, harm_bound=0.008) == (
        "equivalent within ±0.01 (a harm up to +0.008 not excluded)")
    assert words(Kind.EQUIVALENT, delta=0.01, harm_bound=-0.0048, lower_is_better=False) == (
        "equivalent within ±0.01 (a harm up to -0.0048 not excluded)")
    assert words(Kind.EQUIVALENT, delta=0.01, harm_bound=-0.001) == "equivalent within ±0.01 (no harm in its CI)"
    v = Verdict(Kind.EQUIVALENT, n=3, n_seeds=3, ci_lo=-0.007, ci_hi=0.002, delta=0.01, lower_is_better=False)
    assert v.harm_bound == -0.007 and verdict_words(v) == "equivalent within ±0.01 (a harm up to -0.007 not excluded)"
    assert short_words(v) == "equivalent within ±0.01"   # a figure's label stays short


def test_family_words_name_the_rows_judged_together():
    fam = "Holm over 7 rows of cpu_formats"
    assert family_words([fam] * 3) == f"verdicts judged as: {fam}"
    assert family_words(["a", "b", "a", float("nan"), ""]) == "verdicts judged as: a; b" and family_words([]) == ""
