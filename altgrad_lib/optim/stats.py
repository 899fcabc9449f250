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
    """{"entropy_bits", "capacity_use": values used / finite values, and with fmt "entropy_frac": H / log2(n_finite)}."""
    h = float(grid.hist_entropy_bits(counts))
    out = {"entropy_bits": h, "capacity_use": float(grid.used_fraction(counts, counts.numel()))}
    if fmt is not None:
        out["entropy_frac"] = h / math.log2(get_format(fmt).n_finite)
    return out


class StepStats:
    """Running sums (tensors, no host sync) of stall and Δcode counts over the steps since the last `pop`."""

    def __init__(self, device: torch.device | str = "cpu", max_codes: int = MAX_CODES) -> None:
        self.max_codes = max_codes
        self.asked = torch.zeros((), dtype=torch.int64, device=device)
        self.stalled = torch.zeros((), dtype=torch.int64, device=device)
        self.hist = torch.zeros(2 * max_codes + 1, dtype=torch.int64, device=device)

    def record(self, q_old: torch.Tensor, q_new: torch.Tensor, delta: torch.Tensor, fmt: FloatFormat,
               s: torch.Tensor) -> None:
        asked, stalled = grid.unmoved_counts(q_old, q_new, delta != 0)
        self.asked += asked
        self.stalled += stalled
        self.hist += delta_code_hist(q_old, q_new, fmt, s, self.max_codes)

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
        self.asked.zero_(), self.stalled.zero_(), self.hist.zero_()
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"asked": self.asked.clone(), "stalled": self.stalled.clone(), "hist": self.hist.clone()}

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        self.asked.copy_(sd["asked"]), self.stalled.copy_(sd["stalled"]), self.hist.copy_(sd["hist"])
