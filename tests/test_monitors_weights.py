"""Tests for altgrad_lib.monitors.weights: log2 histograms, fraction at ±max, staleness and KL to a baseline
run against numpy / scipy / ml_dtypes computations."""
from __future__ import annotations


import ml_dtypes
import numpy as np
import pytest
import scipy.stats
import torch

from altgrad_lib.model import GPT, GPTConfig
from altgrad_lib.monitors import read_diagnostics
from altgrad_lib.monitors.config import DiagnosticsConfig
from altgrad_lib.monitors.diagnostics import Diagnostics
from altgrad_lib.monitors.weights import KL_EPS, kl_bits
from altgrad_lib.quantize.convert import quantize_model


def test_kl_bits_matches_scipy():
    p = {"hist.log2w:-3": 0.5, "hist.log2w:-2": 0.25, "hist.log2w:-1": 0.25}
    q = {"hist.log2w:-3": 0.25, "hist.log2w:-2": 0.75}
    n = 5
    bins = ["hist.log2w:-3", "hist.log2w:-2", "hist.log2w:-1", "hist.log2w:0", "hist.log2w:1"]
    pv = np.array([p.get(b, 0.0) for b in bins])
    qv = (np.array([q.get(b, 0.0) for b in bins]) + KL_EPS) / (1 + KL_EPS * n)
    assert kl_bits(p, q, n) == pytest.approx(scipy.stats.entropy(pv, qv, base=2), rel=1e-12)
    assert kl_bits(p, p, n) == pytest.approx(0.0, abs=1e-5)


def _run(out, baseline: str = "", steps: int = 3, lr: float = 1e-2):
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=8, vocab_size=64))
    quantize_model(model, "fp8_hybrid", verbose=False)
    d = Diagnostics(DiagnosticsConfig(groups=("weights",), interval=1, baseline_run=baseline), out, model)
    d.start(0, None)
    w = model.transformer.h[0].mlp.c_fc.weight
    history = [w.detach().clone()]
    for step in range(1, steps + 1):
        d.after_backward(step, None, None, None)
        with torch.no_grad():
            w[: w.shape[0] // 2] += lr * torch.randn(w.shape[0] // 2, w.shape[1])   # half the rows move
        d.after_step(step, 1.0, 1.0, lr)
        history.append(w.detach().clone())
    d.close()
    return read_diagnostics(out), history


def _e4m3_codes(w: torch.Tensor) -> np.ndarray:
    s = np.float32(448.0) / np.float32(w.abs().max())            # current scaling: amax -> fmt.max
    return np.clip(w.numpy() * s, -448, 448).astype(ml_dtypes.float8_e4m3fn).view(np.uint8), s


def test_histogram_staleness_and_frac_at_max(tmp_path):
    df, hist = _run(tmp_path)
    layer = "transformer.h.0.mlp.c_fc"
    d = df[df["layer"] == layer].set_index(["step", "metric"])["value"]
    for step in (1, 2, 3):
        w = hist[step].double().numpy().ravel()
        e = np.floor(np.log2(np.abs(w[w != 0]))).clip(-24, 8).astype(int)
        for k, c in zip(*np.unique(e, return_counts=True)):
            assert d[(step, f"hist.log2w:{k}")] == pytest.approx(c / w.size, abs=0)
        c_now, _ = _e4m3_codes(hist[step])
        c_prev, _ = _e4m3_codes(hist[step - 1])
        if step > 1:   # staleness compares with the previous diagnostic step's codes
            assert d[(step, "staleness")] == pytest.approx((c_now == c_prev).mean(), abs=0)
        at_max = np.isin(c_now, [0x7E, 0xFE]).mean()               # ±448
        assert d[(step, "frac_at_max")] == pytest.approx(at_max, abs=0) and at_max > 0
    assert (1, "staleness") not in d.index
    # half the rows moved (and the amax, so the scale, changed): both kinds present, the test can fail either way
    assert 0 < d[(3, "staleness")] < 1


def test_kl_to_a_baseline_run_at_the_same_step(tmp_path):
    base, _ = _run(tmp_path / "base", lr=1e-2)
    df, _ = _run(tmp_path / "run", baseline=str(tmp_path / "base"), lr=5e-2)
    kl = df[df["metric"] == "kl_log2w_bits"].set_index(["step", "layer"])["value"]
    layers = sorted(df[df["metric"].str.startswith("hist.log2w:")]["layer"].unique())
    assert len(layers) == 6 and len(kl) == 3 * len(layers)      # wte (tied lm_head), wpe, 4 Linears; 3 steps
    bins = [f"hist.log2w:{k}" for k in range(-24, 9)]
    for (step, layer), v in kl.items():
        p = df[(df["step"] == step) & (df["layer"] == layer)].set_index("metric")["value"]
        q = base[(base["step"] == step) & (base["layer"] == layer)].set_index("metric")["value"]
        pv = np.array([p.get(b, 0.0) for b in bins])
        qv = (np.array([q.get(b, 0.0) for b in bins]) + KL_EPS) / (1 + KL_EPS * len(bins))
        assert v == pytest.approx(scipy.stats.entropy(pv, qv, base=2), rel=1e-9, abs=1e-12)
    assert kl.max() > 0
