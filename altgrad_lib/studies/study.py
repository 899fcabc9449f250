"""Studies: one base config, axes to vary, every run trained once, one index of what came out.

A study file (`params/studies/*.yaml`):

    name: ci_formats                      # the index goes to <outputs>/studies/<name>/study.csv
    base: ../02_bf16_baseline/cpu.yaml    # optional TrainConfig YAML, relative to this file
    config: {max_steps: 40, n_layer: 1}   # optional inline TrainConfig keys on top of `base`
    axes:                                 # cartesian product, in this order
      recipe: [bf16, fp8_hybrid]
      seed: [0, 1]
    points:                               # optional extra runs (axis values of their own), e.g. a control
      - {recipe: bf16, freeze_blocks: true, seed: 0}
    comparisons:                          # optional: what the claims table compares (claims.claims_table)
      - {axis: recipe, baseline: bf16}    # + optional by (a list of other axes), value (final_val_loss or
                                          #   final_train_loss), delta (equivalence margin, nats), levels (only
                                          #   these levels against the baseline: one Holm family per comparison),
                                          #   name (the family's name, default "<axis> vs <baseline>"),
                                          #   paper ({level: what a paper found, PAPER_FINDINGS}) and source (which
                                          #   paper): recorded for a "paper says / AltGrad finds" table
    positive_controls: [E2M1-XWdY]        # optional: recipe levels that must come out "worse" (claims.py)

`ladder: {sizes: [[n_layer, n_embd], ...], tokens_per_param: [...], lr_rule, batch_rule, lr_check}` (ladder.py)
multiplies the axes by model sizes x token budgets: each rung sets the model shape, max_steps, lr and batch size,
and the index gains n_params, tokens and lr_factor for the scaling-law fit (scaling_law.py); a ladder with one size
or one budget is refused at load.

`seed: {min: 3, max: 8, step: 1}` instead of a list: seeds until resolved (sequential.py; `altgrad study
--until-resolved --max-seeds N` does the same for a list of consecutive seeds); a point without a seed then runs
at every seed of its configuration.

Every claim setting is checked when the study loads (so `--dry-run` shows it): each comparison is parsed once into a
frozen Comparison (comparison.py: its axis, baseline and levels as the index records them, its `by` columns, its
paper findings), and any setting the claims cannot use fails in one line, never after the runs trained. An axis
of dict values (optim: [{}, {storage: grid_sr}]) is recorded in the index as each value's canonical JSON.

Every point is a TrainConfig (axes override base). Its run name is `TrainConfig.auto_run_name()` (recipe,
optimizer and storage when set, `frozen` for the control, `s<seed>`, the first 8 hex digits of the config hash)
with the values of any other axis inserted before the seed, e.g. `fp8_hybrid-lr0.002-s1-3f2a9c1b`: stable
across expansions, and exactly the auto name when only recipe, seed, optimizer/optim or freeze_blocks vary, so a
study and a notebook that train the same config share one run directory (runs go to the base config's
`out_dir`, default `<outputs>/runs`).

A study owns its directory (`study.json`: its name and Study.identity, the hash of what it trains, seeds aside):
another study with the same name or --out is refused in one line before anything runs; the same study re-run (or
given more seeds) resumes.

A study's claims, control check and report (claims, control, report) are StudyClaims
(study_claims.py), mixed into Study. `run_study` trains a study's points through runs.run_points (runs.py: the
executor, reuse and resume, the index study.csv, interrupts); train_variants (variant_runs.py) does the same for a
notebook's variants.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import pandas as pd
import yaml

from altgrad_lib.choices import unalias_recipe
from altgrad_lib.paths import SLUG_CHARS, outputs_dir, slug
from altgrad_lib.studies import owner
from altgrad_lib.studies.ladder import LADDER_COLUMNS, Ladder
from altgrad_lib.studies.comparison import Comparison
from altgrad_lib.studies.runs import INDEX_FILE, StudyPoint, axis_value, check_points, index_values, run_points
from altgrad_lib.studies.sequential import SeedPlan, per_seed_points, run_until_resolved
from altgrad_lib.studies.study_claims import StudyClaims
from altgrad_lib.training.config import NON_RESULT_FIELDS, TrainConfig

STUDY_KEYS = ("name", "base", "config", "axes", "points", "comparisons", "positive_controls", "description", "ladder")


def _same(a: Any, b: Any) -> bool:
    """Equal and of one type (so 1 and True, both YAML values, are different axis values)."""
    return type(a) is type(b) and a == b


# axes that TrainConfig.auto_run_name() already spells out (or that never change numbers)
_AUTO_NAMED = {"recipe", "seed", "freeze_blocks", "optimizer", "optim"}


def run_name(axes: Mapping[str, Any], cfg: TrainConfig) -> str:
    """cfg.auto_run_name() with the values of the other axes inserted before `-s<seed>`, e.g.
    `hp-lr0.002-s1-3f2a9c1b`. A point that varies only recipe, seed, optimizer/optim or freeze_blocks gets
    exactly cfg.auto_run_name(), so a study and a notebook that train the same config share one run directory."""
    auto = cfg.auto_run_name()
    head, tail = auto.rsplit(f"-s{cfg.seed}-", 1)
    parts = []
    for k, v in axes.items():
        if k in _AUTO_NAMED or k in NON_RESULT_FIELDS:
            continue
        if isinstance(v, bool):
            parts.append(k if v else f"no_{k}")
        elif isinstance(v, str):
            parts.append(slug(v))
        elif isinstance(v, float):
            parts.append(f"{k}{v:g}")
        else:
            parts.append(slug(f"{k}{v}"))
    name = "-".join([head, *parts, f"s{cfg.seed}", tail])
    return name if len(name) <= 120 else f"{name[:100]}-{cfg.config_hash()[:8]}"


@dataclass(frozen=True)
class Study(StudyClaims):
    name: str
    base: dict[str, Any] = field(default_factory=dict)            # TrainConfig keys (base file + inline config)
    axes: dict[str, tuple] = field(default_factory=dict)
    points: tuple[dict[str, Any], ...] = ()
    comparisons: tuple[Comparison, ...] = ()   # given as mappings (a study file's), held parsed (comparison.py)
    positive_controls: tuple[str, ...] = ()                         # recipe levels that must come out worse
    description: str = ""
    out_dir: str = ""                                               # "" -> <outputs>/studies/<name>
    seed_plan: Any = None   # sequential.SeedPlan: seeds until resolved (`seed: {min, max, step}`, --until-resolved)
    source: str = ""                                                # the study file (from_yaml), for messages
    ladder: Any = None      # ladder.Ladder: sizes x token budgets, multiplying the axes (a scaling-law study)

    def __post_init__(self) -> None:
        if not self.name or not re.fullmatch(f"[{SLUG_CHARS}]+", self.name):   # its directory's name as written
            raise ValueError(f"Study.name={self.name!r} must be a non-empty plain name ([{SLUG_CHARS}])")
        valid = [k for k in TrainConfig.keys() if k not in ("run_name", "out_dir")]
        for k, vals in self.axes.items():
            if k not in valid:
                raise ValueError(f"study axis {k!r} is not a TrainConfig key; valid keys: {valid}")
            if not isinstance(vals, (list, tuple)) or not vals:
                raise ValueError(f"study axis {k!r} needs a non-empty list of values, got {vals!r}")
            twice = [v for i, v in enumerate(vals) if any(_same(v, w) for w in vals[:i])]
            if twice:
                raise ValueError(f"study axis {k!r} lists {twice[0]!r} twice; list each value once")
        for p in self.points:
            bad = sorted(set(p) - set(valid)) if isinstance(p, Mapping) else [repr(p)]
            if bad:
                raise ValueError(f"study point {p!r}: {bad} not TrainConfig key(s); valid keys: {valid}")
        for c in self.comparisons:   # what a comparison mapping must hold (a Comparison was checked at its load)
            if not isinstance(c, Comparison):
                Comparison.check_spec(c, self.axis_columns())
        if not self.axes and not self.points and self.ladder is None:
            raise ValueError(f"study {self.name!r} has no axes and no points: nothing to run")
        if self.ladder is not None:
            self.ladder.check_axes([*self.axes, *(k for p in self.points for k in p)])
        TrainConfig.from_dict(self.base)  # a bad base key fails here, naming the valid ones
        if self.comparisons:              # parsed and checked once, now, not after every run trained; a frozen
            # dataclass sets its own normalised field in __post_init__ (dataclasses' documented way)
            object.__setattr__(self, "comparisons", tuple(Comparison.parse(c, self) for c in self.comparisons))
            labels = [c.label for c in self.comparisons]
            twice = sorted({lb for lb in labels if labels.count(lb) > 1})
            if twice:   # one name = one Holm family: two comparisons under one name would be judged as one
                raise ValueError(f"study comparisons: {twice} name(s) more than one comparison; give each its own "
                                 f"`name` (the Holm family's name), e.g. name: 'formats vs hp'")
        names = _recipe_names(self.axes.get("recipe", ()), [p.get("recipe") for p in self.points if "recipe" in p],
                              self.base.get("recipe", "hp"))
        unknown = [pc for pc in self.positive_controls if pc not in names]
        if unknown:
            raise ValueError(f"study positive_controls {unknown} are not recipe levels of the study; levels: {names}")
        if self.positive_controls and not any(c.axis == "recipe" for c in self.comparisons):
            raise ValueError("study positive_controls need a comparison on the recipe axis, e.g. "
                             "{axis: recipe, baseline: hp}")

    def _as_recorded(self, axis: str, value: Any) -> Any:
        """A value of `axis` as the index records it (a recipe under its canonical name: 'bf16' -> 'hp'), or the
        value itself when it is not valid (then it matches no level and the caller says so; `level` raises)."""
        if axis not in TrainConfig.keys():
            return value
        try:
            return axis_value(TrainConfig.from_dict({**self.base, axis: value}), axis)
        except ValueError:
            if isinstance(value, Mapping):   # valid only with another key (e.g. precision_schedule with a recipe)
                return json.dumps(value, sort_keys=True, default=str)   # as axis_value records it
            return value   # not a valid value: it matches no level, and the caller says so

    # -- construction
    @classmethod
    def from_dict(cls, d: Mapping[str, Any], base_dir: str | Path = ".", out_dir: str = "",
                  source: str = "") -> "Study":
        if not isinstance(d, Mapping):
            raise ValueError(f"a study must be a YAML mapping with keys {STUDY_KEYS}, got {type(d).__name__}")
        unknown = sorted(set(d) - set(STUDY_KEYS))
        if unknown:
            raise ValueError(f"unknown study key(s) {unknown}; valid keys: {STUDY_KEYS}")
        for key, kind, example in (("axes", Mapping, "{recipe: [hp, fp8_hybrid], seed: [0, 1]}"),
                                   ("config", Mapping, "{max_steps: 40}"),
                                   ("points", list, "[{recipe: hp, freeze_blocks: true, seed: 0}]"),
                                   ("comparisons", list, "[{axis: recipe, baseline: hp}]")):
            if d.get(key) is not None and not isinstance(d[key], kind):
                got = "a mapping" if isinstance(d[key], Mapping) else f"a {type(d[key]).__name__}"
                raise ValueError(f"study {key}: {d[key]!r} is {got}; it must be a "
                                 f"{'mapping' if kind is Mapping else 'list'}, e.g. {key}: {example}")
        base: dict[str, Any] = {}
        if d.get("base"):
            bp = Path(d["base"]) if Path(d["base"]).is_absolute() else Path(base_dir) / d["base"]
            if not bp.is_file():
                raise FileNotFoundError(f"study base config {bp} not found (paths are relative to the study file)")
            base.update(yaml.safe_load(bp.read_text()) or {})
        base.update(d.get("config") or {})
        axes = {k: tuple(v) if isinstance(v, list) else v for k, v in (d.get("axes") or {}).items()}
        points, plan = tuple(d.get("points") or ()), None
        if isinstance(axes.get("seed"), Mapping):   # seeds until resolved: the minimum's seeds (sequential.py)
            plan = SeedPlan.from_spec(axes["seed"])
            axes["seed"], points = tuple(plan.seeds(plan.min)), per_seed_points(points, plan)
        pcs = d.get("positive_controls") or ()
        if isinstance(pcs, str) or not all(isinstance(x, str) for x in pcs):
            raise ValueError(f"study positive_controls must be a list of recipe names, got {pcs!r}")
        return cls(name=str(d.get("name", "")), base=base, axes=axes, points=points,
                   comparisons=tuple(d.get("comparisons") or ()), positive_controls=tuple(pcs),
                   description=str(d.get("description", "")), out_dir=out_dir, seed_plan=plan, source=source,
                   ladder=Ladder.from_spec(d["ladder"]) if d.get("ladder") is not None else None)

    @classmethod
    def from_yaml(cls, path: str | Path, out_dir: str = "") -> "Study":
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"study file {path} not found")
        d = yaml.safe_load(path.read_text()) or {}
        if isinstance(d, Mapping) and "name" not in d:
            d = {**d, "name": path.stem}
        return cls.from_dict(d, base_dir=path.parent, out_dir=out_dir, source=str(path.resolve()))

    # -- views
    @property
    def dir(self) -> Path:
        return Path(self.out_dir).expanduser().resolve() if self.out_dir else outputs_dir() / "studies" / self.name

    @property
    def index_path(self) -> Path:
        return self.dir / INDEX_FILE

    def axis_columns(self) -> list[str]:
        """Index columns: the axes, the keys explicit points set, and always `seed` (statistics need it)."""
        cols = list(self.axes)
        if self.ladder is not None:    # a rung's size, budget and rule values, and its N and D for the fit
            cols += [c for c in LADDER_COLUMNS if c not in cols]
        for p in self.points:
            cols += [k for k in p if k not in cols]
        return cols if "seed" in cols else [*cols, "seed"]

    def expand(self) -> list[StudyPoint]:
        """Product points (axes order), then explicit points; an explicit point that repeats a run (same run name)
        is kept once, two axis values that are one config (aliases: 'bf16' and 'hp') are an error. Built once per
        Study (it is frozen; dataclasses.replace makes a new one): the checks at load, each comparison's levels and
        each look of a seeds-until-resolved replay ask for it again, and each point costs a TrainConfig."""
        if "_expanded" not in self.__dict__:
            object.__setattr__(self, "_expanded", self._expand())
        return list(self.__dict__["_expanded"])

    def _expand(self) -> list[StudyPoint]:
        combos = [dict(zip(self.axes, vals)) for vals in itertools.product(*self.axes.values())] if self.axes else []
        rungs: list[tuple[Any, dict[str, Any]]] = [(None, c) for c in combos]
        if self.ladder is not None:   # every rung x every combination of the axes, then the lr checks
            ladder_rungs = self.ladder.rungs(self.base)
            rungs = [(r, c) for r in ladder_rungs for c in (combos or [{}])]
            rungs += [(r, c) for r in self.ladder.lr_checks(ladder_rungs) for c in self._lr_check_combos(combos)]
        out: dict[str, StudyPoint] = {}
        for i, (rung, axes) in enumerate([*rungs, *[(None, dict(p)) for p in self.points]]):
            named = {**rung.axes(), **axes} if rung is not None else axes
            cfg = TrainConfig.from_dict({**self.base, **(rung.keys if rung is not None else {}), **axes})
            name = run_name(named, cfg)
            if i < len(rungs) and name in out:
                raise ValueError(f"study axes {out[name].axes} and {axes} are the same run {name} (one value under "
                                 f"two spellings, or a key that does not change the run); list each value once")
            cols = {**named, **rung.columns()} if rung is not None else named
            out.setdefault(name, StudyPoint(name, cols, cfg.replace(run_name=name)))
        return list(out.values())

    def _lr_check_combos(self, combos: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The combinations of the axes an lr check runs at: its recipe (default hp) at the study's first seed."""
        want = unalias_recipe(str(self.ladder.lr_check.get("recipe", "hp")))
        seed0 = self.axes["seed"][0] if self.axes.get("seed") else self.base.get("seed", 0)
        out = [c for c in (combos or [{}]) if c.get("seed", seed0) == seed0
               and TrainConfig.from_dict({**self.base, **c}).recipe_name == want]
        if self.ladder.lr_check and not out:
            raise ValueError(f"study ladder: lr_check recipe {want!r} is not a recipe of the study; recipes: "
                             f"{_recipe_names(self.axes.get('recipe', ()), self.base.get('recipe', 'hp'))}")
        return out

    def index_values(self, p: StudyPoint) -> dict[str, Any]:
        return index_values(p, self.axis_columns())

    def check(self) -> list[StudyPoint]:
        """The expanded points, each checked by `check_points` (what `--dry-run` prints)."""
        return check_points(self.expand())

    def short_str(self) -> str:
        sizes = " x ".join(f"{k}[{len(v)}]" for k, v in self.axes.items())
        rungs = f"ladder[{len(self.ladder.sizes)}x{len(self.ladder.tokens_per_param)}] x " if self.ladder else ""
        return f"Study({self.name}: {rungs}{sizes or '-'} + {len(self.points)} point(s) = {len(self.expand())} runs)"

    # -- ownership of the study directory: two different studies never share an index
    def identity(self) -> str:
        """sha256 of what this study trains: its name, base config, axes and points, less the seeds and the
        bookkeeping keys (NON_RESULT_FIELDS). Seeds are replicates (adding seeds keeps the study), comparisons,
        positive_controls and description are analysis (changing them re-analyses the same runs); any other
        change makes another study, which gets a directory of its own (claim_dir)."""
        drop = {*NON_RESULT_FIELDS, "seed"}

        def canon(v: Any) -> str:
            return json.dumps(v, sort_keys=True, default=str)

        design = {"name": self.name, "base": {k: v for k, v in self.base.items() if k not in drop},
                  "axes": {k: sorted(map(canon, vals)) for k, vals in self.axes.items() if k not in drop},
                  "points": sorted({canon({k: v for k, v in p.items() if k not in drop}) for p in self.points})}
        if self.ladder is not None:   # only then: the identity of a study without a ladder is as it was
            design["ladder"] = self.ladder.to_dict()
        return hashlib.sha256(canon(design).encode()).hexdigest()

    def check_dir(self) -> None:
        """Raise one line (ValueError) if another study owns this study's directory (what `--dry-run` checks)."""
        owner.check_dir(self.dir, self.name, self.identity(), self.source)

    def claim_dir(self) -> None:
        """Make this study the owner of its directory, or raise one line if another study owns it (owner.py)."""
        owner.claim_dir(self.dir, self.name, self.identity(), self.source)

    def results(self) -> pd.DataFrame:
        """The index as a tidy frame (one row per run; axis columns, status, final numbers)."""
        if not self.index_path.exists():
            raise FileNotFoundError(f"{self.index_path} does not exist yet: run the study first")
        return pd.read_csv(self.index_path, float_precision="round_trip")

    def levels(self, axis: str) -> dict[str, Any]:
        """Text -> the index's own value (a float for lr, a bool, the canonical recipe name) of each level of `axis`."""
        if axis not in self.axis_columns() or axis == "seed":
            raise ValueError(f"{axis!r} is not an axis of study {self.name!r}; axes: "
                             f"{[a for a in self.axis_columns() if a != 'seed']}")
        return {str(axis_value(p.config, axis)): axis_value(p.config, axis) for p in self.expand()}

    def level(self, axis: str, value: Any) -> Any:
        """The index's value of the level `value` names (papermill passes 0.001 as a float, "bf16" means "hp");
        a value that is no level raises one line naming the levels."""
        levels = self.levels(axis)
        recorded = self._as_recorded(axis, value)    # '3e-3' (YAML reads it as a string) is the level 0.003
        match = [v for v in levels.values() if _same(v, recorded)]
        if match:
            return match[0]
        key = str(value)
        key = unalias_recipe(key) if axis == "recipe" else key
        if key not in levels:
            raise ValueError(f"{value!r} is not a level of {axis} in study {self.name!r}; levels: {list(levels)}")
        return levels[key]


def _recipe_names(*groups: Any) -> list[str]:
    """The recipe names a study's levels will have (TrainConfig.recipe_name), refusing two different recipes under
    one name: the index, the claims and every figure key a level by its name, so they would pool into one."""
    seen: dict[str, Any] = {}
    flat = [v for g in groups for v in (g if isinstance(g, (list, tuple)) else [g])]
    for v in flat:
        name = unalias_recipe(v) if isinstance(v, str) else str(v.get("name", "custom")) \
            if isinstance(v, Mapping) else str(v)
        key = json.dumps(v, sort_keys=True, default=str) if isinstance(v, Mapping) else name
        if name in seen and seen[name][0] != key:
            raise ValueError(f"study: two different recipes are both named {name!r}: {seen[name][1]} and {v}; "
                             "give each its own `name:`")
        seen.setdefault(name, (key, v))
    return list(seen)


def run_study(study: Study, executor: Any = None, resume: bool = True, log: Any = print) -> pd.DataFrame:
    """Run every point of `study` through `executor` (default: executors.auto_executor); returns the index. The study
    claims its directory (Study.claim_dir) once every point is checked: another study's index there is refused in one
    line, and nothing is written before. A study with a seed_plan adds seeds to its open rows until resolved
    (sequential.run_until_resolved)."""
    points = study.check()
    study.claim_dir()
    if study.seed_plan is not None:
        fresh: set[str] = set()   # --no-resume retrains each run once, not at every look

        def run(points: list[StudyPoint]) -> pd.DataFrame:
            new = [p for p in points if p.name not in fresh]
            if not resume and new:
                run_points(new, study.axis_columns(), None, executor, False, log, name=study.name)
            fresh.update(p.name for p in new)
            run_points(points, study.axis_columns(), study.index_path, executor, True, log,
                       title=study.short_str(), name=study.name)
            return study.results()

        start = study.results() if resume and study.index_path.exists() else None
        return run_until_resolved(study, run, log, start)
    run_points(points, study.axis_columns(), study.index_path, executor, resume, log,
               title=study.short_str(), name=study.name, checked=True)
    return study.results()
