"""`StiffnessWrapper`: the naive recipe as a wrapper around any optimizer, with a stiffness schedule.

Before each inner step the gradient of every wrapped parameter is multiplied by S(w)^a(t), S from grid.py (the
weight's grid, with the power-of-two scale fixed at wrap time) and a(t) = schedule(t) for the 0-based step t
(default: 1, the full naive recipe; a ramp 0 -> 1 "warms in" the stiffness).  With Adam-type inner optimizers the
scale cancels up to eps while a weight stays in one binade (see adamw.py); the wrapper exists to show that.
state_dict() holds the inner optimizer's state, the step count and the grid exponents.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from altgrad_lib.numerics.formats import get_format
from altgrad_lib.numerics.grid import grid_exp, grid_scale, stiffness


class StiffnessWrapper:
    """wrap(inner, fmt): inner.step() on g * S(w)^schedule(t). Parameters: every parameter of inner."""

    def __init__(self, inner: torch.optim.Optimizer, fmt: str, schedule: Callable[[int], float] | None = None, *,
                 kind: str = "ulp", damping: float = 0.0, headroom: int = 1) -> None:
        self.inner, self.fmt = inner, get_format(fmt)
        self.schedule = schedule or (lambda t: 1.0)
        self.kind, self.damping, self.t = kind, float(damping), 0
        self.grid_exp = [grid_exp(p, self.fmt, headroom) for g in inner.param_groups for p in g["params"]]

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.inner.param_groups

    @property
    def state(self):
        return self.inner.state

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.inner.zero_grad(set_to_none=set_to_none)

    @torch.no_grad()
    def step(self, closure=None):
        a = float(self.schedule(self.t))
        params = [p for g in self.inner.param_groups for p in g["params"]]
        for p, k in zip(params, self.grid_exp):
            if p.grad is not None and a != 0.0:
                S = stiffness(p.detach().float(), self.fmt, grid_scale(k).to(p.device), self.kind, self.damping)
                p.grad.mul_(S.pow(a).to(p.grad.dtype))
        self.t += 1
        return self.inner.step(closure)

    def state_dict(self) -> dict[str, Any]:
        return {"inner": self.inner.state_dict(), "t": self.t, "grid_exp": list(self.grid_exp)}

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        self.inner.load_state_dict(sd["inner"])
        self.t, self.grid_exp = int(sd["t"]), list(sd["grid_exp"])

    def short_str(self) -> str:
        inner = self.inner.short_str() if hasattr(self.inner, "short_str") else type(self.inner).__name__.lower()
        return f"stiffness_wrap[{self.fmt.short_str()}/S={self.kind}]({inner})"
