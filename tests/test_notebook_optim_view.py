"""Tests for altgrad_lib.notebook.optim_view: notebook 05's optimizer statistics, step sizes in ULPs and prose."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from altgrad_lib.notebook import optim_view
from altgrad_lib.paths import project_root


class _Runs:   # the two attributes of studies.variant_runs.VariantRuns that optim_curves reads
    def __init__(self, wide):
        self.labels = {k: (k.rsplit(" s", 1)[0], int(k.rsplit(" s", 1)[1])) for k in wide}
        self._wide = wide

    def __getitem__(self, key):
        return self._wide[key]


def test_optim_curves_and_step_summary(monkeypatch):
    def wide(dcode):
        return pd.DataFrame({"step": [0, 5, 10, 10], "optim/mean_abs_dcode": [dcode, 2 * dcode, np.nan, 3 * dcode],
                             "optim/update_visibility": [0.1, 0.2, np.nan, 0.3], "val_loss": [np.nan] * 3 + [5.0]})

    runs = _Runs({"A x s0": wide(1.0), "A x s1": wide(3.0), "hp s0": wide(9.0)})
    monkeypatch.setattr(optim_view, "metrics_wide", lambda run: run)   # the name optim_curves reads
    curves = optim_view.optim_curves(runs, {"A x": ("A", "x")})
    assert set(curves.label) == {"A x"} and sorted(curves.seed.unique()) == [0, 1]
    assert len(curves) == 6   # the eval-only row (no optim/* metric) is dropped
    s = optim_view.step_summary(curves)
    assert s.loc["A x", "mean_abs_dcode"] == pytest.approx(np.mean([1, 2, 3, 3, 6, 9]))
    assert s.loc["A x", "update_visibility"] == pytest.approx(0.2)


def test_ulp_sentences_are_computed_from_the_summary():
    summary = pd.DataFrame({"mean_abs_dcode": [0.5, 0.05], "update_visibility": [0.25, 0.05],
                            "frac_dcode_ge2": [0.1, 0.0], "osc_ratio": [1.5, 1.0]},
                           index=["E7M0 grid_adamw grid_sr", "E7M0 adamw grid_sr"])
    lines = optim_view.ulp_sentences(summary, *summary.index)
    assert "0.5000 (= its mean step in ULPs: stored with SR), 10.0× that of E7M0 adamw grid_sr (0.0500)" in lines[0]
    assert "25.00% vs 5.00%" in lines[1] and "10.00% vs 0.00%" in lines[1]
    assert "by 2 about every 4 steps (under E7M0 adamw grid_sr: every 20)" in lines[2]
    assert "1.500 vs 1.000" in lines[3]
    assert len(optim_view.ulp_sentences(summary, *summary.index, code_ratio=None)) == 3


def _row(**kw):
    base = dict(level="L", reference="R", baseline="R", gap_nats=0.1, gap_lo=0.05, gap_hi=0.15, signs="worse in 3/3",
                p_holm=0.01, p_tost=0.5, mde_nats=0.02, verdict="worse", verdict_kind="worse", delta_nats=0.05)
    return pd.DataFrame([{**base, **kw}])


@pytest.mark.parametrize("kw, want", [
    ({}, "Negative result: X is worse (+0.1000 nats [+0.0500, +0.1500] 95 % CI against R, worse in 3/3; Holm p 0.01)."),
    ({"verdict": "equivalent within ±0.05", "verdict_kind": "equivalent", "p_tost": 0.01},
     "X is equivalent within ±0.05 nats (+0.1000 nats [+0.0500, +0.1500] 95 % CI against R, worse in 3/3; "
     "TOST p 0.01)."),
    ({"verdict": "inconclusive", "verdict_kind": "inconclusive"},
     "X: inconclusive (+0.1000 nats [+0.0500, +0.1500] 95 % CI against R, worse in 3/3; "
     "MDE 0.0200 nats): these seeds cannot tell, which is not 'no effect'."),
    ({"verdict": "not training its blocks", "verdict_kind": "not_training",
      "control": "below control 1/3"},
     "X: not training its blocks (+0.1000 nats [+0.0500, +0.1500] 95 % CI against R, worse in 3/3; below control 1/3): "
     "it is "
     "not below the frozen-blocks control in every seed, so its gap says it failed to train, whatever its p."),
    # a table with the verdict-level CI (claims ci_lo / ci_hi / ci_level) prints that one, labelled
    ({"verdict": "equivalent within ±0.05", "verdict_kind": "equivalent", "p_tost": 0.01, "ci_level": 0.9,
      "ci_lo": 0.06, "ci_hi": 0.14},
     "X is equivalent within ±0.05 nats, a harm up to +0.14 not excluded (+0.1000 nats [+0.0600, +0.1400] 90 % (TOST) "
     "CI against R, worse in 3/3; TOST p 0.01)."),
    # issue 47: the words name what the equivalence leaves, and the family the verdict was judged in
    ({"verdict": "equivalent within ±0.05", "verdict_kind": "equivalent", "p_tost": 0.01, "ci_level": 0.9,
      "ci_lo": -0.03, "ci_hi": 0.02, "gap_nats": -0.005, "verdict_family": "Holm over 3 rows of optimizer vs adamw"},
     "X is equivalent within ±0.05 nats, a harm up to +0.02 not excluded (-0.0050 nats [-0.0300, +0.0200] 90 % "
     "(TOST) CI against R, worse in 3/3; Holm over 3 rows of optimizer vs adamw; TOST p 0.01)."),
    ({"verdict": "too few seeds", "verdict_kind": "too_few", "gap_lo": math.nan, "mde_nats": math.nan},
     "X: too few seeds (+0.1000 nats against R, worse in 3/3): these seeds cannot tell, which is not 'no effect'."),
])
def test_result_statement(kw, want):
    assert optim_view.result_statement(_row(**kw), "L", "X") == want


def test_result_statement_of_a_run_not_trained():
    assert optim_view.result_statement(_row(), "M", "X") == "X: not measured in this profile (M was not trained)."


def test_markdown_table(tmp_path):
    p = tmp_path / "r.md"
    p.write_text("# t\n\n| a | b |\n|---|---|\n| 1 | x y |\n| 2 | z |\n\n| c |\n|---|\n| 3 |\n")
    t = optim_view.markdown_table(p)
    assert list(t.columns) == ["a", "b"] and t.values.tolist() == [["1", "x y"], ["2", "z"]]
    (tmp_path / "none.md").write_text("no table\n")
    with pytest.raises(ValueError, match="no Markdown table found"):
        optim_view.markdown_table(tmp_path / "none.md")
    bench = optim_view.markdown_table(project_root() / "bench" / "results" / "state_precision.md")
    assert {"variant", "mean Δ (nats)", "95% CI lo", "95% CI hi"} <= set(bench.columns)   # what notebook 05 reads
    assert "fp32" in set(bench.variant)
