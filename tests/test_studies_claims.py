"""Tests for altgrad_lib.studies.claims: the paired statistics against a hand computation and scipy (ttest_rel,
one-sided ttest_rel for TOST, the noncentral t for the MDE plus a Monte-Carlo power check), the exact sign-flip p
against a brute-force loop, Holm against a hand example, the verdict rules and the claims table."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from altgrad_lib.studies import claims

V = [5.30, 5.25, 5.41]   # a variant's final val loss, seeds 0..2
B = [5.20, 5.22, 5.30]   # the baseline's, same seeds: d = (0.10, 0.03, 0.11)


def test_paired_row_against_hand_computation_and_ttest_rel():
    d = [v - b for v, b in zip(V, B)]
    m = sum(d) / 3
    sd = math.sqrt(sum((x - m) ** 2 for x in d) / 2)
    t = m / (sd / math.sqrt(3))
    row = claims.paired_row(V, B, delta=0.05)
    assert row["n"] == 3 and row["gap_nats"] == pytest.approx(m, rel=1e-12)
    assert row["sd_nats"] == pytest.approx(sd, rel=1e-12)
    # t_{0.975, 2} = 4.302652729911275 (tables); p = 2 P(T_2 > t), with the t_2 CDF in closed form
    assert row["gap_lo"] == pytest.approx(m - 4.302652729911275 * sd / math.sqrt(3), rel=1e-9)
    assert row["gap_hi"] == pytest.approx(m + 4.302652729911275 * sd / math.sqrt(3), rel=1e-9)
    assert row["p_paired"] == pytest.approx(1 - t / math.sqrt(2 + t * t), rel=1e-9)   # two-sided p for df = 2
    assert row["p_paired"] == pytest.approx(sps.ttest_rel(V, B).pvalue, rel=1e-12)
    assert row["p_welch"] == pytest.approx(sps.ttest_ind(V, B, equal_var=False).pvalue, rel=1e-12)
    assert row["p_paired"] < row["p_welch"]           # pairing removes the seed-to-seed spread
    assert row["signs"] == "worse in 3/3" and row["p_perm"] == pytest.approx(2 / 8)
    assert claims.paired_row(B, V)["signs"] == "better in 3/3"


def _brute_sign_flip(d):
    obs = abs(sum(d))
    hits = sum(abs(sum(s * x for s, x in zip(signs, d))) >= obs - 1e-12
               for signs in itertools.product((1, -1), repeat=len(d)))
    return hits / 2 ** len(d)


@pytest.mark.parametrize("d", [[0.1, 0.03, 0.11], [0.2, -0.05, 0.1, 0.07, -0.01], [1.0, 2.0, -3.0, 0.5, 0.25, 4.0],
                               list(np.random.default_rng(3).normal(0.1, 0.2, 10))])
def test_sign_flip_p_is_exact(d):
    assert claims.sign_flip_p(d) == pytest.approx(_brute_sign_flip(d), abs=1e-15)
    assert math.isnan(claims.sign_flip_p(list(range(1, 18))))   # above PERM_MAX_N: not computed


def test_holm_against_hand_example():
    # sorted p = 0.01, 0.02, 0.03, 0.04 (m = 4): 4·0.01 = 0.04, 3·0.02 = 0.06, 2·0.03 = 0.06, 1·0.04 = 0.04 -> 0.06
    got = claims.holm([0.03, 0.01, math.nan, 0.04, 0.02])
    assert got[[1, 4, 0, 3]] == pytest.approx([0.04, 0.06, 0.06, 0.06]) and math.isnan(got[2])
    assert claims.holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])


def test_tost_is_two_one_sided_ttest_rel():
    v, b, delta = np.array([5.21, 5.24, 5.30, 5.22]), np.array([5.20, 5.22, 5.31, 5.20]), 0.05
    lo = sps.ttest_rel(v, b - delta, alternative="greater").pvalue   # H0: mean d <= -δ
    hi = sps.ttest_rel(v, b + delta, alternative="less").pvalue      # H0: mean d >= +δ
    assert claims.tost_p(v - b, delta) == pytest.approx(max(lo, hi), rel=1e-12)
    assert claims.tost_p(v - b, delta) < 0.05 < claims.tost_p(v - b, 0.012)


def test_mde_closed_form_and_monte_carlo_power():
    n, sd = 3, 0.02
    e = claims.mde(n, sd)
    # noncentral t power at the MDE is 80 % (scipy's nct), and the normal-approximation closed form
    # (t_{1-α/2} + t_{power}) sd/√n brackets it from below (it ignores the far tail and the nc spread)
    assert claims.power_paired(e, n, sd) == pytest.approx(0.80, abs=1e-9)
    for nn, eff in ((3, 0.03), (5, 0.01), (10, 0.02)):   # scipy's noncentral t as the oracle where it is accurate
        tc = sps.t.ppf(0.975, nn - 1)
        nc = eff * math.sqrt(nn) / sd
        ref = sps.nct.sf(tc, nn - 1, nc) + sps.nct.cdf(-tc, nn - 1, nc)
        assert claims.power_paired(eff, nn, sd) == pytest.approx(ref, rel=1e-6)
    e2 = claims.mde(2, 0.007)                            # df = 1: where nct.sf returns NaN (integrated instead)
    d2 = np.random.default_rng(1).normal(e2, 0.007, size=(40_000, 2))
    assert np.mean(sps.ttest_1samp(d2, 0.0, axis=1).pvalue < 0.05) == pytest.approx(0.80, abs=0.01)
    approx = (sps.t.ppf(0.975, n - 1) + sps.t.ppf(0.80, n - 1)) * sd / math.sqrt(n)
    assert approx == pytest.approx(e, rel=0.15)
    rng = np.random.default_rng(0)
    d = rng.normal(e, sd, size=(40_000, n))
    p = sps.ttest_1samp(d, 0.0, axis=1).pvalue
    assert np.mean(p < 0.05) == pytest.approx(0.80, abs=0.01)   # 40k draws: binomial sd 0.002
    assert claims.mde(10, sd) < e and claims.mde(1, sd) != claims.mde(1, sd) and claims.mde(3, 0.0) == 0.0


def test_verdict_rules():
    row = {"n": 3, "control_ok": True, "p_holm": 0.01, "gap_nats": 0.1, "p_tost": 0.9, "delta_nats": 0.03}
    assert claims.verdict(row) == "worse" and claims.verdict({**row, "gap_nats": -0.1}) == "better"
    assert claims.verdict(row, lower_is_better=False) == "better"
    # not beating the frozen-blocks control: "worse" when the harm is Holm-significant, else not training
    assert claims.verdict({**row, "control_ok": False}) == "worse (below its frozen-blocks control)"
    assert claims.verdict({**row, "control_ok": False, "p_holm": 0.3}) == claims.NOT_TRAINING
    assert claims.verdict({**row, "control_ok": False, "gap_nats": -0.1}) == claims.NOT_TRAINING
    assert claims.verdict({**row, "p_holm": 0.2, "p_tost": 0.01}) == "equivalent within ±0.03"
    assert claims.verdict({**row, "p_holm": 0.2}) == claims.INCONCLUSIVE
    assert claims.verdict({**row, "p_holm": math.nan, "p_tost": math.nan}) == claims.INCONCLUSIVE
    assert claims.verdict({**row, "n": 1}).startswith("too few seeds")
    # no margin: worse/better still come out; an otherwise open row says the equivalence was not tested
    assert claims.verdict({**row, "delta_nats": math.nan}) == "worse"
    assert claims.verdict({**row, "p_holm": 0.2, "p_tost": math.nan, "delta_nats": math.nan}) == \
        "inconclusive (equivalence not tested: state delta)"


def _study_frame():
    """hp, its control (blocks frozen: window 0.3 nats), a clearly worse recipe (paired, tiny noise), a recipe equal
    to hp, one worse than the control in seed 2, and one that diverged in seed 0."""
    rng = np.random.default_rng(1)
    rows = []
    for s in range(4):
        hp = 5.2 + 0.05 * rng.standard_normal()      # seed-to-seed spread 0.05 nats, shared by every recipe
        for recipe, fb, v in (("hp", False, hp), ("hp", True, hp + 0.3), ("fp4", False, hp + 0.05 + 0.002 * s),
                              ("fp8", False, hp + 0.001 * (-1) ** s),
                              ("bad", False, hp + (0.4 if s == 2 else 0.2)),
                              ("boom", False, math.nan if s == 0 else hp + 0.05 + 0.003 * s)):
            rows.append({"recipe": recipe, "freeze_blocks": fb, "seed": s, "final_val_loss": v})
    return pd.DataFrame(rows)


def test_claims_table_pairs_by_seed_and_flags_the_control():
    t = claims.claims_table(_study_frame(), "recipe", "hp", positive_controls=["fp4"]).set_index("level")
    assert set(t.index) == {"fp4", "fp8", "bad", "boom"}            # the control is never a compared level
    assert list(t.window_nats) == pytest.approx([0.3] * 4)
    assert list(t.delta_nats) == [claims.DELTA_NATS] * 4 == [0.01] * 4   # absolute, not a share of the window
    assert t.loc["fp4", "verdict"] == "worse" and t.loc["fp4", "positive_control"] == "resolved"
    assert t.loc["fp4", "gap_window"] == pytest.approx(t.loc["fp4", "gap_nats"] / 0.3)
    assert t.loc["fp8", "verdict"] == "equivalent within ±0.01"
    assert t.loc["bad", "verdict"] == "worse (below its frozen-blocks control)"
    assert t.loc["bad", "control"] == "beat the frozen-blocks control in 3/4"
    assert t.loc["boom", "n"] == 3 and t.loc["boom", "n_diverged"] == 1 and t.loc["boom", "seeds"] == "1 2 3"
    assert t.loc["boom", "verdict"] == "diverged in 1/4 seeds" and (t.n_diverged_baseline == 0).all()
    assert list(t.p_holm) == pytest.approx(list(claims.holm(t.p_paired.to_numpy())))
    lines = claims.positive_control_lines(t.reset_index())
    assert lines == [lines[0]] and lines[0].startswith("positive control fp4: resolved")
    assert "Holm" in claims.describe(t) and "δ = 0.01 nats" in claims.describe(t)


def test_claims_table_unresolved_positive_control_comes_first():
    f = _study_frame()
    f.loc[f.recipe == "fp8", "final_val_loss"] += np.array([0.01, -0.01, 0.02, -0.015])   # noisy, inconclusive
    t = claims.claims_table(f, "recipe", "hp", positive_controls=["fp8", "fp4"])
    lines = claims.positive_control_lines(t)
    assert "NOT resolved" in lines[0] and "fp8" in lines[0] and "fp4: resolved" in lines[1]


def test_a_positive_control_as_bad_as_the_frozen_control_is_resolved_only_when_significant():
    """A known-harmful recipe that ends above the frozen-blocks control in one seed is "worse (below its
    frozen-blocks control)" when its paired gap to the baseline is Holm-significant (and, as a positive control,
    resolved); without that significance it is 'not training its blocks' and not resolved."""
    f = _study_frame()
    t = claims.claims_table(f, "recipe", "hp", positive_controls=["bad"]).set_index("level")
    assert t.loc["bad", "verdict"] == claims.WORSE_THAN_CONTROL and t.loc["bad", "p_holm"] < 0.05
    assert t.loc["bad", "positive_control"] == "resolved"
    line = [ln for ln in claims.positive_control_lines(t.reset_index()) if "bad" in ln][0]
    assert "resolved" in line and "NOT" not in line and "beat the frozen-blocks control in 3/4" in line
    noisy = f.copy()                          # same mean harm, but seed noise swamps it: not significant
    noisy.loc[noisy.recipe == "bad", "final_val_loss"] += np.array([-0.5, 0.5, 0.6, -0.45])
    t = claims.claims_table(noisy, "recipe", "hp", positive_controls=["bad"]).set_index("level")
    assert t.loc["bad", "verdict"] == claims.NOT_TRAINING and not t.loc["bad", "p_holm"] < 0.05
    assert t.loc["bad", "positive_control"] == "NOT resolved"


def test_claims_table_refusals():
    f = _study_frame()
    # no control and no delta: the table is no longer refused, δ is the stated default in nats
    assert claims.claims_table(f[~f.freeze_blocks], "recipe", "hp").delta_nats.eq(claims.DELTA_NATS).all()
    upside = f.assign(final_val_loss=np.where(f.freeze_blocks, f.final_val_loss - 1.0, f.final_val_loss))
    t = claims.claims_table(upside, "recipe", "hp")   # the control beat hp: δ stays what was stated before the runs
    assert t.delta_nats.eq(claims.DELTA_NATS).all() and t.gap_window.isna().all()
    assert claims.claims_table(f[~f.freeze_blocks], "recipe", "hp", delta=0.02).delta_nats.eq(0.02).all()
    with pytest.raises(ValueError, match=r"positive control\(s\) \['E2M1'\]"):
        claims.claims_table(f, "recipe", "hp", positive_controls=["E2M1"])
    with pytest.raises(ValueError, match="baseline recipe='bf8'"):
        claims.claims_table(f, "recipe", "bf8")
    with pytest.raises(ValueError, match="share seed"):   # a varied key left out of `by` would pool configurations
        claims.claims_table(pd.concat([f, f.assign(lr=1.0)]).fillna({"lr": 2.0}), "recipe", "hp")


def test_claims_table_groups_by_the_other_keys():
    f = pd.concat([_study_frame().assign(lr=1e-3), _study_frame().assign(lr=2e-3)], ignore_index=True)
    f.loc[f.lr == 2e-3, "final_val_loss"] += 1.0     # a different configuration: never paired with lr=1e-3
    t = claims.claims_table(f, "recipe", "hp", by=["lr"])
    assert len(t) == 8 and set(t.lr) == {1e-3, 2e-3} and claims.by_columns(t) == ["lr"]
    assert t.groupby("lr").gap_nats.apply(list).apply(len).tolist() == [4, 4]
    assert (t.gap_nats.abs() < 0.3).all()


def test_write_claims_is_a_csv_with_the_columns(tmp_path):
    t = claims.claims_table(_study_frame(), "recipe", "hp")
    claims.write_claims(t, tmp_path / "claims.csv")
    back = pd.read_csv(tmp_path / "claims.csv")
    assert set(claims.COLUMNS) <= set(back.columns) and len(back) == 4
    assert not list(tmp_path.glob(".*tmp*"))


def test_control_check_tidy_seeds_are_ints_and_entropy_counts():
    f = _study_frame()
    table, clear, sentence = claims.control_check(f, "recipe", "hp")
    assert clear and list(table.index) == [0, 1, 2, 3] and list(table.margin) == pytest.approx([0.3] * 4)
    table, clear, sentence = claims.control_check(f, "recipe", "hp", entropy=5.0)   # hp at ~5.2 nats: above it
    assert not clear and "NOT below the unigram entropy" in sentence
    t = claims.claims_table(f, "recipe", "hp", positive_controls=["fp4"])
    lines = claims.headline(t, clear, sentence)
    assert lines[0].startswith("SMOKE TEST, no claims drawn") and "fp4: resolved" in lines[1]
    # no control: nothing to check against (None) unless the baseline is above the unigram entropy (a smoke test)
    assert claims.control_check(f[~f.freeze_blocks], "recipe", "hp")[1] is None


def test_a_control_with_its_own_label():
    """Notebooks label their control "hp control" (freeze_blocks true): control_level names it."""
    f = _study_frame()
    f.loc[f.freeze_blocks, "recipe"] = "hp control"
    t = claims.claims_table(f, "recipe", "hp", control_level="hp control").set_index("level")
    ref = claims.claims_table(_study_frame(), "recipe", "hp").set_index("level")
    assert "hp control" not in t.index
    pd.testing.assert_frame_equal(t.drop(columns="recipe"), ref.drop(columns="recipe"))
    assert claims.control_check(f, "recipe", "hp", control_level="hp control")[1]


def test_report_lines_say_the_control_once():
    t = claims.claims_table(_study_frame(), "recipe", "hp")
    smoke = claims.report_lines(t, False, "NOT clear because x")
    assert sum("NOT clear because x" in ln for ln in smoke) == 1 and smoke[-1] == claims.describe(t)
    ok = claims.report_lines(t, True, "clear")
    assert ok[0] == "control check: clear"
    assert claims.report_lines(t, None, "")[0].startswith("no frozen-blocks control")


def test_seed_gaps_against_the_own_seed_baseline():
    f = _study_frame()
    g = claims.seed_gaps(f, "recipe", "hp")
    row = g[(g.recipe == "fp4") & (g.seed == 2)].iloc[0]
    hp2 = f[(f.recipe == "hp") & ~f.freeze_blocks & (f.seed == 2)].final_val_loss.iloc[0]
    assert row.gap_nats == pytest.approx(0.054) and row.val_gap_pct == pytest.approx(100 * 0.054 / hp2)
    assert g[(g.recipe == "hp") & g.freeze_blocks].gap_nats.tolist() == pytest.approx([0.3] * 4)


def test_a_consistent_paired_effect_is_resolved_where_the_overlap_rule_said_noise():
    """The case that motivated paired claims: a recipe worse in every seed by a little, on a seed-to-seed spread larger than the gap. Welch
    and the old CI-overlap rule cannot see it; the paired test can, even after Holm over eight rows."""
    hp = np.array([5.20, 5.26, 5.17])
    rows = [{"recipe": "hp", "seed": s, "final_val_loss": v} for s, v in enumerate(hp)]
    rows += [{"recipe": "hp", "freeze_blocks": True, "seed": s, "final_val_loss": v + 0.27} for s, v in enumerate(hp)]
    rows += [{"recipe": "E2M1", "seed": s, "final_val_loss": v + g} for s, (v, g) in enumerate(zip(hp, [0.07, 0.075, 0.08]))]
    for k in range(7):   # seven recipes equal to hp up to tiny noise: the rest of an eight-row Holm family
        rows += [{"recipe": f"r{k}", "seed": s, "final_val_loss": v + 0.001 * ((s + k) % 3 - 1)} for s, v in enumerate(hp)]
    f = pd.DataFrame(rows).fillna({"freeze_blocks": False})
    t = claims.claims_table(f, "recipe", "hp", positive_controls=["E2M1"]).set_index("level")
    e = t.loc["E2M1"]
    overlap = abs(e["mean"] - e.mean_baseline) <= 2 * 4.302652729911275 * hp.std(ddof=1) / math.sqrt(3)
    assert overlap and e.p_welch > 0.05                    # what the old rule called "not distinguishable from noise"
    assert e.p_holm < 0.05 and e.verdict == "worse" and e.positive_control == "resolved" and e.signs == "worse in 3/3"
    assert len(t) == 8 and e.p_holm == pytest.approx(min(1.0, 8 * e.p_paired))   # the smallest p: Holm's m · p
