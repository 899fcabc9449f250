"""Figures of a study and the ipywidgets dashboard of notebook 06 (study analysis).

Inputs are the tidy frames of the study layer: the index (study.csv, one row per run) and the long metrics
frame (studies.results.load_metrics: run, axis columns, step, name, value). Every figure function returns a
matplotlib Figure, so the same code draws in JupyterLab, under papermill and in tests.

`Dashboard` wires dropdowns (metric, colour-by axis, and one filter per axis) to a redraw; `redraw()` is
what the widgets call, so tests drive it by setting `.value` on the dropdowns. Under papermill (no widget
frontend) `show()` still carries the current figure as a static image, so the executed notebook is complete.
`DrillDown` does the same from one configuration (a format) to its weight histograms (the weights monitor's
`hist.log2w:<k>` rows) and its gradient flow (the gradients monitor's per-layer `grad_norm`); statically it draws
every configuration. `show_live` puts a widget and its static figure in one output, so a live kernel shows the
widget and a saved or untrusted notebook the figure (tests/test_notebook_dashboard_kernel.py runs a real kernel).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from altgrad_lib.notebook import table_view as tv
from altgrad_lib.notebook.names import (
    FRACTIONS,
    column_label,
    layer_name,
    metric_label,
    metric_name,
)
from altgrad_lib.notebook.plots_diagnostics import constant_panel, constant_text

ALL = "(all)"


def config_label(frame: pd.DataFrame, keys: Sequence[str]) -> pd.Series:
    """One readable name per configuration: the values of `keys` joined by spaces; a bool key shows its name when
    True ("hp freeze_blocks") and nothing when False; "all" without keys. Two configurations get one name only if
    their keys agree (the study refuses two recipes under one name at load)."""
    if not keys:
        return pd.Series("all", index=frame.index)

    def part(v: Any, k: str) -> str:
        return k if v is True or v == "True" else "" if v is False or v == "False" else str(v)

    parts = [frame[k].map(lambda v, k=k: part(v, k)) for k in keys]
    return pd.concat(parts, axis=1).agg(lambda r: " ".join(x for x in r if x), axis=1)


def group_keys(frame: pd.DataFrame, hue: str, keys: Sequence[str] = ()) -> list[str]:
    """The columns that aggregate runs: `hue` plus every other configuration key (`keys`, seeds excluded) that takes
    more than one value in `frame`, so runs of different configurations (a frozen-blocks control and its baseline,
    two optimizers under one recipe) are never pooled into one line or row."""
    rest = [k for k in keys if k not in (hue, "seed") and k in frame and frame[k].astype(str).nunique() > 1]
    return [hue, *rest]


def curves(metrics: pd.DataFrame, metric: str, hue: str, title: str = "", keys: Sequence[str] = ()) -> Figure:
    """One line per configuration: mean over the runs (seeds) of that configuration at each step, band = min..max.

    Lines are keyed by `hue` and by every other configuration key in `keys` that varies (group_keys): a figure "by
    recipe" of a study with a frozen-blocks control draws `hp` and `hp freeze_blocks` as two lines."""
    fig, ax = plt.subplots(figsize=(10, 4))   # + the legend column
    m = metrics[metrics.name == metric]
    cols = group_keys(m, hue, keys)
    for i, (level, g) in enumerate(m.groupby(cols, sort=True, dropna=False)):
        level = level if isinstance(level, tuple) else (level,)
        rest = config_label(pd.DataFrame([level[1:]], columns=cols[1:]), cols[1:]).iloc[0] if len(cols) > 1 else ""
        stat = g.groupby("step").value.agg(["mean", "min", "max", "count"])
        # "config" (config_label) names every key already: "hp freeze_blocks", not "config=hp freeze_blocks | hp …"
        head = str(level[0]) if hue == "config" else f"{hue}={level[0]}"
        rest = "" if rest == str(level[0]) else rest
        label = f"{head}{' | ' + rest if rest else ''} (n={int(stat['count'].max())})"
        ax.plot(stat.index, stat["mean"], color=f"C{i % 10}", label=label)
        if (stat["count"] > 1).any():
            ax.fill_between(stat.index, stat["min"], stat["max"], color=f"C{i % 10}", alpha=0.2, lw=0)
    ax.set_xlabel("step")
    ax.xaxis.get_major_locator().set_params(integer=True)   # steps are whole numbers: no 2.5 ticks
    ax.set_ylabel(metric_label(metric) if metric_label(metric) != metric else f"{metric} (as logged)")
    ax.set_title(title or f"{metric_name(metric)} by {hue}, per configuration (mean over seeds, band = min..max)",
                 fontsize=9)
    if len(m):
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    else:
        ax.text(0.5, 0.5, f"no '{metric}' rows for this selection", ha="center", va="center", transform=ax.transAxes)
    fig.tight_layout()
    return fig


def parallel_coordinates(frame: pd.DataFrame, label: str, columns: Sequence[str]) -> Figure:
    """One line per `label` level (mean over its runs) through `columns`, each axis scaled to its own min..max.

    Columns that are missing or all NaN (e.g. diagnostics the runs did not record) are left out and named
    in the title, so an absent measurement is never drawn as a value.
    """
    present = [c for c in columns if c in frame and frame[c].notna().any()]
    missing = [c for c in columns if c not in present]
    means = frame.groupby(label)[present].mean(numeric_only=True) if present else pd.DataFrame()
    # an axis on which every configuration has the same mean says nothing as a line: named in the title instead
    constant = [c for c in present if len(means) and means[c].min() == means[c].max()]
    present = [c for c in present if c not in constant]
    fig, ax = plt.subplots(figsize=(10, 4))   # + the legend column

    def name(c: str) -> str:
        return column_label(c)

    if len(present) >= 1 and len(means):
        lo, hi = means[present].min(), means[present].max()
        scaled = (means[present] - lo) / (hi - lo)
        for i, (lv, row) in enumerate(scaled.iterrows()):
            ax.plot(range(len(present)), row.to_numpy(), marker="o", color=f"C{i}", label=str(lv))
        ax.set_xticks(range(len(present)), [f"{name(c)}\n[{lo[c]:.3g} .. {hi[c]:.3g}]" for c in present],
                      fontsize=8)
        ax.set_yticks([0, 1], ["min", "max"])
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    title = f"per {label}: mean over runs, each axis scaled to its range"
    if constant:
        title += "\nequal in every " + label + ": " + ", ".join(f"{name(c)} = {means[c].iloc[0]:.3g}" for c in constant)
    ax.set_title(title + (f"\nnot recorded: {', '.join(name(c) for c in missing)}" if missing else ""), fontsize=9)
    fig.tight_layout()
    return fig


def layer_heatmap(diag: pd.DataFrame, metric: str, role: str | None = None) -> Figure:
    """Layer x step image of one diagnostic metric (diagnostics.csv: step, layer, role, metric, value)."""
    d = diag[(diag.metric == metric) & ((diag.role == role) if role else True)]
    table = d.pivot_table(index="layer", columns="step", values="value", aggfunc="mean")
    table = table.reindex([lyr for lyr in dict.fromkeys(d.layer) if lyr in table.index])   # depth order
    rows_h = 1 if constant_text(table.to_numpy(dtype=float)) is not None else len(table)
    fig, ax = plt.subplots(figsize=(8, max(2.5, 0.25 * rows_h + 1)))
    ax.set_title(f"{metric_name(metric)}{f' ({role})' if role else ''} per layer and step")
    if not len(table):
        constant_panel(ax, np.array([np.nan]), metric_name(metric))
    elif not constant_panel(ax, table.to_numpy(dtype=float), metric_name(metric)):
        lo = 0.0 if metric in FRACTIONS else None   # a share is never negative
        im = ax.imshow(table.to_numpy(), aspect="auto", interpolation="nearest", cmap="viridis", vmin=lo)
        ax.grid(False)   # plots.setup turns grids on: lines over an image hide cells
        ax.set_yticks(range(len(table)), [layer_name(lyr) for lyr in table.index], fontsize=7)
        steps = table.columns.to_numpy()
        ticks = np.linspace(0, len(steps) - 1, min(8, len(steps))).astype(int)
        ax.set_xticks(ticks, steps[ticks])
        fig.colorbar(im, ax=ax, label=metric_label(metric) if metric_label(metric) != metric
                     else f"{metric} (as logged)")
        ax.set_xlabel("step")
        ax.set_ylabel("layer")
    fig.tight_layout()
    return fig


# The layer x step heatmaps' metrics, most telling first: what a narrow format loses (underflow, overflow, SQNR), then
# the optimizer's grid metrics. Others stay out: counters that repeat these (flush_frac) and values whose mean over
# a layer's X / W / dY mixes units (scale, amax) say nothing more in this view.
HEATMAP_METRICS = ("underflow_frac", "overflow_frac", "sqnr_db", "stall_rate", "log2S_mean", "grad_stiffness_corr")


def heatmap_plan(diags: dict[str, pd.DataFrame], runs: dict[str, str], n_metrics: int = 4,
                 n_figures: int = 8) -> tuple[list[tuple[str, str, str]], list[tuple[str, str, str]]]:
    """Which layer x step heatmaps show something: ([(metric, config, run) to draw], [(metric, config, text) not
    drawn]). `runs`: config -> the run to show (its first seed). HEATMAP_METRICS in order, until `n_metrics` metrics
    have a panel that varies; a panel whose every cell holds one value is returned as its text ("all zero") for a
    sentence instead of a one-colour image."""
    drawn: list[tuple[str, str, str]] = []
    constant: list[tuple[str, str, str]] = []
    for metric in HEATMAP_METRICS:
        if len({m for m, _, _ in drawn}) >= n_metrics or len(drawn) >= n_figures:
            break
        for config, run in runs.items():
            d = diags.get(run)
            vals = d.value[d.metric == metric].to_numpy(dtype=float) if d is not None else np.array([])
            if not vals.size:   # not recorded: e.g. overflow of a run that quantizes nothing
                continue
            text = constant_text(vals)
            if text is not None:
                constant.append((metric, config, text))
            elif len(drawn) < n_figures:
                drawn.append((metric, config, run))
    return drawn, constant


def final_values(metrics: pd.DataFrame, names: Iterable[str]) -> pd.DataFrame:
    """Per run: the last logged value of each metric in `names` (columns = names)."""
    m = metrics[metrics.name.isin(list(names))].sort_values("step")
    return m.groupby(["run", "name"]).value.last().unstack("name").reset_index()


# Parallel-coordinates columns from diagnostics.csv: column -> (diagnostic metric, reduction over layers and roles).
DIAG_SUMMARIES = {"overflow_rate": ("overflow_frac", "mean"), "stall_rate": ("stall_rate", "mean"),
                  "stiffness_var": ("log2S_mean", "var")}


def read_run_files(index: pd.DataFrame, filename: str) -> dict[str, pd.DataFrame]:
    """run -> its `<run_dir>/<filename>` (diagnostics.csv, events.csv) for the runs of `index` that wrote one."""
    out = {}
    for r in index.itertuples():
        p = Path(r.run_dir) / filename
        if p.is_file():
            out[r.run] = pd.read_csv(p)
    return out


def diagnostic_summary(diags: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Per run, each DIAG_SUMMARIES column at the last step that recorded its metric: the mean (overflow, stall)
    or the population variance over layers (stiffness: how unevenly the grid treats the layers); NaN where the
    run did not record the metric."""
    rows = []
    for run, d in diags.items():
        row = {"run": run}
        for col, (metric, how) in DIAG_SUMMARIES.items():
            m = d[d.metric == metric]
            last = m[m.step == m.step.max()].value
            row[col] = (last.mean() if how == "mean" else last.var(ddof=0)) if len(last) else np.nan
        rows.append(row)
    return pd.DataFrame(rows, columns=["run", *DIAG_SUMMARIES])


def warning_events(events: dict[str, pd.DataFrame]) -> pd.DataFrame | None:
    """All runs' events.csv rows (with `run`) that are early warnings: "unavailable:<what>" notes are not."""
    frames = [e.assign(run=run) for run, e in events.items()]
    if not frames:
        return None
    ev = pd.concat(frames, ignore_index=True)
    return ev[~ev.kind.astype(str).str.startswith("unavailable")]


def next_gpu_hour(index: pd.DataFrame, label: Sequence[str], events: pd.DataFrame | None = None) -> tv.Table:
    """Per configuration (the `label` columns, seeds pooled): how many runs completed / diverged / failed,
    the earliest divergence step and, when early-warning events exist, the earliest warning step.

    A configuration is `stable` when every seed completed; `diverges` when any seed diverged (the warning
    lead = divergence step - first warning step says how early the diagnostics saw it coming).
    """
    label = list(label)
    g = index.groupby(label, dropna=False)
    out = pd.DataFrame({"runs": g.size(), "completed": g.status.apply(lambda s: int((s == "completed").sum())),
                        "diverged": g.status.apply(lambda s: int((s == "diverged").sum())),
                        "failed": g.status.apply(lambda s: int((s == "failed").sum())),
                        "first_divergence_step": g.diverged_at_step.min(),
                        "mean_final_val_loss": g.final_val_loss.mean()})
    if events is not None and len(events):
        first = events.groupby("run").step.min().rename("first_warning_step")
        w = index[["run", *label]].merge(first, left_on="run", right_index=True, how="left")
        out["first_warning_step"] = w.groupby(label, dropna=False).first_warning_step.min()
        out["warning_lead_steps"] = out.first_divergence_step - out.first_warning_step
    out["verdict"] = np.where(out.failed > 0, "failed (see error)", np.where(out.diverged > 0, "diverges",
                                                                             np.where(out.completed == out.runs,
                                                                                      "stable", "incomplete")))
    out = out.reset_index().sort_values(["verdict", "mean_final_val_loss"])
    return tv.table(out, first=[*label, "verdict"], keys=label)   # the verdict beside the configuration


def export_figures(figs: dict[str, Figure], out_dir: str | Path) -> list[Path]:
    """Each figure as <name>.png and <name>.svg under out_dir; returns the paths written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, fig in figs.items():
        for ext in ("png", "svg"):
            p = out / f"{name}.{ext}"
            fig.savefig(p, bbox_inches="tight")
            paths.append(p)
    return paths



# at most 110 characters: ipywidgets cuts a widget's text/plain there
LIVE_NOTE = ("interactive dashboard: run this cell in a live kernel with ipywidgets "
             "(saved or untrusted: a static figure)")


def live_box(w: Any, children: list) -> Any:
    """ipywidgets.VBox whose text form (what a saved or untrusted notebook shows instead of the widget) is one line
    saying how to get the interactive view, not the repr of every child widget."""
    box = type("LiveBox", (w.VBox,), {"__repr__": lambda self: LIVE_NOTE})
    return box(children)


def _png(fig: Figure) -> str:
    """The figure as the inline backend sends it (base64 PNG, tight bounding box)."""
    import base64

    from IPython.core.pylabtools import print_figure

    return base64.b64encode(print_figure(fig, "png", bbox_inches="tight")).decode("ascii")


def show_live(box: Any, fig: Figure | None) -> None:
    """One output for a dashboard: the widget view and, in the same bundle, the current figure as a PNG.

    A frontend draws one mimetype per output, the richest it may: JupyterLab with a live kernel draws the widget
    (whose Output holds the figure: shown once); a saved or untrusted notebook may not run widget code, so it draws
    the PNG. The line LIVE_NOTE (printed first, and the bundle's text/plain) says how to get the interactive view.
    Without `fig` the bundle is the widget alone."""
    from IPython.display import display

    print(LIVE_NOTE)
    bundle = {**box._repr_mimebundle_(), "text/plain": LIVE_NOTE}
    if fig is not None:
        bundle["image/png"] = _png(fig)
    display(bundle, raw=True)


class Dashboard:
    """Dropdowns (metric, colour by, one filter per axis) that redraw `curves` into an Output widget; every line is
    one configuration (all of `axes` but the seed), whatever the colour-by choice."""

    def __init__(self, metrics: pd.DataFrame, axes: Sequence[str], metric: str = "val/loss"):
        import ipywidgets as w

        self.metrics, self.axes = metrics, list(axes)
        names = sorted(metrics.name.unique())
        self.metric = w.Dropdown(options=names, value=metric if metric in names else names[0], description="metric")
        self.hue = w.Dropdown(options=self.axes, value=self.axes[0], description="colour by")
        self.filters = {a: w.Dropdown(options=[ALL, *sorted(metrics[a].astype(str).unique())], value=ALL,
                                      description=a) for a in self.axes}
        self.out = w.Output()
        self.fig: Figure | None = None
        for wid in (self.metric, self.hue, *self.filters.values()):
            wid.observe(lambda change: self.redraw(), names="value")
        self.redraw()

    def selection(self) -> pd.DataFrame:
        m = self.metrics
        for a, wid in self.filters.items():
            if wid.value != ALL:
                m = m[m[a].astype(str) == wid.value]
        return m

    def redraw(self) -> Figure:
        self.fig = curves(self.selection(), self.metric.value, self.hue.value, keys=self.axes)
        plt.close(self.fig)  # shown only where we display it (the inline backend would add a stale copy)
        self.out.clear_output(wait=True)
        with self.out:
            from IPython.display import display

            display(self.fig)
        return self.fig

    def widget(self) -> Any:
        import ipywidgets as w

        return live_box(w, [w.HBox([self.metric, self.hue]), w.HBox(list(self.filters.values())), self.out])

    def show(self, static: bool = True) -> None:
        """Display the widget with, if `static`, the current figure as its static form (show_live: a live kernel
        shows the widget, a saved or untrusted notebook the figure, never both)."""
        show_live(self.widget(), self.fig if static else None)



# ------------------------------------------------------------------------------------------ drill-down

LOG2W = "hist.log2w"     # monitors/weights.py: fraction of a layer's weights with floor(log2|w|) = k, role "W"
GRAD_NORM = "grad_norm"  # monitors/gradients.py: ||grad|| of each parameter before clipping, role = parameter name


def _no_data(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", wrap=True, fontsize=9, transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def drilldown_layers(diag: pd.DataFrame | None) -> list[str]:
    """Layers that have weight histograms or weight-gradient norms in `diag` (sorted)."""
    if diag is None or diag.empty:
        return []
    d = diag[(diag.metric.str.startswith(LOG2W + ":") & (diag.role == "W"))
             | ((diag.metric == GRAD_NORM) & (diag.role == "weight"))]
    return sorted(d.layer.unique())


def drilldown(diag: pd.DataFrame | None, title: str, layer: str = ALL) -> Figure:
    """Two panels for one run: left, the log2|w| histogram of each layer (or of `layer`) at the last diagnostic
    step (one layer: the first step dashed too); right, the gradient flow, ||grad W|| per layer over training (log
    scale). A panel whose rows the run did not record says so instead of drawing anything."""
    fig, (ax_w, ax_g) = plt.subplots(1, 2, figsize=(11, 5))   # legends below the panels
    diag = diag if diag is not None else pd.DataFrame(columns=["step", "layer", "role", "metric", "value"])
    pick = (lambda d: d) if layer == ALL else (lambda d: d[d.layer == layer])
    h = pick(diag[diag.metric.str.startswith(LOG2W + ":") & (diag.role == "W")])
    if h.empty:
        _no_data(ax_w, f"no weight histograms ({LOG2W}) in this run:\ntrain it with the diagnostics group 'weights'")
    else:
        h = h.assign(k=h.metric.str.slice(len(LOG2W) + 1).astype(int))
        first, last = h.step.min(), h.step.max()
        for i, (name, g) in enumerate(h.groupby("layer", sort=True)):
            for step, style in ((last, "-"), (first, "--")) if layer != ALL and first != last else ((last, "-"),):
                b = g[g.step == step].groupby("k").value.sum()
                ax_w.plot(b.index, b.to_numpy(), style, marker=".", color=f"C{i % 10}",
                          label=f"{layer_name(name)} (step {step})")
        ax_w.set_xlabel("floor(log2 |w|) (binade)")
        ax_w.set_ylabel("fraction of weights")
        ax_w.set_ylim(bottom=0)   # a share: a flat histogram must not be magnified around its level
        ax_w.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
    ax_w.set_title("weight histograms (log2 |w|)", fontsize=9)
    g = pick(diag[(diag.metric == GRAD_NORM) & (diag.role == "weight")])
    if g.empty:
        _no_data(ax_g, f"no per-layer gradient norms ({GRAD_NORM}) in this run:\n"
                       "train it with the diagnostics group 'gradients'")
    else:
        for i, (name, d) in enumerate(g.sort_values("step").groupby("layer", sort=True)):
            ax_g.plot(d.step, d.value, color=f"C{i % 10}", ls=("-", "--", ":")[i // 10 % 3], lw=1,
                      label=layer_name(name))
        ax_g.set_yscale("log")
        ax_g.set_xlabel("step")
        ax_g.xaxis.get_major_locator().set_params(integer=True)   # whole steps
        ax_g.set_ylabel("||grad W|| before clipping (L2 norm)")
        ax_g.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
    ax_g.set_title("gradient flow: weight-gradient norm per layer", fontsize=9)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


class DrillDown:
    """From a configuration (e.g. a format) to its run's weight histograms and gradient flow.

    diags: configuration label -> that configuration's diagnostics frame (None: the run wrote none);
    runs: label -> run name (for titles). Dropdowns: configuration, then layer (its options follow the run).
    """

    def __init__(self, diags: dict[str, pd.DataFrame | None], runs: dict[str, str] | None = None):
        import ipywidgets as w

        if not diags:
            raise ValueError("DrillDown: no configurations to show")
        self.diags, self.runs = diags, dict(runs or {})
        self.config = w.Dropdown(options=list(diags), value=next(iter(diags)), description="format")
        self.layer = w.Dropdown(options=[ALL], value=ALL, description="layer")
        self.out = w.Output()
        self.fig: Figure | None = None
        self._syncing = False
        self.config.observe(lambda change: self._on_config(), names="value")
        self.layer.observe(lambda change: None if self._syncing else self.redraw(), names="value")
        self._on_config()

    def _on_config(self) -> None:
        self._syncing = True   # changing the layer options must not redraw a stale layer first
        try:
            self.layer.options = [ALL, *drilldown_layers(self.diags[self.config.value])]
            self.layer.value = ALL
        finally:
            self._syncing = False
        self.redraw()

    def figure_for(self, label: str, layer: str = ALL) -> Figure:
        run = self.runs.get(label)
        return drilldown(self.diags[label], f"{label}" + (f" ({run})" if run else ""), layer)

    def redraw(self) -> Figure:
        self.fig = self.figure_for(self.config.value, self.layer.value)
        plt.close(self.fig)
        self.out.clear_output(wait=True)
        with self.out:
            from IPython.display import display

            display(self.fig)
        return self.fig

    def widget(self) -> Any:
        import ipywidgets as w

        return live_box(w, [w.HBox([self.config, self.layer]), self.out])

    def show(self, static: bool = True) -> dict[str, Figure]:
        """Display the widgets and, if `static`, one figure per configuration (all layers): the first as the widget's
        static form (show_live), the others after it; returns those figures (label -> Figure)."""
        from IPython.display import display

        first = self.config.value
        figs = {first: self.fig} if static and self.layer.value == ALL else {}
        show_live(self.widget(), figs.get(first))   # the widget's current view is the first figure's static form
        if static:
            for label in self.diags:
                if label not in figs:
                    figs[label] = self.figure_for(label)
                    plt.close(figs[label])
                    display(figs[label])
        return {label: figs[label] for label in self.diags} if static else figs
