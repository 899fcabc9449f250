"""Cases a new user tried (issue 27: 188 newcomer cases), each kept fixed here: the right result, or a one-line
error before any compute (no run directory)."""
from __future__ import annotations

import importlib.metadata
import json
import re
import tomllib
from pathlib import Path

import pytest

from altgrad_lib.cli import main

ROOT = Path(__file__).resolve().parents[1]


# ================================================================================================================
# issue 27 items 1, 2, 4, 5, 6, 7 (scaling kinds), 8: silent wrong results and silent ignores (branch `silent`)
# ================================================================================================================

def _makefile_extras() -> set[str]:
    """The extras the Makefile's set-up installs (`pip install ... -e '.[a,b]'` in its `install` macro)."""
    make = (ROOT / "Makefile").read_text()
    m = re.search(r"pip install -q [^\n]*-e '\.\[([^\]]+)\]'", make[make.find("define install"):])
    assert m, "the Makefile no longer installs the project with extras: update this test"
    return set(m.group(1).split(","))


def test_setup_installs_the_optimi_peer_the_tests_compare_against():
    """A fresh clone's `make test` ran tests/test_optim_peers_bf16.py's optimi comparison as a skip ("could not
    import 'optimi'"): the distribution that provides `optimi` must be in what the set-up installs."""
    assert "optimi" in (ROOT / "tests" / "test_optim_peers_bf16.py").read_text()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = list(project["dependencies"])
    for extra in _makefile_extras():
        declared += project["optional-dependencies"].get(extra, [])
    names = {re.split(r"[<>=!~\[; ]", d, maxsplit=1)[0].lower().replace("_", "-") for d in declared}
    dists = importlib.metadata.packages_distributions().get("optimi")
    if dists is None:     # not installed here: the name PyPI gives the package (`pip index versions torch-optimi`)
        dists = ["torch-optimi"]
    assert {d.lower() for d in dists} & names, f"{dists} is not installed by `make setup` (extras {_makefile_extras()})"


SILENT_TINY = ["-p", "n_layer=1", "-p", "n_head=2", "-p", "n_embd=32", "-p", "block_size=32", "-p", "batch_size=4",
               "-p", "max_docs=30", "-p", "tokenizer=gpt2-512", "-p", "max_steps=2", "-p", "eval_iters=1",
               "--no-progress"]
GRID_SR = ["-p", "recipe=fp8_hybrid", "-p", "optimizer=grid_adamw", "-p"]
SILENT_ERRORS = [   # (the -p options a newcomer gave, words the one-line error must contain)
    # item 2: sr_bits 0 and >= 63 passed --print-config, then crashed at the first step with a run directory
    (GRID_SR + ["optim={storage: grid_sr, sr_bits: 0}"], ["optim.sr_bits=0", "[1, 62]"]),
    (GRID_SR + ["optim={storage: grid_sr, sr_bits: 63}"], ["optim.sr_bits=63", "[1, 62]"]),
    (GRID_SR + ["optim={storage: grid_rne, sr_bits: 16}"],
     ["optim.sr_bits=16", "only applies", "grid_sr"]),
    # item 1: grid / error-feedback storage on a block-scaled recipe trained a per-tensor model under its name
    (["-p", "recipe=nvfp4", "-p", "optimizer=grid_adamw", "-p", "optim={storage: grid_sr}"],
     ["optim.storage='grid_sr' on recipe 'nvfp4'", "block-scaled", "'fp32'"]),
    (["-p", "recipe=mxfp8", "-p", "optim={storage: error_feedback_sr}"],
     ["optim.storage='error_feedback_sr' on recipe 'mxfp8'", "block-scaled", "'fp32'"]),
    # item 4: a block recipe that quantizes no Linear of the model trained an all-hp model under its name
    (["-p", "recipe=nvfp4:disable_rht:hp_last=1"], ["quantizes no Linear", "hp_last=1", "n_layer=1"]),
    (["-p", "recipe=nvfp4:hp_last=5"], ["quantizes no Linear", "hp_last=5", "n_layer=1"]),
    # item 6: silent ignores (max_steps=2 in SILENT_TINY: osc_reset's default window of 50 never completes)
    (["-p", "diagnostics=off", "-p", "diagnostics.fisher_interval=5"],
     ["diagnostics=off contradicts diagnostics.fisher_interval=5"]),
    (["-p", "recipe=fp8_hybrid", "-p", "optim={osc_reset: true, osc_reset_period: 300}"],
     ["osc_reset", "max_steps=2", "no reset"]),
    # item 7: a bad scaling kind listed valid kinds without nvfp4, mx, te_delayed (which the README uses)
    (["-p", "recipe={name: x, layers: {'*': {weight: {fmt: E2M1, scaling: nvfp44}}}}"],
     ["kind='nvfp44'", "'nvfp4'", "'mx'", "'te_delayed'", "did you mean 'nvfp4'"]),
]


@pytest.mark.parametrize("extra, needles", SILENT_ERRORS, ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_silent_cases_fail_in_one_line_before_compute(tmp_path, capsys, monkeypatch, extra, needles):
    """--print-config and train both: exit 2, one stderr line naming the bad value, no run directory."""
    monkeypatch.setenv("ALTGRAD_OFFLINE", "1")
    out = tmp_path / "runs"
    for mode in (["--print-config"], []):
        rc = main(["train", *SILENT_TINY, "-p", f"out_dir={out}", "-p", "run_name=r", *extra, *mode])
        err = capsys.readouterr().err
        assert rc == 2 and err.count("\n") == 1 and err.startswith("altgrad: error: "), (extra, mode, err)
        assert all(n in err for n in needles), err
        assert not (out / "r").exists(), extra


def test_recipe_spellings_name_one_run(capsys):
    """item 4: NVFP4, hp_last=0, a repeated switch, another switch order were distinct runs (own hash)."""
    def run_name(recipe: str) -> str:
        assert main(["train", "-p", f"recipe={recipe}", "--print-config"]) == 0
        return json.loads(capsys.readouterr().out)["run_name"]
    canon = run_name("nvfp4:disable_rht:hp_last=1")
    assert canon == "nvfp4_disable_rht_hp_last_1-s0-347937b5"      # its name before canonicalization (ab8c91b)
    for spelling in ("NVFP4:disable_rht:hp_last=1", "nvfp4:hp_last=1:disable_rht",
                     "nvfp4:disable_rht:disable_rht:hp_last=1", "nvfp4:disable_rht:hp_last=1:hp_last=1"):
        assert run_name(spelling) == canon, spelling
    assert run_name("nvfp4:hp_last=0") == run_name("nvfp4") == "nvfp4-s0-2907c923"


def test_layer_table_shows_the_weight_grid_grid_storage_uses(tmp_path, capsys, monkeypatch):
    """item 5: optim={storage: error_feedback_sr, weight_fmt: E2M1} on recipe fmt:E4M3 trains E2M1-grid weights;
    the layer table printed them as e4m3fn/cur/rne."""
    monkeypatch.setenv("ALTGRAD_OFFLINE", "1")
    rc = main(["train", *SILENT_TINY, "-p", f"out_dir={tmp_path}", "-p", "recipe=fmt:E4M3",
               "-p", "optim={storage: error_feedback_sr, weight_fmt: E2M1}"])
    out = capsys.readouterr().out
    assert rc == 0, out
    rows = [ln.split() for ln in out.splitlines() if ln.strip().startswith("transformer.h.")]
    assert rows and all(r[-4] == "e2m1fn/pow2/error_feedback_sr" and r[-5] == "e4m3fn/cur/rne" for r in rows), out
