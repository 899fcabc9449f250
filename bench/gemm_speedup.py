"""Benchmark: FP8 GEMMs (torch._scaled_mm, E4M3 x E4M3, BF16 out) against BF16 torch.mm over GEMM shapes, on a GPU.

    python bench/gemm_speedup.py                                  # on a CUDA GPU: the default shapes
    python bench/gemm_speedup.py --shapes 4096x4096x4096 16384x512x2048 --iters 100
    python bench/gemm_speedup.py --allow-cpu --iters 3            # CPU: tests the pipeline only (tiny shapes)

Writes bench/results/gemm_speedup_<device-slug>.csv (tidy: one row per shape and variant: M, K, N, FLOP, ms,
TFLOP/s, speed-up vs BF16, relative error, device, torch version) and a markdown summary next to it with the command
and the device. altgrad_lib.notebook.plots_bench.speedup_vs_shape draws the CSV (notebook 06).

A shape MxKxN is Y (M, N) = A (M, K) · B (K, N), B column-major as _scaled_mm wants. Variants: BF16 torch.mm, and
_scaled_mm with tensor-wise scales (one float32 scale per operand) or row-wise scales (one per row of A and per
column of B), each with use_fast_accum off and on. Only the GEMM is timed: operands are cast to E4M3 and their
scales computed once before timing; the cast and amax costs of a training step are in bench/train_step.py's
end-to-end numbers. Before timing, each variant's output is compared with the FP32 product of the same (quantized)
operands: `rel_err` is the relative Frobenius error, so a variant that is fast because it computes something else
shows it.

Default shapes: squares 256..8192, and every GEMM of the h100 profile's model (--profile,
params/03_fp8_baseline/h100.yaml): with T = batch_size x block_size tokens, each block linear (in -> out) runs the
forward Y = X·Wᵀ (T x in x out), dX = dY·W (T x out x in) and dW = dYᵀ·X (out x T x in). lm_head is left out: it
stays high precision in fp8_hybrid.

Timing: CUDA events around each call, after --warmup calls; before each timed call a 256 MB buffer is zeroed so
the operands do not sit in L2 from the previous call (as triton.testing.do_bench does; --no-flush keeps them);
the variants are interleaved call by call so that clock and thermal drift hit all alike; the median of --iters.

Run on an H100 (2026-11-27, `--iters 30`: 17 s): bench/results/gemm_speedup_nvidia-h100-80gb-hbm3.md and
bench/results/gpu_h100.md.

Not a test: numbers depend on the GPU, its clocks and the torch / cuBLAS version. On CPU `_scaled_mm` is an
emulation (dequantize, FP32 GEMM; 750-930 ms for 1024x64x256 on Intel Sapphire Rapids), so a CPU "speed-up" says
nothing about tensor cores: the script refuses to run there unless --allow-cpu, and labels such results
"CPU emulation".
"""
from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from pathlib import Path

import pandas as pd
import torch
import yaml

from common import check_device
from report_md import cpu_model, header, md_table

from altgrad_lib.model import GPT, GPTConfig
from altgrad_lib.notebook.plots_bench import BF16, SQUARE   # the figure's names for the baseline and the squares

RESULTS = Path(__file__).resolve().parent / "results"
PROFILE = "params/03_fp8_baseline/h100.yaml"
SQUARES = (256, 512, 1024, 2048, 4096, 8192)
CPU_SHAPES = ((16, 32, 16), (32, 64, 48), (64, 64, 64))   # --allow-cpu's defaults: the pipeline, not a speed
CPU_MAX_MACS = 2 ** 24          # a larger shape under the CPU emulation takes seconds per call
E4M3_MAX = torch.finfo(torch.float8_e4m3fn).max   # 448
VARIANTS = (BF16, "E4M3 tensor-wise", "E4M3 tensor-wise, fast accum", "E4M3 row-wise", "E4M3 row-wise, fast accum")
CPU_REFUSAL = ("on CPU torch._scaled_mm is an emulation (dequantize, FP32 GEMM: 750-930 ms for 1024x64x256 on "
               "Intel Sapphire Rapids), so its speed-up says nothing about tensor cores; run on a CUDA GPU, or pass "
               "--allow-cpu to test the pipeline on tiny shapes")


def parse_shape(text: str) -> tuple[int, int, int]:
    """'MxKxN' -> (M, K, N); ValueError naming the bad value."""
    m = re.fullmatch(r"(\d+)x(\d+)x(\d+)", text.strip())
    if not m or 0 in (dims := tuple(int(g) for g in m.groups())):
        raise ValueError(f"shape {text!r}: expected MxKxN with positive integers, e.g. 4096x4096x4096")
    return dims


def model_shapes(profile: str) -> dict[tuple[int, int, int], str]:
    """(M, K, N) -> which GEMMs of the profile's model have that shape ("c_fc fwd, c_proj dX", ...): the forward,
    dX and dW of every linear of one transformer block (all blocks have the same), read off the model itself."""
    p = yaml.safe_load(open(profile))
    cfg = GPTConfig(n_layer=1, n_head=p["n_head"], n_embd=p["n_embd"], block_size=p["block_size"],
                    mlp=p.get("mlp", "gelu"))
    with torch.device("meta"):   # shapes only: no memory, no init cost
        block = GPT(cfg).transformer.h[0]
    t = p["batch_size"] * p["block_size"]
    out: dict[tuple[int, int, int], list[str]] = {}
    for name, lin in block.named_modules():
        if isinstance(lin, torch.nn.Linear):
            i, o = lin.in_features, lin.out_features
            for shape, gemm in (((t, i, o), "fwd"), ((t, o, i), "dX"), ((o, t, i), "dW")):
                out.setdefault(shape, []).append(f"{name} {gemm}")
    return {s: ", ".join(names) for s, names in out.items()}


def default_shapes(profile: str) -> dict[tuple[int, int, int], str]:
    shapes = {(d, d, d): SQUARE for d in SQUARES}
    for s, names in model_shapes(profile).items():
        shapes[s] = f"{Path(profile).stem} model: {names}"
    return shapes


def quantize(x: torch.Tensor, rowwise: bool, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x -> (E4M3 codes of x·s, 1/s as float32): s maps the amax of x (per slice along `dim` if rowwise, else of
    the whole tensor) to E4M3's max 448. _scaled_mm multiplies its result by the two inverse scales."""
    xf = x.float()
    amax = xf.abs().amax(dim=dim, keepdim=True) if rowwise else xf.abs().amax()
    s = E4M3_MAX / amax.clamp(min=1e-12)
    return (xf * s).to(torch.float8_e4m3fn), (1.0 / s).float()


def make_calls(m: int, k: int, n: int, device: str) -> dict[str, tuple]:
    """variant -> (call, reference): the GEMM to time and the FP32 product of its own operands."""
    g = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(m, k, device=device, generator=g).to(torch.bfloat16)
    b = torch.randn(n, k, device=device, generator=g).to(torch.bfloat16).t()   # (K, N), column-major
    calls = {BF16: (lambda: torch.mm(a, b), lambda: a.float() @ b.float())}
    for rowwise, kind in ((False, "tensor-wise"), (True, "row-wise")):
        a8, ia = quantize(a, rowwise, dim=1)   # scale per row of A: (M, 1)
        b8, ib = quantize(b, rowwise, dim=0)   # per column of B: (1, N)
        b8 = b8.t().contiguous().t()           # column-major, whatever layout the cast kept

        def ref(a8=a8, b8=b8, ia=ia, ib=ib):
            return (a8.float() * ia) @ (b8.float() * ib)

        for fast in (False, True):
            def call(a8=a8, b8=b8, ia=ia, ib=ib, fast=fast):
                return torch._scaled_mm(a8, b8, scale_a=ia, scale_b=ib, out_dtype=torch.bfloat16,
                                        use_fast_accum=fast)
            calls[f"E4M3 {kind}" + (", fast accum" if fast else "")] = (call, ref)
    return calls


def time_calls(calls: dict, device: str, warmup: int, iters: int, flush: bool) -> dict[str, float]:
    """variant -> median ms of `iters` calls, interleaved call by call across the variants."""
    cuda = device.startswith("cuda")
    cache = torch.empty(256 * 2 ** 20 // 4, dtype=torch.int32, device=device) if cuda and flush else None
    for call in calls.values():
        for _ in range(warmup):
            call()
    times: dict[str, list[float]] = {v: [] for v in calls}
    for _ in range(iters):
        for v, call in calls.items():
            if cache is not None:
                cache.zero_()
            if cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                call()
                end.record()
                end.synchronize()
                times[v].append(start.elapsed_time(end))
            else:
                t = time.perf_counter()
                call()
                times[v].append(1e3 * (time.perf_counter() - t))
    return {v: statistics.median(ts) for v, ts in times.items()}


def rel_err(call, ref) -> float:
    y, r = call().float(), ref()
    return float(torch.linalg.norm(y - r) / torch.linalg.norm(r))


def device_slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def run(shapes: dict, device: str, warmup: int, iters: int, flush: bool) -> pd.DataFrame:
    cuda = device.startswith("cuda")
    name = torch.cuda.get_device_name(device) if cuda else f"CPU emulation: {cpu_model()}"
    rows = []
    for (m, k, n), group in shapes.items():
        calls = make_calls(m, k, n, device)
        err, ok = {}, {}
        for v, (call, ref) in calls.items():
            try:   # a variant this GPU / torch lacks (row-wise scales before sm90, ...) is reported, not hidden
                err[v] = rel_err(call, ref)
                ok[v] = calls[v][0]
            except Exception as e:   # whatever this torch raises: the other variants still run
                err[v] = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:200]}"
        ms = time_calls(ok, device, warmup, iters, flush)
        flop = 2 * m * k * n
        for v in calls:
            failed = v not in ms
            rows.append(dict(M=m, K=k, N=n, shape=f"{m}x{k}x{n}", group=group, flop=flop, variant=v,
                             ms=float("nan") if failed else ms[v],
                             tflops=float("nan") if failed else flop / ms[v] / 1e9,
                             speedup=float("nan") if failed or BF16 not in ms else ms[BF16] / ms[v],
                             rel_err=float("nan") if failed else err[v], error=err[v] if failed else "",
                             device=name, device_type="cuda" if cuda else "cpu", emulated=not cuda,
                             torch=torch.__version__, warmup=warmup, iters=iters, l2_flush=flush and cuda))
        print(f"{m}x{k}x{n:<8} " + "  ".join(f"{r['variant']}: {r['speedup']:.2f}x" if r["ms"] == r["ms"] else
                                              f"{r['variant']}: FAILED" for r in rows[-len(calls) + 1:]), flush=True)
    return pd.DataFrame(rows)


def summary_md(frame: pd.DataFrame, argv: list[str]) -> str:
    dev = frame.device.iloc[0]
    lines = [header("bench/gemm_speedup.py: torch._scaled_mm E4M3 vs BF16 torch.mm", argv).rstrip("\n"),
             f"- device: **{dev}**", ""]
    if frame.emulated.iloc[0]:
        lines += ["**CPU emulation of _scaled_mm: these ratios test the pipeline and say nothing about FP8 tensor "
                  "cores.**", ""]
    lines += [f"Median of {frame.iters.iloc[0]} calls after {frame.warmup.iloc[0]} warm-up calls, variants "
              f"interleaved; L2 flushed before each call: {bool(frame.l2_flush.iloc[0])}. Only the GEMM is timed "
              "(operands cast to E4M3 beforehand). Speed-up = BF16 ms / variant ms.", "",
              "## Speed-up over BF16 torch.mm (x)", ""]
    wide = frame.pivot_table(index=["shape", "group"], columns="variant", values="speedup", sort=False)
    lines += [md_table(wide[[v for v in VARIANTS if v in wide and v != BF16]].reset_index()), "## TFLOP/s", ""]
    wide = frame.pivot_table(index=["shape", "group"], columns="variant", values="tflops", sort=False)
    lines += [md_table(wide[[v for v in VARIANTS if v in wide]].reset_index())]
    failed = frame[frame.error != ""]
    if len(failed):
        lines += ["## Failed variants", "", md_table(failed[["shape", "variant", "error"]])]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", nargs="+", default=None, help="MxKxN ... (default: squares 256..8192 and the "
                    "--profile model's GEMMs; with --allow-cpu on CPU: tiny shapes)")
    ap.add_argument("--profile", default=PROFILE, help="yaml whose n_embd / n_head / block_size / batch_size give "
                    "the model's GEMM shapes")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="cuda | cuda:<i> | cpu")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--no-flush", action="store_true", help="keep operands in L2 between calls")
    ap.add_argument("--allow-cpu", action="store_true", help="run _scaled_mm's CPU emulation on tiny shapes, "
                    "labelled as such (tests the pipeline only)")
    ap.add_argument("--out-dir", default=str(RESULTS))
    args = ap.parse_args(argv)
    check_device(ap, args.device)
    cpu = not args.device.startswith("cuda")
    if cpu and not args.allow_cpu:
        ap.exit(2, f"gemm_speedup.py: {CPU_REFUSAL}\n")
    for flag in ("warmup", "iters"):
        if getattr(args, flag) < 1:
            ap.error(f"--{flag} {getattr(args, flag)}: must be >= 1")
    try:   # every shape checked before any is timed
        shapes = ({parse_shape(s): "given" for s in args.shapes} if args.shapes
                  else {s: "tiny (CPU pipeline test)" for s in CPU_SHAPES} if cpu else default_shapes(args.profile))
    except (ValueError, OSError, KeyError) as e:
        ap.error(str(e))
    for m, k, n in shapes:
        if cpu and m * k * n > CPU_MAX_MACS:
            ap.error(f"shape {m}x{k}x{n}: over {CPU_MAX_MACS} multiply-adds; --allow-cpu is for testing the "
                     "pipeline on tiny shapes")
        if not cpu and (k % 16 or n % 16):
            ap.error(f"shape {m}x{k}x{n}: _scaled_mm on CUDA needs K and N divisible by 16")

    frame = run(shapes, args.device, args.warmup, args.iters, not args.no_flush)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    slug = "cpu-emulation" if cpu else device_slug(frame.device.iloc[0])
    csv, md = out / f"gemm_speedup_{slug}.csv", out / f"gemm_speedup_{slug}.md"
    frame.to_csv(csv, index=False)
    md.write_text(summary_md(frame, ["bench/gemm_speedup.py", *argv]))
    print(f"wrote {csv} and {md}")


if __name__ == "__main__":
    main()
