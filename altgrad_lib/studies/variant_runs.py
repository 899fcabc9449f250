"""A notebook's variants x seeds trained through the study layer (runs.run_points): `train_variants` and its result
`VariantRuns` ("<label> s<seed>" -> Run, with the (label, seed) of each key)."""
from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Mapping

import pandas as pd

from altgrad_lib.paths import outputs_dir
from altgrad_lib.studies.results import run_frame
from altgrad_lib.studies.runs import INDEX_FILE, StudyPoint, finished, run_points
from altgrad_lib.training.loop import train


def train_variants(cfg: Any, variants: Mapping[str, Mapping[str, Any]], seeds: Iterable[int], *,
                   study: str | None = None, executor: Any = None, only: Iterable[tuple[str, int]] | None = None,
                   **train_kwargs: Any) -> dict[str, Any]:
    """Train (or reuse) cfg with each variant's overrides for each seed; keys "<label> s<seed>". `only`: the
    (label, seed) pairs to train, a subset of variants x seeds (seeds until resolved: until_resolved.py).

    The runs still to train go through the study layer (runs.run_points): side by side on `executor`
    (default executors.auto_executor: on CPU one single-threaded worker per core), with an index
    `<outputs>/studies/<study>/study.csv` (columns label, seed, status, final numbers) when `study` names one,
    so notebook 06 reads a notebook's runs like any study. A run is keyed by its config (auto run name), so
    a baseline trained by notebook 02 or by a study is reused here, not retrained. A run that fails in a
    worker is trained again here, in this process, so its error surfaces where the notebook asked for it.
    """
    keyed = []
    wanted = None if only is None else {(str(lb), int(s)) for lb, s in only}
    for seed in seeds:
        for label, overrides in variants.items():
            if wanted is not None and (label, int(seed)) not in wanted:
                continue
            c = cfg.replace(seed=int(seed), **overrides).resolved()
            keyed.append((f"{label} s{seed}", StudyPoint(c.run_name, {"label": label, "seed": int(seed)}, c)))
    unique: dict[str, Any] = {}
    for _, p in keyed:                      # two labels with one config train it once (indexed under the first)
        unique.setdefault(p.name, p)
    points = list(unique.values())
    todo = {p.name for p in points if not finished(p.config)}
    if study or len(todo) > 1:
        index = outputs_dir() / "studies" / study / INDEX_FILE if study else None
        verbose = train_kwargs.get("verbose", True) or train_kwargs.get("progress", True)
        run_points(points, ["label", "seed"], index, executor, log=print if verbose or todo else (lambda *a: None),
                   name=study or "variants")
    runs = VariantRuns()
    for key, p in keyed:
        run = train(p.config, **train_kwargs)   # finished by now: loaded, not retrained
        runs[key] = dataclasses.replace(run, reused=p.name not in todo) if dataclasses.is_dataclass(run) else run
        runs.labels[key] = (p.axes["label"], p.axes["seed"])
    return runs


class VariantRuns(dict):
    """train_variants' result: "<label> s<seed>" -> Run, with `labels`: key -> (label, seed as an int), so nothing
    parses a key back. `frame()` is the tidy frame the claims work on; `run(label, seed)` one run."""

    def __init__(self, *args: Any, **kw: Any):
        super().__init__(*args, **kw)
        self.labels: dict[str, tuple[str, int]] = {}

    def run(self, label: str, seed: int) -> Any:
        return self[next(k for k, v in self.labels.items() if v == (label, int(seed)))]

    def of_seed(self, seed: int) -> dict[str, Any]:
        """label -> run of one seed (e.g. the curves of the first seed)."""
        return {lab: self[k] for k, (lab, s) in self.labels.items() if s == int(seed)}

    def frame(self, keys: Iterable[str] = ("recipe", "backend", "freeze_blocks", "optimizer")) -> pd.DataFrame:
        """results.run_frame plus `label`, int `seed`, `key` and `run_dir`, one row per run (results.run_frame's
        `run` is the run directory's name)."""
        keys = [k for k in keys if k != "seed"]
        f = run_frame(list(self.values()), keys=[*keys, "seed"])
        return f.assign(label=[self.labels[k][0] for k in self], seed=[self.labels[k][1] for k in self],
                        key=list(self), run_dir=[str(r.dir) for r in self.values()])
