"""Cases a new user tried (issue 27: 188 newcomer cases), each kept fixed here: the right result, or a one-line
error before any compute (no run directory)."""
from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


# ================================================================================================================
# issue 27 items 1, 2, 4, 5, 6, 7 (scaling kinds), 8: silent wrong results and silent ignores (branch `silent`)
# ================================================================================================================

def _makefile_extras() -> set[str]:
    """The extras the Makefile's set-up installs (`pip install -e '.[a,b]'`)."""
    m = re.search(r"pip install -q -e '\.\[([^\]]+)\]'", (ROOT / "Makefile").read_text())
    assert m, "the Makefile no longer installs the project with extras: update this test"
    return set(m.group(1).split(","))


def test_setup_installs_the_optimi_peer_the_tests_compare_against():
    """A fresh clone's `make test` ran tests/test_optim_peers_bf16.py's optimi comparison as a skip ("could not
    import 'optimi'"): the distribution that provides `optimi` must be in what the set-up installs."""
    assert "optimi" in (ROOT / "tests" / "test_optim_peers_bf16.py").read_text()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = list(project["dependencies"])
    for extra in _makefile_extras():
        declared += project["optional-dependencies"].get(extra, [])
    names = {re.split(r"[<>=!~\[; ]", d, maxsplit=1)[0].lower().replace("_", "-") for d in declared}
    dists = importlib.metadata.packages_distributions().get("optimi")
    if dists is None:     # not installed here: the name PyPI gives the package (`pip index versions torch-optimi`)
        dists = ["torch-optimi"]
    assert {d.lower() for d in dists} & names, f"{dists} is not installed by `make setup` (extras {_makefile_extras()})"
