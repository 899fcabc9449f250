"""Tests for altgrad_lib.training.run_dir: project paths, provenance, the tidy metrics CSV and its crash-safe
truncation."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers import spawn_lock_holder

from altgrad_lib import io, paths
from altgrad_lib.training import run_dir as runs
from altgrad_lib.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]


def test_project_root_from_subdir_and_env_override(tmp_path, monkeypatch):
    monkeypatch.delenv("ALTGRAD_OUTPUTS", raising=False)
    assert paths.project_root(REPO / "notebooks") == REPO
    assert paths.project_root(REPO / "altgrad_lib") == REPO
    monkeypatch.chdir(REPO / "notebooks")  # notebooks run with cwd=notebooks/
    assert paths.runs_dir() == REPO / "outputs" / "runs"
    # a different project's pyproject.toml is not ours
    other = tmp_path / "other"
    (other / "sub").mkdir(parents=True)
    (other / "pyproject.toml").write_text('[project]\nname = "not-altgrad"\n')
    assert paths.project_root(other / "sub") is None
    monkeypatch.setenv("ALTGRAD_OUTPUTS", str(tmp_path / "outs"))
    assert paths.runs_dir() == (tmp_path / "outs" / "runs").resolve()


def test_git_info_outside_git_is_unknown(tmp_path):
    info = runs.git_info(tmp_path)
    assert info["sha"] == "unknown"


def test_git_info_in_a_repo(tmp_path):
    def git(*a):
        subprocess.run(["git", *a], cwd=tmp_path, check=True, capture_output=True)
    git("init", "-q")
    (tmp_path / "f.txt").write_text("a")
    git("add", "f.txt")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
    info = runs.git_info(tmp_path)
    assert len(info["sha"]) == 40 and info["dirty"] is False
    (tmp_path / "f.txt").write_text("b")
    assert runs.git_info(tmp_path)["dirty"] is True


def test_library_versions_has_the_essentials():
    v = runs.library_versions()
    for k in ("python", "torch", "torchao", "numpy", "altgrad_lib"):
        assert k in v and v[k]
    assert v["python"] == ".".join(map(str, sys.version_info[:3]))


def test_metrics_roundtrip_is_bit_exact(tmp_path):
    rng = np.random.default_rng(0)
    vals = np.concatenate([rng.standard_normal(50) * 10.0 ** rng.integers(-30, 30, 50),
                           [math.nan, math.inf, -math.inf, 0.0, -0.0, 5e-324]])
    p = tmp_path / "metrics.csv"
    with runs.MetricsWriter(p) as w:
        for i, v in enumerate(vals):
            w.log(i, {"train/loss": v, "val/ppl": 1.0})
    df = runs.read_metrics(p)
    assert list(df.columns) == ["step", "name", "value"]
    got = df[df["name"] == "train/loss"]["value"].to_numpy()
    assert np.array_equal(got, vals, equal_nan=True)
    finite = np.isfinite(vals)
    assert np.array_equal(got[finite].view(np.int64), vals[finite].view(np.int64))  # bit-exact, not just close
    assert np.isnan(got[~finite][0]) and got[~finite][1] == math.inf
    # plain pandas reads it too (the contract: `pandas.read_csv` directly)
    assert len(pd.read_csv(p)) == 2 * len(vals)


def test_writer_appends_without_second_header(tmp_path):
    p = tmp_path / "m.csv"
    with runs.MetricsWriter(p) as w:
        w.log(1, {"a": 1.0})
    with runs.MetricsWriter(p) as w:
        w.log(2, {"a": 2.0})
    assert p.read_text().count("step,name,value") == 1
    assert runs.read_metrics(p)["step"].tolist() == [1, 2]


def test_truncate_drops_later_steps_and_torn_line(tmp_path):
    p = tmp_path / "m.csv"
    with runs.MetricsWriter(p) as w:
        for s in range(1, 8):
            w.log(s, {"train/loss": s / 3, "perf/tokens_per_s": 1e3})
    with open(p, "a") as fh:
        fh.write("8,train/lo")  # what a SIGKILL mid-write can leave behind
    dropped = io.truncate_csv(p, 4, runs.METRICS_HEADER)
    df = runs.read_metrics(p)
    assert df["step"].max() == 4 and len(df) == 8 and dropped == 7
    assert p.read_text().endswith("\n")
    assert io.truncate_csv(tmp_path / "missing.csv", 3, runs.METRICS_HEADER) == 0


def test_write_json_is_atomic_and_readable(tmp_path):
    p = tmp_path / "x.json"
    io.write_json(p, {"a": 1, "b": math.inf, "p": tmp_path})
    d = io.read_json(p)
    assert d["a"] == 1 and d["b"] == math.inf and d["p"] == str(tmp_path)
    assert not list(tmp_path.glob(".*tmp*"))


def test_run_load_requires_a_run_dir(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.yaml"):
        runs.Run.load(tmp_path)


# ------------------------------------------------------------------ free run dirs, locks, Run of a diverged run
def test_run_dir_is_free_until_it_holds_a_result(tmp_path):
    d = tmp_path / "r"
    assert runs.run_dir_is_free(d)                                      # does not exist
    (d / "checkpoints").mkdir(parents=True)
    (d / "config.yaml").write_text("lr: 1.0\n")
    (d / "provenance.json").write_text("{}")
    (d / runs.METRICS_FILE).write_text(runs.METRICS_HEADER)            # a writer opened, nothing logged
    assert runs.run_dir_is_free(d)
    with runs.MetricsWriter(d / runs.METRICS_FILE) as w:
        w.log(0, {"val/loss": 5.0})
    assert not runs.run_dir_is_free(d)
    (d / runs.METRICS_FILE).unlink()
    (d / "checkpoints" / "last.pt").write_bytes(b"x")
    assert not runs.run_dir_is_free(d)
    (d / "checkpoints" / "last.pt").unlink()
    (d / "summary.json").write_text("{}")
    assert not runs.run_dir_is_free(d)


def test_run_lock_is_exclusive_says_who_and_is_released(tmp_path):
    d = tmp_path / "r"
    with runs.RunLock(d):
        holder = json.loads((d / runs.LOCK_FILE).read_text())
        assert holder["pid"] == os.getpid() and holder["host"] and holder["start_time"]
        with pytest.raises(runs.RunLockedError, match=f"pid {os.getpid()}") as ei:
            runs.RunLock(d).acquire()                                  # a second open file description
        assert "\n" not in str(ei.value)
    with runs.RunLock(d):                                              # released on exit
        pass
    (tmp_path / "f").write_text("a file, not a directory")
    with pytest.raises(ConfigError, match="cannot use .* as a run directory"):
        runs.RunLock(tmp_path / "f").acquire()


def test_run_lock_dies_with_its_process(tmp_path):
    d = tmp_path / "r"
    p = spawn_lock_holder(d)
    try:
        with pytest.raises(runs.RunLockedError, match=f"pid {p.pid}"):
            runs.RunLock(d).acquire()
    finally:
        p.kill()                                                       # SIGKILL: no cleanup code runs
        p.wait(timeout=30)
    with runs.RunLock(d):                                              # the kernel released the flock
        pass


def test_run_of_a_diverged_run_has_no_final_loss(tmp_path):
    d = tmp_path / "r"
    d.mkdir()
    runs.write_config_yaml(d / "config.yaml", {"lr": 1000.0})
    with runs.MetricsWriter(d / runs.METRICS_FILE) as w:
        w.log(0, {"val/loss": 8.28})
        w.log(1, {"train/loss": 7.0})
        w.log(2, {"train/loss": math.inf})
    io.write_json(d / "divergence.json", {"step": 2, "first_nonfinite": {"kind": "param_grad", "name": "wte"}})
    r = runs.Run.load(d)                                               # crashed before summary.json was written
    assert r.diverged and r.status == "diverged" and r.final_val_loss is None
    assert "8.28" not in r.short_str() and "diverged at step 2" in r.short_str() and "wte" in r.short_str()
    io.write_json(d / "summary.json", {"status": "diverged", "final_step": 2, "final_val_loss": None})
    assert runs.Run.load(d).final_val_loss is None


def test_perplexity_is_exp_until_float64_overflows():
    assert runs.perplexity(2.0) == math.exp(2.0) and runs.perplexity(709.0) == math.exp(709.0)
    assert runs.perplexity(709.8) == math.inf and runs.perplexity(math.inf) == math.inf
    assert math.isnan(runs.perplexity(math.nan)) and runs.perplexity(-math.inf) == 0.0


def test_git_info_is_clean_when_only_notebooks_changed(tmp_path):
    """Committed notebooks are re-executed in place before the commit that holds them: their banner must name the
    code's commit as clean; a changed source file still makes it dirty."""
    def git(*a):
        subprocess.run(["git", *a], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "n.ipynb").write_text("{}\n")
    git("add", ".")
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "c")
    assert runs.git_info(tmp_path)["dirty"] is False
    (tmp_path / "n.ipynb").write_text('{"cells": []}\n')
    assert runs.git_info(tmp_path)["dirty"] is False
    (tmp_path / "a.py").write_text("x = 2\n")
    assert runs.git_info(tmp_path)["dirty"] is True


def test_every_run_records_the_machine_its_numbers_came_from():
    """Two CPUs of one model name can differ in their float paths: a run records the model name (as `lscpu` prints
    it), ATen's capability (ATEN_CPU_CAPABILITY lowers it: a second float path of one machine) and its ISA flags."""
    import shutil

    from altgrad_lib.training.config import TrainConfig
    from altgrad_lib.training.run_dir import ISA_FLAGS, machine_info, make_provenance

    info = make_provenance(TrainConfig(), "0" * 12)["machine"]
    assert info == machine_info() and info["cpus"] >= 1
    assert set(info["isa"]) <= set(ISA_FLAGS)
    if shutil.which("lscpu"):
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, env={"LC_ALL": "C"}).stdout
        model = [ln.split(":", 1)[1].strip() for ln in lscpu.splitlines() if ln.startswith("Model name")]
        assert model and info["cpu_model"] == model[0]
    lowered = subprocess.run([sys.executable, "-c", "from altgrad_lib.training.run_dir import machine_info; "
                              "print(machine_info()['aten_cpu_capability'])"],
                             env={**os.environ, "ATEN_CPU_CAPABILITY": "default"}, capture_output=True, text=True)
    assert lowered.stdout.strip() == "DEFAULT", lowered.stderr
