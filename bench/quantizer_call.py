"""Benchmark: the time of one steady-state call of an eager Quantizer (its compiled kernel and everything around it).

Each case is a Quantizer called as a training step calls it (forward with autograd, quantize() for dY, eval), on
a (rows, cols) fp32 tensor, after enough calls that its kernel is compiled and called directly. Cases run in
interleaved rounds; per case, the minimum and the lower quartile over rounds of the mean thread CPU time of a call
(thread time: a shared machine's other load inflates it less than wall time).

    HF_HUB_OFFLINE=1 .venv/bin/python bench/quantizer_call.py
    HF_HUB_OFFLINE=1 .venv/bin/python bench/quantizer_call.py --rows 1024 --cols 256 --rounds 20

Not a test: numbers depend on the machine.
"""
from __future__ import annotations

import argparse
import time

import torch

from altgrad_lib.numerics.kernels import set_qdq_kernel
from altgrad_lib.numerics.quantizer import Quantizer
from altgrad_lib.quantize.recipes import get_policy

from report_md import cpu_model


def cases(x: torch.Tensor) -> dict:
    """name -> (quantizer, call): fp8_hybrid's operands, per-row, delayed, stochastic rounding, eval."""
    hybrid = get_policy("fp8_hybrid").layers["*"]
    xg = x.clone().requires_grad_(True)
    out = {
        "fp8_hybrid X fwd (train)": (hybrid.input, lambda q: q(xg)),
        "fp8_hybrid dY quantize()": (hybrid.grad_output, lambda q: q.quantize(x)),
        "per_row E4M3 fwd (train)": ({"fmt": "E4M3", "scaling": "per_row"}, lambda q: q(xg)),
        "delayed E4M3 fwd (train)": ({"fmt": "E4M3", "scaling": "delayed"}, lambda q: q(xg)),
        "SR E5M2 quantize()": ({"fmt": "E5M2", "rounding": "stochastic"}, lambda q: q.quantize(x)),
        "fp8_hybrid X fwd (eval)": (hybrid.input, lambda q: q(x)),
    }
    res = {}
    for name, (spec, call) in out.items():
        q = Quantizer(spec, seed=1)
        q.train("eval" not in name)
        res[name] = (q, call)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1024)
    ap.add_argument("--cols", type=int, default=64)
    ap.add_argument("--calls", type=int, default=300, help="calls per case and round")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    set_qdq_kernel("compiled")
    x = torch.randn(args.rows, args.cols, generator=torch.Generator().manual_seed(0))
    todo = cases(x)
    for q, call in todo.values():     # compile, then find each signature's entry and plan
        for _ in range(40):
            call(q)
    times: dict[str, list[float]] = {k: [] for k in todo}
    for _ in range(args.rounds):
        for name, (q, call) in todo.items():
            t = time.thread_time()
            for _ in range(args.calls):
                call(q)
            times[name].append((time.thread_time() - t) / args.calls * 1e6)
    print(f"torch {torch.__version__} | {cpu_model()} | threads {args.threads} | x {args.rows}x{args.cols} fp32 | "
          f"{args.rounds} rounds x {args.calls} calls")
    print(f"{'case':28s} {'min us':>8s} {'q25 us':>8s}")
    for name, ts in times.items():
        ts.sort()
        print(f"{name:28s} {ts[0]:8.1f} {ts[len(ts) // 4]:8.1f}")


if __name__ == "__main__":
    main()
