"""The first line every notebook prints: which profile its outputs come from, its seeds and the code version.

    run_line(notebook, params, seeds)
        -> "profile cpu (params/02_bf16_baseline/cpu.yaml) | seeds 0, 1 | code altgrad 0.1.0, git 79f649b12345"
    profile_of(notebook, params) -> "cpu (params/02_bf16_baseline/cpu.yaml)" | "CI defaults" | "custom parameters"
    code_version() -> "altgrad 0.1.0, git 79f649b12345" (git's short SHA, "-dirty" when the code differs)

The profile is found, not told: the notebook's parameters are compared with its CI defaults (the annotated
assignments of its `parameters` cell) and with each params/<notebook>/<name>.yaml laid over those defaults, the
same way papermill lays a YAML over the parameters cell. Parameters that match none of them are "custom".
"""
from __future__ import annotations

import ast
import json
import math
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml

import altgrad_lib
from altgrad_lib.notebook.tables import git_sha
from altgrad_lib.paths import project_root


def code_version() -> str:
    """The package version, plus git's short SHA of HEAD (and "-dirty") in a git checkout."""
    sha = git_sha()
    return f"altgrad {altgrad_lib.__version__}" + (f", git {sha}" if not sha.startswith("unknown") else " (no git)")


def notebook_defaults(path: str | Path) -> dict[str, Any] | None:
    """The CI defaults of a notebook: `name: type = literal` of its cell tagged `parameters`; None without one.
    Read as the JSON it is (nbformat 4: a cell's source is a string or a list of lines), not with nbformat: its
    import (jsonschema and its format checkers) cost every notebook kernel ~2 s (bench/results/run_fixed_costs.md)."""
    nb = json.loads(Path(path).read_text(encoding="utf-8"))
    for cell in nb.get("cells", []):
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            source = cell.get("source", "")
            out = {}
            for node in ast.parse("".join(source) if isinstance(source, list) else source).body:
                if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                    out[node.target.id] = ast.literal_eval(node.value)
            return out
    return None


def _same_param(a: Any, b: Any) -> bool:
    """Parameter values equal as papermill would give them (ints widened to floats, YAML's "3e-4" text a float)."""
    def num(v):
        if isinstance(v, bool):
            return None
        if isinstance(v, (int, float)):
            return float(v)
        if isinstance(v, str):
            try:
                return float(v)
            except ValueError:
                return None
        return None

    na, nb = num(a), num(b)
    if na is not None and nb is not None:
        return na == nb or (math.isnan(na) and math.isnan(nb))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_same_param(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same_param(x, y) for x, y in zip(a, b))
    return a == b


def _matches(params: Mapping[str, Any], expected: Mapping[str, Any]) -> bool:
    return params.keys() == expected.keys() and all(_same_param(params[k], expected[k]) for k in params)


def profile_of(notebook: str, params: Mapping[str, Any], root: str | Path | None = None) -> str:
    """Which parameter set `params` is: "CI defaults", "<name> (params/<notebook>/<name>.yaml)", both, or
    "custom parameters"."""
    root = Path(root) if root is not None else project_root()
    if root is None:
        return "unknown (not run from an altgrad checkout)"
    source = root / "notebooks" / f"{notebook}.ipynb"
    defaults = notebook_defaults(source) if source.exists() else None
    found = []
    if defaults is not None and _matches(params, defaults):
        found.append("CI defaults")
    for f in sorted((root / "params" / notebook).glob("*.yaml")):
        given = yaml.safe_load(f.read_text()) or {}
        expected = {**defaults, **given} if defaults is not None else None
        if (expected is not None and _matches(params, expected)) or (
                expected is None and all(k in params and _same_param(params[k], v) for k, v in given.items())):
            found.append(f"{f.stem} (params/{notebook}/{f.name})")
    return " = ".join(found) if found else "custom parameters"


def _seeds(seeds: Any) -> str:
    plan = (seeds if isinstance(seeds, Mapping) else
            {k: getattr(seeds, k) for k in ("min", "max", "start")} if hasattr(seeds, "max") else None)
    if plan is not None:   # a seed plan (studies/sequential.SeedPlan or its dict): min..max seeds, added until resolved
        return (f"{plan.get('min', '?')} to {plan.get('max', '?')} seeds from seed {plan.get('start', 0)}, "
                "added until resolved")
    seeds = list(seeds) if isinstance(seeds, Iterable) and not isinstance(seeds, str) else [seeds]
    return f"seed{'s' if len(seeds) != 1 else ''} {', '.join(map(str, seeds))}"


def run_line(notebook: str, params: Mapping[str, Any], seeds: Any) -> str:
    """One line: profile, seeds, code version."""
    return f"profile {profile_of(notebook, params)} | {_seeds(seeds)} | code {code_version()}"
