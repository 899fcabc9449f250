"""Tests for altgrad_lib.studies.variants: notebook 05's runs as data, labels with their parts, one-line refusals."""
from __future__ import annotations

import pytest

from altgrad_lib.studies.variants import OPTIMIZER_VARIANTS, optimizer_runs
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
    assert len(OPTIMIZER_VARIANTS) == 8


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
