"""The Adam family on a format grid: `AdamW` (plain, for the storage modes and low-precision states), the naive
`StiffnessAdamW` baseline and `GridAdamW` (steps measured in ULPs).

AdamW       w <- w (1 - lr wd) - lr m̂ / (sqrt(v̂) + eps)                     (torch.optim.AdamW's math)
StiffnessAdamW  the same with the gradient replaced by g * S(w) before the moments: the recipe that circulates
            for a "format-aware" Adam.  Adam divides by sqrt(v̂), so a per-coordinate gradient scale that is
            constant (a weight that stays in one binade) cancels exactly up to eps: it is AdamW with eps / S.
            Kept as the baseline expected to do nothing (test: tests/test_optim_adamw.py).
GridAdamW   w <- w (1 - lr wd) - lr_ulp * ULP(w) * m̂ / (sqrt(v̂) + eps), the ULP taken in the direction of
            the step (grid.py), optionally clipped to +-clip_ulp ULPs: every weight moves a comparable number of
            codes per step, whatever its magnitude.  group["lr"] is lr_ulp (in ULPs) for groups with a format;
            a group without one (fmt=None) is plain AdamW with lr in weight units.  Weight decay is the relative
            shrink per unit of lr (w (1 - lr wd)): with lr in ULPs, pick wd = wd_adamw * lr_adamw / lr_ulp to
            match AdamW's per-step decay (the training factory does this).

Options shared by all three: betas, eps, weight_decay; low-precision moments through `state_m` / `state_v`
(None or a lowp_state.StateFormat, or a dict of its fields); plus GridOptimizer's fmt / storage options.
Stiffness ablations (StiffnessAdamW, GridAdamW): stiffness ("ulp" exponent-aware, "mantissa" = the plain
2^(floor(log2|w|) - M)), damping (S + delta), ulp_mode (GridAdamW: step / up / down / mean).
"""
from __future__ import annotations

from typing import Any

import torch

from altgrad_lib.choices import EF_MODES
from altgrad_lib.errors import check_choice
from altgrad_lib.optim.base import GridOptimizer
from altgrad_lib.numerics.grid import STIFFNESS_KINDS, ULP_MODES, stiffness
from altgrad_lib.optim.error_feedback import inject
from altgrad_lib.optim.lowp_state import StateFormat
from altgrad_lib.optim.state_codec import state_format


def _state_format(v: Any) -> StateFormat | None:
    if v is None or isinstance(v, StateFormat):
        return v
    if isinstance(v, str):
        return StateFormat(fmt=v)
    if isinstance(v, dict):
        return StateFormat(**v)
    raise ValueError(f"state format {v!r} is invalid; valid: None, a format name or a dict of StateFormat fields")


class AdamW(GridOptimizer):
    """AdamW with GridOptimizer's storage modes and optional low-precision moments (see the module docstring)."""

    tag = "adamw"

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, *, state_m=None, state_v=None, seed: int = 0, track_stats: bool = False,
                 compile: bool = False, **group_defaults: Any) -> None:
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, state_m=state_m,
                        state_v=state_v, **{**self._own_defaults(), **group_defaults})
        super().__init__(params, defaults, seed=seed, track_stats=track_stats, compile=compile)

    def _own_defaults(self) -> dict[str, Any]:
        return {}

    def _check_group(self, group: dict[str, Any]) -> None:
        b1, b2 = group["betas"]
        if not (0 <= b1 < 1 and 0 <= b2 < 1 and group["eps"] >= 0):
            raise ValueError(f"betas={group['betas']!r} must be in [0, 1) and eps={group['eps']!r} >= 0")
        for k in ("state_m", "state_v"):   # kept as plain dicts so state_dict()["param_groups"] stays data
            sf = _state_format(group[k])
            if k == "state_m" and sf is not None and not state_format(sf.fmt).signed:
                raise ValueError(f"state_m format {sf.fmt!r} is unsigned but m is signed; valid: a signed format "
                                 f"such as 'E4M3' (unsigned 'UE<x>M<y>' only for state_v)")
            group[k] = None if sf is None else {"fmt": sf.fmt, "block": sf.block, "rounding": sf.rounding,
                                                "min_numel": sf.min_numel, "transform": sf.transform, "scale": sf.scale}
        if group["storage"] in EF_MODES and (b1 == 0 or group["state_m"] is not None):
            raise ValueError(f"storage={group['storage']!r} needs betas[0] > 0 (got {b1!r}) and an fp32 first moment "
                             f"(state_m=None, got {group['state_m']!r}): the residual is kept in m (error_feedback.py)")
        if "stiffness" in group:
            check_choice("stiffness", group["stiffness"], STIFFNESS_KINDS)
            if group["damping"] < 0:
                raise ValueError(f"damping={group['damping']!r} must be >= 0")
        if "ulp_mode" in group:
            check_choice("ulp_mode", group["ulp_mode"], ULP_MODES)
            if group["clip_ulp"] is not None and group["clip_ulp"] <= 0:
                raise ValueError(f"clip_ulp={group['clip_ulp']!r} must be None or > 0")

    def _init_extra(self, p: torch.Tensor, st: dict[str, Any], group: dict[str, Any]) -> None:
        for k in ("m", "v"):
            sf = _state_format(group[f"state_{k}"])
            if sf is not None and sf.applies_to(p.numel()):
                st[f"{k}_codes"], st[f"{k}_scale"] = sf.encode(torch.zeros_like(p, dtype=torch.float32))
            else:
                st[k] = torch.zeros_like(p, dtype=torch.float32)

    # ---- moments (fp32 work, optional low-precision storage)
    def _load(self, st: dict[str, Any], k: str, group: dict[str, Any], like: torch.Tensor) -> torch.Tensor:
        if k in st:
            return st[k]
        return _state_format(group[f"state_{k}"]).decode(st[f"{k}_codes"], st[f"{k}_scale"], like)

    def _store(self, st: dict[str, Any], k: str, group: dict[str, Any], val: torch.Tensor) -> None:
        if k not in st:
            st[f"{k}_codes"], st[f"{k}_scale"] = _state_format(group[f"state_{k}"]).encode(val, self.generator)

    def _direction(self, w: torch.Tensor, g: torch.Tensor, st: dict[str, Any], group: dict[str, Any]) -> torch.Tensor:
        """Updates m, v with g; returns m̂ / (sqrt(v̂) + eps)."""
        b1, b2 = group["betas"]
        m, v = self._load(st, "m", group, w), self._load(st, "v", group, w)
        m.lerp_(g, 1 - b1)
        v.mul_(b2).addcmul_(g, g, value=1 - b2)
        self._store(st, "m", group, m)
        self._store(st, "v", group, v)
        bc1, bc2_sqrt = self._bias_corrections(st, group)
        return (m / bc1) / (v.sqrt() / bc2_sqrt + group["eps"])

    def _step_consts(self, group: dict[str, Any], t: torch.Tensor) -> dict[str, torch.Tensor]:
        b1, b2 = group["betas"]
        return {"bc1": 1 - b1**t, "bc2_sqrt": (1 - b2**t).sqrt()}

    def _bias_corrections(self, st: dict[str, Any], group: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """(1 - b1^t, sqrt(1 - b2^t)): the flat step's precomputed values (base._step_consts) or computed here."""
        if "bc1" in st:
            return st["bc1"], st["bc2_sqrt"]
        c = self._step_consts(group, st["step"])
        return c["bc1"], c["bc2_sqrt"]

    def _update(self, w, g, st, group, fmt, s, lr_t):
        u = self._direction(w, g, st, group)
        return w * (1 - lr_t * group["weight_decay"]) - lr_t * u

    # ---- error_feedback storage (error_feedback.py): the residual goes into m in units of this step's dw/dm
    def _feedback(self, w, r, st, group, fmt, s, lr_t):
        b1 = group["betas"][0]
        bc1, bc2_sqrt = self._bias_corrections(st, group)
        v = self._load(st, "v", group, w)        # an 8-bit v (state_v) is decoded: D of the stored v, not the fp32 one
        D = v.sqrt() / bc2_sqrt + group["eps"]                          # as in _direction
        inject(st["m"], r, self._dw_dm(w, st, group, fmt, s, lr_t) / (bc1 * D), b1)

    def _dw_dm(self, w, st, group, fmt, s, lr_t):
        """dw/dm of this step times (1 - b1^t) D: lr for AdamW (and StiffnessAdamW: its m is in units of g S)."""
        return lr_t


class StiffnessAdamW(AdamW):
    """AdamW on g * S(w) (the naive recipe; a group without a format is plain AdamW)."""

    tag = "stiffness_adamw"

    def _own_defaults(self) -> dict[str, Any]:
        return {"stiffness": "ulp", "damping": 0.0}

    def _update(self, w, g, st, group, fmt, s, lr_t):
        if fmt is not None:
            g = g * stiffness(w, fmt, s, group["stiffness"], group["damping"])
        return super()._update(w, g, st, group, fmt, s, lr_t)

    def _group_tag(self, group: dict[str, Any]) -> str:
        return f"/S={group['stiffness']}" + (f"+{group['damping']:g}" if group["damping"] else "")


class GridAdamW(AdamW):
    """Adam's direction, step length lr_ulp * ULP(w) (see the module docstring)."""

    tag = "grid_adamw"

    def _own_defaults(self) -> dict[str, Any]:
        return {"stiffness": "ulp", "damping": 0.0, "ulp_mode": "step", "clip_ulp": None}

    def _update(self, w, g, st, group, fmt, s, lr_t):
        if fmt is None:
            return super()._update(w, g, st, group, fmt, s, lr_t)
        u = self._direction(w, g, st, group)
        n_ulp = lr_t * u                                              # signed number of ULPs to move (down = +)
        if group["clip_ulp"] is not None:
            n_ulp = n_ulp.clamp(-group["clip_ulp"], group["clip_ulp"])
        toward_zero = (u * w) > 0                                     # the step -n_ulp*S shrinks |w|
        S = stiffness(w, fmt, s, group["stiffness"], group["damping"], toward_zero, group["ulp_mode"])
        return w * (1 - lr_t * group["weight_decay"]) - n_ulp * S

    def _dw_dm(self, w, st, group, fmt, s, lr_t):
        """lr_ulp S(w), S as in _update (the step's direction is sign(m): m̂ / D has m's sign)."""
        toward_zero = (st["m"] * w) > 0
        return lr_t * stiffness(w, fmt, s, group["stiffness"], group["damping"], toward_zero, group["ulp_mode"])

    def _group_tag(self, group: dict[str, Any]) -> str:
        tag = f"/{group['ulp_mode']}" + ("" if group["stiffness"] == "ulp" else f"/S={group['stiffness']}")
        tag += f"+{group['damping']:g}" if group["damping"] else ""
        return tag + (f"/clip{group['clip_ulp']:g}" if group["clip_ulp"] is not None else "")
