"""Numerical health of quantized tensors (X, W, dY of each QuantizedLinear).

tensor_health(x, y, s, fmt) compares a tensor x with its fake-quantized value y = Q(x·s)/s:
    overflow_frac    finite inputs with |x·s| > fmt.max (saturated to ±max, or inf/NaN without saturation)
    underflow_frac   TransformerEngine's definition: (zeros after quantization − zeros before) / numel
    flush_frac       non-zero inputs that became 0 / numel (= underflow_frac unless some zero became non-zero)
    subnormal_frac   outputs on the format's subnormal grid (0 < |y·s| < min_normal) / numel
    nan_in, inf_in, nan_out, inf_out   counts
    amax             max |x| over finite elements (NaN/Inf are counted above), in the tensor's own units
    scale            the scale s in use (per_row and block kinds: the smallest)
    eps_hits         how often the amax hit the scaling eps floor in this call
    sqnr_db          10·log10(Σx² / Σ(x − y)²) over elements finite on both sides (quant.sqnr_db's definition)
    mse              Σ(x − y)² / (their number), over the same elements (TE's tensor stats log it too)
    hist.log2xs:<k>  fraction of the non-zero finite elements with floor(log2 |x·s|) = k: the tensor as the format sees
                     it, over the format's fixed window bins (grid_metrics.window_bins: min subnormal .. max and 4
                     binades beyond each end, which hold everything further out); only non-empty bins are written
Block-scaled operands (nvfp4 / mx, probe.py): s is the per-element block scale, the row-wise copy is measured,
blk_log2s_mean / _std / _min / _max describe log2 of the block scales (block_scaling.block_scale_stats), and
blk_flush_mean / _std / _max / _any the per-block underflow: the fraction of a block's elements flushed to 0,
over the blocks, and the fraction of blocks with any (block_scaling.block_flush_stats).

Two monitors use it:
    NumericsMonitor  every metric above, from an eager replay of the diagnostic step (probe.py); under
                     torch.compile too, because the replay is eager.
    CountersMonitor  the cheap path: the counters Quantizer keeps during the training step itself, as
                     metrics ctr.sat_frac (= overflow_frac), ctr.flush_frac (= flush_frac), ctr.eps_hits, and
                     the scaler's ctr.scale / ctr.amax (last call); fractions are over all training steps
                     since the previous diagnostic step. Under torch.compile the dY
                     quantizer of a stateless scaling kind runs without counters (quantize.linear.grad_counters_live),
                     so those rows are NaN and events.csv says "unavailable" — never a silent zero.
Per-GEMM operand overrides (quantize/gemm_overrides.py) have quantizers of their own, reported under the role
"<gemm>.<X|W|dY>", e.g. "wgrad.X".
"""
from __future__ import annotations

import math
from typing import Any

import torch

from altgrad_lib.monitors.base import Monitor, StepContext
from altgrad_lib.quantize.gemm_overrides import override_label, override_quantizers
from altgrad_lib.quantize.linear import grad_counters_live

ROLE_ATTR = {"X": "x_quant", "W": "w_quant", "dY": "g_quant"}


def tensor_health(x: torch.Tensor, y: torch.Tensor, s: torch.Tensor | float, fmt: Any,
                  eps_hits: torch.Tensor | int = 0) -> dict[str, torch.Tensor]:
    """Health metrics of one quantization y = Q(x·s)/s (see module docstring); 0-d tensors, no host sync."""
    wdt = torch.float64 if x.dtype == torch.float64 else torch.float32
    x, y = x.to(wdt), y.to(wdt)
    s = torch.as_tensor(s, dtype=torch.float32, device=x.device)
    n = max(x.numel(), 1)
    ax = x.abs()
    finite_in = torch.isfinite(x)
    zx, zy = x == 0, y == 0
    ys = (y * s).abs()
    # y·s is back on the grid up to the rounding of the division; subnormals are far below min_normal·(1-2^-12)
    sub = (((ys > 0) & (ys < fmt.min_normal * (1 - 2.0 ** -12))).sum() if fmt.has_zero
           else torch.zeros((), device=x.device))
    both = finite_in & torch.isfinite(y)
    xb = torch.where(both, x, 0)
    d = xb - torch.where(both, y, 0)          # exact: y is x rounded to a nearby grid point
    signal, noise = torch.sum(xb * xb, dtype=torch.float64), torch.sum(d * d, dtype=torch.float64)
    inf = torch.tensor(math.inf, dtype=torch.float64, device=x.device)
    def f(c):
        return c.to(torch.float64) / n

    return {
        "overflow_frac": f(((ax * s > fmt.max) & finite_in).sum()),
        "underflow_frac": f(zy.sum() - zx.sum()),
        "flush_frac": f((zy & ~zx).sum()),
        "subnormal_frac": f(sub),
        "nan_in": torch.isnan(x).sum(), "inf_in": torch.isinf(x).sum(),
        "nan_out": torch.isnan(y).sum(), "inf_out": torch.isinf(y).sum(),
        "amax": torch.nan_to_num(ax, nan=0.0, posinf=0.0).amax() if x.numel() else torch.zeros((), device=x.device),
        "scale": s.amin() if s.numel() > 1 else s.reshape(()),
        "eps_hits": torch.as_tensor(eps_hits, device=x.device),
        "sqnr_db": torch.where(noise > 0, 10 * torch.log10(signal / noise), inf),
        "mse": noise / both.sum().clamp_min(1),
    }


class NumericsMonitor(Monitor):
    replay_numerics = True

    def on_backward(self, ctx: StepContext) -> None:
        for (fqn, role), stats in ctx.cache["replay"]["health"].items():
            for metric, v in stats.items():
                ctx.emit(fqn, role, metric, v)
        for (fqn, role), (counts, labels) in ctx.cache["replay"].get("hist", {}).items():
            ctx.emit_hist(fqn, role, "hist.log2xs", counts, labels)


_COUNTERS = ("n_elements", "n_saturated", "n_underflow")


def _or_nan(q: Any, t: torch.Tensor) -> torch.Tensor:
    return torch.full_like(t, math.nan) if getattr(q, "is_block", False) else t


class CountersMonitor(Monitor):
    def __init__(self, att) -> None:
        super().__init__(att)
        self.points: list[tuple[str, str, Any, bool]] = []   # fqn, role, quantizer, counters live
        for fqn, mod in att.quantized.items():
            for role, attr in ROLE_ATTR.items():
                q = getattr(mod, attr, None)
                if q is not None and hasattr(q, "n_elements"):
                    # count=False quantizers keep no counters; compiled dY of stateless scaling neither
                    live = q.count and (role != "dY" or grad_counters_live(q, att.compiled))
                    self.points.append((fqn, role, q, live))
            # per-GEMM operand overrides: their own quantizers, called through quantize() (always counted)
            for gemm, role, q in override_quantizers(mod):
                self.points.append((fqn, override_label(gemm, role), q, q.count))
        self.last: list[torch.Tensor] | None = None   # counters at the previous diagnostic step
        self.noted = False

    def _now(self) -> list[torch.Tensor]:
        return [torch.stack([getattr(q, c) for c in _COUNTERS] + [q.scaler.eps_hits]).clone()
                for _, _, q, _ in self.points]

    def on_step(self, ctx: StepContext) -> None:
        now = self._now()
        last = self.last if self.last is not None else [torch.zeros_like(t) for t in now]
        live = [i for i, p in enumerate(self.points) if p[3]]
        for fqn, role, q, ok in self.points:
            if ok:
                continue
            for m in ("sat_frac", "flush_frac", "eps_hits", "scale", "amax"):
                ctx.emit(fqn, role, f"ctr.{m}", math.nan)
            if not self.noted:
                ctx.event("unavailable:counters", f"{fqn}/{role}", math.nan, math.nan)
        if live:
            # all live points in a handful of batched ops: (P, 4) counter deltas, then the five metrics
            d = (torch.stack([now[i] for i in live]) - torch.stack([last[i] for i in live])).to(torch.float64)
            n = d[:, 0].clamp_min(1)
            qs = [self.points[i][2] for i in live]
            # block kinds (nvfp4 / mx) have no per-tensor scale or amax: NaN (unavailable), never their unused 1 / 0
            scale = torch.stack([_or_nan(q, q.scaler.scale.reshape(())) for q in qs]).to(torch.float64)
            amax = torch.stack([_or_nan(q, q.scaler.amax_history[0].reshape(())) for q in qs]).to(torch.float64)
            keys = [(self.points[i][0], self.points[i][1], f"ctr.{m}")
                    for m in ("sat_frac", "flush_frac", "eps_hits", "scale", "amax") for i in live]
            ctx.emit_many(keys, torch.cat([d[:, 1] / n, d[:, 2] / n, d[:, 3], scale, amax]))
        self.noted = True
        self.last = now

    def state_dict(self) -> dict[str, Any]:
        return {"last": self.last, "noted": self.noted}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.last, self.noted = state.get("last"), bool(state.get("noted", False))
