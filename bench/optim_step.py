"""Benchmark: optimizer step time of the optim/ optimizers per storage mode vs torch.optim.AdamW(foreach=True).

Same parameters and gradients for every optimizer: the GPT of the cpu profile (params/03_fp8_baseline/cpu.yaml:
4 layers, C=128, vocab 4096, fp8_hybrid recipe) and a ~10x larger one (6 layers, C=384). Eager and compiled
(`optim.compile`: the per-tensor update is torch.compile'd; SR bits are drawn outside it). Prints the median
step time and the ratio to torch's AdamW(foreach=True) in eager mode, and checks that changing the LR every
step does not recompile (torch._dynamo counters; the LR is held in a tensor).

    HF_HUB_OFFLINE=1 .venv/bin/python bench/optim_step.py                    # everything
    .venv/bin/python bench/optim_step.py --sizes cpu --modes eager --steps 10

Targets (issue 9): GridAdamW fp32 master <= 1.3x AdamW; grid-stored + SR <= 1.6x; no recompilation on LR change.
Not a test: numbers depend on the machine (and on its load).
"""
from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch

from altgrad_lib.model import GPT, GPTConfig
from altgrad_lib.optim.factory import build_optimizer
from altgrad_lib.surgery import get_policy, quantize_model
from altgrad_lib.train_config import TrainConfig

SIZES = {"cpu": dict(n_layer=4, n_head=4, n_embd=128), "10x": dict(n_layer=6, n_head=6, n_embd=384)}
CASES = {   # name -> (optimizer, optim)
    "adamw(ours) fp32": ("adamw", {"storage": "fp32"}),
    "stiffness_adamw fp32": ("stiffness_adamw", {}),
    "grid_adamw fp32": ("grid_adamw", {}),
    "grid_adamw grid_rne": ("grid_adamw", {"storage": "grid_rne"}),
    "grid_adamw grid_sr": ("grid_adamw", {"storage": "grid_sr"}),
    "grid_adamw kahan": ("grid_adamw", {"storage": "kahan"}),
    "grid_adamw grid_sr m8v8": ("grid_adamw", {"storage": "grid_sr", "state_m": "E4M3", "state_v": "E5M2"}),
    "madam grid_sr": ("madam", {"storage": "grid_sr"}),
}
COMPILED = ("adamw(ours) fp32", "grid_adamw fp32", "grid_adamw grid_sr")


def make_model(size: str) -> torch.nn.Module:
    torch.manual_seed(0)
    model = GPT(GPTConfig(block_size=128, vocab_size=4096, **SIZES[size], dropout=0.0, bias=False))
    quantize_model(model, get_policy("fp8_hybrid"), verbose=False)
    return model


def time_steps(opt, params, grads, steps: int, vary_lr: bool = True) -> list[float]:
    for p, g in zip(params, grads):
        p.grad = g
    out = []
    for i in range(steps):
        if vary_lr:
            for grp in opt.param_groups:
                grp["lr"] = grp["lr"] * 0.999            # a schedule: must not recompile
        t0 = time.perf_counter()
        opt.step()
        out.append(time.perf_counter() - t0)
    return out


def run(size: str, modes: list[str], steps: int) -> list[dict]:
    rows = []
    model = make_model(size)
    params = [p for p in model.parameters() if p.requires_grad]
    n = sum(p.numel() for p in params)
    gen = torch.Generator().manual_seed(1)
    grads = [torch.randn(p.shape, generator=gen) * 1e-3 for p in params]
    base_cfg = TrainConfig(n_layer=SIZES[size]["n_layer"], n_head=SIZES[size]["n_head"], n_embd=SIZES[size]["n_embd"],
                           block_size=128, recipe="fp8_hybrid", lr=2e-3, device="cpu")
    ref = torch.optim.AdamW(params, lr=2e-3, weight_decay=0.1, foreach=True)
    time_steps(ref, params, grads, 3)
    t_ref = statistics.median(time_steps(ref, params, grads, steps))
    rows.append({"size": size, "params": n, "case": "torch AdamW(foreach)", "mode": "eager", "ms": t_ref * 1e3,
                 "ratio": 1.0, "recompiles": ""})
    for mode in modes:
        for case, (name, optim) in CASES.items():
            if mode == "compiled" and case not in COMPILED:
                continue
            m = make_model(size)                        # fresh weights: grid storage projects them
            ps = [p for p in m.parameters() if p.requires_grad]
            cfg = base_cfg.replace(optimizer=name, optim={**optim, "compile": mode == "compiled"})
            opt = build_optimizer(m, cfg)
            torch._dynamo.reset() if mode == "compiled" else None
            from torch._dynamo.utils import counters
            time_steps(opt, ps, grads, 3)               # warm-up (compiles)
            g0 = counters["stats"]["unique_graphs"]
            ts = time_steps(opt, ps, grads, steps)      # LR changes every step
            rec = counters["stats"]["unique_graphs"] - g0 if mode == "compiled" else ""
            t = statistics.median(ts)
            rows.append({"size": size, "params": n, "case": case, "mode": mode, "ms": t * 1e3, "ratio": t / t_ref,
                         "recompiles": rec})
            print(f"  {size:4s} {case:26s} {mode:8s} {t * 1e3:8.2f} ms  {t / t_ref:5.2f}x AdamW(foreach)"
                  + (f"  new graphs while the LR changed: {rec}" if rec != "" else ""), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    ap.add_argument("--modes", nargs="+", default=["eager", "compiled"], choices=["eager", "compiled"])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0 = default)")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    print(f"torch {torch.__version__}, {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads")
    rows = []
    for size in a.sizes:
        rows += run(size, a.modes, a.steps)
    import pandas as pd
    df = pd.DataFrame(rows)
    with pd.option_context("display.width", 160):
        print(df.to_string(index=False, float_format=lambda v: f"{v:.2f}"))


if __name__ == "__main__":
    main()
