"""Benchmark: optimizer step time of the optim/ optimizers per storage mode vs torch.optim.AdamW(foreach=True).

Same parameters and gradients for every optimizer: the GPT of the cpu profile (params/03_fp8_baseline/cpu.yaml:
4 layers, C=128, vocab 4096, fp8_hybrid recipe) and a ~10x larger one (6 layers, C=384). The reference
AdamW is the same for every case (its parameters; the same gradients). Eager and compiled
(`optim.compile`: one static-shape graph per param group over its tensors, SR bits hashed inside it; eager:
one update per 2^18-element chunk of the group's flat buffers). Prints
the median step time and the ratio to torch's AdamW(foreach=True) in eager mode (every case's step right after
a reference step, round robin over all cases, so machine load hits all alike), checks that changing the LR
every step does not recompile (torch._dynamo error_on_recompile + graph counters; the LR is held in a tensor),
and prints every case's optimizer-state bytes per parameter (all state tensors: moments, Kahan buffers, step
counters, grid scales; state_bytes in optim/lowp_state.py) next to torch AdamW's, and the low-precision-state
variant vs fp32 states.  Every storage mode (STORAGE) runs with our AdamW, eager and compiled.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/optim_step.py                    # everything
    .venv/bin/python bench/optim_step.py --sizes cpu --modes eager --steps 10
    .venv/bin/python bench/optim_step.py --threads 1 --steps 20     # on a shared, loaded machine
    .venv/bin/python bench/optim_step.py --threads 1 --clock cpu    # thread CPU time: load-insensitive
    .venv/bin/python bench/optim_step.py --sizes cpu --cases kahan error_feedback   # only the cases named so

ratio = median over the timed steps of (case step time / the AdamW step taken just before it).
Targets: every grid storage mode compiled <= 1.3x AdamW, error feedback included (the optimizer issue's goal);
no recompilation on LR change.  Results: bench/results/optim_step.md.
Not a test: numbers depend on the machine (and on its load).
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import torch

from altgrad_lib.choices import STORAGE_MODES as STORAGE
from altgrad_lib.model import GPT, GPTConfig
from altgrad_lib.optim.factory import build_optimizer
from altgrad_lib.optim.lowp_state import state_bytes
from altgrad_lib.quantize.recipes import get_policy
from altgrad_lib.quantize.convert import quantize_model
from altgrad_lib.training.config import TrainConfig

SIZES = {"cpu": dict(n_layer=4, n_head=4, n_embd=128), "10x": dict(n_layer=6, n_head=6, n_embd=384)}
CASES = {   # name -> (optimizer, optim): every storage mode with our plain AdamW, then the other optimizers
    **{f"adamw(ours) {m}": ("adamw", {"storage": m}) for m in STORAGE},
    "stiffness_adamw fp32": ("stiffness_adamw", {}),
    "grid_adamw fp32": ("grid_adamw", {}),
    "grid_adamw grid_sr": ("grid_adamw", {"storage": "grid_sr"}),
    "grid_adamw error_feedback": ("grid_adamw", {"storage": "error_feedback"}),
    "adamw(ours) grid_sr bf16": ("adamw", {"storage": "grid_sr", "weight_fmt": "bf16"}),
    "grid_adamw grid_sr m8v8": ("grid_adamw", {"storage": "grid_sr", "state_m": "E4M3", "state_v": "E5M2"}),
    "madam grid_sr": ("madam", {"storage": "grid_sr"}),
}
# the step timer: wall (perf_counter) or this thread's CPU time (thread_time: with --threads 1 every op of a step runs
# on this thread, so time spent waiting for a core on a loaded machine is not counted)
CLOCK = [time.perf_counter]
COMPILED = (*(f"adamw(ours) {m}" for m in STORAGE), "grid_adamw fp32", "grid_adamw grid_sr",
            "grid_adamw error_feedback")


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
    t0 = CLOCK[0]()
    opt.step()
    return CLOCK[0]() - t0


def _state_memory(model_fn, base_cfg) -> dict[str, float]:
    """Optimizer-state bytes per parameter (every state tensor: codes, block scales, step counters, grid scales)
    of GridAdamW grid_sr with m E4M3 / v E5M2 (block 256, tensors < 4096 elements in fp32) vs fp32 states."""
    out = {}
    for tag, optim in (("fp32", {}), ("lowp", {"state_m": "E4M3", "state_v": "E5M2", "state_block": 256,
                                               "state_min_numel": 4096})):
        cfg = base_cfg.replace(optimizer="grid_adamw", optim={"storage": "grid_sr", **optim})
        opt = build_optimizer(model_fn(), cfg.optim_config)
        out[tag] = state_bytes(opt)["bytes_per_param"]
    return out


def run(size: str, modes: list[str], steps: int, only: list[str] | None = None) -> list[dict]:
    """All cases step in turn, each right after a torch AdamW step (round robin over the cases, `steps` rounds),
    so load drift on a shared machine hits every case and the reference alike."""
    from torch._dynamo.utils import counters

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
    cases = []                                          # (case, mode, optimizer, its params)
    for mode in modes:
        for case, (name, optim) in CASES.items():
            if (mode == "compiled" and case not in COMPILED) or (only and not any(o in case for o in only)):
                continue
            m = make_model(size)                        # fresh weights: grid storage projects them
            ps = [p for p in m.parameters() if p.requires_grad]
            cfg = base_cfg.replace(optimizer=name, optim={**optim, "compile": mode == "compiled"})
            opt = build_optimizer(m, cfg.optim_config)
            g0 = counters["stats"]["unique_graphs"]
            t0 = time.perf_counter()
            for _ in range(2):                          # warm-up (compiles: a graph per param group + the step consts)
                _timed_step(opt, ps, grads, True)
            cases.append({"case": case, "mode": mode, "opt": opt, "ps": ps, "t": [], "t_ref": [],
                          "bpp": state_bytes(opt)["bytes_per_param"],
                          "graphs": counters["stats"]["unique_graphs"] - g0, "warm_s": time.perf_counter() - t0})
    g1 = counters["stats"]["unique_graphs"]
    # the LR changes at every step below: a recompilation raises (error_on_recompile) instead of going unnoticed
    with torch._dynamo.config.patch(error_on_recompile=True):
        for _ in range(steps):
            for c in cases:
                c["t_ref"].append(_timed_step(ref, params, grads, True))
                c["t"].append(_timed_step(c["opt"], c["ps"], grads, True))
    new_graphs = counters["stats"]["unique_graphs"] - g1
    rows = []
    for c in cases:
        tr, tc = statistics.median(c["t_ref"]), statistics.median(c["t"])
        ratio = statistics.median(a / b for a, b in zip(c["t"], c["t_ref"]))   # paired: robust to load drift
        rows.append({"size": size, "params": n, "case": c["case"], "mode": c["mode"], "ms": tc * 1e3,
                     "adamw_ms": tr * 1e3, "ratio": ratio, "state_B_per_param": c["bpp"],
                     "graphs": c["graphs"] if c["mode"] == "compiled" else ""})
        print(f"  {size:4s} {c['case']:28s} {c['mode']:8s} {tc * 1e3:8.2f} ms  AdamW(foreach) {tr * 1e3:7.2f} ms  "
              f"{ratio:5.2f}x  state {c['bpp']:.2f} B/param" + (f"  graphs {c['graphs']} (warm-up {c['warm_s']:.0f} s)"
                                    if c["mode"] == "compiled" else ""), flush=True)
    print(f"  {size}: new graphs while the LR changed every step: {new_graphs} (error_on_recompile was on)")
    print(f"  {size}: torch AdamW(foreach) state {state_bytes(ref)['bytes_per_param']:.2f} B/param")
    mem = _state_memory(lambda: make_model(size), base_cfg)
    print(f"  {size}: optimizer state {mem['lowp']:.3f} B/param (m E4M3, v E5M2, block 256, < 4096 in fp32) vs "
          f"{mem['fp32']:.3f} B/param fp32 states: {100 * mem['lowp'] / mem['fp32']:.1f} % (target <= 27 %)")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    ap.add_argument("--modes", nargs="+", default=["eager", "compiled"], choices=["eager", "compiled"])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--cases", nargs="+", default=None, help="only the cases whose name contains one of these")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0 = default)")
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                    help="wall: perf_counter; cpu: the thread's CPU time (with --threads 1, on a loaded machine)")
    a = ap.parse_args()
    if a.clock == "cpu":
        if a.threads != 1:
            ap.error(f"--clock cpu needs --threads 1 (got --threads {a.threads}): other threads' time is not counted")
        CLOCK[0] = time.thread_time
    if a.threads:
        torch.set_num_threads(a.threads)
    # one graph per (optimizer, param group); the default limit of 8 would silently fall back to eager
    torch._dynamo.config.recompile_limit = 256
    print(f"load average before: {os.getloadavg()}")
    print(f"torch {torch.__version__}, {platform.processor() or platform.machine()}, {torch.get_num_threads()} "
          f"threads, clock {a.clock}")
    rows = []
    for size in a.sizes:
        rows += run(size, a.modes, a.steps, a.cases)
    import pandas as pd
    df = pd.DataFrame(rows)
    with pd.option_context("display.width", 160):
        print(df.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
