"""Benchmark: optimizer step time of the optim/ optimizers per storage mode vs torch.optim.AdamW(foreach=True).

Same parameters and gradients for every optimizer: the GPT of the cpu profile (params/03_fp8_baseline/cpu.yaml:
4 layers, C=128, vocab 4096, fp8_hybrid recipe) and a ~10x larger one (6 layers, C=384). Eager and compiled
(`optim.compile`: the per-tensor update is torch.compile'd; SR bits are drawn outside it). Prints the median
step time and the ratio to torch's AdamW(foreach=True) in eager mode (their steps interleaved, so machine load
hits both alike), and checks that changing the LR every step does not recompile (torch._dynamo counters; the LR
is held in a tensor).

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


def _set_grads(params, grads) -> None:
    for p, g in zip(params, grads):
        p.grad = g


def _timed_step(opt, params, grads, vary_lr: bool) -> float:
    _set_grads(params, grads)
    if vary_lr:
        for grp in opt.param_groups:
            grp["lr"] = grp["lr"] * 0.999                # a schedule: must not recompile
    t0 = time.perf_counter()
    opt.step()
    return time.perf_counter() - t0


def run(size: str, modes: list[str], steps: int) -> list[dict]:
    """Each case's steps are interleaved with torch AdamW steps, so a loaded machine slows both alike."""
    from torch._dynamo.utils import counters

    rows = []
    model = make_model(size)
    params = [p for p in model.parameters() if p.requires_grad]
    n = sum(p.numel() for p in params)
    gen = torch.Generator().manual_seed(1)
    grads = [torch.randn(p.shape, generator=gen) * 1e-3 for p in params]
    base_cfg = TrainConfig(n_layer=SIZES[size]["n_layer"], n_head=SIZES[size]["n_head"], n_embd=SIZES[size]["n_embd"],
                           block_size=128, recipe="fp8_hybrid", lr=2e-3, device="cpu")
    ref = torch.optim.AdamW(params, lr=2e-3, weight_decay=0.1, foreach=True)
    for _ in range(3):
        _timed_step(ref, params, grads, True)
    for mode in modes:
        for case, (name, optim) in CASES.items():
            if mode == "compiled" and case not in COMPILED:
                continue
            m = make_model(size)                        # fresh weights: grid storage projects them
            ps = [p for p in m.parameters() if p.requires_grad]
            cfg = base_cfg.replace(optimizer=name, optim={**optim, "compile": mode == "compiled"})
            opt = build_optimizer(m, cfg)
            if mode == "compiled":
                torch._dynamo.reset()
            for _ in range(3):                          # warm-up (compiles)
                _timed_step(opt, ps, grads, True)
            g0 = counters["stats"]["unique_graphs"]
            t_ref, t_case = [], []
            for _ in range(steps):                      # the LR changes every step
                t_ref.append(_timed_step(ref, params, grads, True))
                t_case.append(_timed_step(opt, ps, grads, True))
            rec = counters["stats"]["unique_graphs"] - g0 if mode == "compiled" else ""
            tr, tc = statistics.median(t_ref), statistics.median(t_case)
            rows.append({"size": size, "params": n, "case": case, "mode": mode, "ms": tc * 1e3,
                         "adamw_ms": tr * 1e3, "ratio": tc / tr, "new_graphs_on_lr_change": rec})
            print(f"  {size:4s} {case:26s} {mode:8s} {tc * 1e3:8.2f} ms  AdamW(foreach) {tr * 1e3:7.2f} ms  "
                  f"{tc / tr:5.2f}x" + (f"  new graphs while the LR changed: {rec}" if rec != "" else ""), flush=True)
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
