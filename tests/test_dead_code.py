"""No dead code: every module-level function, class, UPPER_CASE constant and method of altgrad_lib is named
somewhere besides its own definition (the package, tests, notebooks, tools, bench, README). Plain AST + text."""
from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PKG = REPO / "altgrad_lib"
SOURCES = ("altgrad_lib", "tests", "notebooks", "tools", "bench", "params", "README.md", "pyproject.toml")

# called from outside the repository's text
INTERFACE = {
    "altgrad_lib/optim/manifold.py": {"_check_point_on_manifold", "_check_vector_on_tangent", "proju", "transp",
                                      "logmap"},   # geoopt's Manifold interface: geoopt calls them
    "altgrad_lib/notebook/table_view.py": {"_constructor"},   # pandas' subclassing interface: pandas calls it
}


def _defined(path: Path) -> list[str]:
    names = []
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        if isinstance(node, ast.ClassDef):
            names += [m.name for m in node.body
                      if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)) and not m.name.startswith("__")]
        if isinstance(node, ast.Assign):
            names += [t.id for t in node.targets if isinstance(t, ast.Name) and t.id.isupper()]
    return names


def _all_text() -> str:
    parts = []
    for src in SOURCES:
        p = REPO / src
        files = [p] if p.is_file() else sorted(f for f in p.rglob("*") if f.suffix in (".py", ".ipynb", ".md", ".yaml"))
        parts += [f.read_text(errors="ignore") for f in files if p.exists()]
    return "\n".join(parts)


def test_every_definition_is_used_somewhere():
    words = Counter(re.findall(r"\w+", _all_text()))
    unused = []
    for path in sorted(PKG.rglob("*.py")):
        rel = str(path.relative_to(REPO))
        for name in _defined(path):
            if name not in INTERFACE.get(rel, ()) and words[name] < 2:
                unused.append(f"{rel}:{name}")
    assert unused == []


def _unused_imports(path: Path) -> list[str]:
    """Module-level imports of `path` whose name is never read in it (lines marked `noqa` re-export on purpose)."""
    src = path.read_text()
    tree = ast.parse(src, str(path))
    lines = src.splitlines()
    imported = {}
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)) and not (isinstance(node, ast.ImportFrom)
                                                                   and node.module == "__future__"):
            if "noqa" in lines[node.lineno - 1]:
                continue
            for a in node.names:
                imported[(a.asname or a.name).split(".")[0]] = node.lineno
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    return [f"{path.name}:{line} {name}" for name, line in imported.items() if name not in used]


def test_tests_import_nothing_they_do_not_use():
    unused = [u for path in sorted((REPO / "tests").glob("*.py")) for u in _unused_imports(path)]
    assert unused == []
