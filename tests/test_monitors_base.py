"""Tests for altgrad_lib.monitors.base: StepContext turns emitted scalars, tensors and histograms into rows."""
from __future__ import annotations

import math

import torch

from altgrad_lib.monitors.base import StepContext


def test_materialize_keeps_order_and_writes_only_non_empty_bins():
    ctx = StepContext(step=7, x=None, y=None, snap=None)
    ctx.emit("a", "X", "m1", torch.tensor(0.25))
    ctx.emit("", "", "m2", 3)
    ctx.emit_hist("b", "W", "hist.dcode", torch.tensor([1, 0, 3]), [-1, 0, 1])
    ctx.emit("a", "dY", "m3", torch.tensor(float("nan")))
    ctx.emit("a", "dY", "m4", torch.tensor(5, dtype=torch.int64))
    rows = ctx.materialize()
    assert rows[:2] == [(7, "a", "X", "m1", 0.25), (7, "", "", "m2", 3.0)]
    assert rows[2:4] == [(7, "b", "W", "hist.dcode:-1", 0.25), (7, "b", "W", "hist.dcode:1", 0.75)]
    assert rows[4][:4] == (7, "a", "dY", "m3") and math.isnan(rows[4][4]) and rows[5] == (7, "a", "dY", "m4", 5.0)
    assert ctx.materialize() == []           # cleared
