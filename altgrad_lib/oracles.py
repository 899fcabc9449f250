"""Independent references expressed in our format conventions (shared by the tests and notebook 01).

gfloat (Graphcore) rounds any ExMy format by its own code; `gfloat_format_info` only translates our
FloatFormat fields into its FormatInfo, so comparing against gfloat checks our kernels, not a copy of them.
"""
from __future__ import annotations

from altgrad_lib.formats import FloatFormat, get_format


def gfloat_format_info(fmt: FloatFormat | str):
    """The format as a gfloat FormatInfo (gfloat covers any ExMy)."""
    from gfloat import FormatInfo
    from gfloat.types import Domain

    f = get_format(fmt)
    nans = {"ieee": 2**f.mbits - 1, "fn": 1, "fnuz": 0, "none": 0}[f.specials]
    # -0 exists only in signed formats that keep a sign-bit zero (fnuz spends that code on NaN)
    return FormatInfo(f.short_str(), k=f.bits, precision=f.mbits + 1, bias=f.bias, is_signed=f.signed,
                      domain=Domain.Extended if f.specials == "ieee" else Domain.Finite,
                      has_nz=f.signed and f.specials != "fnuz", num_high_nans=nans,
                      has_subnormals=f.subnormals, is_twos_complement=False)
