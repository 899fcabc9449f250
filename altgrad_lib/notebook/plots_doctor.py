"""The numerics doctor's figure (studies/doctor.py): layers x GEMMs heatmaps of gain − 1, relative bias and the loss
each GEMM's quantization costs, the flagged cells outlined."""
from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import TwoSlopeNorm
from matplotlib.figure import Figure

from altgrad_lib.notebook.names import layer_name
from altgrad_lib.notebook.plots import DPI

GEMM_ORDER = ("fprop", "dgrad", "wgrad")
PANELS = (("gain", "gain − 1 (fraction of the reference)", "RdBu_r", True),
          ("rel_bias", "relative bias (fraction of the reference norm)", "viridis", False),
          ("loss_cost", "loss cost of the GEMM's quantization (nats)", "RdBu_r", True))


def _row_label(layer: str, module: str) -> str:
    name = layer_name(layer)
    return f"{name} core" if module == "attention" else name


def _fault_label(fault: str) -> str:
    """'gain:transformer.h.1.mlp.c_fc:wgrad:0.88' -> 'gain 0.88 on block 1 MLP up wgrad' (no internal names)."""
    kind, layer, gemm, *value = fault.split(":")
    return f"{kind.replace('_', ' ')}{' ' + value[0] if value else ''} on {layer_name(layer)} {gemm}"


def doctor_figure(report: Any) -> Figure:
    """Three heatmaps (rows: the quantized layers in model order; columns: fprop / dgrad / wgrad) of a
    DoctorReport's `gemms` table; a cell whose GEMM raised a flag has a black outline. A panel with no finite value
    (the attribution skipped) says so in text."""
    df = report.gemms
    layers = list(dict.fromkeys(df.sort_values("layer", kind="stable").layer))
    module = dict(zip(df.layer, df.module))
    labels = [_row_label(name, module[name]) for name in layers]
    fig, axes = plt.subplots(1, 3, figsize=(12, 0.32 * len(layers) + 2.2), dpi=DPI, sharey=True)
    for ax, (col, label, cmap, centred) in zip(axes, PANELS):
        vals = df.assign(v=df[col] - 1 if col == "gain" else df[col])
        mat = vals.pivot_table(index="layer", columns="gemm", values="v", aggfunc="first", dropna=False)
        mat = mat.reindex(index=layers, columns=list(GEMM_ORDER)).to_numpy(dtype=float)
        finite = mat[np.isfinite(mat)]
        ax.set_xticks(range(len(GEMM_ORDER)), GEMM_ORDER)
        ax.set_yticks(range(len(layers)), labels)
        ax.set_xlabel("GEMM")
        ax.set_title(label, fontsize=9)
        ax.grid(False)
        if finite.size == 0 or np.ptp(finite) == 0:
            ax.set_xlim(-0.5, len(GEMM_ORDER) - 0.5)
            ax.set_ylim(len(layers) - 0.5, -0.5)
            ax.text(0.5, 0.5, "not measured" if finite.size == 0 else f"every GEMM {finite[0]:.3g}",
                    transform=ax.transAxes, ha="center", va="center")
            continue
        if centred:
            lim = float(np.max(np.abs(finite)))
            norm = TwoSlopeNorm(vcenter=0.0, vmin=-lim, vmax=lim)
        else:
            norm = None
        im = ax.imshow(np.ma.masked_invalid(mat), cmap=cmap, norm=norm, aspect="auto")
        cb = fig.colorbar(im, ax=ax, fraction=0.05, pad=0.02)
        cb.set_label(label, fontsize=8)
        flagged = df[df["flags"] != ""]
        for r in flagged.itertuples():
            if r.gemm in GEMM_ORDER:
                i, j = layers.index(r.layer), GEMM_ORDER.index(r.gemm)
                ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, lw=2, ec="black"))
    axes[0].set_ylabel("layer")
    fault = f"; injected {', '.join(map(_fault_label, report.faults))}" if report.faults else ""
    fig.suptitle(f"numerics doctor: {report.recipe} at step {report.step} ({report.batches} batches, "
                 f"{report.draws} draws{fault}); flagged GEMMs outlined", fontsize=10)
    fig.tight_layout()
    return fig

