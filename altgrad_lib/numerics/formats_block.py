"""Element and scale grids of block formats that are not small floats of their own (resolved by get_format).

Like formats_wide.py these stay out of formats.BUILTIN_FORMATS (the list notebook 01 and the format tables print);
each is an exact `FloatFormat` (same rounding kernel), so a block recipe names it like any other format.

- INT4: integers k in [-7, 7] (sign-magnitude, symmetric): NVINT4's elements (arXiv 2510.25602; fouroversix's
  int4 max 7). Block scale NVFP4's two-level one with fmax 7 (block_scaling.py).
- INT8_OCP: the OCP MX v1.0 INT8 element, an 8-bit integer with an implicit scale 2^-6, i.e. k/64. The spec's
  two's complement code 0x80 would be -2 (gfloat's ocp_int8 has it); microxcaling (the spec's reference code)
  clamps both signs at its max_norm 127/64, and arXiv 2510.25602 uses the symmetric range for unbiased
  training, so k is in [-127, 127] here. emax 0 (max 1.984375): the MX FLOOR scale is 2^floor(log2 amax).
- UE5M3: unsigned E5M3 block scales (AMD's amdfp4; TransformerEngine's kFloat8UE5M3): bias 15, subnormals,
  one NaN code 0xFF, no inf, max 0xFE = 1.75 * 2^16 = 114688 (TE's ue5m3_max; AMD alto's UE5M3_MAX).
This module is data only; formats.get_format builds the FloatFormat objects.
"""
from __future__ import annotations

# canonical name -> (ebits, mbits, bias, signed, specials, reference, aliases)
BLOCK_GRID_SPECS = {
    "INT4": (0, 3, -2, True, "none", "integers -7..7 (NVINT4 elements, arXiv 2510.25602)", ("int4",)),
    "INT8_OCP": (0, 7, 0, True, "none", "OCP MX INT8 element k/64, |k| <= 127 (microxcaling's clamp)",
                 ("int8_ocp", "mxint8_elem")),
    "UE5M3": (5, 3, 15, False, "fn", "unsigned E5M3 block scale (TE kFloat8UE5M3, AMD amdfp4)", ("ue5m3",)),
}
BLOCK_GRID_ALIASES = {a: n for n, spec in BLOCK_GRID_SPECS.items() for a in (n.lower(), *spec[6])}
