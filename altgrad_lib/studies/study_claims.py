"""A study's claims: each comparison's claims table, the frozen-blocks control check and the report (claims.csv).
Every claim setting was checked when the study loaded (comparison.Comparison.parse), so `--dry-run` fails on a bad
one before any run.

StudyClaims is mixed into Study (study.py), so `study.report(index)` reads as before; it holds no state and reads
the study's comparisons, positive_controls, seed_plan and base, and its views axis_columns, expand, results, level,
dir and claim_dir.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from altgrad_lib.choices import unalias_recipe
from altgrad_lib.studies.claims import claims_table, control_check, report_lines, write_claims
from altgrad_lib.studies.comparison import NOT_BY, Comparison
from altgrad_lib.studies.runs import machines_line
from altgrad_lib.studies.sequential import describe_sequential, study_replay
from altgrad_lib.training.config import TrainConfig
from altgrad_lib.training.data import eval_unigram_entropy

CLAIMS_FILE = "claims.csv"


class StudyClaims:
    """The claims of a Study (mixed into it: see the module docstring)."""

    @property
    def claims_path(self) -> Path:
        return self.dir / CLAIMS_FILE

    def eval_entropy(self) -> float:
        """Unigram entropy (nats) of the evaluation split of the base config's corpus (training.data)."""
        cfg = TrainConfig.from_dict(self.base)
        return eval_unigram_entropy(cfg.corpus, cfg.tokenizer, cfg.max_docs)

    def claims(self, frame: pd.DataFrame | None = None, smoke: bool = False) -> pd.DataFrame:
        """claims.claims_table for every comparison of the study file, stacked (column `comparison`); `smoke`: the
        control check failed (report passes it), so no row gets a verdict."""
        frame = self._canonical(self.results() if frame is None else frame)
        if self.seed_plan is not None:   # seeds until resolved: the looks replayed, sequential verdicts
            return study_replay(self, frame, smoke=smoke).table
        tables = [self._claims_of(frame, c, smoke) for c in self.comparisons]
        return pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()

    def _claims_of(self, frame: pd.DataFrame, c: Comparison, smoke: bool = False) -> pd.DataFrame:
        """claims.claims_table of one comparison `c` on the index `frame` (`smoke`: no verdicts, Study.claims)."""
        frame = self._canonical(frame)
        if c.levels:   # only these levels and the baseline (its frozen-blocks control included)
            frame = frame[frame[c.axis].isin([c.baseline, *c.levels])]
        # a positive control is judged in the comparison that holds it (its own family where the study names one)
        pcs = [pc for pc in self.positive_controls if not c.levels or self._as_recorded(c.axis, pc) in c.levels] \
            if c.axis == "recipe" else []
        return claims_table(frame, c.axis, c.baseline, by=list(c.by_columns), value=c.value, delta=c.delta,
                            positive_controls=pcs,
                            comparison=c.label, smoke=smoke)

    def control(self, frame: pd.DataFrame | None = None,
                entropy: float | None = None) -> tuple[pd.DataFrame, bool, str]:
        """claims.control_check of the first comparison's baseline (seeds as ints) in the configuration of its first
        frozen-blocks control (the study's other axes at the control's values: control_check takes one
        configuration); (empty, False, why) without comparisons."""
        if not self.comparisons:
            return pd.DataFrame(), False, "the study has no comparisons"
        c = self.comparisons[0]
        frame = self._canonical(self.results() if frame is None else frame)
        frozen = frame["freeze_blocks"].astype(str).str.lower() == "true" if "freeze_blocks" in frame else False
        ctl = frame[frozen & (frame[c.axis] == c.baseline)]
        others = [k for k in self.axis_columns() if k not in (c.axis, *NOT_BY) and k in frame]
        if len(ctl) and others:   # e.g. an lr axis beside a control at one lr: its baseline runs at that lr
            frame = frame[(frame[others] == ctl.iloc[0][others]).all(axis=1)]
        return control_check(frame, c.axis, c.baseline, c.value, entropy=entropy)

    def report(self, frame: pd.DataFrame | None = None, entropy: float | None = None,
               write: bool = True) -> tuple[pd.DataFrame, list[str]]:
        """(claims table, the lines that come before it: claims.headline, a line when the runs come from more than
        one machine (runs.machines_line), the rules it was judged by); writes claims.csv next to study.csv when
        `write`."""
        frame = self.results() if frame is None else frame
        ctl, clear, sentence = self.control(frame, entropy)   # None: no control, and not above the entropy
        table = self.claims(frame, smoke=clear is False)
        lines = report_lines(table, clear, sentence)
        if self.seed_plan is not None:   # the rules a sequential table was judged by replace the fixed-sample ones
            lines[-1:] = [self.seed_plan.describe(), describe_sequential(table, self.seed_plan)]
        mixed = machines_line(frame)
        if mixed:
            lines.insert(1, mixed)
        if write:
            self.claim_dir()
            write_claims(table, self.claims_path)
        return table, lines

    def _canonical(self, frame: pd.DataFrame) -> pd.DataFrame:
        # the index records canonical recipe names ("hp"); a study file may use an alias ("bf16")
        if "recipe" not in frame:
            return frame
        return frame.assign(recipe=frame.recipe.map(lambda r: unalias_recipe(r) if isinstance(r, str) else r))
