"""Tests for altgrad_lib.monitors.config and its TrainConfig / CLI hook-up (`-p diagnostics.interval=25`)."""
from __future__ import annotations

import json

import pytest

from altgrad_lib.cli import main
from altgrad_lib.monitors.config import CHEAP_GROUPS, INTERVAL_GROUPS, MONITORS, DiagnosticsConfig
from altgrad_lib.training.config import TrainConfig


def test_presets_and_intervals():
    off, cheap, full = (DiagnosticsConfig.from_value(p) for p in ("off", "cheap", "full"))
    assert not off.enabled and off.short_str() == "diag:off"
    assert cheap.active_groups == CHEAP_GROUPS and cheap.every == 10
    assert full.active_groups == tuple(g for g in MONITORS if g not in INTERVAL_GROUPS) and full.every == 100
    assert INTERVAL_GROUPS == ("curvature", "fisher", "manifold") and full.hessian_interval == full.fisher_interval == 0
    d = DiagnosticsConfig.from_value({"interval": 25, "group_intervals": {"grid": 100}})
    assert d.preset == "full" and d.every == 25 and d.interval_of("grid") == 100
    assert [s for s in range(1, 201) if d.due("grid", s)] == [1, 100, 200]
    assert DiagnosticsConfig.from_value(d.to_dict()) == d


@pytest.mark.parametrize("bad, words", [
    ({"preset": "fast"}, ["preset='fast'", "'off', 'cheap', 'full'"]),
    ({"groups": ["weights", "hessian"]}, ["groups='hessian'", "'counters'"]),
    ({"interval": -1}, ["interval=-1", ">= 0"]),
    ({"output_format": "parquet"}, ["output_format='parquet'", "('csv',)"]),
    ({"entropy_drop": 1.5}, ["entropy_drop=1.5", "(0, 1)"]),
    ({"intervall": 3}, ["intervall", "valid keys"]),
])
def test_errors_are_one_line_and_name_the_choices(bad, words):
    with pytest.raises(ValueError) as ei:
        TrainConfig(diagnostics=bad)
    msg = str(ei.value)
    assert "\n" not in msg and all(w in msg for w in words), msg


def test_dotted_keys_fold_into_the_dict_field_and_do_not_change_the_hash():
    base = TrainConfig()
    c = TrainConfig.from_yaml(None, ["diagnostics.interval=25"])
    assert c.diagnostics["preset"] == "full" and c.diagnostics["interval"] == 25
    c2 = TrainConfig.from_yaml(None, ["diagnostics=cheap", "diagnostics.interval=1",
                                      "diagnostics.group_intervals.events=3"])
    d2 = c2.diagnostics
    assert (d2["preset"], d2["interval"], d2["group_intervals"]) == ("cheap", 1, {"events": 3})
    assert c.config_hash() == c2.config_hash() == base.config_hash()      # monitors never change numbers
    assert TrainConfig.from_dict(c.to_dict()) == c                      # config.yaml round trip
    with pytest.raises(ValueError, match="unknown TrainConfig key"):
        TrainConfig.from_yaml(None, ["lr.x=1"])                          # other keys keep their errors
    r = TrainConfig.from_yaml(None, ["recipe=fp8_hybrid", "recipe.layers.lm_head=null"])
    assert r.recipe == {"recipe": "fp8_hybrid", "layers": {"lm_head": None}}


def test_cli_accepts_dotted_diagnostics(capsys):
    assert main(["train", "-p", "diagnostics.interval=25", "--print-config"]) == 0
    assert json.loads(capsys.readouterr().out)["diagnostics"]["interval"] == 25
    assert main(["train", "-p", "diagnostics.hessian_interval=50", "--print-config"]) == 0
    assert json.loads(capsys.readouterr().out)["diagnostics"]["hessian_interval"] == 50
    assert TrainConfig.from_yaml(None, ["diagnostics.hessian_interval=50"]).config_hash() == TrainConfig().config_hash()
    assert main(["train", "-p", "diagnostics=sometimes", "--print-config"]) == 2
    assert "valid choices: ('off', 'cheap', 'full')" in capsys.readouterr().err
