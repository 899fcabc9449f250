"""`optim.constraint`: hidden matrices kept on a manifold by any optimizer, through a retraction after each step.

    hypersphere  every row of W (out, in) has unit norm (numerics/matrix.project_rows)
    stiefel      every singular value of W is s = sqrt(out / in) (the scaled Stiefel manifold of optim/muon.py):
                 W <- s msign(W / s) by the SVD (a projected method; manifold_muon instead steps in the tangent space)

`constrain(optimizer, params, kind)` projects the parameters now (before the first forward) and registers a step
post-hook that projects them after every `optimizer.step()` (torch.optim.Optimizer.register_step_post_hook, so it
works for torch's AdamW as for this package's optimizers). Which parameters: `constrained_params(model, patterns)`,
by default every trainable transformer-block Linear weight (not lm_head, not the embeddings); a pattern that
matches a 1-D parameter (gains, biases) or an embedding (and lm_head, tied to it) is refused in one line: a vector
has no rows to normalize, and an embedding's rows are looked up one token at a time, not a linear map.
With grid storage the retraction after the optimizer's grid step would move each stored weight off its format's
grid: refused in one line (OptimConfig, optim/config.py), storage fp32 only. Both orders are measured in
bench/results/manifold_grid.md: round then retract (what this hook would do) leaves almost every entry off the grid;
retract then round holds the constraint to about the format's unit roundoff, without drift, and loses what grid_rne
storage loses anyway: workable, not implemented (it needs the retraction inside the storage's rounding step).
"""
from __future__ import annotations

import fnmatch
from typing import Any, Iterable

import torch

from altgrad_lib.choices import CONSTRAINTS
from altgrad_lib.errors import check_choice
from altgrad_lib.numerics.matrix import msign, project_rows, stiefel_scale
from altgrad_lib.quantize.recipes import hidden_matrices


def constrained_params(model: torch.nn.Module, patterns: Iterable[str] | None, kind: str
                       ) -> dict[str, torch.nn.Parameter]:
    """The parameters `patterns` (fnmatch on parameter names; None = hidden_matrices) select; one-line refusal of a
    parameter the constraint cannot hold."""
    if patterns is None:
        return hidden_matrices(model)
    embeds = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    out = {}
    for name, p in model.named_parameters():
        if not p.requires_grad or not any(fnmatch.fnmatchcase(name, pat) for pat in patterns):
            continue
        if p.dim() != 2 or id(p) in embeds:
            what = f"{p.dim()}-D" if p.dim() != 2 else "an embedding (lm_head is tied to it)"
            raise ValueError(f"optim.constrain={list(patterns)!r} selects {name} ({what}, shape {tuple(p.shape)}), "
                             f"which constraint {kind!r} cannot hold; valid: Linear weights, e.g. "
                             f"'transformer.h.*.attn.c_attn.weight' (default: every block Linear weight)")
        out[name] = p
    if not out:
        raise ValueError(f"optim.constrain={list(patterns)!r} selects no trainable parameter; valid: fnmatch "
                         f"patterns over parameter names, e.g. 'transformer.h.*.mlp.*.weight'")
    return out


@torch.no_grad()
def project(p: torch.Tensor, kind: str) -> None:
    """Put p on the constraint's manifold, in place."""
    if kind == "hypersphere":
        p.copy_(project_rows(p).to(p.dtype))
    elif kind == "stiefel":
        s = stiefel_scale(p.shape)
        p.copy_((s * msign(p.detach().float() / s)).to(p.dtype))


def constrain(optimizer: torch.optim.Optimizer, params: list[torch.Tensor], kind: str) -> Any:
    """Project `params` now and after every step of `optimizer` (module docstring); returns the hook handle."""
    check_choice("optim.constraint", kind, CONSTRAINTS)
    if kind == "none":
        return None
    for p in params:
        project(p, kind)

    def after_step(opt, args, kwargs) -> None:
        for p in params:
            project(p, kind)
    optimizer.constraint = kind                  # what the layer table and the monitors report
    return optimizer.register_step_post_hook(after_step)
