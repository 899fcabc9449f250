"""Precision scaling laws: L(N, D) = E + A N^-α + B D^-β for the baseline recipe, and per recipe an effective-
parameter multiplier κ (N_eff = κ N), fitted to a ladder study's runs (ladder.py), with bootstrap intervals.

The form is Kumar et al.'s ("Scaling Laws for Precision", arXiv 2411.04330): a precision's cost is a loss of
effective parameters, L = E + A (κ N)^-α + B D^-β, shared E, A, α, B, β; optionally also a data multiplier
(D_eff = δ D, `data_multipliers=True`) for a recipe that costs data rather than parameters. κ < 1: the recipe
trains like a model with κ of its parameters.

Fit (Hoffmann et al. 2022, appendix D.2; Besiroglu et al. 2024's replication): the LSE parameterisation
log L = LSE(a - α log N_eff, b - β log D_eff, e), A = e^a, B = e^b, E = e^e, minimising the Huber loss (δ = 1e-3)
of log L - log(observed loss) over the runs. Starts: the N_STARTS points of Hoffmann's initialisation grid with
the lowest objective, each run to its minimum by a damped iteratively reweighted Gauss-Newton (_irls, all starts at
once), the best polished by scipy's L-BFGS-B (their optimiser) on the same objective with its analytic gradient.
Intervals: percentile bootstrap, resampling runs with replacement within each recipe (a run is one seed at one
rung), each refit started at the full fit. `coverage` measures the intervals' coverage on synthetic ladders drawn
from a known law (tests/test_scaling_law.py).

Extrapolation rule (AltGrad's convention, not a published one): the extrapolation factor of a prediction at
(N, D) is how far it lies outside the fit's rungs, f = max(N / N_max, N_min / N, D / D_max, D_min / D, 1); the
rungs span s = min(N_max / N_min, D_max / D_min); a prediction needs log f <= MAX_DECADES_PER_DECADE x log s (each
decade the rungs cover licenses at most that many decades beyond them), so a fit with one size or one budget
(s = 1) predicts nothing outside its rungs. Past WARN_FACTOR the prediction is printed with a warning. Whether an
extrapolation holds is what `holdout_check` measures (fit all sizes but the largest, predict the largest).
"""
from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pandas as pd
from scipy.optimize import minimize

from altgrad_lib.errors import did_you_mean

HUBER_DELTA = 1e-3          # Hoffmann et al.'s δ on log-loss residuals
LEVEL = 0.90                # the intervals' nominal coverage
N_BOOT = 400                # bootstrap refits of a fit from a study (tests use fewer, and say so)
START_TOL = 1e-10            # the same for the starts of a fit (L-BFGS then polishes the best)
BOOT_TOL = 1e-8             # a bootstrap refit stops when a step gains less than this of its objective
N_STARTS = 32               # the best points of Hoffmann's grid each fit starts from
MAX_DECADES_PER_DECADE = 4  # the extrapolation rule (module note)
WARN_FACTOR = 100.0         # a prediction this far beyond the rungs is printed with a warning
# Hoffmann et al.'s initialisation grid (appendix D.2)
GRID = {"e": (-1.0, -0.5, 0.0, 0.5, 1.0, 1.5), "a": (0.0, 5.0, 10.0, 15.0, 20.0, 25.0),
        "alpha": (0.0, 0.5, 1.0, 1.5, 2.0), "b": (0.0, 5.0, 10.0, 15.0, 20.0, 25.0), "beta": (0.0, 0.5, 1.0, 1.5, 2.0)}
SHARED = ("e", "a", "alpha", "b", "beta")
FIT_COLUMNS = ("recipe", "n_params", "tokens", "loss")


class FitError(ValueError):
    """A fit or prediction that cannot be made from what was given (one line)."""


def _huber(r: np.ndarray, delta: float) -> np.ndarray:
    a = np.abs(r)
    return np.where(a <= delta, 0.5 * r * r, delta * (a - 0.5 * delta))


@dataclass
class _Design:
    """The runs as arrays: log N, log D, log loss, and each run's recipe index (0 = baseline)."""
    x: np.ndarray
    y: np.ndarray
    logl: np.ndarray
    r: np.ndarray
    n_recipes: int
    data_multipliers: bool

    @property
    def n_theta(self) -> int:
        return 5 + (self.n_recipes - 1) * (2 if self.data_multipliers else 1)

    def batch(self, th: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Residuals log L(θ) - log loss (K, n) and their Jacobian (K, n, p) for K thetas (K, p), each on the runs
        idx[k] (K, n): one bootstrap resample, or every run, per row."""
        m = self.n_recipes - 1
        r = self.r[idx]
        zero = np.zeros((len(th), 1))
        k = np.take_along_axis(np.concatenate([zero, th[:, 5:5 + m]], axis=1), r, axis=1)
        d = np.take_along_axis(np.concatenate([zero, th[:, 5 + m:]], axis=1), r, axis=1) if self.data_multipliers \
            else 0.0
        xn, yd = self.x[idx] + k, self.y[idx] + d
        e, a, al, b, be = (th[:, i:i + 1] for i in range(5))
        u = np.stack([np.broadcast_to(e, xn.shape), a - al * xn, b - be * yd])      # (3, K, n)
        mx = u.max(axis=0)
        w = np.exp(u - mx)
        tot = w.sum(axis=0)
        w /= tot
        resid = mx + np.log(tot) - self.logl[idx]
        J = np.empty((*xn.shape, self.n_theta))
        J[..., 0], J[..., 1], J[..., 2], J[..., 3], J[..., 4] = w[0], w[1], -xn * w[1], w[2], -yd * w[2]
        onehot = r[..., None] == np.arange(1, m + 1)                                   # (K, n, m)
        J[..., 5:5 + m] = -(al * w[1])[..., None] * onehot
        if self.data_multipliers:
            J[..., 5 + m:] = -(be * w[2])[..., None] * onehot
        return resid, J

    def objective(self, th: np.ndarray, delta: float, idx: np.ndarray | None = None) -> float:
        idx = np.arange(len(self.x))[None] if idx is None else idx[None]
        return float(_huber(self.batch(th[None], idx)[0], delta).sum())


def _irls(des: _Design, th0: np.ndarray, idx: np.ndarray, delta: float, iters: int = 300,
          tol: float = 1e-13) -> np.ndarray:
    """Minimise the Huber objective for K starts at once (th0 (K, p), runs idx (K, n)): Levenberg-damped iteratively
    reweighted Gauss-Newton (weights ψ(r)/r, so each step solves the weighted least squares whose gradient is the
    Huber gradient Jᵀψ(r)); a step is kept only where it lowers that row's objective, and a row stops once a kept
    step gains less than `tol` of its objective. scipy's L-BFGS polishes the full fit (fit_scaling_law);
    tests/test_scaling_law.py checks both reach the same minimum."""
    th = th0.copy()
    lam = np.full(len(th), 1e-3)
    res, J = des.batch(th, idx)
    obj = _huber(res, delta).sum(axis=1)
    eye = np.eye(th.shape[1])
    act = np.arange(len(th))          # rows still moving
    for _ in range(iters):
        r, Jr, ia = res[act], J[act], idx[act]
        w = np.minimum(1.0, delta / np.maximum(np.abs(r), 1e-300))
        JWt = (Jr * w[..., None]).transpose(0, 2, 1)
        H = JWt @ Jr
        g = (JWt @ r[..., None])[..., 0]
        Hd = H + lam[act, None, None] * (eye * np.maximum(np.diagonal(H, axis1=1, axis2=2), 1e-12)[:, None, :])
        try:
            step = np.linalg.solve(Hd, -g[..., None])[..., 0]
        except np.linalg.LinAlgError:
            step = -g / np.maximum(np.diagonal(Hd, axis1=1, axis2=2), 1e-12)
        cand = th[act] + step
        r2, J2 = des.batch(cand, ia)
        o2 = _huber(r2, delta).sum(axis=1)
        better = np.isfinite(o2) & (o2 < obj[act])
        done = (better & (obj[act] - o2 <= tol * obj[act])) | (~better & (lam[act] >= 1e8))
        kept = act[better]
        th[kept], res[kept], J[kept], obj[kept] = cand[better], r2[better], J2[better], o2[better]
        lam[act] = np.clip(np.where(better, lam[act] / 3, lam[act] * 4), 1e-9, 1e9)
        act = act[~done]
        if not len(act):
            break
    return th


def _lbfgs(des: _Design, th0: np.ndarray, delta: float) -> np.ndarray:
    """Hoffmann et al.'s optimiser: L-BFGS on the Huber objective, analytic gradient."""
    idx = np.arange(len(des.x))[None]

    def f(th: np.ndarray) -> tuple[float, np.ndarray]:
        res, J = des.batch(th[None], idx)
        return float(_huber(res, delta).sum()), (J[0].T @ np.clip(res[0], -delta, delta))

    return minimize(f, th0, jac=True, method="L-BFGS-B", options={"maxiter": 5000, "ftol": 1e-15, "gtol": 1e-12}).x


def _grid_starts(des: _Design, delta: float, n_best: int) -> np.ndarray:
    """The `n_best` points of Hoffmann's grid (κ = δ = 1) with the lowest Huber objective, evaluated at once."""
    g = np.array(list(itertools.product(*(GRID[k] for k in SHARED))))                      # (G, 5)
    u = np.stack([np.broadcast_to(g[:, :1], (len(g), len(des.x))), g[:, 1:2] - g[:, 2:3] * des.x,
                  g[:, 3:4] - g[:, 4:5] * des.y])
    mx = u.max(axis=0)
    obj = _huber(mx + np.log(np.exp(u - mx).sum(axis=0)) - des.logl, delta).sum(axis=1)
    best = np.argsort(obj)[:n_best]
    return np.concatenate([g[best], np.zeros((len(best), des.n_theta - 5))], axis=1)


@dataclass
class ScalingFit:
    """A fitted law: point estimates, bootstrap draws, and the rungs it was fitted on (for the extrapolation rule)."""
    baseline: str
    recipes: tuple[str, ...]                 # the baseline first
    theta: list[float]                       # e, a, alpha, b, beta, log κ per non-baseline recipe[, log δ per recipe]
    draws: list[list[float]]                 # bootstrap refits, one theta each
    data_multipliers: bool
    level: float
    n_range: tuple[float, float]
    d_range: tuple[float, float]
    n_sizes: int
    n_budgets: int
    n_runs: int
    resid_sd: float                          # sd of the log-loss residuals (a run's noise about the law)
    source: str = ""
    notes: list[str] = field(default_factory=list)

    # -- parameters
    def _named(self, th: np.ndarray) -> dict[str, float]:
        e, a, al, b, be = th[:5]
        m = len(self.recipes) - 1
        out = {"E": math.exp(e), "A": math.exp(a), "alpha": al, "B": math.exp(b), "beta": be}
        for i, r in enumerate(self.recipes[1:]):
            out[f"kappa[{r}]"] = math.exp(th[5 + i])
            if self.data_multipliers:
                out[f"delta[{r}]"] = math.exp(th[5 + m + i])
        return out

    def params(self) -> pd.DataFrame:
        """One row per parameter: estimate and the bootstrap percentile interval at `level`."""
        est = self._named(np.asarray(self.theta))
        boot = pd.DataFrame([self._named(np.asarray(t)) for t in self.draws])
        q = (1 - self.level) / 2
        return pd.DataFrame({"param": list(est), "estimate": list(est.values()),
                             "lo": [boot[k].quantile(q) for k in est], "hi": [boot[k].quantile(1 - q) for k in est]})

    # -- predictions
    def _loss(self, th: np.ndarray, recipe: str, n: float, d: float) -> float:
        i = self.recipes.index(recipe)
        m = len(self.recipes) - 1
        k = th[5 + i - 1] if i else 0.0
        dl = th[5 + m + i - 1] if i and self.data_multipliers else 0.0
        e, a, al, b, be = th[:5]
        return float(np.exp(np.logaddexp.reduce([e, a - al * (math.log(n) + k), b - be * (math.log(d) + dl)])))

    def extrapolation(self, n: float, d: float) -> float:
        """How far (N, D) lies outside the rungs (module note): 1 inside them."""
        return max(n / self.n_range[1], self.n_range[0] / n, d / self.d_range[1], self.d_range[0] / d, 1.0)

    def span(self) -> float:
        return min(self.n_range[1] / self.n_range[0], self.d_range[1] / self.d_range[0])

    def check(self, recipe: str, n: float, d: float) -> None:
        """Raise one line (FitError) for a recipe the fit lacks, a bad N or D, or an extrapolation its rungs do not
        span (the rule in the module note)."""
        if recipe not in self.recipes:
            raise FitError(f"recipe {recipe!r} is not in the fit{did_you_mean(recipe, self.recipes)}; recipes fitted: "
                           f"{list(self.recipes)}")
        for name, v in (("params", n), ("tokens", d)):
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise FitError(f"--{name}={v!r} is invalid; valid: a positive number, e.g. 1e9")
        f, s = self.extrapolation(n, d), self.span()
        if math.log(f) > MAX_DECADES_PER_DECADE * math.log(s) + 1e-12:
            raise FitError(f"N={n:.3g}, D={d:.3g} is {f:.3g}x beyond the fit's rungs (N {self.n_range[0]:.3g}-"
                           f"{self.n_range[1]:.3g}, D {self.d_range[0]:.3g}-{self.d_range[1]:.3g}, span {s:.3g}x); "
                           f"rungs spanning {s:.3g}x license at most {s ** MAX_DECADES_PER_DECADE:.3g}x "
                           f"({MAX_DECADES_PER_DECADE} decades per decade spanned): fit a ladder with a wider span")

    def predict(self, recipe: str, n: float, d: float) -> dict[str, Any]:
        """Predicted loss of `recipe` and of the baseline at (N, D), the gap, each with its interval, and the
        extrapolation factor (check() first)."""
        self.check(recipe, n, d)
        th = np.asarray(self.theta)
        q = (1 - self.level) / 2
        lr = np.array([self._loss(np.asarray(t), recipe, n, d) for t in self.draws])
        lb = np.array([self._loss(np.asarray(t), self.baseline, n, d) for t in self.draws])
        gap = lr - lb
        return {"recipe": recipe, "n_params": n, "tokens": d, "level": self.level,
                "loss": self._loss(th, recipe, n, d), "loss_lo": float(np.quantile(lr, q)),
                "loss_hi": float(np.quantile(lr, 1 - q)), "baseline": self.baseline,
                "baseline_loss": self._loss(th, self.baseline, n, d),
                "gap": self._loss(th, recipe, n, d) - self._loss(th, self.baseline, n, d),
                "gap_lo": float(np.quantile(gap, q)), "gap_hi": float(np.quantile(gap, 1 - q)),
                "extrapolation": self.extrapolation(n, d)}

    # -- files
    def to_json(self) -> str:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        return json.dumps(d, indent=1, default=float)

    @classmethod
    def from_json(cls, text: str) -> "ScalingFit":
        d = json.loads(text)
        d["recipes"], d["n_range"], d["d_range"] = tuple(d["recipes"]), tuple(d["n_range"]), tuple(d["d_range"])
        return cls(**d)


def ladder_runs(index: pd.DataFrame, value: str = "final_val_loss") -> tuple[pd.DataFrame, list[str]]:
    """The runs of a ladder study's index (study.csv) a fit uses, as columns FIT_COLUMNS (+ seed), and notes on what
    was left out: runs not completed (diverged, failed, did_not_learn, pending) and the lr checks (lr_factor != 1)."""
    need = ("recipe", "n_params", "tokens", value, "status")
    missing = [c for c in need if c not in index.columns]
    if missing:
        raise FitError(f"the index has no column(s) {missing}: not a ladder study's study.csv (a study file with a "
                       f"`ladder:` section writes n_params and tokens)")
    notes = []
    ok = index[index.status == "completed"]
    if len(ok) < len(index):
        notes.append(f"{len(index) - len(ok)} run(s) left out: " + ", ".join(
            f"{k} {v}" for k, v in index[index.status != "completed"].status.value_counts().items()))
    if "lr_factor" in ok:
        checks = ok.lr_factor.fillna(1.0) != 1.0
        if checks.any():
            notes.append(f"{int(checks.sum())} lr-check run(s) not fitted")
        ok = ok[~checks]
    frame = ok.rename(columns={value: "loss"})[[*FIT_COLUMNS, *(["seed"] if "seed" in ok else [])]]
    return frame.reset_index(drop=True), notes


def _design(frame: pd.DataFrame, baseline: str, data_multipliers: bool) -> tuple[_Design, list[str], pd.DataFrame]:
    """The runs of `frame` as a _Design (recipes: the baseline first), refusing in one line (FitError) what no fit
    can use: no baseline runs, fewer than 2 sizes or 2 tokens-per-parameter budgets, a non-positive loss."""
    missing = [c for c in FIT_COLUMNS if c not in frame.columns]
    if missing:
        raise FitError(f"the runs have no column(s) {missing}; need {FIT_COLUMNS}")
    frame = frame.dropna(subset=list(FIT_COLUMNS))
    recipes = list(dict.fromkeys(frame.recipe))
    if baseline not in recipes:
        raise FitError(f"baseline {baseline!r} has no runs; recipes with runs: {recipes}")
    recipes = [baseline, *[r for r in recipes if r != baseline]]
    sizes, budgets = frame.n_params.nunique(), (frame.tokens / frame.n_params).round(6).nunique()
    if sizes < 2 or budgets < 2:
        raise FitError(f"the runs hold {sizes} size(s) and {budgets} tokens-per-parameter budget(s); a fit of "
                       f"L(N, D) = E + A N^-α + B D^-β needs >= 2 of each")
    if (frame.loss <= 0).any():
        raise FitError(f"a loss <= 0 in the runs ({frame.loss.min()!r}); losses are cross-entropies in nats")
    which = frame.recipe.map({r: i for i, r in enumerate(recipes)}).to_numpy()
    des = _Design(np.log(frame.n_params.to_numpy(float)), np.log(frame.tokens.to_numpy(float)),
                  np.log(frame.loss.to_numpy(float)), which, len(recipes), data_multipliers)
    return des, recipes, frame


def _stack(designs: list[_Design]) -> tuple[_Design, np.ndarray]:
    """One _Design of several data sets of one shape (their runs end to end) and each one's first run."""
    offsets = np.cumsum([0, *(len(d.x) for d in designs[:-1])])
    cat = [np.concatenate([getattr(d, k) for d in designs]) for k in ("x", "y", "logl", "r")]
    return _Design(*cat, designs[0].n_recipes, designs[0].data_multipliers), offsets


def _fit_many(designs: list[_Design], n_boot: int, seeds: list[int], delta: float,
              chunk: int = 4000) -> list[tuple[np.ndarray, np.ndarray]]:
    """(theta, bootstrap draws (n_boot, p)) of each design: the best of its N_STARTS grid starts after IRLS,
    polished by L-BFGS, then n_boot resamples (runs with replacement within each recipe, rng seeded by its seed)
    refitted from it. The designs (each one data set; fit_scaling_law passes one, `coverage` many) are fitted
    together, IRLS rows in chunks of `chunk`."""
    big, offsets = _stack(designs)

    def irls(th0: np.ndarray, idx: np.ndarray, tol: float) -> np.ndarray:
        return np.concatenate([_irls(big, th0[i:i + chunk], idx[i:i + chunk], delta, tol=tol)
                               for i in range(0, len(th0), chunk)]) if len(th0) else th0

    starts = [_grid_starts(d, delta, N_STARTS) for d in designs]
    idx0 = np.concatenate([np.broadcast_to(o + np.arange(len(d.x)), (len(st), len(d.x)))
                           for d, o, st in zip(designs, offsets, starts)])
    fits = irls(np.concatenate(starts), idx0, START_TOL)
    out = []
    at = 0
    boot_th, boot_idx = [], []
    for d, o, st, seed in zip(designs, offsets, starts, seeds):
        mine = fits[at:at + len(st)]
        at += len(st)
        theta = min(mine, key=lambda th: d.objective(th, delta))
        polished = _lbfgs(d, theta, delta)
        if d.objective(polished, delta) < d.objective(theta, delta):
            theta = polished
        rng = np.random.default_rng(seed)
        groups = [np.flatnonzero(d.r == i) for i in range(d.n_recipes)]
        idx = np.stack([np.concatenate([rng.choice(g, size=len(g), replace=True) for g in groups])
                        for _ in range(n_boot)]) if n_boot else np.zeros((0, len(d.x)), int)
        out.append(theta)
        boot_th.append(np.tile(theta, (n_boot, 1)))
        boot_idx.append(idx + o)
    draws = irls(np.concatenate(boot_th), np.concatenate(boot_idx), BOOT_TOL)
    return [(theta, draws[i * n_boot:(i + 1) * n_boot]) for i, theta in enumerate(out)]


def _make_fit(des: _Design, recipes: list[str], frame: pd.DataFrame, theta: np.ndarray, draws: np.ndarray,
              level: float, source: str = "", notes: list[str] | None = None) -> "ScalingFit":
    resid = des.batch(theta[None], np.arange(len(des.x))[None])[0][0]
    return ScalingFit(baseline=recipes[0], recipes=tuple(recipes), theta=theta.tolist(), draws=draws.tolist(),
                      data_multipliers=des.data_multipliers, level=level,
                      n_range=(float(frame.n_params.min()), float(frame.n_params.max())),
                      d_range=(float(frame.tokens.min()), float(frame.tokens.max())),
                      n_sizes=int(frame.n_params.nunique()),
                      n_budgets=int((frame.tokens / frame.n_params).round(6).nunique()), n_runs=len(frame),
                      resid_sd=float(np.std(resid, ddof=des.n_theta)) if len(resid) > des.n_theta else 0.0,
                      source=source, notes=list(notes or []))


def fit_scaling_law(frame: pd.DataFrame, baseline: str = "hp", *, n_boot: int = N_BOOT, level: float = LEVEL,
                    data_multipliers: bool = False, seed: int = 0, delta: float = HUBER_DELTA, source: str = "",
                    notes: list[str] | None = None) -> ScalingFit:
    """Fit the law to `frame` (columns FIT_COLUMNS: one row per run, losses in nats), bootstrap `n_boot` refits.
    Refused in one line (FitError): no baseline runs, fewer than 2 sizes or 2 token budgets, a non-positive loss."""
    des, recipes, frame = _design(frame, baseline, data_multipliers)
    (theta, draws), = _fit_many([des], n_boot, [seed], delta)
    return _make_fit(des, recipes, frame, theta, draws, level, source, notes)


def coverage(true: Mapping[str, Any], sizes: list[float], tpp: list[float], recipes: list[str], seeds: int,
             sigma: float, n_sims: int, n_boot: int, level: float = LEVEL, seed: int = 0) -> pd.DataFrame:
    """How often the fit's `level` intervals cover the true parameters: n_sims synthetic ladders drawn from `true`
    (synthetic_ladder), each fitted as fit_scaling_law fits (the same _fit_many, all sims at once). One row per
    parameter: coverage and its Monte-Carlo sd sqrt(level (1 - level) / n_sims)."""
    rng = np.random.default_rng(seed)
    sims = [_design(synthetic_ladder(true, sizes, tpp, recipes, seeds, sigma, rng), recipes[0], False)
            for _ in range(n_sims)]
    fits = _fit_many([d for d, _, _ in sims], n_boot, [seed + 1 + i for i in range(n_sims)], HUBER_DELTA)
    truth = {"E": true["E"], "A": true["A"], "alpha": true["alpha"], "B": true["B"], "beta": true["beta"],
             **{f"kappa[{r}]": true["kappa"][r] for r in recipes[1:]}}
    hits = {k: 0 for k in truth}
    for (des, recs, frame), (theta, draws) in zip(sims, fits):
        p = _make_fit(des, recs, frame, theta, draws, level).params().set_index("param")
        for k, v in truth.items():
            hits[k] += bool(p.lo[k] <= v <= p.hi[k])
    mc = math.sqrt(level * (1 - level) / n_sims)
    return pd.DataFrame({"param": list(truth), "true": list(truth.values()),
                         "coverage": [hits[k] / n_sims for k in truth], "mc_sd": mc, "n_sims": n_sims})


def fit_study(study_dir: str | Path, baseline: str = "hp", **kw: Any) -> ScalingFit:
    """The fit of a ladder study's directory (its study.csv)."""
    index_path = Path(study_dir) / "study.csv"
    if not index_path.is_file():
        raise FitError(f"--fit {study_dir}: no study.csv there; valid: a ladder study's directory (after `altgrad "
                       f"study -f params/studies/cpu_ladder.yaml`) or a fit .json file")
    frame, notes = ladder_runs(pd.read_csv(index_path))
    return fit_scaling_law(frame, baseline, source=str(index_path), notes=notes, **kw)


def load_fit(where: str | Path, **kw: Any) -> ScalingFit:
    """A fit from a .json file (ScalingFit.to_json) or fitted from a ladder study's directory."""
    p = Path(where)
    if p.suffix == ".json":
        if not p.is_file():
            raise FitError(f"fit file {p} does not exist; valid: a fit .json file or a ladder study's directory")
        return ScalingFit.from_json(p.read_text())
    return fit_study(p, **kw)


def holdout_check(frame: pd.DataFrame, baseline: str = "hp", **kw: Any) -> pd.DataFrame:
    """Fit on every size but the largest, predict the largest: per recipe and token budget at the largest size, the
    observed mean loss over its runs, the prediction, its error, and whether the `level` interval covered the
    observed mean. The interval is the bootstrap interval of the law's loss widened by the runs' own noise: each draw
    adds the mean of n resampled residuals of the fit (n = the runs averaged), so it is an interval for an observed
    mean, not for the law's mean alone. Extrapolation beyond the smaller fit follows the fit's rule (check())."""
    n_max = frame.n_params.max()
    small = frame[frame.n_params < n_max]
    fit = fit_scaling_law(small, baseline, **kw)
    rng = np.random.default_rng(kw.get("seed", 0) + 1)
    th = np.asarray(fit.theta)
    fitted = np.array([fit._loss(th, r, n, d) for r, n, d in small[["recipe", "n_params", "tokens"]].itertuples(
        index=False)])
    resid = np.log(small.loss.to_numpy(float)) - np.log(fitted)
    q = (1 - fit.level) / 2
    rows = []
    for (r, d), g in frame[frame.n_params == n_max].groupby(["recipe", "tokens"], sort=False):
        obs = float(g.loss.mean())
        pred = fit._loss(th, r, n_max, d)
        noise = rng.choice(resid, size=(len(fit.draws), len(g))).mean(axis=1)
        draws = np.array([fit._loss(np.asarray(t), r, n_max, d) for t in fit.draws]) * np.exp(noise)
        lo, hi = float(np.quantile(draws, q)), float(np.quantile(draws, 1 - q))
        rows.append({"recipe": r, "n_params": n_max, "tokens": d, "n_runs": len(g), "observed": obs,
                     "predicted": pred, "error": pred - obs, "lo": lo, "hi": hi, "covered": lo <= obs <= hi,
                     "extrapolation": fit.extrapolation(n_max, d)})
    return pd.DataFrame(rows)


def predict_lines(fit: ScalingFit, recipe: str, n: float, d: float) -> list[str]:
    """What `altgrad predict` prints: the recipe's loss and the baseline's, the gap with its interval, the
    extrapolation factor and, past WARN_FACTOR, a warning."""
    p = fit.predict(recipe, n, d)
    pct = f"{round(100 * fit.level)} %"
    lines = [f"fit: {fit.source or 'given'} ({fit.n_runs} runs, {fit.n_sizes} sizes N {fit.n_range[0]:.3g}-"
             f"{fit.n_range[1]:.3g}, {fit.n_budgets} budgets D {fit.d_range[0]:.3g}-{fit.d_range[1]:.3g}; "
             f"{len(fit.draws)} bootstrap refits)",
             f"{recipe} at N={n:.3g} params, D={d:.3g} tokens: loss {p['loss']:.4f} nats ({pct} interval "
             f"{p['loss_lo']:.4f} to {p['loss_hi']:.4f})",
             f"{fit.baseline}: loss {p['baseline_loss']:.4f} nats; gap {recipe} - {fit.baseline} = {p['gap']:+.4f} "
             f"nats ({pct} interval {p['gap_lo']:+.4f} to {p['gap_hi']:+.4f})",
             f"extrapolation: {p['extrapolation']:.3g}x beyond the largest rung"
             if p["extrapolation"] > 1 else "extrapolation: none (inside the fit's rungs)"]
    if p["extrapolation"] > WARN_FACTOR:
        lines.append(f"warning: {p['extrapolation']:.3g}x beyond the rungs (> {WARN_FACTOR:g}x): the interval "
                     f"covers the fit's noise, not whether the law holds that far; see the held-out check")
    return lines


def synthetic_ladder(true: Mapping[str, Any], sizes: list[float], tpp: list[float], recipes: list[str], seeds: int,
                     sigma: float, rng: np.random.Generator) -> pd.DataFrame:
    """Losses drawn from a known law (true: E, A, alpha, B, beta, kappa {recipe: κ}, optionally delta {recipe: δ})
    with log-normal run noise of sd `sigma`: the test oracle of the fit (tests/test_scaling_law.py)."""
    rows = []
    for n in sizes:
        for t in tpp:
            for r in recipes:
                k, dm = true["kappa"].get(r, 1.0), true.get("delta", {}).get(r, 1.0)
                mean = true["E"] + true["A"] * (k * n) ** -true["alpha"] + true["B"] * (dm * t * n) ** -true["beta"]
                for s in range(seeds):
                    rows.append({"recipe": r, "n_params": n, "tokens": t * n, "seed": s,
                                 "loss": mean * math.exp(rng.normal(0.0, sigma))})
    return pd.DataFrame(rows)
