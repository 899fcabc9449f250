"""Benchmark: what torch.compile costs for a recipe with a simulated accumulator (`gemm: {accum: ...}`).

The accumulator loop (numerics/accumulate.py) runs K/32 elementwise steps per GEMM (per_add: K); torch.compile
unrolls it into the graph (accumulate.loop_steps counts them; a compiling run prints the count), and inductor takes
0.6-1.1 s per unrolled step on a 2-core CPU (1.3-2.6 s before each step's sum was stored: accumulate.py). This
times, on the cpu profile's model and batch (2 x 64, context 64, vocab 257, 16 sequences), one eager step, the first
compiled step (compile included) and a second compiled step, for FP22 in every GEMM (`fp22`, 320 steps) or FP22
promoted to FP32 every 128 products (`p128`, 76 steps). `gemm` compiles accumulate_matmul alone (three accumulators
and shapes; compiled output checked bit-equal to eager). The README's accumulator section and
bench/results/accum_compile.md quote it.

    ALTGRAD_QDQ_KERNEL=eager TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) .venv/bin/python bench/accum_compile_cost.py fp22

Use an empty inductor cache (as above): a warm one hides the compile. `--backend aot_eager` traces without
inductor (seconds: checks the script, not the cost). Not a test: numbers depend on the machine.
"""
from __future__ import annotations

import argparse
import time

import torch

from common import add_model_args, check_device
from report_md import cpu_model

from altgrad_lib.model import GPT, GPTConfig
from altgrad_lib.numerics.accumulate import AccumSpec, accumulate_matmul
from altgrad_lib.quantize.convert import quantize_model
from altgrad_lib.quantize.recipes import get_policy

ACCUM = {"fp22": "fp22", "p128": {"fmt": "fp22", "promote_every": 128}, "gemm": None}
# `gemm` (on the CPU): (label, accumulator, (M, K, N)); 4, 8 and 4 unrolled steps (accumulate.loop_steps)
GEMMS = [("fp22 chunk 32, promoted every 128", AccumSpec("fp22", chunk=32, promote_every=128), (1024, 256, 256)),
         ("bf16 chunk 8", AccumSpec("bf16", chunk=8), (1024, 64, 256)),
         ("fp22 per_add, promoted every 4", AccumSpec("fp22", model="per_add", promote_every=4), (256, 16, 64))]


def _median_s(fn, n: int) -> float:
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return sorted(ts)[n // 2]


def gemm_only(backend: str) -> None:
    """accumulate_matmul alone, compiled whole (fullgraph, static shapes): first call (compile included), then the
    median of compiled and of eager calls."""
    for label, spec, (m, k, n) in GEMMS:
        g = torch.Generator().manual_seed(0)
        a, b = torch.randn(m, k, generator=g), torch.randn(k, n, generator=g)
        ref = accumulate_matmul(a, b, spec)
        torch._dynamo.reset()
        fn = torch.compile(lambda a, b: accumulate_matmul(a, b, spec), backend=backend, fullgraph=True,
                           dynamic=False)
        t = time.perf_counter()
        out = fn(a, b)
        first = time.perf_counter() - t
        assert torch.equal(out, ref), f"{label}: compiled differs from eager"
        compiled_ms = _median_s(lambda: fn(a, b), 15) * 1e3
        eager_ms = _median_s(lambda: accumulate_matmul(a, b, spec), 5) * 1e3
        print(f"{label} ({m}x{k} by {k}x{n}): first compiled call {first:.1f} s, then {compiled_ms:.2f} ms; "
              f"eager {eager_ms:.2f} ms", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("accum", choices=sorted(ACCUM),
                    help="fp22: FP22 in every GEMM; p128: promoted every 128; gemm: accumulate_matmul alone, CPU")
    ap.add_argument("--backend", default="inductor", choices=("inductor", "aot_eager"))
    add_model_args(ap, batch=16)
    ap.set_defaults(threads=1, n_layer=2, n_head=2, n_embd=64, block_size=64, vocab=257)   # the cpu profile's
    args = ap.parse_args()
    check_device(ap, args.device)
    torch.set_num_threads(args.threads)
    if args.accum == "gemm":
        print(f"torch {torch.__version__} | {cpu_model()} | threads {args.threads} | backend {args.backend}",
              flush=True)
        gemm_only(args.backend)
        return
    recipe = {"name": f"acc-{args.accum}", "recipe": "fp8_hybrid", "layers": {"*": {
        "input": "E4M3", "weight": "E4M3", "grad_output": "E5M2", "gemm": {"accum": ACCUM[args.accum]}}}}
    torch.manual_seed(0)
    cfg = GPTConfig(n_layer=args.n_layer, n_head=args.n_head, n_embd=args.n_embd, block_size=args.block_size,
                    vocab_size=args.vocab)
    model = GPT(cfg)
    quantize_model(model, get_policy(recipe, backend="sim", seed=3), verbose=False)
    model.to(args.device)
    g = torch.Generator().manual_seed(0)
    x, y = (torch.randint(0, args.vocab, (args.batch, args.block_size), generator=g).to(args.device)
            for _ in range(2))
    print(f"torch {torch.__version__} | {cpu_model()} | {cfg.short_str()} | batch {args.batch} | "
          f"threads {args.threads} | accum {args.accum} | backend {args.backend}", flush=True)

    def step(fn) -> float:
        t = time.perf_counter()
        _, loss = fn(x, y)
        loss.backward()
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        return time.perf_counter() - t

    print(f"eager step {step(model):.2f} s", flush=True)
    compiled = torch.compile(model, backend=args.backend)
    print(f"compiled first step (compile included) {step(compiled):.1f} s", flush=True)
    print(f"compiled second step {step(compiled):.2f} s", flush=True)


if __name__ == "__main__":
    main()
