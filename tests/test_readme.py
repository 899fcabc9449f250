"""README.md is a guide, not a measurement log: at most 300 lines, every repository file it names exists, and the
measurement histories it links to (bench/results/) are there."""
from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()
EXAMPLES = {"params/studies/my_formats.yaml"}   # the study file the README's example has the reader write


def test_the_readme_stays_a_guide():
    assert len(README.splitlines()) <= 300   # the bound of the issue that made it a guide: measurements go to bench/


def test_every_file_the_readme_names_exists():
    named = set(re.findall(r"(?<![\w/.-])((?:bench/results|bench|tests|tools|notebooks|params|altgrad_lib)/[\w/.-]+"
                           r"\.(?:py|md|ipynb|yaml|cfg|sh))", README))
    assert named and sorted(p for p in named - EXAMPLES if not (REPO / p).exists()) == []


def test_the_two_commands_link_their_measured_times():
    for f in ("bench/results/make_run.md", "bench/results/make_test.md"):
        assert f"({f})" in README and (REPO / f).is_file()
