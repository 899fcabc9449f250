"""Measurement: do the divergence early-warning alarms fire before a destabilised run breaks, and how early?

Trains ordinary `train()` runs whose LR is the base config's × k, for chosen recipes (e.g. hp, E5M2 or E7M0
weights: "E5M2@W", see envelope.role_recipe), with the activations + events diagnostics on every `--interval`
steps, and measures the top Hessian eigenvalue (monitors.curvature, STE surrogate on quantized models) at the
same steps on a fixed validation batch from the `on_step` hook (measuring changes nothing in the run).
Per run:
  event          first step whose train loss is non-finite or ≥ 2 × the lowest loss before it
                 (envelope.first_spike: the stability envelope's blow-up rule)
  kurtosis       first step of a kurtosis_alarm / kurtosis_trend event (the run's own events.csv, rule and
                 thresholds of monitors.events / DiagnosticsConfig defaults, unchanged: not tuned here)
  attn_entropy   first step of an attn_entropy_drop event (idem)
  grad_norm      first step of a grad_norm_spike event (idem; a reference alarm that needs no diagnostic step)
  lr_lambda      first measured step with lr·λ_max(H) > 2 (the GD stability bound on the raw Hessian)
  lr_lambda_adam first measured step with lr·λ_max(P⁻¹H) > (2 + 2β1)/(1 − β1) (= 38): AdamW's preconditioned
                 sharpness against its edge of stability (Cohen et al. 2022; P = √v̂ + ε of the run's optimizer)
  lead_<alarm>   events.warning_outcome: event − alarm in steps (alarm strictly before the event), "missed",
                 "false" (alarm, no event) or "none"
Report only: nothing here is tuned. The optimizer is taken from train() by wrapping train._make_optimizer (a
measurement hook for this script only). Per-run tables go to $ALTGRAD_OUTPUTS/bench/early_warning/.

    ALTGRAD_OUTPUTS=/tmp/ew HF_HUB_OFFLINE=1 .venv/bin/python bench/early_warning.py \
        --recipes hp E5M2@W E7M0@W --k 1 3000 --seeds 0 1 2 3 4 --steps 80 --interval 2 \
        --md bench/results/early_warning.md
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report_md import header, md_table

from altgrad_lib.training.data import TokenCorpus
from altgrad_lib.studies.envelope import first_spike, role_recipe
from altgrad_lib.monitors import curvature as cv
from altgrad_lib.monitors import read_events
from altgrad_lib.monitors.events import first_alarms, warning_outcome
from altgrad_lib.paths import outputs_dir
from altgrad_lib.training.loop import TrainConfig, train

BASE = dict(n_layer=2, n_head=2, n_embd=32, block_size=32, batch_size=8, max_docs=200, tokenizer="gpt2-512",
            warmup_steps=30, eval_interval=0, eval_iters=2, ckpt_interval=0, lr=1e-3, min_lr=1e-4, grad_clip=1.0)
ALARM_COLS = ("kurtosis", "attn_entropy", "grad_norm", "lr_lambda", "lr_lambda_adam")


def measure(cfg: TrainConfig, interval: int, iters: int, adam: bool) -> tuple[pd.DataFrame, dict]:
    import altgrad_lib.training.loop as tr

    corpus = TokenCorpus.for_data(cfg.data_config)
    batch = next(corpus.val_batches(cfg.data_config))   # the run's first val batch
    holder: dict = {}
    rows: list[dict] = []
    adam_limit = cv.adam_stability_limit(cfg.beta1)

    def on_step(step: int, m: dict) -> None:
        if (step == 1 or step % interval == 0) and math.isfinite(m["train/loss"]):   # the diagnostics' steps
            model, opt = holder["model"], holder["opt"]
            lam, n = cv.top_eigenvalue(model, cv.gpt_loss, batch, iters=iters, tol=1e-3)
            lam_p = math.nan
            if adam:   # a second power iteration per measurement: off by default (it doubles the cost)
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
    loss = run.metric("train/loss").sort_index()
    event = first_spike(loss)   # non-finite, or ≥ 2 × the lowest before it

    def first(col: str, limit: float) -> int | None:
        hit = curv[curv[col] > limit]["step"]
        return int(hit.iloc[0]) if len(hit) else None

    alarms = {**first_alarms(read_events(run.dir)), "lr_lambda": first("lr_lambda_max", cv.GD_STABILITY_LIMIT),
              "lr_lambda_adam": first("lr_lambda_adam", adam_limit)}
    summary = {"recipe": cfg.recipe_name, "lr": cfg.lr, "seed": cfg.seed, "status": run.status, "event": event,
               "rise_1.5x": first_spike(loss, 1.5),   # context only: where the loss first rose by half
               "loss_at_event": float(loss.loc[event]) if event is not None else math.nan,
               **{f"first_{a}": alarms[a] for a in ALARM_COLS},
               **{f"lead_{a}": warning_outcome(event, alarms[a]) for a in ALARM_COLS},
               "max_lr_lambda": float(curv["lr_lambda_max"].max()) if len(curv) else math.nan,
               "max_lr_lambda_adam": float(curv["lr_lambda_adam"].max()) if len(curv) else math.nan}
    return curv, summary


def aggregate(df: pd.DataFrame, alarms: tuple[str, ...] = ALARM_COLS) -> pd.DataFrame:
    """Per (recipe, k, alarm): runs, events, detected (alarm strictly before the event), detection rate, lead
    median and range over the detected runs, missed, false alarms (alarm in a run without event)."""
    out = []
    for (recipe, k), g in df.groupby(["recipe", "k"], sort=False):
        n_ev = int(g["event"].notna().sum())
        for a in alarms:
            col = g[f"lead_{a}"]
            leads = [int(x) for x in col if not isinstance(x, str)]
            med = float(pd.Series(leads, dtype=float).median()) if leads else math.nan
            out.append({"recipe": recipe, "k": k, "alarm": a, "runs": len(g), "events": n_ev,
                        "detected": len(leads), "detection_rate": f"{len(leads)}/{n_ev}" if n_ev else "–",
                        "median_lead": med, "lead_range": f"{min(leads)}–{max(leads)}" if leads else "–",
                        "missed": int((col == "missed").sum()), "false_alarms": int((col == "false").sum())})
    return pd.DataFrame(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--recipes", nargs="+", default=["hp", "E5M2@W", "E7M0@W"],
                    help="named recipes or <FMT>@<X|W|dY...> (envelope.role_recipe)")
    ap.add_argument("--k", nargs="+", type=float, default=[3000, 1], help="LR multipliers of the base lr")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--interval", type=int, default=2, help="steps between diagnostic / curvature measurements")
    ap.add_argument("--iters", type=int, default=10, help="power iterations per curvature measurement")
    ap.add_argument("--adam", action="store_true", help="also measure Adam's preconditioned sharpness (2× cost)")
    ap.add_argument("--report", default="", help="skip training: rebuild the report from this runs.csv")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--md", default="", help="write the markdown report here (e.g. bench/results/early_warning.md)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    head = header("Early warning of divergence: alarm lead times", sys.argv)
    out_dir = outputs_dir() / "bench" / "early_warning"
    out_dir.mkdir(parents=True, exist_ok=True)
    diag = {"preset": "full", "groups": ["activations", "events"], "interval": a.interval}
    out, t0 = [], time.perf_counter()
    for spec, k, seed in [] if a.report else [(r, k, s) for r in a.recipes for k in a.k for s in a.seeds]:
        cfg = TrainConfig.from_dict({**BASE, "recipe": role_recipe(spec), "seed": seed, "max_steps": a.steps,
                                     "lr": BASE["lr"] * k, "min_lr": BASE["min_lr"] * k, "diagnostics": diag,
                                     "run_name": f"ew-{spec.replace(':', '_').replace('@', '_')}-k{k:g}-s{seed}"})
        curv, s = measure(cfg, a.interval, a.iters, a.adam)
        curv.to_csv(out_dir / f"curvature-{cfg.run_name}.csv", index=False)
        out.append({"k": k, **s})
        pd.DataFrame(out).to_csv(out_dir / "runs.csv", index=False)   # a killed sweep keeps its runs
        print({key: out[-1][key] for key in ("recipe", "k", "seed", "event", *(f"lead_{x}" for x in ALARM_COLS))},
              flush=True)
    df = pd.read_csv(a.report) if a.report else pd.DataFrame(out)
    for c in (f"lead_{x}" for x in ALARM_COLS):   # leads back from csv: ints where they are numbers
        df[c] = [int(v) if str(v).lstrip("-").isdigit() else v for v in df[c]]
    for c in ["event", "rise_1.5x", *(f"first_{x}" for x in ALARM_COLS)]:
        df[c] = [None if pd.isna(v) else int(v) for v in df[c]]
    df.to_csv(out_dir / "runs.csv", index=False)
    alarms = ALARM_COLS if df["max_lr_lambda_adam"].notna().any() else ALARM_COLS[:-1]   # adam: only if measured
    agg = aggregate(df, alarms)
    agg.to_csv(out_dir / "aggregate.csv", index=False)
    total = time.perf_counter() - t0
    with pd.option_context("display.width", 250, "display.max_columns", 30):
        print(df.to_string(index=False))
        print(agg.to_string(index=False))
    print(f"total {total:.0f} s; per-run tables in {out_dir}")
    if a.md:
        runs = df[["recipe", "k", "seed", "lr", "event", "loss_at_event", "rise_1.5x",
                   *(c for a_ in alarms for c in (f"first_{a_}", f"lead_{a_}")),
                   "max_lr_lambda", *(["max_lr_lambda_adam"] if "lr_lambda_adam" in alarms else [])]].astype(object)
        done = f"- report rebuilt from {a.report}\n" if a.report else f"- wall time: {total:.0f} s for {len(df)} runs\n"
        text = (head + done + "\n" + METHOD.format(steps=a.steps, interval=a.interval, iters=a.iters)
                + "\n## Aggregate per (recipe, k, alarm)\n\n" + md_table(agg)
                + "\n## Per run (first_*: step of the first alarm; lead_*: steps before the event)\n\n"
                + md_table(runs))
        Path(a.md).parent.mkdir(parents=True, exist_ok=True)
        Path(a.md).write_text(text)
        print(f"wrote {a.md}")


METHOD = """## Method

- Model: GPT 2 layers × 2 heads × n_embd 32, context 32, batch 8, tokenizer gpt2-512 (tiny corpus slice), AdamW,
  base lr 1e-3 (min_lr 1e-4, linear warmup over 30 steps, then cosine), grad clip 1.0; the run's lr (and min_lr) is
  the base × k, so a large k crosses the critical lr during the warmup (a gradual, not a step-1, destabilisation;
  without warmup or clipping k = 1000 blows up at step 2, leaving nothing to warn about; with them, in a seed-0
  probe of 80 steps, k ≤ 1000 did not blow up and k = 3000 did at steps 20–36; both k were chosen from that probe
  before any alarm was looked at: k = 3000 destabilises, k = 1000 is near the edge, k = 1 is the control).
  {steps} steps.
  Recipes: `hp` = nothing quantized; `<FMT>-W` = the weights of every Linear but lm_head in FMT (simulated).
- Event: first step with a non-finite train loss or a train loss ≥ 2 × the lowest before it
  (`envelope.first_spike`). Runs stop at a non-finite loss.
- Alarms (thresholds: the library's defaults, `DiagnosticsConfig`, not tuned here; rules in
  `altgrad_lib/monitors/events.py`), from the run's own `events.csv`, diagnostics every {interval} steps (and step 1):
  - kurtosis: excess kurtosis of any Linear input > 50, or > 2 × its mean over the last 8 diagnostic steps;
  - attn_entropy: a head's attention entropy < 0.5 × its mean over the last 8 diagnostic steps;
  - both window rules need 3 earlier diagnostic steps, so the earliest step they can fire is the 4th diagnostic step
    (step 6 at interval 2); the absolute kurtosis > 50 rule can fire from step 1;
  - grad_norm: total gradient norm > EMA + 6 EMA-std (every step, after 10 steps; reference alarm);
  - lr_lambda: lr·λ_max(H) > 2, λ_max by {iters} power iterations on Hessian-vector products on a fixed validation
    batch, at the diagnostic steps (STE surrogate Hessian on quantized models);
  - lr_lambda_adam (only with `--adam`): lr·λ_max(P⁻¹H) > 38 (Adam's edge of stability, β1 = 0.9;
    P = √v̂ + ε).
  Power iteration approaches λ_max from below, so with few iterations lr_lambda can fire late, never early.
- rise_1.5x (context, not used for the leads): first step whose loss is non-finite or ≥ 1.5 × the lowest before it.
- Lead = event step − first alarm step (> 0 only when the alarm fired strictly before the event); missed = an event
  without an earlier alarm; false alarm = an alarm in a run without event. The median and range of the lead are over
  the detected runs.
"""

if __name__ == "__main__":
    main()
