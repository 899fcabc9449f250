"""Tests for altgrad_lib.notebook.analysis, the notebooks' thin namespace: every `analysis.<name>` a notebook calls
exists, and each is the very object of its topic module (no logic and no second copy in analysis.py)."""
from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import pytest

from altgrad_lib.notebook import analysis

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def _called_names() -> set[str]:
    names = set()
    for nb in NOTEBOOKS:
        for cell in json.loads(nb.read_text())["cells"]:
            if cell["cell_type"] == "code":
                names |= set(re.findall(r"\banalysis\.([A-Za-z_]\w*)", "".join(cell["source"])))
    return names


def test_every_name_the_notebooks_call_is_exported():
    called = _called_names()
    assert len(called) >= 10, called  # the notebooks were found and do use the namespace
    assert sorted(n for n in called if not hasattr(analysis, n)) == []


def test_analysis_defines_nothing_itself():
    own = [n for n, v in vars(analysis).items()
           if (inspect.isfunction(v) or inspect.isclass(v)) and v.__module__ == analysis.__name__]
    assert own == []


@pytest.mark.parametrize("name, module", [("binade_counts", "numerics.anatomy"),
                                          ("oracle_agreement", "numerics.oracles"),
                                          ("layer_sqnr", "quantize.layer_sqnr"), ("run_summary", "notebook.tables"),
                                          ("run_frame", "studies.results"), ("claims_table", "studies.claims"),
                                          ("sqnr_db", "numerics.quant")])
def test_names_are_the_topic_modules_objects(name, module):
    import importlib

    assert getattr(analysis, name) is getattr(importlib.import_module(f"altgrad_lib.{module}"), name)
