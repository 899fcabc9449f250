"""monitors/geometry.py's update_lost row (numerics/grid_metrics.update_lost): the share of an optimizer step the
weight format's rounding hides from the forward, against a slow reference built from the layer's own weight Quantizer
(its dequantized output, Python-float norms), and its two ends: 0 for an update made of whole grid steps, 1 for one
far under half an ULP."""
from __future__ import annotations

import math

import pytest
import torch

from altgrad_lib.model import GPT, GPTConfig
from altgrad_lib.monitors.config import DiagnosticsConfig
from altgrad_lib.monitors.diagnostics import Diagnostics
from altgrad_lib.monitors.writer import read_diagnostics
from altgrad_lib.numerics import grid_metrics as grid
from altgrad_lib.numerics.formats import get_format
from altgrad_lib.numerics.grid import grid_scale, to_grid
from altgrad_lib.numerics.quantizer import Quantizer
from altgrad_lib.quantize.convert import quantize_model


def _slow_lost(q0: torch.Tensor, q1: torch.Tensor, w0: torch.Tensor, w1: torch.Tensor) -> float:
    """‖(q1 − q0) − (w1 − w0)‖ / ‖w1 − w0‖ entry by entry in Python floats (exact differences of fp32 values)."""
    num = sum(((b - a) - (d - c)) ** 2 for a, b, c, d in zip(q0.flatten().tolist(), q1.flatten().tolist(),
                                                            w0.flatten().tolist(), w1.flatten().tolist()))
    den = sum((d - c) ** 2 for c, d in zip(w0.flatten().tolist(), w1.flatten().tolist()))
    return math.sqrt(num) / math.sqrt(den)


@pytest.mark.parametrize("fmt", ["E4M3", "E2M5", "bf16"])
def test_update_lost_matches_the_quantizers_own_dequantized_weights(fmt):
    """Current per-tensor scaling, round to nearest: Q(w) = Quantizer.quantize_stateless(w), its own scale (a new
    amax after the step gives a new scale: both sides use each weight's own)."""
    q = Quantizer({"fmt": fmt, "scaling": "current"})
    g = torch.Generator().manual_seed(0)
    w0 = torch.randn(24, 16, generator=g) * 0.05
    # half the entries move far under an ULP, half by several: both kinds, so the value is strictly inside (0, 1)
    w1 = w0 + torch.randn(24, 16, generator=g) * torch.where(torch.rand(24, 16, generator=g) < 0.5, 1e-6, 5e-3)
    got = float(grid.update_lost(w0, w1, q.spec.fmt, q.scale_of(w0), q.scale_of(w1)))
    want = _slow_lost(q.quantize_stateless(w0), q.quantize_stateless(w1), w0, w1)
    assert 0 < want < 1
    assert got == pytest.approx(want, rel=1e-9)      # float64 norms of the same fp32 values: only summation order


@pytest.mark.parametrize("fmt", ["E4M3", "E3M4", "E1M6"])
def test_update_lost_is_0_for_whole_grid_steps_and_1_far_under_half_an_ulp(fmt):
    f = get_format(fmt)
    s = grid_scale(3)                                  # a power of two: w on the grid is exactly representable
    g = torch.Generator().manual_seed(1)
    w0 = f.quantize(torch.randn(16, 8, generator=g) * f.max / 8) / s       # on the grid, no saturation
    w0 = w0[w0.abs() < f.max / 4 / s]                  # room for one step away from zero without saturating
    step = torch.sign(w0) * f.ulp(w0 * s) / s          # to the neighbouring grid value away from zero (0 -> +)
    step = torch.where(w0 == 0, f.ulp(w0 * s) / s, step)
    w1 = w0 + step
    assert torch.equal(to_grid(w1, f, s), w1)       # the update's end is on the grid too
    assert float(grid.update_lost(w0, w1, f, s, s)) == 0.0
    tiny = w0 + 1e-3 * f.ulp(w0 * s) / s * torch.where(torch.arange(w0.numel()) % 2 == 0, 1.0, -1.0)
    assert float(grid.update_lost(w0, tiny, f, s, s)) == 1.0
    assert math.isnan(float(grid.update_lost(w0, w0, f, s, s)))   # no update: not measurable, never a stand-in 0


def test_grid_group_writes_update_lost_of_every_quantized_weight(tmp_path):
    """Through Diagnostics (the grid group): the row of each E4M3-quantized Linear (fp8_hybrid) equals the slow
    reference from that layer's weight Quantizer, for a step that changes every weight a little."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=8, vocab_size=64))
    quantize_model(model, {"name": "t", "recipe": "fp8_hybrid"}, verbose=False)
    layers = {n: m for n, m in model.named_modules() if getattr(m, "w_quant", None) is not None}
    assert layers
    d = Diagnostics(DiagnosticsConfig(groups=("grid",), interval=1), tmp_path, model)
    d.start(0, None)
    d.after_backward(1, None, None, None)
    w0 = {n: m.weight.detach().clone() for n, m in layers.items()}
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for m in layers.values():
            m.weight.add_(torch.randn(m.weight.shape, generator=g) * 1e-3)
    d.after_step(1, 1.0, 1.0, 1e-3)
    d.close()
    df = read_diagnostics(tmp_path)
    rows = df[df.metric == "update_lost"].set_index("layer")["value"]
    assert set(rows.index) == set(layers)
    for n, m in layers.items():
        w1 = m.weight.detach()
        want = _slow_lost(m.w_quant.quantize_stateless(w0[n]), m.w_quant.quantize_stateless(w1), w0[n], w1)
        assert rows[n] == pytest.approx(want, rel=1e-9)
