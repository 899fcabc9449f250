"""Measurement: the critical learning rate per format (envelope.find_stable_lr) and its spread over seeds.

Every trial is an ordinary, reused run under $ALTGRAD_OUTPUTS/runs (re-running costs nothing); the stability
criterion is envelope's (no divergence, no train loss ≥ 2 × the lowest before it, final val loss ≤ initial).
Recipes are named recipes or "<FMT>@<X|W|dY...>" (envelope.role_recipe; "E4M3@XWdY" = weights, activations and
gradients in E4M3, lm_head high precision, as notebook 04). Per-seed table to
$ALTGRAD_OUTPUTS/bench/critical_lr/per_seed.csv; `--md` writes the markdown report.

    ALTGRAD_OUTPUTS=/tmp/crit HF_HUB_OFFLINE=1 .venv/bin/python bench/critical_lr.py \
        --recipes hp E4M3@XWdY E5M2@XWdY E3M4@XWdY E2M5@XWdY E1M6@XWdY E7M0@XWdY --seeds 0 1 2 --steps 40 \
        --md bench/results/critical_lr.md
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report_md import header, md_table

from altgrad_lib.studies.envelope import Criterion, critical_lr_table, role_recipe
from altgrad_lib.paths import outputs_dir
from altgrad_lib.training.config import TrainConfig

BASE = dict(n_layer=2, n_head=2, n_embd=32, block_size=32, batch_size=8, max_docs=200, tokenizer="gpt2-512",
            warmup_steps=10, eval_interval=0, eval_iters=4, ckpt_interval=0, lr=1e-3, min_lr=1e-4, grad_clip=1.0)
FORMATS = ("E4M3", "E5M2", "E3M4", "E2M5", "E1M6", "E7M0")


def spread(table: pd.DataFrame) -> pd.DataFrame:
    """Per recipe over seeds: mean / geometric mean / min / max of lr_critical (closed brackets only), how many
    seeds gave a closed bracket, and the lowest stable / highest unstable lr seen."""
    out = []
    for recipe, g in table.groupby("recipe", sort=False):
        c = g["lr_critical"].dropna()
        out.append({"recipe": recipe, "seeds": len(g), "closed": len(c),
                    "mean": float(c.mean()) if len(c) else math.nan,
                    "geo_mean": float(np.exp(np.log(c).mean())) if len(c) else math.nan,
                    "min": float(c.min()) if len(c) else math.nan, "max": float(c.max()) if len(c) else math.nan,
                    "max/min": float(c.max() / c.min()) if len(c) else math.nan,
                    "open_low": int(g["lr_stable"].isna().sum()), "open_high": int(g["lr_unstable"].isna().sum()),
                    "trials": int(g["n_trials"].sum())})
    return pd.DataFrame(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--recipes", nargs="+", default=["hp", *(f"{f}@XWdY" for f in FORMATS)])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--lo", type=float, default=1e-4)
    ap.add_argument("--hi", type=float, default=10.0)
    ap.add_argument("--ratio", type=float, default=1.5, help="stop when lr_unstable / lr_stable <= ratio")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--md", default="", help="write the markdown report here (e.g. bench/results/critical_lr.md)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    head = header("Critical learning rate per format", sys.argv)
    t0 = time.perf_counter()
    cfg = TrainConfig.from_dict({**BASE, "max_steps": a.steps})
    table = critical_lr_table(cfg, [role_recipe(r) for r in a.recipes], a.seeds, a.lo, a.hi, ratio=a.ratio)
    total = time.perf_counter() - t0
    out_dir = outputs_dir() / "bench" / "critical_lr"
    out_dir.mkdir(parents=True, exist_ok=True)
    table.to_csv(out_dir / "per_seed.csv", index=False)
    sp = spread(table)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(table.to_string(index=False))
        print("\ncritical lr per recipe over seeds (geometric middle of each seed's bracket):")
        print(sp.to_string(index=False))
    print(f"total {total:.0f} s")
    if a.md:
        text = (head + f"- wall time: {total:.0f} s, {int(table['n_trials'].sum())} trial runs\n\n"
                + METHOD.format(steps=a.steps, lo=a.lo, hi=a.hi, ratio=a.ratio, crit=Criterion().short_str())
                + "\n## Critical lr per recipe, spread over seeds\n\n" + md_table(sp)
                + "\n## Per seed (bracket: largest stable lr < critical < smallest unstable lr)\n\n"
                + md_table(table.astype(object)))
        Path(a.md).parent.mkdir(parents=True, exist_ok=True)
        Path(a.md).write_text(text)
        print(f"wrote {a.md}")


METHOD = """## Method

- Model: GPT 2 layers × 2 heads × n_embd 32, context 32, batch 8, tokenizer gpt2-512 (tiny corpus slice), AdamW,
  warmup 10 steps then cosine to lr/10, grad clip 1.0, {steps} steps per trial, fp32 compute.
- Recipes: `hp` = nothing quantized; `<FMT>-XWdY` = inputs X, weights W and output gradients dY of every Linear
  except lm_head in FMT (simulated, per-tensor current scaling; as notebook 04's recipes).
- Search (`envelope.find_stable_lr`): trials at lo = {lo:g} and hi = {hi:g}, then bisection of log(lr) until
  unstable / stable ≤ {ratio:g}. A trial is stable iff it did not diverge, no train loss reached 2 × the lowest
  before it, and its final val loss ≤ its step-0 val loss (criterion {crit}).
- lr_critical = geometric middle of each seed's bracket; mean / geo_mean / min / max over the seeds with a closed
  bracket; open_low = seeds where even lo was unstable, open_high = seeds where even hi was stable.
"""

if __name__ == "__main__":
    main()
