"""Markdown reports of bench measurements (bench/results/*.md): a provenance header and pandas -> pipe tables.
No tabulate dependency; run from the repo root so `python bench/x.py` finds this file next to it."""
from __future__ import annotations

import datetime
import os
import platform
import shlex
import sys
from pathlib import Path

import pandas as pd
import torch


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def header(title: str, argv: list[str] | None = None) -> str:
    """Title, then the exact command, UTC date, torch version, CPU model, core count and load average."""
    argv = sys.argv if argv is None else argv
    load = " ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"
    return "\n".join([
        f"# {title}", "",
        f"- command: `{' '.join(shlex.quote(a) for a in ['python', *argv])}`",
        f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
        f"- torch {torch.__version__}, python {platform.python_version()}, threads {torch.get_num_threads()}",
        f"- CPU: {cpu_model()} ({os.cpu_count()} logical cores), load average (1/5/15 min) at the start: {load}",
        ""])


def _cell(v) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return "–"
    if isinstance(v, float):
        return f"{v:.3g}"
    return str(v).replace("|", "\\|")


def md_table(df: pd.DataFrame) -> str:
    cols = [str(c) for c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines) + "\n"
