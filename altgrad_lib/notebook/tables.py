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

import altgrad_lib
from altgrad_lib.model import GPT
from altgrad_lib.notebook import table_view as tv
from altgrad_lib.quantize.convert import COLUMNS
from altgrad_lib.studies.results import THROUGHPUT, TRAIN_LOSS, VAL_LOSS, final_metrics, find_metric, metrics_wide
from altgrad_lib.training.build import gpt_config
from altgrad_lib.training.checkpoint import load_checkpoint
from altgrad_lib.training.config import KEY_ALIASES, TrainConfig
from altgrad_lib.training.run_dir import git_info

# ----------------------------------------------------------------------------------------------------
# provenance


def git_sha(short: bool = True) -> str:
    """SHA of HEAD plus '-dirty' when tracked files differ (runs.git_info; 'unknown' without git)."""
    info = git_info()
    sha = info["sha"][:12] if short and info["sha"] != "unknown" else info["sha"]
    return sha + ("-dirty" if info["dirty"] else "")


def params_hash(params: Mapping[str, Any]) -> str:
    """Stable 12-hex hash of a parameter dict (sorted JSON), for notebooks without a run."""
    blob = json.dumps(dict(params), sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def provenance_banner(params: Mapping[str, Any], run: Any | None = None) -> str:
    """One block of text for the first output cell: versions, SHA, seed, parameter/config hash."""
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


def corpus_summary(tc: Any) -> tv.Table:
    """TokenCorpus.summary() as a readable table (statistic x split); entropy in nats/token, named with its split's
    column (names.TERMS: the train split's entropy is the plots' line, the val split's the control check's)."""
    s = tc.summary()
    rows = {}
    for k, name in (("docs", "documents"), ("chars", "characters"), ("tokens", "tokens")):
        rows[name] = {sp: f"{int(s[f'{sp}_{k}']):,}" for sp in ("train", "val")}
    rows["bytes per token"] = {sp: f"{s[f'{sp}_bytes_per_token']:.3f}" for sp in ("train", "val")}
    rows["unigram entropy (nats/token)"] = {sp: tv.loss(s[f"{sp}_unigram_entropy"]) for sp in ("train", "val")}
    rows["unigram perplexity"] = {sp: f"{math.exp(s[f'{sp}_unigram_entropy']):.1f}" for sp in ("train", "val")}
    df = pd.DataFrame(rows).T.rename_axis("statistic")
    title = f"{s['corpus']} / {s['tokenizer']} (vocab {s['vocab_size']})"
    df.attrs["title"] = title
    return tv.table(df, caption=title)


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


def run_summary(runs: Mapping[str, Any], baseline: str | None = None) -> tv.Table:
    """Final train/val loss, perplexity, median throughput and (optionally) % gap to a baseline run. A Table: the
    numbers stay floats, the display has losses at 3 decimals, perplexity at 3 significant digits, tokens/s to the unit,
    the gap at 1 decimal %, "none" for a run without a final loss."""
    df = pd.DataFrame([{"run": label, **final_metrics(run)} for label, run in runs.items()])
    if baseline is not None:
        base = df.loc[df.run == baseline, "final_val_loss"].iloc[0]
        df["val_gap_pct"] = 100 * (df.final_val_loss - base) / base
    return tv.table(df, {"val_ppl": tv.number, "tokens_per_s": tv.whole}, keys=["run"])


# ----------------------------------------------------------------------------------------------------
# training notebooks (02, 03)


def train_config_from(params: Mapping[str, Any], *, extra: Iterable[str] = (), **overrides: Any):
    """TrainConfig from a notebook's declared parameters (the dict `ParamGuard.check` returns), never its globals.

    nanoGPT-style: the papermill parameters cell *is* the config, and a params/*.yaml maps 1:1 onto it. Every
    parameter must be a TrainConfig key (or an alias such as `compile_model`) or be named in `extra` (the
    notebook's own parameters, e.g. `backends`), so a parameter cannot be dropped on the way without an error.
    """
    extra = set(extra)
    stray = sorted(k for k in params if k not in extra and k not in TrainConfig.keys() and k not in KEY_ALIASES)
    if stray:
        raise ValueError(f"notebook parameter(s) {stray} are neither TrainConfig keys nor declared as extra; "
                         f"valid keys: {TrainConfig.keys()}")
    return TrainConfig.from_dict({**{k: v for k, v in params.items() if k not in extra}, **overrides})


def quantization_table(rows: Iterable[Mapping[str, Any]]) -> tv.Table:
    """quantize_model's rows as a Table (one row per Linear: module, class, shape, input, weight, grad_output,
    backend); printed in blocks that fit a notebook column, the module repeated in each."""
    return tv.table(pd.DataFrame(list(rows), columns=list(COLUMNS)), keys=["module"])


def model_summary(cfg: Any, vocab_size: int) -> tv.Table:
    """Shape and parameter counts of the model a TrainConfig trains (built on CPU, not trained)."""
    model = GPT(gpt_config(cfg.model_config, vocab_size))
    total, non_emb = model.num_params(), model.num_params(non_embedding=True)
    n_linear = sum(isinstance(m, torch.nn.Linear) for m in model.modules())
    df = pd.DataFrame({"value": {
        "layers x heads x width": f"{cfg.n_layer} x {cfg.n_head} x {cfg.n_embd}", "context": cfg.block_size,
        "vocab": vocab_size, "wte / lm_head rows (padded)": model.config.padded_vocab_size, "mlp": cfg.mlp,
        "params": total, "params (non-embedding)": non_emb,
        "Linear layers": n_linear, "tokens / step": cfg.batch_size * cfg.block_size,
        "tokens seen": cfg.batch_size * cfg.block_size * cfg.max_steps}}).rename_axis("model")
    return tv.table(df)


def load_trained_model(run: Any, vocab_size: int):
    """The GPT of a finished high-precision run with its final weights (checkpoints/last.pt), in eval mode."""
    model = GPT(gpt_config(run.config.model_config, vocab_size))
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


