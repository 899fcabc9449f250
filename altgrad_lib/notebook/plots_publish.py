"""The figures low-precision training papers publish, drawn from AltGrad's runs and claims.

    seed_losses(runs, split)            tidy (label, seed, step, loss) of every run of a train_variants result
    gap_over_training(losses, baseline, delta)   (a) loss − baseline of the same seed over training: mean line, a band
                                        over the seeds (min..max), the ±δ equivalence band (NVFP4 report, torchao docs)
    forest(claims)                      (e) every level's final gap vs the baseline with its CI and ±δ, ordered by the
                                        exponent / mantissa split of its format
    layer_grid(diags)                   (c) per-layer amax, scale, under- and overflow of X / W / dY, one marker per
                                        format, in one grid (TransformerEngine's precision-debug view)
    scaled_weight_hist(diag, fmt)       (b) for the weights W: the share of each layer's |w·s| per binade against the
                                        format's window (min subnormal, min normal, max), as Micikevicius et al. draw
                                        X, W and dY (from the weights monitor's log2|w| and the W scale)
    tensor_hist(diag, fmts)             (b) X, W and dY: the share of each tensor's |x·s| per binade (the numerics
                                        monitor's hist.log2xs), rows tensors, columns layer classes, one line per
                                        block, against each format's window (Micikevicius et al., arXiv 1710.03740)
    hp_block_gaps(index)                (where, k, seed, gap) of a study's hp_first=k / hp_last=k recipes vs k = 0
    layer_sensitivity(diags, gaps)      (d) SQNR per tensor vs depth (block index, embedding / LM head), one line
                                        per format; with gaps, the loss gap of keeping the first / last k blocks in
                                        high precision (the NVFP4 report's choice of BF16 layers)

Conventions as plots.py: labelled axes with units (names.py), legends outside the data, dpi from plots.setup.
"""
from __future__ import annotations

import math
import re
from typing import Any, Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from altgrad_lib.notebook.names import METRICS, ROLES, layer_name, metric_name
from altgrad_lib.notebook.plots import CONTROL_MARKERS
from altgrad_lib.numerics.formats import FloatFormat, get_format
from altgrad_lib.quantize.convert import block_index
from altgrad_lib.quantize.recipes import split_hp_switches
from altgrad_lib.studies.results import VAL_LOSS, TRAIN_LOSS, find_metric, metrics_wide
from altgrad_lib.studies.verdicts import Verdict, short_words

_EXMY = re.compile(r"\bE(\d+)M(\d+)")


def seed_losses(runs: Any, split: str = "val") -> pd.DataFrame:
    """(label, seed, step, loss) of every run of a `train_variants` result (its `labels`: key -> (label, seed))."""
    frames = []
    for key, run in runs.items():
        w = metrics_wide(run)
        col = find_metric(w.columns, *(VAL_LOSS if split == "val" else TRAIN_LOSS))
        if col is None:
            continue
        label, seed = runs.labels[key]
        d = w[["step", col]].dropna().rename(columns={col: "loss"})
        frames.append(d.assign(label=label, seed=int(seed)))
    return pd.concat(frames, ignore_index=True)[["label", "seed", "step", "loss"]]


def _names_a_control(label: str) -> bool:
    return any(m in str(label) for m in CONTROL_MARKERS)


def gap_over_training(losses: pd.DataFrame, baseline: str, delta: float | None = None, *, split: str = "val",
                      title: str = "") -> Figure:
    """(a) loss − `baseline`'s loss of the same seed at the same step, per label: the mean over seeds (line), the
    seeds' min..max (band, with 2+ seeds) and ±`delta` (grey). Controls (frozen blocks) are left out: their gap is
    the window, not a format's cost."""
    base = losses[losses.label == baseline][["seed", "step", "loss"]].rename(columns={"loss": "base"})
    if base.empty:
        raise ValueError(f"baseline {baseline!r} not among the labels {sorted(losses.label.unique())}")
    d = losses[(losses.label != baseline) & ~losses.label.map(_names_a_control)].merge(base, on=["seed", "step"])
    d = d.assign(gap=d.loss - d.base)
    fig, ax = plt.subplots(figsize=(9, 4))
    if delta is not None and np.isfinite(delta):
        ax.axhspan(-delta, delta, color="0.88", zorder=0, label=f"±δ = {delta:g} nats")
    ax.axhline(0, color="k", lw=0.8)
    n_seeds = d.seed.nunique()
    for i, (label, g) in enumerate(d.groupby("label", sort=False)):
        s = g.groupby("step").gap.agg(["mean", "min", "max", "count"])
        color = f"C{i % 10}"
        n = int(s["count"].max())
        ax.plot(s.index, s["mean"], marker=".", color=color, label=f"{label} (mean of {n})" if n > 1 else label)
        if s["count"].max() > 1:
            ax.fill_between(s.index, s["min"], s["max"], color=color, alpha=0.18, lw=0)
    ax.set_xlabel("training step")
    ax.xaxis.get_major_locator().set_params(integer=True)   # whole steps
    ax.set_ylabel(f"{metric_name(f'{split}/loss')} − {baseline}, same seed (nats/token)")
    band = "band: min..max over seeds; " if n_seeds > 1 else ""
    ax.set_title(title or f"gap to {baseline} over training ({n_seeds} seed(s); {band}grey: ±δ)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    return fig


def exmy(level: Any) -> tuple[int, int] | None:
    """(exponent bits, mantissa bits) of the first ExMy in a level's name ("E4M3-XWdY" -> (4, 3)); None if none."""
    m = _EXMY.search(str(level))
    return (int(m.group(1)), int(m.group(2))) if m else None


def forest(claims: pd.DataFrame, *, baseline: str | None = None, title: str = "") -> Figure:
    """(e) One row per claims row: the final gap (nats) vs the baseline of the same seed, its CI at the level its
    verdict uses (`ci_lo`/`ci_hi`, `ci_level`), ±δ (grey), the verdict in the row's label. Rows ordered by their
    format's exponent bits (range) against mantissa bits (precision); levels without an ExMy last, in table order."""
    t = claims.reset_index(drop=True)
    key = [(0, *exmy(lv)) if exmy(lv) else (1, i, 0) for i, lv in enumerate(t.level)]
    t = t.iloc[sorted(range(len(t)), key=lambda i: key[i])].reset_index(drop=True)
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(t) + 1.8))
    for y, r in enumerate(t.itertuples()):
        if np.isfinite(r.delta_nats):
            ax.plot([-r.delta_nats, r.delta_nats], [y, y], color="0.8", lw=8, solid_capstyle="butt", zorder=0)
        ci = np.isfinite(r.ci_lo) and np.isfinite(r.ci_hi)
        err = [[r.gap_nats - r.ci_lo], [r.ci_hi - r.gap_nats]] if ci else None
        ax.errorbar([r.gap_nats], [y], xerr=err, fmt="o", capsize=3, color="C0" if ci else "C3")
    ax.axvline(0, color="k", lw=0.8)
    labels = []
    for r in t.itertuples():
        split = exmy(r.level)
        bits = f" [{split[0]} exp / {split[1]} man bits]" if split else ""
        n = f"n={int(r.n)}" + ("" if np.isfinite(r.ci_lo) else ", no CI")
        labels.append(f"{r.level}{bits}\n{short_words(Verdict.from_row(r._asdict()))} ({n})")
    ax.set_yticks(range(len(t)), labels, fontsize=8)
    ax.set_ylim(len(t) - 0.5, -0.5)
    base = baseline or (t.baseline.iloc[0] if "baseline" in t and len(t) else "baseline")
    ax.set_xlabel(f"final loss − {base} of the same seed (nats/token)")
    ax.set_title(title or f"every level against {base}, by exponent / mantissa bits\n"
                 "bars: CI at each verdict's level; grey: ±δ; red: no CI")
    fig.tight_layout()
    return fig


GRID_METRICS = ("amax", "scale", "underflow_frac", "overflow_frac")
_LOG = {"amax", "scale", "ctr.amax", "ctr.scale"}


def layer_grid(diags: Mapping[str, pd.DataFrame], metrics: Sequence[str] = GRID_METRICS,
               roles: Sequence[str] = ("X", "W", "dY"), *, title: str = "") -> Figure:
    """(c) Rows: metrics (amax, scale, underflow, overflow: the numerics monitor, mean over the diagnostic steps);
    columns: the tensors X, W, dY; x: the quantized layers in depth order; one marker per run (format). A panel with
    no rows says "not recorded", one whose values are all zero says "all zero" (a flat line at 0 says nothing)."""
    frames = {k: d for k, d in diags.items() if d is not None and len(d)}
    if not frames:
        raise ValueError("no diagnostics to draw (every run was trained with diagnostics off)")
    fig, axes = plt.subplots(len(metrics), len(roles), figsize=(4 * len(roles), 2.4 * len(metrics) + 0.8),
                             squeeze=False, sharex=True)
    layers: list[str] = []
    for d in frames.values():
        sel = d[d.metric.isin(metrics) & d.role.isin(roles)]
        layers += [lyr for lyr in dict.fromkeys(sel.layer) if lyr not in layers]
    x = {lyr: i for i, lyr in enumerate(layers)}
    handles = {}
    for i, metric in enumerate(metrics):
        for j, role in enumerate(roles):
            ax = axes[i, j]
            vals = []
            for k, (label, d) in enumerate(frames.items()):
                sel = d[(d.metric == metric) & (d.role == role)]
                if sel.empty:
                    continue
                m = sel.groupby("layer", sort=False).value.mean()
                vals.append(m.to_numpy(float))
                h = ax.plot([x[lyr] for lyr in m.index], m.to_numpy(float), marker="os^Dvx<>"[k % 8], ls="none",
                            color=f"C{k % 10}", label=label, alpha=0.85)[0]
                handles.setdefault(label, h)
            allv = np.concatenate(vals) if vals else np.array([])
            fin = allv[np.isfinite(allv)]
            note = ("not recorded" if not vals else "not measurable (all NaN)" if not fin.size
                    else "all zero" if np.all(fin == 0) else None)
            if note:
                for ln in list(ax.lines):
                    ln.remove()
                ax.text(0.5, 0.5, note, ha="center", va="center", transform=ax.transAxes, fontsize=9, color="0.3")
                ax.set_yticks([])
            elif metric in _LOG and fin.min() > 0:
                ax.set_yscale("log", base=2)
            if i == 0:
                ax.set_title(ROLES.get(role, role))
            name, unit = METRICS.get(metric, (metric, ""))
            if j == 0:
                ax.set_ylabel(f"{name}\n({unit})" if unit else name, fontsize=8)
            elif not note and unit:
                ax.set_ylabel(f"({unit})", fontsize=8)
    for ax in axes[-1]:
        ax.set_xticks(range(len(layers)), [layer_name(lyr) for lyr in layers], rotation=60, ha="right", fontsize=7)
    fig.suptitle(title or "per layer: max |x|, scale, under- and overflow (mean over diagnostic steps)")
    fig.legend(list(handles.values()), list(handles), loc="upper left", bbox_to_anchor=(1.0, 0.95), frameon=False,
               fontsize=8)
    fig.tight_layout()
    return fig


def scaled_weight_hist(diag: pd.DataFrame, fmt: FloatFormat | str, *, step: int | None = None,
                       title: str = "") -> Figure:
    """(b) For each quantized layer: bars of the share of its weights per binade of |w·s| (the weights monitor's
    `hist.log2w` shifted by log2 of the W scale at the same step: what the format sees), against the format's
    window: grey below the smallest normal, red lines at the smallest subnormal (below it: zero) and at max (above
    it: clamped). The histogram's edge bins also hold the values clamped into them. Layers without a W scale (not
    quantized, or block-scaled) are left out and named in the title."""
    f = get_format(fmt)
    h = diag[diag.metric.str.startswith("hist.log2w:") & (diag.role == "W")]
    sc = diag[diag.metric.isin(["scale", "ctr.scale"]) & (diag.role == "W")]
    steps = sorted(set(h.step) & set(sc.step))
    if not steps:
        raise ValueError("no step with both the weights' log2 histogram (weights monitor) and a W scale")
    step = steps[-1] if step is None else step
    h, sc = h[h.step == step], sc[sc.step == step]
    # the numerics monitor's scale at that step; else the quantizer counter's (its last call)
    scale = sc[sc.metric == "scale"].groupby("layer").value.first().combine_first(
        sc[sc.metric == "ctr.scale"].groupby("layer").value.first())
    layers = [lyr for lyr in dict.fromkeys(h.layer) if lyr in scale.index and scale[lyr] > 0]
    left_out = [layer_name(lyr) for lyr in dict.fromkeys(h.layer) if lyr not in layers]
    ncols = min(4, len(layers))
    nrows = math.ceil(len(layers) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.3 * ncols, 2.3 * nrows + 1.0), sharex=True, sharey=True,
                             squeeze=False)
    lo, mn, hi = math.log2(f.min_subnormal), math.log2(f.min_normal), math.log2(f.max)
    for ax, layer in zip(axes.flat, layers):
        d = h[h.layer == layer]
        k = d.metric.str.split(":").str[1].astype(int).to_numpy() + math.log2(scale[layer])
        if mn > lo:
            ax.axvspan(lo, mn, color="0.88", zorder=0)
        ax.bar(k, d.value.to_numpy(), width=1.0, align="edge", color="C0")
        for x in (lo, hi):
            ax.axvline(x, color="C3", lw=1)
        ax.set_title(layer_name(layer), fontsize=8)
    for ax in axes.flat[len(layers):]:
        ax.set_visible(False)
    for ax in axes[-1]:
        ax.set_xlabel("log2 |w·s| (binade)")
    for ax in axes[:, 0]:
        ax.set_ylabel("fraction of weights")
    note = f"; not scaled, left out: {', '.join(left_out)}" if left_out else ""
    fig.suptitle(title or f"{f.name} weights at step {step}: |w·s| per binade; red: min subnormal and max, "
                 f"grey: subnormal{note}", fontsize=9)
    fig.tight_layout()
    return fig


_KINDS = ("X", "W", "dY")


def _fmt_of(fmts: Any, role: str) -> FloatFormat:
    return get_format(fmts[role] if isinstance(fmts, Mapping) else fmts)


def _class_name(layer: str) -> str:
    """"transformer.h.1.mlp.c_fc" -> "MLP up" (the layer's name without its block)."""
    return re.sub(r"^block \d+ ", "", layer_name(layer))


def tensor_hist(diag: pd.DataFrame, fmts: Any, *, step: int | None = None, title: str = "") -> Figure:
    """(b) Rows: the tensors X, W, dY; columns: the layer classes (attn QKV, ..., LM head); in each panel the share of
    the tensor's non-zero elements per binade of |x·s| (the numerics monitor's `hist.log2xs`, recorded where the
    quantizer ran: what the format sees), one line per block (light to dark with depth), against the format's window
    (`fmts`: one format, or one per tensor {"X": ..., "W": ..., "dY": ...}): red lines at the smallest subnormal
    (below half of it: zero) and at max (above: clamped), grey the subnormal range. The end bins, 4 binades beyond
    the window, also hold everything further out. As Micikevicius et al. (arXiv 1710.03740, Fig. 3) draw them."""
    h = diag[diag.metric.str.startswith("hist.log2xs:")]
    if h.empty:
        raise ValueError("no hist.log2xs rows: the numerics monitor (diagnostics preset 'full' or group 'numerics') "
                         "was off, or nothing is quantized")
    step = int(h.step.max()) if step is None else step
    h = h[h.step == step]
    if h.empty:
        raise ValueError(f"no tensor histogram at step {step}; steps recorded: {sorted(diag.step.unique())}")
    h = h.assign(k=h.metric.str.split(":").str[1].astype(int))
    roles = [r for r in _KINDS if (h.role == r).any()]
    classes = list(dict.fromkeys(_class_name(lyr) for lyr in h.layer))
    blocks = sorted({b for b in map(block_index, h.layer.unique()) if b is not None})
    cmap = plt.get_cmap("viridis")
    colour = {b: cmap(0.85 * i / max(1, len(blocks) - 1)) for i, b in enumerate(blocks)}
    fig, axes = plt.subplots(len(roles), len(classes), figsize=(max(6.8, 2.9 * len(classes)) + 1.2,
                             2.3 * len(roles) + 1.0), squeeze=False, sharex=True, sharey=True)
    handles: dict[str, Any] = {}
    for i, role in enumerate(roles):
        f = _fmt_of(fmts, role)
        lo, mn, hi = math.log2(f.min_subnormal), math.log2(f.min_normal), math.log2(f.max)
        for j, cls in enumerate(classes):
            ax = axes[i, j]
            d = h[(h.role == role) & (h.layer.map(_class_name) == cls)]
            if mn > lo:
                ax.axvspan(lo, mn, color="0.88", zorder=0)
            for x in (lo, hi):
                ax.axvline(x, color="C3", lw=1)
            for layer, g in d.groupby("layer", sort=False):
                s = g.set_index("k").value.sort_index()
                ks = np.arange(s.index.min(), s.index.max() + 1)
                v = s.reindex(ks, fill_value=0.0).to_numpy(float)
                b = block_index(layer)
                label = f"block {b}" if b is not None else layer_name(layer)
                ln = ax.stairs(np.where(v > 0, v, np.nan), np.append(ks, ks[-1] + 1), baseline=None,
                               color=colour.get(b, "C1"), lw=1.4, label=label)
                handles.setdefault(label, ln)
            if d.empty:
                ax.text(0.5, 0.5, "not quantized", ha="center", va="center", transform=ax.transAxes, color="0.3")
            ax.set_yscale("log")
            ax.set_title(f"{ROLES.get(role, role)} ({f.name}) · {cls}", fontsize=8)
            if j == 0:
                ax.set_ylabel("fraction of non-zero elements", fontsize=8)
            if i == len(roles) - 1:
                ax.set_xlabel("log2 |x·s| (binade)", fontsize=8)
    if len(handles) > 1:
        fig.legend(list(handles.values()), list(handles), loc="upper left", bbox_to_anchor=(1.0, 0.9),
                   frameon=False, fontsize=8)
    fig.suptitle(title or f"step {step}: |x·s| per binade against each format's window (red: min subnormal and "
                 "max; grey: subnormals; end bins hold everything beyond)", fontsize=9)
    fig.tight_layout()
    return fig


def _depth(layer: str, n_blocks: int) -> float | None:
    """Depth position: embeddings -1, block b at b, LM head at n_blocks; None for anything else (final LayerNorm)."""
    b = block_index(layer)
    if b is not None:
        return float(b)
    name = layer_name(layer)
    if name.endswith("embedding"):
        return -1.0
    return float(n_blocks) if name == "LM head" else None


def hp_block_gaps(index: pd.DataFrame, value: str = "final_val_loss", axis: str = "recipe") -> pd.DataFrame:
    """(where, k, seed, gap, diverged) from a study index with `hp_first=k` / `hp_last=k` recipes: `value` minus the
    same recipe without the switch (k = 0) of the same seed. Frozen-blocks controls and precision-schedule points are
    left out, and so are pairs not run yet (status other than completed / diverged); a seed whose run (or whose
    baseline's) diverged is a row with gap NaN and diverged True, never dropped. Empty when there is no such pair."""
    t = index
    if "freeze_blocks" in t:
        t = t[~t.freeze_blocks.astype(str).str.lower().isin(["true", "1"])]
    if "precision_schedule" in t:
        t = t[t.precision_schedule.astype(str).isin(["{}", "", "nan", "None"])]
    rows = []
    parsed = {r: split_hp_switches(str(r)) for r in t[axis].unique()}
    base = {(parsed[r][0], int(s)): row for r, s, row in zip(t[axis], t.seed, t.itertuples()) if not parsed[r][1]}
    for r, s, row in zip(t[axis], t.seed, t.itertuples()):
        rec, hp = parsed[r]
        for key, where in (("hp_first_blocks", "first"), ("hp_last_blocks", "last")):
            if not hp.get(key) or set(hp) - {key}:
                continue
            b = base.get((rec, int(s)))
            if b is None or {row.status, b.status} - {"completed", "diverged"}:
                continue   # not run yet (pending) or interrupted: no result, so no row
            v, bv = getattr(row, value), getattr(b, value)
            ok = row.status == "completed" and b.status == "completed" and np.isfinite(v) and np.isfinite(bv)
            rows.append({"recipe": rec, "where": where, "k": int(hp[key]), "seed": int(s),
                         "gap": float(v - bv) if ok else math.nan, "diverged": not ok})
    return pd.DataFrame(rows, columns=["recipe", "where", "k", "seed", "gap", "diverged"])


def _gap_panel(ax, gaps: pd.DataFrame) -> None:
    ax.axhline(0, color="k", lw=0.8)
    for i, ((rec, where), g) in enumerate(gaps.groupby(["recipe", "where"], sort=False)):
        s = g.groupby("k").gap.agg(["mean", "min", "max"])
        ks = np.r_[0, s.index.to_numpy(float)]
        mean, lo, hi = (np.r_[0.0, s[c].to_numpy(float)] for c in ("mean", "min", "max"))
        n_div = int(g.diverged.sum())
        lab = f"{rec}: {where} k blocks in high precision" + (f" ({n_div} diverged seed(s), not drawn)"
                                                               if n_div else "")
        ax.errorbar(ks, mean, yerr=[mean - lo, hi - mean], marker="o", capsize=3, color=f"C{i % 10}", label=lab)
    ax.set_xlabel("k blocks kept in high precision (count)")
    ax.set_ylabel("final loss − all quantized,\nsame seed (nats/token)", fontsize=8)
    ax.set_xticks(sorted({0, *gaps.k.astype(int)}))
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, fontsize=8)


def layer_sensitivity(diags: Mapping[str, pd.DataFrame] | None, gaps: pd.DataFrame | None = None, *,
                      metric: str = "sqnr_db", roles: Sequence[str] = _KINDS, title: str = "") -> Figure:
    """(d) Layer sensitivity vs depth. Top row, one panel per tensor (X, W, dY): the numerics monitor's quantization
    SQNR (dB; mean over the diagnostic steps) at each depth (embeddings, block 0..n−1, LM head where they are
    quantized), one line per run (format) through the mean over the block's Linears, bars over their min..max.
    With `gaps` (hp_block_gaps of a study with hp_first / hp_last rows): a bottom panel with the final loss gap of
    keeping the first / last k blocks in high precision against the all-quantized recipe, mean over seeds with
    the seeds' min..max, as the NVFP4 report (arXiv 2509.25149, App. A.3) chose its BF16 layers. Either part may be
    missing (a study trained with diagnostics off has gaps only), not both."""
    frames = {k: d[(d.metric == metric) & d.role.isin(roles)] for k, d in (diags or {}).items() if d is not None}
    frames = {k: d for k, d in frames.items() if len(d)}
    with_gaps = gaps is not None and len(gaps) > 0
    if not frames and not with_gaps:
        raise ValueError(f"no {metric} rows in any run (the numerics monitor was off, or nothing is quantized) and "
                         "no hp_first / hp_last gaps: nothing to draw")
    if not frames:
        fig, ax = plt.subplots(figsize=(9, 3.6))
        _gap_panel(ax, gaps)
        fig.suptitle(title or "layer sensitivity: the loss gap of keeping the first / last k blocks in high "
                     "precision (mean over seeds; bars: min..max)", fontsize=9)
        fig.tight_layout()
        return fig
    layers = pd.concat(frames.values()).layer.unique()
    n_blocks = max((b for b in map(block_index, layers) if b is not None), default=-1) + 1
    roles = [r for r in roles if any((d.role == r).any() for d in frames.values())]
    fig = plt.figure(figsize=(max(9.0, 3.2 * len(roles)) + 1.6, 3.6 + (3.0 if with_gaps else 0)))
    grid = fig.add_gridspec(2 if with_gaps else 1, len(roles))
    top = [fig.add_subplot(grid[0, 0])]
    top += [fig.add_subplot(grid[0, j], sharey=top[0]) for j in range(1, len(roles))]   # one dB scale to compare
    handles: dict[str, Any] = {}
    used: set[float] = set()
    for j, role in enumerate(roles):
        ax = top[j]
        for i, (label, d) in enumerate(frames.items()):
            d = d[(d.role == role) & np.isfinite(d.value)]
            per_layer = d.groupby("layer").value.mean()
            pos = per_layer.index.map(lambda lyr: _depth(lyr, n_blocks))
            per_layer = per_layer[pos.notna()].groupby(pos[pos.notna()].astype(float))
            if not len(per_layer):
                continue
            m, lo, hi = per_layer.mean(), per_layer.min(), per_layer.max()
            used |= set(m.index)
            h = ax.errorbar(m.index, m.to_numpy(), yerr=[m - lo, hi - m], marker="os^Dvx<>"[i % 8], capsize=2,
                            color=f"C{i % 10}", label=label, lw=1)
            handles.setdefault(label, h)
        ax.set_title(ROLES.get(role, role), fontsize=9)
        if j == 0:
            ax.set_ylabel(f"{metric_name(metric)} of the tensor (dB)" if metric.endswith("_db")
                          else metric_name(metric), fontsize=8)
        else:
            ax.tick_params(labelleft=False)
    ticks = sorted(used)
    names = {-1.0: "embedding", float(n_blocks): "LM head"}
    for ax in top:
        ax.set_xticks(ticks, [names.get(t, f"block {int(t)}") for t in ticks], fontsize=8)
        ax.set_xlim(min(ticks) - 0.5, max(ticks) + 0.5)
    fig.legend(list(handles.values()), list(handles), loc="upper left", bbox_to_anchor=(1.0, 0.95), frameon=False,
               fontsize=8, title="run")
    if with_gaps:
        _gap_panel(fig.add_subplot(grid[1, :]), gaps)
    fig.suptitle(title or f"layer sensitivity vs depth: {metric_name(metric)} per tensor (mean over diagnostic steps; "
                 "bars: min..max over the block's Linears)", fontsize=9)
    fig.tight_layout()
    return fig
