"""Seeds until resolved (studies/sequential.py; its boundaries: studies/gs_bounds.py): the boundaries against
published values, the error rates of the sequential claims by simulation, and the loop through the real run_study /
CLI."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from altgrad_lib.studies.gs_bounds import (boundaries, holm_bounds, nominal_bounds, sequential_calls, spend,
                                           z_nominal_bounds)
from altgrad_lib.studies.sequential import SeedPlan

# ------------------------------------------------------------------------------------------ boundaries

# Published values: rpact's unit tests, tests/testthat/test-f_design_group_sequential.R (rpact-com/rpact; rpact is an
# independent R implementation by Wassmer & Pahlke). Efficacy bounds of designs with non-binding futility are the
# pure α-spending bounds; "asUser" and the two-sided Wang-Tsiatis design are checked through their α spent.
RPACT = [
    # (what, information rates, cumulative α spent (None: from our spending function), sides, critical values)
    ("x7a asOF, alpha 0.13, kMax 3", (0.4, 0.75, 1), ("obf", 0.13), 1, (2.1280732, 1.4368565, 1.2468994)),
    ("x7a asOF, alpha 0.13, kMax 4", (0.4, 0.75, 0.85, 1), ("obf", 0.13), 1,
     (2.1280732, 1.4368565, 1.422873, 1.2970881)),
    ("x6a asP, alpha 0.13", (0.35, 0.7, 1), ("pocock", 0.13), 1, (1.5446617, 1.4828682, 1.4620058)),
    ("x6b asP, alpha 0.025, rates (0.4, 0.7)", (0.4, 0.7), ("pocock", 0.025), 1, (2.223875, 2.3050796)),
    ("x5 asUser (0.01, 0.02, 0.03, 0.05)", (0.25, 0.5, 0.75, 1), (0.01, 0.02, 0.03, 0.05), 1,
     (2.3263479, 2.2192994, 2.1201347, 1.8189562)),
    ("x8b WT two-sided, alpha 0.025", (0.3, 0.8, 1), (0.0013603353, 0.013978861, 0.025), 2,
     (3.2029374, 2.4819703, 2.3420706)),
]


@pytest.mark.parametrize("what, t, spent, sides, expected", RPACT, ids=[r[0] for r in RPACT])
def test_boundaries_match_rpact(what, t, spent, sides, expected):
    cum = spend(spent[0], t, spent[1]) if isinstance(spent[0], str) else spent
    assert boundaries(t, cum, sides) == pytest.approx(expected, abs=2e-6)


def test_spending_functions_match_rpact_alpha_spent():
    # the same file: x7a alphaSpent (asOF, 0.13) and x6b alphaSpent (asP, 0.025)
    assert spend("obf", [0.4, 0.75, 1], 0.13) == pytest.approx([0.016665509, 0.080406163, 0.13], abs=1e-8)
    assert spend("pocock", [0.4, 0.7], 0.025) == pytest.approx([0.013078429, 0.0197432], abs=1e-8)


def test_two_sided_obf_five_looks_is_the_classic_table():
    # Lan-DeMets O'Brien-Fleming-type, two-sided α = 0.05 (α/2 per side), 5 equally spaced looks: 4.877, 3.357,
    # 2.680, 2.290, 2.031 (Reboussin, DeMets, Kim & Lan 2000, Controlled Clinical Trials 21:190, the ld98 program;
    # the same numbers as gsDesign(k=5, test.type=2, sfu=sfLDOF))
    t = np.arange(1, 6) / 5
    assert boundaries(t, 2 * spend("obf", t, 0.025), 2) == pytest.approx([4.877, 3.357, 2.680, 2.290, 2.031], abs=6e-4)


def test_t_bounds_tend_to_the_z_boundaries_at_large_df():
    """The simulated t bounds (nominal_bounds) against the numerical integration's z boundaries (z_nominal_bounds) at
    150..400 pairs, where t is z: equal within the simulation's error (4e5 null tables: ~2 % at these levels)."""
    looks = tuple(range(150, 401, 50))
    for spending, sides in (("pocock", 2), ("obf", 1)):
        t, z = nominal_bounds(looks, 400, 0.05, spending, sides), z_nominal_bounds(looks, 400, 0.05, spending, sides)
        assert t == pytest.approx(z, rel=0.08, abs=2e-5), (spending, t, z)


def test_one_look_is_the_fixed_sample_test():
    assert z_nominal_bounds((5,), 5, 0.05, "pocock", 2) == pytest.approx([0.05])
    assert nominal_bounds((5,), 5, 0.05, "obf", 1) == pytest.approx([0.05], rel=0.02)   # a simulated quantile


# ------------------------------------------------------------------------------------------ simulation

def simulate(plan: SeedPlan, effects, delta=0.5, sims=20000, seed=0, naive=False, z=False):
    """Vectorized replay of the loop's rule (sequential_calls at every look; a row stops when resolved) on rows with
    true paired gaps `effects` (sd of each run's value 1/√2, so the per-seed difference has sd 1 and rows share the
    baseline, as a claims table's rows do). naive=True: claims.py's fixed-sample rule (Holm p < α, TOST p < α)
    applied at every look instead; z=True: the z boundaries' nominal p carried over to t. Returns (sig, equiv, seeds
    used per row)."""
    rng = np.random.default_rng(seed)
    m, looks, K = len(effects), plan.looks, len(plan.looks)
    base = rng.standard_normal((sims, 1, plan.max)) / math.sqrt(2)
    d = rng.standard_normal((sims, m, plan.max)) / math.sqrt(2) + np.asarray(effects)[None, :, None] - base
    p2, pt = np.full((sims, m, K), np.nan), np.full((sims, m, K), np.nan)
    b2 = holm_bounds(looks, plan.max, m, 0.05, plan.spending)
    b1 = nominal_bounds(looks, plan.max, 0.05, plan.spending, 1)
    if z:
        b2 = np.stack([z_nominal_bounds(looks, plan.max, 0.05 / r, plan.spending, 2) for r in range(1, m + 1)])
        b1 = z_nominal_bounds(looks, plan.max, 0.05, plan.spending, 1)
    if naive:
        b2 = np.stack([np.full(K, 0.05 / r) for r in range(1, m + 1)])
        b1 = np.full(K, 0.05)
    going = np.ones((sims, m), dtype=bool)
    used = np.full((sims, m), plan.min)
    for k, n in enumerate(looks):
        x = d[..., :n]
        mean, se = x.mean(-1), x.std(-1, ddof=1) / math.sqrt(n)
        p2[..., k] = np.where(going, 2 * stats.t.sf(np.abs(mean / se), n - 1), np.nan)
        tost = np.maximum(stats.t.sf((mean + delta) / se, n - 1), stats.t.cdf((mean - delta) / se, n - 1))
        pt[..., k] = np.where(going, tost, np.nan)
        sig, eq, _ = sequential_calls(p2, pt, b2, b1)
        used = np.where(going, n, used)
        going &= ~(sig | eq)
    return sig, eq & ~sig, used


PLAN = SeedPlan(min=3, max=8, step=1)
MC = 3 * math.sqrt(0.05 * 0.95 / 20000)   # 3 σ of a Monte-Carlo rate near 0.05 over 20,000 simulated tables


@pytest.mark.parametrize("spending", ["pocock", "obf"])
@pytest.mark.parametrize("m", [1, 4, 8])
def test_null_tables_keep_the_family_wise_false_call_rate(spending, m):
    """All true gaps 0: the share of tables with any 'worse'/'better' row stays <= 0.05 (+ 3 σ Monte-Carlo), despite
    up to six looks; the fixed-sample rule applied at every look (what adding seeds without boundaries does) does
    not, which shows the simulation can see the inflation."""
    plan = SeedPlan(min=3, max=8, step=1, spending=spending)
    sig, _, _ = simulate(plan, [0.0] * m)
    assert sig.any(-1).mean() <= 0.05 + MC
    naive, _, _ = simulate(plan, [0.0] * m, naive=True)
    assert naive.any(-1).mean() > 0.05 + MC


def test_z_boundaries_carried_over_to_t_are_not_enough_at_few_seeds():
    """Why nominal_bounds simulates the t statistics: the z boundaries' nominal p applied to t-tests with 2..7 df
    (Jennison & Turnbull's significance-level approach) exceed 5 % false calls (one row, Pocock, 3..8 seeds)."""
    sig, _, _ = simulate(PLAN, [0.0], z=True, sims=40000)
    assert sig.mean() > 0.05 + 3 * math.sqrt(0.05 * 0.95 / 40000)


@pytest.mark.parametrize("delta", [0.5, 1.0, 2.0])   # δ in units of the per-seed difference's sd
def test_false_equivalence_at_a_gap_of_delta_stays_below_alpha(delta):
    """True gap exactly ±δ (the edge of the equivalence region, where false 'equivalent' is likeliest): 'equivalent'
    in <= 5 % (+ 3 σ) of the rows, for one row alone and for a row among three null rows."""
    for effects in ([delta], [-delta], [delta, 0.0, 0.0, 0.0]):
        _, eq, _ = simulate(PLAN, effects, delta=delta)
        assert eq[:, 0].mean() <= 0.05 + MC, (effects, eq[:, 0].mean())


def test_adding_seeds_resolves_a_real_effect_more_often_than_the_minimum():
    """A row with a real gap of 1.5 sd among 7 null rows (the 4-bit positive control's situation in issue 26):
    claims.py's fixed rule at the minimum (3 seeds) calls it 'worse' rarely; adding seeds calls it far more often,
    and the null rows use fewer seeds than the maximum on average (seeds go where the question is open)."""
    effects = [1.5] + [0.0] * 7
    sig, _, used = simulate(PLAN, effects, sims=4000)
    fixed, _, _ = simulate(SeedPlan(min=3, max=3), effects, sims=4000, naive=True)
    assert sig[:, 0].mean() > fixed[:, 0].mean() + 0.3, (sig[:, 0].mean(), fixed[:, 0].mean())
    assert used[:, 0].mean() < PLAN.max


def test_sequential_calls_is_holm_at_one_look():
    """K = 1: the rule is claims.py's fixed-sample Holm step-down (paired_stats.holm, adjusted p < α)."""
    from altgrad_lib.studies.paired_stats import holm

    rng = np.random.default_rng(1)
    p = rng.uniform(0, 0.05, size=(500, 5)) ** 1.3
    b2 = holm_bounds((4,), 4, 5)
    sig, _, _ = sequential_calls(p[..., None], np.ones((500, 5, 1)), b2, np.array([0.05]))
    ref = np.array([holm(row) < 0.05 for row in p])
    assert (sig == ref).all() and 0 < ref.mean() < 1


# ------------------------------------------------------------------------------------------ the loop, for real

def _grad_clip_study(tmp_path, **seed):
    """A tiny real study on the grad_clip axis: 1e7 trains exactly as the baseline 1e6 (neither clips), so its row
    is 'equivalent' at the first look; 0.3 clips, a ~0.001-nat gap of the size of δ, open at 2 seeds (measured:
    p 0.07 at 3 seeds, TOST p 0.5)."""
    from helpers import tiny_study_dict

    d = tiny_study_dict(tmp_path, max_steps=4, axes={"grad_clip": [1.0e6, 1.0e7, 0.3],
                                                     "seed": seed or {"min": 2, "max": 3, "step": 1}},
                        comparisons=[{"axis": "grad_clip", "baseline": 1.0e6, "delta": 0.001}])
    return d


def test_seeds_go_only_to_open_rows_and_an_interrupted_study_resumes(tmp_path):
    from altgrad_lib.errors import Interrupted
    from altgrad_lib.studies.sequential import SEQUENTIAL_FILE
    from altgrad_lib.studies.study import Study, run_study

    s = Study.from_dict(_grad_clip_study(tmp_path), out_dir=str(tmp_path / "st"))
    assert s.seed_plan == SeedPlan(min=2, max=3) and s.axes["seed"] == (0, 1) and len(s.expand()) == 6

    def stop_at_look_2(msg):
        if "look 2 of 2" in msg:
            raise Interrupted("stopped between the looks")

    with pytest.raises(Interrupted):
        run_study(s, log=stop_at_look_2)
    first = s.results()
    assert len(first) == 6 and set(first.seed) == {0, 1} and (first.status == "completed").all()
    idx = run_study(s, log=lambda m: None)   # the same call again: replays look 1 from the runs, adds look 2
    by = idx.groupby("grad_clip").seed.apply(sorted).to_dict()
    assert by == {0.3: [0, 1, 2], 1.0e6: [0, 1, 2], 1.0e7: [0, 1]}   # the open row and its baseline only
    assert idx[idx.seed < 2].reused.all() and not idx[idx.seed == 2].reused.any()
    t = s.claims(idx).set_index("level")
    assert t.loc[1.0e7, "verdict"].startswith("equivalent") and t.loc[1.0e7, "look"] == 1 and t.loc[1.0e7, "n"] == 2
    assert t.loc[0.3, "look"] == 2 and t.loc[0.3, "n"] == 3
    looks = pd.read_csv(s.dir / SEQUENTIAL_FILE)
    assert looks[looks.look == 1].set_index("level").adds_seeds.to_dict() == {1.0e7: False, 0.3: True}


def test_cli_until_resolved_dry_run_prints_the_worst_case(tmp_path, capsys):
    import yaml

    from altgrad_lib.cli import main

    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(_grad_clip_study(tmp_path) | {"axes": {"grad_clip": [1.0e6, 0.3], "seed": [0, 1, 2]}}))
    where = ["--out", str(tmp_path / "study")]   # its own index directory: another ci_formats study may own the default
    assert main(["study", "-f", str(f), "--dry-run", "--until-resolved", "--max-seeds", "6", *where]) == 0
    out = capsys.readouterr().out
    assert "looks at n = 3, 4, 5, 6" in out and "6 at the minimum, 12 in the worst case" in out
    assert "estimate (cpu" in out and ": 12 runs," in out        # the time estimate is the worst case's
    assert main(["study", "-f", str(f), "--dry-run", "--max-seeds", "6", *where]) == 2
    assert "--max-seeds 6 needs --until-resolved" in capsys.readouterr().err


@pytest.mark.parametrize("seed, match", [
    ({"min": 1, "max": 4}, r"need 2 <= min <= max"),
    ({"min": 3}, r"needs min and max; valid keys"),
    ({"min": 3, "max": 5, "stpe": 1}, r"unknown key\(s\) \['stpe'\]"),
    ({"min": 3, "max": 5, "spending": "linear"}, r"spending='linear'; valid: \['pocock', 'obf'\]"),
])
def test_a_bad_seed_plan_fails_at_load_in_one_line(tmp_path, seed, match):
    from altgrad_lib.studies.study import Study

    with pytest.raises(ValueError, match=match):
        Study.from_dict(_grad_clip_study(tmp_path, **seed))


def test_per_seed_points_follow_the_seeds(tmp_path):
    """A control point without a seed runs at every seed a configuration gets (here the worst case, max seeds)."""
    from altgrad_lib.studies.sequential import with_seeds
    from altgrad_lib.studies.study import Study

    d = _grad_clip_study(tmp_path) | {"points": [{"grad_clip": 1.0e6, "freeze_blocks": True}]}
    s = Study.from_dict(d)
    assert [p.config.seed for p in s.expand() if p.config.freeze_blocks] == [0, 1]
    assert [p.config.seed for p in with_seeds(s, [0, 1, 2]).expand() if p.config.freeze_blocks] == [0, 1, 2]


def test_a_sequential_study_parses_its_comparisons_once_and_expands_once(tmp_path, monkeypatch):
    """The claims were computed on a made-up index at every Study construction (4 times for a sequential study: itself,
    its fixed-sample twin and with_seeds at the minimum and the maximum seeds), and every comparison's levels re-built
    every point's TrainConfig. Now each comparison is parsed once, when the study loads (comparison.Comparison); the
    studies the replay derives hold the parsed Comparisons, and a study expands once."""
    from altgrad_lib.studies.comparison import Comparison
    from altgrad_lib.studies.sequential import study_replay, with_seeds
    from altgrad_lib.training.config import TrainConfig

    parsed = []
    parse = Comparison.parse.__func__
    monkeypatch.setattr(Comparison, "parse", classmethod(
        lambda cls, c, study: (parsed.append(isinstance(c, Comparison)), parse(cls, c, study))[1]))
    s = _seq_study(tmp_path, control=True)
    assert parsed == [False] and isinstance(s.comparisons[0], Comparison)   # the mapping, parsed once
    built = []
    from_dict = TrainConfig.from_dict.__func__
    monkeypatch.setattr(TrainConfig, "from_dict", classmethod(lambda cls, d: (built.append(1), from_dict(cls, d))[1]))
    first = s.expand()
    s.levels("grad_clip"), s.expand()
    assert not built and s.expand() == first and s.expand() is not s.expand()   # a copy: callers may change it
    study_replay(s, _seq_index(s, lambda c: 3.0))
    assert not any(p is False for p in parsed[1:])   # derived studies: the parsed Comparison, never a mapping again
    assert with_seeds(s, [0, 1, 2, 3]).comparisons == s.comparisons
    # a study given a mapping again checks it: a baseline that is no level still fails in one line
    with pytest.raises(ValueError, match="is not a level of"):
        dataclasses.replace(s, comparisons=({"axis": "grad_clip", "baseline": 7.0},))


# ------------------------------------------------------------------------------------------ with claims.py's rules
# Synthetic indexes of a sequential study (no training): every run of the worst case, with a loss set per config;
# the replay takes the runs each look needs.

def _seq_study(tmp_path, control: bool = False, **changes):
    from altgrad_lib.studies.study import Study

    d = _grad_clip_study(tmp_path, min=3, max=5, step=1)
    d["comparisons"] = [{"axis": "grad_clip", "baseline": 1.0e6}]      # no delta: the default δ, claims.DELTA_NATS
    if control:
        d["points"] = [{"grad_clip": 1.0e6, "freeze_blocks": True}]
    return Study.from_dict({**d, **changes}, out_dir=str(tmp_path / "st"))


def _seq_index(s, loss, status=lambda c: "completed"):
    from altgrad_lib.studies.sequential import with_seeds

    rows = []
    for p in with_seeds(s, s.seed_plan.seeds(s.seed_plan.max)).expand():
        st = status(p.config)
        rows.append({"run": p.name, **s.index_values(p), "status": st,
                     "final_val_loss": math.nan if st == "diverged" else loss(p.config)})
    return pd.DataFrame(rows)


# per-seed noise of the paired differences, fixed numbers (not drawn): seeds 0..4
NOISE = [0.0004, -0.0003, 0.0001, -0.0002, 0.0003]


def test_sequential_study_with_the_default_delta_prints_the_ci_and_mde_of_its_bounds(tmp_path):
    """Default δ (claims.DELTA_NATS, absolute: the same at every look). 1e7 equals the baseline within 0.0004 nats:
    equivalent at the first look; 0.3 is +0.05 in every seed: worse at the first look. The CI beside each verdict
    is at the level of the bound it was held to (1 − 2·p_bound_tost beside TOST, 1 − p_bound beside worse; the
    fixed-sample Holm/90 % levels before), so it lies inside ±δ / excludes 0, and the MDE is the one-row MDE at
    p_bound (paired_stats.verdict_mde)."""
    from altgrad_lib.studies import claims, paired_stats
    from altgrad_lib.studies.sequential import study_replay

    s = _seq_study(tmp_path)
    idx = _seq_index(s, lambda c: 3.0 + 0.01 * c.seed
                     + {1.0e6: 0, 1.0e7: NOISE[c.seed], 0.3: 0.05 + NOISE[c.seed]}[c.grad_clip])
    rep = study_replay(s, idx)
    t = rep.table.set_index("level")
    assert rep.done and (t.delta_nats == claims.DELTA_NATS).all() and (t.look == 1).all()
    eq, worse = t.loc[1.0e7], t.loc[0.3]
    assert worse.verdict == "worse"
    assert eq.ci_level == pytest.approx(1 - 2 * eq.p_bound_tost) and worse.ci_level == pytest.approx(1 - worse.p_bound)
    assert -claims.DELTA_NATS < eq.ci_lo and eq.ci_hi < claims.DELTA_NATS and worse.ci_lo > 0
    half = stats.t.ppf(1 - eq.p_bound_tost, eq.n - 1) * eq.sd_nats / math.sqrt(eq.n)    # scipy, not paired_stats.ci_at
    assert eq.ci_hi == pytest.approx(eq.gap_nats + half)
    # the harm an equivalence leaves is the bound of the CI it was held to (issue 47 item 6), scipy's bound above
    assert eq.verdict == (f"equivalent within ±{claims.DELTA_NATS:.3g} (a harm up to {eq.gap_nats + half:+.2g} "
                          "not excluded)")
    assert worse.mde_nats == pytest.approx(paired_stats.verdict_mde(3, worse.sd_nats, 1, worse.p_bound))
    assert set(rep.looks.look) == {1}                  # nothing open: no seed added
    lines = s.report(idx, write=False)[1]
    assert "CI at 1 − p_bound" in lines[-1] and f"δ = {claims.DELTA_NATS:.4g} nats" in lines[-1]


def test_sequential_study_keeps_a_diverged_seed_in_its_row(tmp_path):
    """0.3 diverged in seed 1 (status diverged, no loss): its row stays, "diverged in 1/3 seeds", a harm, resolved
    at look 1 (no seed added to it) while the open row 1e7 (+0.005 ± 0.008) gets its seeds."""
    from altgrad_lib.studies.sequential import study_replay

    s = _seq_study(tmp_path)
    idx = _seq_index(s, lambda c: 3.0 + 0.01 * c.seed + {1.0e6: 0, 1.0e7: 0.005 + 20 * NOISE[c.seed],
                                                          0.3: 0.05 + NOISE[c.seed]}[c.grad_clip],
                     status=lambda c: "diverged" if (c.grad_clip, c.seed) == (0.3, 1) else "completed")
    rep = study_replay(s, idx)
    first = rep.looks[rep.looks.look == 1].set_index("level")
    assert first.loc[0.3, "verdict"] == "diverged in 1/3 seeds" and not first.loc[0.3, "adds_seeds"]
    assert first.loc[1.0e7, "adds_seeds"]
    t = rep.table.set_index("level")
    assert t.loc[0.3, "look"] == 1 and t.loc[0.3, "n_diverged"] == 1 and t.loc[0.3, "n_seeds"] == 3
    assert t.loc[1.0e7, "n"] == 5 and t.loc[1.0e7, "look"] == 3
    need = {c.name for c in rep.need}
    assert not any(n in need for n in idx[(idx.grad_clip == 0.3) & (idx.seed >= 3)].run)


def _label_index(loss, status=lambda label, seed: "completed", labels=("base", "var", "div"), seeds=range(5)):
    return pd.DataFrame([{"run": f"{lb} s{s}", "label": lb, "seed": s, "status": status(lb, s),
                          "final_val_loss": math.nan if status(lb, s) == "diverged" else loss(lb, s)}
                         for lb in labels for s in seeds])


def test_a_noted_fixed_verdict_is_rejudged_by_the_sequential_bound():
    """The baseline's seed 2 diverged: claims.py appends "(baseline diverged in 1/3 seeds: pairs dropped)" to every
    row. var's fixed-sample verdict over its 2 pairs is "worse (baseline diverged ...)" (Holm p < 0.05), but its p
    is above the first look's group-sequential bound: sequentially it is "inconclusive (baseline diverged ...)",
    open, and gets seeds (before, a verdict with the note was not matched as a p-value call: the fixed "worse"
    stood)."""
    from altgrad_lib.studies.claims import claims_table
    from altgrad_lib.studies.until_resolved import label_replay

    gap = {0: 0.0100, 1: 0.0114, 3: 0.0103, 4: 0.0131}   # 2 pairs at look 1: t = 15.3, p 0.042
    idx = _label_index(lambda lb, s: 3.0 + 0.01 * s + {"base": 0, "var": gap.get(s, 0), "div": 0.05}[lb],
                       status=lambda lb, s: "diverged" if (lb, s) in (("div", 1), ("base", 2)) else "completed")
    rep = label_replay(idx, SeedPlan(min=3, max=5), ["base", "var", "div"], [],
                       lambda f, smoke: claims_table(f, "label", "base", smoke=smoke))
    first = rep.looks[rep.looks.look == 1].set_index("level")
    note = " (baseline diverged in 1/3 seeds: pairs dropped)"
    assert first.loc["div", "verdict"] == "diverged in 1/3" + " seeds" + note and not first.loc["div", "adds_seeds"]
    row = first.loc["var"]
    fixed = claims_table(idx[idx.seed < 3], "label", "base").set_index("level").loc["var"]
    assert fixed.verdict == "worse" + note and fixed.n == 2                      # the fixed-sample call ...
    assert row.p_paired > row.p_bound                                           # ... not at the look's bound
    assert row.verdict == "inconclusive" + note and row.adds_seeds
    assert rep.table.set_index("level").loc["var", "n_seeds"] > 3


def test_sequential_study_judged_as_a_smoke_test_prints_no_verdict_words(tmp_path):
    """Study.claims(smoke=True) of a sequential study: every row "smoke test: no verdict", the 95 % CI (the smoke
    flag was ignored on this path before). And a study whose baseline does not beat its frozen-blocks control is a
    smoke test at its first look: no row is open, so no seed is added although 0.3's row would be."""
    from altgrad_lib.studies import claims
    from altgrad_lib.studies.sequential import study_replay

    s = _seq_study(tmp_path, control=True)

    def clear(c):
        return (3.0 + 0.5 * c.freeze_blocks + 0.01 * c.seed
                + {1.0e6: 0, 1.0e7: NOISE[c.seed], 0.3: 0.05 + NOISE[c.seed]}[c.grad_clip])

    t = s.claims(_seq_index(s, clear), smoke=True)
    assert len(t) == 2 and (t.verdict == claims.SMOKE).all() and t.smoke.all() and (t.ci_level == 0.95).all()
    words = ("worse", "better", "equivalent", "inconclusive", "not training")
    assert not any(w in v for v in t.verdict for w in words)
    assert not s.claims(_seq_index(s, clear)).smoke.any()              # the same runs, control clear: verdicts

    # the baseline does not beat its control: a smoke test at look 1, whatever 0.3's row says
    def noisy(c):
        return 3.0 + 0.01 * c.seed + {1.0e6: 0, 1.0e7: NOISE[c.seed], 0.3: 0.004 * (c.seed % 2)}[c.grad_clip]

    rep = study_replay(s, _seq_index(s, noisy))
    assert rep.done and set(rep.looks.look) == {1} and not rep.looks.adds_seeds.any()
    assert (rep.table.verdict == claims.SMOKE).all()


def test_one_until_resolved_loop_runs_what_each_look_needs_and_refuses_to_spin():
    """studies.sequential.until_resolved serves both the study loop and the notebooks' train_until_resolved."""
    from altgrad_lib.studies.sequential import Candidate, Replay, until_resolved

    cands = [Candidate(f"r{i}", ("a",), i) for i in range(3)]

    def replay_at(frame):   # one more run per look; done when all three exist
        have = set(frame.run)
        need = cands[:len(have) + 1]
        missing = [c for c in need if c.name not in have]
        return Replay(table=pd.DataFrame(), need=need, missing=missing, done=not missing)

    asked, looks = [], []

    def run(need):
        asked.append([c.name for c in need])
        return pd.DataFrame({"run": [c.name for c in need], "status": "completed"})

    rep, frame = until_resolved(replay_at, run, on_look=lambda r, n: looks.append(n))
    assert rep.done and list(frame.run) == ["r0", "r1", "r2"]
    assert asked == [["r0"], ["r0", "r1"], ["r0", "r1", "r2"]] and looks == [1, 1, 1]
    with pytest.raises(RuntimeError, match=r"^s: runs \['r0'\] are still missing after they were run"):
        until_resolved(replay_at, lambda need: pd.DataFrame(columns=["run", "status"]), name="s")
