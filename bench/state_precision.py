"""Benchmark: 8-bit Adam states against FP32 states on notebook 05's cpu profile, paired by seed.

Every variant trains the profile's model (params/05_manifold_optimizer/cpu.yaml: 2 layers x 64, context 64,
300 steps, corpus licenses, gpt2-4k, E4M3 weights fake-quantized in the forward, FP32 master weights) with
altgrad_lib.training.loop, once per seed; runs of one seed share init and batches, so each variant is compared with the
FP32-state run of the same seed: d = val_loss(variant) - val_loss(fp32 states), mean d with a paired Student-t
95 % CI (stats.mean_ci of the differences) and mean d in % of the FP32-state loss.  Peers: torchao.optim's
AdamW8bit, AdamWFp8 and AdamW4bit with the param groups of train.py's torch AdamW (decay on matrices).

    .venv/bin/python bench/state_precision.py --out /tmp/sp --jobs 2            # the table (~40 runs)
    .venv/bin/python bench/state_precision.py --out /tmp/sp --variants today "sr" --seeds 0
    .venv/bin/python bench/state_precision.py --diagnose today --out /tmp/sp      # why (seed 0, one run)

--diagnose VARIANT trains seed 0 of VARIANT while shadow FP32 moments are fed the same (clipped) gradients and
prints, per tensor with low-precision states and averaged over step ranges: the one-shot relative quantization
error ||Q(x) - x|| / ||x|| of the exact m and v, the accumulated error of the stored state, the fraction of
nonzero entries stored as 0 (underflow), the fraction of nonzero entries whose stored value this step left
unchanged ("frozen": the update was rounded away), the median stored v / exact v, and the step error
||u_lowp - u_fp32|| / ||u_fp32|| of Adam's direction u = m̂ / (sqrt(v̂) + eps) (weight decay is the same in
both, so this is |Δw_lowp - Δw_fp32| / |Δw_fp32| without it); "step_err1" is the same for Q(exact states),
i.e. the error of one rounding without its accumulation.  Finished runs are reused (train's resume).
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import yaml

PROFILE = "params/05_manifold_optimizer/cpu.yaml"
TC_KEYS = ("corpus", "tokenizer", "n_layer", "n_head", "n_embd", "block_size", "batch_size", "max_steps", "lr",
           "min_lr", "warmup_steps", "precision", "device", "eval_interval", "eval_iters")
M8V8 = {"storage": "fp32", "state_m": "E4M3", "state_v": "E5M2"}
VARIANTS = {   # name -> optim dict for our AdamW, or "torchao:<class>"
    "fp32": {"storage": "fp32"},
    "today": M8V8,                                                           # m E4M3 / v E5M2, block 256, RNE
    "sr": {**M8V8, "state_rounding": "stochastic"},
    "block32": {**M8V8, "state_block": 32},
    "swap": {**M8V8, "state_m": "E5M2", "state_v": "E4M3"},
    "v_sqrt": {**M8V8, "state_v_transform": "sqrt"},
    "v_sqrt_e4m3": {**M8V8, "state_v": "E4M3", "state_v_transform": "sqrt"},
    "v_ue5m3": {**M8V8, "state_v": "UE5M3"},
    "coat": {**M8V8, "state_v": "E4M3", "state_m_transform": "expand", "state_v_transform": "expand"},
    "sr_v_sqrt_e4m3": {**M8V8, "state_v": "E4M3", "state_v_transform": "sqrt", "state_rounding": "stochastic"},
    "sr_coat": {**M8V8, "state_v": "E4M3", "state_m_transform": "expand", "state_v_transform": "expand",
                "state_rounding": "stochastic"},
    "amax_scale": {**M8V8, "state_scale": "amax"},
    "torchao AdamW8bit": "torchao:AdamW8bit",
    "torchao AdamWFp8": "torchao:AdamWFp8",
    "torchao AdamW4bit": "torchao:AdamW4bit",
}


def config(variant: str, seed: int, out: str):
    from altgrad_lib.training.config import TrainConfig

    prof = yaml.safe_load(open(PROFILE))
    spec = VARIANTS[variant]
    peer = isinstance(spec, str)
    name = variant.replace(" ", "_")
    return TrainConfig(**{k: prof[k] for k in TC_KEYS}, seed=seed, recipe="fmt:E4M3", optimizer="adamw",
                       optim={} if peer else spec, out_dir=out, run_name=f"{name}-s{seed}", ckpt_interval=0)


def _peer_optimizer(cls_name: str, **kwargs):
    """train._make_optimizer's torch AdamW groups, with torchao's class instead (kwargs: its own options)."""
    import torch
    import torchao.optim

    base = getattr(torchao.optim, cls_name)

    class cls(base):
        """torchao keeps each group's lr in a tensor (no recompiles); train.py assigns floats: fill it."""

        def step(self, closure=None):
            for g, t in zip(self.param_groups, self._lr_tensors):
                if not torch.is_tensor(g["lr"]):
                    t.fill_(g["lr"])
                    g["lr"] = t
            return super().step(closure)

        def state_dict(self):
            """For train.py's checkpoint checksum (it reads raw bytes, which torchao's state subclasses refuse):
            the states dequantized to fp32.  The runs here never resume from it."""
            sd = super().state_dict()
            sd["state"] = {i: {k: v.dequantize() if hasattr(v, "dequantize") and type(v) is not torch.Tensor else v
                               for k, v in st.items()} for i, st in sd["state"].items()}
            return sd

    def make(model, cfg, device):
        from altgrad_lib.optim.factory import adamw_param_groups

        opt = cls(adamw_param_groups(model, cfg.weight_decay), lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), **kwargs)
        opt._lr_tensors = [g["lr"] for g in opt.param_groups]          # tensors since torchao's __init__
        return opt
    return make


def run_one(variant: str, seed: int, out: str) -> tuple[str, int, float]:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch
    torch.set_num_threads(1)
    from altgrad_lib.training import loop as T

    spec, own = VARIANTS[variant], T._make_optimizer
    if isinstance(spec, str):
        T._make_optimizer = _peer_optimizer(spec.split(":", 1)[1])   # this run only (restored below)
    try:
        run = T.train(config(variant, seed, out), verbose=False, progress=False)
    finally:
        T._make_optimizer = own
    return variant, seed, float(run.final_val_loss if run.final_val_loss is not None else math.nan)


def table(results: dict[tuple[str, int], float], variants: list[str], seeds: list[int]):
    import pandas as pd
    from altgrad_lib.studies.stats import mean_ci

    rows = []
    for v in variants:
        row = {"variant": v, "optim": str(VARIANTS[v])}
        d = []
        for s in seeds:
            row[f"val s{s}"] = results[(v, s)]
            d.append(results[(v, s)] - results[("fp32", s)])
        mean, hw = mean_ci(d)
        base = sum(results[("fp32", s)] for s in seeds) / len(seeds)
        row.update({"mean Δ (nats)": mean, "95% CI lo": mean - hw, "95% CI hi": mean + hw,
                    "mean Δ %": 100 * mean / base})
        rows.append(row)
    df = pd.DataFrame(rows)
    num = [c for c in df.columns if c not in ("variant", "optim")]
    df[num] = df[num].map(lambda x: f"{x:+.4f}" if x == x else "–")   # report_md's 3 digits hide 0.01 nats
    df[[c for c in num if c.startswith("val")]] = df[[c for c in num if c.startswith("val")]].map(lambda x: x[1:])
    return df


def diagnose(variant: str, out: str, seed: int = 0) -> None:
    import pandas as pd
    import torch
    from altgrad_lib.training import loop as T
    from altgrad_lib.optim.adamw import AdamW, _state_format

    torch.set_num_threads(1)
    shadow, recs = {}, []
    orig = AdamW._direction

    def rel(a, b):
        return float((a - b).norm() / b.norm().clamp_min(1e-30))

    def direction(self, w, g, st, group):
        if "m_codes" not in st and "v_codes" not in st:
            return orig(self, w, g, st, group)
        b1, b2 = group["betas"]
        sh = shadow.setdefault(id(st), {"m": torch.zeros_like(w), "v": torch.zeros_like(w)})
        sh["m"].lerp_(g, 1 - b1)
        sh["v"].mul_(b2).addcmul_(g, g, value=1 - b2)
        before = {k: _state_format(group[f"state_{k}"]).decode(st[f"{k}_codes"], st[f"{k}_scale"], w)
                  for k in ("m", "v") if f"{k}_codes" in st}
        u = orig(self, w, g, st, group)
        t = float(st["step"])
        bc1, bc2 = 1 - b1**t, math.sqrt(1 - b2**t)

        def dirn(m, v):
            return (m / bc1) / (v.sqrt() / bc2 + group["eps"])
        rec, one = {"step": int(t)}, {}
        for k in ("m", "v"):
            x = sh[k]
            one[k] = x
            if f"{k}_codes" in st:
                sf = _state_format(group[f"state_{k}"])
                stored = sf.decode(st[f"{k}_codes"], st[f"{k}_scale"], w)
                one[k] = sf.decode(*sf.encode(x), w)
                nz = x != 0
                rec.update({f"{k}_q1": rel(one[k], x), f"{k}_acc": rel(stored, x),
                            f"{k}_uf1": float(((one[k] == 0) & nz).sum() / nz.sum().clamp_min(1)),
                            f"{k}_uf": float(((stored == 0) & nz).sum() / nz.sum().clamp_min(1))})
                rec[f"{k}_frozen"] = float(((stored == before[k]) & nz).sum() / nz.sum().clamp_min(1))
                if k == "v":
                    rec["v_stored/exact_med"] = float((stored[nz] / x[nz]).median())
        ref = dirn(sh["m"], sh["v"])
        rec.update({"step_err": rel(u, ref), "step_err1": rel(dirn(one["m"], one["v"]), ref)})
        recs.append(rec)
        return u

    AdamW._direction = direction
    cfg = config(variant, seed, out).replace(run_name=f"diagnose-{variant}-s{seed}")
    run = T.train(cfg, resume=False, verbose=False, progress=False)
    df = pd.DataFrame(recs)
    df["steps"] = pd.cut(df["step"], [0, 10, 50, 150, 300])
    cols = [c for c in df.columns if c not in ("step", "steps")]
    print(f"{variant} seed {seed}: final val loss {run.final_val_loss:.4f}; {VARIANTS[variant]}")
    from report_md import md_table
    out = df.groupby("steps", observed=True)[cols].mean().reset_index()
    out["steps"] = out["steps"].astype(str)
    print(md_table(out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.environ.get("ALTGRAD_OUTPUTS", "outputs"), "state_precision"))
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--jobs", type=int, default=1, help="runs in parallel (one thread each)")
    ap.add_argument("--diagnose", choices=list(VARIANTS), help="instrument one seed-0 run of this variant")
    ap.add_argument("--md", help="also write the table (with the command) to this markdown file")
    a = ap.parse_args()
    if a.diagnose:
        return diagnose(a.diagnose, a.out)
    variants = ["fp32", *[v for v in a.variants if v != "fp32"]]
    jobs = [(v, s) for v in variants for s in a.seeds]
    with ProcessPoolExecutor(a.jobs) as ex:
        results = {(v, s): x for v, s, x in ex.map(run_one, *zip(*jobs), [a.out] * len(jobs))}
    df = table(results, variants, a.seeds)
    from report_md import header, md_table
    text = header("8-bit Adam states vs FP32 states (notebook 05 cpu profile, paired by seed)") + "\n" + md_table(df)
    print(text)
    if a.md:
        Path(a.md).write_text(text)


if __name__ == "__main__":
    main()
