"""One comparison of a study file, parsed and checked once when the study loads (`Comparison.parse`).

A study file's `comparisons:` entry (study.py's docstring) is a mapping; a Study holds each as a frozen Comparison
whose levels are the index's own values (a recipe under its canonical name, an lr as a float, a dict as its JSON),
so the claims (study_claims.py), the seeds-until-resolved replay (sequential.py), the papers table (papers.py) and
`altgrad study` read fields, never keys. Every setting the claims could not use fails here, in one line naming the
value and the valid choices, before any run trains (`--dry-run` shows it).

One comparison is one Holm family (claims.judge): its `label` (its `name`, else "recipe vs hp") is the family's name
in the claims table's `comparison` column and in each verdict's family ("Holm over 6 rows of formats vs hp"). A study
whose rows answer several questions (notebooks 03 and 04 judge the format study's runs in families of their own)
declares one named comparison per question with its `levels`, so a run pair has one verdict wherever it is judged.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from altgrad_lib.errors import did_you_mean
from altgrad_lib.studies.runs import axis_value

COMPARISON_KEYS = ("axis", "baseline", "by", "value", "delta", "levels", "name", "paper", "source",
                   "design_differences")
# what a comparison's `paper` may say a level did against the baseline (lower loss is better): claims' verdict words,
# not_worse (better or equivalent, e.g. "RCEIL >= FLOOR") and not_better (worse or equivalent)
PAPER_FINDINGS = ("worse", "better", "equivalent", "not_worse", "not_better", "diverged")
# the index's losses (nats, lower is better): what claims compare
VALUE_COLUMNS = ("final_val_loss", "final_train_loss")
# columns a comparison never pairs within: what it compares, the replicates, the frozen-blocks control
NOT_BY = ("seed", "freeze_blocks")


@dataclass(frozen=True)
class Comparison:
    """A study comparison: `axis` levels against `baseline` (the index's value), paired by seed within each
    combination of `by_columns` (the stated `by`, else every other index column but the seed); `levels` only these
    (index values; () every level); `value` the loss compared; `delta` the equivalence margin in nats (None: the
    default, claims.default_delta); `paper` ((level, finding), ...) and `source` for the papers table, with
    `design_differences` ((level, text), ...): how this bench's design differs from the paper's for that finding
    (e.g. the share of GEMMs kept in high precision); `by` the columns as stated (the papers table names them);
    `spec` the mapping as written (for messages)."""
    axis: str
    baseline: Any
    by_columns: tuple[str, ...]
    by: tuple[str, ...] = ()
    value: str = VALUE_COLUMNS[0]
    delta: float | None = None
    levels: tuple = ()
    paper: tuple[tuple[Any, str], ...] = ()
    source: str = ""
    design_differences: tuple[tuple[Any, str], ...] = ()
    name: str = ""
    spec: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def label(self) -> str:
        """The claims table's `comparison` and the Holm family's name: `name`, else "recipe vs hp"."""
        return self.name or f"{self.axis} vs {self.baseline}"

    @staticmethod
    def check_spec(c: Any, axis_columns: list[str]) -> None:
        """What a comparison mapping must hold before the study expands: axis and baseline, known keys, a positive
        delta, `by` a list of names, a loss `value`."""
        if not isinstance(c, Mapping) or "axis" not in c or "baseline" not in c:
            raise ValueError(f"study comparison {c!r} needs 'axis' and 'baseline' (optional 'by', 'value', 'delta')")
        bad = sorted(set(c) - set(COMPARISON_KEYS))
        if bad:
            raise ValueError(f"study comparison {dict(c)!r}: unknown key(s) {bad}; valid keys: {COMPARISON_KEYS}")
        if "delta" in c and not (isinstance(c["delta"], (int, float)) and not isinstance(c["delta"], bool)
                                 and c["delta"] > 0):
            raise ValueError(f"study comparison {dict(c)!r}: delta={c['delta']!r} must be a positive number (nats)")
        by = c.get("by")
        if by is not None and (not isinstance(by, (list, tuple)) or not all(isinstance(b, str) for b in by)):
            valid_by = [k for k in axis_columns if k not in (c["axis"], "seed")]
            raise ValueError(f"study comparison {dict(c)!r}: by={by!r} must be a list of index columns, e.g. "
                             f"by: [{by if isinstance(by, str) else 'lr'}]; valid: {valid_by}")
        if c.get("value", VALUE_COLUMNS[0]) not in VALUE_COLUMNS:
            raise ValueError(f"study comparison {dict(c)!r}: value={c['value']!r} is not a loss column of the "
                             f"index{did_you_mean(str(c['value']), VALUE_COLUMNS)}; valid: {VALUE_COLUMNS}")

    @classmethod
    def parse(cls, c: Any, study: Any) -> "Comparison":
        """The Comparison of mapping `c` (check_spec'd) in `study` (its axis_columns, expand, _as_recorded,
        positive_controls): its axis one the study varies, its baseline and levels levels of that axis as the index
        will record them, its `by` index columns, its paper findings about compared levels. A Comparison is
        returned as it is (a study derived from a checked one)."""
        if isinstance(c, cls):
            return c
        cols = [k for k in study.axis_columns() if k != "seed"]
        axis = c["axis"]
        if not isinstance(axis, str) or axis not in cols:
            raise ValueError(f"study comparison {dict(c)}: {axis!r} is not an axis this study compares (seeds "
                             f"are the replicates); valid axes: {cols}")
        levels = list(dict.fromkeys(axis_value(p.config, axis) if axis in p.config.keys() else p.axes.get(axis)
                                    for p in study.expand()))    # as run_points writes the index
        base = study._as_recorded(axis, c["baseline"])
        if base not in levels:
            raise ValueError(f"study comparison {dict(c)}: baseline {c['baseline']!r} is not a level of "
                             f"{axis!r}{did_you_mean(c['baseline'], [str(v) for v in levels])}; valid levels: "
                             f"{levels}")
        valid_by = [k for k in study.axis_columns() if k not in (axis, "seed")]
        bad = [b for b in (c.get("by") or ()) if b not in study.axis_columns()]
        if bad:
            raise ValueError(f"study comparison {dict(c)}: 'by' {bad} not index column(s); valid: {valid_by}")
        inner = [b for b in (c.get("by") or ()) if b in (axis, "seed")]
        if inner:
            raise ValueError(f"study comparison {dict(c)}: 'by' {inner} names what the comparison pairs "
                             f"({axis!r} is compared, seeds are the replicates); valid: {valid_by}")
        chosen = [study._as_recorded(axis, v) for v in (c.get("levels") or ())]
        if "levels" in c and (not isinstance(c["levels"], list) or not chosen
                              or any(v not in levels or v == base for v in chosen)):
            raise ValueError(f"study comparison {dict(c)}: levels={c['levels']!r} must be a non-empty list of "
                             f"{axis!r} levels other than the baseline; valid: {[v for v in levels if v != base]}")
        paper = c.get("paper")
        found: list[tuple[Any, str]] = []
        if paper is not None:
            compared = chosen or [v for v in levels if v != base]
            if not isinstance(paper, Mapping) or not paper:
                raise ValueError(f"study comparison {dict(c)}: paper={paper!r} must be a mapping {{level: "
                                 f"finding}}, findings {PAPER_FINDINGS}")
            for lv, finding in paper.items():
                if study._as_recorded(axis, lv) not in compared:
                    raise ValueError(f"study comparison {dict(c)}: paper names {lv!r}, which it does not compare; "
                                     f"valid: {compared}")
                if finding not in PAPER_FINDINGS:
                    raise ValueError(f"study comparison {dict(c)}: paper[{lv!r}]={finding!r} is invalid"
                                     f"{did_you_mean(finding, PAPER_FINDINGS)}; valid: {PAPER_FINDINGS}")
                found.append((study._as_recorded(axis, lv), finding))
        if "name" in c and not (isinstance(c["name"], str) and c["name"].strip()):
            raise ValueError(f"study comparison {dict(c)}: name={c['name']!r} must be a non-empty string (the Holm "
                             f"family's name, e.g. 'formats vs hp')")
        if "source" in c and not isinstance(c["source"], str):
            raise ValueError(f"study comparison {dict(c)}: source={c['source']!r} must be a string")
        diffs = c.get("design_differences")
        if diffs is not None:
            named = [lv for lv, _ in found]
            if not isinstance(diffs, Mapping) or not diffs or not all(isinstance(t, str) and t for t in diffs.values()):
                raise ValueError(f"study comparison {dict(c)}: design_differences={diffs!r} must be a mapping "
                                 f"{{level: text}} over the paper's levels; valid levels: {named}")
            for lv in diffs:
                if study._as_recorded(axis, lv) not in named:
                    raise ValueError(f"study comparison {dict(c)}: design_differences names {lv!r}, which has no "
                                     f"paper finding; valid levels: {named}")
        if axis == "recipe" and base in study.positive_controls:
            raise ValueError(f"study positive_controls {list(study.positive_controls)}: {base!r} is the baseline of "
                             f"comparison {dict(c)}, and a positive control is a variant that must come out worse "
                             f"than it; valid: {[v for v in levels if v != base]}")
        by = tuple(c.get("by") or ())
        within = by or tuple(study.axis_columns())
        # the levels as Study.level returns them (the index's own value of each), what the claims are keyed by
        return cls(axis=axis, baseline=study.level(axis, c["baseline"]),
                   by_columns=tuple(b for b in within if b not in (axis, *NOT_BY)), by=by,
                   value=c.get("value", VALUE_COLUMNS[0]), delta=c.get("delta"),
                   levels=tuple(study.level(axis, v) for v in c.get("levels") or ()),
                   paper=tuple((study.level(axis, lv), f) for lv, f in found), source=c.get("source", ""),
                   design_differences=tuple((study.level(axis, lv), t)
                                            for lv, t in (c.get("design_differences") or {}).items()),
                   name=c.get("name", "").strip(), spec=dict(c))


__all__ = ["COMPARISON_KEYS", "PAPER_FINDINGS", "VALUE_COLUMNS", "NOT_BY", "Comparison"]
