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
Timing: the rows interleaved call by call after --warmup calls each, median of --iters; a row whose first call
took over 0.1 s is timed over at most 5 calls (oneDNN's 1 s calls). Prints the CPU (`lscpu`'s model name) and its
AMX / AVX-512 FP16 flags, which decide torch's route. Not a test: the numbers depend on the CPU.
"""
from __future__ import annotations

import argparse
import contextlib
import re
import statistics
import sys
import time
from pathlib import Path

import torch

from report_md import cpu_model

from altgrad_lib.quantize.hw_fp8 import _fp8_gemm, _to_fp8, set_cpu_fp8_gemm


def cpu_flags() -> str:
    """The flags that decide torch's _scaled_mm route on CPU, as /proc/cpuinfo lists them ("none" elsewhere)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "unknown"
    flags = set(re.search(r"^flags\s*:(.*)$", text, re.M).group(1).split()) if "flags" in text else set()
    return " ".join(sorted(f for f in flags if f.startswith("amx") or f in ("avx512f", "avx512_fp16"))) or "none"


@contextlib.contextmanager
def _mode(gemm: str, onednn: bool = True):
    was = torch.backends.mkldnn.enabled
    set_cpu_fp8_gemm(gemm)
    torch.backends.mkldnn.enabled = onednn
    try:
        yield
    finally:
        set_cpu_fp8_gemm(None)
        torch.backends.mkldnn.enabled = was


def shape_arg(text: str) -> tuple[int, int, int]:
    try:
        m, k, n = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"shape {text!r}: expected MxKxN, e.g. 1024x64x256") from None
    return m, k, n


def time_shape(m: int, k: int, n: int, iters: int, warmup: int) -> list[tuple[str, float, float]]:
    """(row, median ms, max |diff| / max |Y| against the default path) for one shape."""
    g = torch.Generator().manual_seed(0)
    a_hp, b_hp = torch.randn(m, k, generator=g), torch.randn(n, k, generator=g)
    a, a_inv = _to_fp8(a_hp, torch.float8_e4m3fn)
    b, b_inv = _to_fp8(b_hp, torch.float8_e4m3fn)
    rows = {"fp32 matmul": lambda: torch.matmul(a_hp, b_hp.t()),
            "dequant + fp32 GEMM (default)": lambda: _fp8_gemm(a, b.t(), a_inv, b_inv, torch.float32)}
    for name, onednn in (("torch._scaled_mm", True), ("torch._scaled_mm, oneDNN off", False)):
        def call(onednn=onednn):
            with _mode("scaled_mm", onednn):
                return _fp8_gemm(a, b.t(), a_inv, b_inv, torch.float32)
        rows[name] = call
    ref = rows["dequant + fp32 GEMM (default)"]()
    times: dict[str, list[float]] = {}
    calls = {}
    for name, fn in rows.items():
        t0 = time.perf_counter()
        out = fn()
        first = time.perf_counter() - t0
        calls[name] = min(iters, 5) if first > 0.1 else iters
        times[name] = []
        for _ in range(warmup - 1 if first <= 0.1 else 0):
            fn()
        rows[name] = (fn, float((out - ref).abs().max() / ref.abs().max()))
    for i in range(iters):
        for name, (fn, _) in rows.items():
            if i < calls[name]:
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
    return [(name, 1e3 * statistics.median(times[name]), diff) for name, (_, diff) in rows.items()]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", nargs="+", type=shape_arg, default=[(1024, 64, 256)], metavar="MxKxN")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__} | CPU {cpu_model()} | flags {cpu_flags()} | "
          f"ATen CPU capability {torch.backends.cpu.get_cpu_capability()} | threads {args.threads}")
    for m, k, n in args.shapes:
        print(f"\n{m}x{k} @ {k}x{n} (E4M3 x E4M3, fp32 out), median of up to {args.iters} calls")
        print(f"{'':32s} {'ms':>9s} {'x fp32':>8s}  max |diff| / max |Y| vs default")
        result = time_shape(m, k, n, args.iters, args.warmup)
        base = result[0][1]
        for name, ms, diff in result:
            shown = "-" if name == "fp32 matmul" else f"{diff:.1e}"
            print(f"{name:32s} {ms:9.3f} {ms / base:7.1f}x  {shown}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
