"""Where things live: the project root (for git provenance and `outputs/`) and the outputs / runs directories, and
the one rule that turns a value into a file-name part (slug: run names, study run names, token-cache directories)."""
from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path

PROJECT_NAME = "altgrad"
SLUG_CHARS = "A-Za-z0-9_.+-"   # what a file-name part keeps (a regex character-class body)
SLUG_FALLBACK = "custom"   # a value with none of them (a recipe dict named "" or "???")


def slug(value: object) -> str:
    """`value` as one file-name part: each run of characters outside SLUG_CHARS becomes one "_", leading and
    trailing "_" dropped; SLUG_FALLBACK when nothing is left."""
    return re.sub(f"[^{SLUG_CHARS}]+", "_", str(value)).strip("_") or SLUG_FALLBACK


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
