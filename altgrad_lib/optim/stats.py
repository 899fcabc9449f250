"""What a format does to the optimizer's steps (and `StepStats`, the running counters an optimizer keeps when
track_stats=True). The grid arithmetic is the one copy in altgrad_lib/numerics/grid_metrics.py (the monitors use the
same functions); this module only adapts it to the optimizer's view (grid-stored weights and the proposed update):

- `stall_rate(q_old, q_new, delta)`: among coordinates whose proposed update was non-zero, the fraction whose
  quantized weight did not move (the update was under half an ULP and was rounded away) — grid.unmoved_counts.
- `delta_code_hist(q_old, q_new, fmt, s, max_codes)`: how many grid values each coordinate moved per step
  (grid.delta_code: difference of ranks in fmt.values()): counts for -max_codes..+max_codes, ends open.
- `code_usage(q, fmt, s)`: how often each finite grid value is used (grid.value_usage, ascending; -0 and +0 are
  one value); `code_entropy_bits` turns it into the entropy in bits (grid.hist_entropy_bits), the capacity use =
  values used / finite values (grid.used_fraction, the monitors' capacity_use counted per value instead of per
  code) and entropy_frac = entropy / log2(number of finite values).
- update visibility (PULSE, arXiv 2602.03839): the fraction of coordinates whose stored (grid) value changed in a
  step = 1 - S1, S1 = the fraction bit-identical after the update.  Over all coordinates (the stall rate is over
  those with a non-zero proposed update), so it is the Δcode histogram's frac_moved, reported under this name too.
- `oscillation_ratio(qs, ws)`: TetraJet-v2's sum|ΔQ(w)| / sum|Δw| over a sequence of steps (ΔQ on the grid value,
  Δw on the latent weight: the master weight under fp32 storage, the proposed fp32 value w_new under grid storage).
  StepStats reports it over windows of `osc_window` measured steps (default 50, as TetraJet-v2): the ratio of the
  last completed window, summed over all the optimizer's grid weights.  Under fp32 storage both statistics are
  taken on the optimizer's grid (fmt / grid_scale), as the stall rate is, not on the forward quantizer's own scale.
q tensors are grid values (grid(fmt) / s, see numerics/grid.py); s = 1 for an unscaled grid.
"""
from __future__ import annotations

import math
from typing import Any

import torch

from altgrad_lib.numerics.formats import FloatFormat, get_format
from altgrad_lib.numerics import grid_metrics as grid

MAX_CODES = 8


def stall_rate(q_old: torch.Tensor, q_new: torch.Tensor, delta: torch.Tensor) -> float:
    """Fraction of coordinates with delta != 0 whose grid value did not change (nan if no coordinate moved)."""
    asked, stalled = grid.unmoved_counts(q_old, q_new, delta != 0)
    n = int(asked)
    return float(stalled) / n if n else math.nan


def delta_codes(q_old: torch.Tensor, q_new: torch.Tensor, fmt: FloatFormat | str, s=1.0) -> torch.Tensor:
    """Grid values moved per coordinate (int64, signed: + = toward larger values)."""
    return grid.delta_code(q_old, q_new, get_format(fmt), s, s)


def delta_code_hist(q_old: torch.Tensor, q_new: torch.Tensor, fmt: FloatFormat | str, s=1.0,
                    max_codes: int = MAX_CODES) -> torch.Tensor:
    """Counts (int64, length 2*max_codes+1) of grid values moved, bin i = i - max_codes; ends are open."""
    return grid.delta_code_hist(delta_codes(q_old, q_new, fmt, s), max_codes)


def code_usage(q: torch.Tensor, fmt: FloatFormat | str, s=1.0) -> torch.Tensor:
    """Counts per finite grid value, ascending (len(fmt.values()) bins)."""
    return grid.value_usage(q, get_format(fmt), s)


def code_entropy_bits(counts: torch.Tensor, fmt: FloatFormat | str | None = None) -> dict[str, float]:
    """{"entropy_bits", "capacity_use": values used / finite values, and with fmt "entropy_frac":
    H / log2(n_finite)}."""
    h = float(grid.hist_entropy_bits(counts))
    out = {"entropy_bits": h, "capacity_use": float(grid.used_fraction(counts, counts.numel()))}
    if fmt is not None:
        out["entropy_frac"] = h / math.log2(get_format(fmt).n_finite)
    return out


def oscillation_ratio(qs: list[torch.Tensor], ws: list[torch.Tensor]) -> float:
    """sum_t sum_i |q_{t+1} - q_t| / sum_t sum_i |w_{t+1} - w_t| over the sequences qs (grid values) and ws (latent
    weights), one tensor per step (nan when the latent weights never moved)."""
    dq = dw = 0.0
    for t in range(len(qs) - 1):
        a, b = grid.oscillation_sums(qs[t], qs[t + 1], ws[t + 1] - ws[t])
        dq, dw = dq + float(a), dw + float(b)
    return dq / dw if dw else math.nan


class StepStats:
    """Running sums (tensors, no host sync) of stall and Δcode counts over the steps since the last `pop`."""

    def __init__(self, device: torch.device | str = "cpu", max_codes: int = MAX_CODES, osc_window: int = 50) -> None:
        self.max_codes, self.osc_window = max_codes, int(osc_window)
        f64 = dict(dtype=torch.float64, device=device)
        self.osc_dq, self.osc_dw = torch.zeros((), **f64), torch.zeros((), **f64)      # sums of the open window
        self.osc_last = torch.full((), -1.0, **f64)         # the last completed window; -1: none / latent never moved
        self.osc_steps, self.osc_done = 0, False
        self.asked = torch.zeros((), dtype=torch.int64, device=device)
        self.stalled = torch.zeros((), dtype=torch.int64, device=device)
        self.hist = torch.zeros(2 * max_codes + 1, dtype=torch.int64, device=device)

    def record(self, q_old: torch.Tensor, q_new: torch.Tensor, delta: torch.Tensor, fmt: FloatFormat,
               s: torch.Tensor) -> None:
        asked, stalled = grid.unmoved_counts(q_old, q_new, delta != 0)
        self.asked += asked
        self.stalled += stalled
        self.hist += delta_code_hist(q_old, q_new, fmt, s, self.max_codes)
        dq, dw = grid.oscillation_sums(q_old, q_new, delta)
        self.osc_dq += dq
        self.osc_dw += dw

    def end_step(self) -> None:
        """One measured step is complete (the optimizer calls it); closes an oscillation window every osc_window."""
        self.osc_steps += 1
        if self.osc_steps >= self.osc_window:
            self.osc_last = torch.where(self.osc_dw > 0, self.osc_dq / self.osc_dw.clamp_min(1e-300), -1.0)
            self.osc_dq.zero_(), self.osc_dw.zero_()
            self.osc_steps, self.osc_done = 0, True

    def pop(self) -> dict[str, float]:
        """Metrics since the last pop ({} if nothing was recorded), then reset."""
        n = int(self.hist.sum())
        if n == 0:
            return {}
        h = self.hist.double() / n
        k = torch.arange(-self.max_codes, self.max_codes + 1, dtype=torch.float64, device=h.device)
        out = {"optim/stall_rate": float(self.stalled) / max(int(self.asked), 1),
               "optim/frac_moved": float(1 - h[self.max_codes]),
               "optim/mean_abs_dcode": float((h * k.abs()).sum())}
        c = self.max_codes
        out["optim/frac_dcode_1"] = float(h[c - 1] + h[c + 1])
        out["optim/frac_dcode_ge2"] = float(h[: c - 1].sum() + h[c + 2:].sum())
        out["optim/update_visibility"] = out["optim/frac_moved"]       # PULSE's 1 - S1 (module docstring)
        if self.osc_done and float(self.osc_last) >= 0:
            out["optim/osc_ratio"] = float(self.osc_last)
        self.osc_done = False
        self.asked.zero_(), self.stalled.zero_(), self.hist.zero_()
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"asked": self.asked.clone(), "stalled": self.stalled.clone(), "hist": self.hist.clone(),
                "osc": {"dq": self.osc_dq.clone(), "dw": self.osc_dw.clone(), "last": self.osc_last.clone(),
                        "steps": self.osc_steps, "done": self.osc_done, "window": self.osc_window}}

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        self.asked.copy_(sd["asked"]), self.stalled.copy_(sd["stalled"]), self.hist.copy_(sd["hist"])
        if "osc" in sd:                                  # (checkpoints before the oscillation ratio: a fresh window)
            o = sd["osc"]
            self.osc_dq.copy_(o["dq"]), self.osc_dw.copy_(o["dw"]), self.osc_last.copy_(o["last"])
            self.osc_steps, self.osc_done, self.osc_window = int(o["steps"]), bool(o["done"]), int(o["window"])
