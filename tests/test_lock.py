"""The locked set-up (tools/lock.py, `requirements.lock`, the Makefile's install): complete, within pyproject's bounds,
used by every install, and a drifted venv stops the test session in one line before any test."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

import lock   # tools/lock.py (tests/conftest.py puts tools/ on the path)

ROOT = Path(__file__).resolve().parent.parent


def _declared() -> list[Requirement]:
    """Every requirement pyproject.toml declares (build backend, dependencies and the extras `make setup` installs), the
    Makefile's own pins (torch, openai-whisper, nngeometry)."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    project = pyproject["project"]
    # the build backend too: `make setup` installs it from the lock and builds without isolation
    reqs = [Requirement(r) for r in project["dependencies"] + pyproject["build-system"]["requires"]]
    for extra in ("dev", "notebooks", "ray"):
        reqs += [Requirement(r) for r in project["optional-dependencies"][extra]]
    make = (ROOT / "Makefile").read_text()
    for var in ("TORCH_PIN", "WHISPER", "NNGEOMETRY"):
        reqs.append(Requirement(re.search(rf"^{var}\s*:=\s*(\S+)", make, re.M).group(1)))
    return reqs


def test_mismatches_name_the_package_both_versions_and_ignore_local_labels():
    lock_pins = {"ml-dtypes": "0.6.0", "torch": "2.13.0", "numpy": "2.4.6", "ray": "2.60.0"}
    have = {"ml-dtypes": "0.7.0", "torch": "2.13.0+cpu", "numpy": "2.4.6"}   # ray not installed: no difference
    assert lock.mismatches(lock_pins, have) == ["ml-dtypes 0.7.0 != locked 0.6.0"]
    assert lock.mismatches(lock_pins, {**have, "torch": "2.11.0"}) == ["ml-dtypes 0.7.0 != locked 0.6.0",
                                                                      "torch 2.11.0 != locked 2.13.0"]
    assert lock.mismatches(lock_pins, {**have, "torch": "2.11.0"}, skip=("torch",)) == [
        "ml-dtypes 0.7.0 != locked 0.6.0"]
    assert lock.canonical("ML_Dtypes") == lock.canonical("ml.dtypes") == "ml-dtypes"


def test_the_lock_pins_every_declared_requirement_within_its_bounds():
    pins = lock.read_lock(ROOT / "requirements.lock")
    declared = _declared()
    assert len(declared) > 20   # non-vacuous: the parse found pyproject's lists
    for req in declared:
        name = lock.canonical(req.name)
        assert name in pins, f"{req.name} is declared but not locked: run `make lock`"
        assert req.specifier.contains(pins[name], prereleases=True), \
            f"{req.name}=={pins[name]} in the lock is outside pyproject's {req}"
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        if line and not line.startswith("#"):
            assert re.fullmatch(r"[A-Za-z0-9_.\-]+==[A-Za-z0-9_.\-]+", line), f"not an exact pin: {line!r}"


def test_every_install_of_make_setup_passes_the_lock():
    make = (ROOT / "Makefile").read_text()
    body = make[make.index("define install"):make.index("endef")]
    pip_lines = [ln for ln in body.splitlines() if "pip install" in ln]
    assert len(pip_lines) == 4 and all("$(2)" in ln for ln in pip_lines)   # $(2): the constraints argument
    assert re.search(r"^\$\(STAMP\): pyproject.toml \$\(LOCK\)\n\t\$\(call install,\$\(VENV\),-c \$\(LOCK\)\)",
                     make, re.M), "make setup must install with the lock and re-install when it changes"


def test_a_drifted_venv_stops_the_session_in_one_line_before_any_test(tmp_path):
    drifted = tmp_path / "requirements.lock"
    pins = lock.read_lock(ROOT / "requirements.lock")
    pins["ml-dtypes"] = "0.0.1"   # no venv of ours has it
    drifted.write_text("".join(f"{n}=={v}\n" for n, v in pins.items()))
    env = {**os.environ, "ALTGRAD_LOCK_FILE": str(drifted)}
    env.pop("ALTGRAD_UNLOCKED", None)
    env.pop("PYTEST_XDIST_WORKER", None)
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider",
                          "tests/test_lock.py::test_mismatches_name_the_package_both_versions_and_ignore_local_labels"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    have = lock.installed()["ml-dtypes"]
    assert out.returncode == 4, out.stdout + out.stderr   # pytest's usage error: no test ran
    assert f"ml-dtypes {have} != locked 0.0.1: this venv is not the locked set-up; run `make setup`" in out.stderr
    assert "passed" not in out.stdout
