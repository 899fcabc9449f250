"""Tests for altgrad_lib.studies.diagnosis on hand-made runs and diagnostics frames: each verdict branch, the collapse
step and first event against the rows written, and the mechanism table against a by-hand reduction."""
from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from altgrad_lib.studies import diagnosis


def _run(losses, run_dir: Path | str = "nowhere", divergence=None):
    m = pd.DataFrame({"step": range(1, len(losses) + 1), "name": "train/loss", "value": losses})
    m = pd.concat([m, pd.DataFrame({"step": [0], "name": ["val/loss"], "value": [99.0]})])  # other names ignored
    return SimpleNamespace(metrics=m, dir=Path(run_dir), divergence=divergence)


def _summary():
    # control: 5.0 in both seeds; A learned (4.0, 4.2), B only 0.05 below the control in seed 1, C diverged in seed 1
    rows = [("ctl s0", "ctl", 0, "completed", 5.0, 0.0), ("ctl s1", "ctl", 1, "completed", 5.0, 0.0),
            ("A s0", "A", 0, "completed", 4.0, 1.0), ("A s1", "A", 1, "completed", 4.2, 3.0),
            ("B s0", "B", 0, "completed", 4.5, 10.0), ("B s1", "B", 1, "completed", 4.95, 20.0),
            ("C s0", "C", 0, "completed", 4.0, 0.5), ("C s1", "C", 1, "diverged", math.nan, math.nan)]
    return pd.DataFrame(rows, columns=["run", "label", "seed", "status", "final_val_loss", "val_gap_pct"])


def test_verdict_branches():
    s = _summary()
    control = s[s.label == "ctl"].set_index("seed").final_val_loss
    div = {"C s1": {"step": 7, "phase": "train", "first_nonfinite": {"kind": "grad", "name": "h.0.mlp.c_fc"}}}
    a = diagnosis.verdict(s[s.label == "A"], control, div)
    assert a == f"trains: gap +2.00 % ± {np.std([1.0, 3.0], ddof=1):.2f} (n=2)"
    b = diagnosis.verdict(s[s.label == "B"], control, div)
    assert b.startswith("does not train in 1/2 seeds") and "+15.00 %" in b
    c = diagnosis.verdict(s[s.label == "C"], control, div)
    assert c == "diverged in 1/2 seeds; seed 1: at step 7, first non-finite grad h.0.mlp.c_fc"
    div["C s1"]["phase"] = "eval"
    assert diagnosis.verdict(s[s.label == "C"], control, div).endswith("validation loss is non-finite")
    one = diagnosis.verdict(s[(s.label == "A") & (s.seed == 0)], control, div)
    assert one == "trains: gap +1.00 % (n=1)"                      # one seed: no spread
    with pytest.raises(ValueError):
        diagnosis.verdict(s[s.label == "Z"], control, div)


def test_collapse_step_matches_a_loop():
    losses = [6.0, 5.0, 4.0, 7.9, 8.1, 3.0]
    best, expect = math.inf, None
    for step, v in enumerate(losses, start=1):                      # brute force: the rule as stated
        if not math.isfinite(v) or v >= 2 * best:
            expect = step
            break
        best = min(best, v)
    assert diagnosis.collapse_step(_run(losses)) == expect == 5
    assert diagnosis.collapse_step(_run([6.0, 5.0, math.nan])) == 3
    assert diagnosis.collapse_step(_run([6.0, 5.0, 4.0])) is None


def test_first_event_skips_unavailable_notes(tmp_path):
    assert diagnosis.first_event(_run([1.0], tmp_path)) == "none"  # no events.csv
    (tmp_path / "events.csv").write_text("step,kind,layer,value,threshold\n1,unavailable:dY,h.0.attn,nan,nan\n"
                                         "12,kurtosis_spike,h.0.mlp.c_fc,80,50\n9,loss_spike,,5.0,4.0\n")
    assert diagnosis.first_event(_run([1.0], tmp_path)) == "loss_spike at step 9"


def _diag():
    rows = []
    for step in (10, 20):
        for layer, sat, under in (("h.0.attn.c_attn", 0.01 * step, 0.1), ("h.0.mlp.c_fc", 0.0, 0.3)):
            for role in ("X", "W", "dY"):
                rows += [(step, layer, role, "ctr.sat_frac", sat), (step, layer, role, "underflow_frac", under)]
            rows += [(step, layer, "W", "zero_frac", 0.5), (step, layer, "weight", "grad_snr_db", step / 2),
                     (step, layer, "X", "kurtosis", step)]
        rows += [(step, "lm_head", "W", "zero_frac", 0.0),          # not quantized: left out of "W zeros"
                 (step, "lm_head", "X", "kurtosis", 100.0),         # ... but its input kurtosis counts
                 (step, "h.0.attn", "head0", "attn_entropy", 2.0 - step / 100),
                 (step, "h.0.mlp.c_fc", "weight", "grad_cos", math.nan)]   # non-finite: ignored
    return pd.DataFrame(rows, columns=["step", "layer", "role", "metric", "value"])


def test_mechanism_by_hand():
    d = _diag()
    assert diagnosis.quantized_layers(d) == {"h.0.attn.c_attn", "h.0.mlp.c_fc"}
    m = diagnosis.mechanism(d)
    assert m["X sat"] == pytest.approx(np.mean([0.1, 0.0, 0.2, 0.0]))
    assert m["dY under"] == pytest.approx(0.2)
    assert m["W zeros"] == pytest.approx(0.5)
    assert m["grad SNR dB"] == pytest.approx(np.median([5, 5, 10, 10]))
    assert m["kurtosis max"] == 100.0
    assert m["attn H min"] == pytest.approx(1.8)
    assert math.isnan(m["grad cos"]) and math.isnan(m["W stall"])  # only NaN / never measured
    t = diagnosis.mechanism_table({"E4M3": d, "hp": d[~d.metric.isin(diagnosis.QUANTIZER_METRICS)]})
    assert list(t.columns) == list(diagnosis.MECH) and list(t.index) == ["E4M3", "hp"]
    assert math.isnan(t.loc["hp", "W zeros"])                       # hp: no quantizer, no quantized layer


def test_verdict_table(tmp_path):
    s = _summary()
    runs = {r: _run([6.0, 5.0, 4.0], tmp_path) for r in s.run}
    runs["C s1"].divergence = {"step": 3, "phase": "eval"}
    verdicts, table = diagnosis.verdict_table(s, runs, ["A", "B", "C"], "ctl", 0)
    assert verdicts["C"].startswith("diverged in 1/2") and list(table.index) == ["A", "B", "C"]
    assert list(table.columns) == ["verdict", "collapse starts", "first event"]
    assert (table["first event"] == "none").all() and table["collapse starts"].isna().all()
