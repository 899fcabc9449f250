"""The orderings studies (params/studies/*_fp4_orderings.yaml) and the comparison keys they use: `levels` (only those
levels against the baseline, one Holm family per comparison) and `paper` / `source` (what a paper found)."""
from __future__ import annotations

import json
import zlib
from pathlib import Path

import pandas as pd
import pytest

from altgrad_lib.studies.runs import index_row
from altgrad_lib.studies.comparison import PAPER_FINDINGS
from altgrad_lib.studies.study import Study

STUDIES = Path(__file__).resolve().parents[1] / "params" / "studies"
BASE = {"n_layer": 1, "n_embd": 32, "n_head": 2, "max_steps": 20}


def _study(comparisons, recipes=("nvfp4", "nvfp4:sr_x", "nvfp4:sr_w", "mxfp4")):
    return Study.from_dict({"name": "t", "config": BASE, "axes": {"recipe": list(recipes), "seed": [0, 1, 2]},
                            "points": [{"recipe": "nvfp4", "freeze_blocks": True, "seed": s} for s in range(3)],
                            "comparisons": comparisons})


@pytest.mark.parametrize("name", ["cpu_fp4_orderings", "h100_fp4_orderings"])
def test_orderings_studies_load_with_a_paper_finding_for_every_compared_level(name):
    study = Study.from_yaml(STUDIES / f"{name}.yaml")
    for c in study.comparisons:
        # a level's key as the index records it (studies/runs.py): a dict-valued level as its sorted-key JSON
        levels = {json.dumps(v, sort_keys=True) if isinstance(v, dict) else str(v) for v in c.levels}
        assert {str(lv) for lv, _ in c.paper} == levels
        assert len(c.paper) == len(c.levels) and {f for _, f in c.paper} <= set(PAPER_FINDINGS)
        assert c.source.startswith("arXiv")


def test_levels_restrict_the_rows_and_paper_is_validated():
    c = {"axis": "recipe", "baseline": "nvfp4", "levels": ["nvfp4:sr_x"], "paper": {"nvfp4:sr_x": "worse"}}
    study = _study([c])
    rows = []
    for p in study.expand():
        loss = 3.0 + zlib.crc32(p.name.encode()) / 2**32 * 0.1 + (1.0 if p.config.freeze_blocks else 0.0)
        rows.append({**index_row(p, study.axis_columns()), "status": "completed", "final_val_loss": loss,
                     "final_train_loss": loss})
    table = study.claims(pd.DataFrame(rows))
    assert list(table["level"]) == ["nvfp4:sr_x"]                     # sr_w and mxfp4 are not in this family
    for bad, msg in [({**c, "levels": ["nvfp4:sr_z"]}, "must be a non-empty list of 'recipe' levels"),
                     ({**c, "levels": ["nvfp4"]}, "other than the baseline"),
                     ({**c, "paper": {"mxfp4": "worse"}}, "paper names 'mxfp4', which it does not compare"),
                     ({**c, "paper": {"nvfp4:sr_x": "wrose"}}, "did you mean 'worse'")]:
        with pytest.raises(ValueError, match=msg):
            _study([bad])
