"""Per-GEMM operand overrides of a GEMM-faithful linear: one operand of one GEMM quantized with its own QuantSpec.

Each GEMM of `Y = X·Wᵀ` has two operands, named by LayerSpec's roles (GEMM_OPERANDS):

    fprop  Y  = X · Wᵀ    input, weight
    dgrad  dX = dY · W    grad_output, weight
    wgrad  dW = dYᵀ · X   grad_output, input

`GemmOptions.overrides` maps a GEMM to {operand: QuantSpec | format name | dict | null}, e.g. NVFP4 fprop with the
wgrad operands in MXFP8 and dgrad's W in per-tensor E4M3:

    gemm: {overrides: {wgrad: {input: {fmt: E4M3, scaling: {kind: mx}},
                               grad_output: {fmt: E4M3, scaling: {kind: mx}}},
                       dgrad: {weight: E4M3}}}

An operand without an override uses its role's spec and Quantizer (shared by every GEMM that uses the role, as
without overrides). An overridden operand gets its own Quantizer (own scaler state, counters and SR stream, in
`QuantizedLinear.gemm_quants`, keyed by `override_key`); null keeps that operand in high precision.
"""
from __future__ import annotations

from typing import Any, Mapping

from altgrad_lib.numerics.quant_spec import QuantSpec

GEMMS = ("fprop", "dgrad", "wgrad")
GEMM_OPERANDS = {"fprop": ("input", "weight"), "dgrad": ("grad_output", "weight"), "wgrad": ("grad_output", "input")}
ROLE_ATTR = {"input": "x_quant", "weight": "w_quant", "grad_output": "g_quant"}   # QuantizedLinear's role quantizers
ROLE_LABEL = {"input": "X", "weight": "W", "grad_output": "dY"}                   # the monitors' role names

Overrides = tuple[tuple[str, str, "QuantSpec | None"], ...]   # (gemm, operand, spec), in GEMMS x operand order


def check_signed(spec: QuantSpec | None, where: str, role: str) -> QuantSpec | None:
    """X, W and dY hold negative values: an unsigned format turns them into NaN (formats.py) at step 0.
    Unsigned E8M0FNU is the MX *block-scale* format (numerics/block_scaling.py), never an operand's."""
    if spec is not None and not spec.fmt.signed:
        raise ValueError(f"{where}: format {spec.fmt.name} has no sign bit, but the {role} tensor holds negative "
                         f"values; use a signed format (e.g. E4M3, E5M2)")
    return spec


def operand_spec(value: Any, where: str, role: str) -> QuantSpec | None:
    """A QuantSpec, a format name ("E4M3": default scaling / rounding), a QuantSpec dict, or None (high precision)."""
    if value is None or isinstance(value, QuantSpec):
        spec = value
    elif isinstance(value, str):
        spec = QuantSpec(fmt=value)
    elif isinstance(value, Mapping):
        spec = QuantSpec.from_dict(dict(value))
    else:
        raise TypeError(f"{where}: expected a QuantSpec dict, a format name or null, got {value!r}")
    return check_signed(spec, where, role)


def normalize_overrides(value: Any) -> Overrides:
    """{gemm: {operand: spec}} (or the normalized tuple itself) -> the canonical tuple; one-line errors."""
    if isinstance(value, tuple) and all(isinstance(t, tuple) and len(t) == 3 for t in value):
        value = {g: {r: s for gg, r, s in value if gg == g} for g in dict.fromkeys(t[0] for t in value)}
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise TypeError(f"GemmOptions.overrides={value!r}: expected a dict {{gemm: {{operand: spec}}}}")
    bad = [g for g in value if g not in GEMMS]
    if bad:
        raise ValueError(f"GemmOptions.overrides: unknown GEMM(s) {bad}; valid choices: {GEMMS}")
    out = []
    for gemm in GEMMS:
        ops = value.get(gemm)
        if ops is None:
            continue
        if not isinstance(ops, Mapping):
            raise TypeError(f"GemmOptions.overrides[{gemm!r}]={ops!r}: expected a dict {{operand: spec}} with "
                            f"operands {GEMM_OPERANDS[gemm]}")
        bad = [r for r in ops if r not in GEMM_OPERANDS[gemm]]
        if bad:
            raise ValueError(f"GemmOptions.overrides[{gemm!r}]: unknown operand(s) {bad}; valid choices for "
                             f"{gemm}: {GEMM_OPERANDS[gemm]}")
        for role in GEMM_OPERANDS[gemm]:
            if role in ops:
                where = f"GemmOptions.overrides[{gemm!r}][{role!r}]"
                try:
                    out.append((gemm, role, operand_spec(ops[role], where, role)))
                except (ValueError, TypeError) as e:   # QuantSpec's own message does not say which operand
                    raise type(e)(str(e) if str(e).startswith(where) else f"{where}: {e}") from None
    return tuple(out)


def overrides_to_dict(overrides: Overrides) -> dict:
    out: dict[str, dict] = {}
    for gemm, role, spec in overrides:
        out.setdefault(gemm, {})[role] = None if spec is None else spec.to_dict()
    return out


def overrides_short_str(overrides: Overrides) -> str:
    """e.g. "dgrad.w=hp+wgrad.i=e4m3fn/mx32f/rne" (GEMMS x operand order)."""
    return "+".join(f"{g}.{r[0]}={'hp' if s is None else s.short_str()}" for g, r, s in overrides)


def override_key(gemm: str, role: str) -> str:
    """Name of an override's Quantizer in QuantizedLinear.gemm_quants (and in its state_dict)."""
    return f"{gemm}_{role}"


def override_quantizers(layer) -> list[tuple[str, str, object]]:
    """(gemm, role, Quantizer) of each override with a Quantizer of a QuantizedLinear (none on the classic path)."""
    own = getattr(layer, "gemm_quants", None)
    if own is None or layer.gemm is None:
        return []
    return [(g, r, own[override_key(g, r)]) for g, r, _ in layer.gemm.overrides if override_key(g, r) in own]


def override_label(gemm: str, role: str) -> str:
    """The monitors' role name of an override's Quantizer, e.g. "wgrad.X" (the role's own is "X")."""
    return f"{gemm}.{ROLE_LABEL[role]}"


def operand_quantizer(layer, gemm: str, role: str):
    """The Quantizer of `role` in `gemm` (None: high precision): the override's own when the GEMM overrides that
    operand (absent from layer.gemm_quants: null, or removed by a monitor), else the role's shared one."""
    if any(g == gemm and r == role for g, r, _ in layer.gemm.overrides):
        own = getattr(layer, "gemm_quants", None)
        key = override_key(gemm, role)
        return own[key] if own is not None and key in own else None
    return getattr(layer, ROLE_ATTR[role])


def delayed_rht_error(role_specs: Mapping[str, QuantSpec | None], opts) -> str | None:
    """Why `opts` (GemmOptions) with these role specs misuses delayed scaling, or None.

    Delayed scaling keeps one amax history per Quantizer and scales each call from the history of earlier calls.
    A role's shared Quantizer quantizes its tensor once per distinct copy: with the random Hadamard transform on
    one of its GEMMs that is the rotated copy *and* another one (un-rotated, or rotated along the other dim), so
    its history interleaves the amaxes of different tensors (the rotation moves the amax by up to a factor
    sqrt(rht_dim)) and each copy is scaled from the other's amax. An operand override has a Quantizer of its own
    that sees one copy, so its history is consistent."""
    for role, spec in role_specs.items():
        if spec is None or getattr(spec.scaling, "kind", None) != "delayed":
            continue
        users = [g for g in GEMMS if role in GEMM_OPERANDS[g] and g not in opts.hp_gemms
                 and not any(gg == g and r == role for gg, r, _ in opts.overrides)]
        rotated = [g for g in users if g in opts.rht]
        if rotated and len(users) > 1:
            return (f"LayerSpec.{role}: delayed scaling is invalid with gemm.rht={list(opts.rht)}: one amax history "
                    f"would mix the copies of {'+'.join(users)} (rotated in {'+'.join(rotated)}); valid: a stateless "
                    f"scaling kind (e.g. 'current'), rht without {'+'.join(rotated)}, or a gemm.overrides entry for "
                    f"{rotated[0]}'s {role} (its own history)")
    return None
