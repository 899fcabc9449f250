"""Measurement: per-block Fisher (monitors/fisher.py) next to the Hessian λ_max (monitors/curvature.py) on the cpu
profile model for hp, fp8_hybrid and an E2M1 recipe, and what one measurement costs.

Each recipe trains one ordinary `train()` run of the cpu profile's model (params/02_bf16_baseline/cpu.yaml: 2 x 64,
context 64, batch 8, lr 1e-3 -> 1e-4; evaluation and checkpoints off). Every `--interval` steps (and at step 1),
from the `on_step` hook (after the update, as the diagnostics groups measure; measuring changes nothing in the run),
on one fixed validation batch (its first `--samples` sequences), per block, w.r.t. the block's Linear weights:
    hess_lmax     λ_max of the Hessian of the mean token loss (STE surrogate on quantized models; power iteration)
    fisher_lmax   λ_max of the label-expectation Fisher = Gauss-Newton matrix (power iteration on F·v)
    kfac_lmax     NNGeometry K-FAC(-expand) λ_max = max_layers λ_max(A)·λ_max(G)
    fisher_trace  tr F from labels sampled from the model (unbiased), kfac_trace its K-FAC counterpart
    diag_max      the diagonal Fisher's largest entry
    trace_over_B  fisher_trace / B: a lower bound on the λ_max of the B-sample Fisher (rank ≤ B), hence not used
and the K-FAC relative errors against the exact numbers. Timings: one `fisher_rows` and one `curvature_rows` call
on each final model, best of --repeat, single thread. Report only: nothing here is tuned.

    OMP_NUM_THREADS=1 ALTGRAD_OUTPUTS=/tmp/fisher HF_HUB_OFFLINE=1 .venv/bin/python bench/fisher.py \
        --md bench/results/fisher.md
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report_md import header, md_table

from altgrad_lib.monitors import curvature as cv
from altgrad_lib.monitors import fisher as fi
from altgrad_lib.training.loop import TrainConfig, train

CPU_PROFILE = dict(corpus="licenses", tokenizer="gpt2-4k", n_layer=2, n_head=2, n_embd=64, block_size=64,
                   batch_size=8, lr=1e-3, min_lr=1e-4, warmup_steps=20, precision="fp32", device="cpu",
                   eval_interval=0, ckpt_interval=0)
METRICS = {"lambda_max": "hess_lmax", "fisher_lambda_max": "fisher_lmax", "kfac_lambda_max": "kfac_lmax",
           "fisher_trace": "fisher_trace", "kfac_trace": "kfac_trace", "diag_max": "diag_max"}


def _block_linear_params(model: torch.nn.Module) -> dict[str, list[torch.Tensor]]:
    blocks = fi.block_linears(model)
    return {b: [p for f in fs for p in model.get_submodule(f).parameters()] for b, fs in blocks.items()}


def measure(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, step: int, samples: int) -> list[dict]:
    """Fisher rows on x[:samples] and, per block, the Hessian λ_max of the mean token loss on (x, y) w.r.t. the
    same parameters (the block's Linear weights): like for like (curvature's "block" groups add the LayerNorms)."""
    rows = [r for r in fi.fisher_rows(model, x[:samples], step=step, seed=step)]
    for b, ps in _block_linear_params(model).items():
        lam, n = cv.top_eigenvalue(model, cv.gpt_loss, (x[:samples], y[:samples]), params=ps, iters=20, tol=1e-3)
        rows.append({"step": step, "layer": b, "metric": "lambda_max", "value": lam})
    return rows


def run_one(recipe: str, seed: int, steps: int, interval: int, samples: int, repeat: int) -> tuple[pd.DataFrame, dict]:
    from altgrad_lib.training.data import TokenCorpus

    cfg = TrainConfig.from_dict({**CPU_PROFILE, "recipe": recipe, "seed": seed, "max_steps": steps})
    corpus = TokenCorpus.for_data(cfg.data_config)
    x, y = next(corpus.val_batches(cfg.data_config))   # one fixed probe: the run's first val batch
    holder: dict = {}
    rows: list[dict] = []
    spent = [0.0]

    def on_step(step: int, m: dict) -> None:      # after the update, like the diagnostics groups
        if step == 1 or step % interval == 0:
            t = time.perf_counter()
            model = holder["model"]
            rows.extend(measure(getattr(model, "_orig_mod", model), x, y, step, samples))
            spent[0] += time.perf_counter() - t

    t0 = time.perf_counter()
    train(cfg, resume=False, progress=False, verbose=False, on_model=lambda m: holder.update(model=m), on_step=on_step)
    wall = time.perf_counter() - t0 - spent[0]
    df = pd.DataFrame(rows)
    wide = df.pivot_table(index=["step", "layer"], columns="metric", values="value").rename(columns=METRICS)
    wide = wide.reset_index().assign(recipe=recipe, seed=seed)
    model = holder["model"]
    model = getattr(model, "_orig_mod", model)
    tf, th = [], []
    for _ in range(repeat):
        t = time.perf_counter()
        fi.fisher_rows(model, x[:samples], step=0)
        tf.append(time.perf_counter() - t)
        t = time.perf_counter()
        cv.curvature_rows(model, (x, y), step=0, lr=cfg.lr, by="block")
        th.append(time.perf_counter() - t)
    return wide, {"recipe": recipe, "seed": seed, "train_s_per_step": wall / steps, "fisher_rows_s": min(tf),
                  "curvature_rows_s": min(th), "fisher_in_train_steps": min(tf) / (wall / steps)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recipes", nargs="+", default=["hp", "fp8_hybrid", "fmt:E2M1"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--interval", type=int, default=100)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--md", default="")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    head = header("Fisher per block vs Hessian λ_max (cpu profile)", [sys.argv[0], *(argv or sys.argv[1:])])
    tables, costs = [], []
    for recipe in a.recipes:
        for seed in a.seeds:
            w, c = run_one(recipe, seed, a.steps, a.interval, a.samples, a.repeat)
            tables.append(w)
            costs.append(c)
            print(f"{recipe} seed {seed}: {c}", flush=True)
    df = pd.concat(tables, ignore_index=True)
    df["kfac_lmax_rel_err"] = df["kfac_lmax"] / df["fisher_lmax"] - 1
    df["kfac_trace_rel_err"] = df["kfac_trace"] / df["fisher_trace"] - 1
    df["fisher_over_hess"] = df["fisher_lmax"] / df["hess_lmax"]
    df["trace_over_B"] = df["fisher_trace"] / a.samples   # λ_max of the B-sample Fisher is at least this
    cols = ["recipe", "seed", "step", "layer", "hess_lmax", "fisher_lmax", "fisher_over_hess", "kfac_lmax",
            "kfac_lmax_rel_err", "fisher_trace", "kfac_trace", "kfac_trace_rel_err", "diag_max", "trace_over_B"]
    df = df[cols].sort_values(["step", "layer", "recipe", "seed"])
    cost = pd.DataFrame(costs)
    text = "\n".join([head, "## Per block and measured step", "", md_table(df), "",
                      "## Cost of one measurement (final model, one thread)", "", md_table(cost), ""])
    print(text)
    if a.md:
        Path(a.md).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
