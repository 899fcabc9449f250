"""Benchmark: one E4M3 GEMM on CPU, the hardware backends' default path against torch._scaled_mm's two CPU routes.

    python bench/cpu_fp8_gemm.py                                 # issue 24's shape, 1024x64 @ 64x256, one thread
    python bench/cpu_fp8_gemm.py --shapes 1024x64x256 1024x256x64 --iters 20 --threads 2

Rows, for Y (M, N) = A (M, K) · B (K, N), operands cast to E4M3 with per-tensor scales once before timing:
- `fp32 matmul`: torch.matmul of the fp32 operands (the step's baseline);
- `dequant + fp32 GEMM`: hw_fp8._fp8_gemm with the default `ALTGRAD_CPU_FP8_GEMM=dequant`, what the torchao and
  scaled_mm backends compute on CPU;
- `torch._scaled_mm`: the opt-in path (`ALTGRAD_CPU_FP8_GEMM=scaled_mm`), as torch routes it on this CPU: oneDNN
  where the CPU has AMX (Intel Sapphire Rapids and later), else torch's own emulation;
- `torch._scaled_mm, oneDNN off`: torch's emulation (`torch.backends.mkldnn.enabled = False`), which the default
  path reproduces bit for bit (tests/test_quantize_hw_fp8.py).

Each row also says how far its product is from the default path's (max |diff| / max |Y|; 0 = bit-identical).
Timing: gemm_speedup.time_calls (rows interleaved call by call, --warmup calls each first, median of --iters); a row
whose first call took over 0.1 s (oneDNN's 1 s calls) is timed apart, over at most 5 calls. Prints the CPU
(`lscpu`'s model name) and its AMX / AVX-512 FP16 flags, which decide torch's route. Not a test: the numbers depend
on the CPU.
"""
from __future__ import annotations

import argparse
import contextlib
import re
import time
from pathlib import Path

import torch

from gemm_speedup import parse_shape, time_calls
from report_md import cpu_model

from altgrad_lib.quantize.hw_fp8 import _fp8_gemm, _to_fp8, set_cpu_fp8_gemm

DEFAULT = "dequant + fp32 GEMM (default)"
SLOW_S = 0.1          # a first call slower than this: the row is timed over at most SLOW_CALLS calls
SLOW_CALLS = 5


def cpu_flags() -> str:
    """The flags that decide torch's _scaled_mm route on CPU, as /proc/cpuinfo lists them."""
    try:
        found = re.search(r"^flags\s*:(.*)$", Path("/proc/cpuinfo").read_text(), re.M)
    except OSError:
        found = None
    flags = found.group(1).split() if found else []
    return " ".join(sorted(f for f in flags if f.startswith("amx") or f in ("avx512f", "avx512_fp16"))) or "none"


@contextlib.contextmanager
def _scaled_mm_route(onednn: bool):
    """hw_fp8's opt-in torch._scaled_mm path, with torch's oneDNN route on or off."""
    was = torch.backends.mkldnn.enabled
    set_cpu_fp8_gemm("scaled_mm")
    torch.backends.mkldnn.enabled = onednn
    try:
        yield
    finally:
        set_cpu_fp8_gemm(None)
        torch.backends.mkldnn.enabled = was


def time_shape(m: int, k: int, n: int, iters: int, warmup: int) -> list[tuple[str, float, float]]:
    """(row, median ms, max |diff| / max |Y| against the default path) for one shape."""
    g = torch.Generator().manual_seed(0)
    a_hp, b_hp = torch.randn(m, k, generator=g), torch.randn(n, k, generator=g)
    a, a_inv = _to_fp8(a_hp, torch.float8_e4m3fn)
    b, b_inv = _to_fp8(b_hp, torch.float8_e4m3fn)

    def scaled_mm(onednn: bool):
        with _scaled_mm_route(onednn):
            return _fp8_gemm(a, b.t(), a_inv, b_inv, torch.float32)

    calls = {"fp32 matmul": lambda: torch.matmul(a_hp, b_hp.t()),
             DEFAULT: lambda: _fp8_gemm(a, b.t(), a_inv, b_inv, torch.float32),
             "torch._scaled_mm": lambda: scaled_mm(True),
             "torch._scaled_mm, oneDNN off": lambda: scaled_mm(False)}
    ref = calls[DEFAULT]()
    diffs, slow = {}, set()
    for name, call in calls.items():   # each row's first call: its distance, and whether it is slow
        t = time.perf_counter()
        diffs[name] = float((call() - ref).abs().max() / ref.abs().max())
        if time.perf_counter() - t > SLOW_S:
            slow.add(name)
    ms = time_calls({v: c for v, c in calls.items() if v not in slow}, "cpu", warmup, iters, False)
    ms |= time_calls({v: calls[v] for v in slow}, "cpu", 0, min(iters, SLOW_CALLS), False)
    return [(name, ms[name], diffs[name]) for name in calls]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", nargs="+", default=["1024x64x256"], metavar="MxKxN")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    try:   # every shape checked before any is timed
        shapes = [parse_shape(s) for s in args.shapes]
    except ValueError as e:
        ap.error(str(e))
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__} | CPU {cpu_model()} | flags {cpu_flags()} | "
          f"ATen CPU capability {torch.backends.cpu.get_cpu_capability()} | threads {args.threads}")
    for m, k, n in shapes:
        print(f"\n{m}x{k} @ {k}x{n} (E4M3 x E4M3, fp32 out), median of up to {args.iters} calls")
        print(f"{'':32s} {'ms':>9s} {'x fp32':>8s}  max |diff| / max |Y| vs default")
        result = time_shape(m, k, n, args.iters, args.warmup)
        base = result[0][1]
        for name, ms, diff in result:
            shown = "-" if name == "fp32 matmul" else f"{diff:.1e}"
            print(f"{name:32s} {ms:9.3f} {ms / base:7.1f}x  {shown}")

if __name__ == "__main__":
    main()
