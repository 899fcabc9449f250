"""A claim's verdict as a value: its kind (an enum decided from the statistics, never from words) and its numbers.

`decide` holds the rules of claims.py's docstring (0-6) on numbers and two test outcomes: `sig` (worse / better:
claims' Holm p < α, or sequential.py's group-sequential call) and `eq` (equivalent: TOST p < α, or its sequential
bound), so the fixed-sample and the sequential verdicts share one rule without either faking the other's p-values.
`Verdict` carries the kind with what it was decided from and read with (gap, the CI at its level, p-values, δ, MDE,
seeds) and its `family`: the rows it was judged together with, e.g. "Holm over 7 rows of recipe vs hp".

A claims table (claims.claims_table, sequential_verdicts) stores each row's kind in the column `verdict_kind`
(Kind.value) and its family in `verdict_family`; `Verdict.from_row` reads a row back. Code decides by the kind;
`words` renders the `verdict` column's text, the one place the words are made (the tables, claims.csv and the
notebooks print them).
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any, Mapping

KIND_COLUMN = "verdict_kind"
FAMILY_COLUMN = "verdict_family"


class Kind(enum.Enum):
    """What a row's verdict says, in claims.py's rule order."""
    DIVERGED = "diverged"                # 0. a variant seed diverged: a harm, in a smoke test too
    SMOKE = "smoke"                      # 1. the control check failed: no verdict
    TOO_FEW = "too_few"                  # 2. fewer than 2 pairs
    BELOW_CONTROL = "below_control"      # 3. worse, and not beating the frozen-blocks control in every seed
    NOT_TRAINING = "not_training"        # 3. not beating the frozen-blocks control, without a significant harm: a
    #                                       harm all the same (its blocks do not train), as a positive control too
    WORSE = "worse"                      # 4.
    BETTER = "better"                    # 4.
    EQUIVALENT = "equivalent"            # 5. within ±δ (TOST)
    INCONCLUSIVE = "inconclusive"        # 6. the seeds cannot tell
    NO_DELTA = "no_delta"                # 6. inconclusive, and equivalence not tested (no δ)

    @property
    def harm(self) -> bool:
        """Every harm label: worse, worse below its control, not training its blocks, or diverged (a positive control
        with one of them is resolved)."""
        return self in (Kind.WORSE, Kind.BELOW_CONTROL, Kind.NOT_TRAINING, Kind.DIVERGED)

    @property
    def open(self) -> bool:
        """More seeds could resolve it: inconclusive (with or without δ) or too few seeds."""
        return self in (Kind.INCONCLUSIVE, Kind.NO_DELTA, Kind.TOO_FEW)

    @property
    def inconclusive(self) -> bool:
        """Inconclusive with or without a δ (not "too few seeds")."""
        return self in (Kind.INCONCLUSIVE, Kind.NO_DELTA)

    @classmethod
    def of(cls, value: Any) -> "Kind":
        """A Kind from itself or its value (a `verdict_kind` cell); one line naming the valid kinds otherwise."""
        if isinstance(value, cls):
            return value
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"verdict kind {value!r} is invalid; valid: {[k.value for k in cls]}") from None


def decide(*, n: int, n_diverged: int = 0, smoke: bool = False, control_ok: bool | None = None, sig: bool = False,
           eq: bool = False, harmful: bool = False, delta: float = math.nan) -> Kind:
    """claims.py's rules 0-6: `sig` the worse/better test passed, `eq` the equivalence test passed, `harmful` the
    gap points the harmful way (above 0 when lower is better), `control_ok` False when the variant did not beat its
    frozen-blocks control in every seed. A diverged seed wins over a smoke test: a divergence needs no control
    check to be a harm."""
    if n_diverged:
        return Kind.DIVERGED
    if smoke:
        return Kind.SMOKE
    if n < 2:
        return Kind.TOO_FEW
    if control_ok is False:
        return Kind.BELOW_CONTROL if sig and harmful else Kind.NOT_TRAINING
    if sig:
        return Kind.WORSE if harmful else Kind.BETTER
    if eq:
        return Kind.EQUIVALENT
    return Kind.INCONCLUSIVE if delta > 0 else Kind.NO_DELTA   # NaN δ: no equivalence test


def _num(row: Mapping[str, Any], key: str) -> float:
    v = row.get(key, math.nan)
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def _count(row: Mapping[str, Any], key: str) -> int:
    v = row.get(key)
    return int(v) if v is not None and v == v else 0   # NaN (a missing cell) counts as 0


@dataclass(frozen=True)
class Verdict:
    """One claims row's verdict: its kind and the numbers it was decided from and is read with.

    gap, ci_lo, ci_hi, level: the mean paired gap (nats) and its CI at the level the verdict uses; p: the p the
    worse/better call was held to (p_holm, fixed sample), p_tost its equivalence p, p_bound the group-sequential
    bound (NaN for a fixed-sample table); delta: δ (NaN: none); mde: the verdict's MDE; family: the rows judged
    together (Holm); n pairs, n_seeds, n_diverged / n_diverged_baseline seeds without a result; lower_is_better:
    the direction of the comparison (a gap above 0 is a harm when lower is better: claims' losses)."""
    kind: Kind
    n: int
    n_seeds: int
    n_diverged: int = 0
    n_diverged_baseline: int = 0
    gap: float = math.nan
    ci_lo: float = math.nan
    ci_hi: float = math.nan
    level: float = math.nan
    p: float = math.nan
    p_tost: float = math.nan
    p_bound: float = math.nan
    delta: float = math.nan
    mde: float = math.nan
    family: str = ""
    lower_is_better: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.kind, Kind):
            raise ValueError(f"Verdict kind={self.kind!r} must be a Kind; valid: {[k.value for k in Kind]}")
        for k in ("n", "n_seeds", "n_diverged", "n_diverged_baseline"):
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"Verdict {k}={v!r} must be a non-negative integer")

    @property
    def harm(self) -> bool:
        return self.kind.harm

    @property
    def open(self) -> bool:
        return self.kind.open

    @property
    def harm_bound(self) -> float:
        """The CI's bound on the harmful side (ci_hi when lower is better, else ci_lo): the largest harm the
        verdict's CI leaves possible."""
        return self.ci_hi if self.lower_is_better else self.ci_lo

    @property
    def sequential(self) -> bool:
        """Judged by a group-sequential bound (studies/sequential.py) rather than fixed-sample Holm."""
        return math.isfinite(self.p_bound)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> "Verdict":
        """The Verdict of a claims row (a dict or a pandas row with `verdict_kind`); one line when the row has none
        (a claims.csv written before verdict kinds: re-run its study's report to rewrite it)."""
        if KIND_COLUMN not in row or not isinstance(row.get(KIND_COLUMN), (str, Kind)):
            raise ValueError(f"claims row of level {row.get('level', '?')!r} has no {KIND_COLUMN} "
                             f"({row.get(KIND_COLUMN)!r}); valid kinds: {[k.value for k in Kind]} (a claims table "
                             "from claims.claims_table or sequential_verdicts has it)")
        n = _count(row, "n")
        k = _count(row, "n_diverged")
        return cls(Kind.of(row[KIND_COLUMN]), n, _count(row, "n_seeds") or n + k, k,
                   _count(row, "n_diverged_baseline"),
                   _num(row, "gap_nats"), _num(row, "ci_lo"), _num(row, "ci_hi"), _num(row, "ci_level"),
                   _num(row, "p_holm"), _num(row, "p_tost"), _num(row, "p_bound"), _num(row, "delta_nats"),
                   _num(row, "mde_nats"), str(row.get(FAMILY_COLUMN, "") or ""),
                   bool(row.get("lower_is_better", True)))


def not_excluded(harm_bound: float, lower_is_better: bool = True) -> str:
    """What an equivalence does not exclude, from the CI's bound on the harmful side (Verdict.harm_bound): "a harm
    up to +0.008 not excluded", or "no harm in its CI" when the whole CI lies on the side of a benefit; "" without a
    bound (NaN)."""
    if not math.isfinite(harm_bound):
        return ""
    if (harm_bound > 0) != lower_is_better or harm_bound == 0:
        return "no harm in its CI"
    return f"a harm up to {harm_bound:+.2g} not excluded"


def words(kind: Kind, *, n: int = 0, n_seeds: int = 0, n_diverged: int = 0, n_diverged_baseline: int = 0,
          delta: float = math.nan, harm_bound: float = math.nan, lower_is_better: bool = True) -> str:
    """The `verdict` column's text of a kind (claims.py's docstring): e.g. "equivalent within ±0.01 (a harm up to
    +0.008 not excluded)" (`harm_bound`: the CI's bound on the harmful side, not_excluded), "diverged in 1/3 seeds",
    with " (baseline diverged in k/n seeds: pairs dropped)" after any but a smoke test."""
    note = (f" (baseline diverged in {n_diverged_baseline}/{n_seeds} seeds: pairs dropped)"
            if n_diverged_baseline and kind is not Kind.SMOKE else "")
    left = not_excluded(harm_bound, lower_is_better) if kind is Kind.EQUIVALENT else ""
    text = {Kind.SMOKE: "smoke test: no verdict",
            Kind.DIVERGED: f"diverged in {n_diverged}/{n_seeds} seeds",
            Kind.TOO_FEW: f"too few seeds (n = {n} pairs; need >= 2)",
            Kind.BELOW_CONTROL: "worse (below its frozen-blocks control)",
            Kind.NOT_TRAINING: "not training its blocks",
            Kind.WORSE: "worse", Kind.BETTER: "better",
            Kind.EQUIVALENT: f"equivalent within ±{delta:.3g}" + (f" ({left})" if left else ""),
            Kind.INCONCLUSIVE: "inconclusive",
            Kind.NO_DELTA: "inconclusive (equivalence not tested: state delta)"}[kind]
    return text + note


def verdict_words(v: Verdict) -> str:
    """words() of a Verdict."""
    return words(v.kind, n=v.n, n_seeds=v.n_seeds, n_diverged=v.n_diverged,
                 n_diverged_baseline=v.n_diverged_baseline, delta=v.delta, harm_bound=v.harm_bound,
                 lower_is_better=v.lower_is_better)


def short_words(v: Verdict) -> str:
    """The verdict's words without what follows in parentheses (a figure's row label): "worse" for worse below its
    control, "inconclusive" with or without a δ, "too few seeds", "equivalent within ±δ" without what it does not
    exclude; no baseline note."""
    short = {Kind.BELOW_CONTROL: "worse", Kind.NO_DELTA: "inconclusive", Kind.TOO_FEW: "too few seeds"}
    return short.get(v.kind) or words(v.kind, n=v.n, n_seeds=v.n_seeds, n_diverged=v.n_diverged, delta=v.delta)


def family_words(families: Any) -> str:
    """The line that names the family of verdicts printed together: "verdicts judged as: Holm over 7 rows of
    recipe vs hp" (several: joined by "; "); "" when none is named (a table from before verdict families)."""
    names = [f for f in dict.fromkeys(str(f) for f in families if isinstance(f, str) and f)]
    return "verdicts judged as: " + "; ".join(names) if names else ""


def holm_family(m: int, what: str) -> str:
    """A fixed-sample family's name: "Holm over 7 rows of recipe vs hp"."""
    rows = f"Holm over {m} row{'' if m == 1 else 's'}"
    return f"{rows} of {what}" if what else rows


__all__ = ["KIND_COLUMN", "FAMILY_COLUMN", "Kind", "decide", "Verdict", "not_excluded", "words", "verdict_words",
           "short_words", "family_words", "holm_family"]
