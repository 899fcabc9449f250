"""bench/gemm_speedup.py on CPU: it refuses the CPU emulation by default (one line), runs it on tiny shapes with
--allow-cpu, and the CSV it writes is what notebook/plots_bench.py reads. The timings themselves are not tested
(a bench, not a test); the E4M3 operands' scales and the products are."""
from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pandas as pd
import pytest
import torch
import yaml

from altgrad_lib.notebook import plots, plots_bench
from altgrad_lib.notebook.figure_check import figure_problems

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import gemm_speedup

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    """One --allow-cpu run on the default tiny shapes: (csv path, frame)."""
    out = tmp_path_factory.mktemp("gemm")
    gemm_speedup.main(["--device", "cpu", "--allow-cpu", "--warmup", "1", "--iters", "2", "--out-dir", str(out)])
    csv = out / "gemm_speedup_cpu-emulation.csv"
    return csv, pd.read_csv(csv, keep_default_na=False, na_values=[""])


def test_cpu_is_refused_by_default_with_one_line(capsys, tmp_path):
    with pytest.raises(SystemExit) as e:
        gemm_speedup.main(["--device", "cpu", "--out-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1
    assert "emulation" in err and "tensor cores" in err and "--allow-cpu" in err
    assert not list(tmp_path.iterdir())   # refused before anything is written


@pytest.mark.parametrize("argv, bad", [(["--shapes", "64x64"], "'64x64'"),
                                       (["--shapes", "4096x4096x4096"], "4096x4096x4096"),
                                       (["--iters", "0"], "--iters 0")])
def test_bad_arguments_are_refused_before_any_compute(argv, bad, capsys, tmp_path):
    with pytest.raises(SystemExit):
        gemm_speedup.main(["--device", "cpu", "--allow-cpu", "--out-dir", str(tmp_path), *argv])
    assert bad in capsys.readouterr().err.splitlines()[-1]
    assert not list(tmp_path.iterdir())


def test_cpu_run_writes_a_tidy_csv_labelled_as_emulation(cpu_run):
    csv, frame = cpu_run
    shapes = {f"{m}x{k}x{n}" for m, k, n in gemm_speedup.CPU_SHAPES}
    assert set(frame["shape"]) == shapes and len(frame) == len(shapes) * len(gemm_speedup.VARIANTS)
    assert set(frame.variant) == set(gemm_speedup.VARIANTS)
    assert (frame.device_type == "cpu").all() and frame.emulated.all()
    assert frame.device.str.startswith("CPU emulation").all() and (frame.torch == torch.__version__).all()
    assert frame.ms.notna().all() and (frame.error.isna()).all()
    assert (frame.flop == 2 * frame.M * frame.K * frame.N).all()
    bf16 = frame[frame.variant == plots_bench.BF16].set_index("shape").ms
    assert frame.speedup.to_numpy() == pytest.approx((frame["shape"].map(bf16) / frame.ms).to_numpy())
    md = csv.with_suffix(".md").read_text()
    assert "CPU emulation" in md and "--allow-cpu" in md and "say nothing about FP8 tensor cores" in md


def test_every_product_matches_the_fp32_product_of_its_operands_to_bf16_rounding(cpu_run):
    """rel_err: the BF16 output against the FP32 product of the same operands. Rounding to BF16 (8 significant
    bits, round to nearest) moves each element by at most 2^-9 of itself, so the relative Frobenius error is
    <= 2^-9; the slack covers FP32 summation order. This checks each _scaled_mm call (operand layout, which scale
    goes with which operand, fast accumulation) against the dequantized product; the scales themselves are checked
    by the next test (a scale and its inverse swapped passes here: both sides dequantize alike)."""
    _, frame = cpu_run
    assert (frame.rel_err <= 2 ** -9 + 1e-5).all(), frame[["shape", "variant", "rel_err"]]


@pytest.mark.parametrize("rowwise", [False, True])
def test_e4m3_operands_dequantize_to_the_input_within_half_an_ulp(rowwise):
    """quantize(): codes · (1/s) recovers x within E4M3's half ULP (2^-4 of |x| for normal values; a floor of
    half the smallest subnormal, 2^-10 / s, below), and each row (or the tensor) reaches E4M3's max 448."""
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(8, 32, generator=g) * torch.logspace(-3, 3, 8)[:, None]).to(torch.bfloat16)
    q, inv_s = gemm_speedup.quantize(x, rowwise, dim=1)
    assert q.dtype == torch.float8_e4m3fn and inv_s.dtype == torch.float32
    assert inv_s.shape == ((8, 1) if rowwise else ())
    back = q.float() * inv_s
    bound = torch.maximum(x.float().abs() * 2 ** -4, 2 ** -10 * inv_s)
    assert ((back - x.float()).abs() <= bound).all()
    amax = q.float().abs().amax(dim=1) if rowwise else q.float().abs().amax()
    assert (amax == 448).all()


def test_default_shapes_hold_every_block_gemm_of_the_h100_model():
    """From the profile yaml and GPT-2's block (QKV 3C, out C, MLP 4C, GELU): forward, dX and dW of each
    linear, written out here from the architecture, plus squares up to 8192 (d >= 2048 included)."""
    p = yaml.safe_load(open(ROOT / gemm_speedup.PROFILE))
    c, t = p["n_embd"], p["batch_size"] * p["block_size"]
    expect = set()
    for i, o in ((c, 3 * c), (c, c), (c, 4 * c), (4 * c, c)):
        expect |= {(t, i, o), (t, o, i), (o, t, i)}
    shapes = gemm_speedup.default_shapes(str(ROOT / gemm_speedup.PROFILE))
    assert expect <= set(shapes) and all(shapes[s] != plots_bench.SQUARE for s in expect)
    assert {(d, d, d) for d in (2048, 4096, 8192)} <= {s for s, g in shapes.items() if g == plots_bench.SQUARE}


def test_the_figure_reads_the_csv_and_the_notebook_loader_skips_cpu_files(cpu_run):
    csv, _ = cpu_run
    plots.setup()
    fig = plots_bench.speedup_vs_shape(pd.read_csv(csv))
    try:
        assert figure_problems(fig) == []
        assert "CPU emulation" in fig._suptitle.get_text()
        speed = fig.axes[1]
        assert len([ln for ln in speed.lines if ln.get_transform() is speed.transData]) == 4   # the E4M3 variants
    finally:
        plt.close(fig)
    assert plots_bench.gemm_timings(csv.parent).empty   # CPU emulation: not a GPU timing
    assert plots_bench.gemm_timings(csv.parent / "none").empty


def test_the_loader_keeps_cuda_files_and_the_figure_wants_one_device(tmp_path):
    from test_notebook_figures import gemm_frame   # tests/ is on the path (as helpers)

    gemm_frame("NVIDIA H100 80GB HBM3").to_csv(tmp_path / "gemm_speedup_nvidia-h100.csv", index=False)
    gemm_frame("NVIDIA H200").to_csv(tmp_path / "gemm_speedup_nvidia-h200.csv", index=False)
    gemm_frame("CPU emulation: x", emulated=True).to_csv(tmp_path / "gemm_speedup_cpu-emulation.csv", index=False)
    frame = plots_bench.gemm_timings(tmp_path)
    assert set(frame.device) == {"NVIDIA H100 80GB HBM3", "NVIDIA H200"}
    assert set(frame.source) == {"gemm_speedup_nvidia-h100", "gemm_speedup_nvidia-h200"}
    with pytest.raises(ValueError, match="one device per figure"):
        plots_bench.speedup_vs_shape(frame)


def test_a_failing_variant_is_a_row_with_its_error_and_the_figure_names_it(monkeypatch, tmp_path):
    """A variant this GPU / torch lacks (row-wise scales before sm90) stays in the CSV with its error, the
    markdown lists it, and the figure says it is not drawn; the other variants are timed as usual."""
    real = gemm_speedup.make_calls

    def broken(m, k, n, device):
        calls = real(m, k, n, device)

        def boom():
            raise RuntimeError("row-wise scaling needs sm90\nsecond line")
        calls["E4M3 row-wise"] = (boom, calls["E4M3 row-wise"][1])
        return calls

    monkeypatch.setattr(gemm_speedup, "make_calls", broken)
    gemm_speedup.main(["--device", "cpu", "--allow-cpu", "--shapes", "16x32x16", "--warmup", "1", "--iters", "1",
                       "--out-dir", str(tmp_path)])
    csv = tmp_path / "gemm_speedup_cpu-emulation.csv"
    frame = pd.read_csv(csv)
    bad = frame[frame.variant == "E4M3 row-wise"].iloc[0]
    assert pd.isna(bad.ms) and bad.error == "RuntimeError: row-wise scaling needs sm90"
    assert frame[frame.variant != "E4M3 row-wise"].ms.notna().all()
    assert "## Failed variants" in csv.with_suffix(".md").read_text()
    plots.setup()
    fig = plots_bench.speedup_vs_shape(frame)
    try:
        assert "not drawn (failed): E4M3 row-wise on 1 shape" in fig._suptitle.get_text()
        assert figure_problems(fig) == []
    finally:
        plt.close(fig)
