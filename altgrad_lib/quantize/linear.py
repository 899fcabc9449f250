"""`QuantizedLinear`: an nn.Linear whose GEMM inputs, weight and output gradient are fake-quantized per its
LayerSpec."""
from __future__ import annotations

import dataclasses
import zlib

import torch
import torch.nn as nn
import torch.nn.functional as F

from altgrad_lib.numerics.accumulate import loop_steps
from altgrad_lib.numerics.counter_rng import seed_keys
from altgrad_lib.numerics.quantizer import Quantizer
from altgrad_lib.quantize.gemm_overrides import GEMM_OPERANDS, GEMMS, ROLE_ATTR, operand_quantizer, override_key
from altgrad_lib.quantize.gemm_quant import GemmOptions, gemm_faithful_linear, rht_signs
from altgrad_lib.quantize.recipes import ROLES, LayerSpec

class _QuantizeGradOutput(torch.autograd.Function):
    """Identity forward; backward quantizes dY once, so both dX = dY·W and dW = dYᵀ·X see the same Q(dY)."""

    @staticmethod
    def forward(ctx, y, quantizer):
        ctx.quantizer = quantizer
        return y.view_as(y)

    @staticmethod
    def backward(ctx, grad_y):
        return _quantize_grad(ctx.quantizer, grad_y), None


def grad_counters_live(quantizer: Quantizer, compiled: bool) -> bool:
    """Does the dY quantizer update its counters / scale buffer? Not in compiled runs with stateless scaling
    (see _quantize_grad): monitors must report those as unavailable, never as zero."""
    return not compiled or quantizer.stateful


def _quantize_grad(quantizer: Quantizer, grad_y: torch.Tensor) -> torch.Tensor:
    if grad_counters_live(quantizer, torch.compiler.is_compiling()):
        return quantizer.quantize(grad_y)   # stateful: scaler history, counters, generator
    # Under torch.compile, mutating the quantizer's buffers inside an autograd.Function backward forces a graph
    # break at every layer (~5x slower). Stateless numerics are identical for none/current/per_row
    # scaling; only the dY counters (n_saturated, ...) are not updated in compiled runs. Delayed scaling needs
    # its history, so it keeps the stateful path above (and the graph breaks).
    with torch.no_grad():
        return quantizer.quantize_stateless(grad_y)


def module_seed(base_seed: int, fqn: str, role: str) -> int:
    """Deterministic per-(module, operand) seed; crc32 because Python's hash() is salted per process."""
    return (base_seed * 1_000_003 + zlib.crc32(f"{fqn}/{role}".encode())) % (2**31 - 1)


class QuantizedLinear(nn.Linear):
    """Simulated low-precision Linear: y = Q_x(X) · Q_w(W)ᵀ + b, backward quantizes dY with Q_g.

    Q_x and Q_w are straight-through, so gradients reach the fp32 master weight. The bias is added in high
    precision after the GEMM (its gradient uses the unquantized dY). Quantizers (scaler buffers,
    counters, SR generator state) are submodules, so `model.state_dict()` checkpoints them."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, layer_spec: LayerSpec,
                 layer_class: str = "", fqn: str = "", seed: int = 0, device=None, dtype=None):
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.layer_spec = layer_spec
        self.layer_class = layer_class
        q = {r: (Quantizer(getattr(layer_spec, r), seed=module_seed(seed, fqn, r))
                 if getattr(layer_spec, r) is not None else None) for r in ROLES}
        # names carry the role: x (input), w (weight), g (grad_output)
        self.x_quant, self.w_quant, self.g_quant = q["input"], q["weight"], q["grad_output"]
        self.gemm = layer_spec.gemm_options     # None: the classic path; else GEMM-faithful (gemm_quant.py)
        if self.gemm is not None:               # RHT sign vector: a buffer, so checkpoints carry it
            self.register_buffer("rht_signs", rht_signs(self.gemm.rht_dim, module_seed(seed, fqn, "rht")))
        if self.gemm is not None and self.gemm.rht_rng == "per_step":   # signs re-drawn each step (gemm_quant.py)
            self.rht_keys = seed_keys(module_seed(seed, fqn, "rht/step"))
            self.register_buffer("rng_step", torch.zeros((), dtype=torch.int64))
        if self.gemm is not None and self.gemm.overrides:   # per-GEMM operand overrides: a Quantizer each
            self.gemm_quants = nn.ModuleDict({
                override_key(g, r): Quantizer(s, seed=module_seed(seed, fqn, f"{g}/{r}"))
                for g, r, s in self.gemm.overrides if s is not None})

    @classmethod
    def from_linear(cls, linear: nn.Linear, layer_spec: LayerSpec, layer_class: str = "", fqn: str = "",
                    seed: int = 0) -> "QuantizedLinear":
        new = cls(linear.in_features, linear.out_features, bias=linear.bias is not None, layer_spec=layer_spec,
                  layer_class=layer_class, fqn=fqn, seed=seed, device="meta")
        new.weight = linear.weight  # same Parameter object: keeps weight tying and optimizer references
        new.bias = linear.bias
        dev = linear.weight.device
        for q in (new.x_quant, new.w_quant, new.g_quant, getattr(new, "gemm_quants", None)):
            if q is not None:
                q.to(dev)
        if new.gemm is not None:
            new.rht_signs = new.rht_signs.to(dev)
        if hasattr(new, "rng_step"):
            new.rng_step = new.rng_step.to(dev)
        return new

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dev = x.device.type
        if torch.is_autocast_enabled(dev):
            # Under autocast F.linear would round Q(x·s)/s to bf16 *again* before the GEMM (0.34 % for E1M6).
            # Hardware multiplies the exact codes, accumulates in fp32, applies 1/(s_x·s_w) there and rounds
            # the output once. Same here: the quantized GEMM runs in fp32 (autocast off) and only the output
            # is cast to the autocast dtype. dY arrives in that dtype and is quantized by g_quant as is.
            out_dtype = torch.get_autocast_dtype(dev)
            with torch.autocast(dev, enabled=False):
                y = self._quantized_gemm(x.float(), self.weight.float())
            return self._bias(y.to(out_dtype))
        return self._bias(self._quantized_gemm(x, self.weight))

    def _quantized_gemm(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        if self.gemm is not None:
            return gemm_faithful_linear(x, w, self)
        x_q = self.x_quant(x) if self.x_quant is not None else x                      # (..., in)
        w_q = self.w_quant(w) if self.w_quant is not None else w                      # (out, in)
        y = F.linear(x_q, w_q)                                                         # (..., out)
        if self.g_quant is not None:
            y = _QuantizeGradOutput.apply(y, self.g_quant)
        return y

    def _bias(self, y: torch.Tensor) -> torch.Tensor:
        # bias outside the quantized GEMM: its gradient is the high-precision dY, as in torchao / scaled_mm
        return y + self.bias if self.bias is not None else y

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, {self.layer_class}, {self.layer_spec.short_str()}"


def set_rng_step(model: nn.Module, step: int) -> None:
    """Tell every step-keyed RNG of `model` the training step that follows (0-based): per-step Hadamard signs
    (GemmOptions.rht_rng) and per-call stochastic rounding (QuantSpec.sr_rng). The loop calls it before each step,
    so a run resumed at any step draws what the straight run drew; a model without either is left untouched."""
    for m in model.modules():
        if isinstance(m, Quantizer) and m.spec.sr_rng == "per_call":
            m.set_rng_step(step)
        elif isinstance(m, QuantizedLinear) and hasattr(m, "rng_step"):
            m.rng_step.fill_(int(step))


def set_hp_gemms(model: nn.Module, gemms: tuple[str, ...]) -> bool:
    """Run `gemms` (a subset of GEMMS) of every simulated quantized Linear in high precision on top of its recipe
    (TrainConfig.precision_schedule), or restore the recipe's GEMMs with (); returns whether anything changed.
    A classic-path layer moves to the GEMM-faithful path only while a GEMM is switched (for its per-tensor specs the
    two are the same numerics, gemm_quant.py); an operand override of a switched GEMM is dropped with it."""
    changed = False
    for m in model.modules():
        if not isinstance(m, QuantizedLinear):
            continue
        if not hasattr(m, "_recipe_gemm"):
            m._recipe_gemm = m.gemm
        new = scheduled_gemm(m._recipe_gemm, gemms)
        if new != m.gemm:
            m.gemm, changed = new, True
    return changed


def scheduled_gemm(opts: GemmOptions | None, gemms: tuple[str, ...]) -> GemmOptions | None:
    """The GemmOptions a layer runs with while `gemms` are switched to high precision on top of its recipe's `opts`
    (None: the classic path, moved to the GEMM-faithful one while a GEMM is switched): what set_hp_gemms installs,
    and what TrainConfig builds for every phase of a precision_schedule at load, so a setting that contradicts a
    switch (an accumulator on a switched GEMM: GemmOptions' one-line ValueError) fails before any step. An operand
    override of a switched GEMM is dropped with it."""
    gemms = tuple(g for g in GEMMS if g in gemms)
    if not gemms:
        return opts
    opts = opts if opts is not None else GemmOptions()
    hp = tuple(g for g in GEMMS if g in gemms or g in opts.hp_gemms)
    return dataclasses.replace(opts, hp_gemms=hp, overrides=tuple(o for o in opts.overrides if o[0] not in hp))


def quantized_gemms(layer: QuantizedLinear) -> tuple[str, ...]:
    """The GEMMs of a simulated quantized Linear that quantize an operand as it runs now: not in hp_gemms and one
    of its two operands (GEMM_OPERANDS) with a Quantizer (an override's own, else the role's)."""
    if layer.gemm is None:   # classic path: the role Quantizers serve every GEMM that uses the role
        return tuple(g for g in GEMMS if any(getattr(layer, ROLE_ATTR[r]) is not None for r in GEMM_OPERANDS[g]))
    return tuple(g for g in GEMMS if g not in layer.gemm.hp_gemms
                 and any(operand_quantizer(layer, g, r) is not None for r in GEMM_OPERANDS[g]))


def accum_loop_steps(units: list[nn.Module], tokens: int) -> int:
    """The accumulator steps of one training step's simulated GEMMs (numerics/accumulate.py's loop_steps): what
    torch.compile unrolls into its graphs. `units`: the modules compiled one by one (model.compile_units). Units of
    the same configuration (each layer's shape and GEMM options, in order) share one graph, as the blocks of
    compile_scope=blocks do, so each configuration counts once. fprop reduces over a layer's inputs, dgrad over its
    outputs, wgrad over the `tokens` of the batch. 0 when no GEMM models an accumulator."""
    counted, total = set(), 0
    for unit in units:
        layers = [m for m in unit.modules() if isinstance(m, QuantizedLinear) and m.gemm is not None]
        key = tuple((m.in_features, m.out_features, m.gemm) for m in layers)
        if key in counted:
            continue
        counted.add(key)
        for m in layers:
            k = {"fprop": m.in_features, "dgrad": m.out_features, "wgrad": tokens}
            total += sum(loop_steps(k[g], m.gemm.accum_for(g)) for g in GEMMS if g not in m.gemm.hp_gemms)
    return total
