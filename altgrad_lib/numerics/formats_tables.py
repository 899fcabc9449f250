"""What a FloatFormat shows in a notebook: its conventions and its code grid as pandas tables, and show_number for
display. Mixed into FloatFormat (formats.py), so `get_format("E4M3").convention_table()` reads as a method; pure
display, no numerics. (format_summary_table, which walks the registry, stays in formats.py.)
"""
from __future__ import annotations

import math

_SPECIALS_DOC = {
    "ieee": "top exponent field: mantissa 0 = +-inf, otherwise NaN",
    "fn": "one NaN per sign at the all-ones code; no inf",
    "fnuz": "single NaN at 0x80 (no -0); no inf",
    "none": "no inf, no NaN: every code is finite",
}


def show_number(v: float) -> str:
    """A float for display tables: repr is exact and never rounds (pandas shows 2^-127 in an object column
    as 0.0)."""
    return repr(float(v))


class FormatTables:
    """Display tables of a FloatFormat (the mixin reads its fields and derived constants; it has none)."""

    def convention_table(self):
        """pandas DataFrame (field, value, meaning) of every convention of this format."""
        import pandas as pd

        rows = [
            ("name", self.name, "canonical name"), ("short", self.short_str(), "log name"),
            ("bits", self.bits, "sign + exponent + mantissa"), ("ebits", self.ebits, "exponent bits"),
            ("mbits", self.mbits, "explicit mantissa bits"), ("bias", self.bias, "exponent bias"),
            ("signed", self.signed, "has a sign bit"),
            ("subnormals", self.subnormals, "exponent field 0 holds zero and subnormals"),
            ("has_zero", self.has_zero, "a code for zero exists"),
            ("specials", self.specials, _SPECIALS_DOC[self.specials]),
            ("negative_zero", self.signed and self.specials != "fnuz", "-0 is a distinct code"),
            ("aliases", ", ".join(self.aliases) or "-", "other names get_format accepts"),
            ("max", show_number(self.max), "largest finite value"),
            ("min_normal", show_number(self.min_normal) if self.has_normals else "none",
             "2^emin" if self.has_normals else "no normal numbers (no exponent bits): every nonzero is subnormal"),
            ("min_subnormal", show_number(self.min_subnormal), "smallest positive value"),
            ("emin", self.emin, "exponent of the smallest normal binade"), ("emax", self.emax, "exponent of max"),
            ("n_finite", self.n_finite, "distinct finite values"),
            ("overflow (saturate=True)", "+-max" + (" (inf stays inf)" if self.specials == "ieee" else " (inf -> max)"),
             "quantize default"),
            ("overflow (saturate=False)", self.overflow_nonsat, "as ml_dtypes / torch non-saturating casts"),
            ("ties", "to even code", "RNE; E7M0/e8m0: even exponent field"),
            ("reference", self.reference or "-", "bit-exact oracle"), ("note", self.note or "-", ""),
        ]
        return pd.DataFrame(rows, columns=["field", "value", "meaning"]).set_index("field")

    def grid_table(self):
        """pandas DataFrame with one row per code: code, hex, bits, sign, exponent, mantissa, class, value."""
        import pandas as pd

        E, M = self.ebits, self.mbits
        rows = []
        for c, v in enumerate(self._table):
            mag = c & ((1 << (E + M)) - 1)
            e, m = mag >> M, mag & ((1 << M) - 1)
            if math.isnan(v):
                cls = "nan"
            elif math.isinf(v):
                cls = "inf"
            elif v == 0:
                cls = "zero"
            elif self.subnormals and e == 0:
                cls = "subnormal"
            else:
                cls = "normal"
            rows.append({"code": c, "hex": f"0x{c:02X}", "bits": format(c, f"0{self.bits}b"),
                         "sign": (c >> (E + M)) & 1 if self.signed else 0, "exponent": e, "mantissa": m,
                         "class": cls, "value": v})
        return pd.DataFrame(rows)
