"""Independent references expressed in our format conventions (shared by the tests and notebook 01).

gfloat (Graphcore) rounds any ExMy format by its own code; `gfloat_format_info` only translates our
FloatFormat fields into its FormatInfo, so comparing against gfloat checks our kernels, not a copy of them.
`oracle_agreement` runs our round-to-nearest-even against every torch / ml_dtypes dtype of the same
convention and gfloat on all finite bf16 bit patterns (notebook 01's agreement table).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from importlib import metadata
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


def library_version(library: str) -> str:
    """The installed version of a reference library, without a local label (torch's `+cpu` / `+cu128`): a table
    whose numbers a library computed names the version that computed them, so a new release cannot change it
    silently."""
    dist = {"torch": "torch", "ml_dtypes": "ml_dtypes", "gfloat": "gfloat", "torchao": "torchao"}[library]
    return metadata.version(dist).split("+", 1)[0]


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
            rows.append({"format": f.name, "reference": ref.label, "version": library_version(ref.library),
                         "saturate": sat, "inputs": domain,
                         "n_inputs": x.numel(), "mismatches": count_mismatches(ours, ref.cast(x), zero_sign)})
        if include_gfloat:
            import gfloat

            ref_x = gfloat.round_ndarray(gfloat_format_info(f), x.double().numpy(), sat=True)
            ours = f.quantize(x, rounding="nearest", saturate=True)
            rows.append({"format": f.name, "reference": "gfloat.round_ndarray", "version": library_version("gfloat"),
                         "saturate": True, "inputs": domain,
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


def mx_reference(x: torch.Tensor, fmt: FloatFormat | str, mode: str = "floor", block: int = 32,
                 headroom: float = 1.0) -> torch.Tensor:
    """Hand reference of MX from OCP MX 1.0 in Python floats (math.frexp for the exponents; RCEIL as
    arXiv 2506.08027), elements rounded by elem_round (a library's cast, gfloat, or an integer grid's definition):
    a slow reference for any element format. headroom h (Tseng et al.'s 3/4 for SR): Q(x · 2^-e · h) · (2^e / h) in
    fp32. x: 2-D, last dim a multiple of `block`."""
    f = get_format(fmt)
    er = elem_round(f)
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
            q = er((blk * 2.0 ** -e).float() * headroom)
            if headroom == 1.0:
                out[r, b:b + block] = q.double() * 2.0**e
            else:      # the decode multiplier 2^e / h rounds to fp32, as the hardware would fold it
                out[r, b:b + block] = (q * (torch.tensor(2.0**e, dtype=torch.float32) / headroom)).double()
    return out.float()


# ----------------------------------------------------------------------------- the newer block kinds
# References for fp8_block (DeepSeek-V3 / TE Float8BlockScaling), NVFP4's options (4/6, UE5M3 scales, INT4 elements)
# and the SR headroom. Library code where one exists (torchao's blockwise-FP8 reference functions); elsewhere a slow
# hand reference written from the paper's equations, one block at a time, whose element and scale roundings are
# libraries' casts (elem_round) or the grid's definition (ue5m3_round) -- never AltGrad's FloatFormat kernel.

TORCHAO_BLOCKWISE_FNS = ("torch_blockwise_scale_act_quant_lhs", "torch_blockwise_scale_weight_quant")
_TORCHAO_BLOCKWISE: dict = {}


def torchao_blockwise_functions() -> dict:
    """torchao's pure-torch blockwise-FP8 references (prototype/blockwise_fp8_training/kernels.py), taken from the
    installed torchao source and run on the CPU: their module imports triton at the top, which a CPU machine lacks,
    so only these two function definitions are compiled (the source is torchao's, unchanged). ImportError when this
    torchao has no such file."""
    if not _TORCHAO_BLOCKWISE:
        import ast
        from pathlib import Path

        import torchao

        src = Path(torchao.__file__).parent / "prototype" / "blockwise_fp8_training" / "kernels.py"
        if not src.exists():
            raise ImportError(f"torchao {getattr(torchao, '__version__', '?')} has no {src.name} blockwise FP8 code")
        tree = ast.parse(src.read_text())
        body = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in TORCHAO_BLOCKWISE_FNS]
        ns = {"torch": torch, "EPS": 1e-12, "e4m3_dtype": torch.float8_e4m3fn}   # the module's globals they use
        exec(compile(ast.Module(body=body, type_ignores=[]), str(src), "exec"), ns)
        missing = set(TORCHAO_BLOCKWISE_FNS) - set(ns)
        if missing:
            raise ImportError(f"{src} lacks {sorted(missing)}")
        _TORCHAO_BLOCKWISE.update({k: ns[k] for k in TORCHAO_BLOCKWISE_FNS})
    return _TORCHAO_BLOCKWISE


def torchao_fp8_blockwise(x: torch.Tensor, fmt: FloatFormat | str = "E4M3", block: int = 128,
                          tile_2d: bool = False) -> torch.Tensor:
    """torchao torch_blockwise_scale_act_quant_lhs (1 x block) or torch_blockwise_scale_weight_quant (block x block
    tiles), dequantized as q · (1/s) in fp32. x: 2-D; dims that are not multiples of `block` are zero-padded first
    (AltGrad's partial blocks; zeros change no amax) and cropped after. fmt: E4M3 or E5M2 (the functions' dtype)."""
    dtype = {"E4M3": torch.float8_e4m3fn, "E5M2": torch.float8_e5m2}[get_format(fmt).name]
    fns = torchao_blockwise_functions()
    r, c = x.shape
    xp = torch.nn.functional.pad(x.float(), (0, -c % block, 0, (-r % block) if tile_2d else 0)).contiguous()
    pr, pc = xp.shape
    if tile_2d:
        q, s_inv = fns["torch_blockwise_scale_weight_quant"](xp, block, dtype)
        y = q.float().reshape(pr // block, block, pc // block, block) * s_inv.reshape(pr // block, 1, pc // block, 1)
    else:
        q, s_inv = fns["torch_blockwise_scale_act_quant_lhs"](xp, block, dtype)
        y = q.float().reshape(pr, pc // block, block) * s_inv.reshape(pr, pc // block, 1)
    return y.reshape(pr, pc)[:r, :c]


def elem_round(fmt: FloatFormat | str):
    """Round to nearest even onto an element grid, saturating at +-fmax (explicitly, never a library's overflow
    rule), by code someone else wrote: a torch float8 / ml_dtypes cast of the same convention, else gfloat. Integer
    grids (no exponent bits: INT4, INT8_OCP) by their definition: torch.round (half to even) of x / step, clamped to
    +-(2^mbits - 1) steps. Returns fp32 -> fp32."""
    f = get_format(fmt)
    if f.ebits == 0:
        step = 2.0 ** (1 - f.bias - f.mbits)     # INT4: 1; INT8_OCP: 2^-6 (k/64)
        kmax = 2.0**f.mbits - 1
        return lambda t: torch.round(t.float() / step).clamp(-kmax, kmax) * step
    refs = matching_references(f)
    if refs:
        return lambda t: refs[0].cast(t.float().clamp(-f.max, f.max))
    import gfloat

    fi = gfloat_format_info(f)
    return lambda t: torch.from_numpy(gfloat.round_ndarray(fi, t.double().numpy(), sat=True)).float()


def ue5m3_round(t: torch.Tensor) -> torch.Tensor:
    """AMD amdfp4's unsigned E5M3 block-scale grid from its definition (bias 15, max 0xFE = 114688): round half to
    even on the 3-bit mantissa of each binade, subnormal spacing 2^-17, clamped to the max. t >= 0."""
    v = t.double()
    e = torch.floor(torch.log2(v)).clamp(min=-14)
    q = torch.round(v / torch.exp2(e - 3)) * torch.exp2(e - 3)
    return q.clamp(max=114688.0).float()


def _e4m3_scale(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.float8_e4m3fn).float()      # torch's cast: the E4M3 oracle (inputs within its normal range)


# block-scale grid -> (smallest normal, largest value, rounding) of NVFP4-style block scales
NV_SCALE_GRIDS = {"E4M3": (2.0**-6, 448.0, _e4m3_scale), "UE5M3": (2.0**-14, 114688.0, ue5m3_round)}


def _pad_blocks(x: torch.Tensor, block: int, tile_2d: bool) -> tuple[torch.Tensor, int]:
    """(x zero-padded to whole blocks, rows per block)."""
    rows = block if tile_2d else 1
    return torch.nn.functional.pad(x.float(), (0, -x.shape[1] % block, 0, -x.shape[0] % rows)), rows


def nv_reference(x: torch.Tensor, fmt: FloatFormat | str = "E2M1", scale_fmt: str = "E4M3", block: int = 16,
                 tile_2d: bool = False, four_over_six: bool = False, headroom: float = 1.0,
                 with_choice: bool = False):
    """Hand reference of NVFP4's two-level scale from the NVFP4 report's equations (arXiv 2509.25149), one 1 x block
    block (or block x block tile) at a time, in fp32 in the operation order of torchao's nvfp4_quantize:
    s_g = amax / (S · fmax) with S the scale grid's max (E4M3 448; AMD amdfp4's UE5M3 114688; 256 with 4/6);
    s_b = Q_scale(clamp((block amax / t) / s_g, the scale grid's normal range)) with t = fmax;
    y = Q(x · ((1 / s_g) / s_b) · h) · ((s_g · s_b) / h), Q = elem_round(fmt) (INT4: NVINT4, arXiv 2510.25602).
    four_over_six (Cook et al., arXiv 2512.02010, their reference code): also t = 2/3 fmax, per block the candidate
    with the lower sum of squared round-to-nearest errors (float64; a tie keeps fmax). h: the SR headroom (Tseng et
    al.'s 3/4, Quartet-II's 16/17), applied after the choice. x: 2-D, blocks along the last dim; zero-padded.
    with_choice: also return the per-block "chose 2/3 fmax" flags."""
    f = get_format(fmt)
    fmax, er = f.max, elem_round(f)
    lo, hi, sround = NV_SCALE_GRIDS[scale_fmt]
    xp, rows = _pad_blocks(x, block, tile_2d)
    amax = xp.abs().max()
    s_g = amax / ((256.0 if four_over_six else hi) * fmax)
    out, chose = torch.zeros_like(xp), []
    if amax == 0:
        return (out[: x.shape[0], : x.shape[1]], chose) if with_choice else out[: x.shape[0], : x.shape[1]]
    for r in range(0, xp.shape[0], rows):
        for c in range(0, xp.shape[1], block):
            blk = xp[r:r + rows, c:c + block]
            cands = []
            for t in ((fmax, fmax * 2 / 3) if four_over_six else (fmax,)):
                s_b = sround(torch.clamp((blk.abs().max() / t) / s_g, lo, hi))
                enc, dec = (1.0 / s_g) / s_b, s_g * s_b
                cands.append((enc, dec, float(((er(blk * enc) * dec).double() - blk.double()).pow(2).sum())))
            k = int(len(cands) == 2 and cands[1][2] < cands[0][2])
            chose.append(bool(k))
            enc, dec, _ = cands[k]
            out[r:r + rows, c:c + block] = er((blk * enc) * headroom) * (dec / headroom)
    y = out[: x.shape[0], : x.shape[1]]
    return (y, chose) if with_choice else y


def fp8_block_reference(x: torch.Tensor, fmt: FloatFormat | str = "E4M3", block: int = 128, tile_2d: bool = False,
                        pow2: bool = False, headroom: float = 1.0) -> torch.Tensor:
    """Hand reference of DeepSeek-V3 / TE Float8BlockScaling from TE's compute_scale_from_amax, one 1 x block block
    (or block x block tile) at a time: s = fmax / amax, one fp32 division (amax 0: s = 1); with pow2
    (force_pow_2_scales) s = 2^floor(log2 s), taken from the Python float's exponent; y = Q(x · s · h) · ((1 / s) / h)
    with Q = elem_round(fmt). x: 2-D, blocks along the last dim; zero-padded."""
    f = get_format(fmt)
    er = elem_round(f)
    xp, rows = _pad_blocks(x, block, tile_2d)
    out = torch.zeros_like(xp)
    for r in range(0, xp.shape[0], rows):
        for c in range(0, xp.shape[1], block):
            blk = xp[r:r + rows, c:c + block]
            amax = blk.abs().max()
            s = torch.tensor(1.0) if amax == 0 else torch.tensor(f.max, dtype=torch.float32) / amax
            if pow2:
                s = torch.tensor(2.0 ** (math.frexp(float(s))[1] - 1), dtype=torch.float32)
            out[r:r + rows, c:c + block] = er((blk * s) * headroom) * ((1.0 / s) / headroom)
    return out[: x.shape[0], : x.shape[1]]


def gfloat_mx(x: torch.Tensor, fmt: FloatFormat | str, block: int = 32) -> torch.Tensor:
    """gfloat's OCP MX block quantizer (gfloat.block.quantize_block with compute_scale_amax: E8M0 scale
    2^(floor(log2 amax) - emax_elem), i.e. MX FLOOR; elements RNE, saturating) with the element format given by
    gfloat_format_info(fmt). For INT8_OCP that element is the symmetric k/64, |k| <= 127 (microxcaling's clamp):
    gfloat's own format_info_mxint8 keeps the two's complement code -2, which AltGrad does not (formats_block.py).
    x: 2-D, last dim a multiple of `block`."""
    from gfloat.block import BlockFormatInfo, compute_scale_amax, quantize_block
    from gfloat.formats import format_info_ocp_e8m0

    bfi = BlockFormatInfo(f"mx_{get_format(fmt).name}", gfloat_format_info(fmt), block, format_info_ocp_e8m0)
    v = x.double().numpy()
    out = np.empty_like(v)
    for r in range(v.shape[0]):
        for b in range(0, v.shape[1], block):
            out[r, b:b + block] = quantize_block(bfi, v[r, b:b + block], compute_scale_amax)
    return torch.from_numpy(out).float()
