"""studies/comparison.py: a study file's comparison parsed once into a frozen Comparison (levels as the index records
them), one-line errors naming the bad value, and no claims pipeline run at Study construction."""
from __future__ import annotations

import dataclasses

import pytest

from altgrad_lib.studies import study_claims
from altgrad_lib.studies.comparison import VALUE_COLUMNS, Comparison
from altgrad_lib.studies.study import Study

BASE = {"n_layer": 1, "n_embd": 32, "n_head": 2, "max_steps": 4}


def _study(comparisons, **changes):
    d = {"name": "t", "config": BASE, "axes": {"recipe": ["hp", "fp8_hybrid", "fp8_e4m3"], "lr": [1e-3, 3e-3],
                                               "seed": [0, 1]},
         "points": [{"recipe": "hp", "freeze_blocks": True, "seed": s, "lr": 1e-3} for s in (0, 1)],
         "comparisons": comparisons, **changes}
    return Study.from_dict(d)


def test_a_comparison_is_parsed_once_with_its_levels_as_the_index_records_them():
    s = _study([{"axis": "recipe", "baseline": "bf16", "levels": ["fp8_e4m3"], "delta": 0.02,
                 "paper": {"fp8_e4m3": "worse"}, "source": "a paper"},
                {"axis": "lr", "baseline": "3e-3", "by": ["recipe"], "value": "final_train_loss"}])
    rec, lr = s.comparisons
    assert isinstance(rec, Comparison) and rec.baseline == "hp" and rec.label == "recipe vs hp"   # the alias
    assert rec.levels == ("fp8_e4m3",) and rec.paper == (("fp8_e4m3", "worse"),) and rec.source == "a paper"
    assert rec.by == () and rec.by_columns == ("lr",) and rec.value == VALUE_COLUMNS[0] and rec.delta == 0.02
    assert rec.spec["baseline"] == "bf16"   # as the file states it, for messages
    assert lr.baseline == 3e-3 and lr.label == "lr vs 0.003" and lr.by == lr.by_columns == ("recipe",)
    assert lr.value == "final_train_loss" and lr.delta is None and lr.levels == ()
    with pytest.raises(dataclasses.FrozenInstanceError):
        rec.axis = "lr"
    # a Study derived from this one (other seeds, the replay's twin) keeps the parsed values
    assert dataclasses.replace(s, description="x").comparisons == s.comparisons


@pytest.mark.parametrize("spec, match", [
    ({"axis": "recipe"}, r"study comparison \{'axis': 'recipe'\} needs 'axis' and 'baseline'"),
    ({"axis": "recipe", "baseline": "hp", "delat": 0.1}, r"unknown key\(s\) \['delat'\]; valid keys: \("),
    ({"axis": "recipe", "baseline": "hp", "delta": -1}, r"delta=-1 must be a positive number \(nats\)"),
    ({"axis": "recipe", "baseline": "hp", "delta": True}, r"delta=True must be a positive number"),
    ({"axis": "recipe", "baseline": "hp", "by": "lr"}, r"by='lr' must be a list of index columns.*valid: \["),
    ({"axis": "recipe", "baseline": "hp", "value": "val_los"}, r"value='val_los' is not a loss column.*valid: \("),
    ({"axis": "recipe", "baseline": "fp8_hybird"}, r"baseline 'fp8_hybird' is not a level of 'recipe'; did you mean"),
    ({"axis": "optimizer", "baseline": "adamw"}, r"'optimizer' is not an axis this study compares.*valid axes"),
    ({"axis": "recipe", "baseline": "hp", "levels": ["hp"]}, r"levels=\['hp'\] must be a non-empty list of 'recipe' "
                                                            r"levels other than the baseline; valid: \["),
    ({"axis": "recipe", "baseline": "hp", "paper": {"fp8_e4m3": "wrose"}},
     r"paper\['fp8_e4m3'\]='wrose' is invalid; did you mean 'worse'\?; valid: \("),
    ({"axis": "recipe", "baseline": "hp", "levels": ["fp8_e4m3"], "paper": {"fp8_hybrid": "worse"}},
     r"paper names 'fp8_hybrid', which it does not compare; valid: \['fp8_e4m3'\]"),
    ({"axis": "recipe", "baseline": "hp", "source": 3}, r"source=3 must be a string"),
    ({"axis": "recipe", "baseline": "hp", "by": ["seed"]}, r"'by' \['seed'\] names what the comparison pairs"),
    ({"axis": "recipe", "baseline": "hp", "name": " "}, r"name=' ' must be a non-empty string \(the Holm family"),
    ({"axis": "recipe", "baseline": "hp", "name": 3}, r"name=3 must be a non-empty string"),
])
def test_a_bad_comparison_fails_at_load_in_one_line_naming_it(spec, match):
    with pytest.raises(ValueError, match=match) as e:
        _study([spec])
    assert "\n" not in str(e.value)


def test_no_claims_are_computed_when_a_study_loads(monkeypatch):
    """The claims pipeline ran on a made-up index at every Study construction; now loading parses the comparisons
    only: a claims_table that cannot run does not stop a study from loading (it runs on the real index)."""
    def boom(*a, **k):
        raise AssertionError("claims computed at load")

    monkeypatch.setattr(study_claims, "claims_table", boom)
    s = _study([{"axis": "recipe", "baseline": "hp"}], positive_controls=["fp8_e4m3"])
    assert s.comparisons[0].label == "recipe vs hp"
    with pytest.raises(AssertionError, match="claims computed at load"):   # the claims still use it, on demand
        s._claims_of(__import__("pandas").DataFrame(), s.comparisons[0])


def test_a_paper_finding_states_its_design_differences_and_a_bad_one_is_one_line():
    """Issue 47 item 6: the papers table states how the bench's design differs from the paper's, per finding."""
    rec = _study([{"axis": "recipe", "baseline": "hp", "paper": {"fp8_e4m3": "worse"},
                   "design_differences": {"fp8_e4m3": "one block, not 48"}}]).comparisons[0]
    assert rec.design_differences == (("fp8_e4m3", "one block, not 48"),)
    for bad, match in [({"fp8_hybrid": "x"}, r"design_differences names 'fp8_hybrid', which has no paper finding; "
                                             r"valid levels: \['fp8_e4m3'\]"),
                       ({"fp8_e4m3": ""}, r"design_differences=\{'fp8_e4m3': ''\} must be a mapping \{level: text\}"),
                       ("text", r"design_differences='text' must be a mapping")]:
        with pytest.raises(ValueError, match=match) as e:
            _study([{"axis": "recipe", "baseline": "hp", "paper": {"fp8_e4m3": "worse"}, "design_differences": bad}])
        assert "\n" not in str(e.value)


def test_two_comparisons_of_one_name_are_refused_and_a_name_names_the_family():
    """One name = one Holm family (claims.claims_table judges each comparison apart): two comparisons that would
    share a name (both unnamed on one axis and baseline, or named alike) are refused in one line at load."""
    with pytest.raises(ValueError, match=r"\['recipe vs hp'\] name\(s\) more than one comparison; give each its own"):
        _study([{"axis": "recipe", "baseline": "hp", "levels": ["fp8_hybrid"]},
                {"axis": "recipe", "baseline": "hp", "levels": ["fp8_e4m3"]}])
    s = _study([{"axis": "recipe", "baseline": "hp", "levels": ["fp8_hybrid"], "name": "fp8 vs hp"},
                {"axis": "recipe", "baseline": "hp", "levels": ["fp8_e4m3"]}])
    assert [c.label for c in s.comparisons] == ["fp8 vs hp", "recipe vs hp"]
