"""Tests for altgrad_lib.training.interrupt: SIGTERM / SIGINT during `altgrad train` finish the step,
write a checkpoint, print one line and exit 75; re-running the same command resumes bit-identically."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from altgrad_lib.training.interrupt import EXIT_INTERRUPTED, InterruptScope

REPO = Path(__file__).resolve().parents[1]
TINY = ["-p", "n_layer=1", "-p", "n_head=2", "-p", "n_embd=32", "-p", "block_size=32", "-p", "batch_size=4",
        "-p", "max_docs=30", "-p", "tokenizer=gpt2-512", "-p", "eval_iters=1", "-p", "eval_interval=50",
        "-p", "log_interval=1", "-p", "max_steps=300", "-p", "ckpt_interval=1000", "-p", "run_name=r",
        "--no-progress"]
LINE = re.compile(r"^altgrad: interrupted by (SIG\w+) at step (\d+); re-run the same command to resume$")


def _cmd(out_dir: Path) -> list[str]:
    return [sys.executable, "-m", "altgrad_lib.cli", "train", *TINY, "-p", f"out_dir={out_dir}"]


def _env() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "ALTGRAD_OFFLINE": "1",
            "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def _run(out_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run(_cmd(out_dir), env=_env(), capture_output=True, text=True, timeout=600)


def wait_for_step(metrics: Path, step: int, proc: subprocess.Popen, timeout: float = 300) -> None:
    """Poll metrics.csv until a train/loss row of `step` or later is there (the process is mid-run)."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        assert proc.poll() is None, proc.communicate()
        if metrics.exists():
            rows = [ln.split(",") for ln in metrics.read_text().splitlines()[1:]]
            if any(r[1] == "train/loss" and int(r[0]) >= step for r in rows if len(r) == 3):
                return
        time.sleep(0.05)
    raise AssertionError(f"no step {step} in {metrics} after {timeout} s")


def _interrupt(out_dir: Path, sig: int) -> tuple[int, str, int]:
    p = subprocess.Popen(_cmd(out_dir), env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_step(out_dir / "r" / "metrics.csv", 3, p)
    p.send_signal(sig)
    out, err = p.communicate(timeout=120)
    lines = [ln for ln in err.splitlines() if "interrupted" in ln]
    assert "Traceback" not in err and len(lines) == 1, err[-3000:]
    m = LINE.match(lines[0])
    assert m and m[1] == signal.Signals(sig).name, lines
    return p.returncode, out, int(m[2])


def _results(run_dir: Path) -> list[str]:
    """metrics.csv rows except throughput (wall-clock), as text: equal text = bit-identical values."""
    return [ln for ln in (run_dir / "metrics.csv").read_text().splitlines() if ",perf/" not in ln]


def test_sigterm_saves_the_step_says_one_line_exits_75_and_resumes_bit_identically(tmp_path):
    from altgrad_lib.training.checkpoint import load_checkpoint

    rc, _, step = _interrupt(tmp_path / "cut", signal.SIGTERM)
    assert rc == EXIT_INTERRUPTED == 75
    run = tmp_path / "cut" / "r"
    assert 3 <= step < 300 and not (run / "summary.json").exists()
    assert load_checkpoint(run / "checkpoints" / "last.pt")["step"] == step   # ckpt_interval=1000: the signal's
    resumed = _run(tmp_path / "cut")
    assert resumed.returncode == 0 and "status: completed" in resumed.stdout, resumed.stderr[-3000:]
    assert f"from step {step}" in resumed.stdout
    ref = _run(tmp_path / "ref")
    assert ref.returncode == 0, ref.stderr[-3000:]
    assert _results(run) == _results(tmp_path / "ref" / "r")
    final = [ln for ln in resumed.stdout.splitlines() if ln.startswith(("train/loss:", "val/loss:"))]
    assert len(final) == 2 and final == [ln for ln in ref.stdout.splitlines() if ln.startswith(("train/loss:",
                                                                                              "val/loss:"))]


def test_sigint_is_a_clean_stop_too(tmp_path):
    rc, _, step = _interrupt(tmp_path, signal.SIGINT)
    assert rc == EXIT_INTERRUPTED and step >= 3
    assert (tmp_path / "r" / "checkpoints" / "last.pt").exists()


def test_second_signal_aborts_at_once():
    """The second SIGINT raises KeyboardInterrupt at once (a second SIGTERM would kill this test process)."""
    before = signal.getsignal(signal.SIGINT)   # SIG_IGN when pytest runs as a background job (`make test &`)
    with pytest.raises(KeyboardInterrupt):
        with InterruptScope() as stop:
            os.kill(os.getpid(), signal.SIGINT)      # first: only noted
            assert stop and stop.name == "SIGINT"
            os.kill(os.getpid(), signal.SIGINT)      # second: abort
            time.sleep(5)                            # not reached: the handler raises within the sleep
    assert signal.getsignal(signal.SIGINT) is before     # handlers restored


def test_handlers_are_restored_after_the_scope():
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    with InterruptScope():
        assert signal.getsignal(signal.SIGTERM) is not before[0]
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
