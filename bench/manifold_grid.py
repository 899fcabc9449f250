"""Grid storage × a manifold constraint (issue 50 item 3): what happens when the format grid and the manifold disagree.

A stored weight on grid storage must lie on grid(fmt) / s (numerics/grid.py: s = 2^k fixed from the first amax, k
leaving one binade of headroom, as optim/storage.py stores it); a constrained weight must lie on its manifold
(optim/constraints.project: stiefel W = s_st msign(W / s_st), s_st = sqrt(out / in); hypersphere: unit rows). The two
orders of one write, from a random matrix already on the manifold:

  (a) retract then round   W -> Q(R(W)): on the grid by construction; how far off the manifold (gram_residual for
                           stiefel, sphere_residual for hypersphere), next to the residual fp32 rounding leaves and in
                           units of the format's unit roundoff u = 2^-(mbits+1)
  (b) round then retract   W -> R(Q(W)): on the manifold to fp32; the fraction of entries off the grid and their mean
                           distance to the nearest grid value in ULPs (grid_metrics.misalignment: 0 on the grid, 1/2
                           at most)
  (c) k small random tangent steps ξ (‖ξ‖_F = eta ‖W‖_F, projected on the tangent space) each way: (a)'s worst
      residual over the steps, the share of each step the rounding loses (grid_metrics.update_lost of the fp32 step
      R(W + ξ) - W; 1 = the weight did not move), the same for the unconstrained write Q(W + ξ) of the same ξ (what
      grid_rne storage loses without any constraint: the control) and the fraction of entries that changed; (b)'s
      off-grid fraction after the last step.
Power-of-two scale on purpose: grid storage's; with the recipes' amax scale (not a power of two) Q(w·s)/s is not
exact in fp32, so "on the grid" would not be a bitwise property; the relative grid (what the residuals depend on)
is the same up to where the binades fall. The control of (a): "forward residual", the residual of the weight the
forward sees with fp32 storage, which is allowed (the recipes' weight quantizer: current per-tensor amax scaling,
Quantizer.quantize_stateless). Round to nearest (grid_rne); grid_sr is not measured here.

    OMP_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python bench/manifold_grid.py --md bench/results/manifold_grid.md
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd
import torch

from altgrad_lib.numerics.formats import get_format
from altgrad_lib.numerics.grid import grid_exp, grid_scale, to_grid
from altgrad_lib.numerics.grid_metrics import misalignment, update_lost
from altgrad_lib.numerics.matrix import gram_residual, sphere_residual, stiefel_scale
from altgrad_lib.numerics.quantizer import Quantizer
from altgrad_lib.optim.constraints import project

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report_md import header, md_table

FORMATS = ("bf16", "E4M3", "E3M4", "E2M5", "E1M6")
SHAPES = ((64, 64), (256, 64), (64, 256))
CONSTRAINTS = ("stiefel", "hypersphere")


def retract(w: torch.Tensor, kind: str) -> torch.Tensor:
    """The optimizer's retraction (optim/constraints.project) on a copy."""
    w = w.clone()
    project(w, kind)
    return w


def residual(w: torch.Tensor, kind: str) -> float:
    return float(gram_residual(w, stiefel_scale(w.shape)) if kind == "stiefel" else sphere_residual(w))


def tangent_step(w: torch.Tensor, kind: str, eta: float, gen: torch.Generator) -> torch.Tensor:
    """A random tangent vector at w with ‖ξ‖_F = eta ‖w‖_F (stiefel: G - Ŵ sym(ŴᵀG) on Ŵ = w / s made tall;
    hypersphere: each row's component along itself removed)."""
    g = torch.randn(w.shape, generator=gen)
    if kind == "stiefel":
        s = stiefel_scale(w.shape)
        t, gt = (w.T, g.T) if w.size(0) < w.size(1) else (w, g)
        u = t / s
        a = u.T @ gt
        xi = gt - u @ (a + a.T) / 2
        xi = xi.T if w.size(0) < w.size(1) else xi
    else:
        xi = g - (g * w).sum(1, keepdim=True) * w
    return xi * (eta * w.norm() / xi.norm())


def unit_roundoff(fmt: str) -> float:
    return 2.0 ** -(get_format(fmt).mbits + 1)


def measure(fmt: str, shape: tuple[int, int], kind: str, seed: int = 0, steps: int = 20,
            etas: tuple[float, ...] = (0.02,)) -> dict:
    """One (format, shape, constraint): the numbers of (a), (b) and, per eta, (c) (module docstring)."""
    f = get_format(fmt)
    gen = torch.Generator().manual_seed(seed)
    w = retract(torch.randn(shape, generator=gen), kind)
    s = grid_scale(grid_exp(w, f))
    u = unit_roundoff(fmt)
    a = residual(to_grid(w, f, s), kind)
    b = retract(to_grid(w, f, s), kind)
    mis = misalignment(b, f, s)
    row = {"fmt": fmt, "shape": f"{shape[0]}x{shape[1]}", "constraint": kind, "u": u,
           "fp32 residual": residual(w, kind), "(a) residual": a, "(a) residual / u": a / u,
           "forward residual": residual(Quantizer({"fmt": fmt, "scaling": "current"}).quantize_stateless(w), kind),
           "(b) off-grid": float((mis > 0).double().mean()), "(b) mean ULPs": float(mis.double().mean()),
           "(b) residual": residual(b, kind)}
    for eta in etas:
        row.update({f"{k} @{eta:g}": v for k, v in iterate(w, f, s, kind, eta, steps, gen).items()})
    return row


def iterate(w: torch.Tensor, f, s: torch.Tensor, kind: str, eta: float, steps: int, gen: torch.Generator
            ) -> dict:
    """(c): `steps` tangent steps from w each way; the same steps ξ_t for both orders (drawn at each one's point)."""
    wa, wb = to_grid(w, f, s), retract(to_grid(w, f, s), kind)
    worst, lost, bare, moved, trace = 0.0, [], [], [], []
    for _ in range(steps):
        xi = tangent_step(wa, kind, eta, gen)
        target = retract(wa + xi, kind)                  # the fp32 step grid storage wants
        new = to_grid(target, f, s)
        lost.append(float(update_lost(wa, target, f, s, s)))
        bare.append(float(update_lost(wa, wa + xi, f, s, s)))   # the same step, no retraction: grid_rne's own loss
        moved.append(float((new != wa).double().mean()))
        wa = new
        worst = max(worst, residual(wa, kind))
        wb = retract(to_grid(wb + tangent_step(wb, kind, eta, gen), f, s), kind)
        trace.append((residual(wa, kind), lost[-1], float((misalignment(wb, f, s) > 0).double().mean())))
    return {"(c) worst residual": worst, "(c) lost": sum(lost) / steps,
            "(c) lost, unconstrained": sum(bare) / steps, "(c) moved": sum(moved) / steps,
            "(c) (b) off-grid": trace[-1][2], "trace": trace}


def tables(rows: list[dict], etas: tuple[float, ...]) -> tuple[pd.DataFrame, pd.DataFrame]:
    df = pd.DataFrame([{k: v for k, v in r.items() if not k.startswith("trace")} for r in rows])
    ab = df[["fmt", "shape", "constraint", "u", "fp32 residual", "(a) residual", "(a) residual / u",
             "forward residual", "(b) off-grid",
             "(b) mean ULPs", "(b) residual"]]
    c = df[["fmt", "shape", "constraint"] + [f"{k} @{e:g}" for e in etas for k in
                                             ("(c) worst residual", "(c) lost", "(c) lost, unconstrained",
                                              "(c) moved", "(c) (b) off-grid")]]
    return ab, c


def conclusion(df: pd.DataFrame, etas: tuple[float, ...], steps: int) -> str:
    """The verdict on optim/config.py's one-line refusal of grid storage with a constraint, its numbers from df."""
    e = f"@{etas[0]:g}"
    off = pd.concat([df["(b) off-grid"], *(df[f"(c) (b) off-grid @{x:g}"] for x in etas)])
    ru = df.groupby("fmt")["(a) residual / u"].agg(["min", "max"])
    narrow = ru.loc[ru.index != "E1M6"]
    a0 = df["(a) residual"]
    ratios = pd.concat([df[f"(c) worst residual @{x:g}"].div(a0) for x in etas])
    grow, grow_kind = ratios.max(), df.loc[ratios.idxmax(), "constraint"]
    dlost = max((df[f"(c) lost @{x:g}"] - df[f"(c) lost, unconstrained @{x:g}"]).max() for x in etas)
    bf = df[df.fmt == "bf16"]
    eight = df[df.fmt != "bf16"]
    fwd = (df["(a) residual"] / df["forward residual"]).groupby(df.fmt).max()
    wide = fwd.drop(["E2M5", "E1M6"], errors="ignore").max()
    return "\n".join([
        f"- **Round then retract cannot be grid storage.** After the retraction {off.min():.1%}–{off.max():.1%} of "
        f"the entries are off the format's grid (mean distance {df['(b) mean ULPs'].min():.2f}–"
        f"{df['(b) mean ULPs'].max():.2f} ULP), for every format, shape and constraint, and still after {steps} "
        "steps: the stored weight is not a grid value, so this order is fp32 storage with an extra rounding. The "
        "refusal is justified for it.",
        f"- **Retract then round is well defined and does not drift.** The constraint residual after rounding is "
        f"{narrow['min'].min():.2f}–{narrow['max'].max():.2f} u (u = 2^-(mbits+1); E1M6 stiefel up to "
        f"{ru.loc['E1M6', 'max']:.1f} u: a fixed-point grid, of which grid storage's binade of headroom leaves the "
        "largest entry a quarter to a half), "
        f"against ~1e-6 for fp32; over {steps} steps the worst residual is at most {grow:.2f}× the first, with no "
        f"trend (largest for {grow_kind}; the table over the steps shows stiefel's). It is the "
        "same order as what the forward already sees under the allowed fp32 storage with the recipe's quantizer "
        f"(ratio (a) / forward residual at most {fwd.max():.1f}, {fwd.idxmax()}; ≤ {wide:.2f} for bf16, E4M3, "
        "E3M4). The share of each step it loses is never more than "
        f"{dlost:+.3f} above what the unconstrained grid_rne write of the same step loses: the retraction adds no "
        "loss, the stall is grid_rne's.",
        f"- **What that means per format.** bf16: residual ≤ {bf['(a) residual'].max():.1e}, "
        f"{bf[f'(c) lost {e}'].mean():.0%} of a {etas[0]:g} step lost: workable. 8-bit formats: residual "
        f"{eight['(a) residual'].min():.3f}–{eight['(a) residual'].max():.3f} and "
        f"{eight[f'(c) lost {e}'].min():.0%}–{eight[f'(c) lost {e}'].max():.0%} of a {etas[0]:g} step lost "
        + (f"({eight[f'(c) lost @{etas[-1]:g}'].min():.0%}–{eight[f'(c) lost @{etas[-1]:g}'].max():.0%} at "
           f"{etas[-1]:g}) " if len(etas) > 1 else "")
        + "— as bad as grid_rne storage without a constraint, no worse.",
        "- **Verdict on the one-line refusal.** Justified for round then retract. For retract then round the numbers "
        "do not show that it cannot work: it holds the constraint to about the format's unit roundoff (not "
        "to fp32 rounding, which manifold Muon's checkpoint check and a constraint budget below u would need) and "
        "is workable for bf16. The refusal is left unchanged; allowing retract then round (with a budget of order "
        "u) is reported to the lead as a possible relaxation.",
    ])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--etas", type=float, nargs="+", default=[0.02, 0.002],
                    help="tangent step sizes ‖ξ‖_F / ‖W‖_F (0.02: Muon's default lr as a relative change)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--md", help="write the markdown report here")
    a = ap.parse_args()
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    etas = tuple(a.etas)
    rows = [measure(fmt, shape, kind, a.seed, a.steps, etas)
            for fmt in FORMATS for shape in SHAPES for kind in CONSTRAINTS]
    ab, c = tables(rows, etas)
    with pd.option_context("display.width", 250, "display.max_columns", 40):
        print(ab.to_string(index=False))
        print(c.to_string(index=False))
    print(f"{time.perf_counter() - t0:.1f} s")
    if a.md:
        evo = pd.DataFrame([{"fmt": r["fmt"], "t": t + 1, "(a) residual": tr[0], "(a) lost": tr[1],
                             "(b) off-grid": tr[2]}
                            for r in rows if r["shape"] == "64x64" and r["constraint"] == "stiefel"
                            for t, tr in enumerate(r[f"trace @{etas[0]:g}"]) if t + 1 in (1, 2, 5, 10, a.steps)])
        Path(a.md).write_text("\n".join([header("Grid storage × manifold constraint: retract then round, round then "
                                                "retract (issue 50 item 3)"),
                                         "## (a) retract then round, (b) round then retract", "", md_table(ab),
                                         f"## (c) {a.steps} tangent steps each way", "", md_table(c),
                                         f"## (c) over the steps: 64x64, stiefel, eta {etas[0]:g}", "",
                                         md_table(evo), "## Conclusion", "",
                                         conclusion(pd.DataFrame(rows), etas, a.steps), ""]))


if __name__ == "__main__":
    main()
