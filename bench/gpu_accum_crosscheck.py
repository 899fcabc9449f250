"""Cross-check the simulated GEMM accumulator (numerics/accumulate.py) against an FP8 tensor-core GEMM on CUDA.

On the same E4M3 operands (values on the E4M3 grid, scales 1, so the hardware multiplies exactly these values),
`torch._scaled_mm(a, b, out_dtype=float32, use_fast_accum=True / False)` is compared with the simulator's
settings: the plain FP32 matmul, the exact sum rounded once to float32, and the FP22-like accumulator (8 exponent,
13 mantissa bits; truncate and nearest; per_add and per_chunk with chunks 4..32; promotion to FP32 every 0 / 32 /
64 / 128 / 256 products), at several K. For each K and hardware mode it prints every setting's count of elements
that differ from the hardware and its max error relative to max |exact|, then which setting reproduces the
hardware bit for bit (0 mismatches), or the closest one.

    python bench/gpu_accum_crosscheck.py                     # K = 32 .. 8192, 64 x 64 outputs
    python bench/gpu_accum_crosscheck.py --ks 128 4096 --m 128 --n 128 --seed 1

Needs a CUDA GPU with FP8 tensor cores (sm_89 / sm_90: Ada, Hopper); without CUDA it exits with a one-line
message. The simulator runs on the CPU (its reference device), per_add up to K = 2048 (one loop step per product).
Run on an H100 (2026-11-27): bench/results/gpu_h100/accum_crosscheck.txt, read in bench/results/gpu_h100.md (no
setting is bit-exact; fast accumulation errs like FP22 without promotion up to K = 2048).
Expectation to test (not a result): use_fast_accum=True keeps the whole K in the FP22 accumulator (DeepSeek-V3
§3.3.2, SageAttention2 §4.3); use_fast_accum=False promotes partial sums to FP32 (cuBLAS's split accumulator),
so it should sit near fp32 or fp22 with promotion. cuBLAS may split K across thread blocks (split-K) or order
chunks differently; a setting that matches only at small K is a hint of that.
Not a test: results depend on the GPU, the driver and the cuBLAS version (printed).
"""
from __future__ import annotations

import argparse
import sys

import torch

from altgrad_lib.numerics.accumulate import AccumSpec, accumulate_matmul, accumulate_matmul_per_add_reference
from altgrad_lib.numerics.formats import get_format


def settings(k: int) -> dict[str, AccumSpec | str]:
    """Simulator settings to compare at reduction length k (per_add only up to 2048: a Python step per product)."""
    out: dict[str, AccumSpec | str] = {"fp32 (torch mm)": AccumSpec(), "exact -> fp32": "exact"}
    for rounding in ("truncate", "nearest"):
        r = "rz" if rounding == "truncate" else "rn"
        for n in (0, 32, 64, 128, 256):
            if n >= k:
                continue
            if k <= 2048:
                out[f"fp22 {r} per_add p{n}"] = AccumSpec("fp22", rounding=rounding, model="per_add", promote_every=n)
            for c in (4, 8, 16, 32):
                if n % c == 0:
                    out[f"fp22 {r} chunk{c} p{n}"] = AccumSpec("fp22", rounding=rounding, chunk=c, promote_every=n)
    return out


def simulate(a: torch.Tensor, b: torch.Tensor, spec: AccumSpec | str) -> torch.Tensor:
    if spec == "exact":
        return a.double().mm(b.double()).float()
    if spec.model == "per_add":
        return accumulate_matmul_per_add_reference(a, b, spec)
    return accumulate_matmul(a, b, spec)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ks", type=int, nargs="+", default=[32, 128, 512, 2048, 8192])
    ap.add_argument("--m", type=int, default=64)
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("gpu_accum_crosscheck: no CUDA GPU here; it compares torch._scaled_mm on an FP8 GPU (sm_89/sm_90) "
                 "with the simulated accumulator, so there is nothing to run")
    if any(v % 16 for v in [args.m, args.n, *args.ks]):
        sys.exit(f"gpu_accum_crosscheck: --m, --n and --ks must be multiples of 16 (torch._scaled_mm), got "
                 f"m={args.m} n={args.n} ks={args.ks}")
    dev = torch.device("cuda")
    print(f"{torch.cuda.get_device_name()} (sm_{''.join(map(str, torch.cuda.get_device_capability()))}), torch "
          f"{torch.__version__}, CUDA {torch.version.cuda}, cuBLAS {torch.backends.cuda.preferred_blas_library()}")
    e4m3 = get_format("E4M3")
    one = torch.ones((), device=dev)
    g = torch.Generator().manual_seed(args.seed)
    for k in args.ks:
        # E4M3-grid values, both signs, a few binades: the simulator's operands are exactly the hardware's
        a = e4m3.quantize(torch.randn(args.m, k, generator=g) * 8)
        b = e4m3.quantize(torch.randn(k, args.n, generator=g) * 8)
        a8 = a.to(dev).to(torch.float8_e4m3fn)
        b8 = b.t().contiguous().to(dev).to(torch.float8_e4m3fn).t()        # column-major, as _scaled_mm wants
        hw = {fast: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.float32,
                                     use_fast_accum=fast).cpu() for fast in (True, False)}
        exact = a.double().mm(b.double())
        denom = exact.abs().max().item() or 1.0
        rows = []
        for name, spec in settings(k).items():
            sim = simulate(a, b, spec)
            rows.append((name, {fast: (int((sim != h).sum()), (sim.double() - h.double()).abs().max().item() / denom)
                                for fast, h in hw.items()}))
        print(f"\nK = {k}  ({args.m} x {args.n} outputs; error relative to max |exact| = {denom:.4g})")
        print(f"  {'setting':28s} {'fast_accum=True':>26s} {'fast_accum=False':>26s}")
        for name, r in rows:
            print(f"  {name:28s} " + " ".join(f"{r[f][0]:7d} diff, max {r[f][1]:9.2e}" for f in (True, False)))
        for fast in (True, False):
            best = min(rows, key=lambda row: (row[1][fast][0], row[1][fast][1]))
            what = "bit for bit" if best[1][fast][0] == 0 else (f"closest: {best[1][fast][0]} elements differ, "
                                                               f"max error {best[1][fast][1]:.2e}")
            exact_hw = (hw[fast].double() - exact).abs().max().item() / denom
            print(f"  use_fast_accum={fast}: {best[0]} ({what}); hardware vs exact max error {exact_hw:.2e}")


if __name__ == "__main__":
    main()
