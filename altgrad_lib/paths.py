"""Where things live: the project root (for git provenance and `outputs/`) and the outputs / runs directories."""
from __future__ import annotations

import os
import tomllib
from pathlib import Path

PROJECT_NAME = "altgrad"


def project_root(start: str | Path | None = None) -> Path | None:
    """Nearest parent of `start` (default cwd) holding a pyproject.toml whose project name is "altgrad".

    Notebooks run with cwd=notebooks/, so a plain cwd-relative "outputs/" would land in the wrong place.
    """
    here = Path(start if start is not None else Path.cwd()).resolve()
    for d in (here, *here.parents):
        pp = d / "pyproject.toml"
        if pp.is_file():
            try:
                name = tomllib.loads(pp.read_text()).get("project", {}).get("name")
            except (tomllib.TOMLDecodeError, OSError):
                continue
            if name == PROJECT_NAME:
                return d
    return None


def outputs_dir(start: str | Path | None = None) -> Path:
    """`$ALTGRAD_OUTPUTS` if set, else `<project root>/outputs`, else `./outputs` (outside the repo)."""
    env = os.environ.get("ALTGRAD_OUTPUTS")
    if env:
        return Path(env).expanduser().resolve()
    root = project_root(start)
    return (root if root is not None else Path.cwd().resolve()) / "outputs"


def shown(path: str | Path) -> str:
    """A path as output shows it: `<outputs>/...` under the outputs directory, relative under the project root,
    else as given, so no notebook output or log carries one machine's absolute paths."""
    p = Path(path).expanduser().resolve()
    out = outputs_dir()
    if p.is_relative_to(out):
        return str(Path("<outputs>") / p.relative_to(out))
    root = project_root()
    return str(p.relative_to(root)) if root is not None and p.is_relative_to(root) else str(path)


def runs_dir(start: str | Path | None = None) -> Path:
    return outputs_dir(start) / "runs"
