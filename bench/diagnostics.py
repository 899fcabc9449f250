"""Benchmark: overhead of the training monitors (altgrad_lib/monitors) on step time.

Each mode trains its own copy of the same model on the same batches with the loop train() runs (pre-step
snapshot, forward, backward, monitors, clipping, AdamW), monitors on or off. Modes run interleaved in
blocks of `--block` steps (a multiple of every interval, so every block holds the same number of diagnostic
steps) so that load drift on a shared machine hits all modes alike; the overhead is amortized over all blocks,
printed two ways: "vs off" = total time with monitors / total time without (sensitive to load changes between
blocks), and "in-step" = time inside the Diagnostics calls / the rest of the same steps (robust to that drift).

    HF_HUB_OFFLINE=1 .venv/bin/python bench/diagnostics.py                       # CPU-profile model
    python bench/diagnostics.py --device cuda --compile --n-layer 6 --n-embd 512 --block-size 256 --batch 32

Targets: cheap ≤ 10 % at interval 1, ≤ 2 % at interval ≥ 10; the default (full, interval 100)
≤ 5 % amortized. Not a test: numbers depend on the machine and its load.
"""
from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time

import torch

from common import add_model_args, check_device

from altgrad_lib.state import snapshot_state
from altgrad_lib.model import GPT, GPTConfig
from altgrad_lib.monitors.config import DiagnosticsConfig
from altgrad_lib.monitors.diagnostics import Diagnostics
from altgrad_lib.quantize.convert import quantize_model

MODES = {"off": "off", "cheap@1": {"preset": "cheap", "interval": 1},
         "cheap@10": {"preset": "cheap", "interval": 10}, "full@default": "full"}


class Stepper:
    """One mode: its own model, optimizer and Diagnostics; calling it runs one training step."""

    def __init__(self, diag_value, cfg: GPTConfig, recipe: str, device: str, compiled: bool, out: str) -> None:
        torch.manual_seed(0)
        self.model = GPT(cfg)
        quantize_model(self.model, recipe, verbose=False)
        self.model.to(device)
        self.device = device
        self.diag = Diagnostics(DiagnosticsConfig.from_value(diag_value), out, self.model, compiled=compiled,
                                grad_clip=1.0)
        self.diag.start(0, None)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3, weight_decay=0.1,
                                     fused=device.startswith("cuda") or None)
        self.fwd = torch.compile(self.model) if compiled else self.model
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.n = 0
        self.t_diag = 0.0        # seconds inside the two Diagnostics calls (timed blocks only)
        self.timing = False

    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.n += 1
        snap = snapshot_state(self.model)
        self.opt.zero_grad(set_to_none=True)
        _, loss = self.fwd(x, y)
        loss.backward()
        self._sync()
        t = time.perf_counter()
        self.diag.after_backward(self.n, x, y, snap)
        dt = time.perf_counter() - t
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.params, 1.0))
        loss_v = float(loss.item())
        self.opt.step()
        self._sync()
        t = time.perf_counter()
        self.diag.after_step(self.n, loss_v, grad_norm, 1e-3)
        self._sync()                     # the monitors' queued work is theirs
        if self.timing:
            self.t_diag += dt + time.perf_counter() - t


    def _sync(self) -> None:
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--block", type=int, default=100, help="steps per mode per round (multiple of every interval)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--recipe", default="fp8_hybrid")
    add_model_args(ap, batch=8)
    ap.add_argument("--compile", action="store_true")
    args = ap.parse_args()
    check_device(ap, args.device)
    torch.set_num_threads(args.threads)
    cfg = GPTConfig(n_layer=args.n_layer, n_head=args.n_head, n_embd=args.n_embd, block_size=args.block_size,
                    vocab_size=args.vocab)
    where = torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else \
        (platform.processor() or platform.machine())
    print(f"torch {torch.__version__} | {where} | threads {args.threads} | {cfg.short_str()} | {args.recipe} | "
          f"batch {args.batch} | {'compiled' if args.compile else 'eager'} | {args.rounds} rounds x {args.block} "
          f"steps per mode, interleaved | load average {os.getloadavg()[0]:.2f} (shared machines: note it)")
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randint(0, cfg.vocab_size, (args.batch, cfg.block_size), generator=g).to(args.device),
                torch.randint(0, cfg.vocab_size, (args.batch, cfg.block_size), generator=g).to(args.device))
               for _ in range(8)]
    steps: dict[str, Stepper] = {}
    totals: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for key in args.modes:
            out = f"{tmp}/{key.replace('@', '_')}"
            os.makedirs(out)
            steps[key] = Stepper(MODES[key], cfg, args.recipe, args.device, args.compile, out)
            # warm-up (and compile) outside the timed blocks; any `block` consecutive steps after it hold
            # block / interval diagnostic steps, since block is a multiple of every interval
            while steps[key].n < max(args.warmup, 1):
                steps[key](*batches[steps[key].n % len(batches)])
            totals[key] = 0.0
            print(f"{key:14s} ready ({steps[key].diag.short_str()})", flush=True)
        for r in range(args.rounds):
            print(f"round {r + 1}/{args.rounds}", flush=True)
            for key, step in steps.items():
                step.timing = True
                t = time.perf_counter()
                for i in range(args.block):
                    step(*batches[(step.n + i) % len(batches)])
                totals[key] += time.perf_counter() - t
    base = totals.get("off")
    n = args.rounds * args.block
    print(f"\nload average at the end {os.getloadavg()[0]:.2f}")
    # two ratios: "vs off" compares totals of different modes (hit by load drift between blocks on a shared
    # machine); "in-step" = time inside the monitors / the rest of the same steps (robust to drift)
    print(f"{'mode':14s} {'ms/step':>9s} {'vs off':>9s} {'monitor ms':>11s} {'in-step':>9s}   "
          f"(amortized over {n} steps; target)")
    targets = {"cheap@1": "<= 10 %", "cheap@10": "<= 2 %", "full@default": "<= 5 %"}
    for key, tot in totals.items():
        ov = f"{100 * (tot / base - 1):+8.1f}%" if base else "      n/a"
        td = steps[key].t_diag
        print(f"{key:14s} {1e3 * tot / n:9.2f} {ov} {1e3 * td / n:11.2f} {100 * td / (tot - td):+8.1f}%   "
              f"{targets.get(key, '')}")


if __name__ == "__main__":
    main()
