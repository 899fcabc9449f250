"""Seeds until resolved for a notebook's variants (studies/until_resolved.py), on a tiny model (tests/helpers.py)."""
from __future__ import annotations

import pandas as pd
import pytest

from altgrad_lib.training.config import TrainConfig
from altgrad_lib.studies import claims
from altgrad_lib.studies.until_resolved import all_seeds, seed_plan, train_until_resolved


def _cfg(tmp_path):
    from helpers import tiny_study_dict

    return TrainConfig.from_dict(tiny_study_dict(tmp_path, max_steps=4)["config"])


# "same" trains exactly as "base" (neither clips): gap 0, equivalent at the first look; "clip" clips at 0.3, a
# ~0.001-nat gap, open at 2 seeds at δ = 0.001 (tests/test_studies_sequential.py's grad_clip study measured it; at
# the default δ = 0.01 it is equivalent at once)
VARIANTS = {"base": {"grad_clip": 1.0e6}, "same": {"grad_clip": 1.0e7}, "clip": {"grad_clip": 0.3}}


def _claims(f, smoke):
    return claims.claims_table(f, "label", "base", smoke=smoke, comparison="grad_clip vs base", delta=0.001)


def test_train_until_resolved_adds_seeds_to_open_rows_only(tmp_path, monkeypatch):
    monkeypatch.setenv("ALTGRAD_OUTPUTS", str(tmp_path / "out"))
    res = train_until_resolved(_cfg(tmp_path), VARIANTS, {"min": 2, "max": 3, "step": 1}, _claims,
                               study="nb_seq", progress=False, verbose=False)
    by = res.frame.groupby("label").seed.apply(sorted).to_dict()
    assert by == {"base": [0, 1, 2], "clip": [0, 1, 2], "same": [0, 1]} and res.seeds == [0, 1, 2]
    t = res.claims.set_index("level")
    assert t.loc["same", "verdict"].startswith("equivalent within ±0.001 (") and t.loc["same", "look"] == 1
    assert t.loc["clip", "look"] == 2 and t.loc["clip", "n"] == 3
    looks = pd.read_csv(tmp_path / "out" / "studies" / "nb_seq" / "sequential.csv")
    assert looks[looks.look == 1].set_index("level").adds_seeds.to_dict() == {"same": False, "clip": True}

    # the same runs again (reused), judged a smoke test at every look: no verdict word, and no seed added
    again = train_until_resolved(_cfg(tmp_path), VARIANTS, {"min": 2, "max": 3, "step": 1}, _claims,
                                 smoke=lambda f: True, progress=False, verbose=False)
    assert (again.claims.verdict == claims.SMOKE).all() and again.seeds == [0, 1]
    assert again.runs and all(r.reused for r in again.runs.values())

    # a list of seeds: trained and judged once, claims.py's fixed-sample verdicts
    fixed = train_until_resolved(_cfg(tmp_path), VARIANTS, [0, 1], _claims, progress=False, verbose=False)
    assert fixed.plan is None and fixed.looks.empty and "look" not in fixed.claims
    assert fixed.claims.set_index("level").loc["same", "verdict"].startswith("equivalent")


@pytest.mark.parametrize("seeds, match", [([], "non-empty list"), ([0, "1"], "integer seeds"),
                                          ({"min": 3}, "needs min and max"), ("0,1", "non-empty list")])
def test_a_bad_seeds_parameter_fails_in_one_line(seeds, match):
    with pytest.raises(ValueError, match=match):
        seed_plan(seeds)


def test_all_seeds_is_the_plans_maximum():
    assert all_seeds({"min": 3, "max": 5}) == [0, 1, 2, 3, 4] and all_seeds([4, 7]) == [4, 7]
