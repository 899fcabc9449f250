"""Tests for altgrad_lib.quantize.layer_sqnr: analytic SQNR of signal + noise, identity copies give +inf, and an E4M3
weight-quantized copy lands in the band 3 mantissa bits allow.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from altgrad_lib.quantize import layer_sqnr
from altgrad_lib.numerics.formats import get_format
from altgrad_lib.numerics.quant import sqnr_db


def test_sqnr_known_signal_plus_noise():
    g = torch.Generator().manual_seed(0)
    s = torch.randn(1_000_000, generator=g)
    n = 0.01 * torch.randn(1_000_000, generator=g)
    assert sqnr_db(s, s + n) == pytest.approx(40.0, abs=0.05)
    assert sqnr_db(s, s) == math.inf
    assert sqnr_db(s, 0.5 * s) == pytest.approx(20 * math.log10(2), abs=1e-9)


class _TinyLM(torch.nn.Module):
    """Two Linears and a loss, the (logits, loss) interface layer_sqnr expects."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.up = torch.nn.Linear(16, 32)
        self.down = torch.nn.Linear(32, 8)

    def forward(self, x, y):
        logits = self.down(torch.relu(self.up(x)))
        return logits, torch.nn.functional.cross_entropy(logits, y)


def test_layer_sqnr_identity_and_quantized_copy():
    model = _TinyLM()
    x, y = torch.randn(64, 16, requires_grad=True), torch.randint(0, 8, (64,))  # grad wrt x -> dX of layer 1
    same = layer_sqnr.layer_sqnr(model, _TinyLM(), x, y)
    assert list(same.layer) == ["up", "down"]
    assert np.isinf(same[["out_sqnr_db", "grad_in_sqnr_db", "grad_w_sqnr_db"]].to_numpy()).all()

    def to_e4m3(m, policy):  # weight-only fake quantization in place: a stand-in for surgery
        with torch.no_grad():
            for lin in (m.up, m.down):
                s = get_format("E4M3").max / lin.weight.abs().max()
                lin.weight.copy_(get_format("E4M3").quantize(lin.weight * s) / s)

    q = layer_sqnr.quantized_copy_sqnr(model, None, x, y, convert=to_e4m3)
    assert np.isfinite(q.out_sqnr_db).all()
    assert q.out_sqnr_db.between(15, 45).all(), q  # E4M3 (3 mantissa bits) gives ~25-30 dB
