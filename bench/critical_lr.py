"""Measurement: the critical learning rate per format (envelope.find_stable_lr) and its spread over seeds.

Every trial is an ordinary, reused run under $ALTGRAD_OUTPUTS/runs (re-running costs nothing); the stability
criterion is envelope's (no divergence, final val loss ≤ initial, final train loss ≤ 2 × its best).

    ALTGRAD_OUTPUTS=/tmp/crit HF_HUB_OFFLINE=1 .venv/bin/python bench/critical_lr.py \
        --recipes bf16 fp8_hybrid fmt:E5M2 fmt:E7M0 --seeds 0 1 2 --steps 40
"""
from __future__ import annotations

import argparse
import time

import pandas as pd

from altgrad_lib.envelope import critical_lr_table
from altgrad_lib.train_config import TrainConfig

BASE = dict(n_layer=2, n_head=2, n_embd=32, block_size=32, batch_size=8, max_docs=200, tokenizer="gpt2-512",
            warmup_steps=10, eval_interval=0, eval_iters=4, ckpt_interval=0, lr=1e-3, min_lr=1e-4, grad_clip=1.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--recipes", nargs="+", default=["bf16", "fp8_hybrid", "fmt:E5M2", "fmt:E7M0"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--lo", type=float, default=1e-3)
    ap.add_argument("--hi", type=float, default=10.0)
    ap.add_argument("--ratio", type=float, default=1.5, help="stop when lr_unstable / lr_stable <= ratio")
    a = ap.parse_args()
    t0 = time.perf_counter()
    cfg = TrainConfig.from_dict({**BASE, "max_steps": a.steps})
    table = critical_lr_table(cfg, a.recipes, a.seeds, a.lo, a.hi, ratio=a.ratio)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(table.to_string(index=False))
        spread = table.groupby("recipe", sort=False)["lr_critical"].agg(["mean", "min", "max", "count"])
        print("\ncritical lr per recipe over seeds (geometric middle of each seed's bracket):")
        print(spread.to_string())
    print(f"total {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
