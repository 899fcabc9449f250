"""Measurement: does the curvature alarm (lr·λ_max crossing 2) fire before a destabilised run breaks, and how early?

Trains ordinary `train()` runs whose LR is the base config's × k (and optionally other recipes, e.g. E5M2 or E7M0
weights), measuring the top Hessian eigenvalue (monitors.curvature, STE surrogate on quantized models) every
`--interval` steps on a fixed validation batch from the `on_step` hook (measuring changes nothing in the run).
Per run it reports:
  event       the first step whose train loss is non-finite or at least twice the lowest loss before it
              (envelope.first_spike: the same blow-up rule as the stability envelope);
  alarm       the first measured step with lr·λ_max(H) > 2 (the GD stability bound on the raw Hessian);
  alarm_adam  the first measured step with lr·λ_max(P⁻¹H) > (2 + 2β1)/(1 − β1) (= 38): AdamW's preconditioned
              sharpness against its edge of stability (Cohen et al. 2022; P = √v̂ + ε from the run's optimizer);
  lead        event − alarm in steps (> 0: warned in time; "missed": no alarm before the event; "false": alarm but
              no event in the run; "none": neither), lead_adam the same for alarm_adam.
Report only: nothing here is tuned. The optimizer is taken from train() by wrapping train._make_optimizer (a
measurement hook for this script only).

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
from altgrad_lib.envelope import first_spike
from altgrad_lib.train import VAL_SEED, TrainConfig, train

BASE = dict(n_layer=2, n_head=2, n_embd=32, block_size=32, batch_size=8, max_docs=200, tokenizer="gpt2-512",
            warmup_steps=10, eval_interval=0, eval_iters=2, ckpt_interval=0, lr=1e-3, min_lr=1e-4, grad_clip=1.0)


def _lead(event: int | None, alarm: int | None) -> str:
    if event is None:
        return "false" if alarm is not None else "none"
    return "missed" if alarm is None or alarm >= event else str(event - alarm)


def measure(cfg: TrainConfig, interval: int, iters: int) -> tuple[pd.DataFrame, dict]:
    import altgrad_lib.train as tr

    corpus = TokenCorpus.build(cfg.corpus, cfg.tokenizer, max_docs=cfg.max_docs, progress=False)
    batch = corpus.get_batch("val", cfg.batch_size, cfg.block_size, seed=VAL_SEED, step=0)
    holder: dict = {}
    rows: list[dict] = []
    adam_limit = cv.adam_stability_limit(cfg.beta1)

    def on_step(step: int, m: dict) -> None:
        if step % interval == 0 and math.isfinite(m["train/loss"]):
            model, opt = holder["model"], holder["opt"]
            lam, n = cv.top_eigenvalue(model, cv.gpt_loss, batch, iters=iters, tol=1e-3)
            ps = [p for p in model.parameters() if p.requires_grad]
            lam_p, _ = cv.top_eigenvalue(model, cv.gpt_loss, batch, iters=iters, tol=1e-3,
                                         precond=cv.adam_preconditioner(opt, ps))
            rows.append({"step": step, "lr": m["train/lr"], "lr_lambda_max": m["train/lr"] * lam,
                         "lr_lambda_adam": m["train/lr"] * lam_p, "power_iters": n})

    real = tr._make_optimizer

    def capture(*a, **kw):
        holder["opt"] = real(*a, **kw)
        return holder["opt"]

    tr._make_optimizer = capture
    try:
        run = train(cfg, resume=False, progress=False, verbose=False, on_model=lambda mod: holder.update(model=mod),
                    on_step=on_step)
    finally:
        tr._make_optimizer = real
    curv = pd.DataFrame(rows, columns=["step", "lr", "lr_lambda_max", "lr_lambda_adam", "power_iters"])
    event = first_spike(run.metric("train/loss").sort_index())   # non-finite, or ≥ 2 × the lowest before it

    def first(col: str, limit: float) -> int | None:
        hit = curv[curv[col] > limit]["step"]
        return int(hit.iloc[0]) if len(hit) else None

    alarm, alarm_adam = first("lr_lambda_max", cv.GD_STABILITY_LIMIT), first("lr_lambda_adam", adam_limit)
    summary = {"recipe": cfg.recipe_name, "lr": cfg.lr, "seed": cfg.seed, "status": run.status, "event": event,
               "alarm": alarm, "lead": _lead(event, alarm), "alarm_adam": alarm_adam,
               "lead_adam": _lead(event, alarm_adam), "max_lr_lambda": float(curv["lr_lambda_max"].max()),
               "max_lr_lambda_adam": float(curv["lr_lambda_adam"].max())}
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
        print("\nper (recipe, k): runs with an event; per alarm: in time (lead > 0), median lead, missed, false")
        for (recipe, k), g in df.groupby(["recipe", "k"]):
            parts = []
            for col in ("lead", "lead_adam"):
                leads = [int(x) for x in g[col] if x.isdigit()]
                med = pd.Series(leads, dtype=float).median() if leads else float("nan")
                parts.append(f"{col}: in time {len(leads)}, median {med:.1f} steps, missed "
                             f"{int((g[col] == 'missed').sum())}, false {int((g[col] == 'false').sum())}")
            print(f"  {recipe:>10} k={k:<5g} events {int(g['event'].notna().sum())}/{len(g)} | " + " | ".join(parts))
    print(f"total {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
