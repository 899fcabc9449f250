"""Per-layer quantization policies and named recipes (the surgery that applies them: convert.py).

A `QuantPolicy` maps layer classes ("attn_qkv", "attn_out", "mlp_up", "mlp_down", "lm_head", or the "*" default)
to a `LayerSpec`: one QuantSpec per GEMM operand (input X, weight W, grad_output dY), `None` = high precision.
`quantize_model(model, policy)` swaps the matching `nn.Linear`s in place and prints what is quantized where.
Embeddings, LayerNorm and the softmax always stay high precision; the attention matmuls too, unless the policy's
`attn:` (an AttnSpec, quantize/attention.py) puts formats on Q, K, V, P, O, dO, dP, dQKV.

Backends: "sim" (quantize/linear.py; any format from altgrad_lib.numerics.formats), "torchao" and "scaled_mm"
(altgrad_lib.quantize.hw_fp8; E4M3/E5M2 only, real FP8 kernels on GPU, emulated on CPU).
"""
from __future__ import annotations

import copy
import dataclasses
import warnings
from dataclasses import dataclass, field
from typing import Any, Mapping

import torch

from altgrad_lib.choices import BACKENDS, BLOCK_RECIPES, NAMED_RECIPES, RECIPES, unalias_recipe
from altgrad_lib.errors import did_you_mean
from altgrad_lib.numerics.block_scaling import BlockScaling, is_block_kind
from altgrad_lib.numerics.formats import get_format
from altgrad_lib.numerics.quant import sqnr_db  # noqa: F401  (sqnr_db re-exported)
from altgrad_lib.numerics.quant_spec import QuantSpec
from altgrad_lib.quantize.attention import AttnSpec
from altgrad_lib.quantize.block_recipes import block_recipe, block_recipe_attn, canonical_block_recipe, is_block_recipe
from altgrad_lib.quantize.gemm_overrides import delayed_rht_error, operand_spec
from altgrad_lib.quantize.gemm_quant import GemmOptions

LAYER_CLASSES = ("attn_qkv", "attn_out", "mlp_up", "mlp_down", "lm_head")
ROLES = ("input", "weight", "grad_output")

# module-name suffix -> layer class (names from altgrad_lib.model)
SUFFIX_TO_CLASS = {
    "attn.c_attn": "attn_qkv",
    "attn.c_proj": "attn_out",
    "mlp.c_fc": "mlp_up",
    "mlp.c_gate": "mlp_up",
    "mlp.c_proj": "mlp_down",
    "lm_head": "lm_head",
}


def layer_class_of(fqn: str) -> str | None:
    """Layer class of a module name, e.g. 'transformer.h.0.attn.c_attn' -> 'attn_qkv'; None if not a policy layer."""
    for suffix, cls in SUFFIX_TO_CLASS.items():
        if fqn == suffix or fqn.endswith("." + suffix):
            return cls
    return None


def hidden_matrices(model: torch.nn.Module) -> dict[str, torch.nn.Parameter]:
    """name -> weight of every trainable transformer-block Linear (a layer class, not lm_head): Muon's matrices
    (optim/muon.py), the default constrained set (optim/constraints.py) and what the manifold monitor measures."""
    out = {}
    for fqn, mod in model.named_modules():
        cls = layer_class_of(fqn)
        if isinstance(mod, torch.nn.Linear) and cls in LAYER_CLASSES and cls != "lm_head" and mod.weight.requires_grad:
            out[f"{fqn}.weight"] = mod.weight
    return out

# ----------------------------------------------------------------------------- specs and policies

def _spec_to_dict(spec: QuantSpec | None) -> dict | None:
    return None if spec is None else spec.to_dict()   # LayerSpec holds QuantSpec or None (operand_spec)


@dataclass(frozen=True)
class LayerSpec:
    """QuantSpecs for the three operands of one Linear's GEMMs; None = keep that operand high precision."""
    input: QuantSpec | None = None        # X, forward (and saved for dW)
    weight: QuantSpec | None = None       # W, forward (and reused for dX)
    grad_output: QuantSpec | None = None  # dY, quantized once before dX = dY·W and dW = dYᵀ·X
    # GEMM-faithful path (gemm_quant.py): per-GEMM switches and operand overrides (gemm_overrides.py); None = the
    # classic path above, unless a role uses a block kind (nvfp4 / mx): then the GEMM-faithful path with defaults
    gemm: GemmOptions | None = None

    def __post_init__(self) -> None:
        for role in ROLES:   # operand_spec: "E4M3", a dict or a QuantSpec; refuses an unsigned format
            object.__setattr__(self, role, operand_spec(getattr(self, role), f"LayerSpec.{role}", role))
        object.__setattr__(self, "gemm", GemmOptions.from_dict(self.gemm))
        opts = self.gemm_options
        err = None if opts is None else delayed_rht_error({r: getattr(self, r) for r in ROLES}, opts)
        if err:
            raise ValueError(err)

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
        overrides = () if self.gemm is None else self.gemm.overrides
        return any(getattr(self, r) is not None for r in ROLES) or any(s is not None for _, _, s in overrides)

    @classmethod
    def from_dict(cls, d: Mapping | None) -> "LayerSpec | None":
        if d is None:
            return None
        if not isinstance(d, Mapping):
            raise TypeError(f"LayerSpec: expected a dict with keys {ROLES} or null, got {d!r}")
        bad = set(d) - set(ROLES) - {"gemm"}
        if bad:
            raise ValueError(f"LayerSpec: unknown key(s) {sorted(bad)}; valid keys: {ROLES + ('gemm',)}")
        return cls(**{r: operand_spec(d.get(r), f"LayerSpec.{r}", r) for r in ROLES}, gemm=d.get("gemm"))

    def to_dict(self) -> dict:
        out = {r: _spec_to_dict(getattr(self, r)) for r in ROLES}
        if self.gemm is not None:     # only when set: classic specs keep their old dict (and run hashes)
            out["gemm"] = self.gemm.to_dict()
        return out

    def short_str(self) -> str:
        s = " ".join(f"{r[0]}:{spec_str(getattr(self, r))}" for r in ("input", "weight", "grad_output"))
        return s + (f" gemm:{self.gemm_options.short_str()}" if self.gemm_options is not None else "")


def spec_str(spec: QuantSpec | None) -> str:
    """A role's spec as the layer table shows it ("hp" for high precision)."""
    return "hp" if spec is None else spec.short_str()


@dataclass(frozen=True)
class QuantPolicy:
    """Which layer class gets which LayerSpec, and on which backend. Layers not matched fall back to "*"."""
    name: str
    layers: Mapping[str, LayerSpec | None] = field(default_factory=dict)  # layer class or "*" -> spec
    backend: str = "sim"   # "sim" | "torchao" | "scaled_mm"
    seed: int = 0          # base seed of the stochastic-rounding generators (per module: seed + hash(name))
    hp_last_blocks: int = 0  # the last N transformer blocks (transformer.h.<i>) stay high precision
    hp_first_blocks: int = 0  # the first N transformer blocks stay high precision
    # more Linears kept high precision: block indices (int) and module names (a Linear's full name or a dotted
    # suffix of it, e.g. "h.1.mlp.c_fc" or "lm_head"); canonical order: indices ascending, then names
    hp_layers: tuple = ()
    # low-precision attention core (quantize/attention.py): a preset name, an AttnSpec dict or None (SDPA, hp)
    attn: AttnSpec | None = None

    def __post_init__(self) -> None:
        attn = AttnSpec.from_value(self.attn)
        object.__setattr__(self, "attn", attn if attn is not None and attn.is_quantized else None)
        for key in ("hp_last_blocks", "hp_first_blocks"):
            n = getattr(self, key)
            if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                raise ValueError(f"QuantPolicy.{key}={n!r} is invalid; valid: an int >= 0")
        object.__setattr__(self, "hp_layers", canonical_hp_layers(self.hp_layers))
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
        valid = ("name", "backend", "seed", "layers", "recipe", "hp_last_blocks", "hp_first_blocks", "hp_layers",
                 "attn")
        bad = set(d) - set(valid)
        if bad:
            raise ValueError(f"QuantPolicy: unknown key(s) {sorted(bad)}; valid keys: {valid}")
        layers: dict[str, Any] = {}
        name = d.get("name")
        hp_last, hp_first, hp_layers, attn = 0, 0, (), None
        if d.get("recipe") is not None:
            base = get_policy(d["recipe"])
            layers.update(base.layers)
            name = name or base.name
            hp_last, hp_first, hp_layers = base.hp_last_blocks, base.hp_first_blocks, base.hp_layers
            attn = base.attn
        layers.update(d.get("layers") or {})
        if name is None:
            raise ValueError("QuantPolicy.from_dict: 'name' (or 'recipe') is required")
        return cls(name=str(name), layers=layers, backend=d.get("backend") or "sim", seed=int(d.get("seed") or 0),
                   hp_last_blocks=d.get("hp_last_blocks", hp_last), hp_first_blocks=d.get("hp_first_blocks", hp_first),
                   hp_layers=d.get("hp_layers", hp_layers), attn=d.get("attn", attn))

    def to_dict(self) -> dict:
        out = {"name": self.name, "backend": self.backend, "seed": self.seed,
               "layers": {k: (v.to_dict() if v is not None else None) for k, v in self.layers.items()}}
        if self.hp_last_blocks:
            out["hp_last_blocks"] = self.hp_last_blocks
        if self.hp_first_blocks:   # only when set, as hp_last_blocks: policies from before keep their dict
            out["hp_first_blocks"] = self.hp_first_blocks
        if self.hp_layers:
            out["hp_layers"] = list(self.hp_layers)
        if self.attn is not None:     # only when set: policies without it keep their old dict (and run hashes)
            out["attn"] = self.attn.to_dict()
        return out

    def short_str(self) -> str:
        parts = [f"{k}={v.short_str() if v else 'hp'}" for k, v in self.layers.items()]
        attn = f"; attn={self.attn.short_str()}" if self.attn is not None else ""
        return f"{self.name}[{self.backend}] " + "; ".join(parts) + attn


HP_SWITCHES = ("hp_first", "hp_last", "hp_layers")   # ':'-switches every named recipe takes (split_hp_switches)
_HP_KEYS = {"hp_first": "hp_first_blocks", "hp_last": "hp_last_blocks", "hp_layers": "hp_layers"}


def canonical_hp_layers(items: Any) -> tuple:
    """QuantPolicy.hp_layers as one tuple: block indices ascending, then module names sorted, each once; a name
    that is all digits is a block index. One-line error on anything else."""
    if isinstance(items, (str, int)):
        items = (items,)
    if not isinstance(items, (list, tuple)):
        raise ValueError(f"QuantPolicy.hp_layers={items!r} is invalid; valid: a list of block indices (int >= 0) "
                         f"and module names, e.g. [0, lm_head]")
    idx, names = set(), set()
    for it in items:
        if isinstance(it, str) and it.strip().isdigit():
            it = int(it)
        if isinstance(it, int) and not isinstance(it, bool) and it >= 0:
            idx.add(it)
        elif isinstance(it, str) and it.strip() and not any(c in it for c in ":+= "):
            names.add(it.strip())
        else:
            raise ValueError(f"QuantPolicy.hp_layers item {it!r} is invalid; valid: a block index (int >= 0) or a "
                             f"module name such as 'h.1.mlp.c_fc' or 'lm_head'")
    return (*sorted(idx), *sorted(names))


def split_hp_switches(name: str) -> tuple[str, dict[str, Any]]:
    """('fp8_hybrid:hp_last=1:hp_layers=0+lm_head') -> ('fp8_hybrid', {hp_last_blocks: 1, hp_layers: (0,
    'lm_head')}): the high-precision switches any named recipe takes, split from the recipe's own spelling. A
    switch given twice with different values is an error; hp_first=0 / hp_last=0 mean none."""
    keep, hp = [], {}
    for part in name.split(":"):
        key, eq, val = part.strip().partition("=")
        if not eq or key not in _HP_KEYS:
            keep.append(part)
            continue
        if key == "hp_layers":
            v: Any = canonical_hp_layers([x for x in val.split("+")])
        elif val.strip().isdigit():
            v = int(val)
        else:
            raise ValueError(f"recipe {name!r}: {key}={val!r} must be an int >= 0")
        if _HP_KEYS[key] in hp and hp[_HP_KEYS[key]] != v:
            raise ValueError(f"recipe {name!r}: {key} is given twice ({hp[_HP_KEYS[key]]} and {v}); give it once")
        hp[_HP_KEYS[key]] = v
    return ":".join(keep), {k: v for k, v in hp.items() if v}


def hp_suffix(hp: Mapping[str, Any]) -> str:
    """The canonical spelling of split_hp_switches' dict: ':hp_first=N:hp_last=N:hp_layers=a+b', each when set."""
    out = [f"{k}={'+'.join(map(str, hp[_HP_KEYS[k]])) if k == 'hp_layers' else hp[_HP_KEYS[k]]}"
           for k in HP_SWITCHES if hp.get(_HP_KEYS[k])]
    return "".join(":" + p for p in out)


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
    Every named recipe also takes :hp_first=<N> (the first N transformer blocks in high precision), :hp_last=<N>
    (the last N) and :hp_layers=<i>+<module>... (block indices and module names), e.g. "fp8_hybrid:hp_first=1",
    "fmt:E3M4:hp_layers=0+lm_head"; a dict recipe takes hp_first_blocks / hp_last_blocks / hp_layers.
    """
    if isinstance(name_or_dict, QuantPolicy):
        policy = name_or_dict
    elif isinstance(name_or_dict, Mapping):
        policy = QuantPolicy.from_dict(name_or_dict)
    elif isinstance(name_or_dict, str):
        name, hp = split_hp_switches(name_or_dict.strip())
        name = unalias_recipe(name)
        if name == "hp":
            layers = {"*": None}
        elif name == "fp8_hybrid":
            layers = _hybrid("E4M3", "E5M2", lm_head=False)
        elif name == "fp8_hybrid_all":
            layers = _hybrid("E4M3", "E5M2", lm_head=True)
        elif name == "fp8_e4m3":
            layers = _hybrid("E4M3", "E4M3", lm_head=False)
        elif is_block_recipe(name):
            layers, hp_last = block_recipe(name)   # hp_last: split off above, so 0 here
            hp = {"hp_last_blocks": hp_last, **hp} if hp_last else hp
        elif name.lower().startswith("fmt:"):
            xw, grad = _fmt_recipe_parts(name)
            layers = _hybrid(xw, grad or "E5M2", lm_head=False)
        else:
            raise ValueError(f"unknown recipe {name!r}{did_you_mean(name, NAMED_RECIPES + BLOCK_RECIPES)}; "
                             f"valid choices: {RECIPES} or a per-layer dict")
        core = canonical_block_recipe(name) if is_block_recipe(name) else name
        attn = block_recipe_attn(name) if is_block_recipe(name) else None
        policy = QuantPolicy(name=core + hp_suffix(hp), layers=layers, attn=attn, **hp)
    else:
        raise TypeError(f"get_policy: expected a recipe name, dict or QuantPolicy, got {name_or_dict!r}")
    if backend is not None or seed is not None:
        policy = dataclasses.replace(policy, backend=backend or policy.backend,
                                     seed=policy.seed if seed is None else seed)
    return policy


def _fmt_recipe_parts(name: str) -> tuple[str, str | None]:
    """'fmt:E3M4' -> ('E3M4', None); 'fmt:E3M4:E4M3' -> ('E3M4', 'E4M3')."""
    parts = name.split(":")
    if len(parts) not in (2, 3) or not all(parts[1:]):
        raise ValueError(f"recipe {name!r}: expected 'fmt:<FMT>' or 'fmt:<FMT>:<GRAD_FMT>', e.g. 'fmt:E3M4'")
    return parts[1], parts[2] if len(parts) == 3 else None


def canonical_recipe(recipe: str | Mapping) -> str | dict:
    """The recipe checked by `get_policy` (so a typo or a bad format fails here, with get_policy's message) and
    spelled canonically, so that aliases of one format give one run identity: 'fmt:e4m3fn' -> 'fmt:E4M3', 'bf16'
    -> 'hp', 'NVFP4:hp_last=0' -> 'nvfp4' (block_recipes.canonical_block_recipe), and in a dict every format name
    (and a base 'recipe') likewise, a block scaling as its full dict ('per_block' as the MX it is), and on a
    GEMM-faithful layer every GemmOptions setting it runs with (_explicit_gemm: config.yaml shows them all). A
    spelling already canonical is returned unchanged, so existing config hashes stay."""
    with warnings.catch_warnings():     # get_format's "E8M0 resolves to E8M0FNU" note: the canonical name says it
        warnings.simplefilter("ignore", UserWarning)
        get_policy(recipe)
        if isinstance(recipe, str):
            # hp_first / hp_last / hp_layers: after the recipe's own switches, in HP_SWITCHES order, when set
            name, hp = split_hp_switches(recipe.strip())
            name = unalias_recipe(name)
            if is_block_recipe(name):     # case, switch order, repeats and hp_last=0 spell one recipe one way
                return canonical_block_recipe(name) + hp_suffix(hp)
            if not name.lower().startswith("fmt:"):
                return name + hp_suffix(hp)
            fmts = (get_format(f).name for f in _fmt_recipe_parts(name) if f is not None)
            return ":".join(["fmt", *fmts]) + hp_suffix(hp)
        out = copy.deepcopy(dict(recipe))
        if "hp_layers" in out:
            out["hp_layers"] = list(canonical_hp_layers(out["hp_layers"]))
        if isinstance(out.get("recipe"), str):
            out["recipe"] = canonical_recipe(out["recipe"])
        if "attn" in out:   # every setting explicit (a preset expanded); a spec that quantizes nothing means null
            attn = AttnSpec.from_value(out["attn"])
            out["attn"] = attn.to_dict() if attn is not None and attn.is_quantized else None
            base = out.get("recipe")
            if out["attn"] is None and (base is None or get_policy(base).attn is None):
                del out["attn"]   # null where it changes nothing: the same run (and hash) as no `attn:` key
        for spec in (out.get("layers") or {}).values():
            if not isinstance(spec, dict):
                continue
            gemm = spec.get("gemm")
            ov = gemm.get("overrides") if isinstance(gemm, dict) else None
            # the role specs and the per-GEMM operand overrides (gemm_overrides.py), each {operand: spec}
            for ops in [spec] + [v for v in (ov.values() if isinstance(ov, dict) else ()) if isinstance(v, dict)]:
                for role in ROLES:
                    v = ops.get(role)
                    if isinstance(v, str):
                        ops[role] = get_format(v).name
                    elif isinstance(v, dict) and isinstance(v.get("fmt"), str):
                        v["fmt"] = get_format(v["fmt"]).name
                    if isinstance(v, dict) and is_block_kind(v.get("scaling")):
                        # every block setting explicit, and 'per_block' spelled as the MX it is
                        v["scaling"] = BlockScaling.from_dict(v["scaling"]).to_dict()
            _explicit_gemm(spec)
        return out


def _explicit_gemm(spec: dict) -> None:
    """Write every GemmOptions setting a GEMM-faithful layer runs with into its dict (in place; keys the user wrote
    stay as written): config.yaml shows them, and a default that changes changes the run's hash. Classic-path
    specs (no `gemm:`, no block kind) keep their dict, so their hashes stay."""
    opts = LayerSpec.from_dict(spec).gemm_options
    if opts is not None:
        gemm = dict(spec.get("gemm") or {})
        full = opts.to_dict()
        for k, v in full.items():
            gemm.setdefault(k, v)
        if "accum" in gemm:   # one spelling per accumulator ("fp22" for all = its three full dicts); FP32 = absent
            if "accum" in full:
                gemm["accum"] = full["accum"]
            else:
                del gemm["accum"]
        spec["gemm"] = gemm


# ----------------------------------------------------------------------------- simulated quantized linear


# ----------------------------------------------------------------------------- model surgery


