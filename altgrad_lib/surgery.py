"""Model surgery: per-layer quantization policies, named recipes, and the simulated `QuantizedLinear`.

A `QuantPolicy` maps layer classes ("attn_qkv", "attn_out", "mlp_up", "mlp_down", "lm_head", or the "*" default)
to a `LayerSpec`: one QuantSpec per GEMM operand (input X, weight W, grad_output dY), `None` = high precision.
`quantize_model(model, policy)` swaps the matching `nn.Linear`s in place and prints what is quantized where.
Embeddings, LayerNorm, softmax and the attention matmuls always stay high precision.

Backends: "sim" (this file; any format from altgrad_lib.formats), "torchao" and "scaled_mm" (altgrad_lib.hw_fp8;
E4M3/E5M2 only, real FP8 kernels on GPU, emulated on CPU).
"""
from __future__ import annotations

import dataclasses
import re
import zlib
from dataclasses import dataclass, field
from typing import Any, Mapping

import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F

from altgrad_lib.block_recipes import block_recipe, is_block_recipe
from altgrad_lib.block_scaling import BlockScaling
from altgrad_lib.gemm_quant import GemmOptions, gemm_faithful_linear, rht_signs
from altgrad_lib.quant import QuantSpec, Quantizer, sqnr_db  # noqa: F401  (sqnr_db re-exported)

LAYER_CLASSES = ("attn_qkv", "attn_out", "mlp_up", "mlp_down", "lm_head")
from altgrad_lib.choices import BACKENDS, RECIPE_ALIASES, RECIPES  # noqa: E402,F401  (RECIPES re-exported)
ROLES = ("input", "weight", "grad_output")

# module-name suffix -> layer class (names from altgrad_lib.model)
_SUFFIX_TO_CLASS = {
    "attn.c_attn": "attn_qkv",
    "attn.c_proj": "attn_out",
    "mlp.c_fc": "mlp_up",
    "mlp.c_gate": "mlp_up",
    "mlp.c_proj": "mlp_down",
    "lm_head": "lm_head",
}


def layer_class_of(fqn: str) -> str | None:
    """Layer class of a module name, e.g. 'transformer.h.0.attn.c_attn' -> 'attn_qkv'; None if not a policy layer."""
    for suffix, cls in _SUFFIX_TO_CLASS.items():
        if fqn == suffix or fqn.endswith("." + suffix):
            return cls
    return None


# ----------------------------------------------------------------------------- specs and policies

def _spec_from(value: Any, where: str) -> QuantSpec | None:
    if value is None or isinstance(value, QuantSpec):
        return value
    if isinstance(value, str):                       # shorthand: "E4M3" = that format, default scaling/rounding
        return QuantSpec(fmt=value)
    if isinstance(value, Mapping):
        return QuantSpec.from_dict(dict(value))
    raise TypeError(f"{where}: expected a QuantSpec dict, a format name or null, got {value!r}")


def _spec_to_dict(spec: QuantSpec | None) -> dict | None:
    if spec is None:
        return None
    if hasattr(spec, "to_dict"):
        return spec.to_dict()
    out: dict[str, Any] = {}
    for f in dataclasses.fields(spec):
        v = getattr(spec, f.name)
        if f.name == "fmt":
            v = v.name
        elif dataclasses.is_dataclass(v):
            v = dataclasses.asdict(v)
        out[f.name] = v
    return out


@dataclass(frozen=True)
class LayerSpec:
    """QuantSpecs for the three operands of one Linear's GEMMs; None = keep that operand high precision."""
    input: QuantSpec | None = None        # X, forward (and saved for dW)
    weight: QuantSpec | None = None       # W, forward (and reused for dX)
    grad_output: QuantSpec | None = None  # dY, quantized once before dX = dY·W and dW = dYᵀ·X
    # GEMM-faithful path (gemm_quant.py): per-GEMM switches; None = the classic path above, unless a role uses
    # a block kind (nvfp4 / mx), which always takes the GEMM-faithful path with default GemmOptions
    gemm: GemmOptions | None = None

    def __post_init__(self) -> None:
        for role in ROLES:
            object.__setattr__(self, role, _spec_from(getattr(self, role), f"LayerSpec.{role}"))
        object.__setattr__(self, "gemm", GemmOptions.from_dict(self.gemm))

    @property
    def gemm_options(self) -> GemmOptions | None:
        """The GemmOptions this layer runs with, None for the classic path."""
        if self.gemm is not None:
            return self.gemm
        block = any(s is not None and isinstance(s.scaling, BlockScaling) for s in (self.input, self.weight,
                                                                                     self.grad_output))
        return GemmOptions() if block else None

    @property
    def is_quantized(self) -> bool:
        return any(getattr(self, r) is not None for r in ROLES)

    @classmethod
    def from_dict(cls, d: Mapping | None) -> "LayerSpec | None":
        if d is None:
            return None
        if not isinstance(d, Mapping):
            raise TypeError(f"LayerSpec: expected a dict with keys {ROLES} or null, got {d!r}")
        bad = set(d) - set(ROLES) - {"gemm"}
        if bad:
            raise ValueError(f"LayerSpec: unknown key(s) {sorted(bad)}; valid keys: {ROLES + ('gemm',)}")
        return cls(**{r: _spec_from(d.get(r), f"LayerSpec.{r}") for r in ROLES}, gemm=d.get("gemm"))

    def to_dict(self) -> dict:
        out = {r: _spec_to_dict(getattr(self, r)) for r in ROLES}
        if self.gemm is not None:     # only when set: classic specs keep their old dict (and run hashes)
            out["gemm"] = self.gemm.to_dict()
        return out

    def short_str(self) -> str:
        s = " ".join(f"{r[0]}:{_s(getattr(self, r))}" for r in ("input", "weight", "grad_output"))
        return s + (f" gemm:{self.gemm_options.short_str()}" if self.gemm_options is not None else "")


def _s(spec: QuantSpec | None) -> str:
    return "hp" if spec is None else spec.short_str()


@dataclass(frozen=True)
class QuantPolicy:
    """Which layer class gets which LayerSpec, and on which backend. Layers not matched fall back to "*"."""
    name: str
    layers: Mapping[str, LayerSpec | None] = field(default_factory=dict)  # layer class or "*" -> spec
    backend: str = "sim"   # "sim" | "torchao" | "scaled_mm"
    seed: int = 0          # base seed of the stochastic-rounding generators (per module: seed + hash(name))
    hp_last_blocks: int = 0  # the last N transformer blocks (transformer.h.<i>) stay high precision

    def __post_init__(self) -> None:
        n = self.hp_last_blocks
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"QuantPolicy.hp_last_blocks={n!r} is invalid; valid: an int >= 0")
        if self.backend not in BACKENDS:
            raise ValueError(f"QuantPolicy.backend={self.backend!r} unknown; valid choices: {BACKENDS}")
        layers = {}
        for key, spec in dict(self.layers).items():
            if key != "*" and key not in LAYER_CLASSES:
                raise ValueError(f"QuantPolicy.layers: unknown layer class {key!r}; valid: {('*',) + LAYER_CLASSES}")
            if isinstance(spec, Mapping) or spec is None:
                spec = LayerSpec.from_dict(spec)
            elif not isinstance(spec, LayerSpec):
                raise TypeError(f"QuantPolicy.layers[{key!r}]: expected LayerSpec, dict or None, got {spec!r}")
            # a LayerSpec with no quantized operand means the same as None
            layers[key] = spec if spec is not None and spec.is_quantized else None
        object.__setattr__(self, "layers", layers)

    def spec_for(self, layer_class: str) -> LayerSpec | None:
        if layer_class not in LAYER_CLASSES:
            raise ValueError(f"unknown layer class {layer_class!r}; valid: {LAYER_CLASSES}")
        return self.layers[layer_class] if layer_class in self.layers else self.layers.get("*")

    @classmethod
    def from_dict(cls, d: Mapping) -> "QuantPolicy":
        """From YAML: {"name", "backend", "seed", "layers": {class: {input, weight, grad_output} | null}}.
        `"recipe": "<name>"` starts from a named recipe and overrides its layers."""
        valid = ("name", "backend", "seed", "layers", "recipe", "hp_last_blocks")
        bad = set(d) - set(valid)
        if bad:
            raise ValueError(f"QuantPolicy: unknown key(s) {sorted(bad)}; valid keys: {valid}")
        layers: dict[str, Any] = {}
        name = d.get("name")
        hp_last = 0
        if d.get("recipe") is not None:
            base = get_policy(d["recipe"])
            layers.update(base.layers)
            name = name or base.name
            hp_last = base.hp_last_blocks
        layers.update(d.get("layers") or {})
        if name is None:
            raise ValueError("QuantPolicy.from_dict: 'name' (or 'recipe') is required")
        return cls(name=str(name), layers=layers, backend=d.get("backend") or "sim", seed=int(d.get("seed") or 0),
                   hp_last_blocks=d.get("hp_last_blocks", hp_last))

    def to_dict(self) -> dict:
        out = {"name": self.name, "backend": self.backend, "seed": self.seed,
               "layers": {k: (v.to_dict() if v is not None else None) for k, v in self.layers.items()}}
        if self.hp_last_blocks:
            out["hp_last_blocks"] = self.hp_last_blocks
        return out

    def short_str(self) -> str:
        parts = [f"{k}={v.short_str() if v else 'hp'}" for k, v in self.layers.items()]
        return f"{self.name}[{self.backend}] " + "; ".join(parts)


def _hybrid(xw_fmt: str, grad_fmt: str, lm_head: bool) -> dict[str, LayerSpec | None]:
    # "current" = per-tensor scale from this tensor's amax, the default of QuantSpec
    spec = LayerSpec(input=QuantSpec(fmt=xw_fmt), weight=QuantSpec(fmt=xw_fmt), grad_output=QuantSpec(fmt=grad_fmt))
    return {"*": spec, "lm_head": spec if lm_head else None}


def get_policy(name_or_dict: str | Mapping | QuantPolicy, backend: str | None = None,
               seed: int | None = None) -> QuantPolicy:
    """Named recipe or per-layer dict -> QuantPolicy. `backend`/`seed` override the recipe's.

    hp             nothing quantized: the high-precision baseline (old name "bf16", still accepted); whether it
                   runs in fp32 or under bf16 autocast is TrainConfig.precision
    fp8_hybrid     X, W in E4M3 and dY in E5M2, current per-tensor scaling; lm_head kept high precision, common
                   practice because the vocab projection is the most quantization-sensitive GEMM
    fp8_hybrid_all as fp8_hybrid, lm_head included
    fp8_e4m3       E4M3 for X, W and dY (lm_head high precision, so it differs from fp8_hybrid only in dY)
    fmt:E3M4       that format for X and W, E5M2 for dY (lm_head high precision); fmt:E3M4:E4M3 sets dY's format
    nvfp4, mxfp4, mxfp8, mxfp6 [:switch...]  block-scaled recipes on the GEMM-faithful path (block_recipes.py),
                   e.g. "nvfp4:disable_rht:hp_last=1"
    """
    if isinstance(name_or_dict, QuantPolicy):
        policy = name_or_dict
    elif isinstance(name_or_dict, Mapping):
        policy = QuantPolicy.from_dict(name_or_dict)
    elif isinstance(name_or_dict, str):
        name = name_or_dict.strip()
        name = RECIPE_ALIASES.get(name, name)
        if name == "hp":
            layers = {"*": None}
        elif name == "fp8_hybrid":
            layers = _hybrid("E4M3", "E5M2", lm_head=False)
        elif name == "fp8_hybrid_all":
            layers = _hybrid("E4M3", "E5M2", lm_head=True)
        elif name == "fp8_e4m3":
            layers = _hybrid("E4M3", "E4M3", lm_head=False)
        elif is_block_recipe(name):
            layers, hp_last = block_recipe(name)
            policy = QuantPolicy(name=name, layers=layers, hp_last_blocks=hp_last)
        elif name.lower().startswith("fmt:"):
            parts = name.split(":")
            if len(parts) not in (2, 3) or not parts[1]:
                raise ValueError(f"recipe {name!r}: expected 'fmt:<FMT>' or 'fmt:<FMT>:<GRAD_FMT>', e.g. 'fmt:E3M4'")
            layers = _hybrid(parts[1], parts[2] if len(parts) == 3 else "E5M2", lm_head=False)
        else:
            raise ValueError(f"unknown recipe {name!r}; valid choices: {RECIPES} or a per-layer dict")
        if not is_block_recipe(name):
            policy = QuantPolicy(name=name, layers=layers)
    else:
        raise TypeError(f"get_policy: expected a recipe name, dict or QuantPolicy, got {name_or_dict!r}")
    if backend is not None or seed is not None:
        policy = dataclasses.replace(policy, backend=backend or policy.backend,
                                     seed=policy.seed if seed is None else seed)
    return policy


# ----------------------------------------------------------------------------- simulated quantized linear

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
    return not compiled or quantizer.spec.scaling.kind == "delayed"


def _quantize_grad(quantizer: Quantizer, grad_y: torch.Tensor) -> torch.Tensor:
    if grad_counters_live(quantizer, torch.compiler.is_compiling()):
        return quantizer.quantize(grad_y)   # stateful: scaler history, counters, generator
    # Under torch.compile, mutating the quantizer's buffers inside an autograd.Function backward forces a graph
    # break at every layer (~5x slower). Stateless numerics are identical for none/current/per_row/per_block
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

    @classmethod
    def from_linear(cls, linear: nn.Linear, layer_spec: LayerSpec, layer_class: str = "", fqn: str = "",
                    seed: int = 0) -> "QuantizedLinear":
        new = cls(linear.in_features, linear.out_features, bias=linear.bias is not None, layer_spec=layer_spec,
                  layer_class=layer_class, fqn=fqn, seed=seed, device="meta")
        new.weight = linear.weight  # same Parameter object: keeps weight tying and optimizer references
        new.bias = linear.bias
        dev = linear.weight.device
        for q in (new.x_quant, new.w_quant, new.g_quant):
            if q is not None:
                q.to(dev)
        if new.gemm is not None:
            new.rht_signs = new.rht_signs.to(dev)
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


# ----------------------------------------------------------------------------- model surgery

def quantize_model(model: nn.Module, policy: str | Mapping | QuantPolicy, verbose: bool = True) -> pd.DataFrame:
    """Swap the policy's Linears in place; returns (and prints) a table of what is quantized where.

    Columns: module, class, shape (out, in), input, weight (forward), grad_output (backward), backend."""
    policy = get_policy(policy)
    linears = [(fqn, m) for fqn, m in model.named_modules() if isinstance(m, nn.Linear)]
    chosen: dict[str, LayerSpec] = {}
    rows = []
    hp_from = _first_hp_block(linears, policy.hp_last_blocks)
    for fqn, lin in linears:
        cls = layer_class_of(fqn)
        spec = policy.spec_for(cls) if cls is not None else None
        if hp_from is not None and (_block_index(fqn) if _block_index(fqn) is not None else -1) >= hp_from:
            spec = None
        if type(lin) is not nn.Linear and spec is not None:
            raise ValueError(f"{fqn} is already a {type(lin).__name__}; quantize_model must run once per model")
        if spec is not None:
            chosen[fqn] = spec
        rows.append({"module": fqn, "class": cls or "-", "shape": tuple(lin.weight.shape),
                     "input": _s(spec.input) if spec else "hp", "weight": _s(spec.weight) if spec else "hp",
                     "grad_output": _s(spec.grad_output) if spec else "hp",
                     "backend": policy.backend if spec else "-"})

    if policy.backend == "torchao":
        from altgrad_lib.hw_fp8 import convert_torchao
        convert_torchao(model, chosen)
    elif chosen:
        if policy.backend == "scaled_mm":
            from altgrad_lib.hw_fp8 import ScaledMMLinear
            make = lambda lin, spec, cls, fqn: ScaledMMLinear.from_linear(lin, spec, cls, fqn)  # noqa: E731
        else:
            make = lambda lin, spec, cls, fqn: QuantizedLinear.from_linear(  # noqa: E731
                lin, spec, cls, fqn, seed=policy.seed)
        new_modules = {fqn: make(model.get_submodule(fqn), spec, layer_class_of(fqn), fqn)
                       for fqn, spec in chosen.items()}   # build all first: a bad layer leaves the model untouched
        for fqn, new in new_modules.items():
            parent_name, _, child = fqn.rpartition(".")
            setattr(model.get_submodule(parent_name) if parent_name else model, child, new)

    table = pd.DataFrame(rows, columns=["module", "class", "shape", "input", "weight", "grad_output", "backend"])
    kept = sorted({r["class"] if r["class"] != "-" else r["module"] for r in rows if r["backend"] == "-"})
    summary = (f"{policy.name}[{policy.backend}]: {len(chosen)}/{len(rows)} Linear quantized "
               f"(fwd X,W; bwd dY); high precision: {', '.join(kept) or 'none'} "
               f"+ embeddings, LayerNorm, softmax, attention matmuls")
    table.attrs["summary"] = summary
    if verbose:
        with pd.option_context("display.width", 200, "display.max_columns", 10, "display.max_colwidth", 40):
            print(table.to_string(index=False))
        print(summary)
    return table


def _block_index(fqn: str) -> int | None:
    """Transformer block of a module name ('transformer.h.3.mlp.c_fc' -> 3), None outside the blocks."""
    m = re.search(r"(?:^|\.)h\.(\d+)\.", fqn)
    return int(m.group(1)) if m else None


def _first_hp_block(linears, n_last: int) -> int | None:
    """First block index kept in high precision by QuantPolicy.hp_last_blocks (None: none kept)."""
    idx = [i for i in (_block_index(f) for f, _ in linears) if i is not None]
    if not n_last or not idx:
        return None
    return max(idx) + 1 - n_last


def quantized_modules(model: nn.Module) -> dict[str, nn.Module]:
    """fqn -> swapped module (sim, scaled_mm or torchao) for inspection and monitors."""
    from altgrad_lib.hw_fp8 import ScaledMMLinear
    out = {}
    for fqn, m in model.named_modules():
        if isinstance(m, (QuantizedLinear, ScaledMMLinear)) or type(m).__name__ == "Float8Linear":
            out[fqn] = m
    return out
