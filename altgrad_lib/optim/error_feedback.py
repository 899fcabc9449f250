"""Error-feedback storage (`storage="error_feedback"`, ECO: Nikdan et al., arXiv 2601.22101): no master copy; the
weight is rounded to nearest-even onto its grid after every step and what the rounding dropped is put into the
first moment m, so the following steps apply it again.  No memory beyond AdamW's own m and v.

The update (Adam family; g, m, v, w in fp32; t the step; D_t = sqrt(v_t / (1 - b2^t)) + eps per coordinate):

    m_t   = b1 m_{t-1} + (1 - b1) g_t                      (the optimizer's own moment update, unchanged)
    w'    = w_t (1 - lr_t wd) - c_t * m_t                  c_t = dw/dm of this step, per coordinate:
                                                             AdamW:     c_t = lr_t / ((1 - b1^t) D_t)
                                                             GridAdamW: c_t = lr_t S(w_t) / ((1 - b1^t) D_t)
                                                                        (S the ULP in the step's direction)
    w_{t+1} = Q_rne(w')                                    (on the grid, bitwise)
    r_t   = w' - w_{t+1}                                   (|r_t| <= half a grid spacing)
    m_t  <- m_t - (1 - b1) / (b1 c_t) * r_t                (where c_t > 0; where lr_t = 0 nothing is injected)

Why this factor: a δ added to m_t is still in m_{t+j} as b1^j δ, and step t+j moves the weight by -c b1^j δ.
Summed over j >= 1 with c frozen at c_t, the later steps move the weight by -c_t δ b1 / (1 - b1); setting that
to +r_t gives δ = -(1 - b1) r_t / (b1 c_t).  The dropped residual is given back once in total, spread over the
next ~1 / (1 - b1) steps.  For SGD with momentum (c = lr) this is ECO's injection m <- m + (1/lr)(1 - 1/b1) r,
which is the same expression; for Adam the per-coordinate step size c_t takes lr's place.
Approximations (the exact form would need r stored, i.e. the memory ECO removes): lr, D and the bias
correction are frozen at step t's values for the later steps; weight decay acts on w_{t+1} rather than w'
(a second-order difference, lr wd r); GridAdamW's clip_ulp is not inverted (a clipped step re-applies less).
It needs b1 > 0 (no momentum, no buffer to hold the residual) and fp32 m (state_m=None: re-encoding m to 8
bits after the injection would round the residual away again); OptimConfig checks both before any compute.

Rounding: `error_feedback` rounds to nearest-even (|r| <= half a spacing, deterministic); `error_feedback_sr`
rounds stochastically with grid_sr's counter bits (|r| < one spacing, E[r] = 0), as ECO's main results do.
Why SR matters (measured, bench/storage_toy.py): the injection drops the β1 (r_{t+1} - r_t) term of the exact
update (ECO's approximation r_{t+1} ≈ r_t), so under a steady sub-ULP drift a of the master weight the RNE residual
grows only as (1 - b1) a t: the first grid move comes ~1 / (1 - b1) = 10x later than the master's (the long-run
speed is the master's; tests/test_optim_error_feedback.py bounds the lag).  With SR the drift is carried by the
rounding in expectation and the feedback only removes the rounding noise.  Tests: tests/test_optim_error_feedback.py.
"""
from __future__ import annotations

import torch

from altgrad_lib.numerics.formats import FloatFormat
from altgrad_lib.numerics.grid import to_grid


def round_with_residual(w_new: torch.Tensor, fmt: FloatFormat, s: torch.Tensor, rbits: torch.Tensor | None = None,
                        sr_bits: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(Q(w_new) on grid(fmt) / s, the residual w_new - Q); Q = RNE, or SR with the random integers rbits."""
    q = to_grid(w_new, fmt, s, rbits, sr_bits)
    return q, w_new - q


def inject(m: torch.Tensor, r: torch.Tensor, c: torch.Tensor, beta1: float) -> None:
    """m <- m - (1 - b1) / (b1 c) * r in place, where c > 0 (c: the step's dw/dm per coordinate, see above)."""
    k = (1.0 - beta1) / beta1
    m.sub_(torch.where(c > 0, r * k / torch.where(c > 0, c, 1.0), 0.0))
