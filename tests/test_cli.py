"""Tests for altgrad_lib.cli: `altgrad train -f x.yaml -p k=v` end to end in a subprocess, help, errors."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from altgrad_lib.cli import main
from altgrad_lib.train import TrainConfig

REPO = Path(__file__).resolve().parents[1]


def _cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "altgrad_lib.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_cli_train_end_to_end(tmp_path):
    params = tmp_path / "tiny.yaml"
    params.write_text(yaml.safe_dump({"n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 32, "batch_size": 4,
                                      "max_docs": 30, "tokenizer": "gpt2-512", "max_steps": 8, "eval_iters": 1,
                                      "recipe": "fp8_hybrid", "lr": 1e-3}))
    out_dir = tmp_path / "runs"
    p = _cli("train", "-f", str(params), "-p", "max_steps=3", "-p", "lr=2e-3", "-p", f"out_dir={out_dir}",
             "-p", "run_name=cli_run", "--no-progress")
    assert p.returncode == 0, p.stderr[-3000:]
    run_dir = out_dir / "cli_run"
    assert f"run_dir: {run_dir}" in p.stdout and "status: completed" in p.stdout
    assert "val/loss:" in p.stdout and "train/loss:" in p.stdout
    cfg = TrainConfig.from_dict(yaml.safe_load((run_dir / "config.yaml").read_text()))
    assert cfg.max_steps == 3 and cfg.lr == 2e-3 and cfg.n_layer == 1 and cfg.recipe == "fp8_hybrid"
    assert (run_dir / "checkpoints" / "last.pt").exists()
    again = _cli("train", "-f", str(params), "-p", "max_steps=3", "-p", "lr=2e-3", "-p", f"out_dir={out_dir}",
                 "-p", "run_name=cli_run", "--no-progress")
    assert again.returncode == 0 and "(reused)" in again.stdout


def test_help_lists_every_key_with_default(capsys):
    with pytest.raises(SystemExit) as ei:
        main(["train", "--help"])
    assert ei.value.code == 0
    text = capsys.readouterr().out
    for f in TrainConfig.__dataclass_fields__.values():
        assert f"  {f.name} " in text, f.name
    assert "'gpt2-4k'" in text and "KEY=VALUE" in text


def test_help_via_subprocess():
    p = _cli("train", "--help")
    assert p.returncode == 0 and "warmup_steps" in p.stdout and "ckpt_interval" in p.stdout


def test_bad_key_and_bad_type_are_clear_errors(capsys):
    assert main(["train", "-p", "n_layers=2"]) == 2
    err = capsys.readouterr().err
    assert "n_layers" in err and "valid keys" in err and "n_layer" in err
    assert main(["train", "-p", "n_layer=two"]) == 2
    assert "TrainConfig.n_layer" in capsys.readouterr().err


def test_print_config_resolves_run_dir(tmp_path, capsys):
    assert main(["train", "-p", f"out_dir={tmp_path}", "-p", "seed=3", "--print-config"]) == 0
    out = capsys.readouterr().out
    assert str(tmp_path) in out and '"run_name": "hp-s3-' in out
