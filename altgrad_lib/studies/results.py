"""Results of many runs as one tidy frame: one row per run, columns from its config, its final metrics."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterable, Mapping

import pandas as pd

from altgrad_lib.training.run_dir import perplexity, read_metrics
from altgrad_lib.training.tokenizers import uniform_loss

def find_metric(columns: Iterable[str], *candidates: str) -> str | None:
    """First metric name present among `candidates` (the training loop's names), else None."""
    cols = set(columns)
    return next((c for c in candidates if c in cols), None)


VAL_LOSS = ("val/loss", "val_loss", "loss/val")


TRAIN_LOSS = ("train/loss", "train_loss", "loss/train", "loss")


THROUGHPUT = ("perf/tokens_per_s", "tokens_per_s", "throughput/tokens_per_s", "tok/s", "tokens_per_sec")


def final_metrics(run: Any) -> dict[str, Any]:
    """Last train/val loss, val perplexity and median throughput of one run (NaN where not logged).

    A diverged run has no final loss (NaN): its last logged val/loss predates the divergence (e.g. step 0)."""
    w = metrics_wide(run)
    row: dict[str, Any] = {}
    diverged = bool(getattr(run, "diverged", False))
    for key, names in (("final_train_loss", TRAIN_LOSS), ("final_val_loss", VAL_LOSS)):
        col = find_metric(w.columns, *names)
        row[key] = float(w[col].dropna().iloc[-1]) if col and w[col].notna().any() and not diverged else math.nan
    v = row["final_val_loss"]
    row["val_ppl"] = perplexity(v)
    col = find_metric(w.columns, *THROUGHPUT)
    row["tokens_per_s"] = float(w[col].dropna().median()) if col else math.nan
    row["diverged"] = diverged
    return row


RUN_FRAME_KEYS = ("recipe", "backend", "seed")
DID_NOT_LEARN = "did_not_learn"


def run_status(status: str, final_val_loss: float | None, tokenizer: str) -> str:
    """A finished run's status as a result: `diverged` also when it "completed" with a non-finite final validation
    loss, `did_not_learn` when its final validation loss is above ln(V), the loss of a uniform guess over its
    tokenizer's vocabulary (e.g. lr 10: 66 nats against ln(4097) = 8.3); else `status` unchanged. Derived from the
    recorded numbers, so a reused run (trained before this rule existed too) gets the same status."""
    if status != "completed" or final_val_loss is None:
        return status
    if not math.isfinite(final_val_loss):
        return "diverged"
    return DID_NOT_LEARN if final_val_loss > uniform_loss(tokenizer) else status


def run_frame(runs: Iterable[Any] | Mapping[str, Any], keys: Iterable[str] = RUN_FRAME_KEYS) -> pd.DataFrame:
    """Tidy frame, one row per run: `variant` (the recipe name), the config `keys`, status and final numbers.

    The columns come from each run's config, never from parsing a label. `status` is run_status's: a run that
    finished above the uniform-guess loss is `did_not_learn` (its numbers kept). A run that did not complete
    (diverged, unfinished) has NaN losses here, so statistics over seeds never mistake the last finite
    loss before a blow-up for a result; `status` says why.
    """
    runs = list(runs.values()) if isinstance(runs, Mapping) else list(runs)
    rows = []
    for run in runs:
        cfg = run.config
        row: dict[str, Any] = {"run": Path(run.dir).name, "variant": cfg.recipe_name}
        for k in keys:
            v = getattr(cfg, k)
            row[k] = cfg.recipe_name if k == "recipe" else v
        row["status"] = ""   # (column order: status before the final numbers)
        row.update(final_metrics(run))
        row["status"] = run_status(getattr(run, "status", "incomplete"), getattr(run, "final_val_loss", None),
                                   cfg.data_config.tokenizer)
        if row["status"] not in ("completed", DID_NOT_LEARN):   # a run that did not learn keeps its numbers
            row.update(final_train_loss=math.nan, final_val_loss=math.nan, val_ppl=math.nan)
        rows.append(row)
    return pd.DataFrame(rows)


def load_metrics(index: pd.DataFrame, keys: Iterable[str]) -> pd.DataFrame:
    """Every run's metrics.csv in one long tidy frame: run, the `keys` columns of the index, step, name, value.

    `index` is a study index (study.csv) or a run_frame: one row per run with a `run_dir` (or `run`) column.
    Runs without a metrics file (failed before the first step) contribute no rows.
    """
    keys = list(keys)
    frames = []
    for d in index.to_dict("records"):
        m = read_metrics(Path(d["run_dir"]) / "metrics.csv")
        if len(m):
            frames.append(m.assign(run=d["run"], **{k: d[k] for k in keys}))
    cols = ["run", *keys, "step", "name", "value"]
    return pd.concat(frames, ignore_index=True)[cols] if frames else pd.DataFrame(columns=cols)


def metrics_wide(run: Any) -> pd.DataFrame:
    """Run metrics (long table step,name,value) pivoted to one row per step, one column per metric."""
    m = run.metrics if isinstance(run.metrics, pd.DataFrame) else pd.read_csv(Path(run.dir) / "metrics.csv")
    return m.pivot_table(index="step", columns="name", values="value", aggfunc="last").reset_index()
