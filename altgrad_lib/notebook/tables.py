"""Provenance and run tables: what the notebooks print about runs (metrics pivoted, loss curves, final
numbers, throughput), the banner every notebook prints first, and the training-notebook glue (TrainConfig
from notebook globals, model summary, trained-model loading, variants x seeds).

Runs are `runs.Run` objects (or anything with `.dir` and `.metrics`); tables have one row per observation.
"""
from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd
import torch

# ----------------------------------------------------------------------------------------------------
# provenance


def git_sha(short: bool = True) -> str:
    """SHA of HEAD plus '-dirty' when tracked files differ (runs.git_info; 'unknown' without git)."""
    from altgrad_lib.runs import git_info

    info = git_info()
    sha = info["sha"][:12] if short and info["sha"] != "unknown" else info["sha"]
    return sha + ("-dirty" if info["dirty"] else "")


def params_hash(params: Mapping[str, Any]) -> str:
    """Stable 12-hex hash of a parameter dict (sorted JSON), for notebooks without a run."""
    blob = json.dumps(dict(params), sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def provenance_banner(params: Mapping[str, Any], run: Any | None = None) -> str:
    """One block of text for the first output cell: versions, SHA, seed, parameter/config hash."""
    import altgrad_lib

    lines = [f"altgrad {altgrad_lib.__version__} | git {git_sha()} | torch {torch.__version__} "
             f"| numpy {np.__version__} | threads {torch.get_num_threads()}",
             f"seed {params.get('seed', '-')} | params hash {params_hash(params)}"]
    if run is not None:
        prov = getattr(run, "provenance", None) or {}
        lines.append(f"run {Path(run.dir).name} | status {getattr(run, 'status', '?')} "
                     f"| config hash {str(prov.get('config_hash', '?'))[:12]}")
    lines.append("params: " + ", ".join(f"{k}={v}" for k, v in params.items()))
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------------
# runs and corpora


def corpus_summary(tc: Any) -> pd.DataFrame:
    """TokenCorpus.summary() as a readable table (statistic x split); entropy in nats/token."""
    s = tc.summary()
    rows = {}
    for k in ("docs", "chars", "tokens"):
        rows[k] = {sp: f"{int(s[f'{sp}_{k}']):,}" for sp in ("train", "val")}
    for k in ("bytes_per_token", "unigram_entropy"):
        rows[k] = {sp: f"{s[f'{sp}_{k}']:.3f}" for sp in ("train", "val")}
    rows["unigram_perplexity"] = {sp: f"{math.exp(s[f'{sp}_unigram_entropy']):.1f}" for sp in ("train", "val")}
    df = pd.DataFrame(rows).T
    df.attrs["title"] = f"{s['corpus']} / {s['tokenizer']} (vocab {s['vocab_size']})"
    return df


def metrics_wide(run: Any) -> pd.DataFrame:
    """Run metrics (long table step,name,value) pivoted to one row per step, one column per metric."""
    m = run.metrics if isinstance(run.metrics, pd.DataFrame) else pd.read_csv(Path(run.dir) / "metrics.csv")
    return m.pivot_table(index="step", columns="name", values="value", aggfunc="last").reset_index()


def find_metric(columns: Iterable[str], *candidates: str) -> str | None:
    """First metric name present among `candidates` (train.py's names), else None."""
    cols = set(columns)
    return next((c for c in candidates if c in cols), None)


VAL_LOSS = ("val/loss", "val_loss", "loss/val")
TRAIN_LOSS = ("train/loss", "train_loss", "loss/train", "loss")
THROUGHPUT = ("perf/tokens_per_s", "tokens_per_s", "throughput/tokens_per_s", "tok/s", "tokens_per_sec")


def loss_table(runs: Mapping[str, Any]) -> pd.DataFrame:
    """Long table (label, step, split, loss) of train and val loss for several runs."""
    frames = []
    for label, run in runs.items():
        w = metrics_wide(run)
        for split, names in (("train", TRAIN_LOSS), ("val", VAL_LOSS)):
            col = find_metric(w.columns, *names)
            if col is not None:
                d = w[["step", col]].dropna().rename(columns={col: "loss"})
                frames.append(d.assign(label=label, split=split))
    return pd.concat(frames, ignore_index=True)[["label", "step", "split", "loss"]]


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
    row["val_ppl"] = math.exp(v) if v < 700 else (math.inf if v > 0 else math.nan)  # NaN stays NaN
    col = find_metric(w.columns, *THROUGHPUT)
    row["tokens_per_s"] = float(w[col].dropna().median()) if col else math.nan
    row["diverged"] = diverged
    return row


def run_summary(runs: Mapping[str, Any], baseline: str | None = None) -> pd.DataFrame:
    """Final train/val loss, perplexity, median throughput and (optionally) % gap to a baseline run."""
    df = pd.DataFrame([{"run": label, **final_metrics(run)} for label, run in runs.items()])
    if baseline is not None:
        base = df.loc[df.run == baseline, "final_val_loss"].iloc[0]
        df["val_gap_pct"] = 100 * (df.final_val_loss - base) / base
    return df


RUN_FRAME_KEYS = ("recipe", "backend", "seed")


def run_frame(runs: Iterable[Any] | Mapping[str, Any], keys: Iterable[str] = RUN_FRAME_KEYS) -> pd.DataFrame:
    """Tidy frame, one row per run: `variant` (the recipe name), the config `keys`, status and final numbers.

    The columns come from each run's config, never from parsing a label. A run that did not complete
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
        row["status"] = getattr(run, "status", "incomplete")
        row.update(final_metrics(run))
        if row["status"] != "completed":
            row.update(final_train_loss=math.nan, final_val_loss=math.nan, val_ppl=math.nan)
        rows.append(row)
    return pd.DataFrame(rows)


def load_metrics(index: pd.DataFrame, keys: Iterable[str]) -> pd.DataFrame:
    """Every run's metrics.csv in one long tidy frame: run, the `keys` columns of the index, step, name, value.

    `index` is a study index (study.csv) or a run_frame: one row per run with a `run_dir` (or `run`) column.
    Runs without a metrics file (failed before the first step) contribute no rows.
    """
    from altgrad_lib.runs import read_metrics

    keys = list(keys)
    frames = []
    for d in index.to_dict("records"):
        m = read_metrics(Path(d["run_dir"]) / "metrics.csv")
        if len(m):
            frames.append(m.assign(run=d["run"], **{k: d[k] for k in keys}))
    cols = ["run", *keys, "step", "name", "value"]
    return pd.concat(frames, ignore_index=True)[cols] if frames else pd.DataFrame(columns=cols)


# ----------------------------------------------------------------------------------------------------
# training notebooks (02, 03)


def train_config_from(params: Mapping[str, Any], *, extra: Iterable[str] = (), **overrides: Any):
    """TrainConfig from a notebook's declared parameters (the dict `ParamGuard.check` returns), never its globals.

    nanoGPT-style: the papermill parameters cell *is* the config, and a params/*.yaml maps 1:1 onto it. Every
    parameter must be a TrainConfig key (or an alias such as `compile_model`) or be named in `extra` (the
    notebook's own parameters, e.g. `backends`), so a parameter cannot be dropped on the way without an error.
    """
    from altgrad_lib.train_config import KEY_ALIASES, TrainConfig

    extra = set(extra)
    stray = sorted(k for k in params if k not in extra and k not in TrainConfig.keys() and k not in KEY_ALIASES)
    if stray:
        raise ValueError(f"notebook parameter(s) {stray} are neither TrainConfig keys nor declared as extra; "
                         f"valid keys: {TrainConfig.keys()}")
    return TrainConfig.from_dict({**{k: v for k, v in params.items() if k not in extra}, **overrides})


def gpt_config(cfg: Any, vocab_size: int):
    """The GPTConfig that train() builds for a TrainConfig."""
    from altgrad_lib.model import GPTConfig

    return GPTConfig(block_size=cfg.block_size, vocab_size=vocab_size, n_layer=cfg.n_layer, n_head=cfg.n_head,
                     n_embd=cfg.n_embd, dropout=cfg.dropout, bias=cfg.bias, mlp=cfg.mlp,
                     tie_weights=cfg.tie_weights)


def model_summary(cfg: Any, vocab_size: int) -> pd.DataFrame:
    """Shape and parameter counts of the model a TrainConfig trains (built on CPU, not trained)."""
    from altgrad_lib.model import GPT

    model = GPT(gpt_config(cfg, vocab_size))
    total, non_emb = model.num_params(), model.num_params(non_embedding=True)
    n_linear = sum(isinstance(m, torch.nn.Linear) for m in model.modules())
    return pd.DataFrame({"value": {
        "layers x heads x width": f"{cfg.n_layer} x {cfg.n_head} x {cfg.n_embd}", "context": cfg.block_size,
        "vocab": vocab_size, "wte / lm_head rows (padded)": model.config.padded_vocab_size, "mlp": cfg.mlp, "params": total, "params (non-embedding)": non_emb,
        "Linear layers": n_linear, "tokens / step": cfg.batch_size * cfg.block_size,
        "tokens seen": cfg.batch_size * cfg.block_size * cfg.max_steps}})


def load_trained_model(run: Any, vocab_size: int):
    """The GPT of a finished high-precision run with its final weights (checkpoints/last.pt), in eval mode."""
    from altgrad_lib.checkpoint import load_checkpoint
    from altgrad_lib.model import GPT

    model = GPT(gpt_config(run.config, vocab_size))
    model.load_state_dict(load_checkpoint(Path(run.dir) / "checkpoints" / "last.pt")["model"])
    return model.eval()


def throughput(runs: Mapping[str, Any], skip: int = 5) -> pd.Series:
    """Median tokens/s per run, ignoring the first `skip` steps (allocation, compile warm-up)."""
    out = {}
    for label, run in runs.items():
        w = metrics_wide(run)
        col = find_metric(w.columns, *THROUGHPUT)
        out[label] = float(w.loc[w.step > skip, col].dropna().median()) if col else math.nan
    return pd.Series(out, name="tokens_per_s")


def train_variants(cfg: Any, variants: Mapping[str, Mapping[str, Any]], seeds: Iterable[int], *,
                   study: str | None = None, executor: Any = None, **train_kwargs: Any) -> dict[str, Any]:
    """Train (or reuse) cfg with each variant's overrides for each seed; keys "<label> s<seed>".

    The runs still to train go through the study layer (study.run_points): side by side on `executor`
    (default executors.auto_executor: on CPU one single-threaded worker per core), with an index
    `<outputs>/studies/<study>/study.csv` (columns label, seed, status, final numbers) when `study` names one,
    so notebook 06 reads a notebook's runs like any study. A run is keyed by its config (auto run name), so
    a baseline trained by notebook 02 or by a study is reused here, not retrained. A run that fails in a
    worker is trained again here, in this process, so its error surfaces where the notebook asked for it.
    """
    import dataclasses

    from altgrad_lib.runs import outputs_dir
    from altgrad_lib.study import INDEX_FILE, StudyPoint, finished, run_points
    from altgrad_lib.train import train

    keyed = []
    for seed in seeds:
        for label, overrides in variants.items():
            c = cfg.replace(seed=int(seed), **overrides).resolved()
            keyed.append((f"{label} s{seed}", StudyPoint(c.run_name, {"label": label, "seed": int(seed)}, c)))
    unique: dict[str, Any] = {}
    for _, p in keyed:                      # two labels with one config train it once (indexed under the first)
        unique.setdefault(p.name, p)
    points = list(unique.values())
    todo = {p.name for p in points if not finished(p.config)}
    if study or len(todo) > 1:
        index = outputs_dir() / "studies" / study / INDEX_FILE if study else None
        verbose = train_kwargs.get("verbose", True) or train_kwargs.get("progress", True)
        run_points(points, ["label", "seed"], index, executor, log=print if verbose or todo else (lambda *a: None),
                   name=study or "variants")
    runs = {}
    for key, p in keyed:
        run = train(p.config, **train_kwargs)   # finished by now: loaded, not retrained
        runs[key] = dataclasses.replace(run, reused=p.name not in todo) if dataclasses.is_dataclass(run) else run
    return runs
