"""One definition per name (notebook/names.py TERMS): two different numbers never share a name. The binade counts are
checked against ml_dtypes' finfo (an oracle we did not write); the control sentence of the studies layer, which cannot
import names.py, is checked to use the same words."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from altgrad_lib.notebook import names


def test_every_term_and_metric_name_is_unique():
    assert len({n for n, _ in names.TERMS.values()}) == len(names.TERMS)
    assert names.metric_name("stall_rate") != names.metric_name("optim/stall_rate")   # 04/06 predicted, 05 realized
    assert names.term("stall_rate") in names.metric_name("stall_rate")
    assert names.term("optim/stall_rate") in names.metric_name("optim/stall_rate")
    assert names.unigram_entropy_name("train") != names.unigram_entropy_name("val")
    with pytest.raises(KeyError, match="unknown term 'entropy'"):
        names.term("entropy")


@pytest.mark.parametrize("fmt, dtype", [("E4M3", "float8_e4m3fn"), ("E5M2", "float8_e5m2")])
def test_the_two_binade_counts_are_two_columns(fmt, dtype):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    from altgrad_lib.numerics.formats import format_summary_table

    fi = ml_dtypes.finfo(getattr(ml_dtypes, dtype))
    row = format_summary_table([fmt]).loc[fmt]
    assert row.normal_binades == fi.maxexp - fi.minexp                     # exponents of the normal values: 15 / 30
    assert row.dynamic_range_log2 == pytest.approx(math.log2(float(fi.max) / float(fi.smallest_subnormal)))
    assert names.column_label("normal_binades") != names.column_label("dynamic_range_log2")


def test_the_control_sentence_names_the_entropy_with_its_split():
    from altgrad_lib.studies import claims

    frame = pd.DataFrame({"label": ["hp", "hp control"] * 2, "seed": [0, 0, 1, 1], "freeze_blocks": [False, True] * 2,
                          "final_val_loss": [6.5, 7.0, 6.6, 7.1]})
    sentence = claims.control_check(frame, "label", "hp", control_level="hp control", entropy=6.17)[2]
    assert f"{names.unigram_entropy_name('val')} (6.170 nats)" in sentence


def test_run_label_names_recipe_size_steps_seeds_and_profile():
    from altgrad_lib.training.config import TrainConfig

    cfg = TrainConfig(recipe="hp", n_layer=2, n_embd=64, max_steps=50)
    assert names.run_label("hp", cfg, [0, 1, 2], "cpu") == "hp: recipe hp, 2L × 64d, 50 steps, seeds 0–2, cpu profile"
    assert names.run_label("hp", seeds=[3]) == "hp: seed 3" and names.run_label("hp", seeds=[0, 2]) == "hp: seeds 0, 2"
    assert names.run_label("hp") == "hp"
