"""The shared progress bar: text bar outside a kernel, widget bar in a kernel with ipywidgets (JupyterLab),
text bar in a kernel without it; honours `enabled` and counts from `initial`."""
from __future__ import annotations

import importlib.util
import sys
import types

import pytest

from altgrad_lib.training.progress import progress_bar


def test_text_bar_outside_kernel_and_disable_flag():
    with progress_bar(10, desc="t", initial=3, unit="step") as bar:
        bar.update(2)
        assert bar.n == 5 and bar.total == 10 and bar.unit == "step"
        assert type(bar).__module__ == "tqdm.std"
    with progress_bar(10, desc="t", enabled=False) as bar:
        assert bar.disable


@pytest.fixture
def in_kernel(monkeypatch):
    # a running kernel is an IPython shell with a `kernel`; a stand-in shell is enough for the choice of bar
    ipython = pytest.importorskip("IPython")
    shell = types.SimpleNamespace(kernel=object())
    monkeypatch.setattr(ipython, "get_ipython", lambda: shell)


def test_imported_ipykernel_is_not_a_kernel(monkeypatch):
    # pytest's nbval plugin imports ipykernel: a terminal must still get the text bar
    monkeypatch.setitem(sys.modules, "ipykernel", types.ModuleType("ipykernel"))
    with progress_bar(3, desc="t") as bar:
        assert type(bar).__module__ == "tqdm.std"


def test_widget_bar_in_a_kernel_with_ipywidgets(in_kernel, capsys):
    ipywidgets = pytest.importorskip("ipywidgets")   # the `notebooks` extra installs it
    bar = progress_bar(10, desc="train", initial=3, unit="step")
    assert type(bar).__module__ == "tqdm.notebook"
    label, widget, text = bar.container.children      # the HBox JupyterLab renders: description, bar, counts
    assert isinstance(widget, (ipywidgets.IntProgress, ipywidgets.FloatProgress))
    assert (widget.min, widget.max, widget.value) == (0, 10, 3) and "train" in label.value
    bar.update(4)
    bar.refresh()                                      # redraws are rate-limited; force one
    assert widget.value == 7 and "7/10" in text.value
    bar.update(3)
    bar.close()
    assert widget.value == 10 and widget.bar_style == "success"
    stopped = progress_bar(5, desc="x")                # a loop that stops early is marked, not left looking fine
    stopped.update(2)
    stopped.close()
    assert stopped.container.children[1].bar_style == "danger"
    capsys.readouterr()                                # display() falls back to printing the widget's repr


def test_widget_bar_honours_enabled_false(in_kernel):
    pytest.importorskip("ipywidgets")
    with progress_bar(10, desc="t", enabled=False) as bar:
        assert bar.disable and type(bar).__module__ == "tqdm.notebook"


def test_kernel_without_ipywidgets_falls_back_to_text(in_kernel, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ipywidgets" else real(name, *a))
    with progress_bar(10, desc="t") as bar:
        assert type(bar).__module__ == "tqdm.std"
