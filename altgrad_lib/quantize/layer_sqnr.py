"""Per-layer SQNR: signal-to-quantization-noise ratio of every nn.Linear's output, input gradient and weight
gradient, a quantized model against an FP32 copy of the same weights (notebook 03).

`sqnr_db` itself lives in numerics/quant.py (one copy).
"""
from __future__ import annotations

import copy
from typing import Any, Callable, Iterable

import pandas as pd
import torch

from altgrad_lib.numerics.quant import sqnr_db
from altgrad_lib.quantize.convert import quantize_model
from altgrad_lib.quantize.recipes import get_policy


def _capture_linears(model: torch.nn.Module) -> tuple[dict[str, dict[str, torch.Tensor]], list]:
    """Forward/backward hooks on every nn.Linear storing output Y and input gradient dX."""
    store: dict[str, dict[str, torch.Tensor]] = {}
    handles = []
    for name, mod in model.named_modules():
        if not isinstance(mod, torch.nn.Linear):
            continue
        store[name] = {}

        def fwd(m, inp, out, name=name):
            store[name]["out"] = out.detach().float().clone()

        def bwd(m, grad_in, grad_out, name=name):
            if grad_in[0] is not None:
                store[name]["grad_in"] = grad_in[0].detach().float().clone()

        handles += [mod.register_forward_hook(fwd), mod.register_full_backward_hook(bwd)]
    return store, handles


def layer_sqnr(model_ref: torch.nn.Module, model_test: torch.nn.Module, x: torch.Tensor,
               y: torch.Tensor) -> pd.DataFrame:
    """Per-Linear SQNR (dB) of output Y, input gradient dX and weight gradient dW, test vs reference.

    Both models run one forward/backward on the same batch; errors include everything upstream, so the
    table shows how quantization noise accumulates through depth (forward) and back (backward).
    """
    tables = []
    for model in (model_ref, model_test):
        model.zero_grad(set_to_none=True)
        store, handles = _capture_linears(model)
        try:
            _, loss = model(x, y)
            loss.backward()
        finally:
            for h in handles:
                h.remove()
        for name, mod in model.named_modules():
            if name in store and mod.weight.grad is not None:
                store[name]["grad_w"] = mod.weight.grad.detach().float().clone()
        tables.append(store)
    ref, test = tables
    rows = []
    for name in ref:
        if name not in test:
            continue
        row = {"layer": name}
        for key, col in (("out", "out_sqnr_db"), ("grad_in", "grad_in_sqnr_db"), ("grad_w", "grad_w_sqnr_db")):
            if key in ref[name] and key in test[name]:
                row[col] = sqnr_db(ref[name][key], test[name][key])
        rows.append(row)
    return pd.DataFrame(rows)


def quantized_copy_sqnr(model: torch.nn.Module, policy: Any, x: torch.Tensor, y: torch.Tensor,
                        convert: Callable[[torch.nn.Module, Any], Any] | None = None) -> pd.DataFrame:
    """layer_sqnr of a quantized deep copy of `model` against an FP32 deep copy of the same weights.

    `convert(copy, policy)` quantizes the copy in place; by default `convert.quantize_model`.
    """
    if convert is None:
        def convert(m, p):
            return quantize_model(m, p, verbose=False)
    model_fp32 = copy.deepcopy(model).float()
    model_q = copy.deepcopy(model).float()
    convert(model_q, policy)
    return layer_sqnr(model_fp32, model_q, x, y)


def sqnr_by_backend(model: torch.nn.Module, recipe: Any, backends: Iterable[str], x: torch.Tensor,
                    y: torch.Tensor, seed: int = 0) -> pd.DataFrame:
    """layer_sqnr of `recipe` through each backend vs FP32, stacked with a `backend` column."""
    frames = [quantized_copy_sqnr(model, get_policy(recipe, backend=b, seed=seed), x, y).assign(backend=b)
              for b in backends]
    return pd.concat(frames, ignore_index=True)
