"""Madam: multiplicative updates (Bernstein, Vahdat, Yue, Liu 2021, "Learning compositional functions via
multiplicative weight updates"; their `jxbz/madam` was read, not copied).

    v <- b2 v + (1 - b2) g^2;  ĝ = g / sqrt(v / (1 - b2^t))   (0 where v = 0: the 0/0 guard), clipped to +-g_bound
    w <- w (1 - lr wd) * exp(-lr * ĝ * sign(w)),  then |w| <= p_scale * RMS(w at the first step)

A step changes log|w| by at most lr * g_bound and never flips a sign (exp > 0, 1 - lr wd > 0 is enforced); a
weight at 0 stays at 0.  In grid storage, rounding can send a small weight to 0, which is then final.
For E4M3 half an ULP is 3.1-6.25 % of |w|, so lr = 0.01 is always rounded away under RNE: use grid_sr (or
a larger lr).  E7M0 is a base-2 logarithmic number system: one code is a factor 2, i.e. a step of ln 2 in
log|w|.  Storage modes, formats and low-precision-free state as in base.GridOptimizer.
"""
from __future__ import annotations

from typing import Any

import torch

from altgrad_lib.optim.base import GridOptimizer


class Madam(GridOptimizer):
    tag = "madam"

    def __init__(self, params, lr: float = 0.01, beta2: float = 0.999, p_scale: float = 3.0, g_bound: float = 10.0,
                 weight_decay: float = 0.0, *, seed: int = 0, track_stats: bool = False, compile: bool = False,
                 **group_defaults: Any) -> None:
        defaults = dict(lr=lr, beta2=beta2, p_scale=p_scale, g_bound=g_bound, weight_decay=weight_decay,
                        **group_defaults)
        super().__init__(params, defaults, seed=seed, track_stats=track_stats, compile=compile)

    def _check_group(self, group: dict[str, Any]) -> None:
        if not 0 <= group["beta2"] < 1 or group["p_scale"] <= 0 or group["g_bound"] <= 0:
            raise ValueError(f"beta2={group['beta2']!r} must be in [0, 1), p_scale={group['p_scale']!r} and "
                             f"g_bound={group['g_bound']!r} > 0")
        if group["lr"] * group["weight_decay"] >= 1:
            raise ValueError(f"lr * weight_decay = {group['lr'] * group['weight_decay']} >= 1 would flip signs")

    def _init_extra(self, p: torch.Tensor, st: dict[str, Any], group: dict[str, Any]) -> None:
        st["v"] = torch.zeros_like(p, dtype=torch.float32)
        st["max"] = group["p_scale"] * p.detach().float().pow(2).mean().sqrt()   # 0-d tensor

    def _update(self, w, g, st, group, fmt, s, lr_t):
        b2 = group["beta2"]
        v = st["v"]
        v.mul_(b2).addcmul_(g, g, value=1 - b2)
        vhat = v / (1 - b2 ** st["step"])
        gn = torch.where(vhat > 0, g / vhat.sqrt(), torch.zeros_like(g))            # 0/0 guard
        gn = gn.clamp(-group["g_bound"], group["g_bound"])
        w_new = w * (1 - lr_t * group["weight_decay"]) * torch.exp(-lr_t * gn * torch.sign(w))
        return torch.maximum(torch.minimum(w_new, st["max"]), -st["max"])
