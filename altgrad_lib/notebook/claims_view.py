"""How notebooks 03-06 show claims: a status line at the top that is filled in once the claims exist, and the claims
table (studies/claims.py) in readable columns with its δ, MDE, diverged seeds, smoke flag and the CI at the level of
each verdict.

`claims_report(...)` is a notebook's whole claims block in one call: the frozen-blocks control check, the claims
table (or one the caller computed: seeds until resolved, a study file's comparisons), the headline lines, the status
banner, three narrow tables (verdicts, seeds, tests: each fits a JupyterLab column) and the rules it was judged by
(δ, MDE, α) under them; it returns a `ClaimsReport` whose methods give the sentences the notebook prints later.

`StatusBanner` displays a placeholder with a display id in the notebook's first code cell; `update(lines)` replaces
it in place once the runs are trained and judged (Jupyter and papermill/nbclient both honour display updates), so
the first lines of an executed notebook say whether its runs can carry claims, computed, never typed.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from altgrad_lib.notebook import table_view as tv
from altgrad_lib.studies import claims, papers
from altgrad_lib.studies.verdicts import FAMILY_COLUMN, Kind, Verdict, family_words

PENDING = "**Status:** computed after the runs are trained and judged (this line is replaced then)."


def status_markdown(lines: Sequence[str], smoke: bool, diverged: Sequence[str] = ()) -> str:
    """The banner's text: "SMOKE TEST" (`smoke`: the runs carry no claims, claims.no_claims: the control check
    failed or a positive control is not resolved) or "CLAIMS" in bold, then the headline lines (claims.headline).
    `diverged` (claims.diverged_rows: "E7M0 in 1/4 seeds") wins over a smoke test: a divergence is a harm whatever
    the control check says, so the banner leads with it."""
    head = ("**SMOKE TEST: no claims are drawn from these runs.**" if smoke else
            "**Claims:** the control check is clear; the verdicts below are read at the stated α, δ and MDE.")
    if smoke and diverged:
        head = (f"**DIVERGED: {', '.join(diverged)}: a harm.** Otherwise a smoke test: no other claim is drawn from "
                "these runs.")
    return "\n".join([head, "", *[f"- {ln}" for ln in lines]])


class StatusBanner:
    """A Markdown line shown where it is created and rewritten by `update` (IPython display ids)."""

    def __init__(self, text: str = PENDING):
        from IPython.display import Markdown, display

        self.text, self.header = text, ""
        self.handle = display(Markdown(text), display_id=True)

    def set_header(self, line: str) -> None:
        """A first line above the status: the notebook's run line (profile, seeds, code version), so the first
        output of the notebook names where its numbers come from."""
        self.header = line
        self._show()

    def update(self, lines: Sequence[str], smoke: bool, diverged: Sequence[str] = ()) -> str:
        """Show the headline `lines` under SMOKE TEST (`smoke`, claims.no_claims) or Claims; DIVERGED first when a
        row `diverged` (status_markdown)."""
        self.text = status_markdown(lines, smoke, diverged)
        self._show()
        return self.text

    def markdown(self) -> str:
        return f"`{self.header}`\n\n{self.text}" if self.header else self.text

    def _show(self) -> None:
        from IPython.display import Markdown

        if self.handle is not None:
            self.handle.update(Markdown(self.markdown()))


def ci_label(kind: Kind | str, level: float, sequential: bool = False) -> str:
    """"90 % (TOST)" beside an equivalence verdict, "99.4 % (Holm)" beside the others, "95 %" in a smoke test: the
    level of the CI printed with a row (claims ci_level), by the verdict's kind (verdicts.Kind). In a sequential
    table (studies/sequential.py) the level is that of the look's group-sequential bound: "99.1 % (sequential
    bound)", "96.8 % (TOST, sequential bound)"."""
    if not np.isfinite(level):
        return ""
    kind = Kind.of(kind)
    if kind is Kind.SMOKE:
        return f"{100 * level:.0f} % (no test)"
    seq = ", sequential bound" if sequential else ""
    if kind is Kind.EQUIVALENT:
        return f"{100 * level:.3g} % (TOST{seq})"
    return f"{100 * level:.3g} % ({'sequential bound' if sequential else 'Holm'})"


def kinds(table: pd.DataFrame) -> list[Kind]:
    """The verdict kind of each row of a claims table (verdicts.Verdict.from_row: one line when a row has none)."""
    return [Verdict.from_row(r).kind for r in table.to_dict("records")]


def _signed_pct(v: float) -> str:
    return tv.NONE if not np.isfinite(v) else tv.pct(100 * v) if round(100 * v, 1) == 0 else f"{100 * v:+.1f} %"


def readable(table: pd.DataFrame, keys: Sequence[str] = ()) -> tv.Table:
    """One display row per claim, the verdict first: the `keys` columns and the table's other `by` keys
    (claims.by_columns), the level, the verdict, the gap with the CI at the level its verdict uses (labelled), seeds
    (pairs, diverged variant / baseline seeds), gap / window, the p-values, δ, TOST p, equiv_bound, MDE, the control
    check, smoke and the value compared (the numbers of claims.claims_table with table_view's digits: gaps 3
    significant, margins 3 decimals, p 2 significant or "< 0.001", "none" where there is no number). A Table:
    displayed as HTML in JupyterLab, in blocks of at most table_view.WIDTH characters by print / to_string, columns
    with no value in any row (the p-values of one seed) named under it instead of shown empty."""
    if table.empty:
        return tv.table(pd.DataFrame(columns=["level", "verdict"]))
    fams = families(table)
    keys = list(dict.fromkeys([*keys, *[c for c in claims.by_columns(table) if table[c].notna().any()]]))
    seeds = table.n_seeds if "n_seeds" in table else table.n
    frame = pd.DataFrame({
        **{k: table[k] for k in keys},
        "level": table.level, "verdict": table.verdict,
        **({"family": table[FAMILY_COLUMN]} if len(fams) > 1 else {}),
        "gap nats [CI]": [tv.gap_ci(g, lo, hi) for g, lo, hi in zip(table.gap_nats, table.ci_lo, table.ci_hi)],
        "CI": [ci_label(k, lv, "p_bound" in table) or tv.NONE for k, lv in zip(kinds(table), table.ci_level)],
        "n pairs": table.n,
        "diverged": [f"{k}/{s}" for k, s in zip(table.n_diverged, seeds)],
        "baseline diverged": [f"{k}/{s}" for k, s in zip(table.n_diverged_baseline, seeds)],
        "gap / window": table.gap_window.map(_signed_pct),
        "p paired": table.p_paired.map(tv.p_value), "p Holm": table.p_holm.map(tv.p_value),
        "p sign-flip": table.p_perm.map(tv.p_value), "signs": table.signs, "p Welch": table.p_welch.map(tv.p_value),
        "δ nats": table.delta_nats.map(tv.margin), "p TOST": table.p_tost.map(tv.p_value),
        "equivalent within (90 % CI)": table.equiv_bound.map(lambda v: "±" + tv.margin(v) if np.isfinite(v)
                                                             else tv.NONE),
        "MDE nats": table.mde_nats.map(tv.margin),
        "control": table.control, "smoke": table.smoke.astype(bool),
        "value": table["value"] if "value" in table else "",
    }).reset_index(drop=True)
    return tv.table(frame, keys=[*keys, "level"], caption=family_words(fams) if len(fams) == 1 else "")


def families(table: pd.DataFrame) -> list[str]:
    """The verdict families of a claims table's rows (verdicts.Verdict.family), each once, in row order; [] for a
    table without the column."""
    if FAMILY_COLUMN not in table:
        return []
    return [f for f in dict.fromkeys(table[FAMILY_COLUMN].tolist()) if isinstance(f, str) and f]


def _nats(v: float) -> str:
    return f"{tv.margin(v)} nats" if np.isfinite(v) else "n/a"


def _holm(v: float) -> str:
    return tv.p_value(v) if np.isfinite(v) else "n/a"


def verdict_sentence(table: pd.DataFrame, level: Any) -> str:
    """"<level>: <verdict> (gap +0.0123 nats [+0.0081, +0.0165] 99.4 % (Holm) CI, Holm p 0.012, worse in 3/3; MDE
    0.004 nats, δ 0.010 nats, data support ±0.015 nats; diverged 0/3, baseline 0/3; Holm over 7 rows of recipe vs
    hp)": prose from one claims row, with table_view's digits, naming the verdict's family; a smoke-test row has its
    gap and no verdict."""
    r = table[table.level == level]
    if r.empty:
        return f"{level}: no claim (not compared)"
    r = r.iloc[0]
    v = Verdict.from_row(r)
    gap, _, bounds = tv.gap_ci(r.gap_nats, r.ci_lo, r.ci_hi).partition(" ")   # the CI with the gap's decimals
    ci = f" {bounds} {ci_label(v.kind, r.ci_level, 'p_bound' in r)} CI" if bounds else ""
    fam = f"; {v.family}" if v.family else ""
    if bool(r.smoke) and v.kind is Kind.SMOKE:   # the gap and the seeds without a result, no verdict word
        return (f"{level}: {r.verdict} (gap {gap} nats{ci}; seeds with no result: {r.n_diverged}/"
                f"{r.n_seeds}, baseline {r.n_diverged_baseline}/{r.n_seeds})")
    seeds = f"diverged {r.n_diverged}/{r.n_seeds}, baseline {r.n_diverged_baseline}/{r.n_seeds}"
    return (f"{level}: {r.verdict} (gap {gap} nats{ci}, Holm p {_holm(r.p_holm)}, {r.signs}; "
            f"MDE {_nats(r.mde_nats)}, δ {_nats(r.delta_nats)}, data support ±{_nats(r.equiv_bound)}; {seeds}{fam})")


def claims_headline(table: pd.DataFrame, lines: Sequence[str]) -> str:
    """The headline result of a claims notebook (its cell tagged `headline`, read by notebook/report.py): the
    status line (`claims.report_lines(...)[0]`) and one verdict sentence per row."""
    return "\n".join([*lines[:1], *(verdict_sentence(table, level) for level in table.get("level", ()))])


def expectations(table: pd.DataFrame, expected: dict[Any, tuple[str, str]]) -> list[tuple[str, str]]:
    """Each claims row against a published expectation {level: (verdict expected, source)}: (agreement, sentence),
    the agreement papers.agreement's word from the row's verdict kind: "agrees" when the verdict is the expected
    one; "not reproduced beyond ±δ" when a direction (worse / better) was expected and the bench finds
    equivalence: that rules out an effect larger than δ here, not a smaller one in the same direction;
    "contradicts" (the sentence says "DISAGREES") for any other decisive verdict resolved beyond ±δ (the opposite
    direction, or a difference where equivalence was expected); the same verdict with a CI reaching inside ±δ reads
    "opposite sign, not shown beyond ±δ" / "a difference, not shown beyond ±δ"; else "cannot tell" (the verdict,
    e.g. inconclusive, too few seeds or a smoke test, with the row's MDE); "diverged in k/n seeds" agrees with an
    expected "worse". Each sentence names the verdict's family. Levels the table lacks are skipped. The sentences
    are built from the table only."""
    out = []
    for level, (want, source) in expected.items():
        r = table[table.level == level]
        if r.empty:
            continue
        r = r.iloc[0]
        got = str(r.verdict)
        v = Verdict.from_row(r)
        nums = (f"gap {tv.gap(r.gap_nats)} nats, Holm p {_holm(r.p_holm)}, MDE {_nats(r.mde_nats)}"
                + (f"; {v.family}" if v.family else ""))
        said = papers.agreement(want, v)   # one rule for every paper-vs-bench comparison
        if said == papers.AGREES:
            line = f"{level}: agrees with {source} ({want} vs {r.baseline}; {nums})"
        elif said == papers.NOT_REPRODUCED:
            line = (f"{level}: not reproduced beyond ±δ: {source} reports {want} vs {r.baseline}, the bench finds "
                    f"{got} ({nums}); a smaller effect in that direction is not excluded")
        elif said == papers.CONTRADICTS:
            line = (f"{level}: DISAGREES with {source}: {source} reports {want} vs {r.baseline}, the bench "
                    f"finds {got} ({nums})")
        elif said in (papers.OPPOSITE_WITHIN, papers.DIFFERS_WITHIN):
            line = (f"{level}: {said}: {source} reports {want} vs {r.baseline}, the bench finds {got} ({nums}); "
                    "an effect this size is not shown beyond δ, so it does not contradict the paper")
        else:
            line = (f"{level}: cannot tell whether it agrees with {source} ({want} expected vs {r.baseline}): "
                    f"{got} ({nums})")
        out.append((said, line))
    return out


def expectation_lines(table: pd.DataFrame, expected: dict[Any, tuple[str, str]]) -> list[str]:
    """The sentences of `expectations`."""
    return [line for _, line in expectations(table, expected)]

# readable's columns, in three tables a JupyterLab column holds (~tv.WIDTH characters each): what was found, what the
# seeds did, the tests behind the verdict. The `keys` and `level` lead each one.
VERDICT_COLUMNS = ("verdict", "gap nats [CI]", "CI")
SEED_COLUMNS = ("diverged", "baseline diverged", "beats control", "signs", "p sign-flip")
TEST_COLUMNS = ("n pairs", "p paired", "p Holm", "p Welch", "δ nats", "p TOST", "supported δ", "MDE nats",
                "gap / window")
_BEAT = "beat the frozen-blocks control in "
_CAPTIONS = ("Verdicts against the baseline of the same seed, the CI at the level each verdict uses",
             "Seeds: diverged seeds (the row's, its baseline's), the frozen-blocks control beaten in k/n seeds, "
             "the signs of the paired gaps and their exact sign-flip p",
             "Tests: pairs, paired-t / Holm / Welch p, TOST p within ±δ, the smallest δ the data support (90 % CI), "
             "the minimum detectable effect (nats), the gap over the hp-vs-control window (information only)")


def claims_tables(table: pd.DataFrame, keys: Sequence[str] = ()) -> list[tv.Table]:
    """`readable(table, keys)` as three narrow Tables (verdicts, seeds, tests), each led by the keys and the level
    (less a `by` key every level spells as a word: format "E4M3" of level "E4M3 adamw fp32"), with the same digits; a
    column with one value in every row (the value compared, the smoke flag) is said once in
    the first caption instead of down a column."""
    full = readable(table, keys)
    if table.empty:
        return [full]
    level = " " + full.level.astype(str) + " "   # a `by` key the level already spells (05's "E4M3 adamw fp32")
    lead = [k for k in full._keys if k in keys or k == "level"
            or not all(f" {v} " in lv for v, lv in zip(full[k].astype(str), level))]
    f = pd.DataFrame(full).rename(columns={"equivalent within (90 % CI)": "supported δ"})
    f["beats control"] = f.control.map(lambda c: c.removeprefix(_BEAT) if c.startswith(_BEAT) else c)
    const = [c for c in ("value", "smoke") if f[c].nunique() == 1]
    said = {"value": lambda v: f"value compared: {v}", "smoke": lambda v: "smoke test: " + ("yes" if v else "no")}
    note = "; ".join(said[c](f[c].iloc[0]) for c in const)
    fams = families(table)
    if len(fams) == 1:   # one family for every row: said once above the table, not down a column
        note = "; ".join(x for x in (family_words(fams), note) if x)
    cols = ((*VERDICT_COLUMNS, *(["family"] if len(fams) > 1 else [])), SEED_COLUMNS,
            (*TEST_COLUMNS, *(c for c in ("value", "smoke") if c not in const)))
    caps = (_CAPTIONS[0] + (f"\n({note})" if note else ""), *_CAPTIONS[1:])
    return [tv.table(f[[*lead, *c]], keys=lead, caption=cap) for c, cap in zip(cols, caps)]


def _rules_list(rules: Any) -> list[str]:
    return [rules] if isinstance(rules, str) else list(rules)


@dataclass(repr=False)
class ClaimsReport:
    """What `claims_report` computed: the claims table (studies/claims.py columns), the control check (per-seed
    table, clear, sentence; None where none was run), the headline `lines` (the status banner's) and the `rules` the
    table was judged by (δ, MDE, α: claims.describe, or the sequential rules of a seed plan)."""

    claims: pd.DataFrame
    lines: list[str]
    rules: list[str]
    control: pd.DataFrame | None = None
    clear: bool | None = None
    control_sentence: str = ""
    keys: list[str] = field(default_factory=list)

    def tables(self) -> list[tv.Table]:
        """The control check per seed (when one was run), then claims_tables."""
        out = []
        if self.control is not None and len(self.control):
            ctl = self.control.rename(columns={"baseline": "baseline loss", "control": "control loss",
                                               "margin": "margin nats"})
            out.append(tv.table(ctl, caption="Control check per seed: the baseline's loss, its frozen-blocks "
                                             "control's, the margin (nats)"))
        return out + claims_tables(self.claims, self.keys)

    def show(self) -> None:
        """The headline lines, the tables (HTML in JupyterLab, narrow text blocks elsewhere), the rules under them."""
        from IPython.display import display   # IPython: only where a report is shown (a notebook has it)

        if self.lines:
            print("\n".join(self.lines))
        for t in self.tables():
            display(t)
        print("\n".join(self.rules))

    def text(self) -> str:
        """Everything `show` displays, as text."""
        return "\n\n".join([*(["\n".join(self.lines)] if self.lines else []), *(str(t) for t in self.tables()),
                            "\n".join(self.rules)])

    def status(self) -> str:
        """The status banner's text without Markdown bold: DIVERGED / SMOKE TEST / Claims, then the headline
        lines."""
        return status_markdown(self.lines, self.no_claims, self.diverged).replace("**", "")

    @property
    def diverged(self) -> list[str]:
        """claims.diverged_rows: the rows whose verdict is "diverged" ("E7M0 in 1/4 seeds"), by their kind."""
        return claims.diverged_rows(self.claims)

    @property
    def no_claims(self) -> bool:
        """The runs carry no claims (claims.no_claims: the control check failed or a positive control is not
        resolved): the status says SMOKE TEST."""
        return claims.no_claims(self.claims, self.clear)

    def verdict(self, level: Any) -> str:
        """verdict_sentence of one row."""
        return verdict_sentence(self.claims, level)

    def summary(self) -> str:
        """The status, then one verdict sentence per row: a notebook's take-away."""
        return "\n".join([self.status(), *(self.verdict(lv) for lv in self.claims.get("level", []))])

    def headline(self) -> str:
        """claims_headline: the first status line and one verdict sentence per row (the `headline` cell)."""
        return claims_headline(self.claims, self.lines)

    def __repr__(self) -> str:
        return f"ClaimsReport({len(self.claims)} row(s); {self.lines[0] if self.lines else 'no headline'})"


def claims_report(frame: pd.DataFrame | None = None, axis: str | None = None, baseline: Any = None, *,
                  control_level: Any = None, entropy: float | None = None, value: str = "final_val_loss",
                  by: Sequence[str] = (), delta: float | None = None, comparison: str = "",
                  positive_controls: Sequence[Any] = (), claims_table: pd.DataFrame | None = None,
                  rules: str | Sequence[str] | Callable[[pd.DataFrame], Any] | None = None, study: Any = None,
                  keys: Sequence[str] = (), status: StatusBanner | None = None, write: Any = None,
                  show: bool = True, families: Mapping[Any, str] | None = None) -> ClaimsReport:
    """A notebook's claims block in one call: the control check of `baseline` (claims.control_check on `frame`,
    `control_level` and `entropy` as there), the claims table (claims.claims_table with `by`, `value`, `delta`,
    `comparison`, `positive_controls`, smoke when the control check failed), the headline lines (claims.report_lines),
    shown with the tables and the rules (δ, MDE, α) under them; `status`: a StatusBanner updated with the lines.

    `claims_table`: a table computed elsewhere (train_until_resolved's, with the control check of its own looks),
    used as is; with `comparison`, only that comparison's rows. `frame` None: no control check (an ablation against
    another level). `families`: level -> its Holm family's name (claims.claims_table), where the rows answer several
    questions. `study`: a Study whose comparisons and control give the table (Study.report). `rules`: the rules'
    text, or a function of the table (a seed plan's `describe`), default claims.describe. `keys`: claims columns that
    lead each row. `write`: a path for claims.csv. `show` False: compute only.
    """
    if study is not None:
        if frame is None:
            raise ValueError("claims_report: study= needs frame= (the study's index)")
        ctl, clear, sentence = study.control(frame, entropy)
        table, lines = study.report(frame, entropy, write=False)
        n = len(lines) - (2 if study.seed_plan is not None else 1)   # Study.report: its lines, then its rules
        lines, rule_lines = lines[:n], lines[n:]
    else:
        if claims_table is None and (frame is None or axis is None or baseline is None):
            raise ValueError("claims_report: give frame, axis and baseline (the runs to judge) or claims_table= "
                             "(a table computed elsewhere)")
        ctl, clear, sentence = (claims.control_check(frame, axis, baseline, value, entropy=entropy,
                                                     control_level=control_level)
                                if frame is not None and axis is not None else (None, None, ""))
        if claims_table is None:
            table = claims.claims_table(frame, axis, baseline, by=by, value=value, delta=delta,
                                        positive_controls=positive_controls, comparison=comparison,
                                        control_level=control_level, smoke=clear is False, families=families)
        else:
            table = claims_table
            if comparison:
                known = sorted(map(str, pd.unique(table.comparison))) if "comparison" in table else []
                if comparison not in known:
                    raise ValueError(f"claims_report: comparison={comparison!r} is not in the table; valid "
                                     f"choices: {known}")
                table = table[table.comparison == comparison].reset_index(drop=True)
        lines = (claims.report_lines(table, clear, sentence)[:-1] if ctl is not None else
                 claims.positive_control_lines(table) if len(table) else [])
        rule_lines = _rules_list(rules(table) if callable(rules) else
                                 claims.describe(table) if rules is None else rules)
    unknown = [k for k in keys if k not in table.columns] if len(table) else []   # no comparison: no columns
    if unknown:
        raise ValueError(f"claims_report: keys={unknown} are not claims columns; valid choices: {list(table.columns)}")
    rep = ClaimsReport(table, list(lines), list(rule_lines), ctl, clear, sentence, list(keys))
    if write is not None:
        claims.write_claims(table, write)
    if status is not None:
        status.update(rep.lines, rep.no_claims, rep.diverged)
    if show:
        rep.show()
    return rep


def paper_view(table: pd.DataFrame) -> tv.Table:
    """studies.papers.paper_table as a narrow table: the level and its baseline (with the comparison's `by` keys),
    what the paper found, what AltGrad finds (the claims verdict), the agreement, then the gap [CI at the verdict's
    level], the MDE and the seeds, whether the design differs from the paper's (the texts in the caption, "none
    stated") and the verdict's family (in the caption when every row shares one, else a column). Rows with no claims
    row read "not run" and "none" for the numbers."""
    cols = {k: table[k] if k in table else pd.Series(np.nan, index=table.index) for k in
            ("gap_nats", "ci_lo", "ci_hi", "mde_nats", "n_seeds")}
    by = [k for k in table.columns if k not in papers.PAPER_COLUMNS]   # a comparison's `by` keys: said in "vs"
    vs = [", ".join([str(r.baseline), *(f"{k} {r[k]}" for k in by if not tv.missing(r[k]))])
          for _, r in table.iterrows()]
    frame = pd.DataFrame({
        "level": table.level, "vs": vs, "paper": table.paper,
        "AltGrad finds": table.verdict, "agreement": table.agreement,
        "gap nats [CI]": [tv.gap_ci(g, lo, hi) for g, lo, hi in zip(cols["gap_nats"], cols["ci_lo"], cols["ci_hi"])],
        "MDE nats": cols["mde_nats"].map(tv.margin),
        "seeds": cols["n_seeds"].map(lambda v: tv.NONE if tv.missing(v) else str(int(v))),
    }).reset_index(drop=True)
    diffs = [t if isinstance(t, str) else "" for t in table.get("design_differences", pd.Series("", table.index))]
    frame["design vs paper"] = ["differs (caption)" if t else "none stated" for t in diffs]
    fams = families(table.rename(columns={"family": FAMILY_COLUMN})) if "family" in table else []
    if len(fams) > 1:
        frame["family"] = table["family"].to_numpy()
    said = dict.fromkeys(f"{lv}: {t}" for lv, t in zip(table.level, diffs) if t)   # a text once per level
    caption = "\n".join([*([family_words(fams)] if len(fams) == 1 else []),
                         *(["design differences from the paper:", *said] if said else [])])
    return tv.table(frame, keys=["level"], caption=caption)


__all__ = ["PENDING", "StatusBanner", "status_markdown", "ci_label", "readable", "verdict_sentence",
           "claims_headline", "kinds", "families", "expectations",
           "expectation_lines", "paper_view", "VERDICT_COLUMNS", "SEED_COLUMNS", "TEST_COLUMNS",
           "claims_tables", "ClaimsReport", "claims_report"]
