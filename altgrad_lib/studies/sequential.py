"""Seeds until the question is answered: group-sequential claims (`altgrad study --until-resolved`).

A study runs its minimum number of seeds, computes the claims table, then adds seeds (the next seed numbers, `step`
at a time) to the configurations of the rows that are still open ("inconclusive") — with their baseline's seeds and
the frozen-blocks control's, since comparisons are paired by seed — until every row is worse / better / equivalent
or the maximum is reached. Looking at the data after every step and stopping when a row resolves would inflate the
error rates of claims.py's fixed-sample rules, so the verdicts here use group-sequential boundaries:

  looks          n_1 = min, min + step, ..., max seeds (the last look is max); information fraction t_k = n_k / max
  boundaries     gs_bounds.py: Lan & DeMets (1983) α-spending ("pocock", the default, or "obf"), the nominal p
                 bound of each look for the paired t-test (calibrated on the t statistics themselves), Holm over
                 the table's rows with those bounds for worse/better (Maurer & Bretz 2013, family-wise ≤ α), the
                 two one-sided TOST tests at one-sided bounds for equivalent (≤ α); its docstring has the details.
  verdicts       claims' own rules (verdicts.decide: smoke, "diverged in k/n seeds", too few seeds, the
                 frozen-blocks control, "state delta", the "(baseline diverged ...)" note) with its two tests the
                 sequential ones above, the family "pocock group-sequential Holm over m rows of <comparison>";
                 δ is absolute (claims.DELTA_NATS unless stated), the same at every look. The CI beside a
                 verdict is at the level of the bound it was held to (1 − p_bound; 1 − 2·p_bound_tost beside
                 "equivalent"), mde_nats the 80 %-power MDE at p_bound.
  stopping       a row whose variant is resolved gets no more seeds (non-binding: stopping only lowers the error);
                 open rows are inconclusive and too few seeds (verdicts.Kind.open); a look whose control check fails
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
from typing import Any, Callable, Iterable, Mapping

import numpy as np
import pandas as pd

from altgrad_lib.io import write_csv
from altgrad_lib.studies import claims
from altgrad_lib.studies.claims import SEQUENTIAL, positive_control_state
from altgrad_lib.studies.paired_stats import ALPHA, SD_CONFIDENCE, ci_at, verdict_mde
from altgrad_lib.studies.gs_bounds import SPENDING, holm_bounds, nominal_bounds, sequential_calls
from altgrad_lib.studies.verdicts import FAMILY_COLUMN, KIND_COLUMN, Kind, decide, words

SEED_PLAN_KEYS = ("min", "max", "step", "start", "spending")
SEQUENTIAL_FILE = "sequential.csv"


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


def is_open(kind: Kind | str) -> bool:
    """A row that more seeds could resolve: its verdict kind is inconclusive (with or without a δ) or too few seeds;
    a smoke test, a harm, "not training its blocks" are not (verdicts.Kind.open)."""
    return Kind.of(kind).open


def _judged(r: Mapping[str, Any], sig: bool, eq: bool, p_bound: float, p_bound_tost: float, alpha: float,
            lower_is_better: bool, family: str = "") -> dict[str, Any]:
    """One row's sequential verdict and the columns that depend on it. The verdict is claims.verdict's own rules
    (verdicts.decide: smoke, diverged, too few seeds, the frozen-blocks control, the baseline note, "state delta")
    with its two tests the group-sequential ones: `sig` (worse / better) and `eq` (equivalent).
    The CI is at the level of the bound the verdict was held to (1 − p_bound; 1 − 2·p_bound_tost beside
    "equivalent", TOST's CI at its one-sided bound; 95 % in a smoke test): it excludes 0 exactly when the look's p
    crossed. mde_nats is paired_stats.verdict_mde at that bound (one row at level p_bound, 80 % UCB of the sd): the
    smallest gap this look alone detects with 80 % power (the looks before it only add power)."""
    smoke = bool(r.get("smoke") is True)
    k = int(r.get("n_diverged") or 0)
    delta = float(r.get("delta_nats", math.nan))
    kind = decide(n=int(r["n"]), n_diverged=k, smoke=smoke, control_ok=False if r.get("control_ok") is False else None,
                  sig=sig, eq=eq, harmful=bool((r["gap_nats"] > 0) == lower_is_better), delta=delta)
    level = 0.95 if smoke else 1 - 2 * p_bound_tost if kind is Kind.EQUIVALENT else 1 - p_bound
    lo, hi = ci_at(r["gap_nats"], r.get("sd_nats", math.nan), r["n"], level)
    v = words(kind, n=int(r["n"]), n_seeds=int(r.get("n_seeds") or r["n"] + k), n_diverged=k,
              n_diverged_baseline=int(r.get("n_diverged_baseline") or 0), delta=delta,
              harm_bound=float(hi if lower_is_better else lo), lower_is_better=lower_is_better)
    out = {"verdict": v, KIND_COLUMN: kind.value, "ci_level": level, "ci_lo": float(lo), "ci_hi": float(hi),
           "mde_nats": verdict_mde(int(r["n"]), float(r.get("sd_nats", math.nan)), 1, p_bound)
           if p_bound > 0 else math.nan}
    if family:
        out[FAMILY_COLUMN] = family
    if str(r.get("positive_control", "")) != "":
        out["positive_control"] = positive_control_state(kind, smoke)
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
        what = str(out.loc[idx[0], family]) if family is not None and family in out else ""
        name = (f"{plan.spending} group-sequential Holm over {len(idx)} row{'' if len(idx) == 1 else 's'}"
                + (f" of {what}" if what else ""))
        sig, eq, div = sequential_calls(p2, pt, b2, bound1)
        for j, i in enumerate(idx):
            pb, pbt = float(b2[div[j] - 1, last[j]]), float(bound1[last[j]])
            upd = _judged(out.loc[i].to_dict(), bool(sig[j]), bool(eq[j]), pb, pbt, alpha, lower_is_better, name)
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
        open_rows = [r for r in table.to_dict("records") if is_open(r[KIND_COLUMN])]
        log += [{"look": look + 1, "n_seeds": looks[look], **{c: r[c] for c in ("comparison", "level") if c in r},
                 "n": r["n"], "seeds": r.get("seeds", ""), "gap_nats": r["gap_nats"], "p_paired": r["p_paired"],
                 "p_bound": r["p_bound"], "p_tost": r["p_tost"], "p_bound_tost": r["p_bound_tost"],
                 "verdict": r["verdict"], "adds_seeds": is_open(r[KIND_COLUMN]) and look + 1 < len(looks)}
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
    comps = {c.label: (c.axis, str(c.baseline), list(c.by_columns)) for c in study.comparisons}

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


def until_resolved(replay_at: Callable[[pd.DataFrame], Replay], run: Callable[[list[Candidate]], pd.DataFrame],
                   frame: pd.DataFrame | None = None, *, name: str = "",
                   on_look: Callable[[Replay, int], None] | None = None) -> tuple[Replay, pd.DataFrame]:
    """The seeds-until-resolved loop of a study (run_until_resolved) and of a notebook's variants
    (until_resolved.train_until_resolved): replay the looks on the runs that exist (`frame`: run, status, ...; none
    yet by default), run what the current state needs (`run(candidates)` trains or reuses them and returns the new
    frame), repeat until the replay is done. on_look(replay, n missing) before each round (a log line). Returns the
    final replay and frame; runs that are still missing after they were run are an error, never a loop."""
    frame = pd.DataFrame(columns=["run", "status"]) if frame is None else frame
    seen: set = set()
    while True:
        rep = replay_at(frame)
        if rep.done:
            return rep, frame
        names = frozenset(c.name for c in rep.missing)
        if names in seen:
            raise RuntimeError(f"{name + ': ' if name else ''}runs {sorted(names)[:3]} are still missing after they "
                               f"were run")
        seen.add(names)
        if on_look is not None:
            on_look(rep, len(names))
        frame = run(rep.need)


def run_until_resolved(study: Any, run: Callable[[list], pd.DataFrame], log: Callable[[str], None] = print,
                       frame: pd.DataFrame | None = None) -> pd.DataFrame:
    """Run `study` (with a seed_plan) until every row is resolved or its maximum (until_resolved; `frame`: e.g. the
    index of an interrupted run; `run(points)` trains or reuses them and returns the index). Writes sequential.csv;
    returns the index."""
    plan = study.seed_plan

    def on_look(rep: Replay, n: int) -> None:
        look = int(rep.looks.look.max()) + 1 if len(rep.looks) else 1
        log(f"{study.name}: look {look} of {len(plan.looks)}: {n} run(s) to add")

    rep, frame = until_resolved(lambda f: study_replay(study, f, plan), lambda need: run([c.point for c in need]),
                                frame, name=study.name, on_look=on_look)
    write_csv(study.dir / SEQUENTIAL_FILE, rep.looks)
    worst = len(study_candidates(study, plan)[0])
    log(f"{study.name}: resolved at {len(rep.need)} of {worst} runs (worst case); "
        f"looks in {study.dir / SEQUENTIAL_FILE}")
    return frame


def dry_run_lines(study: Any, plan: SeedPlan) -> tuple[list[str], list]:
    """What `--dry-run` prints for a sequential study, and the worst case's points (for the time estimate)."""
    worst = with_seeds(study, plan.seeds(plan.max)).check()
    at_min = with_seeds(study, plan.seeds(plan.min)).expand()
    return [plan.describe(),
            f"runs: {len(at_min)} at the minimum, {len(worst)} in the worst case (every row open to the last look); "
            "the estimate below is the worst case"], worst


__all__ = ["SEED_PLAN_KEYS", "SEQUENTIAL_FILE", "SeedPlan", "per_seed_points", "plan_for", "with_seeds",
           "is_open", "sequential_verdicts", "mark_smoke", "describe_sequential", "Candidate", "Replay", "replay",
           "study_candidates", "study_replay", "until_resolved", "run_until_resolved", "dry_run_lines"]
