"""Tests for altgrad_lib.studies.stats against hand-computed margins."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from altgrad_lib.studies.stats import assert_beats_control, control_table, control_verdict


def _summary(base, ctrl):
    rows = [{"run": f"hp s{i}", "final_val_loss": v} for i, v in enumerate(base)]
    rows += [{"run": f"hp control s{i}", "final_val_loss": v} for i, v in enumerate(ctrl)]
    rows += [{"run": "fp8 s0", "final_val_loss": 9.0}]
    return pd.DataFrame(rows)


def test_table_pairs_seeds_and_computes_margin():
    t = control_table(_summary([3.0, 3.1], [3.5, 3.4]), "hp", "hp control")
    assert list(t.index) == [0, 1]
    assert t.margin.tolist() == pytest.approx([0.5, 0.3])


def test_verdict_needs_three_seed_sigmas():
    # baseline sd over seeds = 0.1 -> need 0.3; worst margin 0.25 -> not clear
    base = [3.0, 3.1, 3.2]
    clear, sentence = control_verdict(control_table(_summary(base, [3.3, 3.35, 3.45]), "hp", "hp control"))
    assert not clear and "0.250" in sentence and "0.300" in sentence
    clear, _ = control_verdict(control_table(_summary(base, [3.31, 3.41, 3.51]), "hp", "hp control"))
    assert clear
    with pytest.raises(AssertionError, match="NOT clear"):
        assert_beats_control(control_table(_summary([3.0], [3.05]), "hp", "hp control"))


def test_diverged_run_is_never_a_clear_win():
    clear, sentence = control_verdict(control_table(_summary([math.nan], [5.0]), "hp", "hp control"))
    assert not clear and "diverged" in sentence


def test_unknown_variant_names_the_labels():
    with pytest.raises(ValueError, match="no runs labelled 'bf16 s<seed>'"):
        control_table(_summary([3.0], [3.5]), "bf16", "hp control")


def test_control_above_the_unigram_entropy_is_not_clear():
    t = control_table(_summary([6.8, 6.85, 6.9], [7.4, 7.45, 7.5]), "hp", "hp control")
    assert control_verdict(t)[0]                                     # a clear margin of 0.6 nats ...
    clear, sentence = control_verdict(t, entropy=6.11)               # ... above the unigram entropy of the val tokens
    assert not clear and "NOT below the unigram entropy of the val split (6.110 nats)" in sentence
    assert control_verdict(t, entropy=7.0)[0]
