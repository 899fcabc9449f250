"""Weight storage modes: how an optimizer writes the new fp32 value w_new of a weight back into `param.data`.

Every optimizer in this package computes w_new in fp32 (weight decay included, so a decay smaller than half an
ULP is not silently lost before the update is added) and then calls `write`, which rounds once:

  fp32      param.data = w_new: the FP32 master weight; the forward fake-quantizes it (today's path).
  grid_rne  param.data = Q_rne(w_new) on the weight's grid: no FP32 copy; updates under half an ULP are rounded
            away (the weight *stalls*).
  grid_sr   param.data = Q_sr(w_new): stochastic rounding with the optimizer's seeded counter_rng bits; a sub-ULP
            update survives in expectation (E[Q_sr(x)] = x).
  kahan     compensated storage: param.data = Q_rne(w_new + c), c = (w_new + c) - param.data keeps what the
            rounding dropped, in bf16 (the BF16-training recipe: a 16-bit buffer) or fp32 (`kahan_dtype`).
  error_feedback  param.data = Q_rne(w_new) and the residual w_new - Q goes into the first moment (ECO; the update
            and its derivation: error_feedback.py); the optimizer does it (GridOptimizer._write), not `write`.
  error_feedback_sr  the same with Q_sr (grid_sr's counter bits) instead of Q_rne.

Grid modes need a format: a parameter without one (embeddings, LayerNorm, high-precision layers) is always
stored in fp32.  The grid is fmt scaled by the per-tensor power of two of grid.py, fixed at the first step.
"""
from __future__ import annotations

import torch

from altgrad_lib.choices import STORAGE_MODES
from altgrad_lib.errors import invalid
from altgrad_lib.numerics.formats import FloatFormat
from altgrad_lib.numerics.grid import to_grid

KAHAN_DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


@torch.no_grad()
def write(p: torch.Tensor, w_new: torch.Tensor, mode: str, fmt: FloatFormat | None, s: torch.Tensor | None,
          comp: torch.Tensor | None = None, rbits: torch.Tensor | None = None, sr_bits: int | None = None) -> None:
    """Store w_new (fp32, p's shape) into p per `mode`; updates the Kahan buffer comp in place."""
    if mode == "fp32" or fmt is None:
        p.copy_(w_new)
    elif mode == "grid_rne":
        p.copy_(to_grid(w_new, fmt, s))
    elif mode == "grid_sr":
        p.copy_(to_grid(w_new, fmt, s, rbits, sr_bits))
    elif mode in ("error_feedback", "error_feedback_sr"):
        raise ValueError(f"storage={mode!r} needs the optimizer's first moment: GridOptimizer._write stores it")
    elif mode == "kahan":
        target = w_new + comp.float()                   # fp32: the value the weight should have had
        q = to_grid(target, fmt, s)
        comp.copy_(target - q)
        p.copy_(q)
    else:
        raise invalid("storage", mode, STORAGE_MODES)
