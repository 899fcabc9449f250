"""A counting Quantizer inside a torch.compile'd model (numerics/quant.py qdq with want_stats): the quantized output
is stored before the counters' reductions (block_scaling.stored_in_kernel), so inductor computes y and the saturation /
underflow counts in one loop over x instead of a second pass that recomputes x (a GELU's erf included) and the whole
rounding chain: on the cpu profile's model that pass was ~3 ms of a ~20 ms fp8_hybrid step (bench/results/
train_step.md). Checked here: the compiled call against the eager one, bit for bit (y, the counters, the Scaler's
buffers), and the loop structure of the generated kernel (the part that fails on the old code).
"""
from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from helpers import assert_same_state, bits_equal

from altgrad_lib.numerics.block_scaling import STORES_IN_KERNEL
from altgrad_lib.numerics.quantizer import Quantizer

N_ROWS, N_COLS = 16, 256


def _input() -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    a = torch.randn(N_ROWS, N_COLS, generator=g) * 3
    a[0, :5] = torch.tensor([0.0, -0.0, 1e-30, -1e-41, 1e-4])   # zeros, underflow to 0, subnormal input
    a[1, :3] = 1e3                                                # outliers
    return a


def _step(q: Quantizer, a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    # x produced in the graph (an exact op: inductor's GELU is not ATen's to the bit) and consumed by a GEMM
    return q(a * 0.5) @ w


def _run(compiled: bool, spec: str):
    torch.manual_seed(0)
    q = Quantizer(spec, seed=3)
    a = _input().requires_grad_(True)
    fn = torch.compile(_step, fullgraph=True) if compiled else _step
    y = fn(q, a, torch.eye(N_COLS))
    y.sum().backward()
    return y.detach(), a.grad, {k: v.clone() for k, v in q.state_dict().items() if isinstance(v, torch.Tensor)}


@pytest.mark.parametrize("spec", ["E4M3", "E5M2"])
def test_compiled_counting_quantizer_equals_eager(spec):
    ye, _, se = _run(False, spec)
    yc, _, sc = _run(True, spec)   # the input's gradient: inductor's GELU backward is not ATen's (not ours)
    assert bool(bits_equal(yc, ye).all())
    assert_same_state(sc, se)
    assert int(se["n_underflow"]) > 0     # the inputs exercise the underflow count


@pytest.mark.skipif(not STORES_IN_KERNEL, reason="torch < 2.13: stored_in_kernel is the identity (block_scaling.py)")
def test_compiled_counting_reads_the_input_in_two_loops():
    """amax, then one loop that stores y and counts: a third loop over the GELU's input would be the recompute."""
    from torch._inductor.utils import run_and_get_code
    torch._dynamo.reset()
    q = Quantizer("E4M3")
    # consumed by a GEMM, as in a QuantizedLinear (an output of the graph is stored anyway)
    fn = torch.compile(lambda a, w: q(F.gelu(a)) @ w, fullgraph=True)
    with torch.no_grad():
        _, code = run_and_get_code(fn, _input(), torch.ones(N_COLS, 8))
    n = N_ROWS * N_COLS
    loops = [b for src in code for b in re.findall(r"for\(int64_t x0=static_cast<int64_t>\(0L\); x0<static_cast<"
                                                    r"int64_t>\((\d+)L\)", src) if int(b) == n]
    erfs = sum(src.count(".erf()") + src.count("std::erf(") for src in code)
    assert len(loops) == 2, f"{len(loops)} loops over the {n} elements (expected amax, then quantize + count)"
    assert erfs <= 2, f"the GELU's erf is computed in {erfs} places (amax and the quantize loop: 2)"
