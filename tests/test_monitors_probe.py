"""Tests for altgrad_lib.monitors.probe: the replay sees exactly the training step's tensors and leaves the
live model, its gradients and every RNG stream untouched."""
from __future__ import annotations

import contextlib

import torch

from altgrad_lib.state import snapshot_state
from altgrad_lib.model import GPT, GPTConfig
from altgrad_lib.monitors.health import tensor_health
from altgrad_lib.monitors.probe import Probe
from altgrad_lib.quantize.convert import quantize_model

SR = {"name": "sr", "recipe": "fp8_hybrid", "layers": {"*": {
    "input": {"fmt": "E4M3", "scaling": {"kind": "delayed"}},
    "weight": {"fmt": "E4M3", "rounding": "stochastic"}, "grad_output": {"fmt": "E5M2", "rounding": "stochastic"}}}}


def test_replay_reproduces_the_training_steps_tensors_and_touches_nothing():
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=8, vocab_size=64, dropout=0.1))
    quantize_model(model, SR, verbose=False)
    probe = Probe(model, contextlib.nullcontext)
    x, y = torch.randint(0, 64, (2, 8)), torch.randint(0, 64, (2, 8))
    for _ in range(2):          # a first step, so delayed scaling has history and SR generators have advanced
        _, loss = model(x, y)
        loss.backward()
    fc = model.transformer.h[0].mlp.c_fc
    seen = {}
    h1 = fc.w_quant.register_forward_hook(lambda m, i, o: seen.__setitem__("W", (i[0].detach(), o.detach())))
    h2 = fc.x_quant.register_forward_hook(lambda m, i, o: seen.__setitem__("X", (i[0].detach(), o.detach())))
    snap = snapshot_state(model)
    pre = {"W": model.transformer.h[0].mlp.c_fc.w_quant.scaler.scale_peek(fc.weight)}
    model.zero_grad(set_to_none=True)
    _, loss = model(x, y)                    # the "training step"
    loss.backward()
    h1.remove(), h2.remove()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    state = {k: v.clone() for k, v in model.state_dict().items() if torch.is_tensor(v)}
    extra = fc.w_quant.get_extra_state()["rng_state"].clone()
    rng = torch.get_rng_state()
    out = probe.replay(x, y, snap, numerics=True, activations=True)
    # untouched: RNG, grads, buffers, SR generator state
    assert torch.equal(torch.get_rng_state(), rng)
    assert all(torch.equal(p.grad, grads[n]) for n, p in model.named_parameters())
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items() if torch.is_tensor(v))
    assert torch.equal(fc.w_quant.get_extra_state()["rng_state"], extra)
    # the replay's W health equals the health of the training step's own W quantization (same SR bits)
    w_in, w_out = seen["W"]
    ref = tensor_health(w_in, w_out, pre["W"], fc.w_quant.spec.fmt)
    got = out["health"][("transformer.h.0.mlp.c_fc", "W")]
    for k in ("overflow_frac", "underflow_frac", "subnormal_frac", "amax", "sqnr_db"):
        assert torch.equal(got[k], ref[k]), k
    x_in, x_out = seen["X"]                  # dropout masks and delayed scale are the step's too
    assert torch.equal(out["health"][("transformer.h.0.mlp.c_fc", "X")]["sqnr_db"],
                       tensor_health(x_in, x_out, 1.0, fc.x_quant.spec.fmt)["sqnr_db"])
    assert set(out["kurtosis"]) >= {"transformer.h.0.mlp.c_fc", "lm_head"}
    assert out["attn_entropy"]["transformer.h.0.attn"].shape == (2,)
