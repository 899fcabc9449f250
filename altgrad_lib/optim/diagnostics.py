"""What a format does to the optimizer's steps, as plain functions any module can reuse (and `StepStats`, the
running counters an optimizer keeps when track_stats=True).

- `stall_rate(q_old, q_new, delta)`: among coordinates whose proposed update was non-zero, the fraction whose
  quantized weight did not move (the update was under half an ULP and was rounded away).
- `delta_code_hist(q_old, q_new, fmt, s, max_codes)`: how many codes each coordinate moved per step: counts for
  -max_codes..+max_codes, the two ends collecting everything beyond.
- `code_usage(q, fmt, s)`: how often each code of the format is used; `code_entropy_bits` turns it into the
  entropy in bits and the capacity use = entropy / log2(number of finite values).
q tensors are grid values (grid(fmt) / s, see grid.py); s = 1 for an unscaled grid.
"""
from __future__ import annotations

import math
from typing import Any

import torch

from altgrad_lib.formats import FloatFormat, get_format
from altgrad_lib.optim.grid import code_index

MAX_CODES = 8


def stall_rate(q_old: torch.Tensor, q_new: torch.Tensor, delta: torch.Tensor) -> float:
    """Fraction of coordinates with delta != 0 whose grid value did not change (nan if no coordinate moved)."""
    asked = delta != 0
    n = int(asked.sum())
    return float(((q_new == q_old) & asked).sum()) / n if n else math.nan


def delta_codes(q_old: torch.Tensor, q_new: torch.Tensor, fmt: FloatFormat | str, s=1.0) -> torch.Tensor:
    """Codes moved per coordinate (int64, signed: + = toward larger values)."""
    return code_index(q_new, fmt, s) - code_index(q_old, fmt, s)


def delta_code_hist(q_old: torch.Tensor, q_new: torch.Tensor, fmt: FloatFormat | str, s=1.0,
                    max_codes: int = MAX_CODES) -> torch.Tensor:
    """Counts (int64, length 2*max_codes+1) of codes moved, bin i = i - max_codes; ends are open."""
    d = delta_codes(q_old, q_new, fmt, s).clamp(-max_codes, max_codes) + max_codes
    return torch.bincount(d.flatten(), minlength=2 * max_codes + 1)


def code_usage(q: torch.Tensor, fmt: FloatFormat | str, s=1.0) -> torch.Tensor:
    """Counts per signed ordinal -n..n (n = number of positive finite values), i.e. per finite grid value."""
    fmt = get_format(fmt)
    n = int((fmt.values() > 0).sum())
    idx = code_index(q, fmt, s) + n
    return torch.bincount(idx.flatten(), minlength=2 * n + 1)


def code_entropy_bits(counts: torch.Tensor, fmt: FloatFormat | str | None = None) -> dict[str, float]:
    """{"entropy_bits": H of the code distribution, "capacity_use": H / log2(n_finite) (if fmt is given)}."""
    c = counts.double()
    p = c[c > 0] / c.sum()
    h = float(-(p * torch.log2(p)).sum()) if len(p) else 0.0
    out = {"entropy_bits": h}
    if fmt is not None:
        out["capacity_use"] = h / math.log2(get_format(fmt).n_finite)
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
        asked = delta != 0
        self.asked += asked.sum()
        self.stalled += ((q_new == q_old) & asked).sum()
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
