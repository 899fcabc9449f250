"""Benchmark: the block recipes' (nvfp4, mxfp4, mxfp8) eager training step and their compiled quantize kernels,
in CPU time (time.process_time: on a machine shared with other jobs, wall time also counts the time slices they
take; CPU time of one thread does not, though their cache use still shows).

    HF_HUB_OFFLINE=1 .venv/bin/python bench/block_step.py                      # steps: fp32 nvfp4 mxfp4 mxfp8
    HF_HUB_OFFLINE=1 .venv/bin/python bench/block_step.py --kernels            # + per-call kernel times
    HF_HUB_OFFLINE=1 .venv/bin/python bench/block_step.py --without stored     # a lever of block_scaling.py off

Steps: train_step.build's (the cpu profile's model: 2 layers x 64, context 64, vocab 257, batch 16, one thread),
modes interleaved round by round, median over the rounds. --without switches off a lever of the block kernels
(numerics/block_scaling.py) to measure what it saves: "stored" (per-block scales computed in their own loop,
_stored), "along" (blocks along a non-last dim quantized in place instead of on x.movedim(axis, -1)), "bits" (SR
bits by torch.randint instead of numerics/mt_bits.py), "transpose" (the column-wise RHT copies transposed by ATen's
copy instead of kernels.transposed), "tiles" (a 2-d weight's 16 x 16 tiles along dim 0 by their own kernel on the
moved tensor instead of the kernel of its tiles along dim 1, block_scaling.same_tiles_axis). Same numerics either
way (tests/test_block_kernel_layout.py, tests/test_numerics_mt_bits.py, tests/test_numerics_kernels.py). Results:
bench/results/block_step.md. Not a test.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from train_step import build

from altgrad_lib.model import GPTConfig
from altgrad_lib.numerics import block_scaling, kernels, mt_bits, quantizer
from altgrad_lib.quantize import gemm_quant
from altgrad_lib.numerics.kernels import set_qdq_kernel
from altgrad_lib.numerics.quantizer import Quantizer

KERNEL_SPECS = {   # the recipes' operand configurations
    "nvfp4 1x16": {"fmt": "E2M1", "scaling": {"kind": "nvfp4"}},
    "nvfp4 16x16": {"fmt": "E2M1", "scaling": {"kind": "nvfp4", "tile_2d": True}},
    "nvfp4 1x16 SR": {"fmt": "E2M1", "scaling": {"kind": "nvfp4"}, "rounding": "stochastic"},
    "mxfp4": {"fmt": "E2M1", "scaling": {"kind": "mx"}},
    "mxfp4 SR": {"fmt": "E2M1", "scaling": {"kind": "mx"}, "rounding": "stochastic"},
    "mxfp8": {"fmt": "E4M3", "scaling": {"kind": "mx"}},
}
SHAPES = [((1024, 256), -1), ((256, 1024), -1), ((1024, 64), -1), ((1024, 64), 0), ((192, 64), 0)]


def without(levers: set[str]) -> None:
    """Switch levers off (before any kernel is built: kernels bind block_qdq when they are made)."""
    if "stored" in levers:
        block_scaling._stored = lambda t: t
    if "bits" in levers:
        mt_bits._lib = False
    if "transpose" in levers:
        gemm_quant.transposed = lambda t: t.t().contiguous()
    if "tiles" in levers:
        block_scaling.same_tiles_axis = quantizer.same_tiles_axis = lambda x, cfg, rounding, axis: axis
    if "along" in levers:
        inner = block_scaling.block_qdq

        def moved(x, fmt, cfg, rounding="nearest", draw_bits=None, sr_bits=None, want_stats=False, axis=-1):
            if x.dim() > 1 and axis % x.dim() != x.dim() - 1:
                y, n_sat, n_under = inner(x.movedim(axis, -1), fmt, cfg, rounding, draw_bits, sr_bits, want_stats)
                return y.movedim(-1, axis), n_sat, n_under
            return inner(x, fmt, cfg, rounding, draw_bits, sr_bits, want_stats, axis)

        kernels.block_qdq = quantizer.block_qdq = moved


def cpu_per_call(fn, reps: int = 10, tries: int = 7) -> float:
    best = float("inf")
    for _ in range(tries):
        t0 = time.process_time()
        for _ in range(reps):
            fn()
        best = min(best, (time.process_time() - t0) / reps)
    return best


def kernel_table() -> None:
    set_qdq_kernel("compiled")
    print("\nper call, us of CPU (best of 7 x 10; compiled kernel via Quantizer.quantize, counters on)")
    print("| configuration | " + " | ".join(f"{s[0]}x{s[1]} axis {a}" for s, a in SHAPES) + " |")
    print("|---|" + "---:|" * len(SHAPES))
    g = torch.Generator().manual_seed(0)
    for name, spec in KERNEL_SPECS.items():
        q = Quantizer(spec, seed=1)
        row = []
        for shape, axis in SHAPES:
            x = torch.randn(*shape, generator=g)
            for _ in range(3):
                q.quantize(x, axis=axis)
            row.append(f"{cpu_per_call(lambda: q.quantize(x, axis=axis)) * 1e6:.0f}")
        print(f"| {name} | " + " | ".join(row) + " |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--modes", nargs="+", default=["fp32:eager", "nvfp4:eager", "mxfp4:eager", "mxfp8:eager"])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--without", nargs="*", default=[], choices=("stored", "along", "bits", "transpose", "tiles"))
    ap.add_argument("--kernels", action="store_true", help="also time each kernel configuration per call")
    args = ap.parse_args()
    torch.set_num_threads(1)
    without(set(args.without))
    cfg = GPTConfig(n_layer=2, n_head=2, n_embd=64, block_size=64, vocab_size=257)
    steps = {m: build(m, cfg, 16, 3, "cpu", "fp32", "compiled")[0] for m in args.modes}
    cpu: dict[str, list[float]] = {m: [] for m in args.modes}
    for _ in range(args.rounds):
        for m, step in steps.items():
            t0 = time.process_time()
            step()
            cpu[m].append(time.process_time() - t0)
    print(f"torch {torch.__version__} | one thread | levers off: {args.without or 'none'} | "
          f"median of {args.rounds} interleaved rounds")
    print("| mode | CPU ms/step (median) | min | vs " + args.modes[0] + " |\n|---|---:|---:|---:|")
    ref = statistics.median(cpu[args.modes[0]])
    for m in args.modes:
        med = statistics.median(cpu[m])
        print(f"| {m} | {med * 1e3:.1f} | {min(cpu[m]) * 1e3:.1f} | {med / ref:.2f}x |")
    if args.kernels:
        kernel_table()


if __name__ == "__main__":
    main()
