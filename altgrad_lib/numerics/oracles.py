"""Independent references expressed in our format conventions (shared by the tests and notebook 01).

gfloat (Graphcore) rounds any ExMy format by its own code; `gfloat_format_info` only translates our
FloatFormat fields into its FormatInfo, so comparing against gfloat checks our kernels, not a copy of them.
`oracle_agreement` runs our round-to-nearest-even against every torch / ml_dtypes dtype of the same
convention and gfloat on all finite bf16 bit patterns (notebook 01's agreement table).
"""
from __future__ import annotations

import math
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


# ----------------------------------------------------------------------------- block-scaled references
# torchao's pure-PyTorch MX and NVFP4 code (it runs on the CPU) and a hand-written MX loop, all quantizing along
# the last dim. Callers that care about torchao's import-time log noise import it first inside
# quantize.hw_fp8.quiet_torchao_import (a higher layer).

TORCHAO_MX_ELEMS = ("E4M3", "E5M2", "E2M3", "E3M2", "E2M1")   # element formats torchao's MXTensor has


def torchao_mx(x: torch.Tensor, fmt: FloatFormat | str, mode: str = "floor", block: int = 32) -> torch.Tensor:
    """torchao MXTensor.to_mx(x, elem, block, FLOOR | RCEIL).dequantize() in x's dtype (blocks along the last dim)."""
    from torchao.prototype.mx_formats.config import ScaleCalculationMode
    from torchao.prototype.mx_formats.mx_tensor import MXTensor

    elem = {"E4M3": torch.float8_e4m3fn, "E5M2": torch.float8_e5m2, "E2M3": "fp6_e2m3", "E3M2": "fp6_e3m2",
            "E2M1": torch.float4_e2m1fn_x2}[get_format(fmt).name]
    sm = {"floor": ScaleCalculationMode.FLOOR, "rceil": ScaleCalculationMode.RCEIL}[mode]
    return MXTensor.to_mx(x.contiguous(), elem, block, scaling_mode=sm).dequantize(x.dtype)


def torchao_nvfp4(x: torch.Tensor) -> torch.Tensor:
    """torchao NVFP4Tensor.to_nvfp4 with the per-tensor scale amax / (448·6), dequantized (1x16 blocks, last dim)."""
    from torchao.prototype.mx_formats.nvfp4_tensor import NVFP4Tensor, per_tensor_amax_to_scale

    pts = per_tensor_amax_to_scale(x.float().abs().amax())
    return NVFP4Tensor.to_nvfp4(x.contiguous(), per_tensor_scale=pts).dequantize(x.dtype)


def torchao_nvfp4_2d(x: torch.Tensor) -> torch.Tensor:
    """NVFP4 16x16 tiles (TE's 2D weights) from torchao's 1x16 path: torchao has no 2D path, but its 1x16 path gives
    the 2D answer if every 1x16 block's amax is its tile's amax. Writing +-tile_amax into one slot of each block
    does that (the global amax is unchanged); two runs with different slots give every element from a run where it
    was not overwritten. x: (R, C), both multiples of 16."""
    r, c = x.shape
    t = x.abs().reshape(r // 16, 16, c // 16, 16).amax(dim=(1, 3))
    tile_amax = t.repeat_interleave(16, 0).repeat_interleave(16, 1)
    runs = []
    for slot in (0, 1):
        xa = x.clone()
        xa[:, slot::16] = tile_amax[:, slot::16]
        runs.append(torchao_nvfp4(xa))
    ref = runs[0].clone()
    ref[:, 0::16] = runs[1][:, 0::16]
    return ref


def mx_reference(x: torch.Tensor, fmt: FloatFormat | str, mode: str = "floor", block: int = 32) -> torch.Tensor:
    """Hand-written MX from OCP MX 1.0 in Python floats (math.frexp for the exponents), elements by fmt.quantize
    (checked against torch / ml_dtypes / gfloat above): a slow reference for any element format. x: 2-D, last dim a
    multiple of `block`."""
    f = get_format(fmt)
    emax = math.floor(math.log2(f.max))
    out = torch.empty_like(x, dtype=torch.float64)
    for r in range(x.shape[0]):
        for b in range(0, x.shape[1], block):
            blk = x[r, b:b + block].double()
            amax = float(blk.abs().max())
            if amax == 0:
                e = -127
            elif mode == "floor":
                e = math.frexp(amax)[1] - 1 - emax
            else:
                d = float(torch.tensor(amax, dtype=torch.float32) / f.max)   # fp32 division, as the hardware
                m, ex = math.frexp(d)
                e = ex - 1 + (m != 0.5)
            e = max(-127, min(127, e))
            q = f.quantize((blk * 2.0 ** -e).float()).double()
            out[r, b:b + block] = q * 2.0**e
    return out.float()
