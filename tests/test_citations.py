"""Comments and docstrings cite only what is in the repository: every tests/, bench/results/ or notebooks/ file
named in a .py source exists, and the library cites no issue number (issues live outside the repository; a test
may still say which issue reported the regression it guards)."""
from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ROOTS = ("altgrad_lib", "tests", "tools", "bench")
CITED = re.compile(r"(?<![\w/.])((?:tests|bench/results|notebooks)/[\w/.-]+\.(?:py|md|ipynb))")
ISSUE = re.compile(r"\bissues? #?\d+", re.IGNORECASE)


def _lines(roots=ROOTS):
    for root in roots:
        for path in sorted((REPO / root).rglob("*.py")):
            for i, line in enumerate(path.read_text().splitlines(), 1):
                yield f"{path.relative_to(REPO)}:{i}", line


def test_cited_files_exist():
    missing = [f"{where} {p}" for where, line in _lines() for p in CITED.findall(line) if not (REPO / p).exists()]
    assert missing == []


def test_the_library_cites_no_issue_numbers():
    assert [where for where, line in _lines(("altgrad_lib",)) if ISSUE.search(line)] == []
