"""How notebooks 03-06 show claims: a status line at the top that is filled in once the claims exist, and the claims
table (studies/claims.py) in readable columns with its δ, MDE, diverged seeds, smoke flag and the CI at the level of
each verdict.

`StatusBanner` displays a placeholder with a display id in the notebook's first code cell; `update(lines)` replaces
it in place once the runs are trained and judged (Jupyter and papermill/nbclient both honour display updates), so
the first lines of an executed notebook say whether its runs can carry claims, computed, never typed.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd

from altgrad_lib.studies import claims

PENDING = "**Status:** computed after the runs are trained and judged (this line is replaced then)."


def status_markdown(lines: Sequence[str]) -> str:
    """The banner's text: "SMOKE TEST" or "CLAIMS" in bold, then the headline lines (claims.headline)."""
    smoke = any(ln.startswith("SMOKE TEST") or "NOT resolved" in ln for ln in lines)
    head = ("**SMOKE TEST: no claims are drawn from these runs.**" if smoke else
            "**Claims:** the control check is clear; the verdicts below are read at the stated α, δ and MDE.")
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

    def update(self, lines: Sequence[str]) -> str:
        self.text = status_markdown(lines)
        self._show()
        return self.text

    def markdown(self) -> str:
        return f"`{self.header}`\n\n{self.text}" if self.header else self.text

    def _show(self) -> None:
        from IPython.display import Markdown

        if self.handle is not None:
            self.handle.update(Markdown(self.markdown()))


def _p(v: float) -> str:
    return "" if not np.isfinite(v) else f"{v:.2g}" if v < 0.001 else f"{v:.3f}"


def _f4(v: float) -> str:
    return f"{v:.4f}" if np.isfinite(v) else ""


def ci_label(verdict: str, level: float, sequential: bool = False) -> str:
    """"90 % (TOST)" beside an equivalence verdict, "99.4 % (Holm)" beside the others, "95 %" in a smoke test: the
    level of the CI printed with a row (claims ci_level). In a sequential table (studies/sequential.py) the level is
    that of the look's group-sequential bound: "99.1 % (sequential bound)", "96.8 % (TOST, sequential bound)"."""
    if not np.isfinite(level):
        return ""
    if verdict == claims.SMOKE:
        return f"{100 * level:.0f} % (no test)"
    seq = ", sequential bound" if sequential else ""
    if str(verdict).startswith("equivalent"):
        return f"{100 * level:.3g} % (TOST{seq})"
    return f"{100 * level:.3g} % ({'sequential bound' if sequential else 'Holm'})"


def readable(table: pd.DataFrame, keys: Sequence[str] = ()) -> pd.DataFrame:
    """One display row per claim: the `keys` columns and the table's other `by` keys (claims.by_columns), the value
    compared, the level, seeds (pairs, diverged variant / baseline seeds), gap with the CI at the level its verdict
    uses (labelled), gap / window, the p-values, δ, TOST p, equiv_bound, MDE, the control check, smoke and the
    verdict (the numbers of claims.claims_table, formatted)."""
    if table.empty:
        return pd.DataFrame(columns=["level", "verdict"])
    keys = list(dict.fromkeys([*keys, *[c for c in claims.by_columns(table) if table[c].notna().any()]]))
    seeds = table.n_seeds if "n_seeds" in table else table.n
    return pd.DataFrame({
        **{k: table[k] for k in keys},
        "value": table["value"] if "value" in table else "", "level": table.level, "n pairs": table.n,
        "diverged": [f"{k}/{s}" for k, s in zip(table.n_diverged, seeds)],
        "baseline diverged": [f"{k}/{s}" for k, s in zip(table.n_diverged_baseline, seeds)],
        "gap nats [CI]": [f"{g:+.4f} [{lo:+.4f}, {hi:+.4f}]" if np.isfinite(lo) else f"{g:+.4f}"
                          for g, lo, hi in zip(table.gap_nats, table.ci_lo, table.ci_hi)],
        "CI": [ci_label(v, lv, "p_bound" in table) for v, lv in zip(table.verdict, table.ci_level)],
        "gap / window": [f"{v:+.1%}" if np.isfinite(v) else "" for v in table.gap_window],
        "p paired": table.p_paired.map(_p), "p Holm": table.p_holm.map(_p), "p sign-flip": table.p_perm.map(_p),
        "signs": table.signs, "p Welch": table.p_welch.map(_p),
        "δ nats": table.delta_nats.map(_f4), "p TOST": table.p_tost.map(_p),
        "equivalent within (90 % CI)": table.equiv_bound.map(lambda v: f"±{v:.4f}" if np.isfinite(v) else ""),
        "MDE nats": table.mde_nats.map(_f4),
        "control": table.control, "smoke": table.smoke.astype(bool), "verdict": table.verdict,
    }).reset_index(drop=True)


def _nats(v: float) -> str:
    return f"{v:.4f} nats" if np.isfinite(v) else "n/a"


def verdict_sentence(table: pd.DataFrame, level: Any) -> str:
    """"<level>: <verdict> (gap +0.0123 nats [99.4 % (Holm) CI ...], Holm p 0.01, worse in 3/3; MDE 0.0040 nats, δ
    0.0100 nats, data support ±0.0150; diverged 0/3, baseline 0/3)": prose from one claims row; a smoke-test row has
    its gap and no verdict."""
    r = table[table.level == level]
    if r.empty:
        return f"{level}: no claim (not compared)"
    r = r.iloc[0]
    ci = (f" [{r.ci_lo:+.4f}, {r.ci_hi:+.4f}] {ci_label(r.verdict, r.ci_level, 'p_bound' in r)} CI"
          if np.isfinite(r.ci_lo) else "")
    if bool(r.smoke):   # the gap and the seeds without a result, no verdict word
        return (f"{level}: {r.verdict} (gap {r.gap_nats:+.4f} nats{ci}; seeds with no result: {r.n_diverged}/"
                f"{r.n_seeds}, baseline {r.n_diverged_baseline}/{r.n_seeds})")
    seeds = f"diverged {r.n_diverged}/{r.n_seeds}, baseline {r.n_diverged_baseline}/{r.n_seeds}"
    return (f"{level}: {r.verdict} (gap {r.gap_nats:+.4f} nats{ci}, Holm p {_p(r.p_holm) or 'n/a'}, {r.signs}; "
            f"MDE {_nats(r.mde_nats)}, δ {_nats(r.delta_nats)}, data support ±{_nats(r.equiv_bound)}; {seeds})")


def claims_headline(table: pd.DataFrame, lines: Sequence[str]) -> str:
    """The headline result of a claims notebook (its cell tagged `headline`, read by notebook/report.py): the
    status line (`claims.report_lines(...)[0]`) and one verdict sentence per row."""
    return "\n".join([lines[0], *(verdict_sentence(table, level) for level in table.level)])


def expectation_lines(table: pd.DataFrame, expected: dict[Any, tuple[str, str]]) -> list[str]:
    """Each claims row against a published expectation {level: (verdict expected, source)}: "agrees" when the
    verdict is the expected one; "not reproduced beyond ±δ" when a direction (worse / better) was expected and the
    bench finds equivalence: that rules out an effect larger than δ here, not a smaller one in the same direction;
    "DISAGREES" for any other decisive verdict (the opposite direction, or a difference where equivalence was
    expected); else "cannot tell" (the verdict, e.g. inconclusive, too few seeds or a smoke test, with the row's
    MDE); "diverged in k/n seeds" agrees with an expected "worse". Levels the
    table lacks are skipped. The sentences are built from the table only."""
    decisive = ("worse", "better", "equivalent", "diverged")
    out = []
    for level, (want, source) in expected.items():
        r = table[table.level == level]
        if r.empty:
            continue
        r = r.iloc[0]
        got = str(r.verdict)
        nums = f"gap {r.gap_nats:+.4f} nats, Holm p {_p(r.p_holm) or 'n/a'}, MDE {_nats(r.mde_nats)}"
        if got.startswith(want) or (want == "worse" and claims.is_harm(got)):   # a diverged run is a harm too
            out.append(f"{level}: agrees with {source} ({want} vs {r.baseline}; {nums})")
        elif got.startswith("equivalent") and want in ("worse", "better"):
            out.append(f"{level}: not reproduced beyond ±δ: {source} reports {want} vs {r.baseline}, the bench finds "
                       f"{got} ({nums}); a smaller effect in that direction is not excluded")
        elif got.startswith(decisive):
            out.append(f"{level}: DISAGREES with {source}: {source} reports {want} vs {r.baseline}, the bench "
                       f"finds {got} ({nums})")
        else:
            out.append(f"{level}: cannot tell whether it agrees with {source} ({want} expected vs {r.baseline}): "
                       f"{got} ({nums})")
    return out


__all__ = ["PENDING", "StatusBanner", "status_markdown", "ci_label", "readable", "verdict_sentence",
           "claims_headline", "expectation_lines"]
