"""The report `make run` writes: every executed notebook as HTML and one index page.

    build_report(entries, out_dir) -> Path     out_dir/index.html plus out_dir/<notebook>/<params>.html

An entry is one executed notebook (`ReportEntry`: its label, path, status, wall time). The index asks each
notebook's question once (the "**Question.**" paragraph of its first markdown cell) and lists its runs under it (01's
formats as rows of one question), each with its headline result and run time. The sweep's own wall time heads the
page; the sum of the runs' times is shown beside it, labelled, since runs of a sweep overlap. The headline is never
typed here: it is the text output of the notebook's cell tagged `headline` (HEADLINE_TAG), which prints one line
computed from that notebook's own results; a notebook without one, or whose run failed, says so in the index.
Figures are embedded in each page (nbconvert inlines PNG outputs as data URIs), so the report folder can be copied
or opened anywhere.
"""
from __future__ import annotations

import html
import re
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbconvert import HTMLExporter

HEADLINE_TAG = "headline"
_QUESTION = re.compile(r"\*\*Question\.\*\*\s*(.+?)(?:\n\s*\n|\Z)", re.S)


@dataclass(frozen=True)
class ReportEntry:
    label: str            # "02_bf16_baseline[cpu]"
    path: Path            # the executed notebook
    status: str = "ok"    # "ok" or "failed" (tools/sweep.py's summary)
    seconds: float | None = None   # wall time; None: papermill's recorded duration
    error: str = ""


def question(nb: nbformat.NotebookNode) -> str:
    """The "**Question.**" paragraph of the first markdown cell, on one line; "" when there is none."""
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            m = _QUESTION.search(cell.source)
            return " ".join(m.group(1).split()) if m else ""
    return ""


def headline_text(nb: nbformat.NotebookNode) -> str | None:
    """The text the cell tagged `headline` printed (stream or text/plain output); None without such a cell or
    output (a notebook that failed before reaching it)."""
    for cell in nb.cells:
        if cell.cell_type == "code" and HEADLINE_TAG in cell.metadata.get("tags", []):
            text = "".join(o.get("text", "") if o.output_type == "stream" else o.get("data", {}).get("text/plain", "")
                           for o in cell.get("outputs", []) if o.output_type in ("stream", "execute_result",
                                                                                 "display_data"))
            return text.strip() or None
    return None


def wall_seconds(nb: nbformat.NotebookNode) -> float | None:
    """The run time papermill recorded in the notebook's metadata."""
    d = nb.metadata.get("papermill", {}).get("duration")
    return float(d) if d is not None else None


def _markdown_code(text: str) -> str:
    """Escaped text with `code` spans as <code>, *emphasis* and **bold** as <em> and <b>."""
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))
    out = re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", out)
    return re.sub(r"(?<![\w*])\*([^*\s][^*]*)\*(?![\w*])", r"<em>\1</em>", out)


def notebook_of(entry: ReportEntry) -> str:
    """The notebook an entry ran: its label up to the parameters ("01_formats[E4M3]" -> "01_formats")."""
    return entry.label.split("[", 1)[0]


def _index_row(entry: ReportEntry, page: str | None, span: int) -> tuple[str, float | None]:
    """One run's row; `span` > 0 opens its notebook's group with the question cell spanning that many rows."""
    nb = nbformat.read(entry.path, as_version=4) if entry.path.exists() else None
    q = question(nb) if nb is not None else ""
    head = headline_text(nb) if nb is not None else None
    secs = entry.seconds if entry.seconds is not None else (wall_seconds(nb) if nb is not None else None)
    if entry.status != "ok":
        result = f'<span class="fail">failed: {html.escape(entry.error or "see the notebook")}</span>'
    elif head is None:
        result = '<span class="fail">no headline (the notebook has no cell tagged "headline")</span>'
    else:
        result = "<br>".join(html.escape(line) for line in head.splitlines())
    link = f'<a href="{html.escape(page)}">{html.escape(entry.label)}</a>' if page else html.escape(entry.label)
    wall = f"{secs:.1f}" if secs is not None else "none"
    ask = f'<td rowspan="{span}">{_markdown_code(q) or "none"}</td>' if span else ""
    return f'<tr><td>{link}</td>{ask}<td>{result}</td><td class="num">{wall}</td></tr>', secs


_STYLE = """
body { font-family: sans-serif; max-width: 75em; margin: 2em auto; padding: 0 1em; color: #222; }
table { border-collapse: collapse; width: 100%; }
th, td { border-bottom: 1px solid #ccc; padding: 0.5em; vertical-align: top; text-align: left; font-size: 0.9em; }
th { background: #f3f3f3; }
td.num { text-align: right; white-space: nowrap; }
code { background: #f3f3f3; padding: 0 0.2em; }
.fail { color: #b00; }
"""


def build_report(entries: list[ReportEntry], out_dir: str | Path, *, title: str = "AltGrad report",
                 subtitle: str = "", wall_seconds: float | None = None) -> Path:
    """Write each executed notebook as HTML and out_dir/index.html; returns the index's path.

    wall_seconds: the sweep's own wall time (None: not measured, only the runs' sum is shown). Entries of one
    notebook are grouped under its question in the order they first appear."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    exporter = HTMLExporter()   # the lab template; image outputs inlined as data URIs
    order = list(dict.fromkeys(notebook_of(e) for e in entries))
    entries = sorted(entries, key=lambda e: order.index(notebook_of(e)))   # stable: a notebook's runs keep order
    counts = {nb: sum(notebook_of(e) == nb for e in entries) for nb in order}
    rows, total, opened = [], 0.0, set()
    for entry in entries:
        page = None
        if entry.path.exists():
            body, _ = exporter.from_filename(str(entry.path))
            rel = Path(entry.path.parent.name) / entry.path.with_suffix(".html").name
            (out_dir / rel).parent.mkdir(parents=True, exist_ok=True)
            (out_dir / rel).write_text(body, encoding="utf-8")
            page = rel.as_posix()
        nb_name = notebook_of(entry)
        row, secs = _index_row(entry, page, 0 if nb_name in opened else counts[nb_name])
        opened.add(nb_name)
        rows.append(row)
        total += secs or 0.0
    n_failed = sum(e.status != "ok" for e in entries)
    index = out_dir / "index.html"
    index.write_text(
        f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{_STYLE}</style></head><body>\n<h1>{html.escape(title)}</h1>\n"
        + (f"<p>{html.escape(subtitle)}</p>\n" if subtitle else "")
        + f"<p>{len(entries)} run(s) of {len(order)} notebook(s), {n_failed} failed; "
        + (f"the sweep took {wall_seconds:.1f} s of wall time (its runs' times sum to {total:.1f} s: runs overlap)"
           if wall_seconds is not None else f"the runs' times sum to {total:.1f} s (the sweep's wall time was not "
           "measured)") + ".</p>\n"
        "<table><thead><tr><th>run</th><th>question</th><th>headline result</th><th>run time (s)</th></tr>"
        "</thead><tbody>\n" + "\n".join(rows) + "\n</tbody></table>\n</body></html>\n", encoding="utf-8")
    return index
