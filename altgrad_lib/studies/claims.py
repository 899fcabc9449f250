"""Paired claims: what a study's seeds say about each variant against its baseline.

Runs with the same seed share their initial weights and every batch (tests/test_studies_claims.py checks that
invariant), so the design is *paired*: each variant is compared with the baseline of its own seed, within the same
full configuration (every other varied key equal). Per row (`claims_table`):

  n_seeds           the variant's seeds in this configuration; seeds: those in the statistics (the pairs)
  n_diverged        the variant's diverged seeds: a non-finite value (diverged, failed or unfinished run) or, when
                    the frame has a `status` column, status `diverged` / `did_not_learn` (a run that ended above the
                    uniform-guess loss ln V: its value is finite but is no result). They stay in the row: its
                    verdict is "diverged in k/n seeds" whatever the other seeds say
  n_diverged_baseline  the same for the baseline's runs of the variant's seeds; those pairs leave the statistics
                    and the verdict says so ("... (baseline diverged in k/n seeds: pairs dropped)")
  n                 pairs in the statistics: seeds where neither run diverged
  gap_nats          mean of d = variant − baseline over the pairs (nats/token for losses), with its 95 % paired-t
                    CI gap_lo .. gap_hi (mean ± t₀.₉₇₅,ₙ₋₁ · sd(d) / √n; not corrected for multiplicity)
  ci_level, ci_lo, ci_hi  the CI at the level the row's verdict uses: 1 − 2α = 90 % beside "equivalent" (TOST's
                    two one-sided tests at α), 1 − α·p_paired/p_holm beside every other verdict (the level at which
                    Holm judged this row, so it excludes 0 exactly when the row is worse / better); 95 % in a smoke
                    test
  window_nats       the hp-vs-control window: mean over seeds of control − baseline, where the control is the
                    baseline's configuration with `freeze_blocks: true` (what the blocks are worth); gap_window =
                    gap_nats / window_nats. Information only: δ does not depend on it
  p_paired          paired t-test (scipy.stats.ttest_rel), two-sided
  p_perm            exact sign-flip permutation p: all 2ⁿ sign patterns of d (n ≤ PERM_MAX_N), two-sided; with
                    3 seeds it can never go below 2/8 = 0.25, which is why it is a column and not the verdict
  signs             per-seed signs, e.g. "worse in 3/3"
  p_welch           Welch's unpaired test (secondary: it ignores the pairing)
  p_holm            Holm step-down adjustment of p_paired across the rows of one table (one family)
  delta_nats        the equivalence margin δ (nats), stated before the runs: the comparison's `delta`, else
                    DELTA_NATS for a loss value (a value that is not a loss in nats, e.g. val_ppl, gets none:
                    equivalence is not tested); p_tost: TOST p for |mean d| < δ (two one-sided paired t-tests)
  equiv_bound       the smallest margin the data support: the largest |bound| of the 90 % CI (TOST at α is
                    "equivalent" at δ exactly when equiv_bound < δ)
  mde_nats          the smallest true |gap| the verdict's own test detects with 80 % power (`verdict_mde`): the
                    two-sided paired t at α/m for the m rows of the table (Holm's first step: Holm rejects whenever
                    this Bonferroni test does, so its power is at least this), with the one-sided 80 % upper
                    confidence bound of sd(d) (chi-square), not the sample sd, which is below the true sd in over
                    half the rows at 3 seeds
  control           per seed, "beat the frozen-blocks control in k/n": the variant's value below (lower is better)
                    the control's of the same seed
  smoke             the control check failed (control_check): the numbers stay, no verdict is drawn
  verdict_kind      the verdict's kind (verdicts.Kind value): what code decides by; `verdict` is its words
  verdict_family    the rows it was judged with, e.g. "Holm over 7 rows of recipe vs hp" (verdicts.Verdict.family)

Verdicts, in this order (`verdict_kind`, decided by verdicts.decide; `verdict` its words, verdicts.words); a
diverged baseline seed appends "(baseline diverged in k/n seeds: pairs dropped)" to any of them:
  0. "diverged in k/n seeds"                any diverged variant seed: a harm (a positive control is resolved),
                                            in a smoke test too (a divergence needs no control check)
  1. "smoke test: no verdict"               the control check failed: the baseline did not clearly beat its
                                            frozen-blocks control, or sits above the unigram entropy
  2. "too few seeds (n = k pairs)"          fewer than 2 pairs
  3. "worse (below its frozen-blocks control)"  not beating the frozen-blocks control in every seed, with a
                                            Holm-significant harmful gap; without that gap:
     "not training its blocks"              whatever its p-value: a harm all the same (is_harm)
  4. "worse" / "better"                     p_holm < α (α = 0.05); sign from gap_nats (lower is better for losses)
  5. "equivalent within ±δ (a harm up to +h not excluded)"  p_tost < α (TOST is not Holm-adjusted: each
                                            equivalence claim stands on its own two one-sided tests at α); h is
                                            the 90 % CI's bound on the harmful side (gap above 0 when lower is
                                            better): what the equivalence leaves possible ("no harm in its CI"
                                            when the CI lies on the side of a benefit)
  6. "inconclusive"                         otherwise: the data cannot tell; mde_nats says how large an effect the
                                            table could have seen. Never read this as "no effect". Without a δ:
                                            "inconclusive (equivalence not tested: state delta)"

δ = DELTA_NATS = 0.01 nats by default: the acceptance bar published FP8-vs-BF16 comparisons use on a matched-step
paired loss gap (marin-community/marin#7298 accepts FP8 at +0.0040 nats against a 0.01-nat bar). A fixed margin in
nats, not a fraction of the window: at 10 % of the cpu profile's window (0.056 nats) known harms (E7M0 +0.034, the
positive control +0.037) passed TOST. A comparison's `delta` wins.
"""
from __future__ import annotations

import math
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd

from altgrad_lib.io import write_csv
from altgrad_lib.studies.paired_stats import ALPHA, POWER, SD_CONFIDENCE, ci_at, holm, paired_row, verdict_mde
from altgrad_lib.studies.stats import MIN_MARGIN_NATS, control_verdict
from altgrad_lib.studies.verdicts import FAMILY_COLUMN, KIND_COLUMN, Kind, Verdict, decide, holm_family, words

DELTA_NATS = 0.01              # default equivalence margin (nats): the literature's FP8-vs-BF16 bar (module docstring)
CONTROL = "freeze_blocks"      # TrainConfig key of the frozen-blocks control
# The Holm families of the format study's runs (params/studies/cpu_formats.yaml names its comparisons so): notebooks
# 03 and 04 judge those runs in these families too, so a run pair has one verdict in 03, 04, 06 and the report.
FORMATS_FAMILY = "formats vs hp"


def backend_family(recipe: str, backend: str) -> str:
    """03's family of `recipe` on one backend ("fp8_hybrid (simulator) vs hp"): the simulator's row is the format
    study's fp8 row; torchao's is a question of its own."""
    return f"{recipe} ({'simulator' if backend == 'sim' else backend}) vs hp"


DIVERGED_STATUSES = ("diverged", "did_not_learn", "did not learn")   # study.csv statuses that are no result
# the words of the verdicts that have no numbers in them (verdicts.words renders every kind); for display and tests
INCONCLUSIVE = words(Kind.INCONCLUSIVE)
NO_DELTA = words(Kind.NO_DELTA)
NOT_TRAINING = words(Kind.NOT_TRAINING)
WORSE_THAN_CONTROL = words(Kind.BELOW_CONTROL)
SMOKE = words(Kind.SMOKE)
COLUMNS = ("comparison", "level", "baseline", "value", "n_seeds", "n_diverged", "n_diverged_baseline", "n", "seeds",
           "mean", "mean_baseline", "gap_nats", "gap_lo", "gap_hi", "ci_level", "ci_lo", "ci_hi", "window_nats",
           "gap_window", "p_paired", "p_perm", "signs", "p_welch", "p_holm", "delta_nats", "p_tost", "equiv_bound",
           "mde_nats", "control", "smoke", "positive_control", "verdict")
EXTRA = ("sd_nats", "control_ok", KIND_COLUMN, FAMILY_COLUMN)   # for re-judging a stacked table (`judge`) and the
# typed verdict (verdicts.Verdict.from_row), not printed
SEQUENTIAL = ("fixed_verdict", "look", "p_bound", "p_bound_tost")   # what studies/sequential.py adds to a table


# ----------------------------------------------------------------------------------------------------------
# the verdicts (the statistics of one row: paired_stats.py)


def verdict_kind(row: Mapping[str, Any], alpha: float = ALPHA, lower_is_better: bool = True) -> Kind:
    """The kind of one row's verdict (module docstring, rules 0-6; verdicts.decide); `row` needs n, control_ok,
    p_holm, gap_nats, p_tost, delta_nats, and reads smoke, n_diverged when present."""
    return decide(n=int(row["n"]), n_diverged=int(row.get("n_diverged") or 0), smoke=row.get("smoke") is True,
                  control_ok=False if row.get("control_ok") is False else None,
                  sig=bool(row.get("p_holm", math.nan) < alpha),   # NaN compares False
                  eq=bool(row.get("p_tost", math.nan) < alpha),
                  harmful=bool((row.get("gap_nats", math.nan) > 0) == lower_is_better),
                  delta=float(row.get("delta_nats", math.nan)))


def _words(kind: Kind, row: Mapping[str, Any], lower_is_better: bool = True) -> str:
    """verdicts.words of `row`; an equivalence says the harm its CI (ci_lo / ci_hi, the verdict's level) leaves."""
    k = int(row.get("n_diverged") or 0)
    bound = float(row.get("ci_hi" if lower_is_better else "ci_lo", math.nan))
    return words(kind, n=int(row["n"]), n_seeds=int(row.get("n_seeds") or row["n"] + k), n_diverged=k,
                 n_diverged_baseline=int(row.get("n_diverged_baseline") or 0),
                 delta=float(row.get("delta_nats", math.nan)), harm_bound=bound, lower_is_better=lower_is_better)


def verdict(row: Mapping[str, Any], alpha: float = ALPHA, lower_is_better: bool = True) -> str:
    """The words of one row's verdict (`verdict_kind` rendered by verdicts.words): what the `verdict` column
    shows; code decides by the kind. An equivalence names the harm the row's ci_lo / ci_hi leave (when it has
    them: judge computes them at the verdict's level)."""
    return _words(verdict_kind(row, alpha, lower_is_better), row, lower_is_better)


def is_harm(kind: Kind | str) -> bool:
    """A verdict kind that says the variant is worse: every harm label (verdicts.Kind.harm): worse, worse below its
    frozen-blocks control, not training its blocks, diverged."""
    return Kind.of(kind).harm


def judge(table: pd.DataFrame, alpha: float = ALPHA, power: float = POWER,
          lower_is_better: bool = True) -> pd.DataFrame:
    """Holm, the MDE, the verdict-level CI, the verdicts and the positive controls of `table` as ONE family (a
    claims_table, or several stacked with pd.concat: what variants.reference_claims does); returns a copy."""
    t = table.copy()
    if t.empty:
        return t
    t["p_holm"] = holm(t.p_paired.to_numpy(float))
    m = max(1, int(np.isfinite(t.p_paired.to_numpy(float)).sum()))
    t["mde_nats"] = [verdict_mde(int(n), float(sd), m, alpha, power) for n, sd in zip(t.n, t.sd_nats)]
    kinds = [verdict_kind(r, alpha, lower_is_better) for r in t.to_dict("records")]
    what = ", ".join(dict.fromkeys(map(str, t.comparison))) if "comparison" in t else ""
    p, ph = t.p_paired.to_numpy(float), t.p_holm.to_numpy(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        a_row = np.where(np.isfinite(ph) & (ph > 0), alpha * p / ph, alpha / m)   # Holm's level for this row
    level = np.where([k is Kind.EQUIVALENT for k in kinds], 1 - 2 * alpha, 1 - a_row)
    smoke = t.smoke.astype(bool).to_numpy() if "smoke" in t else np.zeros(len(t), dtype=bool)
    level = np.where(smoke, 0.95, level)
    t["ci_level"] = level
    t["ci_lo"], t["ci_hi"] = ci_at(t.gap_nats, t.sd_nats, t.n, level)
    # the words after the CI: an equivalence names the harm its CI leaves
    t["verdict"] = [_words(k, r, lower_is_better) for k, r in zip(kinds, t.to_dict("records"))]
    t[KIND_COLUMN] = [k.value for k in kinds]
    t[FAMILY_COLUMN] = holm_family(m, what)
    pc = (t.positive_control.astype(str) != "").to_numpy()
    t.loc[pc, "positive_control"] = [positive_control_state(k, s) for k, s, c in zip(kinds, smoke, pc) if c]
    return t


PC_RESOLVED, PC_NOT_JUDGED, PC_NOT_RESOLVED = "resolved", "not judged (smoke test)", "NOT resolved"


def positive_control_state(kind: Kind | str, smoke: bool = False) -> str:
    """A positive control's column: "resolved" when its verdict kind is a harm (is_harm; a divergence in a smoke
    test too), "not judged (smoke test)" for any other kind of a smoke test, else "NOT resolved"."""
    if Kind.of(kind) is Kind.DIVERGED:
        return PC_RESOLVED
    if smoke:
        return PC_NOT_JUDGED
    return PC_RESOLVED if is_harm(kind) else PC_NOT_RESOLVED


# ----------------------------------------------------------------------------------------------------------
# the table


def _by_seed(g: pd.DataFrame, seed: str, value: str) -> pd.Series:
    s = g.groupby(seed)[value].agg(list)
    dup = s[s.map(len) > 1]
    if len(dup):
        raise ValueError(f"claims: {len(dup[dup.index[0]])} runs share seed {dup.index[0]} within one configuration "
                         f"(a varied key is missing from `by`?): {g.head(4).to_dict('records')}")
    out = g.set_index(seed)[value]
    return out if value == "status" else out.astype(float)


def _diverged(g: pd.DataFrame, seed: str, value: str) -> pd.Series:
    """Per seed: True where the run is no result (non-finite value, or a diverged / did_not_learn status)."""
    bad = ~np.isfinite(_by_seed(g, seed, value))
    if "status" in g:
        bad |= _by_seed(g, seed, "status").astype(str).str.lower().isin(DIVERGED_STATUSES)
    return bad


def _is_control(frame: pd.DataFrame) -> pd.Series:
    if CONTROL not in frame:
        return pd.Series(False, index=frame.index)
    return frame[CONTROL].astype(str).str.lower() == "true"


def in_nats(value: str) -> bool:
    """Whether a study.csv column is a loss in nats (final_val_loss, final_train_loss, ...), where DELTA_NATS
    applies."""
    return str(value).endswith("loss")


def default_delta(delta: float | None, value: str = "final_val_loss") -> tuple[float, str]:
    """(δ, where it comes from): the stated `delta`, else DELTA_NATS for a loss, else NaN (no equivalence test)."""
    if delta is not None:
        return float(delta), "stated in the comparison"
    if in_nats(value):
        return DELTA_NATS, "default DELTA_NATS, the literature's FP8-vs-BF16 acceptance bar"
    return math.nan, f"none: {value} is not a loss in nats, so state `delta` to test equivalence"


def margin_line(axis: str, baseline: Any, delta: float | None = None, value: str = "final_val_loss") -> str:
    """One line for `--dry-run`: the margin a comparison's equivalence claims will be held to, before the runs."""
    d, source = default_delta(delta, value)
    return f"claims {axis} vs {baseline} on {value}: δ = {d:.4g} nats ({source})"


def window_by_seed(frame: pd.DataFrame, axis: str, baseline: Any, value: str = "final_val_loss",
                   seed: str = "seed", control_level: Any = None) -> pd.Series:
    """Per seed: control − baseline (nats), the baseline's frozen-blocks control (rows with freeze_blocks true and
    axis = control_level, default the baseline's own level) against the baseline; empty without a control."""
    is_ctl = _is_control(frame)
    base = frame[~is_ctl & (frame[axis] == baseline)]
    ctl = frame[is_ctl & (frame[axis] == (baseline if control_level is None else control_level))]
    if base.empty or ctl.empty:
        return pd.Series(dtype=float)
    return (_by_seed(ctl, seed, value) - _by_seed(base, seed, value)).dropna()


def claims_table(frame: pd.DataFrame, axis: str, baseline: Any, by: Iterable[str] = (),
                 value: str = "final_val_loss", seed: str = "seed", delta: float | None = None,
                 alpha: float = ALPHA, power: float = POWER, lower_is_better: bool = True,
                 positive_controls: Iterable[Any] = (), comparison: str = "",
                 control_level: Any = None, smoke: bool = False,
                 families: Mapping[Any, str] | None = None) -> pd.DataFrame:
    """Every level of `axis` against `baseline`, paired by seed within each combination of the `by` columns.

    Rows with `freeze_blocks` true are the controls: they are never compared, they give the window and each
    variant's control check (the control of the variant's own level if the frame has one, else the baseline's:
    `control_level`, default the baseline level; a notebook whose control has its own label passes it). One table =
    one Holm family (`judge`). A diverged seed (module docstring) stays in its row. `delta`: the equivalence
    margin in nats (default: default_delta). `positive_controls`: levels that must come out worse (column
    positive_control: "resolved" when the verdict is a harm, see is_harm; else "NOT resolved"). `smoke`: the control
    check failed (control_check's clear is False): every verdict is "smoke test: no verdict". `families`: level ->
    the name of the comparison (Holm family) that level is judged in, where a table holds several questions (03's
    simulator and torchao rows; a study's `comparisons` with `levels` and `name`): each comparison is judged apart,
    so a run pair gets the verdict of its own family wherever it is judged. Columns: COLUMNS plus the `by` columns,
    `axis`, EXTRA.
    """
    by = [b for b in by if b not in (axis, seed, CONTROL)]
    missing = sorted({axis, seed, value, *by} - set(frame.columns))
    if missing:
        raise ValueError(f"claims_table: column(s) {missing} not in the frame; columns: {list(frame.columns)}")
    if not (frame[axis] == baseline).any():
        raise ValueError(f"claims_table: baseline {axis}={baseline!r} not in the frame; "
                         f"levels: {sorted(frame[axis].astype(str).unique())}")
    positive = list(positive_controls)
    d, _ = default_delta(delta, value)
    rows = []
    groups = frame.groupby(by, dropna=False, sort=True) if by else [((), frame)]
    for key, g in groups:
        key = key if isinstance(key, tuple) else (key,)
        is_ctl = _is_control(g)
        runs, ctl = g[~is_ctl], g[is_ctl]
        if not (runs[axis] == baseline).any():
            continue
        ctl_level = baseline if control_level is None else control_level
        win = window_by_seed(g, axis, baseline, value, seed, ctl_level)
        window = float(win.mean()) if len(win) else math.nan
        base_runs = runs[runs[axis] == baseline]
        base, base_bad = _by_seed(base_runs, seed, value), _diverged(base_runs, seed, value)
        for level in [lv for lv in pd.unique(runs[axis]) if lv != baseline]:
            var_runs = runs[runs[axis] == level]
            var, var_bad = _by_seed(var_runs, seed, value), _diverged(var_runs, seed, value)
            both = pd.concat({"v": var, "b": base}, axis=1, join="inner")
            ok = both[~var_bad.reindex(both.index).to_numpy() & ~base_bad.reindex(both.index).to_numpy()]
            name = (families or {}).get(level) or comparison or f"{axis} vs {baseline}"
            row = {"comparison": name, **dict(zip(by, key)), axis: level,
                   "level": level, "baseline": baseline, "value": value, "n_seeds": len(var),
                   "n_diverged": int(var_bad.sum()),
                   "n_diverged_baseline": int(base_bad.reindex(var.index, fill_value=False).sum()),
                   "seeds": " ".join(str(int(s)) for s in ok.index),
                   **paired_row(ok.v.to_numpy(), ok.b.to_numpy(), d, alpha, power, lower_is_better),
                   "window_nats": window, "smoke": bool(smoke)}
            row["gap_window"] = row["gap_nats"] / window if window > 0 else math.nan
            own = ctl[ctl[axis] == level] if (ctl[axis] == level).any() else ctl[ctl[axis] == ctl_level]
            cv = pd.concat({"v": var[~var_bad], "c": _by_seed(own, seed, value)}, axis=1, join="inner").dropna() \
                if len(own) else pd.DataFrame(columns=["v", "c"])
            beat = (cv.v < cv.c) if lower_is_better else (cv.v > cv.c)
            row["control"] = f"beat the frozen-blocks control in {int(beat.sum())}/{len(cv)}" if len(cv) else \
                "no control"
            row["control_ok"] = bool(beat.all()) if len(cv) else None
            row["positive_control"] = "" if level not in positive else "?"
            rows.append(row)
    table = pd.DataFrame(rows)
    if table.empty:
        return pd.DataFrame(columns=list(COLUMNS))
    unknown = sorted(set(map(str, positive)) - set(map(str, table.level)))
    if unknown:
        raise ValueError(f"claims_table: positive control(s) {unknown} are not levels of {axis}; "
                         f"levels: {sorted(map(str, table.level))}")
    # one comparison = one Holm family (comparison.py): judged apart, in the order the rows came
    table = pd.concat([judge(g, alpha, power, lower_is_better)
                       for _, g in table.groupby("comparison", sort=False)]).sort_index()
    cols = [c for c in ["comparison", *by, axis] if c in table] + [c for c in COLUMNS if c not in ("comparison",)]
    return table[list(dict.fromkeys([*cols, *EXTRA]))]


def control_check(frame: pd.DataFrame, axis: str, baseline: Any, value: str = "final_val_loss",
                  seed: str = "seed", entropy: float | None = None, min_margin: float | None = None,
                  control_level: Any = None) -> tuple[pd.DataFrame, bool | None, str]:
    """The baseline against its frozen-blocks control, seeds as ints: (per-seed table baseline / control / margin,
    clear, sentence) by stats.control_verdict's rule, with `entropy` the unigram entropy of the evaluation tokens
    (a baseline whose loss is not below it is never clear). `frame`: one configuration (plus its control).

    Without a control the table has the baseline only (control, margin NaN) and `clear` is False (a smoke test)
    when a baseline seed has no finite loss or is not below `entropy`, else None (nothing to check against)."""
    is_ctl = _is_control(frame)
    ctl = frame[is_ctl & (frame[axis] == (baseline if control_level is None else control_level))]
    if ctl.empty:   # every baseline run (of every configuration: no pairing needed against the entropy)
        base = frame[~is_ctl & (frame[axis] == baseline)]
        b = pd.Series(base[value].to_numpy(float), index=base[seed].to_numpy(int))
        table = pd.DataFrame({"baseline": b, "control": math.nan, "margin": math.nan}).rename_axis(seed)
        why = f"no frozen-blocks control ({CONTROL}: true) of {axis}={baseline!r}: gaps are unanchored"
        if len(b) and not np.isfinite(b).all():
            return table, False, f"{why}; a baseline run has no finite loss (diverged or unfinished)"
        if entropy is None or not math.isfinite(entropy) or b.empty:
            return table, None, why
        above = float(b.max()) >= entropy
        return table, (False if above else None), (
            f"{why}; the baseline's loss {float(b.max()):.3f} (worst of {len(b)} seed(s)) is "
            f"{'NOT ' if above else ''}below the unigram entropy of the val split ({entropy:.3f} nats)"
            + (": it has not learned even the token frequencies" if above else ""))
    b, c = _by_seed(frame[~is_ctl & (frame[axis] == baseline)], seed, value), _by_seed(ctl, seed, value)
    table = pd.concat({"baseline": b, "control": c}, axis=1, join="inner").rename_axis(seed)
    table.index = table.index.astype(int)
    table["margin"] = table.control - table.baseline
    clear, sentence = control_verdict(table, MIN_MARGIN_NATS if min_margin is None else min_margin, entropy)
    return table, clear, sentence


def diverged_rows(table: pd.DataFrame) -> list[str]:
    """"<level> in k/n seeds" for each row whose verdict is "diverged" (by its kind): a harm that a smoke test does
    not hide."""
    if table.empty or KIND_COLUMN not in table:
        return []
    return [f"{r['level']} in {v.n_diverged}/{v.n_seeds} seeds" for r in table.to_dict("records")
            for v in [Verdict.from_row(r)] if v.kind is Kind.DIVERGED]


def near_margin(table: pd.DataFrame) -> pd.Series:
    """Per row: its gap's CI (ci_lo, ci_hi) contains +δ or −δ, so the verdict rests on the last digits of the runs,
    which another CPU's float path changes (bench/results/verdict_stability.md: the only rows allowed to disagree
    between machines). False where the row has no CI or no δ."""
    if table.empty or not {"ci_lo", "ci_hi", "delta_nats"} <= set(table.columns):
        return pd.Series(False, index=table.index)
    lo, hi, d = (pd.to_numeric(table[c], errors="coerce") for c in ("ci_lo", "ci_hi", "delta_nats"))
    return ((lo <= d) & (d <= hi)) | ((lo <= -d) & (-d <= hi))


def headline(table: pd.DataFrame, control_clear: bool | None, control_sentence: str = "") -> list[str]:
    """The lines a claims output starts with: an unresolved positive control, then whether these runs can carry
    claims at all (control check; a smoke test with a diverged row says it first: a divergence is a harm without a
    control check), then the resolved positive controls."""
    pcs = _positive_controls(table) if len(table) else []
    lines = [ln for state, ln in pcs if state == PC_NOT_RESOLVED]
    div = diverged_rows(table)
    if control_clear is False and div:
        lines.append(f"DIVERGED: {', '.join(div)}: a harm whatever the control check says")
    if control_clear is False:
        lines.append(f"SMOKE TEST, no claims drawn from these runs: {control_sentence}")
    elif control_clear is None:
        lines.append("no frozen-blocks control: the window is unknown and no variant is checked against it"
                     + (f" ({control_sentence})" if "unigram entropy" in control_sentence else ""))
    return lines + [ln for state, ln in pcs if state != PC_NOT_RESOLVED]


def no_claims(table: pd.DataFrame, control_clear: bool | None) -> bool:
    """Whether the runs carry no claims: the control check failed, or a positive control is NOT resolved (what
    the status banner says as "SMOKE TEST"); decided from the control check and the verdict kinds."""
    return control_clear is False or any(s == PC_NOT_RESOLVED for s, _ in (_positive_controls(table) if len(table)
                                                                           else []))


def seed_gaps(frame: pd.DataFrame, axis: str, baseline: Any, value: str = "final_val_loss",
              seed: str = "seed") -> pd.DataFrame:
    """The frame with each run's gap to the baseline run **of its own seed**: gap_nats = L − L_baseline and
    val_gap_pct = 100 · gap_nats / L_baseline (NaN where that seed has no baseline run); seeds are ints, nothing is
    parsed from a label."""
    base = _by_seed(frame[(frame[axis] == baseline) & ~_is_control(frame)], seed, value)
    ref = frame[seed].map(base)
    return frame.assign(gap_nats=frame[value] - ref, val_gap_pct=100 * (frame[value] - ref) / ref)


def report_lines(table: pd.DataFrame, control_clear: bool | None, control_sentence: str) -> list[str]:
    """headline, then the control check when it is clear (a failed one is already in the headline), the rows whose
    CI touches ±δ (near_margin), then the rules (describe) last: what a study or a notebook prints before its claims
    table."""
    lines = headline(table, control_clear, control_sentence)
    if control_clear:
        lines.append(f"control check: {control_sentence}")
    near = table[near_margin(table)] if control_clear is not False else table.iloc[:0]
    if len(near):
        several = "comparison" in near and table["comparison"].nunique() > 1
        names = [f"{r['level']} ({r['comparison']})" if several else str(r["level"]) for r in near.to_dict("records")]
        lines.append(f"CI touches ±δ, so another CPU may give another verdict: {', '.join(names)}")
    return [*lines, describe(table)]


def by_columns(table: pd.DataFrame) -> list[str]:
    """The configuration columns a claims table was grouped by (not its statistics, not the axis = `level`)."""
    level = table["level"].astype(object).to_numpy()   # by value: pandas' str dtype vs object would never be equal
    return [c for c in table.columns
            if c not in COLUMNS and c not in EXTRA and c not in SEQUENTIAL
            and not (table[c].astype(object).to_numpy() == level).all()]


def _positive_controls(table: pd.DataFrame) -> list[tuple[str, str]]:
    """(state, line) per positive control, the unresolved first; the state from the row's verdict kind and smoke
    flag (positive_control_state), never from its words."""
    out = []
    for r in table[table.positive_control.astype(str) != ""].to_dict("records"):
        v = Verdict.from_row(r)
        state = positive_control_state(v.kind, isinstance(r.get("smoke"), (bool, np.bool_)) and bool(r["smoke"]))
        if state == PC_RESOLVED:
            how = (f"{r['verdict']}" if v.kind is Kind.DIVERGED else
                   f"{r['verdict']}: gap {r['gap_nats']:+.4f} nats, Holm p {r['p_holm']:.3g}, {r['signs']}"
                   if v.kind is Kind.NOT_TRAINING else
                   f"{r['verdict']} by {r['gap_nats']:+.4f} nats, Holm p {r['p_holm']:.3g}, {r['signs']}")
            also = f"; {r['control']}" if v.kind in (Kind.BELOW_CONTROL, Kind.NOT_TRAINING) else ""
            fam = f"; {v.family}" if v.family and v.kind is not Kind.DIVERGED else ""
            out.append((state, f"positive control {r['level']}: resolved ({how}{also}{fam})"))
        elif state == PC_NOT_JUDGED:
            out.append((state, f"positive control {r['level']}: not judged (smoke test; gap {r['gap_nats']:+.4f} "
                               "nats)"))
        else:
            fam = f"; {v.family}" if v.family else ""
            out.append((state, f"positive control {r['level']} NOT resolved ({r['verdict']}; gap "
                               f"{r['gap_nats']:+.4f} nats, MDE {r['mde_nats']:.4f}{fam}): this study cannot "
                               "resolve an effect a known-harmful recipe has, so read no verdict below as evidence"))
    return sorted(out, key=lambda x: x[0] != PC_NOT_RESOLVED)   # the unresolved first


def positive_control_lines(table: pd.DataFrame) -> list[str]:
    """One line per positive control; an unresolved one says that this study cannot resolve a known effect."""
    return [ln for _, ln in _positive_controls(table)]


def describe(table: pd.DataFrame, alpha: float = ALPHA, power: float = POWER) -> str:
    """The rules a table was judged by, with its δ and MDE range: one paragraph for under the table."""
    if table.empty:
        return "no comparisons"
    if "smoke" in table and table.smoke.astype(bool).all():
        div = ("; a row with a diverged seed keeps that verdict (a harm needs no control check)"
               if diverged_rows(table) else "")
        return ("SMOKE TEST: gaps only, no verdict (the control check failed); paired by seed, gaps in nats, "
                f"95 % paired-t CIs{div}")
    deltas = sorted(set(np.round(table.delta_nats.dropna().to_numpy(float), 6)))
    delta_txt = (", ".join(f"{d:.4g}" for d in deltas) + " nats" if deltas
                 else "none (state `delta`: equivalence not tested)")
    mdes = table.mde_nats.dropna()
    finite = np.isfinite(table.p_paired.to_numpy(float))
    # one Holm family per comparison (judge): each family's size, as its rows were adjusted
    fams = (pd.Series(finite, index=table.index).groupby(table["comparison"].astype(str), sort=False).sum()
            if "comparison" in table else pd.Series({"": finite.sum()}))
    sizes = [max(int(k), 1) for k in fams]
    if len(sizes) == 1:
        over, at = f"over {int(fams.iloc[0])} row(s)", f"α/{sizes[0]} = {alpha / sizes[0]:.3g}"
    else:
        over = "within each family (" + ", ".join(f"{name}: {int(k)} row(s)" for name, k in fams.items()) + ")"
        at = "α/m = " + ", ".join(f"{alpha / k:.3g}" for k in dict.fromkeys(sizes)) + " (m: the row's family size)"
    mde_txt = f"{mdes.min():.4f}..{mdes.max():.4f} nats" if len(mdes) else "n/a (fewer than 2 pairs)"
    return (f"paired by seed; a seed that diverged or did not learn stays in its row ('diverged in k/n seeds', a "
            f"harm); worse/better: Holm-adjusted paired-t p < {alpha} {over}, CI at Holm's level for the "
            f"row; equivalent: TOST p < {alpha} within ±δ, δ = {delta_txt} (stated before the runs), 90 % CI; "
            f"equiv_bound: the smallest δ the data support; MDE ({power:.0%} power at {at}, with the "
            f"{SD_CONFIDENCE:.0%} upper confidence bound of each row's sd): {mde_txt}; 'inconclusive' means the "
            f"seeds cannot tell, not 'no effect'")


def write_claims(table: pd.DataFrame, path: Any) -> None:
    """claims.csv, atomically (a reader never sees half a table)."""
    write_csv(path, table)


__all__ = ["DELTA_NATS", "DIVERGED_STATUSES", "COLUMNS", "EXTRA", "SEQUENTIAL", "SMOKE", "NOT_TRAINING",
           "WORSE_THAN_CONTROL", "INCONCLUSIVE", "NO_DELTA", "PC_RESOLVED", "PC_NOT_JUDGED", "PC_NOT_RESOLVED",
           "verdict_kind", "verdict", "is_harm", "judge", "diverged_rows", "positive_control_state", "no_claims",
           "in_nats", "default_delta", "margin_line", "window_by_seed", "claims_table",
           "seed_gaps", "by_columns", "control_check", "headline", "report_lines", "positive_control_lines", "describe",
           "write_claims"]
