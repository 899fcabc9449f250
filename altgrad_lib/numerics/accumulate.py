"""Accumulator precision inside a GEMM: C = A·B with the running sum held in a narrow float format.

A GEMM's reduction over K is a chain of additions into an accumulator. AltGrad's other GEMMs accumulate in FP32
(torch's matmul, summation order unspecified); an `AccumSpec` other than FP32 replaces that with an explicit model:

- products are exact: each product a_ik·b_kj is formed in float64 (exact for float32 operands: 24 + 24 bits).
  The operands are the GEMM's dequantized operands (FP8 value × 1/scale), so with a non-power-of-two scale the
  accumulator sees the scaled products, not the hardware's code products scaled afterwards.
- model "per_add": every product is added to the accumulator and the sum is rounded to the accumulator format
  after each addition (a slow loop over K: `accumulate_matmul_per_add_reference`, the ground truth for small
  shapes).
- model "per_chunk": each chunk of `chunk` consecutive products (along K) is summed in float64 (exact for
  FP8-grid operands with a power-of-two scale: their products have <= 8 significant bits over a span well under
  53 bits; otherwise within 2^-53 relative) and added to the accumulator with ONE rounding. chunk=1 is per_add
  exactly. The default chunk 32 is the K of one Hopper FP8 tensor-core instruction (PTX ISA, wgmma .e4m3/.e5m2:
  shape m64nNk32); how the hardware sums inside an instruction is not modelled beyond "one rounding per chunk".
- rounding of one addition acc + p (both exact float64 values):
  "nearest": the exact sum rounded to nearest, ties to even (a TwoSum error term breaks float64's own ties, so
  the result is the correctly rounded exact sum, not a double rounding).
  "truncate": the significands are aligned to the larger addend's exponent and the bits of either addend below
  the accumulator's last place there are dropped (no guard, round or sticky bit), then the normalized sum is
  truncated toward zero. This is the behaviour Fasi, Higham, Mikaitis & Pranesh ("Numerical behavior of NVIDIA
  tensor cores", PeerJ Comput. Sci. 2021) measured for the FP32 accumulation of V100/T4/A100 tensor cores;
  with addends of opposite signs it can be one unit in the last place above round-toward-zero of the exact sum.
- range: IEEE-style, bias 2^(e-1)-1, gradual underflow (subnormals kept), overflow to +-inf under "nearest" and
  to +-max under "truncate" (IEEE round toward zero). Whether Hopper flushes subnormal partial sums is not
  known to us and not modelled.
- promotion (`promote_every` N): every N products (counted along K from 0) the accumulator is added into an
  FP32 total (float32 round-to-nearest addition, as DeepSeek-V3 does on CUDA cores) and reset to 0; 0 or N >= K
  means never (the result is the accumulator itself). In the per_chunk model N must be a multiple of chunk.

Formats (`fmt` names the defaults of exp_bits / man_bits / rounding):
  fp32  the plain FP32 matmul (torch's; no model, bit-identical to AltGrad without an AccumSpec)
  bf16  8 exponent, 7 mantissa bits, nearest;  fp16  5 exponent, 10 mantissa bits, nearest
  fp22  8 exponent, 13 mantissa bits, truncate: the "FP22-like" accumulator of Hopper's FP8 tensor cores.
        DeepSeek-V3 technical report (arXiv:2412.19437, §3.3.2 "Increasing Accumulation Precision"): FP8 GEMMs on
        H800 retain "around 14 bits" of accumulation precision, and they promote to FP32 every 128 products
        (N_C = 128, four WGMMAs). SageAttention2 (Zhang et al., arXiv:2411.10958, §4.3) reports the accumulator of
        mma.f32.f8.f8.f32 as FP22: 1 sign, 8 exponent, 13 mantissa bits. Truncation follows Fasi et al. (above)
        for earlier tensor cores; it is a field, so "nearest" can be compared.
Rounding to a format uses the package's own kernel (rounding.quantize_tensor), never a torch dtype cast.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping

import torch
from torch import Tensor

from altgrad_lib.errors import check_keys
from altgrad_lib.numerics.block_scaling import stored_in_kernel
from altgrad_lib.numerics.rounding import KernelParams, quantize_tensor

# fmt -> (exp_bits, man_bits, rounding)
ACCUM_FORMATS = {"fp32": (8, 23, "nearest"), "bf16": (8, 7, "nearest"), "fp16": (5, 10, "nearest"),
                 "fp22": (8, 13, "truncate")}
ACCUM_ROUNDINGS = ("nearest", "truncate")
ACCUM_MODELS = ("per_add", "per_chunk")
_KERNELS: dict[str, KernelParams] = {}   # by (exp_bits, man_bits): constants under torch.compile (formats.py)


def _int(name: str, v: Any, lo: int, hi: int | None, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < lo or (hi is not None and v > hi):
        raise ValueError(f"AccumSpec.{name}={v!r} is invalid; valid: {what}")
    return v


@dataclass(frozen=True)
class AccumSpec:
    """The accumulator of one GEMM (see the module docstring). None fields take `fmt`'s defaults."""

    fmt: str = "fp32"                 # ACCUM_FORMATS
    exp_bits: int | None = None       # 2..8 (the accumulator's range stays inside float32's)
    man_bits: int | None = None       # 1..23
    rounding: str | None = None       # ACCUM_ROUNDINGS
    model: str = "per_chunk"          # ACCUM_MODELS
    chunk: int = 32                   # products per rounding in the per_chunk model
    promote_every: int = 0            # products per FP32 promotion; 0 = never

    def __post_init__(self) -> None:
        if self.fmt not in ACCUM_FORMATS:
            raise ValueError(f"AccumSpec.fmt={self.fmt!r} is invalid; valid choices: {tuple(ACCUM_FORMATS)}")
        e0, m0, r0 = ACCUM_FORMATS[self.fmt]
        e = e0 if self.exp_bits is None else _int("exp_bits", self.exp_bits, 2, 8, "an int in [2, 8]")
        m = m0 if self.man_bits is None else _int("man_bits", self.man_bits, 1, 23, "an int in [1, 23]")
        r = r0 if self.rounding is None else self.rounding
        if r not in ACCUM_ROUNDINGS:
            raise ValueError(f"AccumSpec.rounding={r!r} is invalid; valid choices: {ACCUM_ROUNDINGS}")
        if self.model not in ACCUM_MODELS:
            raise ValueError(f"AccumSpec.model={self.model!r} is invalid; valid choices: {ACCUM_MODELS}")
        _int("chunk", self.chunk, 1, None, "an int >= 1")
        _int("promote_every", self.promote_every, 0, None, "an int >= 0 (0 = never promote)")
        if self.fmt == "fp32" and ((e, m, r) != (e0, m0, r0) or self.model != "per_chunk" or self.chunk != 32
                                   or self.promote_every):
            raise ValueError(f"AccumSpec(fmt='fp32') is the plain FP32 matmul and takes no other field, got "
                             f"{self.to_dict()}; valid: fmt in {tuple(f for f in ACCUM_FORMATS if f != 'fp32')} "
                             f"for a modelled accumulator (exp_bits=8, man_bits=23 models a sequential FP32 one)")
        if self.model == "per_chunk" and self.promote_every % self.chunk:
            raise ValueError(f"AccumSpec.promote_every={self.promote_every} is not a multiple of chunk={self.chunk} "
                             f"(per_chunk model); valid: 0 or a multiple of {self.chunk}, or model='per_add'")
        object.__setattr__(self, "exp_bits", e)
        object.__setattr__(self, "man_bits", m)
        object.__setattr__(self, "rounding", r)

    @property
    def is_fp32(self) -> bool:
        """The plain FP32 matmul (no model)."""
        return self.fmt == "fp32"

    @property
    def kernel(self) -> KernelParams:
        key = f"e{self.exp_bits}m{self.man_bits}"
        if key not in _KERNELS:
            e, m = self.exp_bits, self.man_bits
            bias = 2 ** (e - 1) - 1
            emin = 1 - bias
            mx = (2.0 - 2.0**-m) * 2.0 ** (2**e - 2 - bias)     # IEEE: the top exponent field is inf / NaN
            f64 = emin < -126 or mx >= 2.0**127 or emin - m < -149     # as formats.FloatFormat (BF16: True)
            _KERNELS[key] = KernelParams(mbits=m, emin=emin, max=mx, min_normal=2.0**emin, subnormals=True,
                                         specials="ieee", signed=True, has_zero=True, needs_f64=f64, bias=bias)
        return _KERNELS[key]

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, d: "str | Mapping | AccumSpec | None") -> "AccumSpec":
        """A format name ("fp22"), a dict of fields, an AccumSpec, or None (fp32)."""
        if d is None or isinstance(d, AccumSpec):
            return d or cls()
        if isinstance(d, str):
            return cls(fmt=d)
        if not isinstance(d, Mapping):
            raise TypeError(f"AccumSpec: expected a format name {tuple(ACCUM_FORMATS)}, a dict or null, got {d!r}")
        check_keys(cls, d, "AccumSpec")
        return cls(**d)

    def short_str(self) -> str:
        """e.g. "fp22/rz/c32/p128", "bf16/rn/add", "fp16:e5m7/rn/c32"."""
        if self.is_fp32:
            return "fp32"
        e0, m0, _ = ACCUM_FORMATS[self.fmt]
        s = self.fmt + ("" if (self.exp_bits, self.man_bits) == (e0, m0) else f":e{self.exp_bits}m{self.man_bits}")
        s += "/rz" if self.rounding == "truncate" else "/rn"
        s += "/add" if self.model == "per_add" else f"/c{self.chunk}"
        return s + (f"/p{self.promote_every}" if self.promote_every else "")


# ------------------------------------------------------------------------------------------ one addition

def accumulate_add(acc: Tensor, p: Tensor, spec: AccumSpec) -> Tensor:
    """round(acc + p) to the accumulator (float64 tensors holding exact values; acc on the accumulator's grid)."""
    kp = spec.kernel
    if spec.rounding == "nearest":
        s = acc + p
        bb = s - acc                                        # TwoSum: err = exact (acc + p) - s
        err = (acc - (s - bb)) + (p - bb)
        # float64 rounded the sum: move it one float64 step toward the exact value, so that a float64 result on a
        # tie of the accumulator's grid (whose spacing is >= 2^29 float64 steps) rounds the way the exact sum does
        toward = torch.where(err > 0, torch.inf, -torch.inf).to(s.dtype)
        s = torch.where(err != 0, torch.nextafter(s, toward), s)
        return quantize_tensor(stored_in_kernel(s), kp, "nearest", saturate=False, allow_native=False)
    # truncate: align both addends to the larger one's exponent, drop their bits below the accumulator's last place
    big = torch.maximum(acc.abs(), p.abs())
    e = ((big.view(torch.int64) >> 52) - 1023).clamp_min(kp.emin)     # floor(log2|big|); subnormal / 0 -> emin
    ulp = ((e - kp.mbits + 1023) << 52).view(torch.float64)            # 2^(e - m) and 2^(m - e), built from bits
    inv = ((kp.mbits - e + 1023) << 52).view(torch.float64)
    s = (acc * inv).trunc_().mul_(ulp).add_((p * inv).trunc_().mul_(ulp))   # exact: multiples of ulp below 2^(e+2)
    return quantize_tensor(stored_in_kernel(s), kp, "toward_zero", saturate=False, allow_native=False)


def _promotion_steps(k: int, step: int, spec: AccumSpec) -> int:
    """Additions (of `step` products each) between FP32 promotions; a number >= the count of additions = never."""
    n = spec.promote_every
    return -(-k // step) if n == 0 or n >= k else n // step


def loop_steps(k: int, spec: AccumSpec | None) -> int:
    """The accumulate_add steps accumulate_matmul runs for a reduction of length k: what torch.compile unrolls
    into the graph (0 for FP32). The promotion groups run side by side, so a group's steps count once."""
    if spec is None or spec.is_fp32:
        return 0
    c = 1 if spec.model == "per_add" else spec.chunk
    return min(_promotion_steps(k, c, spec), -(-k // c))


def _finish(total: Tensor | None, acc: Tensor) -> Tensor:
    a32 = acc.to(torch.float32)                             # exact: the accumulator format fits float32
    return a32 if total is None else total + a32


# ------------------------------------------------------------------------------------------ matmuls

def _check_shapes(a: Tensor, b: Tensor) -> None:
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"accumulate_matmul: expected a (M, K) and b (K, N), got {tuple(a.shape)} and "
                         f"{tuple(b.shape)}")


def accumulate_matmul(a: Tensor, b: Tensor, spec: AccumSpec | None) -> Tensor:
    """A·B (a (M, K), b (K, N), reduced along K) with the accumulator `spec`; float32 result.

    FP32 (or None) is `a.mm(b)` itself. per_chunk: the chunk sums come from one batched float64 matmul, and the
    Python loop runs over the K/chunk chunks with whole (M, N) tiles (vectorized); per_add runs the same loop
    with chunk 1 (K iterations)."""
    if spec is None or spec.is_fp32:
        return a.mm(b)
    _check_shapes(a, b)
    m, k = a.shape
    n = b.shape[1]
    c = 1 if spec.model == "per_add" else spec.chunk
    nc = -(-k // c)
    a64, b64 = a.to(torch.float64), b.to(torch.float64)
    if nc * c != k:                                         # zero products add nothing to any accumulator
        a64 = torch.nn.functional.pad(a64, (0, nc * c - k))
        b64 = torch.nn.functional.pad(b64, (0, 0, 0, nc * c - k))
    parts = torch.bmm(a64.reshape(m, nc, c).transpose(0, 1), b64.reshape(nc, c, n))      # (nc, M, N)
    every = min(_promotion_steps(k, c, spec), nc)
    groups = -(-nc // every)
    if groups * every != nc:    # zero chunk sums: round(acc + 0) = acc, so a padded last group changes nothing
        parts = torch.nn.functional.pad(parts, (0, 0, 0, 0, 0, groups * every - nc))
    # the promotion groups are independent until their FP32 sum: run them side by side (every steps, not nc),
    # then promote them into the FP32 total in order; elementwise the same operations as one group at a time
    parts = parts.reshape(groups, every, m, n)
    acc = torch.zeros(groups, m, n, dtype=torch.float64, device=a.device)
    # compiled, the loop is unrolled into one elementwise chain, and inductor inlined each step's sum into every use
    # of it in the next steps: the op count it generated code for grew far faster than the steps. Each step's sum
    # and result are stored instead (same values; the compile times: bench/results/accum_compile.md)
    for i in range(every):
        acc = stored_in_kernel(accumulate_add(acc, parts[:, i], spec))
    total = None
    for g in range(groups):
        total = _finish(total, acc[g])
    return total


def accumulate_matmul_per_add_reference(a: Tensor, b: Tensor, spec: AccumSpec) -> Tensor:
    """The per_add model as an explicit loop over K, one exact product at a time (slow; the ground truth for small
    shapes): acc <- round(acc + a[:, k] b[k, :]) and, every promote_every products, total <- fp32(total + acc)."""
    _check_shapes(a, b)
    k = a.shape[1]
    a64, b64 = a.to(torch.float64), b.to(torch.float64)
    every = k if spec.promote_every == 0 or spec.promote_every >= k else spec.promote_every
    total, acc = None, torch.zeros(a.shape[0], b.shape[1], dtype=torch.float64, device=a.device)
    for j in range(k):
        acc = accumulate_add(acc, a64[:, j, None] * b64[None, j, :], spec)
        if (j + 1) % every == 0 and j + 1 < k:
            total, acc = _finish(total, acc), torch.zeros_like(acc)
    return _finish(total, acc)
