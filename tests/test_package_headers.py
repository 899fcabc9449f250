"""Each package's header lists its files: every module of an altgrad_lib package is named (as `<module>.py`) in its
`__init__.py` docstring, and every `<name>.py` that docstring names exists, so a reader can find their way from the
header (the README's "Layout" says the headers list the files). Also: no lambda is assigned behind a `noqa: E731`."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGES = sorted(p.parent for p in (REPO / "altgrad_lib").rglob("__init__.py") if "__pycache__" not in p.parts)


def _header(pkg: Path) -> str:
    return ast.get_docstring(ast.parse((pkg / "__init__.py").read_text())) or ""


@pytest.mark.parametrize("pkg", PACKAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_the_package_header_names_each_of_its_modules(pkg):
    named = set(re.findall(r"(?<![\w/.])(\w+\.py)\b", _header(pkg)))
    modules = {f.name for f in pkg.glob("*.py") if f.name != "__init__.py"}
    assert sorted(modules - named) == [], f"{pkg.relative_to(REPO)}/__init__.py's docstring does not list them"


@pytest.mark.parametrize("pkg", PACKAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_the_package_header_names_no_module_that_is_not_there(pkg):
    named = set(re.findall(r"(?<![\w/.])(\w+\.py)\b", _header(pkg)))   # a sibling (quantize's model.py) may be named
    assert sorted(n for n in named if not (pkg / n).exists() and not (pkg.parent / n).exists()) == []


def test_the_packages_are_found():
    names = {p.name for p in PACKAGES}
    assert {"altgrad_lib", "numerics", "quantize", "optim", "monitors", "training", "studies", "notebook"} <= names


def test_no_assigned_lambda_hides_behind_a_noqa():
    """ruff's E731 (in pyproject's select through "E") keeps assigned lambdas out; a `noqa: E731` would let one back."""
    hits = [f"{f.relative_to(REPO)}:{i}" for root in ("altgrad_lib", "tests", "bench", "tools")
            for f in sorted((REPO / root).rglob("*.py")) if f != Path(__file__).resolve()
            for i, line in enumerate(f.read_text().splitlines(), 1) if "noqa: E731" in line]
    assert hits == []
