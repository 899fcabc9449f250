"""Policy: no code decides by a verdict's words. Verdicts are typed (studies/verdicts.py: Kind, Verdict);
the words in a claims table's `verdict` column are for display, so rewording one can never change a statistic, a
positive control, an agreement with a paper or a notebook's count. This greps altgrad_lib/ and the code cells of
notebooks/*.ipynb for string tests on verdict words (startswith, `"..." in`, `== "..."` on a verdict, pandas
.str.startswith / .str.contains) and on the verdict-word constants they used (claims.INCONCLUSIVE, ...).
A run's status ("diverged" in study.csv) is a different field and is not a verdict."""
from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORDS = (r"(equivalent|worse|better|inconclusive|DISAGREES|NOT resolved|resolved|not judged|smoke test|SMOKE TEST|"
         r"too few|not training|agrees|contradicts|cannot tell|not reproduced|diverged in)")
CONSTS = r"\b(INCONCLUSIVE|NO_DELTA|NOT_TRAINING|WORSE_THAN_CONTROL|SMOKE|TOO_FEW|OPEN|_ALLOWS|_DECISIVE)\b"
LITERAL = r"[\"']" + WORDS
PATTERNS = (
    re.compile(r"startswith\([^)]*(" + LITERAL + "|[\"']diverged|" + CONSTS + ")"),        # .startswith("worse")
    re.compile(LITERAL + r"[^\"']*[\"']\s+(not\s+)?in\b"),                                   # "DISAGREES" in line
    re.compile(r"\.str\.(contains|startswith|match|fullmatch)\([^)]*(" + LITERAL + "|" + CONSTS + ")"),
    re.compile(r"(verdict|positive_control|agreement)\W*\s*[=!]=\s*" + LITERAL),               # r.verdict == "worse"
    re.compile(r"[=!]=\s*(claims(_lib)?\.)?" + CONSTS),                                       # == claims.SMOKE
    re.compile(r"verdict[\w\]'\")]*\.(split|partition|rpartition|removeprefix|removesuffix)\("),  # a cut of the words
)


def _hits(name: str, source: str) -> list[str]:
    return [f"{name}:{i}: {ln.strip()}" for i, ln in enumerate(source.splitlines(), 1)
            if not ln.lstrip().startswith("#") and any(p.search(ln) for p in PATTERNS)]


def test_the_patterns_catch_the_old_sites():
    """The grep would have found the sites issue 48 names (so an empty result below means something)."""
    old = ['level = np.where(t.verdict.str.startswith("equivalent"), 1 - 2 * alpha, 1 - a_row)',
           'return str(verdict_text).startswith(("worse", "diverged"))',
           'lines = [ln for ln in pcs if "NOT resolved" in ln]',
           'dis = [ln for ln in paper if "DISAGREES" in ln]',
           'open_rows = claims[claims.verdict.str.startswith(claims_lib.INCONCLUSIVE)]',
           'return str(verdict_text).startswith(OPEN)',
           'if verdict == claims.SMOKE:',
           'if r.verdict == "not training its blocks":',
           'elif str(r["positive_control"]).startswith("not judged"):',
           'how = r["verdict"] if str(r["verdict"]).startswith("diverged") else ""',
           'if got.startswith(_ALLOWS[finding]):',
           'labels.append(f"{r.level}\\n{str(r.verdict).split(\' (\')[0]}")']
    assert all(_hits("old", ln) for ln in old), [ln for ln in old if not _hits("old", ln)]
    fine = ['div = rows[rows["status"] == "diverged"]', 'kind is Kind.EQUIVALENT', 'said == papers.CONTRADICTS']
    assert not any(_hits("fine", ln) for ln in fine)


def test_no_library_code_tests_a_verdicts_words():
    hits = []
    for path in sorted((ROOT / "altgrad_lib").rglob("*.py")):
        hits += _hits(str(path.relative_to(ROOT)), path.read_text())
    assert not hits, "decide by verdicts.Kind (Verdict.from_row), not by words:\n" + "\n".join(hits)


def test_no_notebook_code_tests_a_verdicts_words():
    hits = []
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for i, cell in enumerate(json.loads(path.read_text())["cells"]):
            if cell["cell_type"] == "code":
                hits += _hits(f"{path.name} cell {i}", "".join(cell["source"]))
    assert not hits, "decide by verdicts.Kind (claims_view.kinds / expectations), not by words:\n" + "\n".join(hits)
