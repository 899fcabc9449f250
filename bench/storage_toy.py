"""Toy comparison of the weight storage modes (not a test): least squares y = X w*, w on a weight grid.

Every mode starts from the same on-grid weights and sees the same minibatches; prints the final loss (mean over
seeds) of AdamW with fp32 master weights (the forward rounds them to nearest: `fp32`) and the no-master modes,
plus the last step's update visibility (PULSE 1 - S1) and the oscillation ratio of the last 50-step window.
Sub-ULP regime on purpose: lr such that late updates are far below half a grid spacing.

    OMP_NUM_THREADS=1 .venv/bin/python bench/storage_toy.py --fmt E4M3 --steps 600 --seeds 3
"""
from __future__ import annotations

import argparse

import torch

from altgrad_lib.numerics.formats import get_format
from altgrad_lib.optim.adamw import AdamW
from altgrad_lib.numerics.grid import to_grid

MODES = ("fp32", "grid_rne", "grid_sr", "kahan", "error_feedback", "error_feedback_sr")


def run(fmt: str, mode: str, seed: int, steps: int, lr: float, d: int = 256, n: int = 64) -> tuple[float, dict]:
    gen = torch.Generator().manual_seed(seed)
    w_true = torch.randn(d, generator=gen) * 0.05
    w = torch.nn.Parameter(torch.randn(d, generator=gen) * 0.05)
    opt = AdamW([w], lr=lr, betas=(0.9, 0.999), fmt=fmt, storage=mode, kahan_dtype="fp32", seed=seed,
                track_stats=True)
    f, s = get_format(fmt), opt.state[w]["grid_scale"]
    if mode == "fp32":                           # the same on-grid start as the grid modes
        with torch.no_grad():
            w.copy_(to_grid(w.detach(), f, s))
    metrics: dict = {}
    for _ in range(steps):
        X = torch.randn(n, d, generator=gen)
        wq = to_grid(w, f, s) if mode == "fp32" else w          # fp32: the forward fake-quantizes the master
        wq = w + (wq - w).detach()                               # straight-through
        loss = ((X @ (wq - w_true)) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        m = opt.stats.pop()
        metrics["update_visibility"] = m.get("optim/update_visibility", float("nan"))
        if "optim/osc_ratio" in m:
            metrics["osc_ratio"] = m["optim/osc_ratio"]
    with torch.no_grad():
        wq = to_grid(w.detach(), f, s)
        X = torch.randn(4096, d, generator=gen)
        return float(((X @ (wq - w_true)) ** 2).mean()), metrics


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fmt", default="E4M3")
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--lr", type=float, default=3e-4)
    a = ap.parse_args()
    print(f"fmt={a.fmt} steps={a.steps} lr={a.lr} seeds={a.seeds}")
    for mode in MODES:
        res = [run(a.fmt, mode, s, a.steps, a.lr) for s in range(a.seeds)]
        loss = sum(r[0] for r in res) / len(res)
        vis = sum(r[1]["update_visibility"] for r in res) / len(res)
        osc = [r[1].get("osc_ratio", float("nan")) for r in res]
        print(f"  {mode:15s} final loss {loss:.3e}   last-step visibility {vis:.3f}   osc_ratio "
              + " ".join(f"{o:.2f}" for o in osc))


if __name__ == "__main__":
    main()
