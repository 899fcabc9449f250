"""`GridSGD`: SGD preconditioned by the stiffness, w <- w - lr * S(w) * (g + wd w) (+ heavy-ball momentum on g).

This is the update geoopt's `RiemannianSGD` takes on `manifold.FP8Manifold` (Riemannian gradient = S * Euclidean
gradient, retraction = step then round), written with this package's storage modes: with storage "grid_rne"
and ulp_mode "up" the two take bitwise the same steps (tests/test_optim_manifold.py).  Weight decay enters the
gradient (L2) before the stiffness, as in geoopt.  Momentum buffers the Euclidean gradient here; geoopt buffers
the Riemannian one (seeded with the first raw gradient), so the two agree bitwise only without momentum.
"""
from __future__ import annotations

from typing import Any

import torch

from altgrad_lib.errors import check_choice
from altgrad_lib.optim.base import GridOptimizer
from altgrad_lib.numerics.grid import STIFFNESS_KINDS, ULP_MODES, stiffness


class GridSGD(GridOptimizer):
    tag = "grid_sgd"

    def __init__(self, params, lr: float = 1e-2, momentum: float = 0.0, weight_decay: float = 0.0, *,
                 stiffness: str = "ulp", damping: float = 0.0, ulp_mode: str = "up", seed: int = 0,
                 track_stats: bool = False, compile: bool = False, **group_defaults: Any) -> None:
        defaults = dict(lr=lr, momentum=momentum, weight_decay=weight_decay, stiffness=stiffness, damping=damping,
                        ulp_mode=ulp_mode, **group_defaults)
        super().__init__(params, defaults, seed=seed, track_stats=track_stats, compile=compile)

    def _check_group(self, group: dict[str, Any]) -> None:
        check_choice("stiffness", group["stiffness"], STIFFNESS_KINDS)
        check_choice("ulp_mode", group["ulp_mode"], ULP_MODES)
        if not 0 <= group["momentum"] < 1:
            raise ValueError(f"momentum={group['momentum']!r} must be in [0, 1)")

    def _init_extra(self, p: torch.Tensor, st: dict[str, Any], group: dict[str, Any]) -> None:
        if group["momentum"]:
            st["buf"] = torch.zeros_like(p, dtype=torch.float32)

    def _update(self, w, g, st, group, fmt, s, lr_t):
        d = g + group["weight_decay"] * w if group["weight_decay"] else g
        if group["momentum"]:
            d = st["buf"].mul_(group["momentum"]).add_(d)
        if fmt is None:
            return w - lr_t * d
        S = stiffness(w, fmt, s, group["stiffness"], group["damping"], (d * w) > 0, group["ulp_mode"])
        return w - lr_t * (S * d)
