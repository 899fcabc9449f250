"""Run directories: project paths, provenance, the tidy metrics CSV, and the `Run` result object.

Layout of one run (`<outputs>/runs/<run_name>/`):
    config.yaml        resolved TrainConfig (every field)
    provenance.json    seed, config hash, git SHA + dirty flag, library versions, host, start time, command
    metrics.csv        tidy long table `step,name,value`, appended and flushed after every step
    summary.json       written once the run is finished ("completed" or "diverged")
    divergence.json    only when the run hit a non-finite loss / gradient
    checkpoints/last.pt
    figures/
    .lock              who trains here now (pid, host, start time); flock'ed while a process uses the run

A run directory is *free* while it holds no result (no checkpoint, no metric row, no summary): what a failed
start leaves behind never blocks the corrected command, whatever config it recorded.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import json
import math
import os
import platform
import re
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

import pandas as pd
import torch
import yaml

import altgrad_lib
from altgrad_lib.errors import ConfigError, Interrupted, UserError, one_line
from altgrad_lib.io import atomic_write_text, fmt_value, read_json
from altgrad_lib.paths import project_root
from altgrad_lib.training.config import TrainConfig

METRICS_FILE = "metrics.csv"
METRICS_HEADER = "step,name,value\n"


# ----------------------------------------------------------------------------------------------
# project paths


# ----------------------------------------------------------------------------------------------
# provenance


def git_info(cwd: str | Path | None = None) -> dict[str, Any]:
    """{"sha": ..., "dirty": bool | None}; "unknown" outside a git checkout or without git."""
    cwd = Path(cwd) if cwd is not None else (project_root() or Path.cwd())

    def _git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    sha = _git("rev-parse", "HEAD")
    if sha is None:
        # inside a work tree without commits yet, rev-parse HEAD fails but the tree is still "dirty"
        inside = _git("rev-parse", "--is-inside-work-tree")
        return {"sha": "unknown", "dirty": None if inside != "true" else True}
    # notebooks are outputs (re-executed in place before they are committed): a change to them alone does not
    # make the code that ran differ from the commit
    status = _git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)*.ipynb")
    return {"sha": sha, "dirty": None if status is None else bool(status)}


def library_versions() -> dict[str, str]:
    # importlib.metadata: no need to import torchao (slow, noisy) just to read its version
    from importlib.metadata import PackageNotFoundError, version

    vers: dict[str, str] = {"python": platform.python_version()}
    for dist in ("torch", "torchao", "numpy", "pandas", "ml_dtypes", "gfloat", "altgrad"):
        try:
            vers[dist] = version(dist)
        except PackageNotFoundError:
            vers[dist] = "not installed"
    vers["altgrad_lib"] = altgrad_lib.__version__
    return vers


# The instruction sets that decide which float path torch's CPU kernels take (ATen's dispatch, oneDNN's AMX route):
# two machines of one model name differ in them, and a quantized run's last digits with them.
ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512_bf16", "avx512_fp16", "avx512_vnni", "amx_tile",
             "amx_bf16", "amx_int8", "asimd", "sve")


def machine_info() -> dict[str, Any]:
    """The CPU a run's numbers came from: `lscpu`'s model name, ATen's CPU capability (ATEN_CPU_CAPABILITY can lower
    it) and the ISA flags above that /proc/cpuinfo lists."""
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
    flags = re.search(r"^(?:flags|Features)\s*:(.*)$", text, re.M)
    have = set(flags.group(1).split()) if flags else set()
    return {"cpu_model": model.group(1).strip() if model else platform.processor() or "unknown",
            "aten_cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "isa": [f for f in ISA_FLAGS if f in have],
            "cpus": os.cpu_count()}


def make_provenance(config: "TrainConfig", config_hash: str) -> dict[str, Any]:
    return {
        "seed": config.seed,
        "config_hash": config_hash,
        "git": git_info(),
        "versions": library_versions(),
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "machine": machine_info(),
        "start_time": now_iso(),
        "command": " ".join(sys.argv),
        "cwd": str(Path.cwd()),
        "resumes": [],
    }


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def write_config_yaml(path: Path, config_dict: dict[str, Any]) -> None:
    atomic_write_text(path, yaml.safe_dump(config_dict, sort_keys=False))


# ----------------------------------------------------------------------------------------------
# metrics


def perplexity(loss: float) -> float:
    """exp(loss), the one perplexity of metrics.csv, summary.json and run tables: inf where exp overflows
    float64 (loss above ~709.78), NaN for a NaN loss."""
    try:
        return math.exp(loss)
    except OverflowError:
        return math.inf


class MetricsWriter:
    """Append-only writer for the tidy `step,name,value` CSV; flushes after every `log()` call so a
    killed process loses at most the step in flight."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        new = not self.path.exists() or self.path.stat().st_size == 0
        self._fh = open(self.path, "a", encoding="utf-8")
        if new:
            self._fh.write(METRICS_HEADER)
            self._fh.flush()

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self._fh.write("".join(f"{int(step)},{k},{fmt_value(v)}\n" for k, v in metrics.items()))
        self._fh.flush()

    def sync(self) -> None:
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.close()

    def __enter__(self) -> "MetricsWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_metrics(path: str | Path) -> pd.DataFrame:
    """Tidy metrics table (step:int, name:str, value:float64, bit-exact round trip)."""
    path = Path(path)
    if not path.exists():
        return pd.DataFrame({"step": pd.Series(dtype="int64"), "name": pd.Series(dtype="str"),
                             "value": pd.Series(dtype="float64")})
    return pd.read_csv(path, float_precision="round_trip", dtype={"step": "int64", "name": "str"})


# ----------------------------------------------------------------------------------------------
# run directory: free or taken, and the lock


LOCK_FILE = ".lock"


def divergence_where(div: dict[str, Any]) -> str:
    """Where a divergence record (divergence.json) says the blow-up began, in words; when the replay of the step
    found no non-finite tensor, what is known instead (e.g. the gradient norm overflowed float32)."""
    if div.get("phase") == "eval":
        return "validation loss is non-finite"
    first = div.get("first_nonfinite") or {}
    if first.get("kind") == "grad_norm_overflow":
        return (f"first non-finite the gradient norm: float32 overflow, every gradient finite (first to overflow "
                f"{first.get('name')}, norm {first.get('norm', float('nan')):.3g} in float64)")
    if first:
        return f"first non-finite {first.get('kind', '?')} {first.get('name', '?')}"
    return (f"the replay of the step found no non-finite tensor (loss {div.get('loss')}, grad_norm "
            f"{div.get('grad_norm')})")


class RunLockedError(UserError, RuntimeError):
    """Another live process holds the run directory's lock."""


def run_dir_is_free(run_dir: str | Path, ignore_checkpoint: bool = False) -> bool:
    """True when `run_dir` holds no result yet: no summary.json, no checkpoint and no metric row. A failed
    start (bad corpus, no GPU, ...) leaves such a stub; it may be reused by any config. ignore_checkpoint:
    look at summary and metrics only (a checkpoint without metrics cannot resume without a gap)."""
    d = Path(run_dir)
    if (d / "summary.json").exists() or (not ignore_checkpoint and (d / "checkpoints" / "last.pt").exists()):
        return False
    m = d / METRICS_FILE
    return not m.exists() or m.stat().st_size <= len(METRICS_HEADER)


class RunLock:
    """Exclusive lock on a run directory: `fcntl.flock` on `<run_dir>/.lock`, which the kernel releases when
    the process dies (no stale lock after a kill). The file holds the holder's pid, host, start time and
    command, so a refused second process can say who holds it. POSIX only; not reliable on NFS."""

    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_FILE
        self._fh: Any = None

    def acquire(self) -> "RunLock":
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            fh = open(self.path, "a+", encoding="utf-8")
        except OSError as e:
            raise ConfigError(f"cannot use {self.run_dir} as a run directory ({one_line(e)})") from e
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip()
            fh.close()
            try:
                h = json.loads(holder)
                who = f"pid {h.get('pid')} on {h.get('host')} since {h.get('start_time')} ({h.get('command')!r})"
            except (ValueError, AttributeError):
                who = "another process"
            raise RunLockedError(f"{self.run_dir} is in use by {who}; wait for it to finish or pick another "
                                 f"run_name/out_dir") from None
        fh.seek(0)
        fh.truncate()
        fh.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "start_time": now_iso(),
                             "command": " ".join(sys.argv)}) + "\n")
        fh.flush()
        self._fh = fh
        return self

    def release(self) -> None:
        if self._fh is not None and not self._fh.closed:
            fcntl.flock(self._fh.fileno(), fcntl.LOCK_UN)
            self._fh.close()
        self._fh = None

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


@contextlib.contextmanager
def hold_run_lock(run_dir: Path, wait: bool = False, stop: Any = None, log: Any = print) -> Iterator[RunLock]:
    """RunLock(run_dir) for the block. With `wait` (studies), a run another process holds is "running elsewhere":
    poll every 0.5 s until it is free (then train() reuses or resumes it); a true `stop` (an InterruptScope that got
    a signal) ends the wait with errors.Interrupted."""
    told = False
    while True:
        try:
            lock = RunLock(run_dir).acquire()
            break
        except RunLockedError as e:
            if not wait:
                raise
            if not told:
                who = e.args[0].split(" is in use by ")[-1].split(";")[0]
                log(f"{Path(run_dir).name} is running elsewhere ({who}); waiting for it, then reusing or resuming it")
                told = True
            if stop:
                raise Interrupted(f"interrupted by {stop.name} while waiting for {Path(run_dir).name}; re-run the "
                                  f"same command to resume") from None
            time.sleep(0.5)
    try:
        yield lock
    finally:
        lock.release()


# ----------------------------------------------------------------------------------------------
# Run result object


@dataclass
class Run:
    """Result of `train()` / `Run.load(dir)`. `metrics` is the tidy long table (step, name, value)."""

    dir: Path
    config: "TrainConfig"
    metrics: pd.DataFrame
    diverged: bool = False
    divergence: dict[str, Any] | None = None
    final_val_loss: float | None = None  # None unless completed: a diverged run has no result, never a stale loss
    status: str = "incomplete"          # "completed" | "diverged" | "incomplete"
    reused: bool = False                # True when train() found the finished run and did not retrain
    provenance: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.dir.name

    @property
    def ckpt_path(self) -> Path:
        return self.dir / "checkpoints" / "last.pt"

    def metric(self, name: str) -> pd.Series:
        """One metric as a Series indexed by step, e.g. `run.metric("val/loss")`."""
        m = self.metrics[self.metrics["name"] == name]
        return pd.Series(m["value"].to_numpy(), index=m["step"].to_numpy(), name=name)

    def wide(self, exclude_prefixes: Iterable[str] = ()) -> pd.DataFrame:
        """Pivot to one column per metric (index = step)."""
        m = self.metrics
        for p in exclude_prefixes:
            m = m[~m["name"].str.startswith(p)]
        return m.pivot_table(index="step", columns="name", values="value", aggfunc="last")

    def short_str(self) -> str:
        if self.diverged:
            return f"Run({self.name}, {self.divergence_str()})"
        v = "n/a" if self.final_val_loss is None else f"{self.final_val_loss:.4f}"
        return f"Run({self.name}, {self.status}, val_loss={v})"

    def divergence_str(self) -> str:
        """'diverged at step N: first non-finite <kind> <tensor>' (the result of a diverged run)."""
        d = self.divergence or {}
        return f"diverged at step {d.get('step', '?')}: {divergence_where(d)}"

    def __repr__(self) -> str:
        return self.short_str()

    @classmethod
    def load(cls, run_dir: str | Path, config: TrainConfig | None = None) -> "Run":
        """The run in `run_dir`; `config`: its config.yaml already parsed (train(): the config it wrote there, or
        read back to compare), so that a run builds its TrainConfig once; None: parsed here."""
        run_dir = Path(run_dir)
        cfg_path = run_dir / "config.yaml"
        if not cfg_path.is_file():
            raise FileNotFoundError(f"{run_dir} is not a run directory: {cfg_path} is missing")
        if config is None:
            config = TrainConfig.from_dict(yaml.safe_load(cfg_path.read_text()) or {})
        metrics = read_metrics(run_dir / METRICS_FILE)
        summary = read_json(run_dir / "summary.json") if (run_dir / "summary.json").exists() else {}
        divergence = read_json(run_dir / "divergence.json") if (run_dir / "divergence.json").exists() else None
        prov = read_json(run_dir / "provenance.json") if (run_dir / "provenance.json").exists() else {}
        status = summary.get("status", "diverged" if divergence else "incomplete")
        # only a completed run has a final loss; the last logged val/loss of any other is stale (e.g. step 0)
        final_val = summary.get("final_val_loss") if status == "completed" else None
        return cls(dir=run_dir, config=config, metrics=metrics, diverged=divergence is not None,
                   divergence=divergence, final_val_loss=final_val, status=status, provenance=prov)
