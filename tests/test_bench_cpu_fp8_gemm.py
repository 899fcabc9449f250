"""bench/cpu_fp8_gemm.py on a tiny shape: every row is printed with its time and its distance from the default path,
the default path is the emulation's bit for bit, and a bad shape is one argparse line. The timings are not tested."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import torch

from altgrad_lib.quantize.hw_fp8 import cpu_fp8_gemm

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import cpu_fp8_gemm as bench


def test_rows_times_and_distances_on_a_tiny_shape(capsys):
    threads, onednn = torch.get_num_threads(), torch.backends.mkldnn.enabled
    try:
        bench.main(["--shapes", "32x64x48", "--iters", "3", "--warmup", "1"])
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    assert "| CPU " in out and "| flags " in out and "32x64 @ 64x48" in out
    rows = dict(re.findall(r"^(\S.*?) +[\d.]+ +[\d.]+x  (\S+)$", out, re.M))
    assert set(rows) == {"fp32 matmul", "dequant + fp32 GEMM (default)", "torch._scaled_mm",
                         "torch._scaled_mm, oneDNN off"}, out
    assert float(rows["dequant + fp32 GEMM (default)"]) == 0.0
    assert float(rows["torch._scaled_mm, oneDNN off"]) == 0.0    # torch's emulation: the default's very ops
    # oneDNN (AMX CPUs) applies the scales around its accumulation: fp32 rounding apart, whose a-priori bound here is
    # ~2e-5 of max |Y| (tests/test_quantize_hw_fp8._fp32_bound: (12 + 2K)·2^-24·Σ|a||b|); a wrong product is O(1)
    assert float(rows["torch._scaled_mm"]) < 1e-4
    assert torch.backends.mkldnn.enabled == onednn and cpu_fp8_gemm() == "dequant"   # the bench left no state


def test_a_bad_shape_is_one_line(capsys):
    with pytest.raises(SystemExit):
        bench.main(["--shapes", "1024x64"])
    assert "shape '1024x64': expected MxKxN" in capsys.readouterr().err
