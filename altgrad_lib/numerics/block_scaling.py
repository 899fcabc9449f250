"""Block-scaled fake quantization as the hardware formats define it: NVFP4 (two-level scales) and OCP MX.

Both quantize in blocks along one axis (``block_qdq(..., axis=)``, the last by default) and return the
dequantized tensor (same shape and dtype). Block-scaled hardware blocks each GEMM's operands along that GEMM's
reduction dim, so one operand has a different copy per GEMM: quantize/gemm_quant.py passes the axis (as
microxcaling's ``mx/`` does). This is the one MX implementation: the QuantSpec scaling "per_block" (once a
separate per-last-dim rule in scaling.py) is a spelling of "mx" (FLOOR) with its block_size.

- ``nvfp4``: one FP32 scale per tensor, s_global = amax / (448 · fmax) (fmax = 6 for E2M1), and per block
  (1×16, or a 16×16 tile over the last two dims with ``tile_2d``) a decode scale
  s_block = (block_amax / fmax) / s_global, clamped to [2^-6, 448] and rounded to E4M3 (RNE; E4M3 used as
  an unsigned format, so only its normal range). Elements: x · ((1 / s_global) / s_block), saturated to
  ±fmax and rounded by the element format (RNE or stochastic), then multiplied by s_global · s_block.
  Every fp32 operation is in the order of torchao's ``nvfp4_quantize``/``NVFP4Tensor.dequantize`` (the
  tests check bit equality). Where we differ from it, on purpose: an amax of 0 gives s_global = 1 instead
  of 0 (torchao divides 0 by 0: NaN), and s_global is floored at 2^-126 so 1 / s_global stays finite.
- ``mx``: a power-of-two scale X = 2^e per block of 32 (E8M0, e in [-127, 127]); elements
  Q(x · 2^-e) · 2^e with saturation at the element format's max. ``mode``:
  "floor" (OCP MX 1.0): e = floor(log2 block_amax) - emax_elem;
  "rceil": e = ceil(log2(block_amax / fmax)) (the block amax then never exceeds fmax).
  Exponents are computed exactly (fp32 frexp, subnormals included). torchao's CPU fallback of RCEIL takes
  ``ceil(torch.log2(.))`` in fp32, which rounds to the lower exponent when amax / fmax lies within about
  one fp32 ulp of log2 above a power of two; and for FLOOR it quantizes with max(2^e, 2^-126) but
  dequantizes with 2^e, so blocks with amax < 2^(emax_elem - 126) differ. Tests show both cases.

- ``nvfp4`` options: ``scale_fmt="UE5M3"`` (AMD amdfp4: unsigned E5M3 block scales, tensor scale amax / (114688 ·
  fmax)); ``four_over_six`` (Cook et al., arXiv 2512.02010: tensor scale amax / (256 · fmax), per block the scale
  mapping amax to fmax or to 2/3 · fmax (E2M1: 6 or 4), whichever round-to-nearest error is lower; the chosen scale
  then rounds with the operand's rounding, so SR draws once, where fouroversix's reference compares SR'd results).
- ``fp8_block`` (DeepSeek-V3, TE Float8BlockScaling, torchao blockwise FP8): 1×128 blocks or 128×128 tiles, one FP32
  encode scale s = fmax / amax (one fp32 division, as TE; torchao divides in fp64 and floors amax at 1e-12, equal
  except for blocks with 0 < amax < 1e-12), elements Q(x · s) · (1 / s); ``pow2`` truncates s to a power of two (TE's
  default; DeepSeek and torchao keep FP32 scales). A dim below the block size is one zero-padded partial block.

Any element format from formats.py works (E2M1, E2M3, E3M2, E4M3, E5M2, exotic ExMy); rounding is always
our kernel (``FloatFormat.quantize``), never a library cast.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from altgrad_lib.errors import check_keys
from altgrad_lib.numerics.formats import get_format
from altgrad_lib.numerics.rounding import clamp_lifted

BLOCK_KINDS = ("nvfp4", "mx", "fp8_block")
# other names of a block kind: "per_block" is MX FLOOR (OCP MX 1.0's rule), taking only a block_size
BLOCK_KIND_ALIASES = {"per_block": "mx"}
MX_MODES = ("floor", "rceil")
_DEFAULT_BLOCK = {"nvfp4": 16, "mx": 32, "fp8_block": 128}
NV_SCALE_FMTS = ("E4M3", "UE5M3")     # nvfp4's block-scale grid: NVFP4's E4M3, AMD amdfp4's unsigned E5M3
# fields added after runs existed: to_dict writes them only when set, so every earlier dict recipe keeps its hash
_DICT_IF_SET = {"pow2": False, "four_over_six": False, "scale_fmt": "E4M3"}
E4M3_MAX = 448.0
_F32_MIN_NORMAL = 2.0**-126
_E8M0_EMIN, _E8M0_EMAX = -127, 127


@dataclass(frozen=True)
class BlockScaling:
    """Block scaling of one operand: "nvfp4" (E4M3 block scales + FP32 tensor scale), "mx" (E8M0) or "fp8_block"
    (one FP32 scale per 1xB block or BxB tile, DeepSeek-V3 / TE Float8BlockScaling)."""

    kind: str = "nvfp4"        # BLOCK_KINDS
    block_size: int = 0        # 0 = the kind's standard (nvfp4 16, mx 32, fp8_block 128)
    tile_2d: bool = False      # nvfp4, fp8_block: block_size x block_size tiles over the last two dims (2D weights)
    mode: str = "floor"        # mx: MX_MODES
    # multiply the scaled block by this before rounding and divide after (Tseng et al.'s 3/4 for stochastic
    # rounding: an MX FLOOR block's |x|/X in [4, 8) lands in [3, 6), so SR never saturates at 6 and stays
    # unbiased; the hardware would fold 1/headroom into the GEMM output scale)
    headroom: float = 1.0
    pow2: bool = False         # fp8_block: scales rounded down to a power of two (TE's default; DeepSeek: off)
    four_over_six: bool = False    # nvfp4: per block the scale mapping amax to 6 or to 4, the lower MSE (Cook et al.)
    scale_fmt: str = "E4M3"    # nvfp4: the block-scale grid, NV_SCALE_FMTS

    def __post_init__(self) -> None:
        if self.kind not in BLOCK_KINDS:
            raise ValueError(f"BlockScaling.kind={self.kind!r} is invalid; valid choices: {BLOCK_KINDS}")
        b = self.block_size
        if isinstance(b, bool) or not isinstance(b, int) or b < 0:
            raise ValueError(f"BlockScaling.block_size={b!r} is invalid; valid: an int >= 1 (0 = the default "
                             f"{_DEFAULT_BLOCK[self.kind]})")
        if b == 0:
            object.__setattr__(self, "block_size", _DEFAULT_BLOCK[self.kind])
        if self.mode not in MX_MODES:
            raise ValueError(f"BlockScaling.mode={self.mode!r} is invalid; valid choices: {MX_MODES}")
        if not isinstance(self.tile_2d, bool):
            raise ValueError(f"BlockScaling.tile_2d={self.tile_2d!r} is invalid; valid choices: True, False")
        h = self.headroom
        if isinstance(h, bool) or not isinstance(h, (int, float)) or not 0.0 < h <= 1.0:
            raise ValueError(f"BlockScaling.headroom={h!r} is invalid; valid: a float in (0, 1] (Tseng et al.: 0.75)")
        if self.tile_2d and self.kind == "mx":
            raise ValueError("BlockScaling.tile_2d=True is only defined for kinds 'nvfp4' (TE's 16x16 weights) and "
                             "'fp8_block' (128x128 weights)")
        for name in ("pow2", "four_over_six"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"BlockScaling.{name}={getattr(self, name)!r} is invalid; valid choices: True, False")
        if self.pow2 and self.kind != "fp8_block":
            raise ValueError("BlockScaling.pow2=True is only defined for kind 'fp8_block' (TE's power-of-two scales)")
        if self.four_over_six and self.kind != "nvfp4":
            raise ValueError("BlockScaling.four_over_six=True is only defined for kind 'nvfp4'")
        if self.scale_fmt not in NV_SCALE_FMTS:
            raise ValueError(f"BlockScaling.scale_fmt={self.scale_fmt!r} is invalid; valid choices: {NV_SCALE_FMTS}")
        if self.scale_fmt != "E4M3" and self.kind != "nvfp4":
            raise ValueError(f"BlockScaling.scale_fmt={self.scale_fmt!r} is only defined for kind 'nvfp4' (mx scales "
                             f"are E8M0, fp8_block scales FP32)")
        if self.four_over_six and self.scale_fmt != "E4M3":
            raise ValueError("BlockScaling.four_over_six=True needs scale_fmt='E4M3' (its 256 scale cap is E4M3's)")
        # block_qdq's branch, decided here (no dataclass field: to_dict and equality stay the config's): a compiled
        # kernel lifts the headroom float to a graph input, and `headroom != 1.0` in traced code specialized it,
        # which made dynamo trace every block kernel twice (rounding.KernelParams says more)
        object.__setattr__(self, "_rescales", self.headroom != 1.0)
        # the scale grid built now (UE5M3 is built on first use): dynamo cannot trace FloatFormat's construction, so
        # a compiled quantize kernel that met it first failed to build and ran eager
        get_format(self.scale_fmt)

    def short_str(self) -> str:
        """e.g. "nv16", "nv16x16", "nv16-46" (4/6), "nv16-ue5m3", "mx32f", "mx32r", "fb128", "fb128x128p2"."""
        h = f"-h{self.headroom:g}" if self.headroom != 1.0 else ""
        tile = f"x{self.block_size}" if self.tile_2d else ""
        if self.kind == "nvfp4":
            extra = ("-46" if self.four_over_six else "") + (f"-{self.scale_fmt.lower()}" if self.scale_fmt != "E4M3"
                                                              else "")
            return f"nv{self.block_size}{tile}{extra}" + h
        if self.kind == "fp8_block":
            return f"fb{self.block_size}{tile}" + ("p2" if self.pow2 else "") + h
        return f"mx{self.block_size}{self.mode[0]}" + h

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if not (k in _DICT_IF_SET and v == _DICT_IF_SET[k])}

    @classmethod
    def from_dict(cls, d: "dict | str | BlockScaling") -> "BlockScaling":
        if isinstance(d, BlockScaling):
            return d
        if isinstance(d, str):
            return cls(kind=BLOCK_KIND_ALIASES.get(d, d))
        if d.get("kind") in BLOCK_KIND_ALIASES:
            extra = sorted(set(d) - {"kind", "block_size"})
            if extra:     # margin, pow2, amax_eps...: ScalingConfig keys that MX has no use for
                raise ValueError(f"scaling kind {d['kind']!r} (= MX FLOOR) takes only 'block_size', got {extra}; "
                                 f"for more MX options use kind 'mx' (keys: {', '.join(cls.__dataclass_fields__)})")
            d = {**d, "kind": BLOCK_KIND_ALIASES[d["kind"]]}
        check_keys(cls, d, "BlockScaling")
        return cls(**d)


def is_block_kind(scaling) -> bool:
    """Does a scaling value (config, dict or kind string) name a block kind of this module?"""
    if isinstance(scaling, BlockScaling):
        return True
    kind = scaling.get("kind") if isinstance(scaling, dict) else scaling if isinstance(scaling, str) else None
    return kind in BLOCK_KINDS or kind in BLOCK_KIND_ALIASES


# ------------------------------------------------------------------------------------------ layout helpers

def _blocks(x: Tensor, block: int) -> Tensor:
    """(..., K) -> (..., nb, block), zero-padding the last block (zeros change no amax and quantize to 0)."""
    k = x.shape[-1]
    if k % block:
        x = F.pad(x, (0, block - k % block))
    return x.reshape(*x.shape[:-1], x.shape[-1] // block, block)


def _tiles(x: Tensor, block: int) -> Tensor:
    """(..., R, C) -> (..., R/b, b, C/b, b) zero-padded 2D tiles."""
    r, c = x.shape[-2], x.shape[-1]
    if r % block or c % block:
        x = F.pad(x, (0, -c % block, 0, -r % block))
    return x.reshape(*x.shape[:-2], x.shape[-2] // block, block, x.shape[-1] // block, block)


def _unblock(y: Tensor, shape: torch.Size, tile_2d: bool) -> Tensor:
    """Inverse of _blocks/_tiles: back to `shape`, dropping the padding."""
    if tile_2d:
        y = y.reshape(*y.shape[:-4], y.shape[-4] * y.shape[-3], y.shape[-2] * y.shape[-1])
        return y[..., : shape[-2], : shape[-1]] if y.shape[-2:] != shape[-2:] else y
    y = y.reshape(*y.shape[:-2], y.shape[-2] * y.shape[-1])
    return y[..., : shape[-1]] if y.shape[-1] != shape[-1] else y


def _layout(t: Tensor, cfg: BlockScaling) -> tuple[Tensor, tuple[int, ...]]:
    """(blocked view of t, the dims that hold one block's elements)."""
    if cfg.tile_2d:
        if t.dim() < 2:
            raise ValueError(f"tile_2d needs a tensor with >= 2 dims, got shape {tuple(t.shape)}")
        return _tiles(t, cfg.block_size), (-3, -1)
    return _blocks(t.reshape(1) if t.dim() == 0 else t, cfg.block_size), (-1,)


def _along(x: Tensor, cfg: BlockScaling, axis: int) -> tuple[Tensor, Tensor]:
    """1 x B blocks along a dim other than the last, in place: (fp32 view (pre, n_blocks, B, post), block amax
    (pre, n_blocks, 1, post)); pre / post: the dims before / after `axis` flattened, the axis zero-padded."""
    axis = axis % x.dim()
    n, block = x.shape[axis], cfg.block_size
    x3 = x.detach().to(torch.float32).reshape(math.prod(x.shape[:axis]), n, math.prod(x.shape[axis + 1:]))
    if n % block:
        x3 = F.pad(x3, (0, 0, 0, block - n % block))
    xb = x3.reshape(x3.shape[0], x3.shape[1] // block, block, x3.shape[2])
    return xb, xb.abs().amax(dim=2, keepdim=True)


def _grouped(x: Tensor, cfg: BlockScaling) -> tuple[Tensor, Tensor]:
    """(blocked fp32 view, block amax broadcastable to it)."""
    xb, dims = _layout(x.detach().to(torch.float32), cfg)
    return xb, xb.abs().amax(dim=dims, keepdim=True)


# ------------------------------------------------------------------------------------------ scales

def nvfp4_global_scale(amax: Tensor, fmax: float = 6.0, scale_max: float = E4M3_MAX) -> Tensor:
    """s_global = amax / (scale_max · fmax) in fp32 (scale_max: 448 for E4M3 block scales, 256 with 4/6, 114688
    for UE5M3); 1 for amax 0 and floored at 2^-126 (1/s stays finite)."""
    pts = amax.to(torch.float32) / (scale_max * fmax)
    pts = torch.where(amax == 0, torch.ones_like(pts), pts)
    return torch.where(pts < _F32_MIN_NORMAL, torch.full_like(pts, _F32_MIN_NORMAL), pts)   # NaN stays NaN


def nvfp4_block_scales(block_amax: Tensor, s_global: Tensor, fmax: float = 6.0, scale_fmt: str = "E4M3") -> Tensor:
    """Block decode scales on the scale grid (fp32): RNE((block_amax / fmax) / s_global) clamped to the grid's
    normal range (E4M3: [2^-6, 448]; UE5M3: [2^-14, 114688])."""
    sf = get_format(scale_fmt)
    s = (block_amax / fmax) / s_global
    # lifted bounds (4/6: the grid's max is used nowhere else, so clamp's scalar made dynamo trace the kernel again)
    return sf.quantize(clamp_lifted(s, sf.min_normal, sf.max))


def fp8_block_scales(block_amax: Tensor, fmax: float, pow2: bool = False) -> Tensor:
    """Encode scales s (fp32) of fp8_block: s = fmax / amax, one fp32 division (TransformerEngine's
    compute_scale_from_amax with amax_epsilon 0); amax 0 -> 1, an infinite quotient -> the fp32 max; pow2: the
    mantissa bits dropped (2^floor(log2 s), TE's default). torchao's reference instead floors amax at 1e-12
    before dividing, which differs only for blocks with 0 < amax < 1e-12."""
    a = block_amax.to(torch.float32)
    # a tensor / tensor division: torch computes `float / tensor` as reciprocal · float, two roundings
    s = torch.where(a == 0, torch.ones_like(a), torch.full_like(a, fmax) / a)
    s = torch.where(torch.isinf(s), torch.full_like(s, torch.finfo(torch.float32).max), s)
    if pow2:
        s = (s.view(torch.int32) & -8388608).view(torch.float32)      # 0xFF800000: sign and exponent bits
    return s


def _f32_exponent(t: Tensor) -> tuple[Tensor, Tensor]:
    """(floor(log2 t), t is not a power of two) exactly, for t >= 0 fp32 (0 -> (-127, False) as torchao's
    bit extraction; fp32 subnormals too)."""
    # frexp in fp32 (exact, subnormals included: t = m · 2^e with m in [0.5, 1)), not the exponent bits: inductor's
    # CPU code scalarizes int bit views, and fused into an MX kernel's per-element loop they made it several times
    # slower (bench/results/train_step.md). Not frexp in float64 either: inductor's CPU vectorizer
    # fails to compile that next to fp32 lanes (torch 2.13). The bits' values kept for 0 (-127) and inf / NaN (128).
    m, e = torch.frexp(t)
    e = e.to(torch.int32) - 1
    finite = torch.isfinite(t)
    e = torch.where(t == 0, torch.full_like(e, -127), e)
    e = torch.where(finite, e, torch.full_like(e, 128))
    not_pow2 = torch.where(finite, (m != 0.5) & (t != 0), (t.view(torch.int32) & 0x7FFFFF) != 0)
    return e, not_pow2


def mx_exponents(block_amax: Tensor, fmt, mode: str = "floor") -> Tensor:
    """E8M0 exponents e (int32, in [-127, 127]) of the block scales X = 2^e (see the module docstring)."""
    if mode == "floor":
        e, _ = _f32_exponent(block_amax.to(torch.float32))
        e = e - fmt.kernel.emax
    elif mode == "rceil":
        descale = block_amax.to(torch.float32) / fmt.kernel.max
        e, up = _f32_exponent(descale)
        e = e + up.to(torch.int32)
    else:
        raise ValueError(f"mode={mode!r} is invalid; valid choices: {MX_MODES}")
    return e.clamp(_E8M0_EMIN, _E8M0_EMAX)


# ------------------------------------------------------------------------------------------ fake quantization

def _nv_candidate(amax: Tensor, fmax: float, target: float, cfg: BlockScaling,
                  scale_max: float) -> tuple[Tensor, Tensor]:
    """(encode, decode) multipliers of NVFP4's two-level scale mapping each block amax to `target`."""
    # the tensor amax as the max of the block amaxes (the same value, NaN included; padding is 0): compiled, one pass
    # over x less (bench/results/block_step.md)
    s_global = nvfp4_global_scale(amax.amax(), fmax, scale_max)
    s_blk = nvfp4_block_scales(amax, s_global, target, cfg.scale_fmt)
    return (1.0 / s_global) / s_blk, s_global * s_blk     # torchao's order: x · (global_encode / block_decode)


# torch 2.11's inductor cannot lower the stride-order prim on the kernels' symbolic block shapes ("cannot determine
# truth value of Relational"): the kernel then failed to compile and ran eager; there the scales stay inlined
STORES_IN_KERNEL = tuple(int(v) for v in torch.__version__.split(".")[:2]) >= (2, 13)


def stored_in_kernel(t: Tensor) -> Tensor:
    """t itself; under torch.compile, computed in a loop of its own and stored (here: one value per block; also
    the counters' y in quant.py and each step of the accumulator loop in accumulate.py).

    Why: inductor inlines a pointwise result into each consumer's loop. A block's scale chain (the E4M3 rounding of
    the nvfp4 scale, frexp and two exp2 for MX: ~40 scalar ops, 2-3 divisions or libm calls) then runs once per
    vector of the element loop, as scalars; with AVX-512 a block of 16 is one vector, so nothing amortizes it.
    Stored, inductor computes it vectorized across blocks and the element loop loads one value per block: the
    kernels took 2.5-3x less time (bench/results/block_step.md). The values are the same ops in the same order
    (division and the vector exp2 of an integer are exact-rounded, as the scalar ones; tests compare bits)."""
    if STORES_IN_KERNEL and torch.compiler.is_compiling():
        return torch.ops.prims.inductor_force_stride_order(t, t.stride())
    return t


def _scales(xb: Tensor, amax: Tensor, fmt, cfg: BlockScaling) -> tuple[Tensor, Tensor]:
    """Per-block (encode, decode) multipliers, broadcastable to the blocked view xb: elements Q(xb · enc) · dec."""
    fmax = fmt.kernel.max
    if cfg.kind == "nvfp4":
        if not cfg.four_over_six:
            return _nv_candidate(amax, fmax, fmax, cfg, get_format(cfg.scale_fmt).max)
        # 4/6 (Cook et al., arXiv 2512.02010; fouroversix's reference quantize_to_fp4): the tensor scale caps block
        # scales at 256 so that the 1.5x larger "4" scale still fits E4M3; each block keeps the candidate whose
        # round-to-nearest dequantization has the lower sum of squared errors (a tie keeps 6). Errors in float64.
        cands = [_nv_candidate(amax, fmax, t, cfg, 256.0) for t in (fmax, fmax * 2 / 3)]
        dims = (-3, -1) if cfg.tile_2d else (-1,)
        err = [((fmt.quantize(xb * e) * d).double() - xb.double()).pow(2).sum(dim=dims, keepdim=True)
               for e, d in cands]
        four = err[1] < err[0]
        return torch.where(four, cands[1][0], cands[0][0]), torch.where(four, cands[1][1], cands[0][1])
    if cfg.kind == "fp8_block":
        s = fp8_block_scales(amax, fmax, cfg.pow2)
        return s, 1.0 / s                   # TE and torchao store the reciprocal and dequantize with it
    e = mx_exponents(amax, fmt, cfg.mode).to(torch.float32)
    return torch.exp2(-e), torch.exp2(e)    # exact: powers of two in [2^-127, 2^127]


def same_tiles_axis(x: Tensor, cfg: BlockScaling, rounding: str, axis: int) -> int:
    """-1 where blocks along `axis` are the blocks along the last dim, else axis. 2D tiles of a 2-d tensor are the same
    tiles whichever of its dims is the axis: every value computed per tile (max, scale, elements, counts as integer
    sums) is the same, and so is y's layout (contiguous). Not with stochastic rounding (the bits are drawn in the
    moved layout's order) nor 4/6 (its float64 error sums would add in another order). The nvfp4 weight's dgrad copy
    (16 x 16 tiles along `out`) is then the fprop copy's kernel: one compiled graph less per process
    (bench/results/block_step.md)."""
    if cfg.tile_2d and x.dim() == 2 and rounding != "stochastic" and not cfg.four_over_six:
        return -1
    return axis


def block_qdq(x: Tensor, fmt, cfg: BlockScaling, rounding: str = "nearest",
              draw_bits: Callable[[Tensor], Tensor] | None = None, sr_bits: int | None = None,
              want_stats: bool = False, axis: int = -1) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """Block fake quantization of x with blocks along `axis` (tile_2d: tiles over `axis` and the last other
    dim): (y, n_saturated, n_underflow). A GEMM passes its reduction dim: the blocks of A·B are along A's
    columns and B's rows.

    draw_bits(xs) -> uniform integers for stochastic rounding of the scaled fp32 tensor xs (xs: x with `axis` moved
    last and blocked as (..., n_blocks, block), padding included; called with a tensor of that shape, or of one
    with the same elements in the same order); None with rounding="stochastic" uses torch's global RNG.
    """
    axis = same_tiles_axis(x, cfg, rounding, axis)
    moved = x.dim() > 1 and axis % x.dim() != x.dim() - 1
    if moved and (cfg.tile_2d or cfg.four_over_six or (rounding == "stochastic" and draw_bits is None)):
        # the same routine on x·P (4/6's float64 error sums and the global RNG's draws follow that layout)
        y, n_sat, n_under = block_qdq(x.movedim(axis, -1), fmt, cfg, rounding, draw_bits, sr_bits, want_stats)
        return y.movedim(-1, axis), n_sat, n_under
    # blocks along another axis in place: (pre, n_blocks, block, post), x's memory order, where moving the axis
    # last made the compiled kernel read x transposed (2-3x the time of blocks along the last dim); the values, the
    # draws' order and the counts are those of the routine on x·P
    xb, amax = _along(x, cfg, axis) if moved else _grouped(x, cfg)
    fmax = fmt.kernel.max
    enc, dec = _scales(xb, amax, fmt, cfg)
    if cfg._rescales:
        dec = dec / cfg.headroom
    enc, dec = stored_in_kernel(enc), stored_in_kernel(dec)
    xs = xb * enc
    if cfg._rescales:
        xs = xs * cfg.headroom
    if rounding == "stochastic":
        if draw_bits is not None:    # drawn for xb (xs's shape and dtype): compiled, xs is not stored for the op
            bits = draw_bits(xb.permute(0, 3, 1, 2)).permute(0, 2, 3, 1) if moved else draw_bits(xb)
            q = fmt.quantize_with_bits(xs, bits, sr_bits=sr_bits)
        else:
            q = fmt.quantize(xs, rounding="stochastic", sr_bits=sr_bits)
    else:
        q = fmt.quantize(xs, rounding=rounding)
    if moved:     # back to x's dims with y's own length along the axis: reshape(x.shape) was a copy compiled
        y = (q * dec).flatten(1, 2)
        a = axis % x.dim()
        y = y[:, : x.shape[a]] if y.shape[1] != x.shape[a] else y
        y = y.reshape(*x.shape[:a], y.shape[1], *x.shape[a + 1:])
    else:
        y = _unblock(q * dec, x.shape, cfg.tile_2d).reshape(x.shape)
    n_sat = n_under = None
    if want_stats:
        n_sat = (xs.abs() > fmax).sum()
        n_under = ((xs != 0) & (q == 0)).sum()
    return y.to(x.dtype), n_sat, n_under


def block_scales(x: Tensor, fmt, cfg: BlockScaling) -> Tensor:
    """Effective per-block multiplier (dequantized value = element · this), fp32, one per block/tile:
    s_global · s_block (nvfp4), 2^e (mx) or 1 / s (fp8_block). For monitors (distribution of block scales)."""
    xb, amax = _grouped(x, cfg)
    return _scales(xb, amax, fmt, cfg)[1].flatten()


def elementwise_scale(x: Tensor, fmt, cfg: BlockScaling) -> Tensor:
    """x-shaped encode multiplier s (fp32): the elements are Q(x · s) / s up to the fp32 rounding of the decode
    product. For monitors written for per-tensor scales (grid position of the weights)."""
    xb, amax = _grouped(x, cfg)
    s = _scales(xb, amax, fmt, cfg)[0]
    s = s * cfg.headroom if cfg.headroom != 1.0 else s
    return _unblock(s.expand_as(xb), x.shape, cfg.tile_2d).reshape(x.shape)


def block_scale_stats(x: Tensor, fmt, cfg: BlockScaling) -> dict[str, Tensor]:
    """log2 of the per-block multipliers (block_scales): mean, std, min, max (0-d float64 tensors). The spread
    of block scales is what TE's LogNvfp4TensorStats users ask for."""
    ls = torch.log2(block_scales(x, fmt, cfg).double())
    return {"blk_log2s_mean": ls.mean(), "blk_log2s_std": ls.std() if ls.numel() > 1 else torch.zeros_like(ls.mean()),
            "blk_log2s_min": ls.min(), "blk_log2s_max": ls.max()}


def block_flush_stats(x: Tensor, y: Tensor, cfg: BlockScaling) -> dict[str, Tensor]:
    """Per-block underflow of y = block_qdq(x): in each block (tile) of cfg's layout, the fraction of its
    elements that were non-zero in x and are 0 in y (padding excluded). Over the blocks: mean, std, max, and the
    fraction of blocks with at least one flushed element (0-d float64 tensors). A flat flush_frac hides whether
    a few blocks lose most of their elements (a wide block with one outlier) or many lose one."""
    flushed, dims = _layout(((x != 0) & (y == 0)).to(torch.float64), cfg)
    real, _ = _layout(torch.ones_like(x, dtype=torch.float64), cfg)
    frac = (flushed.sum(dim=dims) / real.sum(dim=dims)).flatten()
    std = frac.std() if frac.numel() > 1 else torch.zeros_like(frac.mean())
    return {"blk_flush_mean": frac.mean(), "blk_flush_std": std, "blk_flush_max": frac.max(),
            "blk_flush_any": (frac > 0).to(torch.float64).mean()}
