"""Tests for altgrad_lib.monitors.activations: kurtosis vs scipy, attention entropy vs a hand-computed softmax
and vs the model's own attention probabilities, dead-unit window vs a brute-force loop."""
from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats
import torch

from altgrad_lib.model import GPT, GPTConfig
from altgrad_lib.monitors.activations import ActivationsMonitor, attention_entropy, kurtosis
from altgrad_lib.monitors.base import StepContext
from altgrad_lib.monitors.config import DiagnosticsConfig
from altgrad_lib.monitors.probe import _qk


def test_kurtosis_matches_scipy():
    g = torch.Generator().manual_seed(0)
    for x in (torch.randn(4, 50, generator=g), torch.distributions.StudentT(3.0).sample((2000,)),
              torch.rand(3, 7, 11, generator=g)):
        assert float(kurtosis(x)) == pytest.approx(scipy.stats.kurtosis(x.double().numpy().ravel()), rel=1e-9)


def test_attention_entropy_by_hand():
    # one head, T=3, hs=1: scores q_i·k_j / 1, causal rows of length 1, 2, 3
    q = torch.tensor([1.0, 2.0, -1.0]).view(1, 1, 3, 1)
    k = torch.tensor([0.5, -1.0, 3.0]).view(1, 1, 3, 1)
    rows = []
    for i in range(3):
        s = [float(q[0, 0, i, 0] * k[0, 0, j, 0]) for j in range(i + 1)]
        z = sum(math.exp(v) for v in s)
        p = [math.exp(v) / z for v in s]
        rows.append(-sum(pi * math.log(pi) for pi in p))
    assert float(attention_entropy(q, k)[0]) == pytest.approx(sum(rows) / 3, rel=1e-12)


def test_attention_entropy_from_c_attn_matches_the_models_probabilities():
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=8, vocab_size=64)).eval()
    idx = torch.randint(0, 64, (2, 8))
    seen = {}
    h = model.transformer.h[0].attn.c_attn.register_forward_hook(lambda m, i, o: seen.__setitem__("o", o.detach()))
    with torch.no_grad(), model.capture_attention() as probs:
        model(idx)
    h.remove()
    p = probs[0].double().numpy()                                  # (B, nh, T, T)
    ref = -(np.where(p > 0, p * np.log(np.where(p > 0, p, 1)), 0)).sum(-1).mean(axis=(0, 2))
    got = attention_entropy(*_qk(seen["o"], 2))
    assert got.numpy() == pytest.approx(ref, rel=1e-5)


def test_dead_units_over_the_window_match_a_loop():
    cfg = DiagnosticsConfig(window=3)
    mon = ActivationsMonitor(type("A", (), {"cfg": cfg})())
    g = torch.Generator().manual_seed(1)
    masks = [torch.rand(20, generator=g) < 0.15 for _ in range(6)]
    for step, m in enumerate(masks):
        ctx = StepContext(step=step, x=None, y=None, snap=None,
                          cache={"replay": {"kurtosis": {}, "attn_entropy": {}, "fired": {"mlp": m}}})
        mon.on_backward(ctx)
        rows = {r[3]: r[4] for r in ctx.materialize()}
        win = masks[max(0, step - 2): step + 1]
        dead = sum(1 for u in range(20) if not any(bool(w[u]) for w in win)) / 20
        assert rows["dead_frac"] == pytest.approx(dead, abs=0)
        assert rows["fired_frac"] == int(m.sum()) / 20
    st = mon.state_dict()
    again = ActivationsMonitor(type("A", (), {"cfg": cfg})())
    again.load_state_dict(st)
    assert [torch.equal(a, b) for a, b in zip(again.fired["mlp"], mon.fired["mlp"])] == [True] * 3
