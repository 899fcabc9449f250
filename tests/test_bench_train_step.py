"""bench/train_step.py on CPU with a tiny model: the default output has the interleaved table only, and
--also-consecutive N adds a table with every mode's interleaved and consecutive medians, from N steps of each
mode in a row. The timings themselves are not tested (a bench, not a test); the CUDA memory columns and the
compiled-frames check are tested on scripted stats and a compiled function (the bench runs them on CUDA only)."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import torch

from altgrad_lib.numerics.kernels import set_qdq_kernel
from altgrad_lib.quantize.hw_fp8 import set_cpu_fp8_gemm

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import train_step


@pytest.fixture(autouse=True)
def _process_state_restored():
    """main() sets process-wide state (torch's thread count, dynamo's limits, the kernel modes) for its own run;
    the next test in this worker must find the worker's (a later test checks its thread count)."""
    threads, dyn = torch.get_num_threads(), torch._dynamo.config
    limits = dyn.recompile_limit, dyn.cache_size_limit
    yield
    torch.set_num_threads(threads)
    dyn.recompile_limit, dyn.cache_size_limit = limits
    set_qdq_kernel(None)
    set_cpu_fp8_gemm(None)

TINY = ["--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "8", "--vocab", "32", "--batch", "2",
        "--steps", "2", "--warmup", "1", "--qdq-kernel", "eager", "--modes", "fp32:eager", "sim:eager"]


def test_default_output_has_no_consecutive_table(capsys):
    train_step.main(TINY)
    out = capsys.readouterr().out
    assert re.search(r"^fp32:eager +\d+ +[\d.]+ +1\.00x$", out, re.M)
    assert re.search(r"^sim:eager +\d+ +[\d.]+ +[\d.]+x$", out, re.M)
    assert "consecutive" not in out and "CUDA memory" not in out


def test_also_consecutive_times_each_mode_n_steps_in_a_row(capsys, monkeypatch):
    calls: list[str] = []
    run = train_step.Recorder.run

    def counting(self, key, step):   # which mode ran, in order, across both phases
        calls.append(key)
        run(self, key, step)

    monkeypatch.setattr(train_step.Recorder, "run", counting)
    train_step.main(TINY + ["--also-consecutive", "3"])
    out = capsys.readouterr().out
    # 2 interleaved rounds, then each mode 3 times in a row
    assert calls == ["fp32:eager", "sim:eager"] * 2 + ["fp32:eager"] * 3 + ["sim:eager"] * 3
    assert "consecutive = 3 steps" in out
    for key in ("fp32:eager", "sim:eager"):
        row = re.search(rf"^{key} +([\d.]+) +([\d.]+) +interleaved/consecutive ([\d.]+)x$", out, re.M)
        assert row, out
        inter, cons, ratio = map(float, row.groups())
        assert inter > 0 and cons > 0
        # the ratio of the same two medians, which are printed rounded to 0.05 ms and the ratio to 0.005
        lo, hi = max(inter - 0.05, 0) / (cons + 0.05), (inter + 0.05) / max(cons - 0.05, 1e-9)
        assert lo - 0.005 <= ratio <= hi + 0.005
    assert "CUDA memory" not in out


def test_cuda_memory_columns_are_peaks_and_summed_counters(capsys, monkeypatch):
    """The allocator accounting, with torch.cuda's stats replaced by a script (no GPU here): per mode, the largest
    peak seen after any of its steps and the retries / cudaMallocs its steps added (after - before, summed)."""
    gib = 2 ** 30
    stats = iter([   # (before, after) for each of three steps: a, b, a
        {"num_alloc_retries": 5, "num_device_alloc": 10},
        {"allocated_bytes.all.peak": 2 * gib, "reserved_bytes.all.peak": 4 * gib,
         "num_alloc_retries": 5, "num_device_alloc": 12},
        {"num_alloc_retries": 5, "num_device_alloc": 12},
        {"allocated_bytes.all.peak": 8 * gib, "reserved_bytes.all.peak": 9 * gib,
         "num_alloc_retries": 7, "num_device_alloc": 20},
        {"num_alloc_retries": 7, "num_device_alloc": 20},
        {"allocated_bytes.all.peak": 1 * gib, "reserved_bytes.all.peak": 9 * gib,
         "num_alloc_retries": 8, "num_device_alloc": 21},
    ])
    resets: list[str] = []
    monkeypatch.setattr(train_step.torch.cuda, "memory_stats", lambda device: next(stats))
    monkeypatch.setattr(train_step.torch.cuda, "reset_peak_memory_stats", resets.append)
    rec = train_step.Recorder("cuda:0")
    for key in ("a", "b", "a"):
        rec.run(key, lambda: None)
    assert resets == ["cuda:0"] * 3   # each step's peak is its own
    assert rec.mem == {
        "a": {"alloc_peak": 2 * gib, "reserved_peak": 9 * gib, "num_alloc_retries": 1, "num_device_alloc": 3},
        "b": {"alloc_peak": 8 * gib, "reserved_peak": 9 * gib, "num_alloc_retries": 2, "num_device_alloc": 8},
    }
    train_step.print_memory("test", rec)
    out = capsys.readouterr().out
    assert re.search(r"^a +2\.00 +9\.00 +1 +3  [\d.]+ / [\d.]+ / [\d.]+$", out, re.M)
    assert re.search(r"^b +8\.00 +9\.00 +2 +8  [\d.]+ / [\d.]+ / [\d.]+$", out, re.M)


def test_compiled_regions_names_the_frames_a_step_runs():
    """A compiled function's call runs one dynamo frame; the same function eager runs none."""
    def f():
        return (torch.ones(3) * 2).sin()

    g = torch.compile(f, backend="eager")   # no inductor: the frame is what is counted, not the code generated
    g()
    (frame,) = train_step.compiled_regions(g)   # its number counts the process's earlier compiled frames
    assert re.fullmatch(r"\d+/0", frame)
    assert train_step.compiled_regions(f) == []


def test_regions_changed_warns_only_when_the_frames_differ():
    assert train_step.regions_changed("fp32:compiled", ["0/0"], ["0/0"]) is None
    # what the second lease's bf16 baseline ran after a compiled nvfp4 build (the frames of its split forward)
    w = train_step.regions_changed("fp32:compiled", ["0/0"], ["1/0"] * 6 + ["11/0", "12/1"])
    assert w.startswith("WARNING fp32:compiled:") and "[0/0] after its build" in w
    assert "[1/0 x6, 11/0, 12/1] after the later builds" in w
