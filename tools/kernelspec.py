"""Write the installed Jupyter kernel's kernelspec into notebooks, as JupyterLab would on opening them.

`python tools/kernelspec.py notebooks/*.ipynb` sets each notebook's `metadata.kernelspec` to what the installed
"python3" kernel (ipykernel's) says: display_name "Python 3 (ipykernel)", language, name. papermill keeps whatever
kernelspec a notebook had; JupyterLab rewrites a bare "Python 3" on opening, so a committed notebook would open
unsaved and saving it would dirty git. `make notebooks` runs this after papermill; tests/test_notebook_kernelspec.py
checks the committed notebooks. A notebook already right is not rewritten; the exit code is 0.
"""
from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from jupyter_client.kernelspec import KernelSpecManager

KERNEL = "python3"


def installed_kernelspec(name: str = KERNEL) -> dict[str, str]:
    """The kernelspec a notebook's metadata should carry for the installed kernel `name`."""
    spec = KernelSpecManager().get_kernel_spec(name)
    return {"display_name": spec.display_name, "language": spec.language, "name": name}


def fix(path: str | Path, spec: dict[str, str]) -> bool:
    """Set `path`'s kernelspec to `spec`; True when the file changed."""
    nb = nbformat.read(path, as_version=nbformat.NO_CONVERT)
    if dict(nb.metadata.get("kernelspec", {})) == spec:
        return False
    nb.metadata["kernelspec"] = spec
    nbformat.write(nb, path)
    return True


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python tools/kernelspec.py NOTEBOOK.ipynb ...", file=sys.stderr)
        return 2
    spec = installed_kernelspec()
    for p in argv:
        if fix(p, spec):
            print(f"{p}: kernelspec -> {spec['display_name']!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
