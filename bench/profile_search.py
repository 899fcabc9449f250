"""Measurement: choose the cpu profile by its resolving power.

A candidate is the shared cpu model (params/02_bf16_baseline/cpu.yaml) with some keys overridden. For each
candidate and seed this trains (each run its own `altgrad train` process, single-threaded, at most --workers at a
time; finished runs under $ALTGRAD_OUTPUTS are reused) the recipes asked for, out of:
    hp         nothing quantized
    control    hp with the transformer blocks frozen (`freeze_blocks: true`)
    E2M1       round 2's positive control: per-tensor E2M1 on X, W and dY of every block Linear, lm_head high precision
    E2M1sr     the profile's positive control (round 3): the same with stochastic rounding on X, W and dY
    E2M1srdY / E2M1srdYall / E2M1srall   round 3's other SR variants (SR on dY only; every Linear incl. lm_head)
    fp8_hybrid / E4M3   near-null comparisons (E4M3 = E4M3 on X, W, dY, lm_head high precision)
and prints, per candidate:
    window      control - hp final val loss, nats, per seed
    E2M1* gap   each E2M1 variant - hp, per seed, mean, paired t p (two-sided, scipy ttest_rel over the seeds)
    sd_d, MDE   of fp8_hybrid - hp and E4M3 - hp: MDE = (t_.975,n-1 + t_.80,n-1) * sd_d / sqrt(n), 80 % power
    cpu_s       user+sys CPU seconds of each run's process (os.wait4), mean per recipe; only for runs trained by
                this script (a reused run keeps the cpu_s.json written when it was trained)
`--eval-noise K` also measures the evaluation's own sampling error: the final checkpoints of hp and of a second
recipe (same seed) are evaluated on K disjoint blocks of eval_iters validation batches (batch indices
j*eval_iters ... (j+1)*eval_iters-1 of the same val sampler the training loop uses, which draws random windows);
the sd over the K blocks of the per-block difference is the sampling error of that difference measured on one
eval set of eval_iters batches (--eval-block B: blocks of B batches instead). `--reeval N` tabulates the final
checkpoints re-evaluated on val batches 0..N-1 (cached per run; batches 0..eval_iters-1 must reproduce the run's
own final val loss, checked), i.e. the table an eval_iters=N profile would give without retraining. The table
always shows every recipe that has finished runs for the candidate and seeds. `--study-noise DIR` measures the
same sampling error on a finished study's own runs (e.g. `make run`'s outputs/studies/cpu_formats) against each
claims row's MDE.

    ALTGRAD_OUTPUTS=$(mktemp -d) OMP_NUM_THREADS=1 PYTHONPATH=$PWD .venv/bin/python bench/profile_search.py \
        "lr=3e-3,min_lr=3e-4" "n_layer=4,n_embd=128,lr=3e-3,min_lr=3e-4" --recipes hp control --seeds 0
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report_md import header, md_table

from altgrad_lib.training.config import TrainConfig

ROOT = Path(__file__).resolve().parent.parent
BASE_YAML = ROOT / "params" / "02_bf16_baseline" / "cpu.yaml"
# Search runs: no diagnostics (they never change the numbers), eval only at step 0 and the end, one checkpoint.
SEARCH = {"diagnostics": "off", "eval_interval": 0, "ckpt_interval": 0}


XWDY = ("input", "weight", "grad_output")


def _xwdy(fmt: str) -> dict:
    return {"name": f"{fmt}-XWdY", "layers": {"*": {"input": fmt, "weight": fmt, "grad_output": fmt}, "lm_head": None}}


def _e2m1_sr(name: str, sr_roles: tuple[str, ...], lm_head_hp: bool) -> dict:
    """Per-tensor E2M1 on X, W and dY, stochastic rounding on `sr_roles` (nearest elsewhere)."""
    sr = {"fmt": "E2M1", "rounding": "stochastic"}
    layers: dict = {"*": {r: sr if r in sr_roles else "E2M1" for r in XWDY}}
    return {"name": name, "layers": {**layers, "lm_head": None} if lm_head_hp else layers}


RECIPES = {
    "hp": {"recipe": "hp"},
    "control": {"recipe": "hp", "freeze_blocks": True},
    "E2M1": {"recipe": _xwdy("E2M1")},
    "fp8_hybrid": {"recipe": "fp8_hybrid"},
    "E4M3": {"recipe": _xwdy("E4M3")},
    # round 3: SR on dY only (the rounding NVFP4 uses there) or on X, W and dY; lm_head hp or quantized too
    "E2M1srdY": {"recipe": _e2m1_sr("E2M1-XW-srdY", ("grad_output",), lm_head_hp=True)},
    "E2M1sr": {"recipe": _e2m1_sr("E2M1-XWdY-sr", XWDY, lm_head_hp=True)},
    "E2M1srdYall": {"recipe": _e2m1_sr("E2M1-XW-srdY-all", ("grad_output",), lm_head_hp=False)},
    "E2M1srall": {"recipe": _e2m1_sr("E2M1-XWdY-sr-all", XWDY, lm_head_hp=False)},
}
T_MDE = {n: stats.t.ppf(0.975, n - 1) + stats.t.ppf(0.80, n - 1) for n in range(2, 11)}


def parse_candidate(spec: str) -> dict:
    """'lr=3e-3,n_layer=4' -> {'lr': 0.003, 'n_layer': 4} (values parsed as YAML)."""
    out = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        k, sep, v = part.partition("=")
        if not sep:
            raise SystemExit(f"candidate {spec!r}: {part!r} is not key=value")
        out[k.strip()] = yaml.safe_load(v)
    return out


def config(cand: dict, recipe: str, seed: int) -> TrainConfig:
    base = yaml.safe_load(BASE_YAML.read_text())
    return TrainConfig.from_dict({**base, **SEARCH, **cand, **RECIPES[recipe], "seed": seed}).resolved()


def _train(cfg: TrainConfig) -> None:
    cfg_file = Path(cfg.out_dir).parent / "profile_search_cfg" / f"{cfg.run_name}.yaml"
    cfg_file.parent.mkdir(parents=True, exist_ok=True)
    cfg_file.write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen([sys.executable, "-m", "altgrad_lib.cli", "train", "-f", str(cfg_file), "--no-progress"],
                         env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _, status, ru = os.wait4(p.pid, 0)    # rusage of this child alone (incl. its own reaped children)
    p.returncode = os.waitstatus_to_exitcode(status)
    err = p.stderr.read()
    if p.returncode != 0:
        print(f"FAILED {cfg.run_name}: {err.strip().splitlines()[-1:]}", file=sys.stderr)
        return
    (cfg.run_dir / "cpu_s.json").write_text(json.dumps({"user": ru.ru_utime, "sys": ru.ru_stime,
                                                        "cpu_s": ru.ru_utime + ru.ru_stime}))
    print(f"trained {cfg.run_name}: {ru.ru_utime + ru.ru_stime:.1f} cpu s", file=sys.stderr, flush=True)


REEVAL = 0   # --reeval N: final val loss re-measured on the first N val batches of the final checkpoint


def result(cfg: TrainConfig, reeval: int | None = None) -> dict | None:
    d = cfg.run_dir
    if not (d / "summary.json").exists():
        return None
    s = json.loads((d / "summary.json").read_text())
    cpu = json.loads((d / "cpu_s.json").read_text())["cpu_s"] if (d / "cpu_s.json").exists() else math.nan
    val = s.get("final_val_loss", math.nan) if s.get("status") == "completed" else math.nan
    n = REEVAL if reeval is None else reeval
    if n and math.isfinite(val):
        val = float(val_losses(cfg, n).mean())
    return {"val": val, "cpu_s": cpu}


def val_losses(cfg: TrainConfig, n: int) -> np.ndarray:
    """Per-batch val losses of the run's final checkpoint on val batches 0..n-1 (the training loop's sampler),
    cached in the run dir; the first eval_iters must reproduce the run's own final val loss."""
    cache = cfg.run_dir / f"val_batches_{n}.npy"
    if cache.exists():
        return np.load(cache)
    import torch

    from altgrad_lib.quantize.recipes import get_policy
    from altgrad_lib.training.build import build_model
    from altgrad_lib.training.data import VAL_SEED, TokenCorpus

    corpus = TokenCorpus.build(cfg.corpus, cfg.tokenizer)
    model, _ = build_model(cfg.model_config, corpus.vocab_size, get_policy(cfg.recipe), verbose=False)
    model.load_state_dict(torch.load(cfg.run_dir / "checkpoints" / "last.pt", map_location="cpu",
                                     weights_only=False)["model"])
    model.eval()
    with torch.no_grad():
        per_batch = np.array([float(model(*corpus.get_batch("val", cfg.batch_size, cfg.block_size, seed=VAL_SEED,
                                                             step=i))[1]) for i in range(max(n, cfg.eval_iters))])
    stored = result(cfg, reeval=0)["val"]
    if abs(per_batch[: cfg.eval_iters].mean() - stored) > 1e-3:
        raise SystemExit(f"{cfg.run_name}: reloaded checkpoint gives {per_batch[: cfg.eval_iters].mean():.4f} on the "
                         f"run's eval set, the run recorded {stored:.4f}")
    np.save(cache, per_batch[:n])
    return per_batch[:n]


def ensure(cands: list[dict], recipes: list[str], seeds: list[int], workers: int) -> None:
    todo = [c for cand in cands for s in seeds for r in recipes if result(c := config(cand, r, s)) is None]
    print(f"{len(todo)} runs to train", file=sys.stderr, flush=True)
    with ThreadPoolExecutor(workers) as ex:
        list(ex.map(_train, todo))


def paired(a: np.ndarray, b: np.ndarray) -> dict:
    """a - b per seed: mean, sd, paired two-sided p, MDE (80 % power, paired t at this n)."""
    d = a - b
    n = int(np.isfinite(d).sum())
    d = d[np.isfinite(d)]
    if n < 2:
        return {"mean": float(d.mean()) if n else math.nan, "sd": math.nan, "p": math.nan, "mde": math.nan, "n": n}
    sd = float(d.std(ddof=1))
    p = float(stats.ttest_rel(a[np.isfinite(a - b)], b[np.isfinite(a - b)]).pvalue)
    return {"mean": float(d.mean()), "sd": sd, "p": p, "mde": T_MDE[n] * sd / math.sqrt(n), "n": n}


def summarize(cand: dict, recipes: list[str], seeds: list[int]) -> dict:
    val = {r: np.array([(result(config(cand, r, s)) or {"val": math.nan})["val"] for s in seeds]) for r in recipes}
    cpu = {r: np.nanmean([(result(config(cand, r, s)) or {"cpu_s": math.nan})["cpu_s"] for s in seeds] or [math.nan])
           for r in recipes}
    row = {"candidate": ",".join(f"{k}={v}" for k, v in cand.items()) or "(today's profile)",
           "eval batches": REEVAL or config(cand, "hp", seeds[0]).eval_iters,
           "hp": " ".join(f"{v:.3f}" for v in val["hp"])}
    if "control" in val:
        w = val["control"] - val["hp"]
        row["window/seed"] = " ".join(f"{v:.3f}" for v in w)
        row["window_min"] = float(np.nanmin(w))
    for r in (r for r in val if r.startswith("E2M1")):   # the positive-control candidates
        g = paired(val[r], val["hp"])
        row |= {f"{r}-hp/seed": " ".join(f"{v:+.3f}" for v in val[r] - val["hp"]), f"{r}_gap": g["mean"],
                f"{r}_p": g["p"]}
    for r in ("fp8_hybrid", "E4M3"):
        if r in val:
            g = paired(val[r], val["hp"])
            row |= {f"{r}-hp": g["mean"], f"sd_d {r}": g["sd"], f"MDE {r}": g["mde"]}
    for r in recipes:
        row[f"cpu_s {r}"] = cpu[r]
    q = [cpu[r] for r in recipes if r not in ("hp", "control") and np.isfinite(cpu[r])] or [cpu["hp"]]
    row["make_run_min_70"] = 70 * float(np.mean(q)) / 2 / 60   # 70 runs, 2 cores, quantized-run cost
    return row


def eval_noise(cand: dict, other: str, seed: int, k: int, block: int = 0) -> dict:
    """sd over k disjoint blocks of `block` (default eval_iters) val batches of (loss_other - loss_hp)."""
    from altgrad_lib.training.data import TokenCorpus

    losses, batches = {}, {}
    for r in ("hp", other):
        cfg = config(cand, r, seed)
        block = block or cfg.eval_iters
        batches[r] = val_losses(cfg, k * block)
        losses[r] = batches[r].reshape(k, block).mean(axis=1)
    d = losses[other] - losses["hp"]
    sd_b = float((batches[other] - batches["hp"]).std(ddof=1))   # batches are independent random windows
    corpus = TokenCorpus.build(cfg.corpus, cfg.tokenizer)
    return {"other": other, "k": k, "batches_per_eval": block,
            "tokens_per_eval": block * cfg.batch_size * cfg.block_size,
            "sd_hp": float(losses["hp"].std(ddof=1)), "sd_diff": float(d.std(ddof=1)), "mean_diff": float(d.mean()),
            "per_batch_sd_diff": sd_b, **{f"err_diff_E{e}": sd_b / math.sqrt(e) for e in (8, 32, 64, 128)},
            "hp_mean_all": float(losses["hp"].mean()), "val_unigram_entropy": corpus.unigram_entropy("val"),
            "val_tokens": int(len(corpus.split_data("val")))}


def study_eval_noise(study_dir: Path, n: int) -> pd.DataFrame:
    """The evaluation's own sampling error on a finished study's runs (`outputs/studies/<name>/`, its study.csv
    and claims.csv): per claims row and seed, the sd over val batches 0..n-1 of the per-batch loss difference
    (level - baseline, same batches, final checkpoints); one evaluation of eval_iters batches carries the worst
    seed's sd / sqrt(eval_iters), set against the row's MDE."""
    st = pd.read_csv(study_dir / "study.csv")
    frozen = st["freeze_blocks"].astype(bool) if "freeze_blocks" in st else pd.Series(False, index=st.index)
    st = st[~frozen & (st.status == "completed")]
    cfgs = {(r.recipe, r.seed): TrainConfig.from_dict(yaml.safe_load((Path(r.run_dir) / "config.yaml").read_text()))
            for r in st.itertuples()}
    rows = []
    for r in pd.read_csv(study_dir / "claims.csv").itertuples():
        seeds = sorted(s for s in st.seed.unique() if (r.level, s) in cfgs and (r.baseline, s) in cfgs)
        sd = [float((val_losses(cfgs[(r.level, s)], n) - val_losses(cfgs[(r.baseline, s)], n)).std(ddof=1))
              for s in seeds]
        e = cfgs[(r.baseline, seeds[0])].eval_iters
        err = max(sd) / math.sqrt(e)
        rows.append({"level": r.level, "baseline": r.baseline, "seeds": len(seeds), "batches": n,
                     "per-batch sd of the difference (max over seeds)": max(sd), "eval_iters": e,
                     "sampling error of one eval": err, "row MDE": r.mde_nats, "MDE / error": r.mde_nats / err})
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("candidates", nargs="*", default=[""], help="key=value,key=value overrides of the cpu profile")
    ap.add_argument("--recipes", nargs="+", default=list(RECIPES), choices=list(RECIPES))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--no-train", action="store_true", help="only tabulate finished runs")
    ap.add_argument("--eval-noise", type=int, default=0, metavar="K", help="K disjoint eval blocks (see doc)")
    ap.add_argument("--eval-block", type=int, default=0, help="val batches per block (default: eval_iters)")
    ap.add_argument("--reeval", type=int, default=0, metavar="N",
                    help="table from the final checkpoints re-evaluated on val batches 0..N-1 (0: the runs' own eval)")
    ap.add_argument("--study-noise", metavar="DIR", help="only the evaluation's sampling error on the finished "
                    "study in DIR (outputs/studies/<name>: study.csv, claims.csv), on --reeval batches (default 64)")
    ap.add_argument("--csv", help="append the rows to this CSV")
    ap.add_argument("--md", help="write a markdown report (header, --notes, tables) to this file")
    ap.add_argument("--notes", help="markdown file put between the header and the tables (method, recommendation)")
    a = ap.parse_args(argv)
    global REEVAL
    REEVAL = a.reeval
    if a.study_noise:
        noise = study_eval_noise(Path(a.study_noise), a.reeval or 64)
        print(noise.to_string(index=False))
        if a.md:
            Path(a.md).write_text(header("evaluation sampling error of a study") + md_table(noise))
        return
    cands = [parse_candidate(c) for c in a.candidates]
    for c in cands:   # fail on a bad key before training anything
        for r in a.recipes:
            config(c, r, a.seeds[0])
    if not a.no_train:
        ensure(cands, a.recipes, a.seeds, a.workers)
    df = pd.DataFrame([summarize(c, list(RECIPES), a.seeds) for c in cands])   # every recipe with results
    print(df.T.to_string())
    noise = None
    if a.eval_noise:
        rows = [{"seed": s} | eval_noise(c, o, s, a.eval_noise, a.eval_block)
                | {"candidate": ",".join(f"{k}={v}" for k, v in c.items())}
                for c in cands for s in a.seeds for o in ("fp8_hybrid", "E4M3", "E2M1", "control")
                if result(config(c, o, s)) is not None and result(config(c, "hp", s)) is not None]
        noise = pd.DataFrame(rows)
        print(noise.T.to_string())
    if a.csv:
        df.to_csv(a.csv, mode="a", header=not Path(a.csv).exists(), index=False)
    if a.md:
        text = header("cpu profile search") + (Path(a.notes).read_text() + "\n" if a.notes else "")
        text += "## Candidates\n\n" + md_table(df.T.reset_index().rename(columns={"index": "measure"}))
        if noise is not None:
            text += "\n## Evaluation sampling error\n\n" + md_table(noise)
        Path(a.md).write_text(text)


if __name__ == "__main__":
    main()
