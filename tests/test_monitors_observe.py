"""Quantizer.observe: the one way monitors learn what a quantization did (the scale used, per block where blocked).

The replay's numbers are checked against the implementation they replaced, kept here as the reference: forward
hooks and monkeypatched bound `quantize` methods that re-derived each scale outside the quantizer (scale_peek before
the call, elementwise_scale for block kinds)."""
from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch

from altgrad_lib.model import GPT, GPTConfig
from altgrad_lib.monitors.health import tensor_health
from altgrad_lib.monitors.probe import Probe, layer_histograms
from altgrad_lib.numerics.block_scaling import block_flush_stats, block_scale_stats, elementwise_scale
from altgrad_lib.numerics.quantizer import Quantizer
from altgrad_lib.quantize.convert import quantize_model
from altgrad_lib.quantize.gemm_overrides import override_label, override_quantizers
from altgrad_lib.quantize.linear import QuantizedLinear
from altgrad_lib.quantize.recipes import get_policy

DELAYED = {"name": "dl", "layers": {"*": {"input": {"fmt": "E4M3", "scaling": "delayed"},
                                          "weight": {"fmt": "E4M3", "scaling": "delayed"},
                                          "grad_output": {"fmt": "E5M2", "scaling": "per_row"}}}}
OVERRIDES = {"name": "ov", "layers": {"*": {"input": "E4M3", "weight": "E4M3", "grad_output": "E5M2", "gemm": {
    "rht": [], "overrides": {"wgrad": {"input": "E5M2", "grad_output": {"fmt": "E4M3", "scaling": "delayed"}},
                             "dgrad": {"weight": {"fmt": "E2M1", "scaling": "mx"}}}}}}}


@pytest.mark.parametrize("spec", ["E4M3", {"fmt": "E4M3", "scaling": "delayed"}, {"fmt": "E5M2", "scaling": "per_row"},
                                  {"fmt": "E4M3", "scaling": "mx"}, {"fmt": "E2M1", "scaling": "nvfp4"}])
@pytest.mark.parametrize("axis", [-1, 0])
def test_an_event_reports_the_output_and_the_scale_the_call_used(spec, axis):
    torch.manual_seed(0)
    q, x = Quantizer(spec), torch.randn(32, 64) * 3
    q.quantize(torch.randn(32, 64))                           # delayed: a history, so the scale is not the first
    events = []
    h = q.observe(events.append)
    before = q.scale_of(x, axis) if not q.stateful else q.scaler.scale_peek(x.movedim(axis, -1))
    y = q.quantize(x, axis=axis)
    h.remove()
    q.quantize(x, axis=axis)                                 # removed: no more events
    assert len(events) == 1
    ev = events[0]
    assert torch.equal(ev.x, x.movedim(axis, -1)) and torch.equal(ev.y, y.movedim(axis, -1))
    assert torch.equal(ev.scale, before)
    # the reported scale is the one applied: y = Q(x·s)/s elementwise (block kinds: up to the decode product)
    f = q.spec.fmt
    if q.is_block:
        assert ev.eps_hits is None and ev.scale.shape == ev.x.shape
    else:
        assert torch.equal(ev.y, f.quantize(ev.x * ev.scale) / ev.scale) and int(ev.eps_hits) == 0


def _reference_health(model, x, y):
    """The replaced implementation (probe.py before Quantizer.observe), on `model` itself."""
    sink, handles, patched = {}, [], []

    def hooks(q, fqn, role):
        pending = {}

        def pre(m, inp):
            pending["s"], pending["eps"] = m.scaler.scale_peek(inp[0]), m.scaler.eps_hits.clone()

        def post(m, inp, out):
            sink[(fqn, role)] = tensor_health(inp[0].detach(), out.detach(), pending["s"], m.spec.fmt,
                                              m.scaler.eps_hits - pending["eps"])
        return [q.register_forward_pre_hook(pre), q.register_forward_hook(post)]

    def patch(q, fqn, role):
        orig = q.quantize

        def quantize(g, axis=-1):
            gm = g.movedim(axis, -1)
            s, eps0 = q.scaler.scale_peek(gm), q.scaler.eps_hits.clone()
            out = orig(g, axis=axis)
            sink[(fqn, role)] = tensor_health(gm.detach(), out.movedim(axis, -1).detach(), s, q.spec.fmt,
                                              q.scaler.eps_hits - eps0)
            return out
        q.quantize = quantize

    def patch_block(q, fqn, role):
        orig = q.quantize

        def quantize(t, axis=-1):
            out = orig(t, axis=axis)
            if (fqn, role) not in sink:
                fmt, cfg = q.spec.fmt, q.spec.scaling
                tm, om = t.detach().movedim(axis, -1), out.detach().movedim(axis, -1)
                h = tensor_health(tm, om, elementwise_scale(tm, fmt, cfg), fmt)
                h.update(block_scale_stats(tm, fmt, cfg))
                h.update(block_flush_stats(tm, om, cfg))
                sink[(fqn, role)] = h
            return out
        q.quantize = quantize

    for fqn, mod in model.named_modules():
        if not isinstance(mod, QuantizedLinear):
            continue
        points = [("X", mod.x_quant), ("W", mod.w_quant), ("dY", mod.g_quant)]
        points += [(override_label(g, r), q) for g, r, q in override_quantizers(mod)]
        for role, q in points:
            if q is None:
                continue
            if q.is_block:
                patch_block(q, fqn, role)
            elif role in ("X", "W") and mod.gemm is None:
                handles += hooks(q, fqn, role)
                continue
            else:
                patch(q, fqn, role)
            patched.append(q)
    try:
        _, loss = model(x, y)
        torch.autograd.grad(loss, [p for p in model.parameters() if p.requires_grad], allow_unused=True)
    finally:
        for h in handles:
            h.remove()
        for q in patched:
            del q.quantize
    return sink


@pytest.mark.parametrize("recipe", ["fp8_hybrid", "nvfp4", "mxfp8", DELAYED, OVERRIDES],
                         ids=["fp8_hybrid", "nvfp4", "mxfp8", "delayed", "overrides"])
def test_the_replay_health_equals_the_patching_reference(recipe):
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=64, block_size=32, n_layer=1, n_head=2, n_embd=32))
    quantize_model(model, get_policy(recipe, seed=0), verbose=False)
    x = torch.randint(0, 64, (2, 32))
    y = torch.randint(0, 64, (2, 32))
    probe = Probe(model, contextlib.nullcontext)
    ref_model = Probe(model, contextlib.nullcontext).copy    # the same copy state as the probe's, before replay
    got = probe.replay(x, y, None, numerics=True, activations=False)["health"]
    ref = _reference_health(ref_model, x, y)
    assert got.keys() == ref.keys() and len(got) >= 9
    for k in ref:
        assert got[k].keys() == ref[k].keys(), k
        for m in ref[k]:
            assert torch.equal(got[k][m], ref[k][m]) or (got[k][m].isnan() and ref[k][m].isnan()), (k, m)
    qs = [q for m in probe.copy.modules() if isinstance(m, Quantizer) for q in [m]]
    assert qs and all(not q._observers and "quantize" not in vars(q) for q in qs)   # nothing left attached


def _np_hist(t: torch.Tensor, s: torch.Tensor, fmt) -> dict[str, float]:
    """numpy reference of the hist.log2xs rows: floor(log2 |t·s|) of the float32 product, clamped to the format's
    window ± 4 binades (written out here from min_subnormal and max), as fractions, empty bins left out."""
    lo, hi = int(np.floor(np.log2(fmt.min_subnormal))) - 4, int(np.floor(np.log2(fmt.max))) + 4
    xs = np.abs(t.numpy().astype(np.float32) * s.numpy().astype(np.float32))
    xs = xs[np.isfinite(xs) & (xs > 0)]
    c = np.bincount(np.clip(np.floor(np.log2(xs.astype(np.float64))), lo, hi).astype(int) - lo,
                    minlength=hi - lo + 1)
    return {f"hist.log2xs:{lo + i}": v / c.sum() for i, v in enumerate(c) if v}


def test_layer_histograms_are_each_operand_scaled_by_its_own_quantizer():
    """fmt:E4M3 (X, W in E4M3, dY in E5M2, per-tensor current scaling: a stateless scale, so scale_of gives the one the
    call used): each operand's rows equal the numpy histogram of t·s over its own format's window."""
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(16, 32, generator=g), torch.randn(24, 32, generator=g) * 0.02
    dy = torch.randn(16, 24, generator=g) * 1e-6
    d = layer_histograms("fmt:E4M3", x, w, dy)
    spec = get_policy("fmt:E4M3").spec_for("mlp_up")
    assert set(d.layer) == {"transformer.h.0.mlp.c_fc"} and set(d.step) == {0}
    for role, t, qs in (("X", x, spec.input), ("W", w, spec.weight), ("dY", dy, spec.grad_output)):
        q = Quantizer(qs)
        got = d[d.role == role].set_index("metric").value.to_dict()
        ref = _np_hist(t, q.scale_of(t), q.spec.fmt)
        assert got.keys() == ref.keys() and all(got[k] == pytest.approx(ref[k], rel=1e-12) for k in ref), role
    with pytest.raises(ValueError, match="high precision"):
        layer_histograms("fp8_hybrid", x, w, dy, layer_class="lm_head")
