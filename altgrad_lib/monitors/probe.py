"""Eager replays of a diagnostic step on a private copy of the model, so monitors never touch training.

The copy is made once (deepcopy at attach, before torch.compile wraps the model) and, at each replay,
gets the live weights (still the pre-update ones: replays run between backward and optimizer.step) and
the pre-step snapshot of buffers, stochastic-rounding generators and torch RNG (state.Snapshots.take),
so the replay sees exactly what the training step saw: same batch, weights, scales, SR bits and dropout
masks. The torch RNG is restored afterwards and the live model, its grads and its quantizers are never
written. The copy is eager even when training is compiled, which is how dY statistics stay available there.

    replay(ctx, ...)     quantized forward (+ backward for dY) with hooks: per-tensor health (X, W, dY) and
                         log2 |x·s| histogram over the format's window, each Linear's input kurtosis, per-head
                         attention entropy, MLP units that fired
    shadow_grads(ctx)    FP32 shadow: quantizers removed, autocast off; gradients by name
    layer_histograms(recipe, x, w, dy)   the numerics monitor's hist.log2xs rows of one QuantizedLinear on given
                         operands (notebook 01: the fidelity report's synthetic ones, no model trained)
"""
from __future__ import annotations

import contextlib
import copy
from typing import Any, Callable, Iterator

import pandas as pd
import torch
from torch import nn

from altgrad_lib.monitors.activations import attention_entropy, kurtosis
from altgrad_lib.monitors.base import StepContext
from altgrad_lib.monitors.health import tensor_health
from altgrad_lib.model import MLP, CausalSelfAttention
from altgrad_lib.numerics.block_scaling import block_flush_stats, block_scale_stats
from altgrad_lib.numerics.grid_metrics import scaled_log2_hist, window_bins
from altgrad_lib.numerics.quantizer import QuantEvent
from altgrad_lib.quantize.linear import QuantizedLinear
from altgrad_lib.quantize.recipes import SUFFIX_TO_CLASS, get_policy
from altgrad_lib.quantize.gemm_overrides import override_label, override_quantizers


def _quantized_sim(model: nn.Module) -> dict[str, nn.Module]:
    return {n: m for n, m in model.named_modules() if isinstance(m, QuantizedLinear)}


class Probe:
    def __init__(self, model: nn.Module, autocast: Callable[[], contextlib.AbstractContextManager]) -> None:
        self.model = model
        self.copy = copy.deepcopy(model)
        self.copy.train()
        self.autocast = autocast
        self._pairs = list(zip([p for _, p in self.copy.named_parameters()],
                               [p for _, p in model.named_parameters()]))

    # -- state -------------------------------------------------------------------------------------------
    @torch.no_grad()
    def _load(self, snap: dict[str, Any] | None) -> None:
        for pc, p in self._pairs:
            pc.copy_(p)
        if snap is not None:
            self.copy.load_state_dict(snap["state"], strict=False)
        else:
            names = {n for n, _ in self.model.named_parameters()}
            self.copy.load_state_dict({k: v for k, v in self.model.state_dict().items() if k not in names},
                                      strict=False)

    @contextlib.contextmanager
    def _rng(self, snap: dict[str, Any] | None) -> Iterator[None]:
        devices = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
        with torch.random.fork_rng(devices=devices):   # the live RNG streams come back untouched
            if snap is not None:
                torch.set_rng_state(snap["rng"]["torch"])   # the step's own dropout masks
                if snap["rng"]["cuda"] is not None:
                    torch.cuda.set_rng_state_all(snap["rng"]["cuda"])
            yield

    def _params(self) -> list[torch.Tensor]:
        return [p for p in self.copy.parameters() if p.requires_grad]

    # -- quantized replay --------------------------------------------------------------------------------
    def replay(self, x: torch.Tensor, y: torch.Tensor, snap: dict[str, Any] | None, *, numerics: bool,
               activations: bool) -> dict[str, Any]:
        """{"health": {(fqn, role): {metric: tensor}}, "hist": {(fqn, role): (counts, bin labels)},
        "kurtosis": {fqn: tensor}, "attn_entropy": {fqn: (nh,) tensor}, "fired": {fqn: (hidden,) bool}}."""
        out: dict[str, Any] = {"health": {}, "hist": {}, "kurtosis": {}, "attn_entropy": {}, "fired": {}}
        self._load(snap)
        handles: list[Any] = []
        if numerics:
            for fqn, mod in _quantized_sim(self.copy).items():
                points = [("X", mod.x_quant), ("W", mod.w_quant), ("dY", mod.g_quant)]
                points += [(override_label(g, r), q) for g, r, q in override_quantizers(mod)]   # per-GEMM overrides
                handles += [q.observe(_health_observer(q, fqn, role, out["health"], out["hist"])) for role, q in points
                            if q is not None]
        if activations:
            for fqn, mod in self.copy.named_modules():
                if isinstance(mod, nn.Linear):
                    handles.append(mod.register_forward_pre_hook(
                        lambda m, inp, fqn=fqn: out["kurtosis"].__setitem__(fqn, kurtosis(inp[0].detach()))))
                if isinstance(mod, CausalSelfAttention):
                    handles.append(mod.c_attn.register_forward_hook(
                        lambda m, inp, o, fqn=fqn, nh=mod.n_head: out["attn_entropy"].__setitem__(
                            fqn, attention_entropy(*_qk(o.detach(), nh)))))
                if isinstance(mod, MLP):
                    pre = mod.c_gate if mod.kind == "swiglu" else mod.c_fc   # the unit's activation input
                    handles.append(pre.register_forward_hook(
                        lambda m, inp, o, fqn=fqn: out["fired"].__setitem__(
                            fqn, (o.detach() > 0).flatten(0, -2).any(0))))
        try:
            with self._rng(snap), self.autocast():
                _, loss = self.copy(x, y)
            if numerics and any(m.g_quant is not None or override_quantizers(m)
                                for m in _quantized_sim(self.copy).values()):
                with self._rng(snap):   # autograd.grad: the copy's .grad stay None
                    torch.autograd.grad(loss, self._params(), allow_unused=True)
        finally:
            for h in handles:
                h.remove()
        return out

    # -- FP32 shadow -------------------------------------------------------------------------------------
    def shadow_grads(self, x: torch.Tensor, y: torch.Tensor, snap: dict[str, Any] | None) -> dict[str, torch.Tensor]:
        """Gradients (by parameter name) of the same step with every quantizer removed and autocast off."""
        self._load(snap)
        mods = _quantized_sim(self.copy)
        saved = {fqn: (m.x_quant, m.w_quant, m.g_quant, getattr(m, "gemm_quants", None)) for fqn, m in mods.items()}
        names = [n for n, p in self.copy.named_parameters() if p.requires_grad]
        try:
            for fqn, m in mods.items():
                m.x_quant = m.w_quant = m.g_quant = None
                if saved[fqn][3] is not None:     # no Quantizer for an overridden operand: high precision
                    m.gemm_quants = None
            with self._rng(snap):
                _, loss = self.copy(x, y)
                grads = torch.autograd.grad(loss, self._params(), allow_unused=True)
        finally:
            for fqn, m in mods.items():
                m.x_quant, m.w_quant, m.g_quant, own = saved[fqn]
                if own is not None:
                    m.gemm_quants = own
        return {n: g for n, g in zip(names, grads) if g is not None}


def _qk(c_attn_out: torch.Tensor, n_head: int) -> tuple[torch.Tensor, torch.Tensor]:
    B, T, C3 = c_attn_out.shape
    C = C3 // 3
    q, k, _ = c_attn_out.float().split(C, dim=2)                     # 2 x (B, T, C)
    q = q.view(B, T, n_head, C // n_head).transpose(1, 2)            # (B, nh, T, hs)
    k = k.view(B, T, n_head, C // n_head).transpose(1, 2)            # (B, nh, T, hs)
    return q, k


def _health_observer(q: nn.Module, fqn: str, role: str, sink: dict, hists: dict) -> Callable[[QuantEvent], None]:
    """Quantizer.observe callback: the health of the operand's last quantization in the step; of a block-scaled
    operand (nvfp4 / mx) its first (row-wise) copy, with the per-element block scale as tensor_health's s, plus
    the spread of the block scales (log2) and the per-block flush fractions. Into `hists`, of the same call: the
    counts of floor(log2 |x·s|) over the format's window (grid_metrics.scaled_log2_hist) and their bin labels."""
    fmt = q.spec.fmt
    lo, hi = window_bins(fmt)
    labels = list(range(lo, hi + 1))

    def seen(ev: QuantEvent) -> None:
        if q.is_block:
            if (fqn, role) in sink:
                return
            h = tensor_health(ev.x, ev.y, ev.scale, fmt)
            h.update(block_scale_stats(ev.x, fmt, q.spec.scaling))
            h.update(block_flush_stats(ev.x, ev.y, q.spec.scaling))
        else:
            h = tensor_health(ev.x, ev.y, ev.scale, fmt, ev.eps_hits)
        sink[(fqn, role)] = h
        hists[(fqn, role)] = (scaled_log2_hist(ev.x, ev.scale, fmt), labels)
    return seen


def layer_histograms(recipe: Any, x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor, layer_class: str = "mlp_up",
                     seed: int = 0) -> pd.DataFrame:
    """The numerics monitor's `hist.log2xs:<k>` rows (step 0; columns of read_diagnostics) of X (T, in), W (out, in)
    and dY (T, out) of one QuantizedLinear of `recipe`'s `layer_class`, through the same observer as a run's replay:
    one forward and one backward. No model, no training: what the format's window does to known operands (notebook
    01 passes the fidelity report's synthetic ones, quantize/fidelity.synthetic_operand)."""
    spec = get_policy(recipe, seed=seed).spec_for(layer_class)
    if spec is None:
        raise ValueError(f"recipe {recipe!r} keeps {layer_class!r} in high precision: no operand to histogram")
    fqn = f"transformer.h.0.{next(k for k, v in SUFFIX_TO_CLASS.items() if v == layer_class)}"
    mod = QuantizedLinear(w.shape[1], w.shape[0], bias=False, layer_spec=spec, layer_class=layer_class, fqn=fqn,
                          seed=seed)
    with torch.no_grad():
        mod.weight.copy_(w)
    health: dict = {}
    hists: dict = {}
    points = [("X", mod.x_quant), ("W", mod.w_quant), ("dY", mod.g_quant)]
    points += [(override_label(g, r), q) for g, r, q in override_quantizers(mod)]
    handles = [q.observe(_health_observer(q, fqn, role, health, hists)) for role, q in points if q is not None]
    try:
        xr = x.clone().requires_grad_(True)
        mod(xr).backward(dy)
    finally:
        for h in handles:
            h.remove()
    ctx = StepContext(step=0, x=xr, y=xr, snap=None)   # the monitors' own rows: fractions, empty bins left out
    for (layer, role), (counts, labels) in hists.items():
        ctx.emit_hist(layer, role, "hist.log2xs", counts, labels)
    return pd.DataFrame(ctx.materialize(), columns=["step", "layer", "role", "metric", "value"])
