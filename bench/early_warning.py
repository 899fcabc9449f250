"""Measurement: does the curvature alarm (lr·λ_max crossing 2) fire before a destabilised run breaks, and how early?

Trains ordinary `train()` runs whose LR is the base config's × k (and optionally other recipes, e.g. E5M2 or E7M0
weights), measuring the top Hessian eigenvalue (monitors.curvature, STE surrogate on quantized models) every
`--interval` steps on a fixed validation batch from the `on_step` hook (measuring changes nothing in the run).
Per run it reports:
  event  the first step whose train loss is non-finite or at least twice the lowest loss so far;
  alarm  the first measured step with lr·λ_max > 2 (the GD stability bound on the raw Hessian);
  lead   event − alarm in steps (> 0: warned in time; "missed": no alarm before the event; "false": alarm, no event).
Report only: nothing here is tuned. The GD bound is not Adam's (whose edge is on the preconditioned sharpness,
monitors.curvature.adam_stability_limit); the optimizer is not reachable from train()'s hooks, so the raw
Hessian's bound is what is measured here.

    ALTGRAD_OUTPUTS=/tmp/ew HF_HUB_OFFLINE=1 .venv/bin/python bench/early_warning.py \
        --recipes bf16 fmt:E5M2 --k 1 10 100 --seeds 0 1 2 3 4 --steps 60 --interval 3
"""
from __future__ import annotations

import argparse
import math
import time

import pandas as pd

from altgrad_lib.monitors import curvature as cv
from altgrad_lib.data import TokenCorpus
from altgrad_lib.train import VAL_SEED, TrainConfig, train

BASE = dict(n_layer=2, n_head=2, n_embd=32, block_size=32, batch_size=8, max_docs=200, tokenizer="gpt2-512",
            warmup_steps=10, eval_interval=0, eval_iters=2, ckpt_interval=0, lr=1e-3, min_lr=1e-4, grad_clip=1.0)


def first_event(losses: pd.Series) -> int | None:
    """First step whose loss is non-finite or ≥ 2 × the lowest loss before it."""
    best = math.inf
    for step, v in losses.items():
        if not math.isfinite(v) or v >= 2 * best:
            return int(step)
        best = min(best, v)
    return None


def measure(cfg: TrainConfig, interval: int, iters: int) -> tuple[pd.DataFrame, dict]:
    corpus = TokenCorpus.build(cfg.corpus, cfg.tokenizer, max_docs=cfg.max_docs, progress=False)
    batch = corpus.get_batch("val", cfg.batch_size, cfg.block_size, seed=VAL_SEED, step=0)
    holder: dict = {}
    rows: list[dict] = []

    def on_step(step: int, m: dict) -> None:
        if step % interval == 0 and math.isfinite(m["train/loss"]):
            lam, n = cv.top_eigenvalue(holder["model"], cv.gpt_loss, batch, iters=iters, tol=1e-3)
            rows.append({"step": step, "lr": m["train/lr"], "lambda_max": lam, "lr_lambda_max": m["train/lr"] * lam,
                         "power_iters": n})

    run = train(cfg, resume=False, progress=False, verbose=False, on_model=lambda mod: holder.update(model=mod),
                on_step=on_step)
    curv = pd.DataFrame(rows)
    losses = run.metric("train/loss").sort_index()
    event = first_event(losses)
    alarms = curv[curv["lr_lambda_max"] > cv.GD_STABILITY_LIMIT]["step"] if len(curv) else pd.Series([], dtype=int)
    alarm = int(alarms.iloc[0]) if len(alarms) else None
    if event is None:
        lead = "false" if alarm is not None else "none"
    elif alarm is None or alarm >= event:
        lead = "missed"
    else:
        lead = str(event - alarm)
    summary = {"recipe": cfg.recipe_name, "lr": cfg.lr, "seed": cfg.seed, "status": run.status, "event": event,
               "alarm": alarm, "lead": lead, "max_lr_lambda": float(curv["lr_lambda_max"].max()) if len(curv) else math.nan}
    return curv, summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--recipes", nargs="+", default=["bf16", "fmt:E5M2"])
    ap.add_argument("--k", nargs="+", type=float, default=[1, 30, 100], help="LR multipliers of the base lr")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--interval", type=int, default=3, help="steps between curvature measurements")
    ap.add_argument("--iters", type=int, default=20, help="power iterations per measurement")
    a = ap.parse_args()
    out = []
    t0 = time.perf_counter()
    for recipe in a.recipes:
        for k in a.k:
            for seed in a.seeds:
                cfg = TrainConfig.from_dict({**BASE, "recipe": recipe, "seed": seed, "max_steps": a.steps,
                                             "lr": BASE["lr"] * k, "min_lr": BASE["min_lr"] * k,
                                             "run_name": f"ew-{recipe.replace(':', '_')}-k{k:g}-s{seed}"})
                _, s = measure(cfg, a.interval, a.iters)
                out.append({"k": k, **s})
                print(out[-1], flush=True)
    df = pd.DataFrame(out)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(df.to_string(index=False))
        print("\nper (recipe, k): runs with an event, alarms in time (lead > 0), median lead, missed, false alarms")
        for (recipe, k), g in df.groupby(["recipe", "k"]):
            leads = [int(x) for x in g["lead"] if x.isdigit()]
            print(f"  {recipe:>10} k={k:<5g} events {int(g['event'].notna().sum())}/{len(g)}  in time {len(leads)}  "
                  f"median lead {pd.Series(leads).median() if leads else float('nan'):.1f} steps  "
                  f"missed {int((g['lead'] == 'missed').sum())}  false {int((g['lead'] == 'false').sum())}")
    print(f"total {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
