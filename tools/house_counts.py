"""How visible the house is, counted from the AST (issue 25): anyone can rerun it and compare.

    python tools/house_counts.py            # the counts
    python tools/house_counts.py --list     # plus every function-local package import, hidden edge, long file

Counts (package = altgrad_lib/):
  function-local imports  `import altgrad_lib...` / `from altgrad_lib... import` (relative ones included) inside a
                          def or lambda; "with a why" = a comment on the import's line(s) or a comment-only line
                          just above it
  self-imports            a module importing from itself
  module edges            (importer, imported module) pairs between package modules, resolved as tests/test_layers.py
                          does; "top level" = imported outside any def (what a reader, go-to-definition and static
                          tools see); "all" adds function-local imports and string edges (module names in `_LAZY`
                          tables of lazy `__getattr__`s and "altgrad_lib.x:Name" strings loaded by importlib)
  long files              package .py files over 500 lines
  notebook code lines     non-blank lines in the code cells of notebooks/*.ipynb
Plain stdlib (ast, json): no project import, no torch.
"""
from __future__ import annotations

import argparse
import ast
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "altgrad_lib"
LONG = 500


def modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        parts = [p for p in path.relative_to(PKG).with_suffix("").parts if p != "__init__"]
        out[".".join(["altgrad_lib", *parts])] = path
    return out


def _targets(node: ast.AST, module: str, path: Path, known: set[str]) -> set[str]:
    """The package modules one import statement names (relative imports resolved; `from pkg import mod` = mod)."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name.split(".")[0] == "altgrad_lib"}
    base = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    target = ".".join(base[: len(base) - node.level + 1] + ([node.module] if node.module else [])) \
        if node.level else (node.module or "")
    if target.split(".")[0] != "altgrad_lib":
        return set()
    return {f"{target}.{a.name}" if f"{target}.{a.name}" in known else target for a in node.names}


def _has_why(node: ast.stmt, lines: list[str]) -> bool:
    span = lines[node.lineno - 1: node.end_lineno]
    above = lines[node.lineno - 2].strip() if node.lineno >= 2 else ""
    return any("#" in ln for ln in span) or above.startswith("#")


def scan(path: Path, module: str, known: set[str]):
    """(top-level edges, local edges, string edges, local import records) of one module."""
    text = path.read_text()
    lines = text.splitlines()
    tree = ast.parse(text, str(path))
    top, local, strings, records = set(), set(), set(), []

    def walk(node: ast.AST, in_def: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found = _targets(child, module, path, known)
                (local if in_def else top).update(found)
                if in_def and found:
                    records.append((path.relative_to(ROOT).as_posix(), child.lineno, sorted(found),
                                    _has_why(child, lines), module in found))
            walk(child, in_def or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    walk(tree, False)
    pkg = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("altgrad_lib."):
            name = node.value.partition(":")[0]
            if name in known:
                strings.add(name)
        # `_LAZY = {"Name": "sub.module"}`: module names relative to this package
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_LAZY" for t in node.targets) \
                and isinstance(node.value, ast.Dict):
            for v in node.value.values:
                if isinstance(v, ast.Constant) and f"{pkg}.{v.value}" in known:
                    strings.add(f"{pkg}.{v.value}")
    return top - {module}, local - {module}, strings - {module}, records


def notebook_code_lines() -> dict[str, int]:
    out = {}
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(nb.read_text())["cells"]
        out[nb.name] = sum(1 for c in cells if c["cell_type"] == "code"
                           for ln in ("".join(c["source"]) if isinstance(c["source"], list) else c["source"])
                           .splitlines() if ln.strip())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--list", action="store_true", help="list every item counted, not only the counts")
    args = ap.parse_args()
    mods = modules()
    known = set(mods)
    top_edges, all_edges, records = set(), set(), []
    for m, p in mods.items():
        top, local, strings, recs = scan(p, m, known)
        top_edges |= {(m, t) for t in top}
        all_edges |= {(m, t) for t in top | local | strings}
        records += recs
    long_files = {p.relative_to(ROOT).as_posix(): n for p in mods.values()
                  if (n := len(p.read_text().splitlines())) > LONG}
    nb = notebook_code_lines()
    print(f"modules                               {len(mods)}")
    print(f"function-local package imports        {len(records)} in {len({r[0] for r in records})} files, "
          f"{sum(r[3] for r in records)} with a why comment")
    print(f"self-imports                          {sum(r[4] for r in records)}")
    print(f"module edges visible at the top level {len(top_edges)} of {len(all_edges)}")
    print(f"files over {LONG} lines                   {len(long_files)}")
    per_nb = ", ".join(f"{name[:2]}: {n}" for name, n in nb.items())
    print(f"notebook code lines                   {sum(nb.values())} ({per_nb})")
    if args.list:
        print("\nfunction-local package imports (file:line targets [why] [SELF]):")
        for f, line, targets, why, self_ in records:
            print(f"  {f}:{line} {', '.join(targets)}{'  [why]' if why else ''}{'  [SELF]' if self_ else ''}")
        print("\nedges not visible at the top level:")
        for a, b in sorted(all_edges - top_edges):
            print(f"  {a} -> {b}")
        print("\nfiles over the ceiling:")
        for f, n in sorted(long_files.items(), key=lambda kv: -kv[1]):
            print(f"  {f}: {n}")


if __name__ == "__main__":
    main()
