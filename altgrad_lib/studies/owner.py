"""Which study owns a study directory, so two different studies never share an index (study.csv, claims.csv).

`<study dir>/study.json` records the owner: its name, its identity (Study.identity: the hash of what it trains,
seeds aside) and its source file. A study that finds another identity there is refused in one line naming both,
before anything runs (`altgrad study`, its `--dry-run`, Study.report); the same study re-run shares the directory.
A directory without a record (new, or indexed before records existed) belongs to whoever claims it first.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

OWNER_FILE = "study.json"


def conflict(directory: Path, name: str, identity: str, source: str = "") -> str | None:
    """One line naming both studies when another study owns `directory`, else None."""
    path = Path(directory) / OWNER_FILE
    for _ in range(100):       # a record being written right now (claim_dir) reads back complete soon
        try:
            owner = json.loads(path.read_text())
            break
        except FileNotFoundError:
            return None
        except json.JSONDecodeError:
            time.sleep(0.01)
    else:
        raise ValueError(f"{path} is not a study owner record (JSON); delete it if no study is using {directory}")
    if owner.get("identity") == identity:
        return None

    def who(n: object, src: object, ident: object) -> str:
        return f"{n!r} ({src or 'defined in code'}; runs {str(ident)[:12]})"
    return (f"study directory {directory} holds the index of study "
            f"{who(owner.get('name'), owner.get('source'), owner.get('identity'))}, not of study "
            f"{who(name, source, identity)}: two studies never share study.csv and claims.csv; give this study "
            f"another `name:` (or --out DIR), or delete {directory} to replace the other")


def check_dir(directory: Path, name: str, identity: str, source: str = "") -> None:
    """Raise conflict()'s line (ValueError) if another study owns `directory`."""
    line = conflict(directory, name, identity, source)
    if line:
        raise ValueError(line)


def claim_dir(directory: Path, name: str, identity: str, source: str = "") -> None:
    """Make this study the owner of `directory`, or raise one line if another study owns it. The record is created
    exclusively (O_EXCL), so of two different studies that start at once on one directory exactly one gets it."""
    check_dir(directory, name, identity, source)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    record = json.dumps({"name": name, "identity": identity, "source": source,
                         "claimed": time.strftime("%Y-%m-%dT%H:%M:%S%z")}, indent=1) + "\n"
    try:
        fd = os.open(directory / OWNER_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:    # another process claimed it first: ours only if it is this study
        check_dir(directory, name, identity, source)
        return
    with os.fdopen(fd, "w") as fh:
        fh.write(record)
