"""conftest.py's set-up of a parallel session: each worker, and every process a test starts, runs cores // workers
torch threads (studies/executors.py's policy), so `make test` does not oversubscribe the box; the units it sends
first name test files that exist."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from altgrad_lib.studies.executors import default_threads


def test_a_worker_and_its_subprocesses_run_cores_over_workers_threads():
    count = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if count is None:
        pytest.skip("a serial run: conftest.py leaves torch's thread count as it is")
    expected = int(os.environ["OMP_NUM_THREADS"])   # conftest's choice: the caller's, else cores // workers
    assert expected == default_threads(int(count)) >= 1
    assert torch.get_num_threads() == expected
    child = subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
                           capture_output=True, text=True, check=True, timeout=120)
    assert int(child.stdout) == expected


def test_the_units_sent_first_are_test_files_that_exist():
    from conftest import SLOW_FIRST, _unit_rank

    root = Path(__file__).resolve().parent.parent
    missing = [f for f in SLOW_FIRST if not (root / f).is_file()]
    assert SLOW_FIRST and not missing, missing
    ranks = [_unit_rank(f"{f}::test_x") for f in SLOW_FIRST]
    assert ranks == sorted(ranks) and _unit_rank("notebooks/01_formats.ipynb::Cell 0") < ranks[0]
    assert _unit_rank("tests/test_io.py::test_x") > ranks[-1]


def test_make_commands_keep_the_bytecode_cache_when_the_shell_turns_it_off():
    """The Makefile unexports PYTHONDONTWRITEBYTECODE: a process `make test` / `make run` starts writes and reads
    __pycache__ (what it saves: bench/results/make_test.md)."""
    root = Path(__file__).resolve().parents[1]
    says = "import sys; print(sys.dont_write_bytecode)"
    probe = f"probe:\n\t@$(PYTHON) -c '{says}'"
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}   # not a sub-make
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    off = subprocess.run([sys.executable, "-c", says], env=env,
                         capture_output=True, text=True, check=True, timeout=60)
    assert off.stdout.strip() == "True"      # the variable does turn it off outside make
    out = subprocess.run(["make", "-s", "--no-print-directory", "-C", str(root), f"PYTHON={sys.executable}",
                          "--eval", probe, "probe"], env=env, capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "False", out
