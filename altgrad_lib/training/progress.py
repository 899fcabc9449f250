"""One progress bar for every long loop (tokenizing, training) that behaves in a terminal, a log and a notebook."""
from __future__ import annotations

import importlib.util
import sys
from typing import Any


def in_kernel() -> bool:
    """True inside a Jupyter kernel (JupyterLab, papermill, nbval). `ipykernel` merely being imported is not
    enough: pytest's nbval plugin imports it, and a script may too, without any front end to draw a widget."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return getattr(shell, "kernel", None) is not None


def progress_bar(total: int, *, desc: str, enabled: bool | None = None, initial: int = 0, unit: str = "it") -> Any:
    # tqdm.auto's choice, minus its warning when ipywidgets is missing: widget bar in a kernel that has
    # ipywidgets, else the text bar. Redraws are rate-limited where each one is stored: a papermill
    # notebook keeps every stderr update, and in a log file every redraw is a new line.
    kernel = in_kernel()
    if kernel and importlib.util.find_spec("ipywidgets") is not None:
        from tqdm.notebook import tqdm
        mininterval = 0.5
    else:
        from tqdm import tqdm
        mininterval = 0.2 if sys.stderr.isatty() else (5.0 if kernel else 30.0)
    return tqdm(total=total, initial=initial, desc=desc, unit=unit, disable=enabled is False, dynamic_ncols=True,
                mininterval=mininterval, file=sys.stderr, leave=True)
