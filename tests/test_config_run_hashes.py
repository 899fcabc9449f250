"""Run identity is stable: the config hash, run name and config.yaml of every committed params file (notebooks and
studies) and of every named recipe are those tests/data/run_hashes.json recorded (written by tools/run_hashes.py on
the code before a change: a changed hash makes every earlier run of that config unreachable). A change that means
to move a hash rewrites the file with `python tools/run_hashes.py --write` and says which and why."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _tool():
    spec = importlib.util.spec_from_file_location("run_hashes", ROOT / "tools" / "run_hashes.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_run_identity_of_the_params_files_and_named_recipes_is_unchanged(tmp_path):
    tool = _tool()
    recorded = json.loads(tool.GOLDEN.read_text())
    now = tool.hashes(tmp_path)
    # a params file, recipe or switch added since the record has no earlier runs to keep (rerun --write to add it)
    common = set(now) & set(recorded)
    changed = {k: (recorded[k], now[k]) for k in sorted(common) if now[k] != recorded[k]}
    assert not changed, changed
    assert len(common) > 300   # the params files, the recipes and 05's variants were all expanded
