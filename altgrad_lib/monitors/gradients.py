"""Gradients: per-parameter statistics of the training step, clipping, and the FP32 shadow comparison.

GradientsMonitor (cheap, from the step's own .grad before clipping), rows (layer = module fqn, role =
parameter name "weight" / "bias"): grad_norm, grad_mean, grad_var (population), grad_to_weight = ||g|| / ||w||
(the layer-wise gradient ratio); and (layer "", role "") grad_norm_total, clipped (1 when the total norm
exceeded grad_clip, so the step was scaled down) and clipped_frac (share of the steps since the previous
diagnostic step, this one included, that were clipped; counted every step from the loop's floats, no sync).

ShadowMonitor: the same step replayed with quantization off in FP32 (probe.Probe.shadow_grads: same batch,
weights, dropout masks); per parameter grad_snr_db = 10·log10(Σ g32² / Σ (g − g32)²) (quant.sqnr_db with the
shadow as reference) and grad_cos (cosine of g and g32); and the same over all parameters (layer "*").
For recipes that quantize nothing (bf16) the shadow differs only by autocast.
"""
from __future__ import annotations

import math

import torch

from altgrad_lib.monitors.base import Monitor, StepContext


def snr_cos(gs: list[torch.Tensor], refs: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Per pair and over all pairs (last entry): grad SNR 10·log10(Σ ref² / Σ (g − ref)²) in dB (+inf when
    equal) and cosine(g, ref); (P+1,) float64 tensors, no sync. Batched (foreach norms), accumulated in float64
    without float64 copies of the tensors; g − ref is formed in the tensors' dtype (exact when g and ref are
    within a factor 2 of each other, the case that matters for a high SNR)."""
    f64 = torch.float64
    gs = [g.detach() for g in gs]
    rs = [r.detach().to(g.dtype) for g, r in zip(gs, refs)]
    sig = torch.stack(torch._foreach_norm(rs, 2, dtype=f64)) ** 2                              # (P,)
    noise = torch.stack(torch._foreach_norm(torch._foreach_sub(gs, rs), 2, dtype=f64)) ** 2
    gg = torch.stack(torch._foreach_norm(gs, 2, dtype=f64)) ** 2
    sig, noise, gg = (torch.cat([t, t.sum().reshape(1)]) for t in (sig, noise, gg))
    gr = (gg + sig - noise) / 2          # Σ g·r from the accurate Σ(g − r)²: no float32 products, exact near cos 1
    inf = torch.tensor(math.inf, dtype=f64, device=sig.device)
    return torch.where(noise > 0, 10 * torch.log10(sig / noise), inf), gr / (gg.sqrt() * sig.sqrt())


def grad_snr_db(g: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """10·log10(Σ ref² / Σ (g − ref)²) (+inf when equal); a 0-d float64 tensor, no sync."""
    return snr_cos([g], [ref])[0][0]


def cosine(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return snr_cos([a], [b])[1][0]


def _split(name: str) -> tuple[str, str]:
    layer, _, role = name.rpartition(".")
    return layer, role


class GradientsMonitor(Monitor):
    def __init__(self, att) -> None:
        super().__init__(att)
        self.seen = self.clipped = 0     # steps since the last diagnostic step, and how many were clipped

    def observe(self, step: int, loss: float, grad_norm: float, events) -> None:
        clip = self.att.grad_clip
        self.seen += 1
        self.clipped += int(clip > 0 and grad_norm > clip)

    def on_backward(self, ctx: StepContext) -> None:
        named = [(n, p) for n, p in self.att.model.named_parameters() if p.grad is not None]
        if not named:
            return
        gs = [p.grad.detach() for _, p in named]
        ws = [p.detach() for _, p in named]
        # batched and accumulated in float64 without float64 copies of the tensors: one foreach norm for all
        # gradients, one for all weights, one float64-accumulated sum per gradient; var = E[g²] − mean²
        norm = torch.stack(torch._foreach_norm(gs, 2, dtype=torch.float64))                   # (P,)
        wnorm = torch.stack(torch._foreach_norm(ws, 2, dtype=torch.float64))                  # (P,)
        n = torch.tensor([float(g.numel()) for g in gs], dtype=torch.float64, device=norm.device)
        mean = torch.stack([g.sum(dtype=torch.float64) for g in gs]) / n
        var = (norm * norm / n - mean * mean).clamp_min(0)
        keys = [(*_split(name), m) for m in ("grad_norm", "grad_mean", "grad_var", "grad_to_weight")
                for name, _ in named]
        ctx.emit_many(keys, torch.cat([norm, mean, var, norm / wnorm]))

    def on_step(self, ctx: StepContext) -> None:
        ctx.emit("", "", "grad_norm_total", ctx.grad_norm)
        clip = self.att.grad_clip
        ctx.emit("", "", "clipped", float(clip > 0 and ctx.grad_norm > clip))
        ctx.emit("", "", "clipped_frac", self.clipped / max(self.seen, 1))
        self.seen = self.clipped = 0

    def state_dict(self) -> dict:
        return {"seen": self.seen, "clipped": self.clipped}

    def load_state_dict(self, state: dict) -> None:
        self.seen, self.clipped = int(state.get("seen", 0)), int(state.get("clipped", 0))


class ShadowMonitor(Monitor):
    def on_backward(self, ctx: StepContext) -> None:
        ref = self.att.probe.shadow_grads(ctx.x, ctx.y, ctx.snap)
        named = [(n, p.grad) for n, p in self.att.model.named_parameters() if p.grad is not None and n in ref]
        if not named:
            return
        snr, cos = snr_cos([g for _, g in named], [ref[n] for n, _ in named])
        keys = [_split(n) for n, _ in named] + [("*", "")]
        ctx.emit_many([(*k, "grad_snr_db") for k in keys] + [(*k, "grad_cos") for k in keys], torch.cat([snr, cos]))
