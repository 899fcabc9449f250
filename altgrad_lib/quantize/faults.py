"""Faults injected into one GEMM of one QuantizedLinear, to prove that the numerics doctor (studies/doctor.py) finds
them: `--inject KIND:LAYER:GEMM[:VALUE]`.

    gain           the GEMM's output times VALUE (default 0.88: the wgrad gain of the scale-swizzle bug the
                   TE-vs-torchao NVFP4 harness, rdspring1/nvfp4-training-harness, traced); one operand's quantized copy
                   is scaled, and a GEMM is linear in each operand
    correlated_sr  the GEMM's stochastically rounded operand draws the same random bits at every call (its generator
                   re-seeded before each draw), as a badly seeded SR does (Primus-Turbo#365)
    scale_swap     one operand's block scales permuted: each block's codes are decoded with the next block's scale
                   (rolled by one block along the blocked dim), as a scale-swizzle bug does
    few_bit_sr     the GEMM's stochastically rounded operand draws VALUE random bits (default 1) instead of the
                   format's default (too few bits bias SR, arXiv 2504.20634)

Which operand: gain the GEMM's first quantized operand (GEMM_OPERANDS order), correlated_sr / few_bit_sr its first
one rounded stochastically, scale_swap its first block-scaled one. The faulty Quantizer goes in as an operand
override of that GEMM only (gemm_overrides.py): it has its own Quantizer, so the other GEMMs that share the role's
Quantizer are untouched; a classic-path layer moves to the GEMM-faithful path (the same numerics for its per-tensor
specs, gemm_quant.py).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from altgrad_lib.errors import did_you_mean, invalid
from altgrad_lib.numerics.quantizer import Quantizer
from altgrad_lib.quantize.gemm_overrides import GEMM_OPERANDS, GEMMS, ROLE_ATTR, operand_quantizer, override_key
from altgrad_lib.quantize.gemm_quant import GemmOptions
from altgrad_lib.quantize.linear import QuantizedLinear

FAULT_KINDS = ("gain", "correlated_sr", "scale_swap", "few_bit_sr")
DEFAULT_VALUE = {"gain": 0.88, "few_bit_sr": 1}
FAULT_SYNTAX = "KIND:LAYER:GEMM[:VALUE]"


@dataclass(frozen=True)
class Fault:
    """One injected fault (see the module docstring)."""

    kind: str
    layer: str     # a QuantizedLinear's fully qualified name, e.g. transformer.h.1.mlp.c_fc
    gemm: str      # GEMMS
    value: float | None = None

    @classmethod
    def parse(cls, text: str) -> "Fault":
        """'gain:transformer.h.1.mlp.c_fc:wgrad:0.88' -> Fault; one-line ValueError naming the bad part."""
        parts = str(text).split(":")
        if len(parts) not in (3, 4):
            raise ValueError(f"--inject {text!r} is invalid; valid: {FAULT_SYNTAX}, KIND one of {FAULT_KINDS}, "
                             f"GEMM one of {GEMMS}")
        kind, layer, gemm = parts[:3]
        if kind not in FAULT_KINDS:
            raise invalid("--inject kind", kind, FAULT_KINDS)
        if gemm not in GEMMS:
            raise invalid("--inject GEMM", gemm, GEMMS)
        value = DEFAULT_VALUE.get(kind)
        if len(parts) == 4:
            if kind not in DEFAULT_VALUE:
                raise ValueError(f"--inject {text!r}: {kind} takes no VALUE; valid: {kind}:{layer}:{gemm}")
            try:
                value = float(parts[3])
            except ValueError:
                value = None
            ok = (value is not None and value > 0 and value == value and value != float("inf")
                  and (kind != "few_bit_sr" or value == int(value)))
            if not ok:
                want = "a float > 0 (the GEMM output's factor)" if kind == "gain" else "an int >= 1 (random bits)"
                raise ValueError(f"--inject {text!r}: VALUE={parts[3]!r} is invalid; valid: {want}")
        return cls(kind, layer, gemm, value)

    def __str__(self) -> str:
        v = "" if self.value is None else f":{self.value:g}"
        return f"{self.kind}:{self.layer}:{self.gemm}{v}"


class FaultyQuantizer(Quantizer):
    """A Quantizer with one fault (gain, correlated_sr, scale_swap); few_bit_sr is a plain Quantizer with sr_bits."""

    def __init__(self, spec, seed: int, kind: str, value: float | None) -> None:
        super().__init__(spec, seed=seed)
        self.kind, self.value = kind, value

    def _before(self) -> None:
        if self.kind == "correlated_sr":     # the same bits at every call: re-seed the stream, restart the counter
            if self._gen is not None:
                self._gen.manual_seed(self.seed)
            self._rng_step, self._rng_calls = 0, 0

    def _after(self, x: Tensor, y: Tensor, axis: int) -> Tensor:
        if self.kind == "gain":
            return y * self.value
        if self.kind == "scale_swap":
            # decode multiplier 1/s per element (elements are Q(x·s)/s): block i decoded with block i+1's scale
            s = self.scale_of(x, axis)
            block = self.spec.scaling.block_size
            ratio = s / s.roll(block, dims=-1)
            ratio = torch.where(torch.isfinite(ratio) & (ratio > 0), ratio, torch.ones_like(ratio))
            return y * ratio.movedim(-1, axis)
        return y

    def quantize(self, x: Tensor, axis: int = -1) -> Tensor:
        self._before()
        return self._after(x, super().quantize(x, axis), axis)

    def forward(self, x: Tensor, axis: int = -1) -> Tensor:
        self._before()
        return self._after(x, super().forward(x, axis), axis)


def role_quantizer(layer: nn.Module, gemm: str, role: str) -> Quantizer | None:
    """The Quantizer of `role` in `gemm` of a QuantizedLinear on either path (None: high precision)."""
    if layer.gemm is not None:
        return operand_quantizer(layer, gemm, role)
    return getattr(layer, ROLE_ATTR[role])


def _operand(layer: nn.Module, fault: Fault) -> str:
    """The operand role of `fault.gemm` the fault goes into (module docstring); one-line ValueError when none fits."""
    where = f"--inject {fault}"
    quants = {r: role_quantizer(layer, fault.gemm, r) for r in GEMM_OPERANDS[fault.gemm]}
    if layer.gemm is not None and fault.gemm in layer.gemm.hp_gemms or all(q is None for q in quants.values()):
        raise ValueError(f"{where}: the recipe keeps {fault.layer}'s {fault.gemm} in high precision; valid: a "
                         f"quantized GEMM")
    if fault.kind == "gain":
        return next(r for r, q in quants.items() if q is not None)
    if fault.kind in ("correlated_sr", "few_bit_sr"):
        sr = [r for r, q in quants.items() if q is not None and q.spec.rounding == "stochastic"]
        if not sr:
            raise ValueError(f"{where}: no operand of {fault.layer}'s {fault.gemm} is rounded stochastically by "
                             f"this recipe; valid: a GEMM with an SR operand (e.g. nvfp4's dgrad / wgrad)")
        return sr[0]
    blocked = [r for r, q in quants.items() if q is not None and q.is_block]
    if not blocked:
        raise ValueError(f"{where}: no operand of {fault.layer}'s {fault.gemm} is block-scaled by this recipe; "
                         f"valid: a GEMM of a block recipe (nvfp4, mxfp4, mxfp8, ...)")
    return blocked[0]


def inject_fault(model: nn.Module, fault: Fault) -> str:
    """Put `fault` into `model` in place; returns the operand role it went into. One-line ValueError (with a
    did-you-mean) for a layer that is not a simulated QuantizedLinear or an operand the kind cannot apply to."""
    layers = [n for n, m in model.named_modules() if isinstance(m, QuantizedLinear)]
    if fault.layer not in layers:
        raise ValueError(f"--inject layer {fault.layer!r} is not a quantized Linear of this model"
                         f"{did_you_mean(fault.layer, layers)}; valid choices: {', '.join(layers) or 'none'}")
    layer = model.get_submodule(fault.layer)
    role = _operand(layer, fault)
    old = role_quantizer(layer, fault.gemm, role)
    spec = old.spec
    if fault.kind == "few_bit_sr":
        spec = dataclasses.replace(spec, sr_bits=int(fault.value))
        q: Quantizer = Quantizer(spec, seed=old.seed)
    else:
        q = FaultyQuantizer(spec, seed=old.seed, kind=fault.kind, value=fault.value)
    q.to(layer.weight.device)
    opts = layer.gemm if layer.gemm is not None else GemmOptions()
    overrides = tuple(o for o in opts.overrides if (o[0], o[1]) != (fault.gemm, role)) + ((fault.gemm, role, spec),)
    layer.gemm = dataclasses.replace(opts, overrides=overrides)
    if getattr(layer, "gemm_quants", None) is None:
        layer.gemm_quants = nn.ModuleDict()
    layer.gemm_quants[override_key(fault.gemm, role)] = q
    if not hasattr(layer, "rht_signs"):   # a classic-path layer: GEMM-faithful from now on, no rotation
        layer.register_buffer("rht_signs", torch.ones(opts.rht_dim, device=layer.weight.device))
    return role
