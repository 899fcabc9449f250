"""The dashboard in a real kernel (nbclient + ipykernel, as papermill runs the notebooks): the saved output is a
static PNG with one line saying how to get the interactive view (no `VBox(children=` text, one figure, not two), and
the widget model lives in the kernel: setting a dropdown there runs the observer, which redraws into the Output
widget (nbclient records the Output widget's outputs as a frontend would)."""
from __future__ import annotations

import os
import time
from queue import Empty

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipywidgets")

from altgrad_lib.notebook.dashboard import LIVE_NOTE  # noqa: E402  (after the skips: needs ipywidgets' stack)
from altgrad_lib.paths import project_root  # noqa: E402

BUILD = """
import matplotlib
matplotlib.use("module://matplotlib_inline.backend_inline")
import pandas as pd
from altgrad_lib.notebook import dashboard
rows = [(f"{r}-s{s}", r, s, step, name, v + off + s + (0 if name == "val/loss" else 10))
        for r, off in (("hp", 0.0), ("fp8", 0.5)) for s in (0, 1) for step in (0, 10, 20)
        for name, v in (("val/loss", 5 - step / 10), ("train/grad_norm", 1.0))]
metrics = pd.DataFrame(rows, columns=["run", "recipe", "seed", "step", "name", "value"])
board = dashboard.Dashboard(metrics, ["recipe", "seed"], metric="val/loss")
board.show(static=True)
"""
CHANGE = """
before = board.fig
board.metric.value = "train/grad_norm"          # what the frontend does when the dropdown changes
print(board.metric.comm is not None, board.fig is not before, board.fig.axes[0].get_ylabel())
"""


class _SlicedReplyClient(nbclient.NotebookClient):
    """nbclient waiting for each shell reply in 1-s polls instead of one poll of the whole timeout. While the kernel
    sends widget comm messages (the second cell), the one long poll sometimes missed the execute_reply that had
    arrived and returned it only when its timeout ran out (nbclient issue #312): the cell finished in ~2 s and the
    test then waited out its 300 s in 3 of 12 full-suite runs, 2 of 12 runs of this file alone. A missed wake-up now
    costs at most one slice; a kernel that really sends nothing still times out."""

    async def async_start_new_kernel_client(self):
        kc = await super().async_start_new_kernel_client()
        whole = kc.shell_channel.get_msg

        async def sliced(timeout: float | None = None):
            deadline = None if timeout is None else time.monotonic() + timeout
            while True:
                left = 1.0 if deadline is None else min(1.0, max(0.0, deadline - time.monotonic()))
                try:
                    return await whole(timeout=left)
                except Empty:
                    if deadline is not None and time.monotonic() >= deadline:
                        raise
        kc.shell_channel.get_msg = sliced
        return kc


def _images(outputs):
    return [o["data"]["image/png"] for o in outputs if "data" in o and "image/png" in o["data"]]


@pytest.mark.slow
def test_dashboard_saved_as_figure_and_live_in_the_kernel():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(BUILD), nbformat.v4.new_code_cell(CHANGE)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(project_root()), os.environ.get("PYTHONPATH", "")])}
    client = _SlicedReplyClient(nb, timeout=300, kernel_name="python3", store_widget_state=True,
                                resources={"metadata": {"path": str(project_root())}})
    client.execute(env=env)   # ipykernel's own "python3" spec: this interpreter (the project's venv)
    shown = nb.cells[0].outputs
    text = "".join(o.get("text", "") + str(o.get("data", {}).get("text/plain", "")) for o in shown)
    assert LIVE_NOTE in text and "VBox(" not in text and "HBox(" not in text
    assert len(_images(shown)) == 1                                   # the static figure, once
    bundle = next(o["data"] for o in shown if "data" in o and "image/png" in o["data"])
    assert "application/vnd.jupyter.widget-view+json" in bundle      # the same output is the live widget
    # (b) the model is live: the observer ran in the kernel and redrew into the Output widget
    assert nb.cells[1].outputs[0]["text"].split() == ["True", "True", "gradient", "norm", "before", "clipping",
                                                      "(L2", "norm)"]
    state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    outs = [m["state"].get("outputs", []) for m in state.values() if m["model_name"] == "OutputModel"]
    assert len(outs) == 1 and len(_images(outs[0])) == 1               # clear_output(wait=True): the new figure only
    assert _images(outs[0])[0] != _images(shown)[0]                    # redrawn: another metric, another image
    dropdown = [m["state"] for m in state.values() if m["model_name"] == "DropdownModel"
                and m["state"].get("description") == "metric"]
    assert dropdown and dropdown[0]["_options_labels"][dropdown[0]["index"]] == "train/grad_norm"
