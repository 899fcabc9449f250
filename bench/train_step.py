"""Benchmark: tokens/s of one training step (forward + backward + AdamW) for the CPU-profile GPT.

Compares FP32 with the simulated fp8_hybrid recipe and the real-dtype FP8 peers, eager and compiled, in one
process, and prints each mode's overhead against FP32 in the same mode (eager vs eager, compiled vs compiled).

    HF_HUB_OFFLINE=1 .venv/bin/python bench/train_step.py               # all modes
    HF_HUB_OFFLINE=1 .venv/bin/python bench/train_step.py --modes fp32:eager sim:compiled --steps 20

Not a test: numbers depend on the machine. On CPU the torchao and scaled_mm paths are emulations of FP8 GEMMs.
"""
from __future__ import annotations

import argparse
import platform
import time

import torch

from altgrad_lib.model import GPT, GPTConfig
from altgrad_lib.surgery import get_policy, quantize_model

# (recipe, backend) per mode name
MODES = {
    "fp32": ("bf16", "sim"),          # "bf16" recipe = nothing quantized; the model runs in fp32
    "sim": ("fp8_hybrid", "sim"),
    "torchao": ("fp8_hybrid", "torchao"),
    "scaled_mm": ("fp8_hybrid", "scaled_mm"),
}
DEFAULT = ["fp32:eager", "fp32:compiled", "sim:eager", "sim:compiled", "torchao:eager", "torchao:compiled",
           "scaled_mm:eager", "scaled_mm:compiled"]


def make_step(mode: str, compiled: bool, cfg: GPTConfig):
    recipe, backend = MODES[mode]
    torch.manual_seed(0)
    model = GPT(cfg)
    quantize_model(model, get_policy(recipe, backend=backend), verbose=False)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    fwd = torch.compile(model) if compiled else model

    def step(x, y):
        _, loss = fwd(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    return step


def bench(mode_key: str, cfg: GPTConfig, batch: int, warmup: int, steps: int) -> dict:
    mode, how = mode_key.split(":")
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, cfg.vocab_size, (batch, cfg.block_size), generator=g)
    y = torch.randint(0, cfg.vocab_size, (batch, cfg.block_size), generator=g)
    t0 = time.perf_counter()
    step = make_step(mode, how == "compiled", cfg)
    for _ in range(warmup):                       # includes compilation for compiled modes
        step(x, y)
    t_warm = time.perf_counter() - t0
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        step(x, y)
        times.append(time.perf_counter() - t)
    times.sort()
    med = times[len(times) // 2]
    return {"mode": mode, "how": how, "ms/step": 1e3 * med, "tok/s": batch * cfg.block_size / med,
            "warmup_s": t_warm}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modes", nargs="+", default=DEFAULT, help=f"<{'|'.join(MODES)}>:<eager|compiled>")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch._dynamo.config.recompile_limit = 64     # one graph per quantizer config is fine; don't fall back to eager
    torch._dynamo.config.cache_size_limit = 64
    cfg = GPTConfig(n_layer=4, n_head=4, n_embd=128, block_size=128, vocab_size=4097)
    print(f"torch {torch.__version__} | {platform.processor() or platform.machine()} | threads {args.threads} | "
          f"{cfg.short_str()} | batch {args.batch} | median of {args.steps} steps after {args.warmup} warmup")
    rows = []
    for key in args.modes:
        try:
            r = bench(key, cfg, args.batch, args.warmup, args.steps)
        except Exception as e:  # a failing mode should not hide the others
            print(f"{key:20s} FAILED: {type(e).__name__}: {str(e).splitlines()[0][:150]}")
            continue
        rows.append(r)
        base = next((b for b in rows if b["mode"] == "fp32" and b["how"] == r["how"]), None)
        ratio = f"{base['tok/s'] / r['tok/s']:.2f}x" if base else "n/a"
        print(f"{key:20s} {r['tok/s']:9.0f} tok/s  {r['ms/step']:8.1f} ms/step  overhead vs fp32:{r['how']} "
              f"{ratio:>6s}  (warmup {r['warmup_s']:.0f}s)", flush=True)


if __name__ == "__main__":
    main()
