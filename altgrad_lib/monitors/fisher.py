"""Fisher information per transformer block on a fixed probe batch: trace and diagonal from labels sampled from the
model, top eigenvalue by Fisher-vector products, and NNGeometry's K-FAC.

Which Fisher
    The **true Fisher of the model's predictive distribution**, F = 1/(B·T) Σ_n E_ŷ~p(·|x_n)[g_n gₙᵀ] with
    g_n = ∇ Σ_t log p(ŷ_t | x_n,<t): labels are sampled from the model (one draw per token, a private generator
    seeded per measurement), not taken from the data (that would be the empirical Fisher). For a softmax
    cross-entropy output the true Fisher equals the Gauss-Newton matrix of the mean token loss, so its top
    eigenvalue sits next to the Hessian's λ_max of monitors/curvature.py (same 1/(B·T) normalisation).
    Parameters: the weights (and biases) of each block's Linear layers.

On a quantized model
    p(ŷ|x) is the quantized model's own distribution (the forward runs Q(X)·Q(W)); its score g is the training's
    straight-through (STE) gradient at Q(X), Q(W) with dY quantization off, as in curvature.STE_NOTE: rows carry
    role "ste_surrogate" ("exact" on a model without quantized layers). Measured with curvature.hessian_mode
    (eval mode, SR becomes nearest, the live model's state and every RNG restored) on a private copy.

What NNGeometry does with our layers (nngeometry 0.4, read from its source)
    - LayerCollection.from_model knows modules by class *name*: a QuantizedLinear is not "Linear"; since it has
      child modules (its quantizers) it is skipped **silently**, and the GPT's nn.Embedding makes from_model
      raise. Its K-FAC hook refuses any class not named "Linear"/"Conv*".
    - Its Linear Jacobians assume 2-D inputs (batch, features); our Linears see (B, T, C).
    So each block Linear is replaced, on the copy, by `_TokenLinear`: Q_x applied outside a plain 2-D nn.Linear
    whose weight is Q_w(W) (a leaf): NNGeometry's per-row gradient gy ⊗ x is then the STE gradient gy ⊗ Q(x).
    The LayerCollection is built by hand from those inner Linears.
    - With the B·T token rows of a sequence model NNGeometry's K-FAC is "K-FAC-expand" (Eschenhagen et al.,
      NeurIPS 2023): A = E[x xᵀ], G = E[gy gyᵀ] over token rows, which drops the cross-position terms of the
      exact per-sequence gradient; it is an approximation whose error these rows let you read (kfac_* vs
      fisher_*). NNGeometry divides both factors by the number of sequences; A is divided by T here as well,
      so that A is the mean over the B·T token rows (for T = 1 nothing changes).
    - NNGeometry's own diagonal (PMatDiag) is the same expand construction (Σ over token rows of (gy ⊗ x)²), not
      the diagonal of F when T > 1, so the diagonal reported here comes from the exact per-sequence gradients.

Rows (layer = block fqn, e.g. transformer.h.0):
    fisher_trace       tr F = mean_n |g_n|² / T (= trace of the diagonal Fisher); unbiased Monte-Carlo estimate
    diag_max           largest entry of that diag F (the diagonal Fisher's top eigenvalue; the max of B-sample
                       estimates, so biased upwards for small B)
    fisher_lambda_max  λ_max(F) of the label-expectation Fisher (no sampling: Σ_y p_y over the vocabulary, i.e.
                       the Gauss-Newton matrix), by power iteration on F·v = Jᵀ(diag p − p pᵀ)J v / (B·T). Not
                       from the B sampled gradients: their Fisher has rank ≤ B, so its λ_max ≥ trace / B anyway.
    fisher_power_iters Fisher-vector products used
    kfac_trace         Σ_layers tr A · tr G                             NNGeometry PMatKFAC (sampled labels)
    kfac_lambda_max    max_layers λ_max(A)·λ_max(G) (K-FAC is block-diagonal over layers)

Cost: for the sampled rows one forward and B backward passes of the copy (B = the probe's sequences); for λ_max
one double-backward graph and 2 backward passes per Fisher-vector product (≤ fisher_iters per block); for K-FAC
one forward and backward with NNGeometry's hooks and eigvalsh of each layer's factors. Measured on the cpu profile
(8 x 64 tokens, 2 blocks of 64): 0.6-1 s on one thread, ~12 training steps, a fifth of curvature_rows
(bench/results/fisher.md). Memory: a few (B, T, vocab) tensors (logits, probabilities, the double-backward graph)
on top of one training step's activations for B sequences; tested on CPU only.
"""
from __future__ import annotations

import copy
import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from altgrad_lib.monitors.base import Monitor
from altgrad_lib.monitors.curvature import top_eig, hessian_mode, is_quantized
from altgrad_lib.quantize.linear import QuantizedLinear

METRICS = ("fisher_trace", "diag_max", "fisher_lambda_max", "fisher_power_iters", "kfac_trace", "kfac_lambda_max")


class _TokenLinear(nn.Module):
    """A (Quantized)Linear as NNGeometry can hook it: Q_x(x) flattened to (rows, in) -> plain nn.Linear with the
    weight Q_w(W) -> reshaped back. Its weight gradient is the STE weight gradient of the layer it replaces."""

    def __init__(self, lin: nn.Linear) -> None:
        super().__init__()
        self.x_quant = getattr(lin, "x_quant", None)
        w_quant = getattr(lin, "w_quant", None)
        with torch.no_grad():
            w = w_quant(lin.weight) if w_quant is not None else lin.weight
        self.lin = nn.Linear(lin.in_features, lin.out_features, bias=lin.bias is not None,
                             device=lin.weight.device, dtype=lin.weight.dtype)
        self.lin.weight = nn.Parameter(w.detach().clone())
        if lin.bias is not None:
            self.lin.bias = nn.Parameter(lin.bias.detach().clone())

    def forward(self, x: Tensor) -> Tensor:
        x2 = x.reshape(-1, x.shape[-1])
        if self.x_quant is not None:
            x2 = self.x_quant(x2)
        return self.lin(x2).view(*x.shape[:-1], -1)


def block_linears(model: nn.Module) -> dict[str, list[str]]:
    """Block fqn ('transformer.h.0') -> fqns of the Linear layers inside it, in module order."""
    out: dict[str, list[str]] = {}
    for name, m in model.named_modules():
        parts = name.split(".")
        if isinstance(m, nn.Linear) and parts[:2] == ["transformer", "h"] and len(parts) > 3:
            out.setdefault(".".join(parts[:3]), []).append(name)
    return out


def fisher_proxy(model: nn.Module) -> tuple[nn.Module, dict[str, list[str]]]:
    """A private copy of `model` in which every block Linear is a _TokenLinear, and block -> inner Linear fqns
    (the layer ids NNGeometry hooks). Call inside curvature.hessian_mode (eval, dY quantization off)."""
    blocks = block_linears(model)
    for fqn in (f for fs in blocks.values() for f in fs):
        m = model.get_submodule(fqn)
        if isinstance(m, QuantizedLinear) and m.gemm is not None:
            raise ValueError(f"fisher: {fqn} runs a GEMM-faithful block-scaled recipe ({m.layer_spec.short_str()}), "
                             f"whose gradient is not Q_x(X)-times-dY; valid: recipes without gemm options")
    proxy = copy.deepcopy(model)
    for p in proxy.parameters():
        p.requires_grad_(False)
    for fqn in (f for fs in blocks.values() for f in fs):
        parent, _, child = fqn.rpartition(".")
        setattr(proxy.get_submodule(parent), child, _TokenLinear(proxy.get_submodule(fqn)))
    return proxy, {b: [f"{f}.lin" for f in fs] for b, fs in blocks.items()}


def _loglik(logits: Tensor, yhat: Tensor) -> Tensor:
    """Σ_t log p(ŷ_t) / √T per sequence: F = mean over sequences of g gᵀ is then per token (1/(B·T))."""
    lp = F.log_softmax(logits if logits.dtype == torch.float64 else logits.float(), dim=-1)
    return lp.gather(-1, yhat.unsqueeze(-1)).squeeze(-1).sum(1) / math.sqrt(yhat.shape[1])


def sample_labels(logits: Tensor, seed: int) -> Tensor:
    """One label per token drawn from softmax(logits) with a private generator on the logits' device (the global
    RNG streams are not touched)."""
    p = torch.softmax(logits.detach(), dim=-1)
    g = torch.Generator(device=p.device).manual_seed(seed)
    return torch.multinomial(p.reshape(-1, p.shape[-1]), 1, generator=g).view(p.shape[:-1])


def per_sequence_grads(proxy: nn.Module, idx: Tensor, yhat: Tensor, params: list[Tensor]) -> Tensor:
    """(B, P) float64: row n is ∇ Σ_t log p(ŷ_n,t) / √T w.r.t. `params` (flattened, in order)."""
    for p in params:
        p.requires_grad_(True)
    ll = _loglik(proxy(idx)[0], yhat)
    rows = []
    for n in range(idx.shape[0]):
        gs = torch.autograd.grad(ll[n], params, retain_graph=n < idx.shape[0] - 1)
        rows.append(torch.cat([g.reshape(-1) for g in gs]).double())
    return torch.stack(rows)


def nngeometry_backend(proxy: nn.Module, layer_ids: list[str]) -> Any:
    """NNGeometry's TorchHooksJacobianBackend on the proxy's inner Linears `layer_ids` (a LayerCollection built by
    hand), whose function is Σ_t log p(ŷ_t) / √T; examples: nngeometry_examples(...)."""
    from nngeometry.backend import TorchHooksJacobianBackend
    from nngeometry.layercollection import LayerCollection, LinearLayer

    lc = LayerCollection()
    for lid in layer_ids:
        m = proxy.get_submodule(lid)
        lc.add_layer(lid, LinearLayer(m.in_features, m.out_features, bias=m.bias is not None))
    wte = proxy.transformer.wte

    def function(dummy: Tensor, x: Tensor, y: Tensor) -> Tensor:
        # NNGeometry differentiates w.r.t. the loader's first tensor, which must be float and upstream of every
        # hooked layer: a zero-weighted dummy added to the token embeddings (token ids are integers)
        h = wte.register_forward_hook(lambda m, i, o: o + 0 * dummy.view(-1, 1, 1).to(o.dtype))
        try:
            return _loglik(proxy(x)[0], y)
        finally:
            h.remove()

    return TorchHooksJacobianBackend(model=proxy, function=function, layer_collection=lc)


def nngeometry_examples(proxy: nn.Module, idx: Tensor, yhat: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """NNGeometry's `examples` for nngeometry_backend: one batch of all B sequences."""
    return torch.zeros(idx.shape[0], dtype=proxy.transformer.wte.weight.dtype, device=idx.device), idx, yhat


def kfac_blocks(proxy: nn.Module, idx: Tensor, yhat: Tensor, layer_ids: list[str]) -> dict[str, tuple[Tensor, Tensor]]:
    """NNGeometry's K-FAC factors (A, G) per layer id of the proxy, A rescaled to the mean over token rows."""
    from nngeometry.object import PMatKFAC

    gen = nngeometry_backend(proxy, layer_ids)
    kfac = PMatKFAC(generator=gen, examples=nngeometry_examples(proxy, idx, yhat))
    T = idx.shape[1]
    return {lid: (a / T, g) for lid, (a, g) in kfac.data.items()}


class FisherVP:
    """v -> F v for the label-expectation Fisher of the proxy's logits on `idx` w.r.t. `params` (a list of leaf
    tensors), F = 1/(B·T) Σ_tokens Jᵀ(diag p − p pᵀ)J. J v by the double-vjp trick: Jᵀu is built once with a
    graph (linear in the dummy u), and differentiating ⟨Jᵀu, v⟩ w.r.t. u gives J v."""

    def __init__(self, proxy: nn.Module, idx: Tensor, params: list[Tensor]) -> None:
        for p in params:
            p.requires_grad_(True)
        self.params = params
        self.z = proxy(idx)[0]
        self.z = self.z if self.z.dtype == torch.float64 else self.z.float()
        self.p = torch.softmax(self.z.detach(), dim=-1)
        self.u = torch.zeros_like(self.z, requires_grad=True)
        self.jtu = torch.autograd.grad(self.z, params, grad_outputs=self.u, create_graph=True)
        self.n = idx.numel()

    def __call__(self, v: list[Tensor], idx: list[int] | None = None) -> list[Tensor]:
        idx = list(range(len(self.params))) if idx is None else idx
        jv = torch.autograd.grad([self.jtu[i] for i in idx], self.u, grad_outputs=v, retain_graph=True)[0]
        hjv = self.p * jv - self.p * (self.p * jv).sum(-1, keepdim=True)      # softmax output Hessian times Jv
        out = torch.autograd.grad(self.z, [self.params[i] for i in idx], grad_outputs=hjv, retain_graph=True)
        return [o.detach() / self.n for o in out]


def fisher_rows(model: nn.Module, idx: Tensor, *, step: int, seed: int = 0, iters: int = 20,
                tol: float = 1e-3) -> list[dict[str, Any]]:
    """Tidy rows {step, layer, role, metric, value} per block (METRICS, module docstring) for the probe token
    ids `idx` (B, T). Labels drawn with seed `seed`, power iteration ≤ `iters` Fisher-vector products per block
    (stops at relative change ≤ tol); the live model is left as it was (hessian_mode)."""
    role = "ste_surrogate" if is_quantized(model) else "exact"
    # all of it inside hessian_mode: besides the model's own state it restores the global RNGs, which
    # NNGeometry's DataLoader draws from; MATH attention, as the Fisher-vector products double-backward
    with hessian_mode(model):
        proxy, blocks = fisher_proxy(model)
        with torch.no_grad():
            logits = proxy(idx)[0]
        if not bool(torch.isfinite(logits).all()):
            vals = dict.fromkeys(METRICS, math.nan)
            return [{"step": step, "layer": b, "role": role, "metric": k, "value": v} for b in blocks
                    for k, v in vals.items()]
        yhat = sample_labels(logits, seed)
        params: list[Tensor] = []
        sel: dict[str, list[int]] = {}        # block -> indices into params
        for b, ids in blocks.items():
            for lid in ids:
                for p in proxy.get_submodule(lid).parameters():
                    sel.setdefault(b, []).append(len(params))
                    params.append(p)
        G = per_sequence_grads(proxy, idx, yhat, params)
        cols = torch.cat([torch.full((p.numel(),), k) for k, p in enumerate(params)])   # column -> params index
        kfac = kfac_blocks(proxy, idx, yhat, [lid for ids in blocks.values() for lid in ids])
        fvp = FisherVP(proxy, idx, params)
        rows = []
        for b, ids in blocks.items():
            Gb = G[:, torch.isin(cols, torch.tensor(sel[b]))]
            diag = (Gb * Gb).sum(0) / idx.shape[0]
            lam, n = top_eig(lambda v, s=sel[b]: fvp(v, s), [params[k] for k in sel[b]], iters, tol, "largest",
                              seed)
            kt = sum(float(torch.trace(a) * torch.trace(g)) for a, g in (kfac[lid] for lid in ids))
            kl = max(float(torch.linalg.eigvalsh(a.double())[-1] * torch.linalg.eigvalsh(g.double())[-1])
                     for a, g in (kfac[lid] for lid in ids))
            vals = {"fisher_trace": float(diag.sum()), "diag_max": float(diag.max()), "fisher_lambda_max": lam,
                    "fisher_power_iters": float(n), "kfac_trace": kt, "kfac_lambda_max": kl}
            rows += [{"step": step, "layer": b, "role": role, "metric": k, "value": v} for k, v in vals.items()]
    return rows


class FisherMonitor(Monitor):
    """The "fisher" diagnostics group (DiagnosticsConfig.fisher_interval > 0): every fisher_interval steps (and
    at step 1) `fisher_rows` of the live model after that step's update, on a **fixed probe**: the first
    fisher_samples sequences of the first measured step's batch (kept in the checkpointed state, so the numbers
    are comparable over training); labels are redrawn from the current model with seed = step. Training stays
    bit-identical (private copy, hessian_mode). Backends it cannot measure (hardware FP8, GEMM-faithful block
    recipes) give NaN rows and one "unavailable:fisher" event."""

    def __init__(self, att: Any) -> None:
        super().__init__(att)
        self.idx: Tensor | None = None
        self.noted = False

    def on_backward(self, ctx: Any) -> None:
        if self.idx is None:
            self.idx = ctx.x[: self.cfg.fisher_samples].detach().clone()

    def on_step(self, ctx: Any) -> None:
        try:
            rows = fisher_rows(self.att.model, self.idx.to(ctx.x.device), step=ctx.step, seed=ctx.step,
                               iters=self.cfg.fisher_iters)
        except ValueError as e:
            if not self.noted:
                ctx.event("unavailable:fisher", str(e)[:80], math.nan, math.nan)
                self.noted = True
            for m in METRICS:
                ctx.emit("model", "ste_surrogate", m, math.nan)
            return
        for r in rows:
            ctx.emit(r["layer"], r["role"], r["metric"], r["value"])

    def state_dict(self) -> dict[str, Any]:
        return {"idx": None if self.idx is None else self.idx.cpu(), "noted": self.noted}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.idx, self.noted = state.get("idx"), bool(state.get("noted", False))
