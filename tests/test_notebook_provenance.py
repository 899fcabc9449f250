"""The committed notebooks were executed at one clean commit (`make notebooks`), read from the provenance line each
prints ("altgrad 0.1.0 | git <sha> | torch ..."): so "hp" is one run across 02-06, not three runs of three codes."""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("0*.ipynb"))
_SHA = re.compile(r"\bgit ([0-9a-f]{7,40})(-dirty)?\b")


def provenance(path: Path) -> set[tuple[str, bool]]:
    """Every (sha, dirty) a notebook's outputs print."""
    found = set()
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        for out in cell.get("outputs", []):
            text = out.get("text", "") or out.get("data", {}).get("text/plain", "")
            for m in _SHA.finditer("".join(text) if isinstance(text, list) else text):
                found.add((m.group(1), bool(m.group(2))))
    return found


def test_provenance_reads_sha_and_dirty():
    assert _SHA.search("altgrad 0.1.0 | git 8965db382511-dirty | torch").groups() == ("8965db382511", "-dirty")


def test_the_notebooks_were_executed_at_one_clean_commit_of_this_history():
    assert len(NOTEBOOKS) >= 6
    seen = {nb.name: provenance(nb) for nb in NOTEBOOKS}
    assert all(seen.values()), [n for n, s in seen.items() if not s]   # non-vacuous: each prints its provenance
    shas = {sha for s in seen.values() for sha, _ in s}
    assert len(shas) == 1, f"executed at {len(shas)} commits: {seen} (run `make notebooks` on a clean tree)"
    dirty = [n for n, s in seen.items() if any(d for _, d in s)]
    assert not dirty, f"executed on a dirty tree: {dirty}"
    sha = shas.pop()
    known = subprocess.run(["git", "cat-file", "-e", f"{sha}^{{commit}}"], cwd=ROOT, capture_output=True)
    if known.returncode != 0 and (ROOT / ".git" / "shallow").exists():
        pytest.skip(f"a shallow clone does not hold {sha}")
    ancestor = subprocess.run(["git", "merge-base", "--is-ancestor", sha, "HEAD"], cwd=ROOT, capture_output=True)
    assert ancestor.returncode == 0, f"{sha} is not a commit of this branch's history"
