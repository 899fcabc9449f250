"""Committed notebooks open clean in JupyterLab: their kernelspec is the installed ipykernel spec's (JupyterLab
rewrites any other on opening, so the notebook opens unsaved and saving it dirties git). The expected spec comes from
jupyter_client's KernelSpecManager, what JupyterLab itself reads, never from the notebooks."""
from __future__ import annotations

import importlib.util
import json
import shutil

import pytest

from altgrad_lib.paths import project_root

ksm = pytest.importorskip("jupyter_client.kernelspec")
NOTEBOOKS = sorted((project_root() / "notebooks").glob("*.ipynb"))


def _installed() -> dict:
    spec = ksm.KernelSpecManager().get_kernel_spec("python3")
    return {"display_name": spec.display_name, "language": spec.language, "name": "python3"}


def _tool():
    spec = importlib.util.spec_from_file_location("kernelspec_tool", project_root() / "tools" / "kernelspec.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_notebook_kernelspec_is_the_installed_one(path):
    assert json.loads(path.read_text())["metadata"]["kernelspec"] == _installed()


def test_tool_writes_the_installed_spec_and_leaves_the_rest(tmp_path):
    src = NOTEBOOKS[0]
    dst = tmp_path / src.name
    shutil.copy(src, dst)
    nb = json.loads(dst.read_text())
    nb["metadata"]["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    dst.write_text(json.dumps(nb))
    tool = _tool()
    assert tool.main([str(dst)]) == 0
    out = json.loads(dst.read_text())
    assert out["metadata"]["kernelspec"] == _installed()
    assert out["cells"] == nb["cells"]                       # only the metadata changes
    assert tool.fix(dst, _installed()) is False              # already right: not rewritten


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_notebook_kernelspec_is_what_ipykernel_writes(path):
    """Independent of this machine's installed kernelspecs (a user-installed "python3" spec named "Python 3" would
    make the test above agree with a notebook JupyterLab rewrites): ipykernel's own spec, the one `ipykernel install`
    writes and JupyterLab shows, is the oracle."""
    ipk = pytest.importorskip("ipykernel.kernelspec")
    spec = ipk.get_kernel_dict()
    want = {"display_name": spec["display_name"], "language": spec["language"], "name": ipk.KERNEL_NAME}
    assert want == {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
    assert json.loads(path.read_text())["metadata"]["kernelspec"] == want
