"""Seeds until the question is answered: group-sequential claims (`altgrad study --until-resolved`).

A study runs its minimum number of seeds, computes the claims table, then adds seeds (the next seed numbers, `step`
at a time) to the configurations of the rows that are still open ("inconclusive") — with their baseline's seeds and
the frozen-blocks control's, since comparisons are paired by seed — until every row is worse / better / equivalent
or the maximum is reached. Looking at the data after every step and stopping when a row resolves would inflate the
error rates of claims.py's fixed-sample rules, so the verdicts here use group-sequential boundaries:

  looks          n_1 = min, min + step, ..., max seeds (the last look is max); information fraction t_k = n_k / max
  spending       Lan & DeMets (1983) α-spending: "pocock" α·ln(1 + (e − 1)·t) (default: spends early, so a large
                 effect resolves at the first looks and its seeds stop there) or "obf" 2 − 2Φ(z_{1−α/2} / √t)
                 (O'Brien–Fleming-type: almost nothing before the last look)
  boundaries     the z boundaries that spend exactly α(t_k) − α(t_{k−1}) at look k under H0, by the recursive
                 numerical integration of Armitage, McPherson & Rowe (1969) (Jennison & Turnbull 2000, ch. 19):
                 the score statistic S_k has independent N(0, t_k − t_{k−1}) increments; its sub-density on the
                 continuation region is carried from look to look on a Simpson grid. Two-sided boundaries spend
                 α/2 per side (the ldbounds / gsDesign convention), one-sided ones α.
  t, not z       with 3-10 seeds the paired statistic is Student t, and carrying each z boundary's nominal p over
                 to t with df = n_k − 1 (the "significance level approach") gave 5.7-5.9 % false calls for 5 % at
                 3..8 seeds. So the bounds actually used (`nominal_bounds`) are those at which the *t* statistics
                 spend exactly α(t_k) − α(t_{k−1}) under H0: their null distribution does not depend on σ, so it is
                 simulated once (T_SIMS tables, a fixed stream: the bounds are deterministic). At large df they
                 equal the integrated z boundaries' (a test checks it); a look rejects when its paired-t p ≤ bound.
  worse/better   Holm over the table's rows with group-sequential boundaries (Maurer & Bretz 2013, "Multiple
                 testing in group sequential trials using graphical approaches"): a row is rejected when its p at
                 any of its looks is ≤ that look's two-sided bound at level α / r (r = rows not yet rejected);
                 each rejection raises the others' level, as Holm does. Family-wise false worse/better ≤ α.
  equivalent     the two one-sided TOST tests, each with one-sided boundaries at α: equivalent when TOST's p
                 (the larger of the two) is ≤ the look's one-sided bound. False "equivalent" (|gap| ≥ δ) ≤ α.
  verdicts       claims.verdict's own rules (smoke, "diverged in k/n seeds", too few seeds, the frozen-blocks
                 control, "state delta", the "(baseline diverged ...)" note) with its two p-value decisions
                 replaced by the sequential ones above; δ is absolute (claims.DELTA_NATS unless stated), the same
                 at every look. The CI beside a verdict is at the level of the bound it was held to (1 − p_bound;
                 1 − 2·p_bound_tost beside "equivalent"), mde_nats the 80 %-power MDE at p_bound.
  stopping       a row whose variant is resolved gets no more seeds (non-binding: stopping only lowers the error);
                 open rows are "inconclusive ..." and "too few seeds ..." (OPEN); a look whose control check fails
                 is a smoke test: no verdict, nothing open, no seed added.

Everything is replayed from the study's index (`replay`): the looks are a deterministic function of the finished
runs, so an interrupted study resumes where it was by re-running the same command, and `Study.claims` of a
sequential study gives the same verdicts as the run that produced it. `sequential.csv` next to study.csv lists each
look: per row its seeds, p, the bound it was held to, and its state.

Nothing here imports study.py (study.py calls this module); the Study is used through its methods.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable, Iterable, Mapping

import numpy as np
import pandas as pd
from scipy import optimize, special

from altgrad_lib.io import write_csv
from altgrad_lib.studies import claims
from altgrad_lib.studies.claims import (ALPHA, INCONCLUSIVE, SD_CONFIDENCE, SEQUENTIAL, TOO_FEW, ci_at,
                                        positive_control_state, verdict, verdict_mde)

SPENDING = ("pocock", "obf")
SEED_PLAN_KEYS = ("min", "max", "step", "start", "spending")
SEQUENTIAL_FILE = "sequential.csv"
_GRID_H = 0.01        # Simpson grid step of the recursive integration, in sd units of the score at each look
_TAIL = 10.0          # one-sided boundaries: the continuation region is cut at −10 sd (mass ~1e-23)
T_SIMS, T_SEED = 400_000, 20260   # null tables simulated for the t bounds (`nominal_bounds`); MC sd of α/8 ≈ 2 %
OPEN = (INCONCLUSIVE, TOO_FEW)   # claims verdict prefixes that ask for more seeds (claims.NO_DELTA is inconclusive too)


# ----------------------------------------------------------------------------------------------------------
# boundaries


def spend(kind: str, t: Any, alpha: float) -> np.ndarray:
    """Cumulative α spent at information fractions t (Lan & DeMets 1983): "obf" 2 − 2Φ(z_{1−α/2}/√t), "pocock"
    α·ln(1 + (e − 1)t); both equal α at t = 1."""
    t = np.clip(np.asarray(t, dtype=float), 0.0, 1.0)
    if kind == "obf":
        with np.errstate(divide="ignore"):
            return 2 * special.ndtr(-special.ndtri(1 - alpha / 2) / np.sqrt(t))
    if kind == "pocock":
        return alpha * np.log1p((math.e - 1) * t)
    raise ValueError(f"spending={kind!r} is not a spending function; valid: {list(SPENDING)}")


def _simpson(lo: float, hi: float, step: float) -> tuple[np.ndarray, np.ndarray]:
    n = max(2, int(math.ceil((hi - lo) / step)))
    n += n % 2                                           # Simpson needs an even number of intervals
    x = np.linspace(lo, hi, n + 1)
    w = np.ones(n + 1)
    w[1:-1:2], w[2:-1:2] = 4.0, 2.0
    return x, w * (hi - lo) / n / 3


def boundaries(t: Any, cum_alpha: Any, sides: int = 1) -> np.ndarray:
    """z boundaries b_k at information fractions t (increasing, in (0, 1]) such that under H0 the probability of
    first crossing at look k is cum_alpha[k] − cum_alpha[k−1]: one-sided (Z_k ≥ b_k) or two-sided symmetric
    (|Z_k| ≥ b_k, cum_alpha the total of both sides). Recursive numerical integration (module docstring); +inf
    where a look spends nothing."""
    if sides not in (1, 2):
        raise ValueError(f"sides={sides!r}; valid: 1, 2")
    t = np.asarray(t, dtype=float)
    inc = np.diff(np.concatenate([[0.0], np.asarray(cum_alpha, dtype=float)]))
    if len(t) != len(inc) or np.any(np.diff(t) <= 0) or t[0] <= 0 or t[-1] > 1 + 1e-12 or np.any(inc < 0):
        raise ValueError(f"boundaries: t {t.tolist()} must increase in (0, 1] and cum_alpha {list(cum_alpha)} must "
                         "not decrease, one per look")
    out = np.empty(len(t))
    grid = wdens = None                  # S_{k-1} grid and Simpson weight x sub-density on its continuation region
    prev = 0.0
    for k, (info, a) in enumerate(zip(t, inc)):
        sd, root = math.sqrt(info - prev), math.sqrt(info)

        def exit_p(c: float) -> float:   # P(cross at look k, not before) for boundary c
            if grid is None:
                return float(sides * special.ndtr(-c))
            p = wdens @ special.ndtr((grid - c * root) / sd)
            if sides == 2:
                p += wdens @ special.ndtr((-c * root - grid) / sd)
            return float(p)

        lo_c = 0.0 if sides == 2 else -_TAIL
        if a <= 0 or exit_p(60.0) >= a:
            out[k] = math.inf
        else:
            out[k] = optimize.brentq(lambda c: exit_p(c) - a, lo_c, 60.0, xtol=1e-12, rtol=1e-12)
        top = min(out[k], _TAIL) * root
        x, w = _simpson(-top if sides == 2 else -_TAIL * root, top, _GRID_H * root)
        if grid is None:
            dens = np.exp(-0.5 * (x / sd) ** 2) / (sd * math.sqrt(2 * math.pi))
        else:
            dens = np.exp(-0.5 * ((x[:, None] - grid[None, :]) / sd) ** 2) @ wdens / (sd * math.sqrt(2 * math.pi))
        grid, wdens, prev = x, w * dens, info
    return out


def z_nominal_bounds(looks: tuple[int, ...], n_max: int, alpha: float, spending: str, sides: int) -> np.ndarray:
    """Nominal p of each look's z boundary (`boundaries`) for a design that spends `alpha` in total (two-sided: α/2
    per side), information fraction n_k / n_max: the known-variance design, and the large-df limit of
    `nominal_bounds`."""
    t = np.asarray(looks, dtype=float) / n_max
    return sides * special.ndtr(-boundaries(t, _cum(looks, n_max, alpha, spending, sides), sides))


def _cum(looks: tuple[int, ...], n_max: int, alpha: float, spending: str, sides: int) -> np.ndarray:
    t = np.asarray(looks, dtype=float) / n_max
    return 2 * spend(spending, t, alpha / 2) if sides == 2 else spend(spending, t, alpha)


@lru_cache(maxsize=32)
def _null_p(looks: tuple[int, ...], sides: int) -> np.ndarray:
    """(T_SIMS, K) p-values of the paired t-test at each look under H0, from one fixed stream (the bounds are a
    deterministic function of the plan). Per look only the running sum and sum of squares are drawn: a block of
    j new N(0, 1) values adds B ~ N(0, j) to the sum and B²/j + χ²(j − 1) to the sum of squares, independently."""
    rng = np.random.default_rng(T_SEED)
    s = q = np.zeros(T_SIMS)
    prev, out = 0, np.empty((T_SIMS, len(looks)))
    for k, n in enumerate(looks):
        j = n - prev
        b = rng.standard_normal(T_SIMS) * math.sqrt(j)
        s, q, prev = s + b, q + b * b / j + (rng.chisquare(j - 1, T_SIMS) if j > 1 else 0.0), n
        tstat = (s / n) / np.sqrt(np.maximum(q - s * s / n, 1e-300) / (n - 1) / n)
        out[:, k] = sides * special.stdtr(n - 1, -np.abs(tstat) if sides == 2 else -tstat)
    return out


@lru_cache(maxsize=256)
def nominal_bounds(looks: tuple[int, ...], n_max: int, alpha: float, spending: str, sides: int) -> np.ndarray:
    """Nominal p bound of each look for the paired t-test (reject when the look's p ≤ it): the bounds at which the
    probability, under H0, of first crossing at look k is exactly the spending function's increment, for the t
    statistics themselves (their null distribution does not depend on σ, so it is simulated once: T_SIMS tables,
    a fixed stream). Two-sided: α/2 per side; one-sided at `alpha`; information fraction n_k / n_max. Carrying the
    z boundaries' nominal p over to t with df = n_k − 1 ("significance level approach") is not enough at 3-8 seeds:
    the t statistics of successive looks are less correlated than z's, and it gave 5.9 % false calls for 5 % (one
    row, Pocock, 3..8 seeds); tests/test_studies_sequential.py shows that, and that these bounds tend to the z
    boundaries' (`z_nominal_bounds`) at large df."""
    inc = np.diff(np.concatenate([[0.0], _cum(looks, n_max, alpha, spending, sides)]))
    p = _null_p(tuple(looks), sides)
    alive = np.ones(len(p), dtype=bool)
    out = np.zeros(len(looks))
    for k in range(len(looks)):
        count = int(round(inc[k] * len(p)))
        q = p[alive, k]
        if count >= 1 and len(q):
            out[k] = np.partition(q, count - 1)[count - 1]
            alive &= p[:, k] > out[k]
    return out


def holm_bounds(looks: tuple[int, ...], n_max: int, m: int, alpha: float = ALPHA,
                spending: str = "pocock") -> np.ndarray:
    """(m, K): row r − 1 holds the two-sided nominal p bounds of each look at Holm's level α / r."""
    return np.stack([nominal_bounds(tuple(looks), n_max, alpha / r, spending, 2) for r in range(1, max(m, 1) + 1)])


def sequential_calls(p_two: np.ndarray, p_tost: np.ndarray, bounds2: np.ndarray,
                     bound1: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The group-sequential worse/better and equivalence calls of one table (one Holm family), vectorized over
    leading axes (simulations): p_two, p_tost (..., m, K) the paired-t and TOST p of each row at each look (NaN
    where the row was not looked at), bounds2 `holm_bounds` (>= m rows), bound1 (K,) the one-sided bounds at α.
    Returns (significant, equivalent, divisor), each (..., m): divisor r is the Holm level α / r a row was
    rejected at, or the last level it was held to."""
    p_two, p_tost = np.asarray(p_two, dtype=float), np.asarray(p_tost, dtype=float)
    m = p_two.shape[-2]
    in_family = np.isfinite(p_two).any(-1)
    size = in_family.sum(-1)
    rejected = np.zeros(p_two.shape[:-1], dtype=bool)
    divisor = np.broadcast_to(np.clip(size, 1, None)[..., None], rejected.shape).copy()
    for _ in range(m):                           # Holm step-down: each rejection raises the others' level
        left = np.clip(size - rejected.sum(-1), 1, None)
        thr = bounds2[np.minimum(left, len(bounds2)) - 1]          # (..., K)
        new = (p_two <= thr[..., None, :]).any(-1) & ~rejected & in_family
        divisor = np.where(rejected, divisor, left[..., None])
        if not new.any():
            break
        rejected |= new
    return rejected, (p_tost <= np.asarray(bound1)).any(-1), divisor


# ----------------------------------------------------------------------------------------------------------
# the plan


@dataclass(frozen=True)
class SeedPlan:
    """Seeds until resolved: start with `min` seeds (start, start + 1, ...), add `step` at a time to open rows, stop
    at `max`. Study YAML: `axes: {seed: {min: 3, max: 8, step: 1}}` (optional start, spending)."""
    min: int
    max: int
    step: int = 1
    start: int = 0
    spending: str = "pocock"

    def __post_init__(self) -> None:
        for k in ("min", "max", "step", "start"):
            v = getattr(self, k)
            if not isinstance(v, int) or isinstance(v, bool):
                raise ValueError(f"seed plan {k}={v!r} must be an integer; plan keys: {SEED_PLAN_KEYS}")
        if not 2 <= self.min <= self.max:
            raise ValueError(f"seed plan min={self.min}, max={self.max}: need 2 <= min <= max (a paired test needs "
                             "2 seeds)")
        if self.step < 1 or self.start < 0:
            raise ValueError(f"seed plan step={self.step}, start={self.start}: need step >= 1 and start >= 0")
        if self.spending not in SPENDING:
            raise ValueError(f"seed plan spending={self.spending!r}; valid: {list(SPENDING)}")

    @classmethod
    def from_spec(cls, spec: Any) -> "SeedPlan":
        if not isinstance(spec, Mapping):
            raise ValueError(f"seed plan {spec!r} must be a mapping with keys {SEED_PLAN_KEYS}, e.g. "
                             "{min: 3, max: 8, step: 1}")
        bad = sorted(set(spec) - set(SEED_PLAN_KEYS))
        if bad or "min" not in spec or "max" not in spec:
            raise ValueError(f"seed plan {dict(spec)!r}: " + (f"unknown key(s) {bad}" if bad else "needs min and max")
                             + f"; valid keys: {SEED_PLAN_KEYS}")
        return cls(**dict(spec))

    @property
    def looks(self) -> tuple[int, ...]:
        return tuple(sorted({*range(self.min, self.max, self.step), self.max}))

    def seeds(self, n: int) -> list[int]:
        return list(range(self.start, self.start + n))

    def describe(self, alpha: float = ALPHA) -> str:
        return (f"seeds until resolved: {self.min} seeds, then +{self.step} to each open row up to {self.max} "
                f"(looks at n = {', '.join(map(str, self.looks))}); {self.spending} α-spending "
                f"(Lan-DeMets), Holm over the table for worse/better (family-wise α = {alpha}), TOST one-sided at α "
                f"= {alpha} per row for equivalent; p compared with each look's nominal bound")


def per_seed_points(points: Iterable[Mapping[str, Any]], plan: SeedPlan) -> tuple[dict[str, Any], ...]:
    """A sequential study's explicit points: one without a `seed` is a per-seed point (e.g. the frozen-blocks
    control) and is listed once per seed of the minimum; one with a seed stays as it is."""
    out = []
    for p in points:
        if isinstance(p, Mapping) and "seed" not in p:
            out += [{**p, "seed": s} for s in plan.seeds(plan.min)]
        else:
            out.append(p)
    return tuple(out)


def plan_for(study: Any, max_seeds: int | None = None, step: int = 1) -> SeedPlan:
    """The study's own plan (a `seed: {min, max, step}` axis), or one from `--max-seeds` for a study whose seed
    axis lists consecutive seeds (its count is the minimum). One line naming the problem otherwise."""
    if study.seed_plan is not None:
        if max_seeds is not None:
            raise ValueError(f"--max-seeds {max_seeds}: study {study.name!r} states its own seed plan "
                             f"({study.seed_plan.min}..{study.seed_plan.max}); give one or the other")
        return study.seed_plan
    seeds = list(study.axes.get("seed", ()))
    if max_seeds is None:
        raise ValueError(f"--until-resolved needs a maximum: --max-seeds N, or a seed axis "
                         f"{{min: {len(seeds) or 3}, max: N, step: 1}} in study {study.name!r}")
    if not seeds or any(not isinstance(s, int) for s in seeds) or seeds != list(range(seeds[0], seeds[0] + len(seeds))):
        raise ValueError(f"--until-resolved: the seed axis {seeds} of study {study.name!r} must list consecutive "
                         "integer seeds (the new seeds follow them); valid e.g. [0, 1, 2]")
    return SeedPlan(min=len(seeds), max=max_seeds, step=step, start=seeds[0])


def with_seeds(study: Any, seeds: Iterable[int]) -> Any:
    """The study with its seed axis set to `seeds` and each per-seed family of explicit points (points that differ
    only in seed and cover every seed of the axis, e.g. the frozen-blocks control) extended to them."""
    seeds = list(seeds)
    base = set(study.axes.get("seed", ()))
    fams: dict[str, set] = {}
    for p in study.points:
        if "seed" in p:
            fams.setdefault(_family(p), set()).add(p["seed"])
    per_seed = {f for f, s in fams.items() if base and base <= s}
    extra, done = [], set()
    for p in study.points:
        f = _family(p)
        if f in per_seed and f not in done:
            done.add(f)
            extra += [{**p, "seed": s} for s in seeds if s not in fams[f]]
    return dataclasses.replace(study, axes={**study.axes, "seed": tuple(seeds)}, points=(*study.points, *extra),
                               seed_plan=None)


def _family(p: Mapping[str, Any]) -> str:
    return repr(sorted((k, repr(v)) for k, v in p.items() if k != "seed"))


# ----------------------------------------------------------------------------------------------------------
# the verdicts of one look


def is_open(verdict_text: str) -> bool:
    """A row that more seeds could resolve: "inconclusive" (with or without a δ) or "too few seeds", whatever note
    follows (claims.verdict's wording); a smoke test, a harm, "not training its blocks" are not."""
    return str(verdict_text).startswith(OPEN)


def _judged(r: Mapping[str, Any], sig: bool, eq: bool, p_bound: float, p_bound_tost: float, alpha: float,
            lower_is_better: bool) -> dict[str, Any]:
    """One row's sequential verdict and the columns that depend on it. The verdict is claims.verdict's own rules
    (smoke, diverged, too few seeds, the frozen-blocks control, the baseline note, "state delta") with its two
    p-value decisions replaced by the group-sequential ones: p_holm < α becomes `sig`, p_tost < α becomes `eq`.
    The CI is at the level of the bound the verdict was held to (1 − p_bound; 1 − 2·p_bound_tost beside
    "equivalent", TOST's CI at its one-sided bound; 95 % in a smoke test): it excludes 0 exactly when the look's p
    crossed. mde_nats is claims.verdict_mde at that bound (one row at level p_bound, 80 % UCB of the sd): the
    smallest gap this look alone detects with 80 % power (the looks before it only add power)."""
    smoke = bool(r.get("smoke") is True)
    v = verdict({**r, "p_holm": 0.0 if sig else 1.0, "p_tost": 0.0 if eq else 1.0}, alpha, lower_is_better)
    level = 0.95 if smoke else 1 - 2 * p_bound_tost if v.startswith("equivalent") else 1 - p_bound
    lo, hi = ci_at(r["gap_nats"], r.get("sd_nats", math.nan), r["n"], level)
    out = {"verdict": v, "ci_level": level, "ci_lo": float(lo), "ci_hi": float(hi),
           "mde_nats": verdict_mde(int(r["n"]), float(r.get("sd_nats", math.nan)), 1, p_bound)
           if p_bound > 0 else math.nan}
    if str(r.get("positive_control", "")) != "":
        out["positive_control"] = positive_control_state(v, smoke)
    return out


def sequential_verdicts(table: pd.DataFrame, keys: list[tuple], history: Mapping[tuple, list], plan: SeedPlan,
                        alpha: float = ALPHA, lower_is_better: bool = True,
                        family: str | None = "comparison") -> pd.DataFrame:
    """`table` (claims rows, keys[i] the key of row i) with verdicts by the group-sequential rule; history[key] =
    [(look index, p_paired, p_tost), ...]. One Holm family per value of the `family` column (None: the whole
    table, e.g. variants.reference_claims' one family over formats). Adds fixed_verdict (claims.py's fixed-sample
    verdict: not valid after several looks, kept for reference), look (1-based look of the row's last data),
    p_bound (the two-sided bound its p was held to: look, Holm level), p_bound_tost; rewrites verdict, ci_level /
    ci_lo / ci_hi, mde_nats and positive_control (`_judged`); p_holm stays the fixed-sample number."""
    out = table.reset_index(drop=True).copy()
    looks, K = plan.looks, len(plan.looks)
    fixed, look, p_bound, p_bound_tost = SEQUENTIAL
    out[fixed], out[look], out[p_bound], out[p_bound_tost] = out["verdict"], 0, math.nan, math.nan
    bound1 = nominal_bounds(looks, plan.max, alpha, plan.spending, 1)
    fam = out[family] if family is not None and family in out else pd.Series("", index=out.index)
    for _, idx in out.groupby(fam, sort=False).groups.items():
        idx = list(idx)
        p2, pt = np.full((len(idx), K), math.nan), np.full((len(idx), K), math.nan)
        last = np.zeros(len(idx), dtype=int)
        for j, i in enumerate(idx):
            for k, p, q in history.get(keys[i], ()):
                p2[j, k], pt[j, k], last[j] = p, q, max(last[j], k)
        b2 = holm_bounds(looks, plan.max, len(idx), alpha, plan.spending)
        sig, eq, div = sequential_calls(p2, pt, b2, bound1)
        for j, i in enumerate(idx):
            pb, pbt = float(b2[div[j] - 1, last[j]]), float(bound1[last[j]])
            upd = _judged(out.loc[i].to_dict(), bool(sig[j]), bool(eq[j]), pb, pbt, alpha, lower_is_better)
            upd.update(look=int(last[j]) + 1, p_bound=pb, p_bound_tost=pbt)
            for c, val in upd.items():
                out.at[i, c] = val
    return out


def mark_smoke(table: pd.DataFrame, alpha: float = ALPHA, lower_is_better: bool = True) -> pd.DataFrame:
    """A sequential table as a smoke test (the control check failed): smoke True, verdict "smoke test: no verdict",
    the 95 % CI, positive controls "not judged" (the rules of `_judged`)."""
    out = table.copy()
    out["smoke"] = True
    for i in out.index:
        r = out.loc[i].to_dict()
        for c, val in _judged(r, False, False, float(r.get("p_bound", math.nan)),
                              float(r.get("p_bound_tost", math.nan)), alpha, lower_is_better).items():
            out.at[i, c] = val
    return out


def describe_sequential(table: pd.DataFrame, plan: SeedPlan, alpha: float = ALPHA) -> str:
    """claims.describe's paragraph for a sequential table: the rules the verdicts, CIs and MDEs were held to."""
    if table.empty or ("smoke" in table and table.smoke.astype(bool).all()):
        return claims.describe(table)
    deltas = sorted(set(np.round(table.delta_nats.dropna().to_numpy(float), 6)))
    delta_txt = (", ".join(f"{d:.4g}" for d in deltas) + " nats" if deltas
                 else "none (state `delta`: equivalence not tested)")
    mdes = table.mde_nats.dropna()
    mde_txt = f"{mdes.min():.4f}..{mdes.max():.4f} nats" if len(mdes) else "n/a (fewer than 2 pairs)"
    return (f"paired by seed, seeds until resolved ({plan.min}..{plan.max}, looks at n = "
            f"{', '.join(map(str, plan.looks))}, {plan.spending} α-spending); a seed that diverged or did not learn "
            f"stays in its row ('diverged in k/n seeds', a harm); worse/better: a look's paired-t p <= its "
            f"group-sequential bound p_bound at Holm's level over the table (family-wise α = {alpha}), CI at "
            f"1 − p_bound; equivalent: TOST p <= the look's one-sided bound p_bound_tost within ±δ, δ = {delta_txt} "
            f"(stated before the runs), CI at 1 − 2·p_bound_tost; p_holm and fixed_verdict are the fixed-sample "
            f"numbers, not valid after several looks; MDE (80 % power at the row's p_bound, with the "
            f"{SD_CONFIDENCE:.0%} upper confidence bound of its sd): {mde_txt}; 'inconclusive' at the last look means "
            f"the seeds cannot tell, not 'no effect'")


# ----------------------------------------------------------------------------------------------------------
# the replay: which seeds each configuration needs, and the verdicts, from the runs that exist


@dataclass(frozen=True)
class Candidate:
    """A run the plan may need: its name, configuration key (index values but the seed) and seed index (None: the
    run belongs to no per-seed family and is always run)."""
    name: str
    key: tuple
    index: int | None
    point: Any = None


@dataclass
class Replay:
    """A sequential study's state given its finished runs."""
    table: pd.DataFrame                              # claims at the last complete look, sequential verdicts
    need: list = field(default_factory=list)         # every run of the current state (the missing ones included)
    missing: list = field(default_factory=list)      # runs the current look needs that have not finished
    looks: pd.DataFrame = field(default_factory=pd.DataFrame)   # one row per (look, claims row): sequential.csv
    done: bool = False


FINISHED_STATUS_EXCLUDED = ("pending", "interrupted")   # any other status (completed, diverged, failed) is a result


def replay(frame: pd.DataFrame, plan: SeedPlan, candidates: list[Candidate],
           claims: Callable[[pd.DataFrame, bool], pd.DataFrame],
           involved: Callable[[Mapping[str, Any]], tuple[set, set]], row_key: Callable[[Mapping[str, Any]], tuple],
           alpha: float = ALPHA, smoke: Callable[[pd.DataFrame], bool] | None = None,
           family: str | None = "comparison") -> Replay:
    """Replay the looks on `frame` (an index: run, status, ...): the minimum seeds of every configuration, the
    claims (`claims(sub-frame, smoke)`, smoke = `smoke(sub-frame)`: the control check failed at this look, so no
    row gets a verdict and none is open: a smoke test stops at the look where it is one), the sequential verdicts
    (one Holm family per `family` value), then `step` more seeds for the configurations `involved(row)` = (variant
    keys, baseline and control keys) of each open row, until no row is open, the last look, or a run that is not in
    `frame` (then `missing` lists what to run)."""
    done = frame.loc[~frame.status.isin(FINISHED_STATUS_EXCLUDED), "run"] if len(frame) else pd.Series(dtype=str)
    present = set(done)
    allowed: dict[tuple, int] = {}
    history: dict[tuple, list] = {}
    log: list[dict[str, Any]] = []
    table = pd.DataFrame()
    looks = plan.looks
    for look in range(len(looks)):
        need = [c for c in candidates if c.index is None or c.index < allowed.get(c.key, plan.min)]
        missing = [c for c in need if c.name not in present]
        if missing:
            return Replay(table, need, missing, pd.DataFrame(log))
        sub = frame[frame.run.isin({c.name for c in need})]
        table = claims(sub, bool(smoke(sub)) if smoke is not None else False)
        keys = [row_key(r) for r in table.to_dict("records")]
        for r, key in zip(table.to_dict("records"), keys):
            variant, _ = involved(r)
            n = min((allowed.get(k, plan.min) for k in variant), default=plan.min)
            k = looks.index(n) if n in looks else look
            if not history.get(key) or history[key][-1][0] < k:
                history.setdefault(key, []).append((k, float(r["p_paired"]), float(r["p_tost"])))
        table = sequential_verdicts(table, keys, history, plan, alpha, family=family)
        open_rows = [r for r in table.to_dict("records") if is_open(r["verdict"])]
        log += [{"look": look + 1, "n_seeds": looks[look], **{c: r[c] for c in ("comparison", "level") if c in r},
                 "n": r["n"], "seeds": r.get("seeds", ""), "gap_nats": r["gap_nats"], "p_paired": r["p_paired"],
                 "p_bound": r["p_bound"], "p_tost": r["p_tost"], "p_bound_tost": r["p_bound_tost"],
                 "verdict": r["verdict"], "adds_seeds": is_open(r["verdict"]) and look + 1 < len(looks)}
                for r in table.to_dict("records")]
        if not open_rows or look + 1 == len(looks):
            return Replay(table, need, [], pd.DataFrame(log), done=True)
        for r in open_rows:
            variant, others = involved(r)
            for k in variant | others:
                allowed[k] = max(allowed.get(k, plan.min), looks[look + 1])
    raise AssertionError("unreachable: the last look returns")


# ----------------------------------------------------------------------------------------------------------
# a Study through the replay


def _as_str(values: Mapping[str, Any], cols: Iterable[str]) -> tuple:
    return tuple(str(values[c]) for c in cols)


def study_candidates(study: Any, plan: SeedPlan) -> tuple[list[Candidate], list[str], dict[tuple, dict]]:
    """Every run the plan may need (the study at `max` seeds), the key columns, and key -> index values."""
    cols = [c for c in study.axis_columns() if c != "seed"]
    at_min = {p.name for p in with_seeds(study, plan.seeds(plan.min)).expand()}
    cands, values = [], {}
    for p in with_seeds(study, plan.seeds(plan.max)).expand():
        vals = {k: str(v) for k, v in study.index_values(p).items()}
        key = _as_str(vals, cols)
        values[key] = vals
        idx = p.config.seed - plan.start
        per_seed = 0 <= idx < plan.max and (p.name not in at_min or idx < plan.min)
        cands.append(Candidate(p.name, key, idx if per_seed else None, p))
    return cands, cols, values


def study_replay(study: Any, frame: pd.DataFrame, plan: SeedPlan | None = None, smoke: bool = False) -> Replay:
    """`replay` of a Study (its comparisons' claims tables, configurations keyed by their index values). Each look
    is a smoke test when the study's control check of that look's runs fails (Study.control without the unigram
    entropy: the run loop and every later replay see the same looks); `smoke` (Study.report's control check of all
    the runs, with the entropy) also marks the final table a smoke test (`mark_smoke`)."""
    plan = plan or study.seed_plan
    fixed = dataclasses.replace(study, seed_plan=None)
    cands, cols, values = study_candidates(study, plan)
    comps = {}
    for c in study.comparisons:
        base = study.level(c["axis"], c["baseline"])
        by = [b for b in (c.get("by") or [k for k in study.axis_columns() if k not in (c["axis"], "seed")])
              if b not in (c["axis"], "seed", "freeze_blocks")]
        comps[f"{c['axis']} vs {base}"] = (c["axis"], str(base), by)

    def row_key(r: Mapping[str, Any]) -> tuple:
        axis, _, by = comps[r["comparison"]]
        return (r["comparison"], str(r["level"]), *(str(r[b]) for b in by))

    def involved(r: Mapping[str, Any]) -> tuple[set, set]:
        axis, base, by = comps[r["comparison"]]
        same = [k for k, v in values.items() if all(v[b] == str(r[b]) for b in by)]
        ctl = {k for k in same if values[k].get("freeze_blocks") == "True"}
        variant = {k for k in same if k not in ctl and values[k][axis] == str(r["level"])}
        baseline = {k for k in same if k not in ctl and values[k][axis] == base}
        return variant, baseline | {k for k in ctl if values[k][axis] in (base, str(r["level"]))}

    empty = pd.DataFrame(columns=["run", "status"])
    rep = replay(empty if frame is None else frame, plan, cands, lambda f, s: fixed.claims(f, smoke=s), involved,
                 row_key, smoke=lambda f: study.control(f)[1] is False)
    if smoke and len(rep.table):
        rep.table = mark_smoke(rep.table)
    return rep


def run_until_resolved(study: Any, run: Callable[[list], pd.DataFrame], log: Callable[[str], None] = print,
                       frame: pd.DataFrame | None = None) -> pd.DataFrame:
    """Run `study` (with a seed_plan) until every row is resolved or its maximum: replay the looks on the runs
    that exist (`frame`, e.g. the index of an interrupted run), run what the next look needs (`run(points)` trains
    or reuses them and returns the index), repeat. Writes sequential.csv; returns the index."""
    plan = study.seed_plan
    frame = pd.DataFrame(columns=["run", "status"]) if frame is None else frame
    seen: set = set()
    while True:
        rep = study_replay(study, frame, plan)
        if rep.done:
            break
        names = frozenset(c.name for c in rep.missing)
        if names in seen:
            raise RuntimeError(f"{study.name}: runs {sorted(names)[:3]} are still missing after they were run")
        seen.add(names)
        look = int(rep.looks.look.max()) + 1 if len(rep.looks) else 1
        log(f"{study.name}: look {look} of {len(plan.looks)}: {len(names)} run(s) to add")
        frame = run([c.point for c in rep.need])
    write_csv(study.dir / SEQUENTIAL_FILE, rep.looks)
    worst = len(study_candidates(study, plan)[0])
    log(f"{study.name}: resolved at {len(rep.need)} of {worst} runs (worst case); looks in {study.dir / SEQUENTIAL_FILE}")
    return frame


def dry_run_lines(study: Any, plan: SeedPlan) -> tuple[list[str], list]:
    """What `--dry-run` prints for a sequential study, and the worst case's points (for the time estimate)."""
    worst = with_seeds(study, plan.seeds(plan.max)).check()
    at_min = with_seeds(study, plan.seeds(plan.min)).expand()
    return [plan.describe(),
            f"runs: {len(at_min)} at the minimum, {len(worst)} in the worst case (every row open to the last look); "
            "the estimate below is the worst case"], worst


__all__ = ["SPENDING", "SEED_PLAN_KEYS", "SEQUENTIAL_FILE", "spend", "boundaries", "z_nominal_bounds",
           "nominal_bounds", "holm_bounds", "sequential_calls", "SeedPlan", "per_seed_points", "plan_for", "with_seeds",
           "is_open", "sequential_verdicts", "mark_smoke", "describe_sequential", "Candidate", "Replay", "replay",
           "study_candidates", "study_replay", "run_until_resolved", "dry_run_lines"]
