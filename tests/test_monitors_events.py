"""Tests for altgrad_lib.monitors.events: spike rule vs a hand-rolled EMA, trend / drop alarms, state round trip,
alarm read-back (first_alarms vs brute force) and the lead / missed / false classes."""
from __future__ import annotations

import math

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from altgrad_lib.monitors.base import StepContext
from altgrad_lib.monitors.config import DiagnosticsConfig
from altgrad_lib.monitors.events import ALARMS, EMA_ALPHA, WARMUP, EventsMonitor, first_alarms, warning_outcome


def _mon(**kw) -> EventsMonitor:
    return EventsMonitor(type("A", (), {"cfg": DiagnosticsConfig(**kw)})())


def test_loss_spike_fires_exactly_where_a_reference_ema_says():
    losses = [5.0 - 0.01 * i + (0.02 if i % 2 else -0.02) for i in range(30)] + [9.0, 4.7, 4.7]
    mon, got = _mon(spike_sigma=6.0), []
    for step, v in enumerate(losses):
        mon.observe(step, v, 1.0, lambda kind, layer, val, thr, s=step: got.append((s, kind, val, thr)))
    # reference: exponentially weighted mean/variance, alarm when v > mean + 6·std after WARMUP values
    ref, mean, var = [], None, 0.0
    for step, v in enumerate(losses):
        if step >= WARMUP and v > mean + 6.0 * math.sqrt(var):
            ref.append((step, "loss_spike", v, mean + 6.0 * math.sqrt(var)))
        if mean is None:
            mean = v
        else:
            d = v - mean
            mean, var = mean + EMA_ALPHA * d, (1 - EMA_ALPHA) * (var + EMA_ALPHA * d * d)
    assert [g for g in got if g[1] == "loss_spike"] == ref
    assert [g[0] for g in got if g[1] == "loss_spike"] == [30]


def test_nonfinite_loss_kurtosis_and_entropy_alarms():
    mon, got = _mon(kurtosis_alarm=50.0, kurtosis_trend=2.0, entropy_drop=0.5, window=4), []
    mon.observe(3, math.nan, 1.0, lambda *a: got.append(a))
    assert got == [("loss_nonfinite", "", pytest.approx(math.nan, nan_ok=True), pytest.approx(math.nan, nan_ok=True))]
    seq = [(3.0, 2.0), (3.2, 2.1), (2.9, 2.0), (7.0, 0.9), (60.0, 2.0)]
    events = []
    for step, (k, h) in enumerate(seq):
        ctx = StepContext(step=step, x=None, y=None, snap=None)
        mon.on_rows(step, [(step, "l.c_fc", "X", "kurtosis", k), (step, "l.attn", "head0", "attn_entropy", h)], ctx)
        events += [(e[0], e[1]) for e in ctx.events]
    # step 3: kurtosis 7.0 > 2 × mean(3.0, 3.2, 2.9); entropy 0.9 < 0.5 × mean(2.0, 2.1, 2.0)
    # step 4: 60 > 50 (alarm) and > 2 × mean of the last 4 (trend)
    assert events == [(3, "kurtosis_trend"), (3, "attn_entropy_drop"), (4, "kurtosis_alarm"), (4, "kurtosis_trend")]
    again = _mon(window=4)
    again.load_state_dict(mon.state_dict())
    assert again.state_dict() == mon.state_dict()


def test_first_alarms_is_the_earliest_step_of_each_family_vs_brute_force():
    kinds = [k for ks in ALARMS.values() for k in ks] + ["loss_spike", "unavailable:numerics"]

    @settings(max_examples=60, deadline=None)
    @given(st.lists(st.tuples(st.integers(0, 500), st.sampled_from(kinds)), max_size=30))
    def check(evs):
        got = first_alarms(evs)
        df = first_alarms(pd.DataFrame(evs, columns=["step", "kind"]) if evs else
                          pd.DataFrame({"step": [], "kind": []}))
        assert got == df
        for fam, ks in ALARMS.items():            # brute force: min over the family's kinds, None if none
            steps = [s for s, k in evs if k in ks]
            assert got[fam] == (min(steps) if steps else None)

    check()


def test_warning_outcome_classes():
    assert warning_outcome(30, 12) == 18
    assert warning_outcome(30, 30) == "missed"      # same step: no warning
    assert warning_outcome(30, 31) == "missed"
    assert warning_outcome(30, None) == "missed"
    assert warning_outcome(None, 5) == "false"
    assert warning_outcome(None, None) == "none"


def test_events_monitor_alarm_read_back_by_first_alarms():
    """The monitor's own events, read back: the kurtosis family's first step is the first trend crossing."""
    mon, events = _mon(kurtosis_alarm=50.0, kurtosis_trend=2.0, entropy_drop=0.5, window=8), []
    kurt = [1.0, 1.1, 0.9, 1.0, 1.05, 2.5, 3.0, 70.0]       # 2.5 > 2 × mean(1.0, 1.1, 0.9, 1.0, 1.05) = 2.02
    for step, k in enumerate(kurt, start=1):
        ctx = StepContext(step=step, x=None, y=None, snap=None)
        mon.on_rows(step, [(step, "l.c_fc", "X", "kurtosis", k), (step, "l.attn", "head0", "attn_entropy", 2.0)], ctx)
        events += ctx.events
    assert first_alarms(events) == {"kurtosis": 6, "attn_entropy": None, "grad_norm": None}
