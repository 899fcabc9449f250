"""`build_optimizer(model, oc, device)`: the optimizer an `OptimConfig` asks for (TrainConfig.optim_config, built
once with the config; training/loop.py's only entry point here).

`oc.is_torch_adamw` (optimizer adamw, no `optim:` key): torch.optim.AdamW on `adamw_param_groups`, nothing of this
package. Otherwise:
Parameter groups: (weight format, decay) — matrices get oc.weight_decay (TrainConfig's), vectors none.  Which weights
have a format (and so a grid, a stiffness, grid storage): by default the weights the recipe fake-quantizes
(`QuantizedLinear.w_quant`, backend "sim"), each with the recipe's weight format; `optim.weight_fmt` instead
puts every transformer-block Linear weight on that format's grid (also under a bf16 recipe).  Everything else
(embeddings, LayerNorm, biases, high-precision layers) is an fp32 parameter: plain AdamW steps for the Adam
family, the optimizer's own rule for madam / grid_sgd.

Grid storage (grid_rne / grid_sr / kahan / error_feedback*): the stored weight *is* the forward weight, so the
recipe's weight quantizer of those layers is removed (it would round the on-grid values a second time with its own
per-tensor scale).  Needs backend "sim", and a recipe whose weights are per-tensor scaled: a block-scaled weight
(NVFP4, MX) is refused (`_check_no_block_weights` says why).

muon / manifold_muon (optim/muon.py): Muon on every trainable block Linear weight, AdamW (lr optim.adam_lr, default
TrainConfig.lr) on the rest (`muon_split`, which the training loop prints under the layer table).
optim.constraint (optim/constraints.py): the retraction hook on the constrained parameters, for every optimizer.

Each group carries `lr_mult` = the group's peak LR / oc.train_lr (TrainConfig.lr); the training loop sets
lr = schedule(it) * lr_mult.
"""
from __future__ import annotations

from typing import Any

import torch

from altgrad_lib.choices import STORAGE_MODES
from altgrad_lib.numerics.block_scaling import BlockScaling
from altgrad_lib.numerics.formats import get_format
from altgrad_lib.optim.adamw import AdamW, GridAdamW, StiffnessAdamW
from altgrad_lib.optim.config import MUON_MOMENTUM, OptimConfig, on_grid
from altgrad_lib.optim.constraints import constrain, constrained_params
from altgrad_lib.optim.madam import Madam
from altgrad_lib.optim.muon import ManifoldMuon, Muon
from altgrad_lib.optim.sgd import GridSGD
from altgrad_lib.quantize.linear import QuantizedLinear
from altgrad_lib.quantize.recipes import LAYER_CLASSES, hidden_matrices, layer_class_of

SR_SEED_OFFSET = 7919     # the SR generator's seed = TrainConfig.seed + this (distinct from the model's streams)


def weight_formats(model: torch.nn.Module, weight_fmt: str | None) -> dict[int, tuple[str, str]]:
    """id(param) -> (format name, module fqn) for the weights that live on a grid."""
    if weight_fmt is not None and not get_format(weight_fmt).signed:   # weights hold negative values
        raise ValueError(f"optim.weight_fmt={weight_fmt!r}: {get_format(weight_fmt).name} has no sign bit, so it "
                         f"cannot be a weight grid; use a signed format (e.g. E4M3, E5M2)")
    out: dict[int, tuple[str, str]] = {}
    for fqn, mod in model.named_modules():
        if not isinstance(mod, torch.nn.Linear) or not mod.weight.requires_grad:
            continue
        if weight_fmt is not None:
            cls = layer_class_of(fqn)
            if cls in LAYER_CLASSES and cls != "lm_head":
                out[id(mod.weight)] = (get_format(weight_fmt).name, fqn)
        elif isinstance(mod, QuantizedLinear) and mod.w_quant is not None:
            out[id(mod.weight)] = (mod.w_quant.spec.fmt.name, fqn)
    return out


def adamw_param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """torch AdamW's parameter groups: weight decay only on matrices (Linear/Embedding weights), never on
    LayerNorm gains or biases; frozen parameters left out."""
    params = [p for p in model.parameters() if p.requires_grad]
    return [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]


def stored_weight_grids(model: torch.nn.Module, oc: OptimConfig) -> dict[str, str]:
    """fqn -> the weight grid the forward uses, "<format>/pow2/<storage>", for the Linears whose weight grid storage
    keeps on its format's grid (replacing the recipe's weight quantizer, see the module docstring); {} for storage
    fp32. Call it on the quantized model before build_optimizer (which removes those quantizers)."""
    if not oc.on_grid:
        return {}
    return {fqn: f"{get_format(fmt).short_str()}/pow2/{oc.storage}"
            for fmt, fqn in weight_formats(model, oc.weight_fmt).values()}


def build_optimizer(model: torch.nn.Module, oc: OptimConfig, device: torch.device | None = None
                    ) -> torch.optim.Optimizer:
    """The optimizer of `oc` (TrainConfig.optim_config) on `model`'s trainable parameters; see the module
    docstring. Grid storage's backend (sim only) is checked with the config (TrainConfig)."""
    if oc.is_torch_adamw:   # (optimizer adamw with an optim key, e.g. constraint, is this package's AdamW)
        return torch.optim.AdamW(adamw_param_groups(model, oc.weight_decay), lr=oc.train_lr, betas=oc.betas,
                                 fused=(device is not None and device.type == "cuda") or None)
    if oc.name in ("muon", "manifold_muon"):
        return _constrained(_build_muon(model, oc), model, oc)
    return _constrained(_build_grid(model, oc), model, oc)


def _constrained(opt: torch.optim.Optimizer, model: torch.nn.Module, oc: OptimConfig) -> torch.optim.Optimizer:
    """optim.constraint's retraction on its parameters (optim/constraints.py); manifold_muon's are its own."""
    if oc.constraint != "none" and oc.name != "manifold_muon":
        constrain(opt, list(constrained_params(model, oc.constrain, oc.constraint).values()), oc.constraint)
    elif oc.name == "manifold_muon":
        opt.constraint = "stiefel"
    return opt


def muon_split(model: torch.nn.Module) -> dict[str, str]:
    """parameter name -> "muon" | "adamw": Muon on the trainable block Linear weights (recipes.hidden_matrices),
    AdamW on every other trainable parameter (embeddings, lm_head, LayerNorm gains, biases), as modded-nanogpt."""
    hidden = {id(p) for p in hidden_matrices(model).values()}
    return {n: "muon" if id(p) in hidden else "adamw" for n, p in model.named_parameters() if p.requires_grad}


def _build_muon(model: torch.nn.Module, oc: OptimConfig) -> torch.optim.Optimizer:
    """Muon / ManifoldMuon (optim/muon.py) on muon_split's two sets; grid storage as the other optimizers."""
    recipe = oc.recipe or "this recipe"
    split = muon_split(model)
    if "muon" not in split.values():
        why = "freeze_blocks=True freezes every block weight" if _blocks_frozen(model) else "it has no block Linear"
        raise ValueError(f"optimizer={oc.name!r} on a model with no trainable 2-D hidden weight ({why}): Muon would "
                         f"train nothing; valid: a model with trainable transformer blocks, or optimizer 'adamw'")
    fmts = weight_formats(model, oc.weight_fmt)
    if oc.on_grid and not fmts:
        raise ValueError(f"optim.storage={oc.storage!r} but no trainable weight has a format (recipe {recipe!r} "
                         f"quantizes no weight): set optim.weight_fmt, e.g. 'E4M3', or use storage 'fp32'")
    if oc.on_grid:
        _check_no_block_weights(model, fmts, oc.storage, recipe)
    peak, adam_lr = oc.peak_lr(), oc.adam_lr or oc.train_lr
    groups: dict[tuple, dict[str, Any]] = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        muon = split[name] == "muon"
        fmt = fmts.get(id(p), (None, ""))[0]
        lr = peak if muon else adam_lr
        wd = oc.weight_decay if p.dim() >= 2 else 0.0
        key = (muon, fmt, wd, lr)
        if key not in groups:
            groups[key] = {"params": [], "muon": muon, "fmt": fmt, "weight_decay": wd, "lr": lr,
                           "lr_mult": lr / oc.train_lr, "storage": oc.storage if fmt is not None else "fp32"}
        groups[key]["params"].append(p)
    muon = dict(momentum=oc.momentum if "momentum" in oc.explicit else MUON_MOMENTUM, nesterov=oc.nesterov,
                ns_steps=oc.ns_steps, ns_fmt=oc.ns_fmt, ns_accum=oc.ns_accum, adjust_lr=oc.adjust_lr)
    common = dict(seed=oc.seed + SR_SEED_OFFSET, track_stats=oc.track_stats, compile=oc.compile,
                  grid_headroom=oc.grid_headroom, kahan_dtype=oc.kahan_dtype, sr_bits=oc.sr_bits,
                  betas=tuple(oc.betas), eps=oc.eps, **_state_formats(oc))
    glist = list(groups.values())
    if oc.name == "muon":
        opt = Muon(glist, lr=peak, **muon, **common)
    else:
        opt = ManifoldMuon(glist, lr=peak, dual_steps=oc.dual_steps, dual_alpha=oc.dual_alpha, dual_tol=oc.dual_tol,
                           msign=oc.msign, msign_steps=oc.msign_steps, **muon, **common)
    return _finish_optimizer(opt, oc, model, fmts)


def _build_grid(model: torch.nn.Module, oc: OptimConfig) -> torch.optim.Optimizer:
    """adamw (with optim keys), stiffness_adamw, grid_adamw, madam, grid_sgd."""
    recipe = oc.recipe or "this recipe"
    fmts = weight_formats(model, oc.weight_fmt)
    if oc.on_grid and not fmts:
        why = ("freeze_blocks=True freezes every block weight" if _blocks_frozen(model) else
               f"recipe {recipe!r} quantizes no weight")
        raise ValueError(f"optim.storage={oc.storage!r} but no trainable weight has a format ({why}): set "
                         f"optim.weight_fmt, e.g. 'E4M3', or use storage 'fp32'")
    if oc.on_grid:
        _check_no_block_weights(model, fmts, oc.storage, recipe)
    if oc.osc_reset and not fmts:
        raise ValueError(f"optim.osc_reset=True but no trainable weight has a format (recipe {recipe!r}): "
                         f"set optim.weight_fmt, e.g. 'E4M3'")
    train_lr = oc.train_lr
    peak = oc.peak_lr()
    own_units = oc.name in ("grid_adamw", "madam")       # lr not in weight units: convert the decay
    groups: dict[tuple, dict[str, Any]] = {}
    for p in (p for p in model.parameters() if p.requires_grad):
        fmt = fmts.get(id(p), (None, ""))[0]
        decays = p.dim() >= 2
        lr = peak if (fmt is not None or oc.name in ("madam", "grid_sgd")) else (
            train_lr if oc.name == "grid_adamw" else peak)
        wd = oc.weight_decay if decays else 0.0
        if own_units and lr != train_lr:
            wd = wd * train_lr / lr
        key = (fmt, wd, lr)
        if key not in groups:
            groups[key] = {"params": [], "fmt": fmt, "weight_decay": wd, "lr": lr, "lr_mult": lr / train_lr,
                           "storage": oc.storage if fmt is not None else "fp32"}
        groups[key]["params"].append(p)
    common = dict(seed=oc.seed + SR_SEED_OFFSET, track_stats=oc.track_stats, compile=oc.compile,
                  grid_headroom=oc.grid_headroom, kahan_dtype=oc.kahan_dtype, sr_bits=oc.sr_bits)
    adam = dict(betas=tuple(oc.betas), eps=oc.eps, **_state_formats(oc))
    stiff = dict(stiffness=oc.stiffness, damping=oc.damping)
    glist = list(groups.values())
    if oc.name == "adamw":
        opt = AdamW(glist, lr=train_lr, **adam, **common)
    elif oc.name == "stiffness_adamw":
        opt = StiffnessAdamW(glist, lr=train_lr, **adam, **stiff, **common)
    elif oc.name == "grid_adamw":
        opt = GridAdamW(glist, lr=peak, **adam, **stiff, ulp_mode=oc.ulp_mode, clip_ulp=oc.clip_ulp, **common)
    elif oc.name == "madam":
        opt = Madam(glist, lr=peak, beta2=oc.beta2, p_scale=oc.p_scale, g_bound=oc.g_bound, **common)
    else:
        opt = GridSGD(glist, lr=peak, momentum=oc.momentum, **stiff, ulp_mode=oc.ulp_mode, **common)
    return _finish_optimizer(opt, oc, model, fmts)


def _finish_optimizer(opt: Any, oc: OptimConfig, model: torch.nn.Module, fmts: dict) -> torch.optim.Optimizer:
    """What every optimizer the factory builds gets last: the oscillation window and reset, and with grid storage
    the weight quantizers dropped (the stored weights are on the grid already)."""
    opt.stats.osc_window = oc.osc_window
    if oc.osc_reset:
        opt.set_osc_reset(oc.osc_reset_period, oc.osc_reset_window, oc.osc_reset_threshold, oc.osc_reset_start)
    if oc.on_grid:
        _drop_weight_quantizers(model, fmts)
    return opt


def _blocks_frozen(model: torch.nn.Module) -> bool:
    """No transformer-block Linear weight trains (TrainConfig.freeze_blocks)."""
    block = [m for fqn, m in model.named_modules() if isinstance(m, torch.nn.Linear)
             and layer_class_of(fqn) in LAYER_CLASSES and layer_class_of(fqn) != "lm_head"]
    return bool(block) and not any(m.weight.requires_grad for m in block)


def _state_formats(oc: OptimConfig) -> dict[str, Any]:
    def one(fmt: str | None, transform: str):
        return None if fmt is None else {"fmt": fmt, "block": oc.state_block, "rounding": oc.state_rounding,
                                         "min_numel": oc.state_min_numel, "transform": transform,
                                         "scale": oc.state_scale}
    return {"state_m": one(oc.state_m, oc.state_m_transform), "state_v": one(oc.state_v, oc.state_v_transform)}


def _check_no_block_weights(model: torch.nn.Module, fmts: dict[int, tuple[str, str]], storage: str,
                            recipe: str) -> None:
    """Refuse grid storage of a weight the recipe block-scales (NVFP4, MX): the grid here is one per-tensor power of
    two, so dropping the block quantizer would train a per-tensor model under the block recipe's name.  Keeping the
    block scales on the grid is not done: current block scales move with the weight (NVFP4's two-level scales are
    not even a fixed point of their own quantize-dequantize to the last fp32 bit), so "the weight's grid" changes
    at each write and stochastic rounding onto it is no longer unbiased."""
    for _, fqn in fmts.values():
        wq = getattr(model.get_submodule(fqn), "w_quant", None)
        if wq is not None and isinstance(wq.spec.scaling, BlockScaling):
            raise ValueError(f"optim.storage={storage!r} on recipe {recipe!r}: its weights are block-scaled "
                             f"({fqn}: {wq.spec.short_str()}) and grid storage keeps one per-tensor grid per weight, "
                             f"so the trained model would not be the recipe's; valid: optim.storage 'fp32' with "
                             f"this recipe, or a per-tensor recipe (fp8_hybrid, fp8_e4m3, fmt:<FMT>) for storage "
                             f"{tuple(m for m in STORAGE_MODES if on_grid(m))}")


def _drop_weight_quantizers(model: torch.nn.Module, fmts: dict[int, tuple[str, str]]) -> None:
    for _, fqn in fmts.values():
        mod = model.get_submodule(fqn)
        if isinstance(mod, QuantizedLinear):
            mod.w_quant = None


def step_metrics(optimizer: torch.optim.Optimizer) -> dict[str, float]:
    """Diagnostics since the last call (stall rate, Δcode fractions) when the optimizer tracks them, and the
    fraction of grid weights the last oscillation reset moved (once, after it), else {}."""
    stats = getattr(optimizer, "stats", None)
    out = stats.pop() if stats is not None and getattr(optimizer, "track_stats", False) else {}
    osc = getattr(optimizer, "osc_reset", None)
    return {**out, **osc.pop()} if osc is not None else out
