"""Seeds until resolved for a notebook's variants (notebook 04's 4-bit section, notebook 05).

`train_until_resolved(cfg, variants, seeds, claims, smoke=...)` is `variant_runs.train_variants` + `sequential.replay`
keyed by label: with a seed plan ({min, max, step} or a sequential.SeedPlan) it trains every variant at the minimum
seeds, judges the claims with the group-sequential rule of studies/sequential.py (one Holm family per `comparison`,
or the whole table with family=None), then trains `step` more seeds for each open row's variant, its baseline (the
row's `baseline` column) and the frozen-blocks controls (variants with `freeze_blocks: true`), until no row is open
or the maximum is reached. With a list of seeds it trains them all and judges once (claims.py's fixed-sample rules).
Everything is replayed from the runs that exist, so re-executing a notebook reuses its runs and reaches the same
verdicts.

`claims(frame, smoke)` returns the claims rows (claims.claims_table, variants.reference_claims, or several stacked)
of a train_variants frame; `smoke(frame)` is the control check failing (e.g. `control_check(...)[1] is False`): such
a look gets no verdicts and adds no seeds.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

import pandas as pd

from altgrad_lib.io import write_csv
from altgrad_lib.paths import outputs_dir
from altgrad_lib.studies import claims as claims_lib
from altgrad_lib.studies.sequential import (SEQUENTIAL_FILE, Candidate, Replay, SeedPlan, describe_sequential, replay,
                                           until_resolved)
from altgrad_lib.studies.variant_runs import train_variants


@dataclass
class Resolved:
    """What train_until_resolved returns: the runs of the last look (variant_runs.VariantRuns), their frame, the claims
    (sequential verdicts with a plan), one row per (look, claims row) (empty without a plan), the plan."""
    runs: Any
    frame: pd.DataFrame
    claims: pd.DataFrame
    looks: pd.DataFrame = field(default_factory=pd.DataFrame)
    plan: SeedPlan | None = None

    def describe(self, table: pd.DataFrame | None = None) -> str:
        """The rules `table` (default: all the claims) was judged by: sequential.describe_sequential with a plan,
        else claims.describe."""
        table = self.claims if table is None else table
        return claims_lib.describe(table) if self.plan is None else describe_sequential(table, self.plan)

    @property
    def seeds(self) -> list[int]:
        """The seeds trained, in order (a variant may have fewer: its row resolved earlier)."""
        return sorted({int(s) for s in self.frame.seed})


def seed_plan(seeds: Any) -> SeedPlan | list[int]:
    """A notebook's `seeds` parameter: a list of seeds (fixed) or a mapping {min, max, step[, start, spending]}
    (seeds until resolved); one line naming the problem otherwise."""
    if isinstance(seeds, SeedPlan):
        return seeds
    if isinstance(seeds, Mapping):
        return SeedPlan.from_spec(seeds)
    out = list(seeds) if isinstance(seeds, (list, tuple)) else None
    if not out or any(not isinstance(s, int) or isinstance(s, bool) for s in out):
        raise ValueError(f"seeds={seeds!r}: give a non-empty list of integer seeds, e.g. [0, 1, 2], or a plan "
                         "{min: 3, max: 5, step: 1} (seeds until resolved)")
    return out


def all_seeds(seeds: Any) -> list[int]:
    """Every seed `seeds` may train (a plan's maximum): what a notebook checks before the first run trains."""
    plan = seed_plan(seeds)
    return plan.seeds(plan.max) if isinstance(plan, SeedPlan) else plan


def label_replay(index: pd.DataFrame, plan: SeedPlan, labels: Iterable[str], controls: Iterable[str],
                 claims: Callable[[pd.DataFrame, bool], pd.DataFrame],
                 smoke: Callable[[pd.DataFrame], bool] | None = None, family: str | None = "comparison") -> Replay:
    """sequential.replay keyed by label: `index` has run = "<label> s<seed>" (and label, seed, status, the value);
    an open row adds seeds to its level, its `baseline` and the `controls` labels."""
    seed_list = plan.seeds(plan.max)
    cands = [Candidate(f"{lb} s{s}", (lb,), i) for i, s in enumerate(seed_list) for lb in labels]
    others = {(str(lb),) for lb in controls}

    def involved(r: Mapping[str, Any]) -> tuple[set, set]:
        return {(str(r["level"]),)}, {(str(r["baseline"]),)} | others

    def row_key(r: Mapping[str, Any]) -> tuple:
        return str(r.get("comparison", "")), str(r["level"])

    return replay(index, plan, cands, claims, involved, row_key, smoke=smoke, family=family)


def train_until_resolved(cfg: Any, variants: Mapping[str, Mapping[str, Any]], seeds: Any,
                         claims: Callable[[pd.DataFrame, bool], pd.DataFrame], *,
                         smoke: Callable[[pd.DataFrame], bool] | None = None, family: str | None = "comparison",
                         study: str | None = None, **train_kwargs: Any) -> Resolved:
    """Train `variants` (label -> TrainConfig overrides, as train_variants) for `seeds` (a list, or a plan: module
    docstring) and judge them with `claims(frame, smoke)`; with a plan, `sequential.csv` (the looks) is written
    next to the study's index when `study` names one. `train_kwargs` go to train_variants."""
    plan = seed_plan(seeds)
    if not isinstance(plan, SeedPlan):
        runs = train_variants(cfg, variants, plan, study=study, **train_kwargs)
        frame = runs.frame()
        return Resolved(runs, frame, claims(frame, bool(smoke(frame)) if smoke is not None else False))
    seed_list = plan.seeds(plan.max)
    controls = [lb for lb, o in variants.items() if o.get("freeze_blocks")]
    last: dict[str, Any] = {"runs": None, "frame": pd.DataFrame()}

    def run(need: list[Candidate]) -> pd.DataFrame:
        last["runs"] = train_variants(cfg, variants, seed_list, study=study,
                                      only=[(c.key[0], seed_list[c.index]) for c in need], **train_kwargs)
        last["frame"] = frame = last["runs"].frame()
        return frame.assign(run=frame.key)   # the replay knows a run by its key "<label> s<seed>"

    rep, _ = until_resolved(lambda index: label_replay(index, plan, list(variants), controls, claims, smoke, family),
                            run, name=study or "")
    if study:
        write_csv(outputs_dir() / "studies" / study / SEQUENTIAL_FILE, rep.looks)
    return Resolved(last["runs"], last["frame"], rep.table, rep.looks, plan)


__all__ = ["Resolved", "seed_plan", "all_seeds", "label_replay", "train_until_resolved"]
