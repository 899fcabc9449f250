"""Benchmark: throughput (Melem/s) of FloatFormat.quantize vs torch's native float8 cast, torchao's
custom_fp_utils ExMy round trip, ml_dtypes casts and the allocate-and-write floor `x * 2.0`.

Usage:  .venv/bin/python bench/quantize.py [--n-log2 24] [--reps 5] [--formats E4M3,E5M2,...] [--tcmalloc]
--tcmalloc re-executes itself under LD_PRELOAD=libtcmalloc_minimal.so.4: with glibc every new tensor
>= 32 MiB page-faults, which makes eager multi-op code look 2-4x slower than it is on a warm allocator.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from altgrad_lib.formats import get_format  # noqa: E402

TCMALLOC = "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4"
MLD = {"E4M3": "float8_e4m3fn", "E5M2": "float8_e5m2", "E3M4": "float8_e3m4"}


def timeit(fn, x, reps: int) -> float:
    """Median wall time (s) of fn(x) after two warm-up calls."""
    fn(x)
    fn(x)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn(x)
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n-log2", type=int, default=24)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--formats", default="E4M3,E5M2,E3M4,E1M6,E7M0")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--tcmalloc", action="store_true", help="re-run under LD_PRELOAD of tcmalloc")
    args = ap.parse_args()
    if args.tcmalloc and TCMALLOC not in os.environ.get("LD_PRELOAD", ""):
        if not os.path.exists(TCMALLOC):
            sys.exit(f"{TCMALLOC} missing: apt-get install -y libtcmalloc-minimal4")
        os.environ["LD_PRELOAD"] = TCMALLOC
        os.execv(sys.executable, [sys.executable, *sys.argv])

    torch._dynamo.config.recompile_limit = 256   # one lambda code object is compiled once per format
    torch._dynamo.config.cache_size_limit = 256
    n = 2**args.n_log2
    x = torch.randn(n, generator=torch.Generator().manual_seed(0)) * 4.0
    comp = not args.no_compile
    rows: list[tuple[str, str, float, float | None]] = []

    def run(label: str, kind: str, fn) -> None:
        te = timeit(fn, x, args.reps)
        tc = timeit(torch.compile(fn, dynamic=False), x, args.reps) if comp else None
        rows.append((label, kind, n / te / 1e6, n / tc / 1e6 if tc else None))
        c = f"{rows[-1][3]:8.0f}" if tc else "       -"
        print(f"{label:28s} {kind:10s} eager {rows[-1][2]:8.0f}  compiled {c}  Melem/s", flush=True)

    run("x * 2.0 (floor)", "floor", lambda t: t * 2.0)
    run("torch e4m3fn cast", "native", lambda t: t.to(torch.float8_e4m3fn).float())
    run("torch e5m2 cast", "native", lambda t: t.to(torch.float8_e5m2).float())
    try:
        from torchao.prototype.custom_fp_utils import _f32_to_floatx_unpacked, _floatx_unpacked_to_f32
    except Exception:  # pragma: no cover
        _f32_to_floatx_unpacked = None
    for name in args.formats.split(","):
        fmt = get_format(name)
        run(f"altgrad {fmt.short_str()} RNE", "ours", lambda t, f=fmt: f.quantize(t))
        run(f"altgrad {fmt.short_str()} SR", "ours_sr", lambda t, f=fmt: f.quantize(t, rounding="stochastic"))
        if _f32_to_floatx_unpacked is not None and fmt.ebits >= 1 and fmt.mbits >= 0:
            e, m = fmt.ebits, fmt.mbits
            try:
                run(f"torchao e{e}m{m} (no NaN, max differs)", "torchao",
                    lambda t, e=e, m=m: _floatx_unpacked_to_f32(_f32_to_floatx_unpacked(t, e, m), e, m))
            except Exception as exc:  # some ExMy are outside torchao's supported range
                print(f"torchao e{e}m{m}: n/a ({type(exc).__name__}: {exc})")
        if name in MLD:
            import ml_dtypes

            dt = getattr(ml_dtypes, MLD[name])
            xn = x.numpy()
            te = timeit(lambda _: np.asarray(xn, dtype=dt).astype(np.float32), None, args.reps)
            rows.append((f"ml_dtypes {MLD[name]}", "ml_dtypes", n / te / 1e6, None))
            print(f"{rows[-1][0]:28s} ml_dtypes  eager {rows[-1][2]:8.0f}", flush=True)

    ref = {r[1]: r for r in rows}
    nat = next(r for r in rows if r[0] == "torch e4m3fn cast")
    print(f"\nthreads={torch.get_num_threads()} n=2^{args.n_log2} LD_PRELOAD={os.environ.get('LD_PRELOAD', '-')}")
    print("ratios: ours / native e4m3fn cast (eager, compiled); ours / torchao same ExMy (eager, compiled)")
    last_ao = None
    for i, r in enumerate(rows):
        if r[1] == "torchao":
            last_ao = r
    for i, r in enumerate(rows):
        if r[1] not in ("ours", "ours_sr"):
            continue
        ao = next((q for q in rows[i:i + 3] if q[1] == "torchao"), None)
        s = f"{r[0]:28s} vs native {r[2] / nat[2]:5.2f}x"
        if r[3] and nat[3]:
            s += f" / {r[3] / nat[3]:5.2f}x"
        if ao:
            s += f"   vs torchao {r[2] / ao[2]:5.2f}x"
            if r[3] and ao[3]:
                s += f" / {r[3] / ao[3]:5.2f}x"
        print(s)
    del ref, last_ao


if __name__ == "__main__":
    main()
