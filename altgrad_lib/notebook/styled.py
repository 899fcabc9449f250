"""Tables as a paper prints them: a pandas Styler with digits chosen by what a column holds.

    styled(df) -> Styler      "none" for NaN, no negative zero, digits by column kind (cell_text):
        loss      a loss (nats/token), 3 decimals           6.830
        gap       a difference of losses, 3 significant     +0.0123, -0.000451
        dB        decibels (SQNR, SNR), 1 decimal            26.5
        p         a p-value, 2 significant, "< 0.001"        0.031
        int       a count                                    1,997
        float     anything else, 3 significant               0.000312
The kind of a column comes from its name (column_kind); `kinds` overrides it. HTML, so JupyterLab wraps no row.
"""
from __future__ import annotations

import math
import re
from typing import Any, Mapping

import numpy as np
import pandas as pd
from pandas.io.formats.style import Styler

_KINDS = (("dB", re.compile(r"(^|[_ ])(db|sqnr|snr)([_ ]|$)", re.I)),
          ("p", re.compile(r"^p(_|$| )", re.I)),
          ("gap", re.compile(r"gap|margin|delta|mde|bound|^ci_|_lo$|_hi$|drop|below", re.I)),
          ("loss", re.compile(r"loss|entropy", re.I)))
_STYLE = [{"selector": "td, th", "props": "padding: 2px 8px; font-size: 0.9em; white-space: nowrap"}]


def column_kind(name: Any, values: pd.Series) -> str:
    """"dB", "p", "gap", "loss", "int", "float" or "text", from the column's name and dtype."""
    if not pd.api.types.is_numeric_dtype(values) or pd.api.types.is_bool_dtype(values):
        return "text"
    if pd.api.types.is_integer_dtype(values):
        return "int"
    label = " ".join(map(str, name)) if isinstance(name, tuple) else str(name)
    return next((kind for kind, pat in _KINDS if pat.search(label)), "float")


def cell_text(v: Any, kind: str) -> str:
    """One cell as text: "none" for a missing value, never "-0"."""
    if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA:
        return "none"
    if kind == "text" or isinstance(v, (str, bool, np.bool_)):
        return str(v)
    v = float(v)
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if kind == "int":
        return f"{int(v):,}"
    if kind == "p":
        text = "< 0.001" if v < 0.001 else f"{v:.2g}"
    elif kind == "dB":
        text = f"{v:.1f}"
    elif kind == "loss":
        text = f"{v:.3f}"
    elif kind == "gap":
        text = f"{v:+.3g}" if v != 0 else "0"
    else:
        text = f"{v:.3g}"
    return "0" if re.fullmatch(r"[-+]?0(\.0*)?(e[-+]?0+)?", text) else text


def styled(df: pd.DataFrame, kinds: Mapping[str, str] | None = None, *, caption: str = "") -> Styler:
    """`df` as a Styler with the digits of each column's kind (a Series becomes one column)."""
    if isinstance(df, pd.Series):
        df = df.to_frame()
    kinds = {c: (kinds or {}).get(c) or column_kind(c, df[c]) for c in df.columns}
    s = df.style.format({c: (lambda v, k=k: cell_text(v, k)) for c, k in kinds.items()})
    s = s.format_index(lambda v: "none" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v))
    s = s.set_table_styles(_STYLE)
    return s.set_caption(caption) if caption else s
