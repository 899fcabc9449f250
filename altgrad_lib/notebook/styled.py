"""Tables as a paper prints them, as a pandas Styler: the digits are table_view's (one copy of the rules).

    styled(df) -> Styler      "none" for NaN, no negative zero, digits by column (table_view.formatter_for:
                              losses 3 decimals, gaps 3 significant, dB 1 decimal, p 2 significant / "< 0.001",
                              margins in nats, counts with thousands separators); `kinds` names a column's kind
                              where its name does not say it (KINDS)
HTML, so JupyterLab wraps no row; table_view.Table is the same digits as a DataFrame that also prints as text.
"""
from __future__ import annotations

from typing import Any, Mapping

import pandas as pd
from pandas.io.formats.style import Styler

from altgrad_lib.notebook import table_view as tv

# a column kind -> its cell formatter (table_view's functions)
KINDS = {"loss": tv.loss, "gap": tv.gap, "margin": tv.margin, "dB": tv.db, "p": tv.p_value, "pct": tv.pct,
         "int": tv.whole, "float": tv.number, "text": lambda v: tv.NONE if tv.missing(v) else str(v)}
_STYLE = [{"selector": "td, th", "props": "padding: 2px 8px; font-size: 0.9em; white-space: nowrap"}]


def styled(df: pd.DataFrame, kinds: Mapping[Any, str] | None = None, *, caption: str = "") -> Styler:
    """`df` as a Styler with each column's digits (a Series becomes one column); `kinds`: column -> KINDS key."""
    if isinstance(df, pd.Series):
        df = df.to_frame()
    bad = {c: k for c, k in (kinds or {}).items() if k not in KINDS}
    if bad:
        raise ValueError(f"styled: kinds={bad} is invalid; valid choices: {tuple(KINDS)}")
    fmt = {c: KINDS[kinds[c]] if kinds and c in kinds else tv.formatter_for(c, df[c]) for c in df.columns}
    s = df.style.format(fmt)
    s = s.format_index(lambda v: tv.NONE if tv.missing(v) else str(v))
    s = s.set_table_styles(_STYLE)
    return s.set_caption(caption) if caption else s
