"""Gradient-flow guard: stop a run whose layers silently receive no gradient.

Why: on torch 2.11, a compiled `autograd.Function` whose forward ended in a no-op `.to()` dropped its
gradient, so every transformer block of a compiled simulated-FP8 model got an all-zero gradient while the
tied embedding / lm_head (outside the blocks) kept learning. The loss still fell, every number looked
plausible, and only the blocks' zero gradients told the truth. The guard makes that state an error.

`check_gradient_flow(model)` looks at every trainable parameter after `loss.backward()`: a parameter whose
`.grad` is None or all zero did not learn this step. One host sync per check (a stacked amax), so train()
runs it at the first step of every process and, optionally, every N steps.
"""
from __future__ import annotations

from typing import Iterable

import torch


class GradientFlowError(RuntimeError):
    """Trainable parameters received no (or an all-zero) gradient."""


def dead_gradients(model: torch.nn.Module) -> list[str]:
    """Names of trainable parameters whose .grad is None or exactly zero everywhere (in model order)."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    with_grad = [(n, p.grad) for n, p in named if p.grad is not None]
    dead = [n for n, p in named if p.grad is None]
    if with_grad:
        amax = torch.stack([g.detach().abs().amax().float() for _, g in with_grad]).cpu()  # one sync
        dead += [n for (n, _), a in zip(with_grad, amax.tolist()) if not a > 0]  # NaN counts as alive here
    order = {n: i for i, (n, _) in enumerate(named)}
    return sorted(dead, key=order.__getitem__)


def check_gradient_flow(model: torch.nn.Module, step: int, quantized: Iterable[str] = ()) -> None:
    """Raise GradientFlowError naming the parameters that got no gradient at `step`.

    `quantized`: module names of quantized layers; their parameters are listed first in the message, since a
    quantized layer that receives no gradient is the failure this guard exists for.
    """
    dead = dead_gradients(model)
    if not dead:
        return
    prefixes = tuple(q + "." for q in quantized)
    in_q = [n for n in dead if n.startswith(prefixes)] if prefixes else []
    n_train = sum(1 for p in model.parameters() if p.requires_grad)
    shown = (in_q or dead)[:4]
    more = len(in_q or dead) - len(shown)
    raise GradientFlowError(
        f"gradient-flow guard: at step {step}, {len(dead)} of {n_train} trainable parameters got no or an "
        f"all-zero gradient ({len(in_q)} in quantized layers), e.g. {', '.join(shown)}"
        f"{f' and {more} more' if more > 0 else ''}; stopping instead of training only the rest. Compare "
        f"compile=false (eager), and see tests/test_compile_grads.py; set grad_guard_interval=-1 to disable "
        f"the guard if this is intended (e.g. zero-initialised layers)")
