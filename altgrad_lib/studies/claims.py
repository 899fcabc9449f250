"""Paired claims: what a study's seeds say about each variant against its baseline.

Runs with the same seed share their initial weights and every batch (tests/test_studies_claims.py checks that
invariant), so the design is *paired*: each variant is compared with the baseline of its own seed, within the same
full configuration (every other varied key equal). Per row (`claims_table`):

  n                 pairs (seeds where both runs have a finite value); n_nonfinite: the variant's diverged seeds
  gap_nats          mean of d = variant − baseline over the pairs (nats/token for losses), with its 95 % paired-t
                    CI gap_lo .. gap_hi (mean ± t₀.₉₇₅,ₙ₋₁ · sd(d) / √n; not corrected for multiplicity)
  window_nats       the hp-vs-control window: mean over seeds of control − baseline, where the control is the
                    baseline's configuration with `freeze_blocks: true` (what the blocks are worth); gap_window =
                    gap_nats / window_nats
  p_paired          paired t-test (scipy.stats.ttest_rel), two-sided
  p_perm            exact sign-flip permutation p: all 2ⁿ sign patterns of d (n ≤ PERM_MAX_N), two-sided; with
                    3 seeds it can never go below 2/8 = 0.25, which is why it is a column and not the verdict
  signs             per-seed signs, e.g. "worse in 3/3"
  p_welch           Welch's unpaired test (secondary: it ignores the pairing)
  p_holm            Holm step-down adjustment of p_paired across the rows of one table
  delta_nats        the equivalence margin δ; p_tost: TOST p for |mean d| < δ (two one-sided paired t-tests)
  mde_nats          minimum detectable effect: the |mean d| a two-sided paired t-test at α detects with 80 %
                    power at this n and this row's sd(d) (noncentral t); per row, before the Holm step
  control           per-seed "below control k/n": the variant's value below the control's of the same seed

Verdicts, in this order (`verdict`):
  1. "too few seeds (n = k pairs)"          fewer than 2 pairs
  2. "not training its blocks"              the variant is not below the frozen-blocks control in every seed,
                                            whatever its p-value
  3. "worse" / "better"                     p_holm < α (α = 0.05); sign from gap_nats (lower is better for losses)
  4. "equivalent within ±δ"                 p_tost < α (TOST is not Holm-adjusted: each equivalence claim stands
                                            on its own two one-sided tests at α)
  5. "inconclusive"                         otherwise: the data cannot tell; mde_nats says how large an effect the
                                            table could have seen. Never read this as "no effect".

δ: the comparison's `delta` (nats) when stated, else DELTA_WINDOW_FRACTION = 10 % of the window (a gap smaller
than a tenth of what the transformer blocks are worth is called equivalent); with neither a δ nor a control the
table refuses, because an equivalence claim needs a stated margin. A window ≤ 0 (the baseline did not beat its
control) gives δ = NaN: no equivalence verdict, and the control check calls the runs a smoke test.
"""
from __future__ import annotations

import math
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

ALPHA = 0.05
POWER = 0.80
DELTA_WINDOW_FRACTION = 0.10   # default δ = this fraction of the hp-vs-control window (module docstring)
PERM_MAX_N = 16                # exact sign-flip p up to 2^16 patterns; NaN above
CONTROL = "freeze_blocks"      # TrainConfig key of the frozen-blocks control
INCONCLUSIVE = "inconclusive"
NOT_TRAINING = "not training its blocks"
COLUMNS = ("comparison", "level", "baseline", "n", "seeds", "mean", "mean_baseline", "gap_nats", "gap_lo", "gap_hi",
           "window_nats", "gap_window", "p_paired", "p_perm", "signs", "p_welch", "p_holm", "delta_nats", "p_tost",
           "mde_nats", "control", "n_nonfinite", "positive_control", "verdict")


# ----------------------------------------------------------------------------------------------------------
# the statistics of one row


def sign_flip_p(d: Sequence[float], max_n: int = PERM_MAX_N) -> float:
    """Exact two-sided sign-flip permutation p of mean(d) = 0: the share of the 2ⁿ sign patterns s with
    |mean(s·d)| ≥ |mean(d)| (the observed pattern included). NaN for n < 1 or n > max_n."""
    d = np.asarray(d, dtype=float)
    n = len(d)
    if n < 1 or n > max_n:
        return math.nan
    signs = 1 - 2 * ((np.arange(2**n)[:, None] >> np.arange(n)) & 1)   # (2^n, n) every ± pattern
    stat = np.abs(signs @ d)
    return float(np.mean(stat >= abs(d.sum()) * (1 - 1e-12)))       # relative slack: ties by float rounding count


def holm(p: Sequence[float]) -> np.ndarray:
    """Holm's step-down adjusted p-values (family-wise error ≤ α); NaN entries stay NaN and are not counted."""
    p = np.asarray(p, dtype=float)
    out = np.full(len(p), math.nan)
    ok = np.flatnonzero(np.isfinite(p))
    m = len(ok)
    running = 0.0
    for rank, i in enumerate(ok[np.argsort(p[ok], kind="stable")]):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out


def tost_p(d: Sequence[float], delta: float) -> float:
    """TOST p of |mean(d)| < delta: the larger of the one-sided paired t-tests mean(d) > −δ and mean(d) < +δ."""
    from scipy import stats

    d = np.asarray(d, dtype=float)
    if len(d) < 2 or not delta > 0:
        return math.nan
    if d.std(ddof=1) == 0:                       # no noise: the mean is the truth
        return 0.0 if abs(d.mean()) < delta else 1.0
    lo = stats.ttest_1samp(d, -delta, alternative="greater").pvalue
    hi = stats.ttest_1samp(d, delta, alternative="less").pvalue
    return float(max(lo, hi))


def power_paired(effect: float, n: int, sd: float, alpha: float = ALPHA) -> float:
    """Power of the two-sided paired t-test at α to detect a true mean difference `effect` (noncentral t)."""
    from scipy import stats

    from scipy import integrate

    df = n - 1
    tc = float(stats.t.ppf(1 - alpha / 2, df))
    nc = effect * math.sqrt(n) / sd
    p = float(stats.nct.sf(tc, df, nc) + stats.nct.cdf(-tc, df, nc))
    if math.isfinite(p):
        return p
    # scipy's nct returns NaN for df = 1 and a large nc: P(|Z + nc| > tc·√(V/df)), V ~ χ²(df), integrated over V
    log_norm = -(df / 2) * math.log(2) - math.lgamma(df / 2)

    def given(v: float) -> float:
        if v <= 0:
            return 0.0
        s = tc * math.sqrt(v / df)
        tails = 0.5 * math.erfc((s - nc) / math.sqrt(2)) + 0.5 * math.erfc((s + nc) / math.sqrt(2))
        return tails * math.exp(log_norm + (df / 2 - 1) * math.log(v) - v / 2)

    return float(integrate.quad(given, 0, math.inf, limit=200)[0])


def mde(n: int, sd: float, alpha: float = ALPHA, power: float = POWER) -> float:
    """Smallest true |mean difference| the two-sided paired t-test at α detects with `power`, for n pairs of
    difference sd `sd` (same unit as sd). NaN for n < 2 or a non-finite sd; 0 when sd is 0."""
    from scipy import optimize

    if n < 2 or not math.isfinite(sd):
        return math.nan
    if sd == 0:
        return 0.0
    hi = sd
    while power_paired(hi, n, sd, alpha) < power:
        hi *= 2
    return float(optimize.brentq(lambda e: power_paired(e, n, sd, alpha) - power, 0.0, hi, xtol=1e-10 * sd))


def paired_row(variant: Sequence[float], baseline: Sequence[float], delta: float = math.nan,
               alpha: float = ALPHA, power: float = POWER, lower_is_better: bool = True) -> dict[str, Any]:
    """Statistics of one comparison from values aligned by seed (finite pairs only): the columns of the module
    docstring from n to mde_nats (p_holm excepted, it needs the whole table)."""
    from scipy import stats

    from altgrad_lib.studies.stats import welch

    v, b = np.asarray(variant, dtype=float), np.asarray(baseline, dtype=float)
    d = v - b
    n = len(d)
    row: dict[str, Any] = {"n": n, "mean": float(v.mean()) if n else math.nan,
                           "mean_baseline": float(b.mean()) if n else math.nan,
                           "gap_nats": float(d.mean()) if n else math.nan}
    sd = float(d.std(ddof=1)) if n >= 2 else math.nan
    half = float(stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)) if n >= 2 else math.nan
    row.update(gap_lo=row["gap_nats"] - half, gap_hi=row["gap_nats"] + half, sd_nats=sd)
    row["p_paired"] = float(stats.ttest_rel(v, b).pvalue) if n >= 2 and sd > 0 else math.nan
    row["p_perm"] = sign_flip_p(d)
    worse = int((d > 0).sum()) if lower_is_better else int((d < 0).sum())
    better = int((d < 0).sum()) if lower_is_better else int((d > 0).sum())
    row["signs"] = (f"worse in {worse}/{n}" if worse >= better else f"better in {better}/{n}") if n else ""
    row["p_welch"] = welch(v, b)["p"]
    row["delta_nats"] = delta
    row["p_tost"] = tost_p(d, delta)
    row["mde_nats"] = mde(n, sd, alpha, power)
    return row


def verdict(row: dict[str, Any], alpha: float = ALPHA, lower_is_better: bool = True) -> str:
    """The verdict of one row (module docstring, rules 1-5); `row` needs n, control_ok, p_holm, gap_nats, p_tost,
    delta_nats."""
    if row["n"] < 2:
        return f"too few seeds (n = {row['n']} pairs; need >= 2)"
    if row.get("control_ok") is False:
        return NOT_TRAINING
    if row["p_holm"] < alpha:   # NaN compares False
        return "better" if (row["gap_nats"] < 0) == lower_is_better else "worse"
    if row["p_tost"] < alpha:
        return f"equivalent within ±{row['delta_nats']:.3g}"
    return INCONCLUSIVE


# ----------------------------------------------------------------------------------------------------------
# the table


def _by_seed(g: pd.DataFrame, seed: str, value: str) -> pd.Series:
    s = g.groupby(seed)[value].agg(list)
    dup = s[s.map(len) > 1]
    if len(dup):
        raise ValueError(f"claims: {len(dup[dup.index[0]])} runs share seed {dup.index[0]} within one configuration "
                         f"(a varied key is missing from `by`?): {g.head(4).to_dict('records')}")
    return g.set_index(seed)[value].astype(float)


def _is_control(frame: pd.DataFrame) -> pd.Series:
    if CONTROL not in frame:
        return pd.Series(False, index=frame.index)
    return frame[CONTROL].astype(str).str.lower() == "true"


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
                 control_level: Any = None) -> pd.DataFrame:
    """Every level of `axis` against `baseline`, paired by seed within each combination of the `by` columns.

    Rows with `freeze_blocks` true are the controls: they are never compared, they give the window and each
    variant's control check (the control of the variant's own level if the frame has one, else the baseline's:
    `control_level`, default the baseline level; a notebook whose control has its own label passes it). One table =
    one Holm family. `positive_controls`: levels that must come out worse
    (column positive_control: "resolved" when its verdict is "worse", or "not training its blocks" with a Holm-significant
    harmful gap; else "NOT resolved"). Columns: COLUMNS plus the `by` columns, `axis`, sd_nats.
    """
    by = [b for b in by if b not in (axis, seed, CONTROL)]
    missing = sorted({axis, seed, value, *by} - set(frame.columns))
    if missing:
        raise ValueError(f"claims_table: column(s) {missing} not in the frame; columns: {list(frame.columns)}")
    if not (frame[axis] == baseline).any():
        raise ValueError(f"claims_table: baseline {axis}={baseline!r} not in the frame; "
                         f"levels: {sorted(frame[axis].astype(str).unique())}")
    positive = list(positive_controls)
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
        # a window <= 0 (the baseline did not beat its control) gives no margin: no equivalence claim (δ NaN)
        d = delta if delta is not None else DELTA_WINDOW_FRACTION * window if window > 0 else math.nan
        if delta is None and math.isnan(window):
            raise ValueError(f"claims_table: no equivalence margin for {axis} vs {baseline!r}"
                             f"{' at ' + str(dict(zip(by, key))) if by else ''}: the study has no frozen-blocks "
                             f"control of the baseline (window {window:.3g}), so state `delta` (nats) in the comparison")
        base = _by_seed(runs[runs[axis] == baseline], seed, value)
        for level in [lv for lv in pd.unique(runs[axis]) if lv != baseline]:
            var = _by_seed(runs[runs[axis] == level], seed, value)
            both = pd.concat({"v": var, "b": base}, axis=1, join="inner")
            ok = both[np.isfinite(both.v) & np.isfinite(both.b)]
            row = {"comparison": comparison or f"{axis} vs {baseline}", **dict(zip(by, key)), axis: level,
                   "level": level, "baseline": baseline, "seeds": " ".join(str(int(s)) for s in ok.index),
                   **paired_row(ok.v.to_numpy(), ok.b.to_numpy(), d, alpha, power, lower_is_better),
                   "window_nats": window, "n_nonfinite": int((~np.isfinite(var)).sum())}
            row["gap_window"] = row["gap_nats"] / window if window > 0 else math.nan
            own = ctl[ctl[axis] == level] if (ctl[axis] == level).any() else ctl[ctl[axis] == ctl_level]
            cv = pd.concat({"v": var, "c": _by_seed(own, seed, value)}, axis=1, join="inner").dropna() \
                if len(own) else pd.DataFrame(columns=["v", "c"])
            below = (cv.v < cv.c) if lower_is_better else (cv.v > cv.c)
            row["control"] = f"below control {int(below.sum())}/{len(cv)}" if len(cv) else "no control"
            row["control_ok"] = bool(below.all()) if len(cv) else None
            row["positive_control"] = "" if level not in positive else "?"
            rows.append(row)
    table = pd.DataFrame(rows)
    if table.empty:
        return pd.DataFrame(columns=list(COLUMNS))
    table["p_holm"] = holm(table.p_paired.to_numpy())
    table["verdict"] = [verdict(r, alpha, lower_is_better) for r in table.to_dict("records")]
    pc = table.positive_control == "?"
    # A positive control asks "does this bench detect a known harm?": one so harmful that it is no better than the
    # frozen-blocks control in some seed ("not training its blocks") is detected when its paired gap is significant.
    sig = (table.p_holm < alpha) & ((table.gap_nats > 0) if lower_is_better else (table.gap_nats < 0))
    harm = (table.verdict == "worse") | ((table.verdict == NOT_TRAINING) & sig)
    table.loc[pc, "positive_control"] = np.where(harm[pc], "resolved", "NOT resolved")
    unknown = sorted(set(map(str, positive)) - set(map(str, table.level)))
    if unknown:
        raise ValueError(f"claims_table: positive control(s) {unknown} are not levels of {axis}; "
                         f"levels: {sorted(map(str, table.level))}")
    cols = [c for c in ["comparison", *by, axis] if c in table] + [c for c in COLUMNS if c not in ("comparison",)]
    return table[list(dict.fromkeys([*cols, "sd_nats"]))]


def control_check(frame: pd.DataFrame, axis: str, baseline: Any, value: str = "final_val_loss",
                  seed: str = "seed", entropy: float | None = None, min_margin: float | None = None,
                  control_level: Any = None) -> tuple[pd.DataFrame, bool, str]:
    """The baseline against its frozen-blocks control, seeds as ints: (per-seed table baseline / control / margin,
    clear, sentence) by stats.control_verdict's rule, with `entropy` the unigram entropy of the evaluation tokens
    (a baseline whose loss is not below it is never clear). `frame`: one configuration (plus its control)."""
    from altgrad_lib.studies.stats import MIN_MARGIN_NATS, control_verdict

    is_ctl = _is_control(frame)
    ctl = frame[is_ctl & (frame[axis] == (baseline if control_level is None else control_level))]
    if ctl.empty:
        empty = pd.DataFrame(columns=["baseline", "control", "margin"]).rename_axis(seed)
        return empty, False, f"no frozen-blocks control ({CONTROL}: true) of {axis}={baseline!r}: gaps are unanchored"
    b = _by_seed(frame[~is_ctl & (frame[axis] == baseline)], seed, value)
    c = _by_seed(ctl, seed, value)
    table = pd.concat({"baseline": b, "control": c}, axis=1, join="inner").rename_axis(seed)
    table.index = table.index.astype(int)
    table["margin"] = table.control - table.baseline
    clear, sentence = control_verdict(table, MIN_MARGIN_NATS if min_margin is None else min_margin, entropy)
    return table, clear, sentence


def headline(table: pd.DataFrame, control_clear: bool | None, control_sentence: str = "") -> list[str]:
    """The lines a claims output starts with: an unresolved positive control, then whether these runs can carry
    claims at all (control check), then the resolved positive controls."""
    pcs = positive_control_lines(table) if len(table) else []
    lines = [ln for ln in pcs if "NOT resolved" in ln]
    if control_clear is False:
        lines.append(f"SMOKE TEST, no claims drawn from these runs: {control_sentence}")
    elif control_clear is None:
        lines.append("no frozen-blocks control: the window is unknown and no variant is checked against it")
    return lines + [ln for ln in pcs if "NOT resolved" not in ln]


def seed_gaps(frame: pd.DataFrame, axis: str, baseline: Any, value: str = "final_val_loss",
              seed: str = "seed") -> pd.DataFrame:
    """The frame with each run's gap to the baseline run **of its own seed**: gap_nats = L − L_baseline and
    val_gap_pct = 100 · gap_nats / L_baseline (NaN where that seed has no baseline run); seeds are ints, nothing is
    parsed from a label."""
    base = _by_seed(frame[(frame[axis] == baseline) & ~_is_control(frame)], seed, value)
    ref = frame[seed].map(base)
    return frame.assign(gap_nats=frame[value] - ref, val_gap_pct=100 * (frame[value] - ref) / ref)


def report_lines(table: pd.DataFrame, control_clear: bool | None, control_sentence: str) -> list[str]:
    """headline, then the control check when it is clear (a failed one is already in the headline), then the
    rules (describe) last: what a study or a notebook prints before its claims table."""
    lines = headline(table, control_clear, control_sentence)
    if control_clear:
        lines.append(f"control check: {control_sentence}")
    return [*lines, describe(table)]


def by_columns(table: pd.DataFrame) -> list[str]:
    """The configuration columns a claims table was grouped by (not its statistics, not the axis = `level`)."""
    return [c for c in table.columns if c not in COLUMNS and c != "sd_nats" and not table[c].equals(table["level"])]


def positive_control_lines(table: pd.DataFrame) -> list[str]:
    """One line per positive control; an unresolved one says that this study cannot resolve a known effect."""
    out = []
    for r in table[table.positive_control.astype(str) != ""].to_dict("records"):
        if r["positive_control"] == "resolved":
            also = f"; {NOT_TRAINING}: {r['control']}" if r["verdict"] == NOT_TRAINING else ""
            out.append(f"positive control {r['level']}: resolved (worse by {r['gap_nats']:+.4f} nats, "
                       f"Holm p {r['p_holm']:.3g}, {r['signs']}{also})")
        else:
            out.append(f"positive control {r['level']} NOT resolved ({r['verdict']}; gap {r['gap_nats']:+.4f} nats, "
                       f"MDE {r['mde_nats']:.4f}): this study cannot resolve an effect a known-harmful recipe has, "
                       f"so read no verdict below as evidence")
    return sorted(out, key=lambda s: "NOT" not in s)   # the unresolved first


def describe(table: pd.DataFrame, alpha: float = ALPHA, power: float = POWER) -> str:
    """The rules a table was judged by, with its δ and MDE range: one paragraph for under the table."""
    if table.empty:
        return "no comparisons"
    deltas = sorted(set(np.round(table.delta_nats.dropna().to_numpy(float), 6)))
    delta_txt = ", ".join(f"{d:.4g}" for d in deltas) if deltas else "n/a (window <= 0: no equivalence test)"
    mdes = table.mde_nats.dropna()
    mde_txt = f"{mdes.min():.4f}..{mdes.max():.4f} nats" if len(mdes) else "n/a (fewer than 2 pairs)"
    return (f"paired by seed; worse/better: Holm-adjusted paired-t p < {alpha}; equivalent: TOST p < {alpha} within "
            f"±δ, δ = {delta_txt} nats; MDE ({power:.0%} power, paired t at α = {alpha}): "
            f"{mde_txt}; 'inconclusive' means the seeds cannot tell, not 'no effect'")


def write_claims(table: pd.DataFrame, path: Any) -> None:
    """claims.csv, atomically (a reader never sees half a table)."""
    from altgrad_lib.io import write_csv

    write_csv(path, table)


__all__ = ["ALPHA", "POWER", "DELTA_WINDOW_FRACTION", "COLUMNS", "sign_flip_p", "holm", "tost_p", "power_paired",
           "mde", "paired_row", "verdict", "window_by_seed", "claims_table", "seed_gaps", "by_columns", "control_check", "headline", "report_lines",
           "positive_control_lines", "describe", "write_claims"]
