"""Stability envelopes: the largest learning rate a recipe trains at for N steps, and how it moves with warmup,
batch size or any other TrainConfig field.

Every trial is an ordinary `train()` run: resumable, and reused when it already exists, because its run_name is
derived from the config (`trial_config`: "env-lr<lr>-<recipe>-s<seed>-<config hash>"). Re-running a search or a
sweep therefore trains only the trials it has not seen.

Stability criterion (`Criterion`, applied by `trial_verdict`) — a trial is *stable* iff
  1. it did not diverge: no non-finite loss, gradient or validation loss (train()'s divergence record);
  2. its loss never blew up: no train loss reached `max_spike` (2) × the lowest train loss logged before it —
     "the loss doubled", the same event bench/early_warning.py times (`first_spike`); a run that spikes and
     recovers still counts as unstable, because at that lr it did not train smoothly;
  3. it ended no worse than it started: final validation loss ≤ `max_over_initial` × the validation loss at
     step 0 (the same fixed validation batches, so batch noise cancels).
The verdict's `reason` says which rule failed first ("diverged", "loss_spike", "above_initial"), or "stable".
Rule 2 compares single-step train losses, so a very noisy loss could trip it; it needs a 2× jump, far above the
step-to-step noise of the CPU-sized runs (a few hundredths of a nat at 8 × 32 tokens per batch).

`find_stable_lr` bisects log(lr) between `lo` and `hi` assuming stability is monotone in lr (stable below a
critical lr, unstable above). Stability is not guaranteed to be monotone (noise, a lucky seed): every trial is in
the returned table, and the result names the bracket it found (largest stable / smallest unstable lr tried).
When the LR is scaled, min_lr is scaled with it (the schedule keeps its shape).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import pandas as pd

from altgrad_lib.numerics.formats import get_format
from altgrad_lib.studies.executors import LocalExecutor, auto_workers
from altgrad_lib.training.config import TrainConfig
from altgrad_lib.training.loop import train
from altgrad_lib.training.preflight import resolve_device

REASONS = ("stable", "diverged", "loss_spike", "above_initial")
TRIAL_COLUMNS = ["recipe", "seed", "lr", "stable", "reason", "status", "initial_loss", "final_train_loss",
                 "best_train_loss", "final_val_loss", "spike_step", "diverged_step", "run_name", "reused"]


@dataclass(frozen=True)
class Criterion:
    """When a finished trial counts as stable (see the module docstring)."""

    max_spike: float = 2.0         # a train loss ≥ this × the lowest train loss before it is a blow-up
    max_over_initial: float = 1.0  # final val loss ≤ this × step-0 val loss (same batches)
    tail: float = 0.2              # fraction of the last train losses averaged into final_train_loss (reported)

    def __post_init__(self) -> None:
        if not 0 < self.tail <= 1:
            raise ValueError(f"Criterion.tail={self.tail!r} must be in (0, 1]")
        if not (self.max_over_initial > 0 and self.max_spike > 1):
            raise ValueError(f"Criterion: need max_over_initial > 0 and max_spike > 1, got "
                             f"{self.max_over_initial!r}, {self.max_spike!r}")

    def short_str(self) -> str:
        return f"spike×{self.max_spike:g}/init×{self.max_over_initial:g}"


def first_spike(losses: Sequence[float] | pd.Series, ratio: float = 2.0) -> int | None:
    """Position (Series: index label, e.g. the step) of the first loss that is non-finite or ≥ ratio × the lowest
    loss before it; None if there is none."""
    items = losses.items() if isinstance(losses, pd.Series) else enumerate(losses)
    best = math.inf
    for key, v in items:
        if not math.isfinite(v) or v >= ratio * best:
            return int(key)
        best = min(best, v)
    return None


ROLE_TAGS = {"X": "input", "W": "weight", "dY": "grad_output"}   # tag -> QuantPolicy role, in name order


def role_recipe(spec: str | dict) -> str | dict:
    """A recipe from a short spec: "<FMT>@<tags>" quantizes the chosen operands of every Linear except lm_head in
    FMT, the rest high precision (tags from X, W, dY: "E5M2@W" weights only, "E4M3@XWdY" all three, as notebook
    04's recipes, named "<FMT>-<tags>"); anything else (a named recipe such as "hp" or "fmt:E5M2", a dict) is
    returned unchanged."""
    if not isinstance(spec, str) or "@" not in spec:
        return spec
    fmt, _, tags = spec.partition("@")
    get_format(fmt)   # validates the format name (one-line error listing the choices)
    roles, rest = [], tags
    while rest:
        tag = next((t for t in ROLE_TAGS if rest.startswith(t)), None)
        if tag is None or ROLE_TAGS[tag] in roles:
            raise ValueError(f"role_recipe: bad operand tags {tags!r} in {spec!r}; valid: a combination of "
                             f"{tuple(ROLE_TAGS)}, e.g. 'E5M2@W' or 'E4M3@XWdY'")
        roles.append(ROLE_TAGS[tag])
        rest = rest[len(tag):]
    if not roles:
        raise ValueError(f"role_recipe: no operand tags in {spec!r}; valid: a combination of {tuple(ROLE_TAGS)}")
    tag = "".join(t for t, r in ROLE_TAGS.items() if r in roles)
    return {"name": f"{fmt}-{tag}", "layers": {"*": {r: fmt for r in roles}, "lm_head": None}}


def trial_verdict(run: Any, criterion: Criterion = Criterion()) -> dict[str, Any]:
    """One trial's row: stable, reason, status and the losses the criterion used (NaN where undefined);
    initial_loss is the step-0 validation loss, spike_step the step of the first blow-up (None if none)."""
    m = run.metrics
    tl = m[m["name"] == "train/loss"].sort_values("step")
    train_loss = pd.Series(tl["value"].astype(float).to_numpy(), index=tl["step"].to_numpy())
    finite = train_loss[train_loss.map(math.isfinite)]
    val = m[(m["name"] == "val/loss") & (m["step"] == 0)]["value"]
    initial = float(val.iloc[0]) if len(val) else math.nan
    n_tail = max(1, int(round(criterion.tail * len(finite))))
    final = float(finite.iloc[-n_tail:].mean()) if len(finite) else math.nan
    best = float(finite.min()) if len(finite) else math.nan
    final_val = math.nan if run.final_val_loss is None else float(run.final_val_loss)
    spike = first_spike(finite, criterion.max_spike)
    if run.diverged or run.status != "completed":
        reason = "diverged"
    elif spike is not None:
        reason = "loss_spike"
    elif not final_val <= criterion.max_over_initial * initial:
        reason = "above_initial"
    else:
        reason = "stable"
    return {"stable": reason == "stable", "reason": reason, "status": run.status, "initial_loss": initial,
            "final_train_loss": final, "best_train_loss": best, "final_val_loss": final_val, "spike_step": spike,
            "diverged_step": (run.divergence or {}).get("step"), "run_name": run.dir.name,
            "reused": bool(getattr(run, "reused", False))}


def trial_config(config: TrainConfig, lr: float | None = None, **changes: Any) -> TrainConfig:
    """The config of one trial: `config` with lr (min_lr scaled by the same factor) and other fields changed, and
    a run_name derived from the result: the same trial always lands in (and reuses) the same run directory."""
    d = config.to_dict()
    d.update(changes)
    if lr is not None:
        d["min_lr"] = d["min_lr"] * lr / d["lr"]
        d["lr"] = float(lr)
    d["run_name"] = ""
    cfg = TrainConfig.from_dict(d)
    return cfg.replace(run_name=f"env-lr{cfg.lr:.4g}-{cfg.auto_run_name()}")


RunFn = Callable[[TrainConfig], Any]


def _train(cfg: TrainConfig) -> Any:
    return train(cfg, progress=False, verbose=False)


def run_trial(config: TrainConfig, lr: float, criterion: Criterion = Criterion(), run_fn: RunFn = _train,
              **changes: Any) -> dict[str, Any]:
    """Train (or reuse) one trial and return its tidy row (TRIAL_COLUMNS plus the changed fields)."""
    cfg = trial_config(config, lr, **changes)
    row = {"recipe": cfg.recipe_name, "seed": cfg.seed, "lr": cfg.lr, **changes,
           **trial_verdict(run_fn(cfg), criterion)}
    return row


@dataclass(frozen=True)
class StableLR:
    """Result of find_stable_lr: the bracket [lr_stable, lr_unstable] and every trial (tidy table)."""

    lr_stable: float | None      # largest lr found stable (None: even lo was unstable)
    lr_unstable: float | None    # smallest lr found unstable (None: even hi was stable)
    trials: pd.DataFrame

    @property
    def lr_critical(self) -> float:
        """Geometric middle of the bracket (the critical-lr estimate); NaN when the bracket is open."""
        if self.lr_stable is None or self.lr_unstable is None:
            return math.nan
        return math.sqrt(self.lr_stable * self.lr_unstable)

    def short_str(self) -> str:
        def f(v):
            return "none" if v is None else f"{v:.3g}"

        return f"stable lr {f(self.lr_stable)} < critical ~{self.lr_critical:.3g} < unstable {f(self.lr_unstable)}"


def find_stable_lr(config: TrainConfig, lo: float, hi: float, steps: int | None = None, *, ratio: float = 1.5,
                   max_trials: int = 12, criterion: Criterion = Criterion(), run_fn: RunFn = _train,
                   **changes: Any) -> StableLR:
    """Bisect log(lr) in [lo, hi] for the largest lr whose `steps`-step run (default config.max_steps) is stable.

    Trials lo and hi first (lo unstable: lr_stable None; hi stable: lr_unstable None; the search stops), then the
    geometric middle of the bracket until lr_unstable / lr_stable ≤ ratio or max_trials runs were made.
    `changes` are other TrainConfig fields set on every trial (e.g. warmup_steps=0).
    """
    if not (0 < lo < hi) or ratio <= 1 or max_trials < 2:
        raise ValueError(f"find_stable_lr: need 0 < lo < hi, ratio > 1 and max_trials >= 2; got lo={lo!r}, "
                         f"hi={hi!r}, ratio={ratio!r}, max_trials={max_trials!r}")
    if steps is not None:
        changes["max_steps"] = steps
    rows: list[dict[str, Any]] = []

    def trial(lr: float) -> bool:
        rows.append(run_trial(config, lr, criterion, run_fn, **changes))
        return rows[-1]["stable"]

    lo_ok, hi_ok = trial(lo), trial(hi)
    good: float | None = None if not lo_ok else (hi if hi_ok else lo)
    bad: float | None = lo if not lo_ok else (None if hi_ok else hi)
    while good is not None and bad is not None and bad / good > ratio and len(rows) < max_trials:
        mid = float(f"{math.sqrt(good * bad):.4g}")    # 4 digits: stable trial names, no float noise
        if not good < mid < bad:
            break
        if trial(mid):
            good = mid
        else:
            bad = mid
    return StableLR(good, bad, _table(rows))


def _bisect_job(job: tuple[str, TrainConfig, float, float, dict[str, Any]]) -> StableLR:
    """One label's bisection in a worker process (module-level: the executor pickles it by reference)."""
    _, config, lo, hi, kw = job
    return find_stable_lr(config, lo, hi, **kw)


def _default_workers(bases: Mapping[str, TrainConfig]) -> int:
    """executors.auto_workers' rule (ALTGRAD_WORKERS, else one per core on CPU, one on a GPU), for the device of
    any base not on CPU, at most one worker per label: a worker runs one label's whole bisection."""
    device = next((d for d in (resolve_device(c.device) for c in bases.values()) if not d.startswith("cpu")), "cpu")
    return min(len(bases), auto_workers(len(bases), device))


def find_stable_lrs(bases: Mapping[str, TrainConfig], lo: float, hi: float, steps: int | None = None, *,
                    max_trials: int = 12, executor: Any = None, **kw: Any) -> dict[str, StableLR]:
    """`find_stable_lr` for each labelled base config (e.g. one per format), the bisections side by side: each
    worker of `executor` (default: min(len(bases), executors.auto_workers) workers, `_default_workers`) runs one
    label's whole bisection. Same trials, same runs and same results as calling find_stable_lr per label (the
    trials of one bisection depend only on its own earlier trials). Returns {label: StableLR} in the order of
    `bases`; a bisection that raises stops with its label and one-line error. `kw`: ratio, criterion, run_fn (a
    module-level function when the executor spawns processes) and TrainConfig changes, as find_stable_lr."""
    if not bases:
        return {}
    if executor is None:
        executor = LocalExecutor(workers=_default_workers(bases))
    jobs = [(label, cfg, lo, hi, {"steps": steps, "max_trials": max_trials, **kw}) for label, cfg in bases.items()]
    out: dict[str, StableLR] = {}
    for (label, *_), outcome in executor.map(_bisect_job, jobs):
        if not outcome.ok:
            raise RuntimeError(f"find_stable_lrs: the bisection of {label!r} failed: {outcome.error}")
        out[label] = outcome.value
    return {label: out[label] for label in bases}


def _table(rows: list[dict[str, Any]]) -> pd.DataFrame:
    df = pd.DataFrame(rows)
    extra = [c for c in df.columns if c not in TRIAL_COLUMNS]
    return df[[c for c in TRIAL_COLUMNS if c in df.columns] + extra]


def lr_sweep(config: TrainConfig, lrs: Sequence[float], criterion: Criterion = Criterion(), run_fn: RunFn = _train,
             **changes: Any) -> pd.DataFrame:
    """One trial per lr: the tidy trial table (the points of an lr-vs-final-loss curve)."""
    return _table([run_trial(config, lr, criterion, run_fn, **changes) for lr in lrs])


def lr_sensitivity(config: TrainConfig, axis: str, values: Sequence[Any], lrs: Sequence[float],
                   criterion: Criterion = Criterion(), run_fn: RunFn = _train) -> pd.DataFrame:
    """The lr sweep repeated for each value of one TrainConfig field (e.g. axis="warmup_steps" or "batch_size"):
    a tidy table with one row per (value, lr) trial; `sensitivity_summary` condenses it."""
    if axis not in TrainConfig.keys() or axis in ("lr", "run_name", "out_dir"):
        valid = [k for k in TrainConfig.keys() if k not in ("lr", "run_name", "out_dir")]
        raise ValueError(f"lr_sensitivity: axis={axis!r} is not a TrainConfig field to vary; valid: {valid}")
    return pd.concat([lr_sweep(config, lrs, criterion, run_fn, **{axis: v}) for v in values], ignore_index=True)


def sensitivity_summary(trials: pd.DataFrame, axis: str) -> pd.DataFrame:
    """Per axis value: best final validation loss, the largest stable lr of the grid, and Wortsman et al.'s lr
    sensitivity — the mean over the grid's lrs of (min(final val loss, initial loss) − best); an unstable trial
    counts at its initial (step-0 validation) loss. 0 = every lr reaches the best loss; large = a narrow basin."""
    out = []
    for v, g in trials.groupby(axis, sort=True):
        capped = [min(f, i) if s else i for f, i, s in zip(g["final_val_loss"], g["initial_loss"], g["stable"])]
        best = min(capped)
        stable = g[g["stable"]]
        out.append({axis: v, "best_final_loss": best,
                    "max_stable_lr": float(stable["lr"].max()) if len(stable) else math.nan,
                    "lr_sensitivity": sum(c - best for c in capped) / len(capped), "n_trials": len(g),
                    "n_stable": int(g["stable"].sum())})
    return pd.DataFrame(out)


def critical_lr_table(config: TrainConfig, recipes: Sequence[str | dict], seeds: Sequence[int], lo: float, hi: float,
                      **kw: Any) -> pd.DataFrame:
    """find_stable_lr per (recipe, seed): one row each (recipe, seed, lr_stable, lr_unstable, lr_critical,
    n_trials); group by recipe for the spread over seeds."""
    rows = []
    for recipe in recipes:
        for seed in seeds:
            res = find_stable_lr(config.replace(recipe=recipe, seed=seed), lo, hi, **kw)
            rows.append({"recipe": res.trials["recipe"].iloc[0], "seed": seed, "lr_stable": res.lr_stable,
                         "lr_unstable": res.lr_unstable, "lr_critical": res.lr_critical,
                         "n_trials": len(res.trials)})
    return pd.DataFrame(rows)


__all__ = ["role_recipe", "ROLE_TAGS", "Criterion", "StableLR", "trial_verdict", "trial_config", "run_trial",
           "find_stable_lr", "find_stable_lrs", "lr_sweep", "lr_sensitivity", "sensitivity_summary",
           "critical_lr_table", "REASONS", "TRIAL_COLUMNS"]
