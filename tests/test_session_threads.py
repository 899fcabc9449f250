"""conftest.py's thread count under pytest-xdist: each worker, and every process a test starts, runs
cores // workers torch threads (studies/executors.py's policy), so `make test` does not oversubscribe the box."""
from __future__ import annotations

import os
import subprocess
import sys

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
