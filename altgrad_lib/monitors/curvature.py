"""Curvature: top Hessian eigenvalue (power iteration on Hessian-vector products) and Hutchinson trace, for
the whole model or a parameter subset (one block, one Linear), and the lr·λ_max stability alarm.

What the number means on a quantized model
    A quantized model's loss is piecewise constant in its weights (Q rounds them onto a grid), so its true
    Hessian is zero almost everywhere. Training uses the straight-through estimator (STE): in the derivative the
    forward quantizers act as the identity (or a 0/1 mask for the clipped STE). A Hessian-vector product by
    double backward through the STE is therefore the Hessian of the **STE surrogate** — the high-precision
    network's curvature evaluated at the quantized X and W, chained through the STE's Jacobian — and **not the
    Hessian of the quantized model**. `curvature_rows` says so in every row: role "ste_surrogate" ("exact" for a
    model without quantized layers). dY quantization is switched off while measuring (see `hessian_mode`).

What it never changes (`hessian_mode`)
    - eval mode while measuring, so the measured function is deterministic (no dropout, stochastic rounding
      becomes nearest, quantizers read their scale without writing state); afterwards every module gets back
      its own training flag (PyHessian silently leaves the model in eval mode);
    - attention through SDPA's math kernel (the fused kernels have no double backward);
    - dY (grad_output) quantization off: it runs inside the backward under no_grad, so a double backward would
      treat Q(dY) as a constant (a wrong HVP) and advance its scaler, counters and SR stream;
    - buffers, quantizer extra state (SR generators) and every RNG (torch, CUDA, numpy, python) restored
      bit-exactly; `.grad` never touched (torch.autograd.grad); the double-backward graph is freed before
      returning, and with several batches after each batch (memory does not grow with the batch count).
    Measure on the eager model (double backward does not go through torch.compile) with the "sim" backend (the
    hardware-FP8 autograd Functions are not twice differentiable: refused with a clear error). The forward runs
    without autocast (fp32) unless loss_fn enters it.

Stability alarm
    For gradient descent on a quadratic, a step is stable iff lr·λ_max < 2 (`GD_STABILITY_LIMIT`). Adam's step is
    preconditioned by P = √v̂ + ε; its edge of stability is on the preconditioned sharpness λ_max(P⁻¹H), at
    lr·λ = (2 + 2β1)/(1 − β1) (38 for β1 = 0.9; Cohen et al. 2022). `top_eigenvalue(..., precond=
    adam_preconditioner(opt))` measures that one; `adam_stability_limit` gives its threshold.
"""
from __future__ import annotations

import contextlib
import math
from typing import Any, Callable, Iterator, Sequence

import torch
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from altgrad_lib import state
from altgrad_lib.monitors.base import Monitor
from altgrad_lib.quantize.convert import quantized_modules
from altgrad_lib.quantize.gemm_overrides import override_key, override_quantizers
from altgrad_lib.quantize.linear import QuantizedLinear

STE_NOTE = ("Hessian of the straight-through (STE) surrogate: forward quantizers differentiate as the identity "
            "(clipped STE: a 0/1 mask) and dY quantization is off while measuring; it is not the Hessian of the "
            "quantized model, which is piecewise constant in its weights")
GD_STABILITY_LIMIT = 2.0          # lr·λ_max above this: plain gradient descent on the local quadratic diverges
WHICH = ("largest", "magnitude")
GROUPINGS = ("block", "linear", "tensor")

LossFn = Callable[[nn.Module, Any], Tensor]


def gpt_loss(model: nn.Module, batch: tuple[Tensor, Tensor]) -> Tensor:
    """Loss of altgrad's GPT on one (x, y) batch: the default `loss_fn`."""
    x, y = batch
    return model(x, y)[1]


def lr_sharpness(lr: float, lam: float) -> float:
    """lr·λ_max: the quantity the stability alarm compares with GD_STABILITY_LIMIT (or adam_stability_limit)."""
    return lr * lam


def stability_alarm(lr: float, lam: float, limit: float = GD_STABILITY_LIMIT) -> bool:
    """True when lr·λ_max crossed `limit` (2 for gradient descent on the raw Hessian)."""
    return lr_sharpness(lr, lam) > limit


def adam_stability_limit(beta1: float) -> float:
    """Adam's edge of stability for the preconditioned sharpness lr·λ_max(P⁻¹H): (2 + 2β1)/(1 − β1)."""
    if not 0 <= beta1 < 1:
        raise ValueError(f"beta1={beta1!r} must be in [0, 1)")
    return (2 + 2 * beta1) / (1 - beta1)


def is_quantized(model: nn.Module) -> bool:
    return bool(quantized_modules(model))


# ------------------------------------------------------------------------------------------ measuring mode


def _check_backend(model: nn.Module) -> None:
    if hasattr(model, "_orig_mod"):           # a torch.compile wrapper (OptimizedModule)
        raise ValueError("curvature: pass the eager model (model._orig_mod), not the torch.compile wrapper; "
                         "double backward does not go through compiled graphs")
    for name, m in quantized_modules(model).items():
        if not isinstance(m, QuantizedLinear):
            raise ValueError(f"curvature: {name} is a {type(m).__name__} (hardware FP8 backend), which is not twice "
                             f"differentiable; valid backend: 'sim'")
    lowp_attn = [n for n, m in model.named_modules() if getattr(m, "attention_op", None) is not None]
    if lowp_attn:    # quantize/attention.py's backward is once-differentiable (its quantizers run without autograd)
        raise ValueError(f"curvature: {lowp_attn[0]} runs low-precision attention (recipe `attn:`), which is not "
                         f"twice differentiable; valid: attn: null")


@contextlib.contextmanager
def hessian_mode(model: nn.Module) -> Iterator[None]:
    """Eval mode, dY quantization off; on exit every training flag, buffer, quantizer state and RNG restored."""
    _check_backend(model)
    flags = [(m, m.training) for m in model.modules()]
    snap = state.snapshot_state(model)          # buffers + extra_state (SR generators) + torch/CUDA RNG
    rng = state.capture_rng_state()             # + numpy, python
    g_quants = [(m, m.g_quant) for m in model.modules() if isinstance(m, QuantizedLinear) and m.g_quant is not None]
    # per-GEMM overrides of dY (quantize/gemm_overrides.py) too: a layer whose gemm_quants lacks one keeps it hp
    own = [(m, m.gemm_quants) for m in model.modules() if isinstance(m, QuantizedLinear)
           and getattr(m, "gemm_quants", None) is not None]
    try:
        model.eval()
        for m, _ in g_quants:
            m.g_quant = None
        for m, _ in own:
            m.gemm_quants = nn.ModuleDict({override_key(g, r): q for g, r, q in override_quantizers(m)
                                           if r != "grad_output"})
        # the fused attention kernels (flash / memory-efficient, CPU and CUDA) have no double backward
        with sdpa_kernel(SDPBackend.MATH):
            yield
    finally:
        for m, q in g_quants:
            m.g_quant = q
        for m, qs in own:
            m.gemm_quants = qs
        for m, flag in flags:
            m.training = flag
        state.restore_snapshot(model, snap)
        state.restore_rng_state(rng)


# ------------------------------------------------------------------------------------------ Hessian-vector products


def _dot(a: Sequence[Tensor], b: Sequence[Tensor]) -> float:
    return float(sum((x.double() * y.double()).sum() for x, y in zip(a, b)))


def _norm(a: Sequence[Tensor]) -> float:
    return math.sqrt(_dot(a, a))


def _as_batches(batch: Any) -> list[Any]:
    """A list means several batches (the HVP is their mean); anything else (e.g. an (x, y) tuple) is one batch."""
    return list(batch) if isinstance(batch, list) else [batch]


class _HVP:
    """v -> H v for the mean loss over `batches`, H w.r.t. `params`. With one batch the gradient graph is built
    once and reused; with several it is rebuilt per batch and freed right after (memory of one batch)."""

    def __init__(self, model: nn.Module, loss_fn: LossFn, batches: list[Any], params: list[Tensor]) -> None:
        self.model, self.loss_fn, self.batches, self.params = model, loss_fn, batches, params
        self.grads = self._grads(batches[0]) if len(batches) == 1 else None
        self.finite = True if self.grads is None else self._finite

    def _grads(self, batch: Any) -> list[Tensor | None]:
        loss = self.loss_fn(self.model, batch)
        self._finite = bool(torch.isfinite(loss))
        return list(torch.autograd.grad(loss, self.params, create_graph=True, allow_unused=True))

    def _hv(self, grads: list[Tensor | None], v: list[Tensor], idx: list[int], retain: bool) -> list[Tensor]:
        # H[idx, idx] v = d/dθ_idx (g_idx · v): differentiate only the block's gradient w.r.t. the block
        ps = [self.params[i] for i in idx]
        live = [k for k, i in enumerate(idx) if grads[i] is not None and grads[i].requires_grad]
        out = [torch.zeros_like(p) for p in ps]
        if not live:                      # the gradient does not depend on these parameters: H = 0
            return out
        hv = torch.autograd.grad([grads[idx[k]] for k in live], ps, grad_outputs=[v[k] for k in live],
                                 retain_graph=retain, allow_unused=True)
        return [h.detach() if h is not None else o for h, o in zip(hv, out)]

    def __call__(self, v: list[Tensor], idx: list[int] | None = None) -> list[Tensor]:
        """H v for the parameters `idx` (default all; v has one tensor per selected parameter)."""
        idx = list(range(len(self.params))) if idx is None else idx
        if self.grads is not None:
            return self._hv(self.grads, v, idx, retain=True)
        acc = [torch.zeros_like(self.params[i]) for i in idx]
        for b in self.batches:
            grads = self._grads(b)
            self.finite = self.finite and self._finite
            for a, h in zip(acc, self._hv(grads, v, idx, retain=False)):
                a.add_(h, alpha=1.0 / len(self.batches))
            del grads                     # free this batch's double-backward graph before the next one
        return acc

    def close(self) -> None:
        self.grads = None


def _rand_like(params: list[Tensor], gen: torch.Generator, rademacher: bool = False) -> list[Tensor]:
    # drawn on the CPU from a private generator: never touches the global (training) RNG streams
    out = []
    for p in params:
        if rademacher:
            r = torch.randint(0, 2, p.shape, generator=gen).to(p.dtype) * 2 - 1
        else:
            r = torch.randn(p.shape, generator=gen, dtype=torch.float64).to(p.dtype)
        out.append(r.to(p.device))
    return out


def _power_iteration(op: Callable[[list[Tensor]], list[Tensor]], params: list[Tensor], iters: int, tol: float,
                     gen: torch.Generator, shift: float = 0.0) -> tuple[float, int]:
    """Dominant eigenvalue (largest |λ|, signed) of op − shift·I by the Rayleigh quotient; stops when it changes
    by ≤ tol relative. Returns (λ, HVPs used)."""
    v = _rand_like(params, gen)
    n = _norm(v)
    v = [x / n for x in v]
    lam = math.nan
    for i in range(1, iters + 1):
        hv = op(v)
        if shift:
            hv = [h - shift * x for h, x in zip(hv, v)]
        new = _dot(v, hv)                 # Rayleigh quotient, |v| = 1
        norm = _norm(hv)
        if not math.isfinite(new) or norm == 0.0:
            return (new if math.isfinite(new) else math.nan), i
        v = [h / norm for h in hv]
        if abs(new - lam) <= tol * abs(new):
            return new, i
        lam = new
    return lam, iters


def top_eig(op: Callable, params: list[Tensor], iters: int, tol: float, which: str, seed: int) -> tuple[float, int]:
    gen = torch.Generator().manual_seed(seed)
    lam, n = _power_iteration(op, params, iters, tol, gen)
    if which == "largest" and lam < 0:
        # the dominant eigenvalue is the most negative one: iterate on H − λ_min·I (spectrum ≥ 0), whose
        # dominant eigenvalue is λ_max − λ_min
        mu, n2 = _power_iteration(op, params, iters, tol, gen, shift=lam)
        lam, n = mu + lam, n + n2
    return lam, n


def _params(model: nn.Module, params: Sequence[Tensor] | None) -> list[Tensor]:
    ps = [p for p in model.parameters() if p.requires_grad] if params is None else list(params)
    if not ps:
        raise ValueError("curvature: no parameters to differentiate (params is empty or nothing requires grad)")
    return ps


def _check(iters: int, tol: float, which: str) -> None:
    if which not in WHICH:
        raise ValueError(f"which={which!r} is invalid; valid choices: {WHICH}")
    if iters < 1 or not tol > 0:
        raise ValueError(f"need iters >= 1 and tol > 0, got iters={iters!r}, tol={tol!r}")


def _preconditioned(op: Callable, d: list[Tensor] | None) -> Callable:
    if d is None:
        return op
    return lambda v: [di * h for di, h in zip(d, op([di * x for di, x in zip(d, v)]))]   # D H D


def top_eigenvalue(model: nn.Module, loss_fn: LossFn, batch: Any,
                   params: Sequence[Tensor] | None = None, iters: int = 100, tol: float = 1e-3,
                   which: str = "largest", precond: Sequence[Tensor] | None = None, seed: int = 0
                   ) -> tuple[float, int]:
    """Top eigenvalue of the Hessian of loss_fn(model, batch) w.r.t. `params` (default: all trainable ones; a
    subset gives that block of the Hessian, e.g. one layer). Returns (λ, number of Hessian-vector products).

    On a quantized model this is the Hessian of the STE surrogate, not of the quantized model (see STE_NOTE).
    which="largest": the largest (algebraic) eigenvalue, the one the stability alarm needs (a second, shifted
    power iteration runs when the dominant eigenvalue is negative); "magnitude": the dominant one, signed.
    batch: one batch, or a list of batches (HVPs averaged, graphs freed batch by batch). precond: a list of
    tensors d (one per param) to measure D·H·D instead (e.g. adam_preconditioner: λ_max(P⁻¹H) with D = P^-½).
    NaN when the loss is non-finite. The model's training flags, buffers, quantizer state and RNGs are restored.
    """
    _check(iters, tol, which)
    ps = _params(model, params)
    with hessian_mode(model):
        op = _HVP(model, loss_fn, _as_batches(batch), ps)
        try:
            if op.grads is not None and not op.finite:
                return math.nan, 0
            d = None if precond is None else [t.to(p) for t, p in zip(precond, ps)]
            lam, n = top_eig(_preconditioned(op, d), ps, iters, tol, which, seed)
            return (lam if op.finite else math.nan), n
        finally:
            op.close()


def hutchinson_trace(model: nn.Module, loss_fn: LossFn, batch: Any,
                     params: Sequence[Tensor] | None = None, samples: int = 32, seed: int = 0) -> tuple[float, float]:
    """Hutchinson estimate of tr(H) = E[vᵀHv], v Rademacher: returns (mean, standard error over the samples).
    Same surrogate and same guarantees as top_eigenvalue."""
    if samples < 1:
        raise ValueError(f"samples={samples!r} must be >= 1")
    ps = _params(model, params)
    with hessian_mode(model):
        op = _HVP(model, loss_fn, _as_batches(batch), ps)
        try:
            return _hutchinson(op, ps, samples, torch.Generator().manual_seed(seed))
        finally:
            op.close()


def _hutchinson(op: Callable, ps: list[Tensor], samples: int, gen: torch.Generator) -> tuple[float, float]:
    vals = []
    for _ in range(samples):
        v = _rand_like(ps, gen, rademacher=True)
        vals.append(_dot(v, op(v)))
    t = torch.tensor(vals, dtype=torch.float64)
    se = float(t.std() / math.sqrt(samples)) if samples > 1 else math.nan
    return float(t.mean()), se


def adam_preconditioner(optimizer: torch.optim.Optimizer, params: Sequence[Tensor]) -> list[Tensor]:
    """D = P^-½ with P = √v̂ + ε, Adam's per-coordinate step divisor (v̂ = exp_avg_sq / (1 − β2^t)), so that
    top_eigenvalue(..., precond=D) is λ_max(P⁻¹H), Adam's preconditioned sharpness. Needs ≥ 1 optimizer step."""
    groups = {id(p): g for g in optimizer.param_groups for p in g["params"]}
    out = []
    for p in params:
        st = optimizer.state.get(p, {})
        if "exp_avg_sq" not in st or id(p) not in groups:
            raise ValueError("adam_preconditioner: a parameter has no Adam state yet (take an optimizer step first, "
                             "or pass only parameters the optimizer holds)")
        g = groups[id(p)]
        bc2 = 1 - g["betas"][1] ** float(st["step"])
        denom = (st["exp_avg_sq"].sqrt() / math.sqrt(bc2)).add_(g["eps"])   # as torch.optim.AdamW computes it
        out.append(denom.rsqrt())
    return out


# ------------------------------------------------------------------------------------------ per-layer rows


def layer_groups(model: nn.Module, by: str = "block") -> dict[str, list[Tensor]]:
    """Trainable parameters grouped per layer: "block" (transformer.h.<i>, and each other owning module, e.g.
    transformer.wte, transformer.ln_f), "linear" (each nn.Linear / QuantizedLinear) or "tensor" (each
    parameter). A tied weight appears once, under its first name (transformer.wte.weight)."""
    if by not in GROUPINGS:
        raise ValueError(f"by={by!r} is invalid; valid choices: {GROUPINGS}")
    out: dict[str, list[Tensor]] = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        owner = name.rpartition(".")[0]
        parts = name.split(".")
        if by == "tensor":
            key = name
        elif by == "block":
            key = ".".join(parts[:3]) if parts[:2] == ["transformer", "h"] and len(parts) > 3 else owner
        else:
            key = owner if isinstance(model.get_submodule(owner), nn.Linear) else None
        if key is not None:
            out.setdefault(key, []).append(p)
    return out


def curvature_rows(model: nn.Module, batch: Any, *, step: int, lr: float, loss_fn: LossFn = gpt_loss,
                   by: str | None = "block", iters: int = 20, tol: float = 1e-3, trace_samples: int = 0,
                   seed: int = 0) -> list[dict[str, Any]]:
    """Tidy rows {step, layer, role, metric, value} for the whole model (layer "model") and each layer group
    (`layer_groups(model, by)`; by=None: whole model only): lambda_max, lr_lambda_max (lr·λ_max, alarm at 2),
    power_iters, and trace (Hutchinson, if trace_samples > 0). role is "ste_surrogate" on a quantized model
    (the Hessian of the STE surrogate, see STE_NOTE) and "exact" otherwise. One gradient graph serves the whole
    model and every group (one batch); model state is restored as in top_eigenvalue."""
    _check(iters, tol, "largest")
    role = "ste_surrogate" if is_quantized(model) else "exact"
    ps = _params(model, None)
    groups = {"model": ps, **(layer_groups(model, by) if by is not None else {})}
    rows: list[dict[str, Any]] = []
    with hessian_mode(model):
        op = _HVP(model, loss_fn, _as_batches(batch), ps)
        try:
            for layer, sub in groups.items():
                idx = [i for i, p in enumerate(ps) if any(p is q for q in sub)]
                sub_op = _restrict(op, idx)
                sub_ps = [ps[i] for i in idx]
                lam, n = top_eig(sub_op, sub_ps, iters, tol, "largest", seed)
                if not op.finite:
                    lam = math.nan
                vals = {"lambda_max": lam, "lr_lambda_max": lr_sharpness(lr, lam), "power_iters": float(n)}
                if trace_samples > 0:
                    vals["trace"] = _hutchinson(sub_op, sub_ps, trace_samples, torch.Generator().manual_seed(seed))[0]
                rows += [{"step": step, "layer": layer, "role": role, "metric": k, "value": v} for k, v in vals.items()]
        finally:
            op.close()
    return rows


def _restrict(op: _HVP, idx: list[int]) -> Callable[[list[Tensor]], list[Tensor]]:
    """The H[idx, idx] block of op as an operator on the selected parameters."""
    return lambda v: op(v, idx)


# ------------------------------------------------------------------------------------------ monitor group


class CurvatureMonitor(Monitor):
    """The "curvature" diagnostics group (DiagnosticsConfig.hessian_interval > 0): every hessian_interval steps
    (and at step 1) `curvature_rows` (hessian_iters power iterations at most) of the live model, after that step's
    optimizer update, on a **fixed batch**
    (the batch of the first measured step, kept in the checkpointed state, so λ_max is comparable over
    training): lambda_max, lr_lambda_max (lr·λ_max; the GD alarm is at 2), power_iters for layer "model" and
    each block. role "ste_surrogate" on a quantized model: the Hessian of the STE surrogate (STE_NOTE), not of
    the quantized model. hessian_mode restores training flags, buffers, quantizer state and every RNG, and
    .grad is never written, so training stays bit-identical. These rows cost host syncs (power iteration),
    only on the steps they are due. Backends that are not twice differentiable give NaN rows and one
    "unavailable:curvature" event."""

    def __init__(self, att: Any) -> None:
        super().__init__(att)
        self.batch: tuple[Tensor, Tensor] | None = None
        self.noted = False

    def on_backward(self, ctx: Any) -> None:
        if self.batch is None:
            self.batch = (ctx.x.detach().clone(), ctx.y.detach().clone())

    def on_step(self, ctx: Any) -> None:
        model = self.att.model
        x, y = (t.to(ctx.x.device) for t in self.batch)
        try:
            rows = curvature_rows(model, (x, y), step=ctx.step, lr=ctx.lr, iters=self.cfg.hessian_iters)
        except ValueError as e:        # hardware-FP8 layers: not twice differentiable
            if not self.noted:
                ctx.event("unavailable:curvature", str(e)[:80], math.nan, math.nan)
                self.noted = True
            for m in ("lambda_max", "lr_lambda_max"):
                ctx.emit("model", "ste_surrogate", m, math.nan)
            return
        for r in rows:
            ctx.emit(r["layer"], r["role"], r["metric"], r["value"])

    def state_dict(self) -> dict[str, Any]:
        return {"batch": None if self.batch is None else tuple(t.cpu() for t in self.batch), "noted": self.noted}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.batch, self.noted = state.get("batch"), bool(state.get("noted", False))
