"""The manifold group: how far each hidden matrix is from its constraint, its singular values, and what the
orthogonalizing optimizer's Newton–Schulz / dual ascent left undone.

On by DiagnosticsConfig.manifold_interval > 0 alone (every k steps, and at step 1; in no preset: svdvals of every
block matrix). Rows (layer = module fqn of every trainable block Linear, quantize/recipes.hidden_matrices; role "W"):
    orth_residual     ‖ŴᵀŴ - I‖_F / √n, Ŵ = W / s, s = sqrt(out / in) (numerics/matrix.gram_residual: 0 on manifold
                      Muon's scaled Stiefel manifold; for unconstrained weights, how far from it they are)
    sphere_residual   max_i |‖w_i‖ - 1| over the rows (0 under optim.constraint hypersphere)
    sigma_max, sigma_min, cond   the largest / smallest singular value (torch.linalg.svdvals) and their ratio
    hist.log2sv:<k>   the spectrum: fraction of singular values with floor(4 log2(σ / s)) = k (quarter binades
                      around the Stiefel scale, k clamped to [-32, 32])
    ns_residual       Muon / manifold Muon: ‖O - msign(U)‖_F / √r of this step's Newton–Schulz output O (optim/muon.py)
    dual_residual, dual_steps    manifold Muon: ‖H‖_F / n at its last dual-ascent step, and the steps taken
The optimizer's numbers come from its `measure` / `measured()` protocol (optim/muon.py; read through the Attached
optimizer, whatever its class: this package does not import optim).
Budget: DiagnosticsConfig.constraint_budget > 0 with an optimizer that keeps a constraint (its `constraint`
attribute: stiefel -> orth_residual, hypersphere -> sphere_residual) writes an event `constraint_violation` (layer,
value, budget) at each measured step where a matrix's residual exceeds the budget.
"""
from __future__ import annotations

import torch

from altgrad_lib.monitors.base import Monitor, Row, StepContext
from altgrad_lib.numerics.matrix import gram_residual, sphere_residual, stiefel_scale
from altgrad_lib.quantize.recipes import hidden_matrices

SV_BINS = list(range(-32, 33))
BUDGET_METRIC = {"stiefel": "orth_residual", "hypersphere": "sphere_residual"}


class ManifoldMonitor(Monitor):
    def __init__(self, att) -> None:
        super().__init__(att)
        self.names = {id(p): n.rpartition(".")[0] for n, p in hidden_matrices(att.model).items()}

    def on_backward(self, ctx: StepContext) -> None:
        opt = self.att.optimizer
        if opt is not None and hasattr(opt, "measured"):
            opt.measure = True

    def on_step(self, ctx: StepContext) -> None:
        for name, p in hidden_matrices(self.att.model).items():
            layer, w = name.rpartition(".")[0], p.detach().float()
            s = stiefel_scale(w.shape)
            ctx.emit(layer, "W", "orth_residual", gram_residual(w, s))
            ctx.emit(layer, "W", "sphere_residual", sphere_residual(w))
            sv = torch.linalg.svdvals(w)
            ctx.emit(layer, "W", "sigma_max", sv[0])
            ctx.emit(layer, "W", "sigma_min", sv[-1])
            ctx.emit(layer, "W", "cond", sv[0] / sv[-1])
            k = torch.floor(4 * torch.log2(sv.clamp_min(torch.finfo(torch.float32).tiny) / s)).clamp(-32, 32)
            ctx.emit_hist(layer, "W", "hist.log2sv", torch.bincount((k + 32).long(), minlength=len(SV_BINS)), SV_BINS)
        opt = self.att.optimizer
        if opt is not None and hasattr(opt, "measured"):
            for p, vals in opt.measured().items():
                if id(p) in self.names:
                    for metric, v in vals.items():
                        ctx.emit(self.names[id(p)], "W", metric, v)
            opt.measure = False

    def on_rows(self, step: int, rows: list[Row], ctx: StepContext) -> None:
        budget = self.cfg.constraint_budget
        metric = BUDGET_METRIC.get(getattr(self.att.optimizer, "constraint", None) or "")
        if not budget or metric is None:
            return
        for _, layer, role, m, v in rows:
            if m == metric and role == "W" and v > budget:
                ctx.event("constraint_violation", layer, v, budget)
