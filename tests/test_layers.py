"""The package is in layers (altgrad_lib/__init__.py): every import, function-local ones included, points to a
lower layer or stays inside its own package, and no two modules import each other. Plain AST, no new dependency."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "altgrad_lib"

# layer of each top-level room; a module may import a lower layer, or a module of its own package
LAYERS = {"errors": 0, "choices": 0, "io": 0, "paths": 0, "state": 0, "": 0,   # "" = altgrad_lib/__init__
          "numerics": 1, "model_config": 1, "quantize": 2, "model": 2, "optim": 3, "monitors": 3, "training": 4,
          "studies": 5, "notebook": 6, "cli": 7}


def _modules() -> dict[str, Path]:
    out = {}
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG).with_suffix("")
        parts = [p for p in rel.parts if p != "__init__"]
        out[".".join(["altgrad_lib", *parts])] = path
    return out


def _room(module: str) -> str:
    parts = module.split(".")[1:]
    return parts[0] if parts else ""


def _imports(module: str, path: Path, known: set[str]) -> set[str]:
    """Every altgrad_lib module `module` imports (top-level or inside a function; relative imports resolved)."""
    is_pkg = path.name == "__init__.py"
    base = module.split(".") if is_pkg else module.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            target = ".".join(base[: len(base) - node.level + 1] + ([node.module] if node.module else [])) \
                if node.level else (node.module or "")
            if not target.startswith("altgrad_lib"):
                continue
            for alias in node.names:   # `from altgrad_lib.pkg import module` names a module
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in known else target)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("altgrad_lib"))
    found.discard(module)
    return found


MODULES = _modules()
GRAPH = {m: _imports(m, p, set(MODULES)) for m, p in MODULES.items()}


def test_every_room_has_a_layer():
    assert {_room(m) for m in MODULES} <= set(LAYERS), {_room(m) for m in MODULES} - set(LAYERS)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_point_down(module):
    room, layer = _room(module), LAYERS[_room(module)]
    up = sorted(t for t in GRAPH[module]
                if _room(t) != room and LAYERS[_room(t)] >= layer and _room(t) != "")
    assert not up, f"{module} (layer {layer}) imports {up}: imports only point down"


def test_no_import_circle():
    seen, stack, circles = set(), [], []

    def visit(m):
        if m in stack:
            circles.append(stack[stack.index(m):] + [m])
            return
        if m in seen:
            return
        seen.add(m)
        stack.append(m)
        for t in sorted(GRAPH.get(m, ())):
            if t in GRAPH and not (MODULES[t].name == "__init__.py" and m.startswith(t + ".")):
                visit(t)
        stack.pop()

    for m in sorted(GRAPH):
        visit(m)
    assert not circles, f"import circles: {circles[:3]}"


def test_the_check_sees_an_upward_import(tmp_path):
    """The test can fail: an upward import written into a numerics module is found."""
    fake = tmp_path / "numerics_bad.py"
    fake.write_text("def f():\n    from altgrad_lib.training.loop import train\n")
    found = _imports("altgrad_lib.numerics.bad", fake, set(MODULES))
    assert "altgrad_lib.training.loop" in found and LAYERS[_room("altgrad_lib.training.loop")] > LAYERS["numerics"]
