"""Figures of the bench/ timings that notebooks show (for the h100 profile: FP8 speed-up vs GEMM shape).

    gemm_timings(results_dir)   every bench/results/gemm_speedup_*.csv measured on a CUDA GPU, as one frame (empty
                                when none is committed; CPU-emulation files are left out: they say nothing about
                                tensor cores)
    speedup_vs_shape(frame)     bench/gemm_speedup.py's CSV of one device: TFLOP/s and speed-up over BF16 torch.mm
                                against the GEMM's work 2·M·K·N, one colour per variant, a line at 1x

Conventions as plots.py: labelled axes with units, legends outside the data, dpi from plots.setup.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import NullFormatter

BF16 = "BF16 torch.mm"   # bench/gemm_speedup.py's baseline variant
SQUARE = "square"        # its group of the M = K = N shapes
FAST = ", fast accum"    # the suffix of its use_fast_accum=True variants


def gemm_timings(results_dir: str | Path) -> pd.DataFrame:
    """The rows of every gemm_speedup_*.csv under `results_dir` timed on a CUDA device (device_type == "cuda"),
    with the file's stem in column `source` (gemm_speedup_nvidia-h100-80gb-hbm3: one figure, one file name each)."""
    frames = [pd.read_csv(p).assign(source=p.stem) for p in sorted(Path(results_dir).glob("gemm_speedup_*.csv"))]
    frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["device_type", "source"])
    return frame[frame.device_type == "cuda"].reset_index(drop=True)


def speedup_vs_shape(frame: pd.DataFrame) -> Figure:
    """Left: throughput (TFLOP/s) of every variant, BF16 included; right: speed-up over BF16 (BF16 ms / variant
    ms); both against the GEMM's work 2·M·K·N on a log axis. Lines join the square shapes (or, without any, all
    shapes in order of work); other shapes (the h100 model's GEMMs) are open diamonds of the variant's colour.
    Failed variants (no time) are named under the title, not dropped silently."""
    devices = list(dict.fromkeys(frame.device))
    if len(devices) != 1:
        raise ValueError(f"speedup_vs_shape: one device per figure, got {devices}; select one with "
                         "frame[frame.device == name]")
    emulated = bool(frame.emulated.astype(str).str.lower().eq("true").any())
    timed = frame[frame.ms.notna()]
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    fig, (axt, axs) = plt.subplots(1, 2, figsize=(12, 4.4))
    lined = timed.group.eq(SQUARE) if timed.group.eq(SQUARE).any() else pd.Series(True, index=timed.index)
    # colour by scaling (tensor-wise, row-wise), solid with fast accumulation, dashed without; BF16 dark grey
    kinds = list(dict.fromkeys(v.replace(FAST, "") for v in timed.variant if v != BF16))
    for variant in dict.fromkeys(timed.variant):
        rows = timed[timed.variant == variant].sort_values("flop")
        style = dict(color="0.2", ls="-") if variant == BF16 else \
            dict(color=cycle[kinds.index(variant.replace(FAST, "")) % len(cycle)], ls="-" if FAST in variant else "--")
        for ax, col in ((axt, "tflops"), (axs, "speedup")):
            if col == "speedup" and variant == BF16:
                continue   # 1x by definition: the reference line
            line = rows[lined.loc[rows.index]]
            ax.plot(line.flop, line[col], marker="o", ms=4, lw=1.3, label=variant, **style)
            rest = rows[~lined.loc[rows.index]]
            ax.scatter(rest.flop, rest[col], marker="D", s=30, facecolors="none", edgecolors=style["color"],
                       linewidths=1.2)
    axs.axhline(1.0, color="0.2", lw=1.0, label=f"{BF16} (speed-up: 1x)")
    for ax in (axt, axs):
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())   # under two decades matplotlib labels minor ticks: they overlap
        ax.set_xlabel("GEMM work 2·M·K·N (FLOP)")
    axt.set_yscale("log")
    axt.yaxis.set_minor_formatter(NullFormatter())
    axt.set_ylabel("throughput (TFLOP/s)")
    axs.set_ylabel("speed-up over BF16 torch.mm (×)")
    axt.set_title("throughput")
    axs.set_title("FP8 speed-up over BF16")
    handles, _ = axs.get_legend_handles_labels()
    handles += [Line2D([], [], color="0.4", marker="o", ms=4, label="lines: square M = K = N" if
                       timed.group.eq(SQUARE).any() else "lines: every shape")]
    for g in dict.fromkeys(timed.group[~lined].str.split(":").str[0]):
        handles.append(Line2D([], [], color="0.4", marker="D", mfc="none", ls="none", label=g + " GEMMs"))
    axs.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False,
               handlelength=3.5)
    title = f"torch._scaled_mm E4M3 vs BF16 torch.mm on {devices[0]} (torch {frame.torch.iloc[0]})"
    if emulated:
        title += "\nCPU emulation of _scaled_mm: tests the pipeline, says nothing about FP8 tensor cores"
    failed = frame[frame.ms.isna()]
    if len(failed):
        title += "\nnot drawn (failed): " + "; ".join(f"{v} on {n} shape{'s' * (n > 1)}"
                                                       for v, n in failed.variant.value_counts(sort=False).items())
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig
