"""Tables as a researcher publishes them: fixed digits per kind of number, "none" for a missing one, no negative zero,
no long scientific notation, narrow enough for a JupyterLab output column, the verdict columns first.

`Table` is a pandas DataFrame (every computation on it works as before, and a frame derived from it, `t.round(3)`,
`t[mask]`, is a plain DataFrame) whose *display* is formatted: in JupyterLab and nbconvert HTML a Styler (long cells
wrapped, the index hidden when it is only row numbers), in text (`print`, `repr`, `.to_string()`) the same strings in
blocks of columns at most WIDTH characters wide, the key columns repeated in each block. The numbers are untouched.

Digits, one definition each:

    gap(v)             a loss gap in nats: 3 significant, signed ("+0.0123", "-0.450")
    gap_ci(g, lo, hi)  a gap and its CI with one number of decimals: 3 significant of the largest of the three
    margin(v)          a margin, δ or MDE in nats: 3 decimals (2 significant below 0.001, which 3 decimals round away)
    db(v)              decibels: 1 decimal
    p_value(v)         2 significant; "< 0.001" below 0.001
    pct(v)             a percentage: 1 decimal and " %"
    loss(v)            a loss or entropy in nats: 3 decimals
    number(v)          anything else: 3 significant, plain notation from 0.001 to 10^6, else "1.23e-05"
    whole(v)           a count or rate to the unit: "1,234,568"

NaN is "none" everywhere; a value that rounds to zero prints without a sign ("0.000", never "-0.000").
"""
from __future__ import annotations

import hashlib
import io
import math
import textwrap
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd

NONE = "none"
# A JupyterLab output column of ~1000 px holds ~125 characters of its 13 px monospace font; 100 leaves room for the
# prompt gutter and a narrower window. Text tables wider than this wrap mid-row there.
WIDTH = 100
_P_FLOOR = 0.001


def missing(v: Any) -> bool:
    if v is None or v is pd.NA or v is pd.NaT:
        return True
    try:
        return bool(np.isnan(v))
    except (TypeError, ValueError):
        return False


def _unsigned_zero(text: str) -> str:
    """"-0.000" and "+0.000" -> "0.000": a value that rounds to zero has no sign."""
    try:
        return text.lstrip("+-") if float(text) == 0 else text
    except ValueError:
        return text


def _decimals(v: float, sig: int) -> int:
    """Decimals that show `sig` significant digits of |v| (0 for |v| >= 10^(sig-1))."""
    if v == 0 or not math.isfinite(v):
        return sig - 1
    return max(0, sig - 1 - math.floor(math.log10(abs(v))))


def number(v: Any, sig: int = 3) -> str:
    """3 significant digits; plain notation for 0.001 <= |v| < 10^6 and for integers, else "1.23e-05"."""
    if missing(v):
        return NONE
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (int, np.integer)):
        return f"{int(v):,}"
    v = float(v)
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if v == 0:
        return "0"
    if 1e-3 <= abs(v) < 1e6:
        text = f"{v:.{min(_decimals(v, sig), 6)}f}"
        return _unsigned_zero(text)
    return f"{v:.{sig - 1}e}"


def gap(v: Any) -> str:
    """A signed gap in nats, 3 significant ("+0.0123"); below 1e-6 in magnitude "0.000000"-like noise is "0"."""
    if missing(v):
        return NONE
    v = float(v)
    if abs(v) < 1e-6:
        return "0"
    return _unsigned_zero(f"{v:+.{min(_decimals(v, 3), 6)}f}")


def gap_ci(g: Any, lo: Any, hi: Any) -> str:
    """"+0.0123 [+0.0081, +0.0165]": the CI's decimals follow the largest of the three at 3 significant, so the
    bounds line up with the gap; without a CI (n = 1) the gap alone."""
    if missing(g) or missing(lo) or missing(hi):
        return gap(g)
    vals = [float(x) for x in (g, lo, hi)]
    d = min(_decimals(max(abs(x) for x in vals) or 1.0, 3), 6)

    def one(x: Any) -> str:
        return _unsigned_zero(f"{float(x):+.{d}f}")

    return f"{one(g)} [{one(lo)}, {one(hi)}]"


def margin(v: Any) -> str:
    """A margin, δ or MDE in nats: 3 decimals; below 0.001 (which 3 decimals would print as 0.000) 2 significant."""
    if missing(v):
        return NONE
    v = float(v)
    if v != 0 and abs(v) < 0.001:
        return f"{v:.{_decimals(v, 2)}f}" if abs(v) >= 1e-6 else f"{v:.1e}"
    return _unsigned_zero(f"{v:.3f}")


def db(v: Any) -> str:
    """Decibels, 1 decimal."""
    return NONE if missing(v) else _unsigned_zero(f"{float(v):.1f}")


def p_value(v: Any) -> str:
    """2 significant digits, "< 0.001" below 0.001."""
    if missing(v):
        return NONE
    v = float(v)
    if v < _P_FLOOR:
        return f"< {_P_FLOOR:g}"
    text = f"{v:.{_decimals(v, 2)}f}"
    return "1.0" if float(text) == 1 else text   # 0.9995 rounds up: "1.0", not "1.00"


def pct(v: Any) -> str:
    """A percentage (already in %), 1 decimal."""
    return NONE if missing(v) else _unsigned_zero(f"{float(v):.1f}") + " %"


def loss(v: Any) -> str:
    """A loss or entropy in nats, 3 decimals."""
    return NONE if missing(v) else _unsigned_zero(f"{float(v):.3f}")


def whole(v: Any) -> str:
    """A count or rate shown to the unit with thousands separators ("1,234,568" tokens/s)."""
    return NONE if missing(v) else _unsigned_zero(f"{float(v):,.0f}")


def _integral(s: pd.Series) -> bool:
    x = pd.to_numeric(s, errors="coerce").dropna()
    return (len(x) > 0 and bool(np.all(np.isfinite(x))) and bool((x == np.round(x)).all())
            and bool((x.abs() < 1e15).all()))


def formatter_for(col: Any, series: pd.Series) -> Callable[[Any], str]:
    """The digits of a column from its name and values: p-values, dB, gaps, margins, percentages and losses by name
    (p_*, *_db / dB, gap*, mde / delta / δ / margin, *pct / %, *loss* / entropy / nats), integer-valued columns as
    integers, anything else `number`."""
    name = str(col).lower()
    words = name.replace("/", " ").replace("_", " ").replace("[", " ").split()
    if series.dtype == bool:
        return number
    if not pd.api.types.is_numeric_dtype(series):
        return lambda v: NONE if missing(v) else number(v) if isinstance(v, (int, float, np.number)) else str(v)
    if words and (words[0] == "p" or "p-value" in name):
        return p_value
    if "db" in words:
        return db
    if "pct" in words or "%" in name:
        return pct
    if any(w in words for w in ("mde", "delta", "δ", "margin", "bound")):
        return margin
    if "gap" in words:
        return gap
    if _integral(series) and not any(w in words for w in ("loss", "entropy", "nats")):
        return lambda v: NONE if missing(v) else f"{int(v):,}"
    if any(w in words for w in ("loss", "entropy", "nats")):
        return loss
    return number


class Table(pd.DataFrame):
    """A DataFrame whose display is formatted (see the module docstring); `formats` maps columns to a formatter
    (else `formatter_for`), `keys` are repeated in every text block, `caption` heads the table."""

    _metadata = ["_formats", "_keys", "_caption"]

    @property
    def _constructor(self):   # derived frames are plain DataFrames: a computation never inherits display rules
        return pd.DataFrame

    def formatted(self) -> pd.DataFrame:
        """The display strings: one formatter per column; columns with no value in any row left out (named in
        `empty_columns`)."""
        fmts = getattr(self, "_formats", None) or {}
        out = pd.DataFrame(index=self.index)
        for c in self.columns:
            s = self[c]
            f = fmts.get(c) or formatter_for(c, s)
            out[c] = [f(v) for v in s]
        return out[[c for c in out.columns if c not in self.empty_columns()]]

    def empty_columns(self) -> list:
        return [c for c in self.columns
                if len(self) and all(missing(v) or (isinstance(v, str) and v in ("", NONE)) for v in self[c])]

    def _show_index(self) -> bool:
        return not (isinstance(self.index, pd.RangeIndex) and self.index.name is None)

    def _note(self) -> str:
        empty = self.empty_columns()
        return f"no value in any row (e.g. one seed: no test): {', '.join(map(str, empty))}" if empty else ""

    def _repr_html_(self) -> str:
        f = self.formatted()
        uuid = hashlib.sha1(f.to_csv().encode()).hexdigest()[:8]   # stable: re-executed notebooks diff cleanly
        st = f.style.set_uuid(uuid)
        if not self._show_index():
            st = st.hide(axis="index")
        st = st.set_table_styles([
            {"selector": "td, th", "props": "white-space: normal; max-width: 22em; text-align: right; "
                                             "font-variant-numeric: tabular-nums;"},
            {"selector": "caption", "props": "caption-side: top; text-align: left;"}])
        cap = " ".join(x for x in (getattr(self, "_caption", "") or "", self._note()) if x)
        if cap:
            st = st.set_caption(cap)
        return st.to_html()

    def to_string(self, buf: Any = None, *args: Any, index: bool | None = None, width: int | None = None,
                  **kw: Any) -> str | None:
        """The formatted table as text in blocks of at most `width` (WIDTH) characters. Any other pandas
        to_string argument (formatters, float_format, ...) asks for pandas' own rendering of the raw numbers."""
        if args or kw:
            return pd.DataFrame(self).to_string(buf, *args, index=True if index is None else index, **kw)
        text = self._text(self._show_index() if index is None else index, width or WIDTH)
        if buf is None:
            return text
        (open(buf, "w") if isinstance(buf, str) else buf).write(text)
        return None

    def _text(self, index: bool, width: int) -> str:
        f = self.formatted()
        keys = [k for k in (getattr(self, "_keys", None) or []) if k in f.columns]
        if index:
            f = f.reset_index()
            f[f.columns[0]] = f[f.columns[0]].map(str)   # index labels need not be strings (an int index)
            keys = [f.columns[0], *keys]   # the index column leads every block
        widths = {c: max(len(str(c)), *(len(v) for v in f[c])) if len(f) else len(str(c)) for c in f.columns}
        rest = [c for c in f.columns if c not in keys]
        base = sum(widths[k] + 2 for k in keys)
        blocks, cur, used = [], [], base
        for c in rest:
            if cur and used + widths[c] + 2 > width:
                blocks.append(cur)
                cur, used = [], base
            cur.append(c)
            used += widths[c] + 2
        blocks.append(cur)
        out = io.StringIO()
        cap = getattr(self, "_caption", "") or ""
        if cap:   # wrapped like the rows: a caption is no wider than the table may be
            out.write("\n".join(textwrap.fill(line, width) for line in cap.splitlines()) + "\n")
        for i, b in enumerate(blocks):
            if i:
                out.write("\n\n")
            out.write(f[[*keys, *b]].to_string(index=False))
        if self._note():
            out.write("\n" + self._note())
        return out.getvalue()

    def __repr__(self) -> str:
        return self._text(self._show_index(), WIDTH)


def table(frame: pd.DataFrame, formats: Mapping[Any, Callable[[Any], str]] | None = None, *,
          first: Sequence[Any] = (), keys: Sequence[Any] = (), caption: str = "") -> Table:
    """`frame` as a Table: the `first` columns moved to the front (those present, e.g. the verdict), `formats`
    per column (else by name: formatter_for), `keys` repeated in each text block, `caption` above it."""
    cols = [*(c for c in first if c in frame.columns), *(c for c in frame.columns if c not in first)]
    t = Table(frame[cols])
    t._formats, t._keys, t._caption = dict(formats or {}), list(keys), caption
    return t


__all__ = ["NONE", "WIDTH", "Table", "table", "formatter_for", "number", "gap", "gap_ci", "margin", "db", "p_value",
           "pct", "loss", "whole"]
