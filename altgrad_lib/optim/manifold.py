"""`FP8Manifold`: a format grid as a geoopt manifold, so geoopt's `ManifoldParameter` + `RiemannianSGD` /
`RiemannianAdam` train weights that live on the grid.

    projx(x)          = Q(x): round onto grid(fmt) / scale (RNE, or SR with the manifold's own generator)
    egrad2rgrad(x, u) = S(x) * u: the stiffness metric <u, v>_x = sum(u v / S(x)), whose Riemannian gradient is
                        the Euclidean one times the local grid spacing S = ULP away from zero (grid_metrics.weight_ulp)
    retr(x, u)        = Q(x + u): step, then round; expmap = retr; transports are the identity
    inner / component_inner: the metric above (so RiemannianAdam's second moment is S * g^2 per coordinate)

What the math says: RiemannianSGD on this manifold is `sgd.GridSGD` with storage "grid_rne" and ulp_mode "up"
(bitwise; tested).  RiemannianAdam here normalises the Riemannian gradient S g by sqrt(S g^2), so its step is
~sqrt(S) * sign-like: neither AdamW nor GridAdamW (GridAdamW's step is S * m̂ / sqrt(v̂) with v of the raw g).
geoopt 0.5.1 works with torch 2.13 for these calls (tests/test_optim_manifold.py).
"""
from __future__ import annotations

import math

import torch
from geoopt.manifolds import Manifold

from altgrad_lib.numerics.formats import FloatFormat, get_format
from altgrad_lib.numerics.grid_metrics import weight_ulp
from altgrad_lib.numerics.rounding import random_bits


class FP8Manifold(Manifold):
    """Points: tensors on grid(fmt) / scale (scale a power of two)."""

    name = "FP8Grid"
    ndim = 0
    reversible = False

    def __init__(self, fmt: FloatFormat | str = "E4M3", scale: float = 1.0, stochastic: bool = False,
                 seed: int = 0, sr_bits: int | None = None) -> None:
        super().__init__()
        self.fmt = get_format(fmt)
        m, _ = math.frexp(scale)
        if scale <= 0 or m != 0.5:
            raise ValueError(f"scale={scale!r} must be a positive power of two (it keeps the grid exact)")
        self.scale, self.stochastic, self.sr_bits, self.seed = float(scale), bool(stochastic), sr_bits, int(seed)
        self.generator: torch.Generator | None = None     # created on the points' device at the first SR draw

    # ---- the grid
    def projx(self, x: torch.Tensor) -> torch.Tensor:
        xs = x * self.scale
        if self.stochastic:
            if self.generator is None:
                self.generator = torch.Generator(device=x.device).manual_seed(self.seed)
            rb = random_bits(xs, self.fmt.kernel, self.sr_bits, self.generator)
            return self.fmt.quantize_with_bits(xs, rb, self.sr_bits) / self.scale
        return self.fmt.quantize(xs) / self.scale

    def stiffness(self, x: torch.Tensor) -> torch.Tensor:
        return weight_ulp(x, self.fmt, self.scale)

    def _check_point_on_manifold(self, x: torch.Tensor, *, atol=1e-5, rtol=1e-5):
        ok = bool(torch.equal(self.fmt.quantize(x * self.scale), x * self.scale))
        return ok, None if ok else f"not on the {self.fmt.name} grid (scale {self.scale:g})"

    def _check_vector_on_tangent(self, x: torch.Tensor, u: torch.Tensor, *, atol=1e-5, rtol=1e-5):
        return True, None

    # ---- metric and steps
    def proju(self, x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        return u

    def egrad2rgrad(self, x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        return u * self.stiffness(x)

    def inner(self, x: torch.Tensor, u: torch.Tensor, v: torch.Tensor | None = None, *, keepdim=False):
        v = u if v is None else v
        return self.component_inner(x, u, v).sum() if not keepdim else self.component_inner(x, u, v)

    def component_inner(self, x: torch.Tensor, u: torch.Tensor, v: torch.Tensor | None = None) -> torch.Tensor:
        v = u if v is None else v
        return u * v / self.stiffness(x)

    def norm(self, x: torch.Tensor, u: torch.Tensor, *, keepdim=False):
        return self.inner(x, u, keepdim=keepdim).clamp_min(0).sqrt()

    def retr(self, x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        return self.projx(x + u)

    expmap = retr

    def transp(self, x: torch.Tensor, y: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return v

    def retr_transp(self, x, u, v):
        return self.retr(x, u), v

    expmap_transp = retr_transp

    def transp_follow_retr(self, x, u, v):
        return v

    transp_follow_expmap = transp_follow_retr

    def logmap(self, x, y):
        return y - x

    def dist(self, x, y, *, keepdim=False):
        return self.norm(x, y - x, keepdim=keepdim)

    def origin(self, *size, dtype=None, device=None, seed=42) -> torch.Tensor:
        return torch.zeros(*size, dtype=dtype, device=device)

    def random(self, *size, dtype=None, device=None, **kwargs) -> torch.Tensor:
        return self.projx(torch.randn(*size, dtype=dtype, device=device) / self.scale)

    def extra_repr(self) -> str:
        return f"{self.fmt.short_str()}, scale={self.scale:g}, {'sr' if self.stochastic else 'rne'}"
