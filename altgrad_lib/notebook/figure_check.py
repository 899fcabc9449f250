"""What every figure of notebook/ must get right, checked on the drawn Figure (tests/test_notebook_figures.py).

    figure_problems(fig) -> list[str]     empty when the figure passes; else one line per defect
    watch_displayed()                     in a notebook: check every figure it displays (plots.setup calls it)
    displayed_summary() -> str            "figure check: 12 figures displayed, every one passes" (or the defects),
                                          the last output of every notebook, which asserts "every one passes"

The rules:
  - dpi >= MIN_DPI (80 dpi gave 7-9 px text in the committed notebooks).
  - Every numeric axis that shows ticks is labelled with its quantity and unit: the label ends in "(unit)" or
    "[unit]", or starts with a quantity that is a plain number by its name (UNITLESS: "step", "count", "fraction
    of …"). Categorical axes (tick labels that are names: layers, recipes) need no unit. A colour bar is an axis.
  - An axis of a counted quantity (label starting with one of COUNTED: "step", "count", "seed", ...) shows only
    whole-number ticks (no "2.5" steps).
  - No image (imshow, seaborn heatmap) that is constant or all NaN: a constant panel says so in text instead.
  - No legend box over a data point: after `fig.canvas.draw()`, no vertex of a data line (nor a point of the
    straight segment between two, sampled), no scatter point and no bar lies inside the legend's window extent.
    Reference lines (axhline/axvline) and shaded spans are not data.
  - No internal name as text (titles, axis labels, tick labels, legend entries): a key of names.METRICS or
    names.COLUMNS that contains "_", "." or "/" (`ctr.sat_frac`, `val/loss`), or a layer shorthand
    (`h.0.a.c_attn`, `transformer.`).
"""
from __future__ import annotations

import re
import weakref

import numpy as np
from matplotlib.collections import PathCollection, QuadMesh
from matplotlib.figure import Figure

from altgrad_lib.notebook.names import COLUMNS, METRICS

MIN_DPI = 110
UNITLESS = ("step", "training step", "count", "fraction of", "share of", "layer", "linear layer", "recipe", "run",
            "format", "configuration", "probe point")
COUNTED = ("step", "training step", "count", "seed", "number of", "block")
_UNIT = re.compile(r"[(\[][^()\[\]]+[)\]]\s*$")
_INTERNAL = sorted((k for k in {**METRICS, **COLUMNS} if any(c in k for c in "_./")), key=len, reverse=True)
_LAYER = re.compile(r"(\btransformer\.|(?<![\w.])h\.\d+\.)")


def label_ok(label: str) -> bool:
    """A quantity with its unit: "... (unit)" / "... [unit]", or a unitless quantity named as such."""
    s = label.strip()
    return bool(_UNIT.search(s)) or s.lower().startswith(UNITLESS)


def internal_names(text: str) -> list[str]:
    """The metric keys and layer shorthands `text` shows."""
    found = [k for k in _INTERNAL if re.search(rf"(?<![\w./]){re.escape(k)}(?![\w/])", text)]
    found += _LAYER.findall(text)
    return found


def _is_colorbar(ax) -> bool:
    return getattr(ax, "_colorbar", None) is not None


def _number(text: str) -> bool:
    """A tick label of a numeric axis: "0.5", "−3", "1e-3", mathtext "$\\mathdefault{2^{-3}}$", a hex code."""
    t = re.sub(r"\\mathdefault|\\times|[${}\s]", "", text.replace("\u2212", "-"))
    return bool(re.fullmatch(r"[-+0-9.eE^·×]+|0x[0-9a-fA-F]+", t))


def _categorical(axis) -> bool:
    """Tick labels that are names (layers, recipes): that axis has no quantity to label."""
    return any(not _number(t.get_text()) for t in axis.get_ticklabels() if t.get_text())


def _shows_ticks(axis) -> bool:
    return axis.get_visible() and any(t.get_visible() and t.get_text() for t in axis.get_ticklabels())


def _data_points(ax) -> np.ndarray:
    """Display coordinates of the data of `ax` (lines with their segments sampled, scatter points, bar boxes)."""
    pts = []
    for ln in ax.lines:
        if not ln.get_visible() or ln.get_transform() is not ax.transData:
            continue   # axhline/axvline: a reference, drawn in axes coordinates on one axis
        xy = ln.get_transform().transform(np.asarray(ln.get_xydata(), float))
        xy = xy[np.isfinite(xy).all(1)]
        if ln.get_linestyle() not in ("None", "", " ") and len(xy) > 1:
            t = np.linspace(0, 1, 12)[:, None, None]
            xy = (xy[:-1][None] * (1 - t) + xy[1:][None] * t).reshape(-1, 2)
        pts.append(xy)
    for c in ax.collections:
        if isinstance(c, PathCollection) and c.get_offset_transform() is ax.transData and c.get_visible():
            pts.append(ax.transData.transform(np.asarray(c.get_offsets(), float)))
    for p in ax.patches:
        if p.get_visible() and p.get_data_transform() is ax.transData:
            b = p.get_window_extent()
            xs, ys = np.linspace(b.x0, b.x1, 5), np.linspace(b.y0, b.y1, 5)
            pts.append(np.array([(x, y) for x in xs for y in ys]))
    pts = [p for p in pts if len(p)]
    if not pts:
        return np.zeros((0, 2))
    xy = np.concatenate(pts)
    box = ax.get_window_extent()   # only what is drawn inside the axes can be covered
    keep = (xy[:, 0] >= box.x0) & (xy[:, 0] <= box.x1) & (xy[:, 1] >= box.y0) & (xy[:, 1] <= box.y1)
    return xy[np.isfinite(xy).all(1) & keep]


def figure_problems(fig: Figure) -> list[str]:
    out = []
    if fig.dpi < MIN_DPI:
        out.append(f"dpi {fig.dpi:g} < {MIN_DPI}")
    fig.canvas.draw()
    texts = [("suptitle", fig._suptitle.get_text() if fig._suptitle else "")]
    for i, ax in enumerate(fig.axes):
        where = f"axes {i}"
        if _is_colorbar(ax):
            axis = ax.yaxis if ax.get_ylabel() or not ax.get_xlabel() else ax.xaxis
            lab = axis.get_label().get_text()
            if not label_ok(lab):
                out.append(f"{where} (colour bar): label {lab!r} names no unit")
            texts.append((f"{where} colour bar label", lab))
            continue
        texts += [(f"{where} title", ax.get_title()), (f"{where} x label", ax.get_xlabel()),
                  (f"{where} y label", ax.get_ylabel())]
        texts += [(f"{where} tick label", t.get_text()) for t in ax.get_xticklabels() + ax.get_yticklabels()]
        for name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            if _shows_ticks(axis) and not _categorical(axis):
                lab = axis.get_label().get_text()
                if not label_ok(lab):
                    out.append(f"{where}: {name} label {lab!r} names no unit")
                if lab.lower().startswith(COUNTED) and axis.get_scale() == "linear":
                    # the ticks drawn, and those the locator would draw over 0..20 (a 20-step CI run): real data
                    # with other limits must not bring half steps the synthetic gallery data happened to avoid
                    lo, hi = sorted(axis.get_view_interval())
                    drawn = [v for v in axis.get_ticklocs() if lo <= v <= hi]
                    frac = [float(v) for v in [*drawn, *axis.get_major_locator().tick_values(0, 20)]
                            if abs(v - round(v)) > 1e-9]
                    if frac:
                        out.append(f"{where}: {name} ticks {sorted(set(frac))[:4]} are not whole numbers on a "
                                   f"counted axis ({lab!r}): set an integer locator")
        for art in ax.images + [c for c in ax.collections if isinstance(c, QuadMesh)]:
            a = np.ma.masked_invalid(np.ma.asarray(art.get_array(), float))
            if a.count() == 0:
                out.append(f"{where}: image is all NaN")
            elif a.min() == a.max():
                out.append(f"{where}: image is constant ({a.min():g}); say so in text instead")
        leg = ax.get_legend()
        if leg is not None and leg.get_visible():
            texts += [(f"{where} legend", t.get_text()) for t in leg.get_texts()]
            texts.append((f"{where} legend title", leg.get_title().get_text()))
            box = leg.get_window_extent().padded(-1)
            xy = _data_points(ax)
            inside = ((xy[:, 0] > box.x0) & (xy[:, 0] < box.x1) & (xy[:, 1] > box.y0) & (xy[:, 1] < box.y1))
            if inside.any():
                out.append(f"{where}: legend covers {int(inside.sum())} data points")
    for leg in fig.legends:
        texts += [("figure legend", t.get_text()) for t in leg.get_texts()]
    for where, t in texts:
        bad = internal_names(t)
        if bad:
            out.append(f"{where} {t!r} shows internal names {bad}")
    return out


_SHOWN: list[tuple[str, list[str]]] = []   # (title, problems) of each figure this kernel displayed
# Figures already counted: a frontend may format one figure twice (nbval's kernel does), which is one figure. A weak
# set, so a closed figure's id reused by a new one is not mistaken for it.
_COUNTED: "weakref.WeakSet[Figure]" = weakref.WeakSet()


def _title(fig: Figure) -> str:
    t = fig._suptitle.get_text() if fig._suptitle else ""
    return t or next((ax.get_title() for ax in fig.axes if ax.get_title()), "") or "untitled figure"


def watch_displayed() -> bool:
    """In IPython, run figure_problems on every figure the kernel displays (inline `plt.show`, the figure a cell
    returns, `display(fig)`): the PNG formatter of Figure is wrapped. False outside IPython (nothing to watch)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    ip = get_ipython()
    if ip is None or not hasattr(ip, "display_formatter"):
        return False
    import matplotlib.pyplot as plt   # here: figure_check itself needs no pyplot

    plt.close(plt.figure())   # loads the backend, which registers its PNG formatter for Figure
    png = ip.display_formatter.formatters["image/png"]
    try:
        draw = png.lookup_by_type(Figure)
    except KeyError:
        return False
    if getattr(draw, "_figure_check", False):   # setup called twice
        return True

    def checked(fig):
        if fig not in _COUNTED:
            _COUNTED.add(fig)
            try:
                problems = figure_problems(fig)
            except Exception as e:   # a checker bug must not hide the figure
                problems = [f"figure check raised {type(e).__name__}: {e}"]
            _SHOWN.append((_title(fig), problems))
        return draw(fig)

    checked._figure_check = True
    png.for_type(Figure, checked)
    return True


def displayed_summary() -> str:
    """One line for the figures displayed so far, then one per figure with a defect."""
    if not _SHOWN:
        return "figure check: no figure displayed"
    bad = [(t, p) for t, p in _SHOWN if p]
    head = f"figure check: {len(_SHOWN)} figures displayed, " + (
        "every one passes" if not bad else f"{len(bad)} with defects:")
    return "\n".join([head, *(f"  {' '.join(t.split())}: {'; '.join(p)}" for t, p in bad)])
