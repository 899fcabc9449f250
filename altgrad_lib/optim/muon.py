"""`Muon` (orthogonalized momentum on 2-D hidden weights, AdamW for the rest) and `ManifoldMuon` (weights on the
scaled Stiefel manifold, update by dual ascent, retraction by msign).

Muon (Keller Jordan 2024; torch.optim.Muon's algorithm, and equal to it on the same parameters: the NS matmuls in
FP32, tests/test_optim_muon.py), for a group with muon=True:
    B <- μ B + (1 - μ) G                       (torch's lerp form of the momentum)
    U = G + μ (B - G) if nesterov else B       (Nesterov: G.lerp(B, μ))
    O = NS_k(U)                                (numerics/matrix.newton_schulz, QUINTIC, k = ns_steps)
    W <- W (1 - lr wd) - lr · r(shape) · O     r = adjust_lr: original sqrt(max(1, out/in)) | match_rms_adamw
                                               0.2 sqrt(max(out, in)) (Moonshot) | none 1
Groups with muon=False are this package's AdamW (optim/adamw.py) with their own lr: the embeddings, lm_head (tied to
the embedding here), LayerNorm gains and biases, as modded-nanogpt splits them; factory.build_optimizer builds the
split (factory.muon_split), and the training loop prints it under the layer table.

Low precision, reusing what exists:
  ns_fmt    the NS matmuls' operands quantized: a format name ("E4M3", "bf16", "E2M1": per-tensor current scaling)
            or any recipe get_policy knows ("nvfp4", "mxfp8:rceil", "fmt:E3M4"), whose mlp_up operand specs are used;
            each product a @ b is the fprop GEMM of one QuantizedLinear (quantize/linear.py, the GEMM-faithful path
            for block recipes: blocks along the reduction dim), `NSGemm`. ns_accum: that GEMM's accumulator
            (numerics/accumulate.AccumSpec: a format name such as "fp22" or a dict), as a recipe's gemm accum.
  state_m   the momentum B stored as codes + scales by lowp_state.StateFormat (as AdamW's m: any signed <= 8-bit
            format, E2M1 for 4 bits; block, rounding nearest | stochastic, scale pow2 | amax); an unsigned format is
            refused (B is signed).
  storage   the weights' grid storage modes (optim/storage.py) work on Muon's groups as on AdamW's; error_feedback
            does not (its residual is injected into m as dW/dm, which NS does not have).

ManifoldMuon (Jeremy Bernstein, "Modular Manifolds", Thinking Machines Lab, 2025,
https://thinkingmachines.ai/blog/modular-manifolds/, and the Modula docs' "Stiefel manifold" page, whose equations
this follows): a weight W (out, in) lives on the scaled Stiefel manifold {W = s Q : QᵀQ = I} (Q made tall), with
s = numerics/matrix.stiefel_scale = sqrt(out / in) (every singular value of W is s; s = 1 for square weights). With
G = s · U (the Nesterov momentum above, as a gradient with respect to Q), Q and G transposed to tall:
    Λ = -(QᵀG + GᵀQ) / 4
    repeat dual_steps times:  A = msign(G + 2 Q Λ);  H = QᵀA + AᵀQ;
                              stop if ‖H‖_F / √(n²) < dual_tol;  Λ <- Λ - α (1 - j / dual_steps) H
    Q <- msign(Q - lr · A)                       (retraction; W = s Q)
the dual ascent on max_Λ -‖G + Q(Λ + Λᵀ)‖_* whose subgradient is -H (the tangent-space violation of A). msign is
"polar" (SVD) or "ns" (CUBIC Newton–Schulz, msign_steps steps, through ns_fmt's GEMM). No weight decay (the scale is
fixed) and no shape lr factor (the step's spectral norm is lr · s by construction). The weights are projected onto
the manifold (msign) when the optimizer is built, before the first forward.
`dual_ascent(q, g, ...)` is that inner loop alone (tests/test_optim_muon.py checks it against a slow reference
written from the published equations).

Measurement (monitors/manifold.py): set `measure = True` before a step and the step records, per Muon matrix,
ns_residual = ‖O - msign(U)‖_F / √r (r the smaller side: how far NS, in its format, is from the exact matrix sign)
and, per manifold matrix, dual_residual (‖H‖_F / n at the last dual step) and dual_steps; `measured()` returns
{param: {name: 0-d tensor}} and clears them.
"""
from __future__ import annotations

import math
from typing import Any

import torch

from altgrad_lib.choices import EF_MODES, MSIGN_METHODS, MUON_ADJUST_LR
from altgrad_lib.errors import check_choice
from altgrad_lib.numerics.formats import get_format
from altgrad_lib.numerics.matrix import NS_EPS, QUINTIC, msign, newton_schulz, stiefel_scale
from altgrad_lib.numerics.quant_spec import QuantSpec
from altgrad_lib.optim.adamw import AdamW
from altgrad_lib.quantize.gemm_quant import GemmOptions
from altgrad_lib.quantize.linear import QuantizedLinear
from altgrad_lib.quantize.recipes import LayerSpec, get_policy

NS_SEED = 104729        # the NS GEMM's quantizer seed offset (stochastic-rounding recipes), apart from the model's


def ns_layer_spec(ns_fmt: str, ns_accum: Any = None) -> LayerSpec:
    """The LayerSpec of the NS GEMM: a format name -> that format on both operands (per-tensor current scaling);
    otherwise a recipe name -> its mlp_up input / weight specs (with its GEMM options). ns_accum: the fprop
    accumulator. One-line errors."""
    try:
        name = get_format(ns_fmt).name
    except (ValueError, KeyError):
        name = None
    if name is not None:
        spec = LayerSpec(input=QuantSpec(fmt=name), weight=QuantSpec(fmt=name))
    else:
        try:
            spec = get_policy(ns_fmt).spec_for("mlp_up")
        except (ValueError, TypeError) as e:
            raise ValueError(f"optim.ns_fmt={ns_fmt!r} is neither a format nor a recipe ({e}); valid: a format "
                             f"name such as 'E4M3' / 'bf16', or a recipe such as 'nvfp4', 'fmt:E3M4'") from None
        if spec is None or (spec.input is None and spec.weight is None):
            raise ValueError(f"optim.ns_fmt={ns_fmt!r} quantizes no operand of the GEMM; valid: a format name or a "
                             f"recipe that quantizes its hidden layers (None = FP32 NS)")
        spec = LayerSpec(input=spec.input, weight=spec.weight, gemm=spec.gemm)
    if ns_accum is not None:
        opts = spec.gemm_options or GemmOptions()
        spec = LayerSpec(input=spec.input, weight=spec.weight,
                         gemm=GemmOptions(hp_gemms=opts.hp_gemms, rht=opts.rht, rht_dim=opts.rht_dim,
                                          rht_rng=opts.rht_rng, columnwise_source=opts.columnwise_source,
                                          overrides=opts.overrides, accum={"fprop": ns_accum}))
    return spec


class NSGemm(torch.nn.Module):
    """a @ b as the fprop GEMM (x · wᵀ with x = a, w = bᵀ) of one QuantizedLinear with `spec`: the same quantizers,
    GEMM-faithful blocking and accumulator as a model layer of that recipe (not a copy of them)."""

    def __init__(self, spec: LayerSpec, seed: int = 0, device: torch.device | None = None) -> None:
        super().__init__()
        self.spec = spec
        self.linear = QuantizedLinear.from_linear(torch.nn.Linear(1, 1, bias=False, device=device), spec, "mlp_up",
                                                  fqn="optim.ns_gemm", seed=seed + NS_SEED)

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return self.linear._quantized_gemm(a.contiguous(), b.T.contiguous())


class Muon(AdamW):
    """Muon on groups with muon=True, AdamW on the others (module docstring)."""

    tag = "muon"

    def __init__(self, params, lr: float = 0.02, *, momentum: float = 0.95, nesterov: bool = True,
                 ns_steps: int = 5, ns_coefficients: tuple[float, float, float] = QUINTIC, ns_eps: float = NS_EPS,
                 adjust_lr: str = "original", ns_fmt: str | None = None, ns_accum: Any = None,
                 **adam: Any) -> None:
        self.measure = False
        self._measured: dict[int, dict[str, torch.Tensor]] = {}
        self._ns_gemms: dict[tuple, NSGemm] = {}
        super().__init__(params, lr=lr, momentum=momentum, nesterov=nesterov, ns_steps=ns_steps,
                         ns_coefficients=tuple(ns_coefficients), ns_eps=ns_eps, adjust_lr=adjust_lr, ns_fmt=ns_fmt,
                         ns_accum=ns_accum, **adam)

    def _own_defaults(self) -> dict[str, Any]:
        return {"muon": False, "momentum": 0.95, "nesterov": True, "ns_steps": 5, "ns_coefficients": QUINTIC,
                "ns_eps": NS_EPS, "adjust_lr": "original", "ns_fmt": None, "ns_accum": None}

    def _check_group(self, group: dict[str, Any]) -> None:
        super()._check_group(group)
        if not group["muon"]:
            return
        bad = [tuple(p.shape) for p in group["params"] if p.dim() != 2]
        if bad:
            raise ValueError(f"Muon group with a parameter of shape {bad[0]}: Muon orthogonalizes 2-D matrices only; "
                             f"valid: 1-D / embedding parameters in a group with muon=False (AdamW)")
        v = group["ns_steps"]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"ns_steps={v!r} is invalid; valid: an int >= 1 (Newton–Schulz iterations)")
        if not 0 <= group["momentum"] < 1:
            raise ValueError(f"momentum={group['momentum']!r} is invalid; valid: a number in [0, 1)")
        check_choice("adjust_lr", group["adjust_lr"], MUON_ADJUST_LR)
        if group["storage"] in EF_MODES:
            raise ValueError(f"storage={group['storage']!r} on a Muon group: error feedback injects the rounding "
                             f"residual into m as dW/dm, which Newton–Schulz does not have; valid: fp32, grid_rne, "
                             f"grid_sr, kahan")
        if group["ns_fmt"] is not None:      # build it now: a bad format or recipe fails before any step
            self._ns_gemm(group, group["params"][0].device)

    def _init_extra(self, p: torch.Tensor, st: dict[str, Any], group: dict[str, Any]) -> None:
        if not group["muon"]:
            return super()._init_extra(p, st, group)
        sf = group["state_m"]          # the momentum is AdamW's m (lowp_state.StateFormat when state_m is set)
        if sf is not None and p.numel() >= sf["min_numel"]:
            super()._init_extra(p, st, {**group, "state_v": None})
            st.pop("v")
        else:
            st["m"] = torch.zeros_like(p, dtype=torch.float32)

    def _flatten(self, group: dict[str, Any]) -> dict[str, Any] | None:
        return None if group["muon"] else super()._flatten(group)   # NS is per matrix

    # ---- NS
    def _ns_gemm(self, group: dict[str, Any], device: torch.device) -> NSGemm | None:
        if group["ns_fmt"] is None:
            return None
        key = (group["ns_fmt"], repr(group["ns_accum"]))
        if key not in self._ns_gemms:
            self._ns_gemms[key] = NSGemm(ns_layer_spec(group["ns_fmt"], group["ns_accum"]), self.seed, device)
        return self._ns_gemms[key]

    def _orthogonalize(self, u: torch.Tensor, st: dict[str, Any], group: dict[str, Any]) -> torch.Tensor:
        o = newton_schulz(u, group["ns_steps"], group["ns_coefficients"], group["ns_eps"],
                          self._ns_gemm(group, u.device))
        if self.measure:
            r = min(u.shape)
            self._record(st, ns_residual=(o - msign(u)).norm() / math.sqrt(r))
        return o

    def _momentum(self, w: torch.Tensor, g: torch.Tensor, st: dict[str, Any], group: dict[str, Any]) -> torch.Tensor:
        mu = group["momentum"]
        m = self._load(st, "m", group, w)
        m.lerp_(g, 1 - mu)
        self._store(st, "m", group, m)
        return g.lerp(m, mu) if group["nesterov"] else m.clone()

    def _update(self, w, g, st, group, fmt, s, lr_t):
        if not group["muon"]:
            return super()._update(w, g, st, group, fmt, s, lr_t)
        o = self._orthogonalize(self._momentum(w, g, st, group), st, group)
        return w * (1 - lr_t * group["weight_decay"]) - (lr_t * adjust_lr(group["adjust_lr"], w.shape)) * o

    # ---- measurement (monitors/manifold.py)
    def _record(self, st: dict[str, Any], **values: torch.Tensor) -> None:
        self._measured.setdefault(id(st), {}).update({k: v.detach().float() for k, v in values.items()})

    def measured(self) -> dict[torch.Tensor, dict[str, torch.Tensor]]:
        """{param: {metric: 0-d tensor}} of the steps taken with `measure` on; cleared."""
        by_state = {id(self.state[p]): p for g in self.param_groups for p in g["params"] if p in self.state}
        out = {by_state[k]: v for k, v in self._measured.items() if k in by_state}
        self._measured.clear()
        return out

    # ---- checkpoints: the NS GEMM's quantizer state (SR generators, delayed-scaling history)
    def state_dict(self) -> dict[str, Any]:
        sd = super().state_dict()
        sd["altgrad"]["ns_gemms"] = {repr(k): m.state_dict() for k, m in self._ns_gemms.items()}
        return sd

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        saved = (state_dict.get("altgrad") or {}).get("ns_gemms", {})
        super().load_state_dict(state_dict)
        for k, m in self._ns_gemms.items():
            if repr(k) in saved:
                m.load_state_dict(saved[repr(k)])

    def _group_tag(self, group: dict[str, Any]) -> str:
        return f"/ns{group['ns_steps']}" + (f"@{group['ns_fmt']}" if group["ns_fmt"] else "")

    def short_str(self) -> str:
        muon = [g for g in self.param_groups if g["muon"]]
        fmt = sorted({str(g["ns_fmt"] or "fp32") for g in muon})
        return f"{self.tag}[{len([p for g in muon for p in g['params']])} matrices, ns {'/'.join(fmt)}]"


def adjust_lr(kind: str, shape: torch.Size) -> float:
    """Muon's shape-dependent lr factor (torch.optim.Muon's _adjust_lr; "none" = 1)."""
    out, inn = shape[0], shape[1]
    if kind == "original":
        return math.sqrt(max(1.0, out / inn))
    if kind == "match_rms_adamw":
        return 0.2 * math.sqrt(max(out, inn))
    return 1.0


@torch.no_grad()
def dual_ascent(q: torch.Tensor, g: torch.Tensor, steps: int, alpha: float = 0.01, tol: float = 1e-6,
                sign=msign) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Manifold Muon's inner loop (module docstring) on a tall q with qᵀq = I: (A, ‖H‖_F / n at the last step,
    steps taken). `sign(x)` is the msign used."""
    n = q.size(1)
    lam = -0.25 * (q.T @ g + g.T @ q)
    a = h_norm = None
    for j in range(steps):
        a = sign(g + 2 * q @ lam)
        h = q.T @ a + a.T @ q
        h_norm = h.norm() / n
        if h_norm < tol:
            return a, h_norm, j + 1
        lam = lam - alpha * (1 - j / steps) * h
    return a, h_norm, steps


class ManifoldMuon(Muon):
    """Muon's momentum, manifold Muon's update on groups with muon=True (module docstring)."""

    tag = "manifold_muon"

    def __init__(self, params, lr: float = 0.02, *, dual_steps: int = 100, dual_alpha: float = 0.01,
                 dual_tol: float = 1e-6, msign: str = "polar", msign_steps: int = 20, **muon: Any) -> None:
        super().__init__(params, lr=lr, dual_steps=dual_steps, dual_alpha=dual_alpha, dual_tol=dual_tol,
                         msign=msign, msign_steps=msign_steps, **muon)

    def _own_defaults(self) -> dict[str, Any]:
        return {**super()._own_defaults(), "dual_steps": 100, "dual_alpha": 0.01, "dual_tol": 1e-6, "msign": "polar",
                "msign_steps": 20}

    def _check_group(self, group: dict[str, Any]) -> None:
        super()._check_group(group)
        if not group["muon"]:
            return
        check_choice("msign", group["msign"], MSIGN_METHODS)
        for k in ("dual_steps", "msign_steps"):
            v = group[k]
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{k}={v!r} is invalid; valid: an int >= 1")
        if group["ns_fmt"] is not None and group["msign"] != "ns":
            raise ValueError(f"ns_fmt={group['ns_fmt']!r} with msign={group['msign']!r}: the polar msign is an SVD, "
                             f"no Newton–Schulz GEMM to quantize; valid: msign 'ns', or ns_fmt None")
        if group["storage"] != "fp32":
            raise ValueError(f"storage={group['storage']!r} on a manifold_muon group: a weight on the format's grid "
                             f"is off the Stiefel manifold (and its retraction is off the grid); valid: storage 'fp32' "
                             f"(the forward may still quantize the weight: any recipe)")

    def _init_extra(self, p: torch.Tensor, st: dict[str, Any], group: dict[str, Any]) -> None:
        super()._init_extra(p, st, group)
        if group["muon"]:     # start on the manifold: the nearest point s · msign(W / s)
            s = stiefel_scale(p.shape)
            p.copy_((s * msign(p.detach().float() / s)).to(p.dtype))

    def _sign(self, group: dict[str, Any], device: torch.device):
        mm = self._ns_gemm(group, device)
        return lambda x: msign(x, group["msign"], group["msign_steps"], mm)

    def _update(self, w, g, st, group, fmt, s, lr_t):
        if not group["muon"]:
            return AdamW._update(self, w, g, st, group, fmt, s, lr_t)
        scale = stiefel_scale(w.shape)
        u = self._momentum(w, g, st, group)
        wide = w.size(0) < w.size(1)
        q, gq = (w.T, u.T) if wide else (w, u)
        sign = self._sign(group, w.device)
        a, h_norm, steps = dual_ascent(q / scale, gq * scale, group["dual_steps"], group["dual_alpha"],
                                       group["dual_tol"], sign)
        new = scale * sign(q / scale - lr_t * a)
        if self.measure:
            self._record(st, dual_residual=h_norm, dual_steps=torch.tensor(float(steps)))
        return new.T if wide else new
