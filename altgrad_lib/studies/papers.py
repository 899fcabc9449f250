"""What a paper found next to what AltGrad finds: the `paper` findings of a study file's comparisons
(comparison.Comparison.paper, findings comparison.PAPER_FINDINGS) against the study's claims table, one row per
finding, the agreement computed from the verdict's kind (verdicts.Kind), never from its words.

A finding is a direction against the comparison's baseline (lower loss is better): worse, better, equivalent,
not_worse (better or equivalent), not_better (worse or equivalent), diverged. The agreement words:
    agrees                     the verdict is one the finding allows ("diverged in k/n seeds" is a harm: it allows
                               "worse" and "not_better")
    not reproduced beyond ±δ   a direction was found in the paper, the bench finds equivalence: an effect larger than
                               δ is ruled out here, a smaller one in the same direction is not
    contradicts                any other decisive verdict whose effect is resolved beyond δ: the CI at the verdict's
                               level lies wholly beyond ±δ (its bound nearest 0 is past δ; a divergence is beyond any
                               δ): the opposite direction, or a difference where the paper found equivalence; and
                               any decisive verdict but "diverged" where the paper found a divergence (finished runs
                               rule out an unbounded effect)
    opposite sign, not shown beyond ±δ   the opposite direction resolved, but its CI reaches inside ±δ
    a difference, not shown beyond ±δ    a difference where the paper found equivalence, its CI reaching inside ±δ
    cannot tell                inconclusive, too few seeds, a smoke test: the row's MDE says what it could detect

A finding may carry `design_differences` (the study file's comparison, per level): how the bench's design differs
from the paper's for it (e.g. the share of GEMMs kept in high precision); the table states it beside the agreement.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import math

import pandas as pd

from altgrad_lib.studies.comparison import PAPER_FINDINGS
from altgrad_lib.studies.verdicts import Kind, Verdict

AGREEMENTS = ("agrees", "not reproduced beyond ±δ", "contradicts", "opposite sign, not shown beyond ±δ",
              "a difference, not shown beyond ±δ", "cannot tell")
AGREES, NOT_REPRODUCED, CONTRADICTS, OPPOSITE_WITHIN, DIFFERS_WITHIN, CANNOT_TELL = AGREEMENTS
# the verdict kinds each finding allows (verdicts.Kind: a harm is worse, worse below its frozen-blocks control, or
# diverged)
_HARM = frozenset(k for k in Kind if k.harm)
_ALLOWS = {"worse": _HARM, "better": frozenset({Kind.BETTER}), "equivalent": frozenset({Kind.EQUIVALENT}),
           "not_worse": frozenset({Kind.BETTER, Kind.EQUIVALENT}), "not_better": _HARM | {Kind.EQUIVALENT},
           "diverged": frozenset({Kind.DIVERGED})}
_DIRECTIONS = frozenset({"worse", "better"})   # findings of a direction (equivalence may not reproduce them)
_DECISIVE = _HARM | {Kind.BETTER, Kind.EQUIVALENT}
if set(_ALLOWS) != set(PAPER_FINDINGS):   # one list of findings: what a study file may say (comparison.py)
    raise RuntimeError(f"papers._ALLOWS and comparison.PAPER_FINDINGS differ: {set(_ALLOWS) ^ set(PAPER_FINDINGS)}")


def beyond_delta(v: Verdict) -> bool:
    """Whether the verdict's effect is resolved beyond ±δ: its CI (at the verdict's level) lies wholly on one side,
    past δ (0 without a δ); a divergence is beyond any δ."""
    if v.kind is Kind.DIVERGED:
        return True
    d = v.delta if math.isfinite(v.delta) else 0.0
    return bool(v.ci_lo > d or v.ci_hi < -d)   # NaN bounds compare False: not shown


def agreement(finding: str, verdict: Verdict | Kind | str) -> str:
    """The agreement of a claims verdict (a verdicts.Verdict; a bare Kind or its value has no CI, so a decisive
    verdict against the finding is never shown beyond δ) with a paper's finding (the module docstring's words)."""
    if finding not in _ALLOWS:
        raise ValueError(f"paper finding {finding!r} is invalid; valid: {list(_ALLOWS)}")
    v = verdict if isinstance(verdict, Verdict) else Verdict(Kind.of(verdict), n=0, n_seeds=0)
    got = v.kind
    if got in _ALLOWS[finding]:
        return AGREES
    if got is Kind.EQUIVALENT and finding in _DIRECTIONS:
        return NOT_REPRODUCED
    if got in _DECISIVE:
        if finding == "diverged" or beyond_delta(v):
            return CONTRADICTS
        return DIFFERS_WITHIN if finding == "equivalent" else OPPOSITE_WITHIN
    return CANNOT_TELL


PAPER_COLUMNS = ("comparison", "level", "baseline", "paper", "source", "verdict", "agreement", "design_differences",
                 "family", "n_seeds", "gap_nats", "ci_lo", "ci_hi", "mde_nats")
_NUMBERS = PAPER_COLUMNS.index("n_seeds")


def paper_table(study: Any, claims: pd.DataFrame) -> pd.DataFrame:
    """One row per `paper` finding of `study`'s comparisons (studies.study.Study) with the claims row of that level
    (Study.claims / Study.report's table, or claims.csv read back): what the paper found, what AltGrad finds, and the
    agreement, the finding's design differences from the paper ("" when none is stated) and the verdict's family.
    A finding whose level has no claims row (the runs are missing) reads "cannot tell" with verdict "not run"; with
    `by` columns a level has one row per configuration."""
    rows = []
    for c in study.comparisons:
        if not c.paper:
            continue
        mine = claims[claims.comparison.astype(str) == c.label] if "comparison" in claims else claims.iloc[0:0]
        diffs = {str(lv): t for lv, t in c.design_differences}
        for level, finding in c.paper:
            hits = mine[mine.level.astype(str) == str(level)]
            common = {"comparison": c.label, "level": str(level), "baseline": str(c.baseline), "paper": finding,
                      "source": c.source}
            differs = {"design_differences": diffs.get(str(level), "")}
            if hits.empty:
                rows.append({**common, "verdict": "not run", "agreement": CANNOT_TELL, **differs, "family": ""})
                continue
            for _, r in hits.iterrows():
                v = Verdict.from_row(r)
                rows.append({**common, "verdict": r.verdict, "agreement": agreement(finding, v), **differs,
                             "family": v.family, **{k: r.get(k) for k in PAPER_COLUMNS[_NUMBERS:]},
                             **{k: r[k] for k in c.by if k in r}})
    out = pd.DataFrame(rows)
    if out.empty:
        return pd.DataFrame(columns=list(PAPER_COLUMNS))
    extra = [k for k in out.columns if k not in PAPER_COLUMNS]
    return out.reindex(columns=[*PAPER_COLUMNS[:3], *extra, *PAPER_COLUMNS[3:]])


def agreement_counts(table: pd.DataFrame) -> dict[str, int]:
    """How many findings of a paper_table each agreement word has (every word, zeros included)."""
    return {a: int((table.agreement == a).sum()) for a in AGREEMENTS}


def load_claims(study: Any, committed: str | Path) -> tuple[pd.DataFrame, str]:
    """(claims, where they come from): the study's own claims when its index exists in this machine's outputs (it
    was run here: `altgrad study -f ...`), else the claims.csv committed at `committed` (a copy of a run's
    claims.csv, e.g. bench/results/); one line naming both places when neither exists."""
    if study.index_path.exists():
        return study.report(write=False)[0], f"this machine's runs of study {study.name!r} (its index in the outputs)"
    return _committed(study, committed), f"{Path(committed).parent.name}/{Path(committed).name} (committed)"


def load_results(study: Any, committed: str | Path) -> tuple[pd.DataFrame, str]:
    """(the study's index: one row per run, where it comes from), as load_claims: this machine's study.csv, else the
    copy committed at `committed` (without its run_dir column: machine paths are not committed)."""
    if study.index_path.exists():
        return study.results(), f"this machine's runs of study {study.name!r} (its index in the outputs)"
    return _committed(study, committed), f"{Path(committed).parent.name}/{Path(committed).name} (committed)"


def _committed(study: Any, committed: str | Path) -> pd.DataFrame:
    path = Path(committed)
    if not path.exists():
        raise FileNotFoundError(f"study {study.name!r} has no results: not run here (no {study.index_path.name} under "
                                f"its outputs) and no committed copy at {path}; run `altgrad study -f` on its file")
    return pd.read_csv(path, float_precision="round_trip")

__all__ = ["AGREEMENTS", "AGREES", "NOT_REPRODUCED", "CONTRADICTS", "OPPOSITE_WITHIN", "DIFFERS_WITHIN",
           "CANNOT_TELL", "PAPER_COLUMNS", "beyond_delta", "agreement", "paper_table", "agreement_counts",
           "load_claims", "load_results"]
