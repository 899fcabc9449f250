"""Independent references expressed in our format conventions (shared by the tests and notebook 01).

gfloat (Graphcore) rounds any ExMy format by its own code; `gfloat_format_info` only translates our
FloatFormat fields into its FormatInfo, so comparing against gfloat checks our kernels, not a copy of them.
`oracle_agreement` runs our round-to-nearest-even against every torch / ml_dtypes dtype of the same
convention and gfloat on all finite bf16 bit patterns (notebook 01's agreement table).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np
import pandas as pd
import torch

from altgrad_lib.numerics.formats import BUILTIN_FORMATS, FloatFormat, get_format


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


@dataclass(frozen=True)
class Reference:
    """An independent implementation of one convention: (ebits, mbits, bias, specials)."""
    library: str  # "torch" | "ml_dtypes"
    dtype_name: str
    ebits: int
    mbits: int
    bias: int
    specials: str
    signed: bool = True
    subnormals: bool = True

    @property
    def convention(self) -> tuple:
        return (self.ebits, self.mbits, self.bias, self.specials, self.signed, self.subnormals)

    @property
    def label(self) -> str:
        return f"{self.library}.{self.dtype_name}"

    def cast(self, x: torch.Tensor) -> torch.Tensor:
        """float32 -> reference dtype -> float32 (round-to-nearest-even, the library's overflow rule)."""
        if self.library == "torch":
            return x.to(getattr(torch, self.dtype_name)).float()
        import ml_dtypes

        return torch.from_numpy(x.numpy().astype(getattr(ml_dtypes, self.dtype_name)).astype(np.float32))


REFERENCES = (
    Reference("torch", "float8_e4m3fn", 4, 3, 7, "fn"),
    Reference("torch", "float8_e5m2", 5, 2, 15, "ieee"),
    Reference("torch", "float8_e4m3fnuz", 4, 3, 8, "fnuz"),
    Reference("torch", "float8_e5m2fnuz", 5, 2, 16, "fnuz"),
    Reference("ml_dtypes", "float8_e4m3fn", 4, 3, 7, "fn"),
    Reference("ml_dtypes", "float8_e5m2", 5, 2, 15, "ieee"),
    Reference("ml_dtypes", "float8_e4m3", 4, 3, 7, "ieee"),
    Reference("ml_dtypes", "float8_e3m4", 3, 4, 3, "ieee"),
    Reference("ml_dtypes", "float8_e4m3fnuz", 4, 3, 8, "fnuz"),
    Reference("ml_dtypes", "float8_e5m2fnuz", 5, 2, 16, "fnuz"),
    Reference("ml_dtypes", "float8_e4m3b11fnuz", 4, 3, 11, "fnuz"),
    Reference("ml_dtypes", "float6_e2m3fn", 2, 3, 1, "none"),
    Reference("ml_dtypes", "float6_e3m2fn", 3, 2, 3, "none"),
    Reference("ml_dtypes", "float4_e2m1fn", 2, 1, 1, "none"),
    Reference("torch", "float8_e8m0fnu", 8, 0, 127, "fn", signed=False, subnormals=False),
    Reference("ml_dtypes", "float8_e8m0fnu", 8, 0, 127, "fn", signed=False, subnormals=False),
)


def matching_references(fmt: FloatFormat | str) -> list[Reference]:
    """References whose convention is exactly the format's (same grid, same special codes)."""
    f = get_format(fmt)
    key = (f.ebits, f.mbits, f.bias, f.specials, f.signed, f.subnormals)
    return [r for r in REFERENCES if r.convention == key]


def all_bf16_values(finite_only: bool = True) -> torch.Tensor:
    """Every bf16 bit pattern as float32 (65536 patterns; 65280 finite)."""
    bits = torch.from_numpy(np.arange(2**16, dtype=np.uint16).view(np.int16))
    x = bits.view(torch.bfloat16).float()
    return x[torch.isfinite(x)] if finite_only else x


def count_mismatches(ours: torch.Tensor, ref: torch.Tensor, check_zero_sign: bool = True) -> int:
    """Elements that differ in value (NaN == NaN counts as agreement) or, optionally, in the sign of zero."""
    a, b = ours.double(), ref.double()
    same = (a == b) | (torch.isnan(a) & torch.isnan(b))
    if check_zero_sign:
        same &= ~((a == 0) & (b == 0) & (torch.signbit(a) != torch.signbit(b)))
    return int((~same).sum())


def oracle_agreement(formats: Iterable[FloatFormat | str] | None = None,
                     include_gfloat: bool = True) -> pd.DataFrame:
    """Our round-to-nearest-even against every independent implementation of the same convention.

    Inputs: all 65280 finite bf16 bit patterns (NaN/inf inputs are left out because libraries differ
    in policy there, e.g. torch saturates inf to 448 for e4m3fn while ml_dtypes returns NaN).
    Each reference's overflow rule (saturate or not) is detected by casting 2^100, and our
    quantizer runs with the same `saturate`, so mismatches measure rounding, not policy.
    gfloat is configured to the format's convention and run saturating (gfloat cannot express
    non-saturating casts for formats without inf/NaN).
    """
    x_all = all_bf16_values()
    huge = torch.tensor([torch.finfo(torch.float32).max])
    rows = []
    for fmt in formats if formats is not None else BUILTIN_FORMATS.values():
        f = get_format(fmt)
        # unsigned formats: negative inputs and zero are outside the format (policy, not rounding)
        x = x_all if f.signed else x_all[x_all > 0]
        domain = "finite" if f.signed else "finite > 0"
        zero_sign = f.specials != "fnuz"  # fnuz has no -0 code: its zero is unsigned by definition
        for ref in matching_references(f):
            sat = bool(torch.isfinite(ref.cast(huge)).all())
            ours = f.quantize(x, rounding="nearest", saturate=sat)
            rows.append({"format": f.name, "reference": ref.label, "saturate": sat, "inputs": domain,
                         "n_inputs": x.numel(), "mismatches": count_mismatches(ours, ref.cast(x), zero_sign)})
        if include_gfloat:
            import gfloat

            ref_x = gfloat.round_ndarray(gfloat_format_info(f), x.double().numpy(), sat=True)
            ours = f.quantize(x, rounding="nearest", saturate=True)
            rows.append({"format": f.name, "reference": "gfloat.round_ndarray", "saturate": True, "inputs": domain,
                         "n_inputs": x.numel(),
                         "mismatches": count_mismatches(ours, torch.from_numpy(ref_x), zero_sign)})
    return pd.DataFrame(rows)
