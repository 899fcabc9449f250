"""A study's claims: each comparison's claims table, the frozen-blocks control check, the report (claims.csv), and
the check at load that every claim setting can be computed (so `--dry-run` fails on a bad one before any run).

StudyClaims is mixed into Study (study.py), so `study.report(index)` reads as before; it holds no state and reads
the study's comparisons, positive_controls, seed_plan and base, and its views axis_columns, expand, results, level,
dir and claim_dir.
"""
from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any, Mapping

import pandas as pd

from altgrad_lib.choices import RECIPE_ALIASES
from altgrad_lib.errors import one_line
from altgrad_lib.studies.claims import claims_table, control_check, report_lines, write_claims
from altgrad_lib.studies.runs import index_row
from altgrad_lib.studies.sequential import describe_sequential, study_replay
from altgrad_lib.training.config import TrainConfig
from altgrad_lib.training.data import eval_unigram_entropy

# the index's losses (nats, lower is better): what claims compare
VALUE_COLUMNS = ("final_val_loss", "final_train_loss")
CLAIMS_FILE = "claims.csv"


class StudyClaims:
    """The claims of a Study (mixed into it: see the module docstring)."""

    def _check_claims_compute(self) -> None:
        """Every comparison's claims (and the report) computed now on a made-up index of this study's runs, all
        completed with deterministic losses: a setting the claims cannot use (no margin for a baseline without a
        control, ...) fails at load and in `--dry-run`, in one line, instead of after every run trained."""
        cols = self.axis_columns()
        rows = []
        for p in self.expand():
            u = zlib.crc32(p.name.encode()) / 2**32             # per run, so the seeds' gaps have a spread
            loss = 3.0 + 0.1 * u + (1.0 if p.config.freeze_blocks else 0.0)   # a control above its baseline
            rows.append({**index_row(p, cols), "status": "completed", "final_val_loss": loss,
                         "final_train_loss": loss})
        frame = pd.DataFrame(rows)
        for c in self.comparisons:
            try:
                self._claims_of(frame, c)
            except (ValueError, KeyError, TypeError, IndexError) as e:
                raise ValueError(f"study comparison {dict(c)}: its claims cannot be computed from this study's "
                                 f"runs: {one_line(e)}") from e
        try:
            self.report(frame, write=False)
        except (ValueError, KeyError, TypeError, IndexError) as e:
            raise ValueError(f"study {self.name!r}: its claims report cannot be made from its runs: {one_line(e)}") \
                from e

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

    def _claims_of(self, frame: pd.DataFrame, c: Mapping[str, Any], smoke: bool = False) -> pd.DataFrame:
        """claims.claims_table of one comparison `c` on the index `frame` (`smoke`: no verdicts, Study.claims)."""
        frame = self._canonical(frame)
        by = list(c.get("by") or [k for k in self.axis_columns() if k not in (c["axis"], "seed")])
        base = self.level(c["axis"], c["baseline"])
        if c.get("levels"):   # only these levels and the baseline (its frozen-blocks control included)
            keep = [base, *(self.level(c["axis"], v) for v in c["levels"])]
            frame = frame[frame[c["axis"]].isin(keep)]
        return claims_table(frame, c["axis"], base, by=by, value=c.get("value", VALUE_COLUMNS[0]),
                            delta=c.get("delta"), positive_controls=self.positive_controls if c["axis"] == "recipe"
                            else (), comparison=f"{c['axis']} vs {base}", smoke=smoke)

    def control(self, frame: pd.DataFrame | None = None,
                entropy: float | None = None) -> tuple[pd.DataFrame, bool, str]:
        """claims.control_check of the first comparison's baseline (seeds as ints) in the configuration of its first
        frozen-blocks control (the study's other axes at the control's values: control_check takes one
        configuration); (empty, False, why) without comparisons."""
        if not self.comparisons:
            return pd.DataFrame(), False, "the study has no comparisons"
        c = self.comparisons[0]
        frame = self._canonical(self.results() if frame is None else frame)
        base = self.level(c["axis"], c["baseline"])
        frozen = frame["freeze_blocks"].astype(str).str.lower() == "true" if "freeze_blocks" in frame else False
        ctl = frame[frozen & (frame[c["axis"]] == base)]
        others = [k for k in self.axis_columns() if k not in (c["axis"], "seed", "freeze_blocks") and k in frame]
        if len(ctl) and others:   # e.g. an lr axis beside a control at one lr: its baseline runs at that lr
            frame = frame[(frame[others] == ctl.iloc[0][others]).all(axis=1)]
        return control_check(frame, c["axis"], base, c.get("value", VALUE_COLUMNS[0]), entropy=entropy)

    def report(self, frame: pd.DataFrame | None = None, entropy: float | None = None,
               write: bool = True) -> tuple[pd.DataFrame, list[str]]:
        """(claims table, the lines that come before it: claims.headline + the rules it was judged by); writes
        claims.csv next to study.csv when `write`."""
        frame = self.results() if frame is None else frame
        ctl, clear, sentence = self.control(frame, entropy)   # None: no control, and not above the entropy
        table = self.claims(frame, smoke=clear is False)
        lines = report_lines(table, clear, sentence)
        if self.seed_plan is not None:   # the rules a sequential table was judged by replace the fixed-sample ones
            lines[-1:] = [self.seed_plan.describe(), describe_sequential(table, self.seed_plan)]
        if write:
            self.claim_dir()
            write_claims(table, self.claims_path)
        return table, lines

    def _canonical(self, frame: pd.DataFrame) -> pd.DataFrame:
        # the index records canonical recipe names ("hp"); a study file may use an alias ("bf16")
        return frame.assign(recipe=frame.recipe.replace(RECIPE_ALIASES)) if "recipe" in frame else frame
