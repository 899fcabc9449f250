"""Oscillation reset (`optim.osc_reset`): TetraJet-v2's OsciReset (Chen et al., arXiv 2510.27527), the
distance-ratio detection its authors' training configs run (period 200, window 50, threshold 8).

Oscillation: a latent weight that sits near a rounding boundary of its grid makes the quantized weight flip
between two grid values step after step while the latent weight itself barely moves.  Per element, over a
window of steps, D_q = sum |Q(w_t) - Q(w_{t-1})| (the grid value's travel) and D_w = sum |w_t - w_{t-1}| (the
latent weight's travel); their ratio is the oscillation ratio (the monitor optim/osc_ratio is the same ratio
summed over all elements, optim/stats.py).  The reset moves the latent weight of the elements whose ratio
reaches the threshold to the centre of its rounding bin, i.e. to its grid value Q(w), so it no longer sits at
the boundary:

    a round every `period` optimizer steps, the first after step `start` (0: before the first step):
      after step t0 = start + k * period        snapshot the latent weights w
      after each step t0 + 1 .. t0 + window     D_q += |Q(w_t) - Q(w_{t-1})|,  D_w += |w_t - w_{t-1}|
      after step t0 + window                    r = D_q / D_w (0 where D_w = 0); where r >= threshold: w <- Q(w);
                                                the round's tensors are freed
Q = round-to-nearest-even onto the optimizer's grid of the tensor (fmt / grid_scale, numerics/grid.py), as the
stall rate and osc_ratio use.  ">=" and "0 where D_w = 0" as in the authors' code.  One difference: their code
resets one step later (after step t0 + window + 1, which is not tracked); here the reset follows the last
tracked step, so the mask is exactly the window's ratio.  Adam's moments are left as they are (as theirs).

A reset needs a latent weight below the grid (OptimConfig refuses the others before any compute):
  fp32   the master weight p:  p <- Q(p)  (the paper's case)
  kahan  the latent weight is p + comp (comp, the Kahan buffer, holds the sub-ULP part): p <- Q(p + comp), comp <- 0
  grid_rne / grid_sr  keep no latent weight: p is its own grid value, a reset would change nothing.
  error_feedback(_sr) keep the sub-ULP part inside Adam's m, summed with the gradient average; it cannot be
         separated from m, so there is no latent weight to reset.
Memory: three fp32 tensors per grid weight (snapshot, D_q, D_w) during a round's window, none between rounds.
Checkpoints: `state_dict()` holds the open round's tensors (GridOptimizer.state_dict puts it under "altgrad").
"""
from __future__ import annotations

from typing import Any

import torch

from altgrad_lib.choices import MASTER_MODES
from altgrad_lib.numerics.formats import get_format
from altgrad_lib.numerics.grid import to_grid
from altgrad_lib.optim.config import check_schedule


class OscReset:
    """The schedule and the open round's per-element sums (see the module docstring)."""

    def __init__(self, period: int = 200, window: int = 50, threshold: float = 8.0, start: int = 0) -> None:
        check_schedule(period, window, threshold, start)
        self.period, self.window, self.threshold, self.start = period, window, float(threshold), start
        self.track: list[dict[str, torch.Tensor]] | None = None      # per grid weight: w, dq, dw (open round)
        self.reset_count, self.reset_of = 0, 0                       # the last reset: elements moved, of how many
        self._pending = False                                        # a reset happened since the last pop

    @staticmethod
    def check_groups(groups: list[dict[str, Any]]) -> None:
        for g in groups:
            if g["fmt"] is not None and g["storage"] not in MASTER_MODES:
                raise ValueError(f"osc_reset needs a latent weight below the grid: storage in {MASTER_MODES} "
                                 f"(got {g['storage']!r}; see optim/osc_reset.py)")

    # ---- the weights it acts on
    @staticmethod
    def _weights(opt) -> list[tuple[torch.Tensor, dict[str, Any], dict[str, Any]]]:
        return [(p, opt.state[p], g) for g in opt.param_groups if g["fmt"] is not None for p in g["params"]]

    @staticmethod
    def _latent(p: torch.Tensor, st: dict[str, Any], group: dict[str, Any]) -> torch.Tensor:
        w = p.detach().to(torch.float32, copy=True)      # a copy: p (the fp32 master) changes in place next step
        return w.add_(st["comp"].float()) if group["storage"] == "kahan" else w

    # ---- the optimizer's hooks
    @torch.no_grad()
    def before_step(self, opt, done: int) -> None:
        """`done` steps are complete: open a round (snapshot) when one starts here."""
        if done >= self.start and (done - self.start) % self.period == 0:
            self.track = [{"w": self._latent(p, st, g), "dq": torch.zeros_like(p, dtype=torch.float32),
                           "dw": torch.zeros_like(p, dtype=torch.float32)} for p, st, g in self._weights(opt)]

    @torch.no_grad()
    def after_step(self, opt, done: int) -> None:
        """Step number `done` is complete: add its travel to the open round; reset at the round's last step."""
        if self.track is None or done <= self.start:
            return
        k = (done - self.start) % self.period
        if not 1 <= k <= self.window:
            return
        weights = self._weights(opt)
        for (p, st, g), tr in zip(weights, self.track):
            fmt, s = get_format(g["fmt"]), st["grid_scale"]
            w = self._latent(p, st, g)
            tr["dq"] += (to_grid(w, fmt, s) - to_grid(tr["w"], fmt, s)).abs()
            tr["dw"] += (w - tr["w"]).abs()
            tr["w"] = w
        if k == self.window:
            self._reset(weights)

    def _reset(self, weights) -> None:
        count = total = 0
        for (p, st, g), tr in zip(weights, self.track):
            ratio = torch.where(tr["dw"] > 0, tr["dq"] / torch.where(tr["dw"] > 0, tr["dw"], 1.0), 0.0)
            mask = ratio >= self.threshold
            q = to_grid(tr["w"], get_format(g["fmt"]), st["grid_scale"])
            p.copy_(torch.where(mask, q, p.float()).to(p.dtype))
            if g["storage"] == "kahan":
                st["comp"].masked_fill_(mask, 0.0)
            count, total = count + int(mask.sum()), total + mask.numel()
        self.reset_count, self.reset_of, self._pending, self.track = count, total, True, None

    def pop(self) -> dict[str, float]:
        """{"optim/osc_reset_frac": fraction of grid weights reset} once after each reset, else {}."""
        if not self._pending:
            return {}
        self._pending = False
        return {"optim/osc_reset_frac": self.reset_count / max(self.reset_of, 1)}

    # ---- checkpoints
    def state_dict(self) -> dict[str, Any]:
        track = None if self.track is None else [{k: v.clone() for k, v in tr.items()} for tr in self.track]
        return {"track": track, "reset_count": self.reset_count, "reset_of": self.reset_of, "pending": self._pending}

    def load_state_dict(self, sd: dict[str, Any] | None) -> None:
        sd = sd or {}
        track = sd.get("track")
        self.track = None if track is None else [{k: v.clone() for k, v in tr.items()} for tr in track]
        self.reset_count, self.reset_of = int(sd.get("reset_count", 0)), int(sd.get("reset_of", 0))
        self._pending = bool(sd.get("pending", False))
