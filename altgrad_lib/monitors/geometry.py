"""GridMonitor: grid-geometry rows (stiffness, misalignment, stall rate, update lost, Δcode, bit flips, code usage)
of every quantized weight, computed by numerics/grid_metrics.py.

update_lost: ‖(Q(W1) − Q(W0)) − (W1 − W0)‖_F / ‖W1 − W0‖_F, W0 / W1 the fp32 weight before / after the optimizer
step, Q the weight quantizer's round-to-nearest grid point with the scale it applies at each (scale_of: s0 before,
s1 after, so a scale change counts as part of what the forward sees). The share of the update the weight format's
rounding hides from the forward: 0 = the forward sees all of it, 1 = it sees none (every entry under half an ULP),
above 1 when rounding moves weights further than the update did; NaN when the weight did not change.
"""
from __future__ import annotations

from typing import Any

import torch

from altgrad_lib.monitors.base import Monitor, StepContext
from altgrad_lib.numerics.grid_metrics import (bit_flip_fractions, bit_names, capacity_use, code_usage, codes,
                                              delta_code_from_codes, delta_code_hist, grad_stiffness_corr,
                                              hist_entropy_bits, log2_hist, misalignment, scaled_weight, stall_rate,
                                              update_lost, weight_ulp)


def weight_points(att: Any) -> list[tuple[str, Any, torch.nn.Parameter]]:
    """(fqn, weight quantizer, weight) of every simulated layer whose weight is quantized."""
    return [(fqn, m.w_quant, m.weight) for fqn, m in att.quantized.items() if getattr(m, "w_quant", None) is not None]


class GridMonitor(Monitor):
    needs_pre_weights = True

    def on_backward(self, ctx: StepContext) -> None:
        pre = ctx.cache.setdefault("w_pre", {})
        for fqn, q, w in weight_points(self.att):
            s = q.scale_of(w)
            pre[fqn] = (w.detach().clone(), s)
            if w.grad is not None:
                ctx.emit(fqn, "W", "grad_stiffness_corr", grad_stiffness_corr(w.grad, w, q.spec.fmt, s))

    def on_step(self, ctx: StepContext) -> None:
        for fqn, q, w in weight_points(self.att):
            fmt = q.spec.fmt
            w0, s0 = ctx.cache["w_pre"][fqn]
            w1, s1 = w.detach(), q.scale_of(w)
            lo, hi = fmt.emin - fmt.mbits, max(fmt.emax, fmt.emin) - fmt.mbits
            hs = log2_hist(fmt.ulp(scaled_weight(w1, s1)), lo, hi)
            ctx.emit_hist(fqn, "W", "hist.log2ulp", hs, list(range(lo, hi + 1)))
            ctx.emit(fqn, "W", "stiffness_entropy_bits", hist_entropy_bits(hs))
            ctx.emit(fqn, "W", "log2S_mean", torch.log2(weight_ulp(w1, fmt, s1).double()).mean())
            ctx.emit(fqn, "W", "misalignment_mean", misalignment(w1, fmt, s1).double().mean())
            ctx.emit(fqn, "W", "stall_rate", stall_rate(w0, w1, fmt, s0))
            ctx.emit(fqn, "W", "update_lost", update_lost(w0, w1, fmt, s0, s1))
            ctx.emit(fqn, "W", "update_ratio", (w1 - w0).double().norm() / w0.double().norm())
            c0, c1 = codes(w0, fmt, s0), codes(w1, fmt, s1)
            ctx.cache.setdefault("codes_post", {})[fqn] = c1
            ctx.emit(fqn, "W", "moved_frac", (c0 != c1).double().mean())
            dh = delta_code_hist(delta_code_from_codes(c0, c1, fmt), self.cfg.dcode_max)
            ctx.emit_hist(fqn, "W", "hist.dcode", dh, list(range(-self.cfg.dcode_max, self.cfg.dcode_max + 1)))
            for name, f in zip(bit_names(fmt), bit_flip_fractions(c0, c1, fmt)):
                ctx.emit(fqn, "W", f"flips:{name}", f)
            use = code_usage(c1, fmt)
            ctx.emit(fqn, "W", "code_entropy_bits", hist_entropy_bits(use))
            ctx.emit(fqn, "W", "codes_used", (use > 0).sum())
            ctx.emit(fqn, "W", "capacity_use", capacity_use(use, fmt))
            ctx.emit_hist(fqn, "W", "hist.code", use, [f"0x{c:02X}" for c in range(2 ** fmt.bits)])
