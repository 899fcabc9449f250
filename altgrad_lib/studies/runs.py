"""Running points and the index: train (reuse, resume) each point of a study or a notebook's variants through an
executor, and keep `study.csv` (one row per point) up to date. The Study model (study.py) and train_variants
(variant_runs.py) hand their points to `run_points`.

`run_study` (study.py) hands every point to train() through an executor (executors.py): a finished run is reused, an
interrupted one resumes from its checkpoint, a missing one is trained. After every run the index
`study.csv` (run, axis values, status, final numbers, run dir) is rewritten atomically. A diverged run is a
result (status `diverged`, with its step); so is one that finished above ln(V), the loss of a uniform guess over its
tokenizer's vocabulary (status `did_not_learn`, its numbers kept: results.run_status); a run that raises is `failed`
with its one-line error; neither stops the others. A run that another process is training (a second study on the
same outputs) is "running elsewhere": its worker waits for it, then reuses (or resumes) it, so it is never `failed`.
SIGTERM / SIGINT on the driver are forwarded (one SIGTERM) to the local workers, which finish their step and
checkpoint; runs not started are not started; every unfinished run is `interrupted` in the index, and
errors.Interrupted is raised (`altgrad study`: one line, exit 75). Re-running resumes them.
"""
from __future__ import annotations

import itertools
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

import pandas as pd

from altgrad_lib.errors import ConfigError, Interrupted, one_line
from altgrad_lib.io import write_csv
from altgrad_lib.paths import shown
from altgrad_lib.studies.executors import LocalExecutor, auto_executor, kill_workers, map_jobs, stop_workers
from altgrad_lib.studies.results import DID_NOT_LEARN, run_frame
from altgrad_lib.training.config import TrainConfig
from altgrad_lib.training.interrupt import RESUME_HINT, InterruptScope
from altgrad_lib.training.loop import train
from altgrad_lib.training.preflight import check_settings

INDEX_FILE = "study.csv"


@dataclass(frozen=True)
class StudyPoint:
    """One run of a study: its own axis values, the full config, and the stable run name."""
    name: str
    axes: dict[str, Any]
    config: TrainConfig


def run_point(config: dict[str, Any], resume: bool = True) -> dict[str, Any]:
    """Worker job: train (reuse, resume) one point; returns its index fields. Raises on failure."""
    run = train(TrainConfig.from_dict(config), resume=resume, progress=False, verbose=False, wait_if_locked=True)
    row = run_frame([run], keys=()).iloc[0].to_dict()
    div = run.divergence or {}
    return {"status": row["status"], "reused": bool(run.reused), "error": "",   # did_not_learn: results.run_status
            **{k: row[k] for k in ("final_train_loss", "final_val_loss", "val_ppl", "tokens_per_s")},
            "diverged_at_step": div.get("step", math.nan) if run.diverged else math.nan, "run_dir": str(run.dir)}


def machine_key(machine: Mapping[str, Any] | None) -> str:
    """One machine as a run's provenance.json records it (run_dir.machine_info): model name, ATen's CPU capability
    and the ISA flags, which decide the float path; "unrecorded" for a run from before machines were recorded."""
    if not machine:
        return "unrecorded"
    return (f"{machine.get('cpu_model', '?')} (ATen {machine.get('aten_cpu_capability', '?')}; "
            f"{' '.join(machine.get('isa', [])) or 'no listed ISA flag'})")


def run_machines(frame: pd.DataFrame) -> dict[str, int]:
    """machine_key -> number of the index's runs it trained (from each run's provenance.json; rows without a run
    directory on this disk are left out). Two machines of one model name differ in their last digits, so
    a study whose runs come from more than one says so (StudyClaims.report)."""
    out: dict[str, int] = {}
    for d in frame.get("run_dir", pd.Series(dtype=object)).dropna().astype(str):
        prov = Path(d) / "provenance.json"
        if not prov.exists():
            continue
        try:
            machine = json.loads(prov.read_text()).get("machine")
        except (OSError, ValueError):
            continue
        key = machine_key(machine)
        out[key] = out.get(key, 0) + 1
    return out


def machines_line(frame: pd.DataFrame) -> str | None:
    """One line when the index's runs come from more than one machine (a paired gap then mixes machine noise into
    the format's effect), else None."""
    machines = run_machines(frame)
    if len(machines) < 2:
        return None
    parts = "; ".join(f"{n} on {k}" for k, n in sorted(machines.items(), key=lambda kv: -kv[1]))
    return (f"runs from {len(machines)} machines ({parts}): a quantized run's last digits differ between machines, "
            f"so a row near ±δ may get another verdict on one machine alone")


def axis_value(cfg: TrainConfig, key: str) -> Any:
    """The index's value of `key`: the recipe's name, a dict-valued key (optim: {storage: grid_sr}) as its canonical
    JSON (sorted keys), so a level is one hashable value that reads back from study.csv unchanged."""
    if key == "recipe":
        return cfg.recipe_name
    v = getattr(cfg, key)
    return json.dumps(v, sort_keys=True, default=str) if isinstance(v, Mapping) else v


def index_row(p: StudyPoint, cols: list[str]) -> dict[str, Any]:
    """A point's row of the index before it ran: its axis columns, status `pending`, no numbers yet."""
    return {"run": p.name, **index_values(p, cols),
            "status": "pending", "reused": False, "error": "", "final_train_loss": math.nan,
            "final_val_loss": math.nan, "val_ppl": math.nan, "tokens_per_s": math.nan,
            "diverged_at_step": math.nan, "seconds": math.nan, "run_dir": str(p.config.run_dir)}


def index_values(p: StudyPoint, cols: Iterable[str]) -> dict[str, Any]:
    """A point's index columns as study.csv records them (canonical recipe names)."""
    return {k: axis_value(p.config, k) if k in p.config.keys() else p.axes.get(k) for k in cols}


def _write_index(path: Path, rows: list[dict[str, Any]]) -> None:
    write_csv(path, pd.DataFrame(rows))  # atomic: readers (a notebook, a second shell) never see half an index


def check_points(points: list[StudyPoint]) -> list[StudyPoint]:
    """Each point's settings checked by training.preflight.check_settings (recipe x backend, tokenizer, the
    optimizer built as the run builds it): a bad point fails here in one line, before any run trains."""
    for p in points:
        try:
            check_settings(p.config)
        except ValueError as e:
            raise ConfigError(f"study point {p.axes}: {one_line(e)}") from e
    return points


def finished(cfg: TrainConfig) -> bool:
    """The run of `cfg` has ended (completed or diverged): train() would return it without training."""
    return (cfg.run_dir / "summary.json").exists()


def run_points(points: list[StudyPoint], cols: list[str], index_path: Path | None, executor: Any = None,
               resume: bool = True, log: Any = print, title: str = "", name: str = "",
               checked: bool = False) -> list[dict[str, Any]]:
    """The engine under run_study and train_variants: train (reuse, resume) each point through
    `executor` (default: executors.auto_executor for the points still to train), rewriting the index
    `index_path` (one row per point: cols, status, final numbers; None: no index) after each; returns the rows.
    `checked`: the caller ran check_points on these points already."""
    if not checked:
        check_points(points)   # every setting of every point before the first run trains
    todo = {p.name for p in points if not (resume and finished(p.config))}
    executor = executor or auto_executor(len(todo), points[0].config.device if points else "cpu")
    rows = {p.name: index_row(p, cols) for p in points}
    order = [p.name for p in points]
    write = (lambda: _write_index(index_path, [rows[n] for n in order])) if index_path else (lambda: None)
    write()
    log(f"{title or name}: {len(points)} runs, {len(todo)} to train, on {executor.short_str()}"
        + (f"; index {shown(index_path)}" if index_path else ""))
    t0 = time.perf_counter()
    jobs = [(p.name, p.config.resolved().to_dict(), resume) for p in points]
    stopped: list[str] = []   # runs that came back interrupted (also in-process, where train() saw the signal)
    with InterruptScope(on_signal=stop_workers, on_abort=kill_workers) as sig:   # see executors.py
        def stop():
            return bool(sig) or bool(stopped)

        outcomes = itertools.chain(LocalExecutor().map(_job, [j for j in jobs if j[0] not in todo], stop),  # read
                                   map_jobs(executor, _job, [j for j in jobs if j[0] in todo], stop))
        for i, ((pname, config, _), out) in enumerate(outcomes, 1):
            row = rows[pname]
            if out.ok:
                row.update(out.value)
            elif out.interrupted:
                stopped.append(pname)
                done = finished(TrainConfig.from_dict(config))   # e.g. its worker died after the last step
                row.update(run_point(config) if done else {"status": "interrupted", "error": out.error})
            else:
                row.update(status="failed", error=out.error)
            row["seconds"] = round(out.seconds, 2)
            write()
            extra = (f" val_loss={row['final_val_loss']:.4f}" if row["status"] == "completed" else
                     f" val_loss={row['final_val_loss']:.4f}, above the uniform-guess loss ln(V)"
                     if row["status"] == DID_NOT_LEARN else
                     f" at step {row['diverged_at_step']}" if row["status"] == "diverged" else f" {row['error']}")
            log(f"[{i}/{len(points)}] {pname}: {row['status']}{' (reused)' if row['reused'] else ''}{extra} "
                f"({row['seconds']} s)")
    left = [n for n in order if rows[n]["status"] == "interrupted"]
    if sig or left:
        raise Interrupted(f"{name or 'runs'} interrupted{f' by {sig.name}' if sig else ''}: {len(left)} of "
                          f"{len(points)} runs not finished"
                          + (f" (status 'interrupted' in {index_path})" if index_path else "") + f"; {RESUME_HINT}")
    log(f"{name or 'runs'}: {len(points)} runs in {time.perf_counter() - t0:.1f} s"
        + (f" -> {shown(index_path)}" if index_path else ""))
    return [rows[n] for n in order]


def _job(job: tuple[str, dict[str, Any], bool]) -> dict[str, Any]:
    _, config, resume = job
    return run_point(config, resume)
