"""Matrix functions of the orthogonalizing optimizers and their monitors: Newton–Schulz, msign, the Stiefel scale,
constraint residuals. Pure maths on 2-D tensors; the optimizers (optim/muon.py) and the manifold monitor
(monitors/manifold.py) share them from here, the lowest layer both may import.

newton_schulz(x, steps, coeffs, mm)  the odd polynomial iteration X <- a X + (b A + c A²) X, A = X Xᵀ, on X / ‖X‖_F
    (so every singular value starts in (0, 1]); Xᵀ is iterated when X is tall, as torch.optim.Muon does, so A is the
    smaller Gram matrix. It maps X = U Σ Vᵀ to U p^k(Σ / ‖X‖_F) Vᵀ, p(σ) = a σ + b σ³ + c σ⁵, in exact arithmetic.
    QUINTIC: Keller Jordan's Muon coefficients (torch.optim.Muon's defaults): steep at 0, not convergent to 1 (the
    singular values end in about (0.7, 1.2)). CUBIC = (1.5, -0.5, 0): the classic iteration, convergent to 1 for
    σ in (0, √3), used where the exact matrix sign is wanted (msign "ns"). `mm(a, b)` computes a @ b: None = fp32
    matmuls in torch.optim.Muon's order of operations (addmm); a quantized GEMM (optim/muon.NSGemm) otherwise.
msign(x, method)  U sign(Σ) Vᵀ: "polar" by the SVD (exact to fp32 rounding), "ns" by CUBIC Newton–Schulz.
cubic_ns_error(sigma0, steps)  the exact-arithmetic bound max_i |1 - σ_i| after `steps` CUBIC steps when the
    normalized matrix's smallest singular value is sigma0: e <- e² (3 - e) / 2 from e = 1 - sigma0 (since
    1 - p(σ) = (1 - σ)² (2 + σ) / 2 for p(σ) = 1.5 σ - 0.5 σ³); ‖NS(X) - U Vᵀ‖_2 equals it for full-rank X.
stiefel_scale(shape)  sqrt(out / in) of a Linear weight (out, in): the scale s of the scaled Stiefel manifold
    {W : every singular value of W is s}, so that W maps a unit-RMS input to a unit-RMS output (the spectral
    condition of Bernstein's modular norm; for out = in it is the plain Stiefel manifold).
gram_residual(w, scale)  ‖Ŵᵀ Ŵ - I‖_F / √n, Ŵ = W / scale oriented tall (n = its smaller side): 0 on the manifold.
sphere_residual(w)  max over rows of |‖w_i‖ - 1|: 0 when every row has unit norm (the hypersphere constraint).
"""
from __future__ import annotations

import math
from typing import Callable

import torch

from altgrad_lib.choices import MSIGN_METHODS

QUINTIC = (3.4445, -4.7750, 2.0315)      # torch.optim.Muon's DEFAULT_A / B / C (Keller Jordan's Muon)
CUBIC = (1.5, -0.5, 0.0)
NS_EPS = 1e-7                            # torch.optim.Muon's EPS: the floor of ‖X‖_F before dividing by it
Matmul = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def newton_schulz(x: torch.Tensor, steps: int, coeffs: tuple[float, float, float] = QUINTIC, eps: float = NS_EPS,
                  mm: Matmul | None = None) -> torch.Tensor:
    """k Newton–Schulz steps on x / ‖x‖_F (module docstring); fp32 in, fp32 out."""
    if x.dim() != 2:
        raise ValueError(f"newton_schulz: a 2-D matrix is needed, got shape {tuple(x.shape)}")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"ns_steps={steps!r} is invalid; valid: an int >= 1")
    a, b, c = coeffs
    tall = x.size(0) > x.size(1)
    y = x.float().T if tall else x.float()
    y = y / y.norm().clamp(min=eps)
    for _ in range(steps):
        if mm is None:                    # torch.optim.Muon's operations, so fp32 runs round alike
            gram = y @ y.T
            poly = torch.addmm(gram, gram, gram, beta=b, alpha=c) if c else gram * b
            y = torch.addmm(y, poly, y, beta=a)
        else:
            gram = mm(y, y.T)
            poly = gram * b + mm(gram, gram) * c if c else gram * b
            y = y * a + mm(poly, y)
    return y.T if tall else y


def msign(x: torch.Tensor, method: str = "polar", steps: int = 20, mm: Matmul | None = None) -> torch.Tensor:
    """U sign(Σ) Vᵀ of x (module docstring): "polar" (SVD) or "ns" (`steps` CUBIC Newton–Schulz steps, through
    `mm`)."""
    if method == "ns":
        return newton_schulz(x, steps, CUBIC, mm=mm)
    if method != "polar":
        raise ValueError(f"msign method={method!r} is invalid; valid choices: {MSIGN_METHODS}")
    u, s, vh = torch.linalg.svd(x.float(), full_matrices=False)
    return (u * s.sign()) @ vh


def cubic_ns_error(sigma0: float, steps: int) -> float:
    """The exact-arithmetic bound on max_i |1 - σ_i(NS(X))| after `steps` CUBIC steps (module docstring)."""
    e = 1.0 - sigma0
    for _ in range(steps):
        e = e * e * (3.0 - e) / 2.0
    return e


def stiefel_scale(shape: torch.Size | tuple[int, ...]) -> float:
    """sqrt(out / in) of a weight (out, in) (module docstring)."""
    return math.sqrt(shape[0] / shape[1])


def _tall(w: torch.Tensor) -> torch.Tensor:
    return w.T if w.size(0) < w.size(1) else w


def gram_residual(w: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """‖Ŵᵀ Ŵ - I‖_F / √n, Ŵ = W / scale made tall (0-d fp32 tensor)."""
    t = _tall(w.detach().float()) / scale
    n = t.size(1)
    return (t.T @ t - torch.eye(n, device=t.device)).norm() / math.sqrt(n)


def sphere_residual(w: torch.Tensor) -> torch.Tensor:
    """max_i |‖w_i‖ - 1| over the rows of w (0-d fp32 tensor)."""
    return (w.detach().float().norm(dim=1) - 1).abs().max()


def project_rows(w: torch.Tensor) -> torch.Tensor:
    """Each row of w divided by its norm (a zero row stays zero): the nearest point of the row hypersphere."""
    n = w.float().norm(dim=1, keepdim=True)
    return torch.where(n > 0, w.float() / n.clamp_min(torch.finfo(torch.float32).tiny), w.float())
