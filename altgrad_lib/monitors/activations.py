"""Activations and attention: kurtosis of each Linear's input, attention entropy per head, dead MLP units.

All three come from the eager replay of a diagnostic step (probe.py), so they are measured on exactly the
training step's forward (same weights, batch, scales, dropout masks) and never change it.
    kurtosis(x)               excess (Fisher) kurtosis over all elements, biased moments = scipy.stats.kurtosis
    attention_entropy(q, k)   per head: −Σ p·ln p of the causal softmax rows, mean over batch and queries (nats)
    dead units                an MLP hidden unit is dead when its activation input (c_fc for GELU, c_gate for
                              SwiGLU) was ≤ 0 for every token of the last `window` diagnostic steps
Rows: (layer=Linear fqn, role "X", "kurtosis"), (layer=attention fqn, role "head<i>", "attn_entropy"),
(layer=MLP fqn, role "hidden", "dead_frac" and "fired_frac").
"""
from __future__ import annotations

import math
from typing import Any

import torch

from altgrad_lib.monitors.base import Monitor, StepContext


def kurtosis(x: torch.Tensor) -> torch.Tensor:
    """Excess kurtosis m4/m2² − 3 of all elements (float64; NaN for a constant tensor)."""
    v = x.detach().reshape(-1).to(torch.float64)
    d = v - v.mean()
    m2 = d.pow(2).mean()
    return d.pow(4).mean() / m2.pow(2) - 3.0


def attention_entropy(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """(B, nh, T, hs) queries and keys -> (nh,) mean entropy in nats of the causal attention rows."""
    T, hs = q.shape[-2], q.shape[-1]
    att = (q.double() @ k.double().transpose(-2, -1)) / math.sqrt(hs)            # (B, nh, T, T)
    mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    logp = torch.log_softmax(att.masked_fill(~mask, float("-inf")), dim=-1)      # (B, nh, T, T)
    h = -(logp.exp() * logp.masked_fill(~mask, 0.0)).sum(-1)                     # (B, nh, T)
    return h.mean(dim=(0, 2))


class ActivationsMonitor(Monitor):
    replay_activations = True

    def __init__(self, att) -> None:
        super().__init__(att)
        self.fired: dict[str, list[torch.Tensor]] = {}   # MLP fqn -> fired masks of the last `window` steps

    def on_backward(self, ctx: StepContext) -> None:
        rep = ctx.cache["replay"]
        for fqn, k in rep["kurtosis"].items():
            ctx.emit(fqn, "X", "kurtosis", k)
        for fqn, ent in rep["attn_entropy"].items():
            for h in range(ent.numel()):
                ctx.emit(fqn, f"head{h}", "attn_entropy", ent[h])
        for fqn, fired in rep["fired"].items():
            win = (self.fired.get(fqn, []) + [fired.cpu()])[-self.cfg.window:]   # small (hidden,) bools
            self.fired[fqn] = win
            ctx.emit(fqn, "hidden", "fired_frac", fired.to(torch.float64).mean())
            ctx.emit(fqn, "hidden", "dead_frac", 1.0 - torch.stack(win).any(0).to(torch.float64).mean())

    def state_dict(self) -> dict[str, Any]:
        return {"fired": {k: torch.stack(v) for k, v in self.fired.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.fired = {k: list(v.unbind(0)) for k, v in state.get("fired", {}).items()}
