"""Small float formats (8 bits and below): definitions, registry, grids, encode/decode, ULP, the summary table.
(Each format's convention and code tables: formats_tables.py, mixed into FloatFormat.)
(16-bit IEEE-style BF16 / FP16 grids for weight storage: formats_wide.py, resolved by get_format, not registered.)

`get_format("E4M3").quantize(x)` is the one numerics primitive the rest of AltGrad builds on; the rounding
itself lives in `rounding.py`.  Every convention is an explicit field of the frozen `FloatFormat`:

- bias, signed, subnormals (exponent field 0 holds 0 and the subnormals; without subnormals field 0 is an
  ordinary binade and there is no zero, as in e8m0fnu), and `specials`:
    "ieee": top exponent field = +-inf (mantissa 0) and NaN (otherwise)            e5m2, e3m4, float8_e4m3
    "fn"  : one NaN per sign at the all-ones code, no inf (OCP E4M3)              e4m3fn, generic ExMy
    "fnuz": one NaN at 0x80 (the would-be -0), no inf, no -0                      e4m3fnuz, e5m2fnuz, e4m3b11fnuz
    "none": every code is a finite number (OCP MX FP6/FP4)                        e2m3fn, e3m2fn, e2m1fn
  (ml_dtypes' suffix "fn" on the FP6/FP4 names means "finite" = our "none"; on e4m3fn it means our "fn".)

Standard names resolve to the standard: E4M3 = torch float8_e4m3fn (max 448), E5M2 = float8_e5m2
(57344), E3M4 = ml_dtypes float8_e3m4 (IEEE, 15.5), E2M3/E3M2/E2M1 = OCP MX FP6/FP4 (all finite), plus
the ml_dtypes variants under their own names (E4M3_IEEE = ml_dtypes float8_e4m3 max 240, E4M3FNUZ,
E5M2FNUZ, E4M3B11FNUZ, E8M0FNU).

Generic convention (E1M6, E2M5, E6M1, E7M0, E0M7 and any other "E<x>M<y>" without a standard):
bias 2^(x-1)-1 (E0M7: bias 1), subnormals, specials "fn" (one NaN per sign at the all-ones code, no inf),
saturating by default.  Why: it is the OCP E4M3 rule, the most used 8-bit convention, and it spends only
two codes on NaN (IEEE-style inf/NaN costs a whole binade, which for E6M1/E7M0 is the top binade and for
E1M6 is half the grid).  Consequences: E1M6 has bias 0, a uniform grid of step 1/32 and max 3.9375;
E7M0 is sign + 7 exponent bits, code 0 = 0, code 127 = NaN, bias 63, values +-2^-62 .. +-2^63 (gfloat's
P3109 k8p1 instead has bias 64, no -0, NaN at 0x80); E0M7 is sign-magnitude fixed point k/128,
|k| <= 126 (127 = NaN).  `FloatFormat.generic(e, m)` gives this convention for any (e, m).

Rounding (`quantize`): "nearest" = round to nearest, ties to even; for formats without mantissa bits
"even" means the even CODE (E7M0: 1.5 -> 2.0 and 0.75 -> 0.5; this matches gfloat's precision-1 rule;
ml_dtypes' e8m0fnu cast rounds 0.75 up to 1.0, i.e. it does not tie to even).  "stochastic" =
unbiased, seedable via torch.Generator, gfloat `RoundMode.Stochastic` semantics with `sr_bits` random
bits.  "toward_zero" = truncation (finite overflow always goes to +-max, as IEEE).

Specials and overflow in `quantize`:
- NaN -> NaN always (also for "none" formats: the float tensor can hold it; ml_dtypes returns -0.0 there).
- saturate=True (default): finite overflow -> +-max; +-inf -> +-inf for "ieee" formats (representable, so
  quantize stays idempotent) and +-max otherwise (as torch's float8_e4m3fn cast; ml_dtypes gives NaN).
- saturate=False: overflow -> +-inf ("ieee") / NaN ("fn", "fnuz") like ml_dtypes and torch e5m2/fnuz casts;
  "none" formats have no such code and always saturate (as ml_dtypes does).
- fnuz: -0 and negative underflow -> +0.  Unsigned e8m0fnu: zero and negatives -> NaN (as ml_dtypes),
  positive underflow -> min (2^-127).
Input dtypes float16/bfloat16/float32/float64 are returned in the same dtype.  Work is exact (float32, or
float64 for float64 inputs and e8m0fnu).  Caveat: if the format's range exceeds the output dtype's
(e.g. E7M0 or E6M1 with float16 input) the final cast back can overflow/underflow.
"""
from __future__ import annotations

import math
import re
import warnings
from dataclasses import dataclass
from typing import Any

import torch

from altgrad_lib.numerics.formats_block import BLOCK_GRID_ALIASES, BLOCK_GRID_SPECS
from altgrad_lib.numerics.formats_tables import FormatTables
from altgrad_lib.numerics.formats_wide import WIDE_ALIASES, WIDE_SPECS
from altgrad_lib.numerics.rounding import ROUNDING_MODES, KernelParams, quantize_tensor, random_bits

__all__ = ["ROUNDING_MODES", "SPECIALS", "FloatFormat", "BUILTIN_FORMATS", "get_format", "format_summary_table"]

SPECIALS = ("ieee", "fn", "fnuz", "none")
_NATIVE_DTYPES = {"float8_e4m3fn": "fn", "float8_e5m2": "ieee", "float8_e4m3fnuz": "fnuz", "float8_e5m2fnuz": "fnuz"}


_KERNELS: dict[str, KernelParams] = {}   # kernel constants by key (see FloatFormat.kernel)
# encode/decode/values' tables as tensors, by (format, table, dtype, device): building BF16's 65,536-entry tables
# from Python tuples on every call was a large part of a grid-storage run's time (the optimizer's per-step
# statistics).
# Read-only: callers index them; values() hands out a copy.
_TENSORS: dict[tuple[Any, str, torch.dtype, str], torch.Tensor] = {}


@dataclass(frozen=True)
class FloatFormat(FormatTables):
    """A sign/exponent/mantissa format of at most 8 bits with every convention explicit."""

    name: str
    ebits: int
    mbits: int
    bias: int
    signed: bool = True
    subnormals: bool = True
    specials: str = "fn"
    reference: str | None = None
    note: str = ""
    native: str | None = None   # a torch dtype with exactly this grid (eager fast path), e.g. "float8_e4m3fn"

    def __post_init__(self) -> None:
        for f in ("ebits", "mbits", "bias"):
            if not isinstance(getattr(self, f), int) or isinstance(getattr(self, f), bool):
                raise ValueError(f"{f}={getattr(self, f)!r} must be an int")
        if self.ebits < 0 or self.mbits < 0 or self.ebits + self.mbits < 1:
            raise ValueError(f"ebits={self.ebits}, mbits={self.mbits}: need ebits >= 0, mbits >= 0, ebits + mbits >= 1")
        if self.bits > 8 and not (self.bits == 16 and self.specials == "ieee" and self.signed):
            raise ValueError(f"{self.name}: {self.bits} bits; need sign + ebits + mbits <= 8, or a signed 16-bit "
                             f"specials='ieee' format (BF16, FP16: formats_wide.py) "
                             f"(valid built-ins: {', '.join(BUILTIN_FORMATS) or 'E4M3, E5M2, ...'})")
        if self.specials not in SPECIALS:
            raise ValueError(f"specials={self.specials!r} is not one of {SPECIALS}")
        if self.specials == "fnuz" and not self.signed:
            raise ValueError("specials='fnuz' needs signed=True (its NaN is the negative-zero code 0x80)")
        if self.specials == "ieee" and (self.ebits < 1 or self.mbits < 1):
            raise ValueError("specials='ieee' needs ebits >= 1 and mbits >= 1 (NaN needs a nonzero mantissa "
                             "at the top exponent); use 'fn' or 'none'")
        if self.ebits == 0 and not self.subnormals:
            raise ValueError("ebits=0 (fixed point) needs subnormals=True")
        if not self.subnormals and self.signed:
            raise ValueError("subnormals=False (no zero code) is only supported for unsigned formats (e8m0fnu)")
        if self.native is not None and _NATIVE_DTYPES.get(self.native) != self.specials:
            raise ValueError(f"native={self.native!r} with specials={self.specials!r}: valid natives "
                             f"(dtype: specials) are {_NATIVE_DTYPES}")
        if not -300 < self.bias < 300:
            raise ValueError(f"bias={self.bias} out of range (-300, 300)")
        self._set_derived()

    # ---- derived constants (computed once; plain Python numbers) ----
    def _set_derived(self) -> None:
        table = [self._decode_py(c) for c in range(1 << self.bits)]
        finite = sorted({v for v in table if math.isfinite(v)})
        emin = 1 - self.bias if self.subnormals else -self.bias
        mx = max(finite)
        if mx <= 0:
            raise ValueError(f"{self.name}: no positive finite value (e.g. E1M0/E0M1 with a NaN code); "
                             f"add bits or use specials='none'")
        needs_f64 = emin < -126 or mx >= 2.0**127 or (emin - self.mbits) < -149
        s = object.__setattr__
        s(self, "_table", tuple(table))
        s(self, "_finite", tuple(finite))
        s(self, "_max", float(mx))
        s(self, "_emin", emin)
        s(self, "_rank_codes", tuple(self._codes_by_rank()))     # encode's tables, built once (BF16: 65536 codes)
        s(self, "_specials", self._special_codes())
        kp = KernelParams(self.mbits, emin, float(mx), 2.0**emin, self.subnormals, self.specials,
                          self.signed, self.has_zero, needs_f64, self.bias, self.native)
        s(self, "_kernel_key", repr(kp))
        _KERNELS.setdefault(self._kernel_key, kp)
        if self.native is not None:   # the torch dtype must have exactly this grid
            codes = torch.arange(256, dtype=torch.uint8).view(getattr(torch, self.native)).double()
            if not torch.equal(torch.unique(codes[torch.isfinite(codes)]), torch.tensor(finite, dtype=torch.float64)):
                raise ValueError(f"native={self.native!r} does not have the grid of {self.name}")

    def _decode_py(self, code: int) -> float:
        """Value of one code (Python float; NaN/inf for specials)."""
        E, M = self.ebits, self.mbits
        neg = self.signed and bool(code >> (E + M) & 1)
        mag = code & ((1 << (E + M)) - 1)
        e, m = mag >> M, mag & ((1 << M) - 1)
        top_e = (1 << E) - 1
        if self.specials == "fnuz" and neg and mag == 0:
            return math.nan
        if self.specials == "fn" and mag == (1 << (E + M)) - 1:
            return math.nan
        if self.specials == "ieee" and e == top_e:
            return math.nan if m else (-math.inf if neg else math.inf)
        if self.subnormals and e == 0:
            v = m * 2.0 ** (1 - self.bias - M)
        else:
            v = (1 + m / 2**M) * 2.0 ** (e - self.bias)
        return -v if neg else v

    # ---- properties ----
    @property
    def kernel(self) -> KernelParams:
        """Constants for rounding.quantize_tensor (e.g. to call the generic kernel directly).

        Looked up in the module table _KERNELS under a string key rather than stored on the object: under
        torch.compile's default automatic-dynamic mode a float read from an attribute that held another
        value in an earlier compile (another format at the same place in the model) becomes a SymFloat,
        which crashed struct.pack and the tracing of autograd.Function backwards. A table entry under a
        constant key is its own source and never changes value, so dynamo keeps it a constant.
        """
        return _KERNELS[self._kernel_key]

    @property
    def bits(self) -> int:
        return int(self.signed) + self.ebits + self.mbits

    @property
    def has_zero(self) -> bool:
        return self.subnormals    # exponent field 0, mantissa 0 encodes zero only when field 0 is subnormal

    @property
    def max(self) -> float:
        return self._max

    @property
    def emin(self) -> int:
        """Exponent of the smallest normal binade (2**emin = min_normal)."""
        return self._emin

    @property
    def emax(self) -> int:
        """Exponent of the binade holding max."""
        return math.floor(math.log2(self._max))

    @property
    def min_normal(self) -> float:
        """2**emin: the threshold below which values take the subnormal spacing. A format without exponent bits
        (E0M7, fixed point) has no normal numbers at all: min_normal (1.0) then lies above max, has_normals is
        False and the tables show it as "none" (summary: NaN)."""
        return 2.0**self._emin

    @property
    def has_normals(self) -> bool:
        return self.min_normal <= self._max

    @property
    def aliases(self) -> tuple[str, ...]:
        """Every other name get_format accepts for this format (lower case)."""
        return tuple(a for a, n in _ALIASES.items() if n == self.name and a != self.name.lower())

    @property
    def min_subnormal(self) -> float:
        """Smallest positive value (= min_normal when there are no subnormals)."""
        return self._finite[self._finite.index(0.0) + 1] if self.has_zero else self._finite[0]

    @property
    def n_finite(self) -> int:
        """Number of distinct finite values (+0 and -0 count once)."""
        return len(self._finite)

    @property
    def overflow_nonsat(self) -> str:
        """What overflow gives with saturate=False."""
        return {"ieee": "inf", "fn": "nan", "fnuz": "nan", "none": "max"}[self.specials]

    # ---- constructors ----
    @classmethod
    def generic(cls, ebits: int, mbits: int) -> "FloatFormat":
        """The generic AltGrad convention for E<ebits>M<mbits> (see module docstring)."""
        bias = 2 ** (ebits - 1) - 1 if ebits >= 1 else 1
        return cls(f"E{ebits}M{mbits}", ebits, mbits, bias, specials="fn",
                   note="generic AltGrad convention: bias 2^(e-1)-1, subnormals, NaN at all-ones, no inf")

    # ---- numerics ----
    def values(self) -> torch.Tensor:
        """Every finite representable value, ascending and unique (float64, 1-D)."""
        return self._tensor("_finite", torch.float64, "cpu").clone()

    def _tensor(self, table: str, dtype: torch.dtype, device: Any) -> torch.Tensor:
        """One of the derived tables (`_finite`, `_rank_codes`, `_table`) as a cached tensor: never write to it."""
        key = (self, table, dtype, str(device))
        t = _TENSORS.get(key)
        if t is None:
            t = _TENSORS[key] = torch.tensor(getattr(self, table), dtype=dtype, device=device)
        return t

    def quantize(self, x: torch.Tensor, rounding: str = "nearest", saturate: bool = True,
                 generator: torch.Generator | None = None, sr_bits: int | None = None) -> torch.Tensor:
        """Round x onto the grid (same shape and dtype).  See the module docstring for conventions.

        rounding: one of ROUNDING_MODES; saturate: overflow -> +-max (else inf/NaN per `specials`);
        generator/sr_bits: stochastic rounding only.  Not differentiable: the result has no autograd
        history (straight-through estimators live in quant.py).
        """
        rbits = None
        if rounding == "stochastic":
            rbits = random_bits(x, self.kernel, sr_bits, generator)
        return quantize_tensor(x, self.kernel, rounding, saturate, rbits, sr_bits)

    def quantize_with_bits(self, x: torch.Tensor, rbits: torch.Tensor, sr_bits: int | None = None,
                           saturate: bool = True) -> torch.Tensor:
        """Stochastic rounding with caller-supplied uniform integers rbits in [0, 2^sr_bits) (same shape as x).

        Useful under torch.compile (generate the bits outside) and for bit-exact tests against gfloat.
        """
        return quantize_tensor(x, self.kernel, "stochastic", saturate, rbits, sr_bits)

    def encode(self, x: torch.Tensor, rounding: str = "nearest", saturate: bool = True,
               generator: torch.Generator | None = None) -> torch.Tensor:
        """Quantize x and return the uint8 codes (NaN -> the canonical NaN code; "none" formats raise on NaN)."""
        q = self.quantize(x, rounding, saturate, generator).to(torch.float64)
        fin = self._tensor("_finite", torch.float64, q.device)
        cdt = torch.uint8 if self.bits <= 8 else torch.int32     # 16-bit grids (formats_wide.py): int32 codes
        codes_by_rank = self._tensor("_rank_codes", cdt, q.device)
        idx = torch.searchsorted(fin, torch.nan_to_num(q, nan=0.0, posinf=0.0, neginf=0.0)).clamp_max(len(fin) - 1)
        out = codes_by_rank[idx]
        if self.signed and self.specials != "fnuz":
            neg_zero = (q == 0) & torch.signbit(q)
            out = torch.where(neg_zero, torch.tensor(1 << (self.bits - 1), dtype=cdt, device=q.device), out)
        for special, code in self._specials.items():
            mask = {"nan": torch.isnan(q), "+inf": q == math.inf, "-inf": q == -math.inf}[special]
            out = torch.where(mask, torch.tensor(code, dtype=cdt, device=q.device), out)
        if "nan" not in self._specials and bool(torch.isnan(q).any()):
            raise ValueError(f"{self.name} has no NaN code (specials={self.specials!r}); cannot encode NaN")
        return out

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """Values (float32) of uint8/int codes."""
        return self._tensor("_table", torch.float32, codes.device)[codes.long()]

    def _codes_by_rank(self) -> list[int]:
        """For each finite value (ascending), its code (+0 for zero)."""
        first: dict[float, int] = {}
        for c, v in enumerate(self._table):
            if math.isfinite(v) and v not in first:
                first[v] = c
        return [first[v] for v in self._finite]

    def _special_codes(self) -> dict[str, int]:
        out = {}
        for c, v in enumerate(self._table):
            if math.isnan(v):
                out.setdefault("nan", c)
            elif v == math.inf:
                out["+inf"] = c
            elif v == -math.inf:
                out["-inf"] = c
        if self.specials == "fn" and self.signed:
            out["nan"] = (1 << (self.bits - 1)) - 1   # canonical positive NaN 0x7F (as torch's e4m3fn)
        if self.specials == "ieee":
            out["nan"] = (1 << (self.bits - 1)) - 1   # top exponent, all-ones mantissa
        return out

    def ulp(self, x: torch.Tensor, direction: str = "up") -> torch.Tensor:
        """Local grid spacing at x.

        "up": gap from the grid value at or below |x| to the next one away from zero; "down": gap from the
        grid value at or above |x| to the next one toward zero.  They differ only when |x| is a power of
        two in the normal range (below 2^k the gap is half the gap above).  Exponents are clamped to
        [emin, emax]: subnormals/zero get the subnormal spacing (min_subnormal; formats without subnormals
        get 2^(emin-mbits)), values at or above max get the top binade's spacing.  NaN -> NaN.
        Returned in x's dtype (float16/bfloat16 inputs: float32, since tiny spacings may not fit).
        """
        if direction not in ("up", "down"):
            raise ValueError(f"direction={direction!r} is not one of ('up', 'down')")
        wdt = torch.float64 if x.dtype == torch.float64 else torch.float32
        ax = x.to(wdt).abs()
        mant, e = torch.frexp(ax)                  # ax = mant * 2^e, mant in [0.5, 1)
        e = e - 1                                  # floor(log2 |x|) for positive finite x
        if direction == "down":
            e = e - (mant == 0.5).to(e.dtype)      # on a power of two the gap below is one binade lower
        e = e.clamp(self.emin, max(self.emax, self.emin))   # all-subnormal formats (E0M7): one spacing
        sp = torch.ldexp(torch.ones_like(ax), (e - self.mbits).to(wdt))
        sp = torch.where(ax == 0, 2.0 ** (self.emin - self.mbits), sp)
        sp = torch.where(torch.isinf(ax), 2.0 ** (max(self.emax, self.emin) - self.mbits), sp)
        return torch.where(torch.isnan(ax), math.nan, sp)

    # ---- printing (convention_table, grid_table: FormatTables, formats_tables.py) ----
    def short_str(self) -> str:
        """Compact unique name for logs, accepted by get_format (e.g. "e4m3fn", "e1m6")."""
        return _SHORT.get(self.name, self.name.lower())

    def __repr__(self) -> str:
        return (f"FloatFormat({self.name}: {self.bits}b e{self.ebits}m{self.mbits} bias={self.bias} "
                f"specials={self.specials} max={self.max:g} min_sub={self.min_subnormal:g})")


# ---------------------------------------------------------------- registry
def _fmt(name, e, m, bias, *, specials, signed=True, subnormals=True, reference=None, note="", native=None):
    return FloatFormat(name, e, m, bias, signed=signed, subnormals=subnormals, specials=specials,
                       reference=reference, note=note, native=native)


BUILTIN_FORMATS: dict[str, FloatFormat] = {}
_ALIASES: dict[str, str] = {}
_SHORT: dict[str, str] = {}


def _register(fmt: FloatFormat, short: str, *aliases: str) -> None:
    BUILTIN_FORMATS[fmt.name] = fmt
    _SHORT[fmt.name] = short
    for a in (fmt.name, short, *aliases):
        _ALIASES[a.lower()] = fmt.name


_GEN = "generic AltGrad convention (no standard): bias 2^(e-1)-1, subnormals, NaN at all-ones, no inf"
_register(_fmt("E4M3", 4, 3, 7, specials="fn", reference="torch.float8_e4m3fn / ml_dtypes.float8_e4m3fn",
               note="OCP FP8 E4M3", native="float8_e4m3fn"), "e4m3fn", "float8_e4m3fn", "fp8_e4m3")
_register(_fmt("E5M2", 5, 2, 15, specials="ieee", reference="torch.float8_e5m2 / ml_dtypes.float8_e5m2",
               note="OCP FP8 E5M2", native="float8_e5m2"), "e5m2", "float8_e5m2", "fp8_e5m2")
_register(_fmt("E3M4", 3, 4, 3, specials="ieee", reference="ml_dtypes.float8_e3m4", note="IEEE-style E3M4"),
          "e3m4", "float8_e3m4")
_register(_fmt("E4M3_IEEE", 4, 3, 7, specials="ieee", reference="ml_dtypes.float8_e4m3", note="IEEE-style E4M3"),
          "e4m3ieee", "float8_e4m3")
_register(_fmt("E4M3FNUZ", 4, 3, 8, specials="fnuz", reference="torch.float8_e4m3fnuz / ml_dtypes.float8_e4m3fnuz",
               note="AMD/Graphcore FP8", native="float8_e4m3fnuz"), "e4m3fnuz", "float8_e4m3fnuz")
_register(_fmt("E5M2FNUZ", 5, 2, 16, specials="fnuz", reference="torch.float8_e5m2fnuz / ml_dtypes.float8_e5m2fnuz",
               note="AMD/Graphcore FP8", native="float8_e5m2fnuz"), "e5m2fnuz", "float8_e5m2fnuz")
_register(_fmt("E4M3B11FNUZ", 4, 3, 11, specials="fnuz", reference="ml_dtypes.float8_e4m3b11fnuz",
               note="bias-11 FP8"), "e4m3b11fnuz", "float8_e4m3b11fnuz")
_register(_fmt("E8M0FNU", 8, 0, 127, specials="fn", signed=False, subnormals=False,
               reference="ml_dtypes.float8_e8m0fnu", note="OCP MX scale: unsigned powers of two, no zero, NaN=0xFF"),
          "e8m0fnu", "float8_e8m0fnu", "e8m0")
_register(_fmt("E2M3", 2, 3, 1, specials="none", reference="ml_dtypes.float6_e2m3fn", note="OCP MX FP6"),
          "e2m3fn", "float6_e2m3fn", "fp6_e2m3")
_register(_fmt("E3M2", 3, 2, 3, specials="none", reference="ml_dtypes.float6_e3m2fn", note="OCP MX FP6"),
          "e3m2fn", "float6_e3m2fn", "fp6_e3m2")
_register(_fmt("E2M1", 2, 1, 1, specials="none", reference="ml_dtypes.float4_e2m1fn", note="OCP MX FP4"),
          "e2m1fn", "float4_e2m1fn", "fp4_e2m1", "fp4")
for _e, _m in ((2, 5), (1, 6), (6, 1), (7, 0), (0, 7)):
    _g = FloatFormat.generic(_e, _m)
    _register(FloatFormat(_g.name, _e, _m, _g.bias, specials="fn",
                          note=_GEN + (" (E0M7: bias 1, fixed point k/128)" if _e == 0 else "")),
              _g.name.lower())

_EXMY = re.compile(r"^e(\d+)m(\d+)$")


_WIDE_CACHE: dict[str, FloatFormat] = {}


def _wide_format(key: str) -> FloatFormat | None:
    """The 16-bit format (formats_wide.py) for a lower-case name or alias, None if `key` names none."""
    name = WIDE_ALIASES.get(key)
    if name is None:
        return None
    if name not in _WIDE_CACHE:   # one object per name: identity-stable for torch.compile guards
        e, m, ref, _ = WIDE_SPECS[name]
        _WIDE_CACHE[name] = FloatFormat(name, e, m, 2 ** (e - 1) - 1, specials="ieee", reference=ref,
                                        note=f"16-bit IEEE-style E{e}M{m} (storage grid)")
    return _WIDE_CACHE[name]


def _block_grid(key: str) -> FloatFormat | None:
    """A block format's element / scale grid (formats_block.py) for a lower-case name, None if `key` names none."""
    name = BLOCK_GRID_ALIASES.get(key)
    if name is None:
        return None
    if name not in _WIDE_CACHE:   # one object per name (compile guards), built on first use
        e, m, bias, signed, specials, note, _ = BLOCK_GRID_SPECS[name]
        _WIDE_CACHE[name] = FloatFormat(name, e, m, bias, signed=signed, specials=specials, note=note)
    return _WIDE_CACHE[name]


def get_format(name: "str | FloatFormat") -> FloatFormat:
    """Format by name (case-insensitive; aliases like "e4m3fn", "float8_e4m3fn"; any "E<x>M<y>")."""
    if isinstance(name, FloatFormat):
        return name
    if not isinstance(name, str):
        raise ValueError(f"format must be a name or FloatFormat, got {type(name).__name__}")
    key = name.strip().lower()
    wide = _wide_format(key) or _block_grid(key)   # BF16 / FP16, INT4 / INT8_OCP / UE5M3 (not in BUILTIN_FORMATS)
    if wide is not None:
        return wide
    if key in _ALIASES:
        canonical = _ALIASES[key]
        if _EXMY.match(key) and canonical.lower() != key:   # "E8M0" reads like a generic ExMy but is not one
            f = BUILTIN_FORMATS[canonical]
            warnings.warn(f"format {name!r} resolves to {canonical} ({f.note}); write {canonical!r} to say so",
                          UserWarning, stacklevel=2)
        return BUILTIN_FORMATS[canonical]
    m = _EXMY.match(key)
    valid = ", ".join(BUILTIN_FORMATS)
    if not m:
        raise ValueError(f"unknown format {name!r}: use a built-in ({valid}), an alias such as 'e4m3fn' or "
                         f"'float8_e5m2', or 'E<x>M<y>' with x, y >= 0, x + y >= 1 and 1 + x + y <= 8")
    e, mb = int(m.group(1)), int(m.group(2))
    if e + mb < 1 or 1 + e + mb > 8:
        raise ValueError(f"format {name!r}: need 1 + x + y <= 8 bits and x + y >= 1 (x, y >= 0); "
                         f"valid built-ins: {valid}")
    if (e, mb) not in _GENERIC_CACHE:    # one object per generic name: identity-stable for compile guards
        _GENERIC_CACHE[(e, mb)] = FloatFormat.generic(e, mb)
    return _GENERIC_CACHE[(e, mb)]


_GENERIC_CACHE: dict[tuple[int, int], FloatFormat] = {}


def format_summary_table(names=None):
    """pandas DataFrame, one row per format: bits, bias, specials, max, min normal/subnormal, normal_binades...
    min_normal is NaN for a format without normal numbers (E0M7: no exponent bits)."""
    import pandas as pd

    rows = []
    for n in names if names is not None else list(BUILTIN_FORMATS):
        f = get_format(n)
        rows.append({"format": f.name, "short": f.short_str(), "bits": f.bits, "ebits": f.ebits, "mbits": f.mbits,
                     "bias": f.bias, "specials": f.specials, "max": f.max,
                     "min_normal": f.min_normal if f.has_normals else math.nan,
                     "min_subnormal": f.min_subnormal,
                     # two binade counts, two names (notebook/names.py TERMS): the normal range's exponents here,
                     # the dynamic range incl. subnormals, log2(max / min_subnormal), in dynamic_range_log2
                     "normal_binades": f.emax - f.emin + 1 if f.has_normals else 0,
                     "values_per_binade": 2**f.mbits, "n_finite": f.n_finite,
                     "dynamic_range_log2": math.log2(f.max / f.min_subnormal)})
    return pd.DataFrame(rows).set_index("format")
