"""Tests for altgrad_lib.monitors.gradients: SNR / cosine against quant.sqnr_db and numpy, and the FP32
shadow's gradients against an independently built unquantized GPT with the same weights."""
from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch

from altgrad_lib.model import GPT, GPTConfig
from altgrad_lib.monitors.gradients import cosine, grad_snr_db
from altgrad_lib.monitors.probe import Probe
from altgrad_lib.numerics.quant import sqnr_db
from altgrad_lib.quantize.convert import quantize_model


def test_snr_and_cosine_match_references():
    g = torch.Generator().manual_seed(0)
    ref = torch.randn(300, generator=g)
    approx = ref + 0.01 * torch.randn(300, generator=g)
    # rel 1e-9 (not 1e-12): snr_cos forms g − ref in float32 to avoid float64 copies (~1e-9 dB here)
    assert float(grad_snr_db(approx, ref)) == pytest.approx(sqnr_db(ref, approx), rel=1e-9)
    assert float(grad_snr_db(ref, ref)) == float("inf")
    a, b = ref.double().numpy(), approx.double().numpy()
    assert float(cosine(approx, ref)) == pytest.approx(a @ b / np.linalg.norm(a) / np.linalg.norm(b), rel=1e-12)


def _models():
    cfg = GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=8, vocab_size=64, dropout=0.1)
    torch.manual_seed(0)
    plain = GPT(cfg)
    quant = GPT(cfg)
    quant.load_state_dict(plain.state_dict())
    quantize_model(quant, "fp8_hybrid", verbose=False)
    return plain, quant


def test_shadow_grads_equal_an_unquantized_model_and_leave_training_untouched():
    plain, quant = _models()
    x, y = torch.randint(0, 64, (2, 8)), torch.randint(0, 64, (2, 8))
    from altgrad_lib.state import snapshot_state
    snap = snapshot_state(quant)
    probe = Probe(quant, contextlib.nullcontext)
    before_rng = torch.get_rng_state()
    state_before = {k: (v.clone() if torch.is_tensor(v) else v) for k, v in quant.state_dict().items()}
    shadow = probe.shadow_grads(x, y, snap)
    assert torch.equal(torch.get_rng_state(), before_rng)          # the live RNG stream is untouched
    for k, v in quant.state_dict().items():
        if torch.is_tensor(v):
            assert torch.equal(v, state_before[k]), k
    assert all(p.grad is None for p in quant.parameters())
    torch.set_rng_state(snap["rng"]["torch"])                      # the same dropout masks as the shadow
    _, loss = plain(x, y)
    loss.backward()
    for n, p in plain.named_parameters():
        assert torch.allclose(shadow[n], p.grad, rtol=1e-5, atol=1e-7), n
    # and the quantized gradients really differ from it (the comparison can fail)
    torch.set_rng_state(snap["rng"]["torch"])
    _, lq = quant(x, y)
    lq.backward()
    w = "transformer.h.0.mlp.c_fc.weight"
    assert float(grad_snr_db(dict(quant.named_parameters())[w].grad, shadow[w])) < 60


def test_gradient_rows_and_clipping_counts(tmp_path):
    from altgrad_lib.monitors import read_diagnostics
    from altgrad_lib.monitors.config import DiagnosticsConfig
    from altgrad_lib.monitors.diagnostics import Diagnostics
    plain, _ = _models()
    x = torch.randint(0, 64, (2, 8))
    _, loss = plain(x, x)
    loss.backward()
    d = Diagnostics(DiagnosticsConfig(groups=("gradients",), interval=4), tmp_path, plain, grad_clip=1.0)
    d.start(0, None)
    norms = [0.5, 2.0, 3.0, 0.9, 1.5, 0.2, 0.1, 4.0]           # clipped: steps 2, 3, 5, 8
    for step, gn in enumerate(norms, start=1):
        d.after_backward(step, x, x, None)
        d.after_step(step, 1.0, gn, 1e-3)
    d.close()
    df = read_diagnostics(tmp_path).set_index(["step", "layer", "role", "metric"])["value"]
    assert [df[(s, "", "", "clipped_frac")] for s in (1, 4, 8)] == [0.0, 2 / 3, 2 / 4]
    assert [df[(s, "", "", "clipped")] for s in (1, 4, 8)] == [0.0, 0.0, 1.0]
    w = dict(plain.named_parameters())["transformer.h.0.mlp.c_fc.weight"]
    g = w.grad.double().numpy()
    key = (1, "transformer.h.0.mlp.c_fc", "weight")
    assert df[key + ("grad_norm",)] == pytest.approx(np.linalg.norm(g), rel=1e-12)
    assert df[key + ("grad_mean",)] == pytest.approx(g.mean(), rel=1e-5, abs=1e-12)
    assert df[key + ("grad_var",)] == pytest.approx(g.var(), rel=1e-5)
    assert df[key + ("grad_to_weight",)] == pytest.approx(
        np.linalg.norm(g) / np.linalg.norm(w.double().detach().numpy()), rel=1e-12)
