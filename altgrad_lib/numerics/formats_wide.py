"""16-bit IEEE-style grids (BF16 = E8M7, FP16 = E5M10) for weight *storage* (optim.weight_fmt: bf16 / fp16).

They are `FloatFormat`s like the 8-bit ones (same rounding kernel: RNE and stochastic rounding, tested bit for
bit against torch's own casts `x.to(torch.bfloat16)` / `x.to(torch.float16)` in
tests/test_numerics_formats_wide.py), kept
out of formats.BUILTIN_FORMATS on purpose: the registry is the list of small formats that notebook 01 and the
format tables print, and a 65536-code grid table belongs in none of them.  `get_format` resolves these names
here, and builds each format on first use (its 65536-entry value table takes ~0.1 s, not paid at import).

Conventions are IEEE 754 (binary16) and bfloat16's: bias 2^(e-1)-1, subnormals, specials "ieee" (inf and NaN in
the top binade).  quantize's saturate=True (the default) maps finite overflow to +-max like every format here;
torch's cast gives inf there, which is quantize(..., saturate=False).
Codes: `encode` returns int32 codes for these (uint8 only holds 8-bit codes).
This module is data only (names, shapes, aliases); formats.get_format builds the FloatFormat objects, so the two
modules do not import each other.
"""
from __future__ import annotations

# canonical name -> (ebits, mbits, reference, aliases)
WIDE_SPECS = {
    "BF16": (8, 7, "torch.bfloat16", ("bf16", "e8m7", "bfloat16")),
    "FP16": (5, 10, "torch.float16 (IEEE binary16)", ("fp16", "e5m10", "float16", "half")),
}
WIDE_ALIASES = {a: n for n, spec in WIDE_SPECS.items() for a in (n.lower(), *spec[3])}
