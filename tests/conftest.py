"""Set-up for a parallel test session (`make test` runs pytest-xdist: `-n 2 --dist loadfile`); a serial `pytest`
run gets none of the xdist parts.

- Work units under `--dist loadfile` (and xdist's default `load`, which would scatter a notebook's cells): one per
  test file (a module fixture that trains runs once; PER_TEST below: one per test), and all notebooks ONE unit, cells
  in order: nbval's cells of a notebook share one kernel, and 03 reuses the run 02 trained. The notebooks are
  collected first in each worker, so with `--no-loadscope-reorder` the longest unit starts first instead of last.
  (A scheduler, not `xdist_group` marks: xdist 3.8's loadgroup renames `item._nodeid`, which pytest 9 no longer
  reads, so its groups silently become single tests.)
- Each worker trains into its own ALTGRAD_OUTPUTS/<worker id>: two workers training the same config in the same
  outputs would write one run directory at once (the token cache needs nothing: its files are written atomically).
- Torch threads: each worker gets cores // workers (OMP_NUM_THREADS, set before torch loads, so the notebook kernels,
  study workers and subprocesses a test starts get the same count: tests that compare a subprocess's training with
  this process's bit for bit, as test_training_loop's SIGKILL resumes, still compare like with like). The policy of
  studies/executors.py's workers; a caller's OMP_NUM_THREADS wins. Torch's default (every core in every worker)
  oversubscribed a 2-core box 2x, and OpenMP threads that spin while waiting took the cores from the other worker
  (measured: bench/results/make_test.md).
- Quantizers run eager in tests ($ALTGRAD_QDQ_KERNEL=eager unless the caller set it): the default "auto" compiles a
  kernel per quantizer configuration after 32 calls, which made the numerics/quantize test files ~2.9x slower
  (26 s -> 76 s, bench/results/train_step.md) and pays only in long runs. tests/test_numerics_kernels.py chooses
  its modes itself (kernels.set_qdq_kernel), so the compiled path stays tested; study workers and notebook kernels
  spawned by tests inherit the variable. Serial or parallel, every session gets this.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from altgrad_lib.studies.executors import default_threads   # imports no torch (it must load after the env below)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
import lock   # (tools/lock.py: a repository tool, not library code)

os.environ.setdefault("ALTGRAD_QDQ_KERNEL", "eager")

WORKER = os.environ.get("PYTEST_XDIST_WORKER")   # "gw0", "gw1", ...; unset in a serial run and in the controller

if WORKER:
    # cores // workers threads (above); torch reads OMP_NUM_THREADS when it loads, which is after this file
    os.environ["OMP_NUM_THREADS"] = str(default_threads(int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))))
    if "torch" in sys.modules:   # a plugin loaded it first: set this process's count too (children read the env)
        sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    if os.environ.get("ALTGRAD_OUTPUTS"):
        own = Path(os.environ["ALTGRAD_OUTPUTS"]) / WORKER
        own.mkdir(parents=True, exist_ok=True)
        os.environ["ALTGRAD_OUTPUTS"] = str(own)   # read at call time (paths.outputs_dir); notebook kernels inherit it


# Files whose tests share no fixture and which as one unit would be the longest of all: each test is a unit.
# test_compile_grads.py: 28 compile cases, a sixth of the suite's time (each resets dynamo; none shares state).
PER_TEST = {"tests/test_compile_grads.py"}


def pytest_configure(config):
    """Stop before any test when this venv is not the locked one: one line names the first package that differs.

    `make test-latest` sets ALTGRAD_UNLOCKED=1 (it tests the newest versions on purpose); the torch 2.11 pass sets
    ALTGRAD_LOCK_SKIP=torch. Checked once, in the controller (or the serial session), not in each xdist worker.
    """
    if WORKER or os.environ.get("ALTGRAD_UNLOCKED") == "1":
        return
    skip = tuple(lock.canonical(n) for n in os.environ.get("ALTGRAD_LOCK_SKIP", "").split(",") if n)
    bad = lock.mismatches(lock.read_lock(), lock.installed(), skip)
    if bad:
        more = f" (and {len(bad) - 1} more: python tools/lock.py check)" if len(bad) > 1 else ""
        raise pytest.UsageError(f"{bad[0]}{more}: this venv is not the locked set-up; run `make setup`")


def _is_notebook(nodeid: str) -> bool:
    return nodeid.split("::", 1)[0].endswith(".ipynb")


# The longest units next (after the notebooks), longest first: xdist hands out units in collection order, one at a
# time as a worker runs dry, so a long file collected last would run alone at the end while the other core idles.
# Summed seconds per file in `make test` on 2 cores (AMD EPYC, one thread per worker, cold inductor cache);
# test_compile_grads' units (one per test) summed 228 s, its longest 77 s. An outdated order costs only balance.
SLOW_FIRST = ("tests/test_numerics_kernels.py",      # 163 s
              "tests/test_accumulate.py",            # 89 s
              "tests/test_studies_executors.py",     # 85 s
              "tests/test_compile_grads.py",         # 228 s in 28 units: the inductor cases first (15-77 s each)
              "tests/test_studies_faults.py",        # 76 s
              "tests/test_studies_study.py",         # 41 s
              "tests/test_block_kernel_layout.py",   # 38 s
              "tests/test_numerics_rounding.py",     # 38 s
              "tests/test_cli.py",                   # 36 s
              "tests/test_notebook_params.py",       # 33 s
              "tests/test_numerics_kernel_plans.py",  # 32 s
              "tests/test_fidelity.py")              # 32 s


def _unit_rank(nodeid: str) -> int:
    path = nodeid.split("::", 1)[0]
    if _is_notebook(nodeid):
        return 0
    return 1 + (SLOW_FIRST.index(path) if path in SLOW_FIRST else len(SLOW_FIRST))


def pytest_collection_modifyitems(config, items):
    if WORKER:   # every worker sorts alike, so their collections still agree (xdist checks that)
        items.sort(key=lambda it: _unit_rank(it.nodeid))   # stable: a file's tests keep their order


@pytest.hookimpl(optionalhook=True)   # an xdist hook: pytest without xdist must not reject this file
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") not in ("load", "loadfile"):   # plain `-n 2` too: a notebook's cells split up fail
        return None
    from xdist.scheduler import LoadFileScheduling   # only reached when xdist runs the session

    class NotebooksTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if _is_notebook(nodeid):
                return "notebooks"
            return nodeid if nodeid.split("::", 1)[0] in PER_TEST else super()._split_scope(nodeid)

    return NotebooksTogether(config, log)
