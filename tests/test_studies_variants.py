"""Tests for altgrad_lib.studies.variants: notebook 05's runs as data, labels with their parts, one-line refusals,
and the claims of every run against its format's reference (scipy's paired t and a hand-computed Holm as oracles)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from altgrad_lib.studies import claims, paired_stats
from altgrad_lib.studies.variants import (OPTIMIZER_VARIANTS, optimizer_runs, parse_references, reference_claims,
                                          reference_of)
from altgrad_lib.training.config import TrainConfig


def test_formats_x_variants_plus_pairs_with_their_parts():
    o, parts = optimizer_runs(["E7M0", "E4M3"], ["adamw fp32", "grid_adamw grid_sr"], pairs=["E7M0 madam grid_sr"],
                              lrs={"grid_lr": 1.0, "madam_lr": 0.01}, stats_every=5)
    assert list(o) == ["E7M0 adamw fp32", "E7M0 grid_adamw grid_sr", "E4M3 adamw fp32", "E4M3 grid_adamw grid_sr",
                       "E7M0 madam grid_sr"]
    assert parts["E4M3 grid_adamw grid_sr"] == ("E4M3", "grid_adamw grid_sr")
    assert o["E7M0 grid_adamw grid_sr"] == {"recipe": "fmt:E7M0", "optimizer": "grid_adamw",
                                            "optim": {"storage": "grid_sr", "lr": 1.0, "track_stats": 5}}
    assert o["E7M0 adamw fp32"]["optim"] == {"storage": "fp32", "track_stats": 5}   # the TrainConfig lr
    for ov in o.values():   # every variant is a valid TrainConfig
        TrainConfig().replace(**ov)
    assert len(OPTIMIZER_VARIANTS) == 13


@pytest.mark.parametrize("kw, match", [
    (dict(variants=["adam fp32"]), r"variant\(s\) \['adam fp32'\] not in"),
    (dict(pairs=["E7M0"]), "pairs entry 'E7M0' must be '<FMT> <variant>'"),
    (dict(variants=["madam grid_sr"], lrs={}), "needs its lr 'madam_lr'"),
    (dict(stats_every=0), "stats_every=0 must be >= 1"),
])
def test_refusals(kw, match):
    args = {"formats": ["E7M0"], "variants": ["adamw fp32"], **kw}
    with pytest.raises(ValueError, match=match):
        optimizer_runs(**args)


def test_wide_formats_use_the_hp_recipe_and_the_weight_grid_and_osc_window_is_passed():
    o, parts = optimizer_runs(["BF16", "E2M1"], ["adamw grid_sr"], stats_every=3, osc_window=7)
    assert o["BF16 adamw grid_sr"] == {"recipe": "hp", "optimizer": "adamw",
                                       "optim": {"storage": "grid_sr", "track_stats": 3, "osc_window": 7,
                                                 "weight_fmt": "bf16"}}
    assert o["E2M1 adamw grid_sr"]["recipe"] == "fmt:E2M1" and "weight_fmt" not in o["E2M1 adamw grid_sr"]["optim"]
    for ov in o.values():
        TrainConfig().replace(**ov)


# ---------------------------------------------------------------------------------------------------------------
# reference_claims: each run against the master run of its format, one Holm family

LOSS = {   # label -> final val loss per seed 0, 1, 2
    "hp": [5.00, 5.02, 4.98], "hp control": [6.00, 6.03, 5.99],
    "E4M3 adamw fp32": [5.10, 5.12, 5.08], "E4M3 adamw grid_sr": [5.11, 5.14, 5.08],
    "E4M3 adamw error_feedback_sr": [5.30, 5.35, 5.28],
    "BF16 adamw grid_sr": [5.01, 5.02, 4.99],
    "E7M0 adamw grid_sr": [5.60, 5.62, 5.61], "E7M0 grid_adamw grid_sr": [5.90, 6.10, 5.95],   # seed 1 above control
}
PARTS = {lb: tuple(lb.split(" ", 1)) for lb in LOSS if lb not in ("hp", "hp control")}


def _frame():
    return pd.DataFrame([{"label": lb, "seed": s, "final_val_loss": v, "freeze_blocks": lb == "hp control"}
                         for lb, vals in LOSS.items() for s, v in enumerate(vals)])


def test_reference_claims_pairs_each_run_with_its_formats_reference():
    t = reference_claims(_frame(), PARTS, parse_references(["E7M0 adamw grid_sr"])).set_index("level")
    assert t.loc["E4M3 adamw grid_sr", "reference"] == "E4M3 adamw fp32"
    assert t.loc["BF16 adamw grid_sr", "reference"] == "hp"               # no BF16 master: the hp run is it
    assert t.loc["E7M0 grid_adamw grid_sr", "reference"] == "E7M0 adamw grid_sr"
    assert "E4M3 adamw fp32" not in t.index and "E7M0 adamw grid_sr" not in t.index
    for level, ref in (("E4M3 adamw error_feedback_sr", "E4M3 adamw fp32"), ("BF16 adamw grid_sr", "hp")):
        v, b = np.array(LOSS[level]), np.array(LOSS[ref])
        assert t.loc[level, "gap_nats"] == pytest.approx((v - b).mean())
        assert t.loc[level, "p_paired"] == pytest.approx(stats.ttest_rel(v, b).pvalue)
        window = (np.array(LOSS["hp control"]) - b).mean()                # control - reference, seed by seed
        assert t.loc[level, "window_nats"] == pytest.approx(window)
        assert t.loc[level, "delta_nats"] == claims.DELTA_NATS                # stated in nats, not from the window
    # one Holm family over all four rows (hand computation: sorted p times m, m-1, ..., running max)
    p = t.p_paired.to_numpy()
    order = np.argsort(p)
    want, running = np.empty(len(p)), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p) - rank) * p[i]))
        want[i] = running
    assert t.p_holm.to_numpy() == pytest.approx(want)
    assert t.loc["E4M3 adamw error_feedback_sr", "verdict"] == "worse"   # +0.21 nats, tight: survives Holm
    assert t.loc["E7M0 grid_adamw grid_sr", "verdict"] == "not training its blocks"   # seed 1 above the control
    # d = (+0.01, 0, +0.01): its 90 % CI reaches mean + t_{0.95,2}·sd/√3 = 0.0164 nats, wider than δ = 0.01 nats
    d = np.array(LOSS["BF16 adamw grid_sr"]) - np.array(LOSS["hp"])
    bound = d.mean() + stats.t.ppf(0.95, 2) * d.std(ddof=1) / np.sqrt(3)
    assert t.loc["BF16 adamw grid_sr", "equiv_bound"] == pytest.approx(bound) and bound > claims.DELTA_NATS
    assert t.loc["BF16 adamw grid_sr", "verdict"] == "inconclusive"
    assert t.loc["BF16 adamw grid_sr", "mde_nats"] == pytest.approx(paired_stats.verdict_mde(3, d.std(ddof=1), len(t)))


def test_reference_claims_holm_is_over_the_whole_table_not_per_format():
    t = reference_claims(_frame(), PARTS).set_index("level")   # E7M0: no master, no references -> hp
    assert t.loc["E7M0 adamw grid_sr", "reference"] == "hp"
    ef = t.loc["E4M3 adamw error_feedback_sr"]
    assert ef.p_holm > ef.p_paired   # a single-row family would leave it unadjusted
    assert len(t) == 5 and t.p_holm.notna().all()


@pytest.mark.parametrize("call, match", [
    (lambda: parse_references(["E7M0"]), "references entry 'E7M0' must be '<FMT> <variant>'"),
    (lambda: parse_references(["E7M0 adam sr"]), "references entry 'E7M0 adam sr'"),
    (lambda: reference_of("E7M0", ["hp"], {"E7M0": "adamw grid_sr"}), "reference E7M0 'adamw grid_sr' was not trained"),
])
def test_reference_refusals(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_reference_claims_in_a_smoke_test_give_no_verdict():
    t = reference_claims(_frame(), PARTS, smoke=True)
    assert t.smoke.all() and (t.verdict == claims.SMOKE).all() and t.gap_nats.notna().any()
