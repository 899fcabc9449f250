"""Tests for altgrad_lib.cli: `altgrad train -f x.yaml -p k=v` end to end in a subprocess, help, errors."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import spawn_lock_holder
import yaml

from altgrad_lib.cli import main
from altgrad_lib.training.loop import TrainConfig

REPO = Path(__file__).resolve().parents[1]


def _cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "ALTGRAD_OFFLINE": "1",
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
    for k in TrainConfig.keys():
        assert f"  {k} " in text, k
    assert "  optim_config " not in text   # a typed part, built from the keys, is no key
    assert "'gpt2-4k'" in text and "KEY=VALUE" in text


def test_help_via_subprocess():
    p = _cli("train", "--help")
    assert p.returncode == 0 and "warmup_steps" in p.stdout and "ckpt_interval" in p.stdout


def test_bad_key_and_bad_type_are_clear_errors(capsys):
    assert main(["train", "-p", "n_layers=2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("altgrad: error: ") and err.count("\n") == 1
    assert "n_layers" in err and "valid keys" in err and "did you mean 'n_layer'" in err
    assert main(["train", "-p", "n_layer=two"]) == 2
    assert "TrainConfig.n_layer" in capsys.readouterr().err


def test_print_config_resolves_run_dir(tmp_path, capsys):
    assert main(["train", "-p", f"out_dir={tmp_path}", "-p", "seed=3", "--print-config"]) == 0
    out = capsys.readouterr().out
    assert str(tmp_path) in out and '"run_name": "hp-s3-' in out


# ------------------------------------------------------------------ input errors: one line, exit 2
TINY = ["-p", "n_layer=1", "-p", "n_head=2", "-p", "n_embd=32", "-p", "block_size=32", "-p", "batch_size=4",
        "-p", "max_docs=30", "-p", "tokenizer=gpt2-512", "-p", "max_steps=2", "-p", "eval_iters=1", "--no-progress"]


def _assert_user_error(p: subprocess.CompletedProcess, *needles: str) -> str:
    assert p.returncode == 2, (p.returncode, p.stdout[-2000:], p.stderr[-3000:])
    assert "Traceback" not in p.stderr and p.stderr.count("\n") == 1, p.stderr
    line = p.stderr.strip()
    assert line.startswith("altgrad: error: ") and all(n in line for n in needles), line
    return line


def _error_cases(tmp: Path) -> list[tuple[list[str], list[str]]]:
    malformed = tmp / "malformed.yaml"
    malformed.write_text("lr: 3e-4\nrecipe: [fp8\n")
    return [
        (["-p", "recipe=fp8_hybird"], ["fp8_hybird", "fp8_hybrid"]),
        (["-p", "recipe={name: mine, attn_qkv: {input: E4M3}}"], ["attn_qkv", "layers"]),   # per-layer, no layers:
        (["-p", "corpus=eurlex"], ["eurlex", "licenses"]),                                  # offline
        (["-p", "backend=torchao", "-p", "recipe=fmt:E3M4"], ["torchao", "e3m4"]),
        (["-f", str(malformed)], [str(malformed), "invalid YAML", "line 3"]),
        (["-p", "lr=[0.1"], ["lr=[0.1", "not valid YAML"]),
        (["-f", str(tmp)], [str(tmp), "is a directory"]),
        (["-p", "out_dir=/proc/altgrad-cli-test"], ["/proc/altgrad-cli-test", "not writable"]),
        (["-p", "lr=1e1000"], ["TrainConfig.lr=inf", "finite"]),
        (["-p", "block_size=200000"], ["block_size"]),    # memory refused, or more tokens than the corpus has
    ]


def _in_process(capsys, *args: str) -> tuple[int, str, str]:
    """main(args) in this process: (exit code, stdout, stderr). For checks that need no process of their own (each
    `_cli` pays a Python + torch start-up); the subprocess tests above and below keep one real process per behaviour:
    exit codes and one-line errors (test_input_errors_...), training end to end, run-dir locks."""
    rc = main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def _assert_user_error_in_process(rc: int, err: str, *needles: str) -> str:
    assert rc == 2 and "Traceback" not in err and err.count("\n") == 1, (rc, err)
    line = err.strip()
    assert line.startswith("altgrad: error: ") and all(n in line for n in needles), line
    return line


SUBPROCESS_CASES = (0, 2, 4)  # end to end in a real process; every case also runs in-process below


def test_input_errors_are_one_line_exit_2_and_leave_no_run_dir(tmp_path):
    out = tmp_path / "runs"
    for i, (extra, needles) in enumerate(_error_cases(tmp_path)):
        if i in SUBPROCESS_CASES:
            p = _cli("train", *TINY, "-p", f"out_dir={out}", "-p", "run_name=r", *extra)
            _assert_user_error(p, *needles)
            assert not (out / "r").exists(), extra


def test_every_input_error_maps_to_exit_2_in_process(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ALTGRAD_OFFLINE", "1")
    out = tmp_path / "runs"
    for extra, needles in _error_cases(tmp_path):
        rc = main(["train", *TINY, "-p", f"out_dir={out}", "-p", "run_name=r", *extra])
        err = capsys.readouterr().err
        assert rc == 2 and err.count("\n") == 1 and err.startswith("altgrad: error: "), (extra, err)
        assert all(n in err for n in needles), err
        assert not (out / "r").exists(), extra


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_gpu_is_one_line(capsys, monkeypatch):
    monkeypatch.setenv("ALTGRAD_OFFLINE", "1")
    rc, _, err = _in_process(capsys, "train", *TINY, "-p", "device=cuda")
    _assert_user_error_in_process(rc, err, "device='cuda'", "CUDA is not available")


def test_print_config_validates_and_debug_shows_the_traceback(capsys):
    from altgrad_lib.errors import ConfigError

    rc, _, err = _in_process(capsys, "train", "-p", "recipe=fp8_hybird", "--print-config")
    _assert_user_error_in_process(rc, err, "fp8_hybird")
    # --debug: the error propagates (a process prints its traceback)
    with pytest.raises(ConfigError, match="fp8_hybird"):
        main(["--debug", "train", "-p", "recipe=fp8_hybird", "--print-config"])


def test_print_config_checks_tokenizer_and_backend(capsys):
    assert main(["train", "-p", "tokenizer=gpt3", "--print-config"]) == 2
    assert "gpt3" in capsys.readouterr().err
    assert main(["train", "-p", "backend=scaled_mm", "-p", "recipe=fp8_e4m3", "--print-config"]) == 2
    assert "grads must be E5M2" in capsys.readouterr().err


def test_a_bug_keeps_its_traceback(monkeypatch, capsys):
    import altgrad_lib.training.loop as tr

    def broken(*a, **k):
        raise ZeroDivisionError("a bug, not a user error")

    monkeypatch.setattr(tr, "train", broken)
    with pytest.raises(ZeroDivisionError):
        main(["train", "-p", "max_steps=1", "--no-progress"])


def test_version_names_package_and_git_sha(capsys):
    import altgrad_lib

    with pytest.raises(SystemExit) as ei:
        main(["--version"])
    out = capsys.readouterr().out
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    assert ei.value.code == 0 and out.startswith(f"altgrad {altgrad_lib.__version__} (git ")
    assert sha and sha[:12] in out


def test_help_gives_meaning_and_choices_of_every_key(capsys):
    from altgrad_lib import choices
    from altgrad_lib.training.config import key_docs

    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())          # undo the line wrapping
    for key, _, meaning, _ in key_docs():
        assert " ".join(meaning.split()) in text, key
    for tup in (choices.RECIPES, choices.BACKENDS, choices.CORPORA, choices.TOKENIZERS, choices.MLP_KINDS,
                choices.PRECISIONS, choices.DEVICES):
        assert ", ".join(tup) in text, tup


# ------------------------------------------------------------------ run directories
def test_a_failed_start_does_not_lock_the_run_name(tmp_path):
    out = tmp_path / "runs"
    bad = _cli("train", *TINY, "-p", f"out_dir={out}", "-p", "run_name=exp1", "-p", "corpus=licences")
    _assert_user_error(bad, "licences")
    good = _cli("train", *TINY, "-p", f"out_dir={out}", "-p", "run_name=exp1", "-p", "corpus=licenses")
    assert good.returncode == 0 and "status: completed" in good.stdout, good.stderr[-2000:]


def test_a_stub_without_results_is_free_for_another_config(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ALTGRAD_OFFLINE", "1")
    out = tmp_path / "runs"
    stub = out / "exp1"
    (stub / "checkpoints").mkdir(parents=True)                 # what a start that died after mkdir leaves
    (stub / "config.yaml").write_text(yaml.safe_dump({**TrainConfig(device="cpu", lr=0.5).to_dict()}))
    (stub / "provenance.json").write_text('{"numerics_version": 1}')
    (stub / "metrics.csv").write_text("step,name,value\n")
    rc, stdout, err = _in_process(capsys, "train", *TINY, "-p", f"out_dir={out}", "-p", "run_name=exp1")
    assert rc == 0 and "status: completed" in stdout, err[-2000:]
    assert TrainConfig.from_dict(yaml.safe_load((stub / "config.yaml").read_text())).n_embd == 32
    # a directory that holds a result is still protected
    rc, _, err = _in_process(capsys, "train", *TINY, "-p", f"out_dir={out}", "-p", "run_name=exp1", "-p", "lr=0.5")
    _assert_user_error_in_process(rc, err, str(stub), "config hash")


def test_second_process_on_a_run_dir_is_refused_with_the_holder(tmp_path):
    out = tmp_path / "runs"
    run_dir = out / "shared"
    holder = spawn_lock_holder(run_dir)
    try:
        p = _cli("train", *TINY, "-p", f"out_dir={out}", "-p", "run_name=shared")
        _assert_user_error(p, str(run_dir), "in use by", f"pid {holder.pid}")
    finally:
        holder.kill()
        holder.wait(timeout=30)
    p = _cli("train", *TINY, "-p", f"out_dir={out}", "-p", "run_name=shared")   # the lock died with its holder
    assert p.returncode == 0 and "status: completed" in p.stdout, p.stderr[-2000:]


def test_diverged_run_reports_the_divergence_not_a_stale_loss(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ALTGRAD_OFFLINE", "1")
    rc, stdout, err = _in_process(capsys, "train", *TINY, "-p", f"out_dir={tmp_path}", "-p", "run_name=div",
                                  "-p", "lr=1000", "-p", "max_steps=6", "-p", "warmup_steps=0", "-p", "grad_clip=0")
    assert rc == 0, err[-2000:]
    assert "status: diverged" in stdout and "result: diverged at step " in stdout
    assert "first non-finite" in stdout or "validation loss is non-finite" in stdout
    assert "val/loss:" not in stdout and "train/loss:" not in stdout
    from altgrad_lib.notebook import analysis
    from altgrad_lib.training.run_dir import Run

    run = Run.load(tmp_path / "div")
    assert run.diverged and run.final_val_loss is None and len(run.metric("val/loss"))   # step-0 loss exists...
    s = analysis.run_summary({"div": run})
    assert s.final_val_loss.isna().all() and s.diverged.all()                          # ...but is no result


OPTIM_CASES = [   # each passed --print-config and --dry-run, then raised in train()
    (["-p", "optimizer=grid_adamw", "-p", "optim={storage: grid_sr}"], ["no trainable weight has a format", "'hp'"]),
    (["-p", "optimizer=grid_adamw", "-p", "optim={weight_fmt: E4M33}"], ["E4M33", "valid built-ins"]),
    (["-p", "optimizer=grid_adamw", "-p", "optim={state_m: E9M9}"], ["E9M9", "valid built-ins"]),
    (["-p", "optimizer=grid_adamw", "-p", "optim={weight_fmt: E8M0FNU}"],
     ["optim.weight_fmt='E8M0FNU'", "no sign bit"]),
    (["-p", "recipe=fmt:E8M0FNU"], ["LayerSpec.input", "E8M0FNU", "no sign bit"]),
]


def test_optimizer_and_format_mistakes_fail_print_config_and_train_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ALTGRAD_OFFLINE", "1")
    out = tmp_path / "runs"
    for extra, needles in OPTIM_CASES:
        for mode in (["--print-config"], []):
            rc = main(["train", *TINY, "-p", f"out_dir={out}", "-p", "run_name=r", *extra, *mode])
            err = capsys.readouterr().err
            assert rc == 2 and err.count("\n") == 1 and err.startswith("altgrad: error: "), (extra, err)
            assert all(n in err for n in needles), err
            assert not (out / "r").exists(), extra
    # end to end in a real process: exit 2, one stderr line, no run directory
    _assert_user_error(_cli("train", *TINY, "-p", f"out_dir={out}", "-p", "run_name=r", *OPTIM_CASES[0][0]),
                       *OPTIM_CASES[0][1])
    assert not out.exists()


def test_study_dry_run_checks_every_point_in_a_real_process(tmp_path):
    study = tmp_path / "s.yaml"
    config = {"out_dir": str(tmp_path / "runs"), "optimizer": "grid_adamw", "optim": {"storage": "grid_sr"}}
    study.write_text(yaml.safe_dump({"name": "s", "config": config,
                                     "axes": {"recipe": ["fp8_hybrid", "hp"], "seed": [0]}}))
    p = _cli("study", "-f", str(study), "--dry-run", "--out", str(tmp_path / "study"))
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.startswith("altgrad study: error: study point {'recipe': 'hp', 'seed': 0}: ") and \
        "no trainable weight has a format" in p.stderr, p.stderr
    assert not (tmp_path / "runs").exists() and not (tmp_path / "study").exists()


def test_study_workers_range_names_auto(tmp_path, capsys):
    # "--workers -1" said ">= 1" although 0 (auto) is valid
    assert main(["study", "-f", str(REPO / "params" / "studies" / "ci_formats.yaml"), "--workers", "-1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("altgrad: error: --workers=-1 is invalid; valid: 0 (auto") and "N >= 1" in err
    assert err.count("\n") == 1


def test_diagnostics_off_through_the_cli(capsys):
    # `-p diagnostics=off` was a type error (YAML reads off as False)
    assert main(["train", "-p", "diagnostics=off", "--print-config"]) == 0
    assert json.loads(capsys.readouterr().out)["diagnostics"] == "off"
