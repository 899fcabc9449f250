"""The locked set-up: `requirements.lock` names the exact version of every package `make setup` installs.

    python tools/lock.py write  VENV    # `make lock`: freeze a venv built from pyproject's bounds into the lock
    python tools/lock.py check         # this interpreter's packages against the lock; one line per difference
    python tools/lock.py diff   VENV    # what the newest allowed versions change (`make test-latest` prints it)

The lock is pip constraints (`pip install -c requirements.lock ...`), so it pins without adding requirements: a
package it names that a venv does not install (ray in the torch 2.11 venv) is no difference. torch is written
without its local label (`2.13.0`, not `2.13.0+cpu`): `==2.13.0` matches the CPU wheel the Makefile installs and the
CUDA build of a GPU box alike. The test session (tests/conftest.py) runs `check` before any test and stops with its
first line, so drift reads "ml_dtypes 0.7.0 != locked 0.6.0", not as a notebook's cell diffs.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# ALTGRAD_LOCK_FILE: another lock to check against (tests/test_lock.py shows the session stopping on a drifted one)
LOCK = Path(os.environ.get("ALTGRAD_LOCK_FILE", ROOT / "requirements.lock"))


def canonical(name: str) -> str:
    """PEP 503 name: `ml-dtypes`, `ML_Dtypes` and `ml.dtypes` are one package."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_lock(path: Path = LOCK) -> dict[str, str]:
    """{canonical name: version} from `name==version` lines (comments and blank lines skipped)."""
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        if not sep:
            raise ValueError(f"{path.name}: {line!r} is not name==version")
        pins[canonical(name)] = version.strip()
    return pins


def installed() -> dict[str, str]:
    """{canonical name: version} of this interpreter's distributions."""
    return {canonical(d.metadata["Name"]): d.version for d in metadata.distributions() if d.metadata["Name"]}


def public(version: str) -> str:
    """The version without its local label: torch's `2.13.0+cpu` is `2.13.0`."""
    return version.split("+", 1)[0]


def mismatches(lock: dict[str, str], have: dict[str, str], skip: tuple[str, ...] = ()) -> list[str]:
    """One line per locked package this environment holds at another version, sorted by name."""
    return [f"{name} {have[name]} != locked {want}" for name, want in sorted(lock.items())
            if name in have and name not in skip and public(have[name]) != want]


def freeze(python: str) -> list[str]:
    """`pip freeze --all` of another venv's interpreter, local labels dropped, the editable project left out."""
    out = subprocess.run([python, "-m", "pip", "freeze", "--all", "--exclude-editable"], check=True,
                         capture_output=True, text=True).stdout
    lines = []
    for line in out.splitlines():
        name, sep, version = line.partition("==")
        if sep:   # direct references (`pkg @ file://...`) cannot be locked by version; none is expected
            lines.append(f"{name}=={public(version)}")
    return sorted(lines, key=str.lower)


def write(venv: str) -> None:
    lines = freeze(str(Path(venv) / "bin" / "python"))
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    header = [f"# Made by `make lock` on {stamp}: a fresh venv from pyproject.toml's bounds and the Makefile's pins,",
              "# then `pip freeze --all`. pip constraints for `make setup`; refresh with `make lock` and commit the",
              "# checked notebook outputs the new versions change in the same commit.", ""]
    LOCK.write_text("\n".join(header + lines) + "\n")
    print(f"{LOCK.name}: {len(lines)} packages")


def main(argv: list[str]) -> int:
    if argv[:1] == ["write"] and len(argv) == 2:
        write(argv[1])
        return 0
    if argv[:1] == ["check"] and len(argv) == 1:
        bad = mismatches(read_lock(), installed())
        print("\n".join(bad) if bad else f"every installed package matches {LOCK.name}")
        return 1 if bad else 0
    if argv[:1] == ["diff"] and len(argv) == 2:
        newest = {canonical(n): v for n, _, v in (ln.partition("==") for ln in freeze(str(Path(argv[1]) / "bin"
                                                                                          / "python")))}
        lock = read_lock()
        changed = [f"{n}: locked {lock[n]} -> newest {v}" for n, v in sorted(newest.items())
                   if n in lock and lock[n] != v]
        added = [f"{n}: new, {v}" for n, v in sorted(newest.items()) if n not in lock]
        print("\n".join(changed + added) if changed or added else f"the newest versions are those of {LOCK.name}")
        return 0
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
