"""The main job: run every notebook over its papermill parameter files and collect the results.

`python tools/sweep.py --profile cpu` executes, in order,
  - `notebooks/01_formats.ipynb` once per `params/01_formats/*.yaml` (one YAML per format), and
  - every other notebook once with `params/<notebook>/<profile>.yaml` (profiles: `cpu`, `h100`),
writing executed notebooks to `outputs/notebooks/<notebook>/<params>.ipynb` and a summary table to
`outputs/sweep/summary.csv`. A failing notebook is recorded and the sweep goes on, so one bad format
never loses the others; the exit code is non-zero if any notebook failed.

Notebooks run through the same executors as studies (altgrad_lib/studies/executors.py). The per-format notebook (01: no
training, one job per format) runs its jobs side by side, one single-threaded kernel per core; the others run
one after another, because each trains its own runs side by side through the study layer
(studies.variant_runs.train_variants -> runs.run_points) and later notebooks reuse earlier ones' runs (02's baseline in
03-06, 04's runs in 06). By default (local executor, no --workers) 01's kernels run *beside* 02-06, at the lowest
CPU priority (nice 19): they use the core that 02-06 leave idle (kernel start, imports, figure cells, a study's last
run) and yield to the training runs, so 01 costs the sweep little wall time instead of ~70 s ahead of 02 (01 shares
nothing with 02-06: it trains nothing and writes only its notebooks). `--workers N` / `--executor ray` override that
for every notebook and run the stages one after another. tcmalloc is preloaded
into the kernels when the machine has it (glibc page-faults on every new large tensor). The sweep ends with
the wall time of each notebook and the path of the report it wrote: `outputs/report/index.html` (each notebook, its
question, its headline result and its wall time) beside every executed notebook as HTML (notebook/report.py).
"""
from __future__ import annotations

import argparse
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_DIR = ROOT / "notebooks"
PARAMS_DIR = ROOT / "params"
PER_FORMAT_NOTEBOOKS = ("01_formats",)  # swept over every YAML in its folder, not by profile


@dataclass(frozen=True)
class Job:
    notebook: Path
    params_file: Path
    output: Path

    @property
    def label(self) -> str:
        return f"{self.notebook.stem}[{self.params_file.stem}]"


def discover_notebooks(only: list[str] | None = None) -> list[Path]:
    notebooks = sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb"))
    if only:
        known = {nb.stem for nb in notebooks}
        unknown = sorted(set(only) - known)
        if unknown:
            raise SystemExit(f"unknown notebook(s) {unknown}; valid: {sorted(known)}")
        notebooks = [nb for nb in notebooks if nb.stem in only]
    return notebooks


def plan_jobs(profile: str, out_dir: Path, only: list[str] | None = None) -> list[Job]:
    jobs: list[Job] = []
    for nb in discover_notebooks(only):
        folder = PARAMS_DIR / nb.stem
        if nb.stem in PER_FORMAT_NOTEBOOKS:
            params_files = sorted(folder.glob("*.yaml"))
        else:
            candidate = folder / f"{profile}.yaml"
            if not candidate.exists():
                profiles = sorted(p.stem for p in folder.glob("*.yaml"))
                raise SystemExit(f"{nb.name}: no params for profile {profile!r} ({candidate}); "
                                 f"profiles available: {profiles}")
            params_files = [candidate]
        for pf in params_files:
            jobs.append(Job(nb, pf, out_dir / nb.stem / f"{pf.stem}.ipynb"))
    return jobs


# The kernel's own log (not the notebook's output): jupyter_client interrupts every kernel before shutting it
# down, and ipykernel then logs "KeyboardInterrupt caught in kernel" (plus a TCP-transport warning at start) on
# the sweep's stderr. Cell errors still reach the notebook and papermill (DeadKernelError for a dead kernel).
KERNEL_ARGS = ("--IPKernelApp.log_level=CRITICAL",)
# nbclient's timeouts, for a kernel that waits for CPU (the low-priority 01 kernels beside a training notebook, a
# loaded box): its default waits 4 s for a cell's output after the cell's reply, then goes on *without* the output
# still in flight (a warning only); here it waits, and fails the notebook if the output never comes.
# shutdown_kernel="immediate": once every cell's output is in, the kernel is killed instead of asked to exit
# (measured 1.1-2.7 s a notebook: interpreter teardown of torch & co., and a notebook's study workers waited for;
# those die with it: executors.die_with_parent). Nothing is lost: the runs' files are complete when their cell ends.
CLIENT_KW = {"start_timeout": 600, "iopub_timeout": 600, "raise_on_iopub_timeout": True,
             "shutdown_kernel": "immediate"}


def run_job(job: Job, kernel: str, nice: int = 0) -> tuple[str, str]:
    import papermill as pm  # imported lazily: only the sweep needs it

    print(f"start {job.label}", flush=True)
    params = yaml.safe_load(job.params_file.read_text()) or {}
    job.output.parent.mkdir(parents=True, exist_ok=True)
    try:
        pm.execute_notebook(str(job.notebook), str(job.output), parameters=params, kernel_name=kernel,
                            cwd=str(NOTEBOOK_DIR), progress_bar=True,
                            extra_arguments=[*KERNEL_ARGS, *kernel_nice_args(nice)], **CLIENT_KW)
        return "ok", ""
    except Exception as exc:  # papermill still writes the failed notebook with the error cell
        return "failed", f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]


BACKGROUND_NICE = 19   # the per-format kernels beside 02-06: the lowest priority, so training never waits for them


def kernel_nice_args(nice: int) -> list[str]:
    """Kernel arguments that make a kernel lower its own priority and its session's (executors.yield_cpu):
    jupyter_client starts each kernel in a session of its own, and under Linux autogroup scheduling a nice value
    weighs only within its session, so the worker's nice alone would leave the kernel an equal share of the CPU."""
    if not nice:
        return []
    return [f"--IPKernelApp.exec_lines=from altgrad_lib.studies.executors import yield_cpu; yield_cpu({int(nice)})"]


def _run_item(item: tuple) -> tuple[str, str]:
    """Executor job (module level, picklable): (job, kernel[, threads[, nice]]): one notebook; with a thread count,
    its kernel gets that many; with a niceness, this worker process (and so the kernel it starts) runs at it."""
    job, kernel, *opts = item
    import os

    if len(opts) > 0 and opts[0]:
        os.environ["OMP_NUM_THREADS"] = str(opts[0])   # read by the kernel's torch at start-up
    if len(opts) > 1 and opts[1]:
        from altgrad_lib.studies.executors import yield_cpu

        yield_cpu(opts[1])   # absolute and lowering only (os.nice would add up over a worker's jobs)
    return run_job(job, kernel, opts[1] if len(opts) > 1 else 0)


TCMALLOC = ("/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4", "/usr/lib64/libtcmalloc_minimal.so.4",
            "/usr/lib/aarch64-linux-gnu/libtcmalloc_minimal.so.4")


def preload_tcmalloc() -> str:
    """LD_PRELOAD tcmalloc for the kernels this process starts, if the machine has it and nothing is preloaded."""
    import os

    if os.environ.get("LD_PRELOAD"):
        return os.environ["LD_PRELOAD"]
    lib = next((p for p in TCMALLOC if Path(p).exists()), "")
    if lib:
        os.environ["LD_PRELOAD"] = lib
    return lib


def stages(jobs: list[Job], workers: int | None) -> list[tuple[list[Job], int]]:
    """(jobs, workers) in order: per-format notebooks side by side (auto), then each other notebook alone."""
    from altgrad_lib.studies.executors import auto_workers

    per_format = [j for j in jobs if j.notebook.stem in PER_FORMAT_NOTEBOOKS]
    out = [(per_format, workers or auto_workers(len(per_format)))] if per_format else []
    return out + [([j], workers or 1) for j in jobs if j.notebook.stem not in PER_FORMAT_NOTEBOOKS]


def background_stage(plan: list[tuple[list[Job], int]], workers: int | None, executor: str) -> int | None:
    """Index in `plan` of the stage to run beside the others at low priority (module note), or None: only the
    per-format stage, only when it runs in worker processes of its own (local, more than one worker) while every
    other stage runs in this process (no --workers), and only when there are others to run beside."""
    if workers is not None or executor != "local" or len(plan) < 2:
        return None
    first, w = plan[0]
    in_process = all(w_ == 1 for _, w_ in plan[1:])
    return 0 if w > 1 and in_process and first[0].notebook.stem in PER_FORMAT_NOTEBOOKS else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="cpu", help="params profile for training notebooks (cpu, h100)")
    ap.add_argument("--only", nargs="*", help="notebook stems to run, e.g. 01_formats 02_bf16_baseline")
    ap.add_argument("--out", default=str(ROOT / "outputs" / "notebooks"), help="where executed notebooks go")
    ap.add_argument("--kernel", default="python3")
    ap.add_argument("--dry-run", action="store_true", help="list the jobs and exit")
    ap.add_argument("--executor", default="local", choices=("local", "ray"), help="where notebooks run")
    ap.add_argument("--workers", type=int, default=None,
                    help="local: notebooks side by side (default: 01's formats one per core, the others one at a time)")
    ap.add_argument("--address", default="auto", help="ray: cluster address")
    args = ap.parse_args(argv)

    import time

    import pandas as pd

    jobs = plan_jobs(args.profile, Path(args.out), args.only)
    print(f"sweep: {len(jobs)} notebook runs, profile={args.profile}")
    for job in jobs:
        print(f"  {job.label:40s} -> {job.output.relative_to(ROOT) if job.output.is_relative_to(ROOT) else job.output}")
    if args.dry_run:
        return 0

    summary_path = ROOT / "outputs" / "sweep" / "summary.csv"
    summary_path.parent.mkdir(parents=True, exist_ok=True)
    from altgrad_lib.studies.executors import ExecutorError, get_executor, stop_workers

    lib = preload_tcmalloc()
    print(f"allocator: {'tcmalloc (' + lib + ')' if lib else 'glibc malloc (no libtcmalloc_minimal.so.4 here)'}")
    plan = stages(jobs, args.workers)
    executors = []
    for _, workers in plan:   # every executor first: a bad --executor / --address stops the sweep before any job
        try:
            executors.append(get_executor(args.executor, workers=workers, threads=1 if workers > 1 else None,
                                          address=args.address))
        except (ExecutorError, ValueError) as e:
            raise SystemExit(f"sweep: error: {e}") from None
    rows, stage_walls, t_start, lock = [], [0.0] * len(plan), time.perf_counter(), threading.Lock()
    failure: list[BaseException] = []   # what ended the background stage's thread, raised here after it

    def run_stage(i: int, nice: int = 0) -> None:
        stage_jobs, workers = plan[i]
        t0 = time.perf_counter()
        items = [(job, args.kernel, 1 if workers > 1 else 0, nice) for job in stage_jobs]
        for (job, *_), out in executors[i].map(_run_item, items):
            status, error = out.value if out.ok else ("failed", out.error)
            with lock:   # the background stage's thread records its jobs too
                rows.append({"notebook": job.notebook.stem, "params": str(job.params_file.relative_to(ROOT)),
                             "status": status, "seconds": round(out.seconds, 1), "output": str(job.output),
                             "error": error})
                # Written after every job so an interrupted sweep still leaves its record.
                pd.DataFrame(rows).to_csv(summary_path, index=False)
                print(f"[{len(rows)}/{len(jobs)}] {job.label}: {status} in {rows[-1]['seconds']} s {error}",
                      flush=True)
        stage_walls[i] = time.perf_counter() - t0

    def run_background(i: int) -> None:
        try:
            run_stage(i, BACKGROUND_NICE)
        except BaseException as e:   # re-raised by the main thread after join()
            failure.append(e)

    bg = background_stage(plan, args.workers, args.executor)
    if bg is not None:
        print(f"{plan[bg][0][0].notebook.stem}: {len(plan[bg][0])} kernels beside the other notebooks, at nice "
              f"{BACKGROUND_NICE}", flush=True)
        # A daemon thread: a Ctrl-C (main thread) ends the sweep; the stage's workers die with this process
        # (executors.die_with_parent) and their kernels with them.
        thread = threading.Thread(target=run_background, args=(bg,), name="sweep-background", daemon=True)
        thread.start()
    try:
        for i in range(len(plan)):
            if i != bg:
                run_stage(i)
    except BaseException:
        if bg is not None:   # its workers left our process group, so a Ctrl-C did not reach them: stop them
            stop_workers()
        raise
    if bg is not None:
        thread.join()
        if failure:
            raise failure[0]
        order = {str(job.output): k for k, job in enumerate(jobs)}   # the table and report in plan order again
        rows.sort(key=lambda r: order[r["output"]])
        pd.DataFrame(rows).to_csv(summary_path, index=False)
    walls: dict[str, float] = {}
    for (stage_jobs, _), w in zip(plan, stage_walls):
        nb = stage_jobs[0].notebook.stem
        walls[nb] = walls.get(nb, 0.0) + w

    table = pd.DataFrame(rows)
    print("\n" + table[["notebook", "params", "status", "seconds"]].to_string(index=False))
    wall = pd.DataFrame({"notebook": list(walls), "jobs": [int((table.notebook == n).sum()) for n in walls],
                         "wall_s": [round(w, 1) for w in walls.values()]})
    wall.to_csv(summary_path.with_name("wall.csv"), index=False)
    beside = f" ({plan[bg][0][0].notebook.stem} beside the others)" if bg is not None else ""
    print(f"\nwall time per notebook (profile {args.profile}){beside}:\n{wall.to_string(index=False)}\n"
          f"total {time.perf_counter() - t_start:.1f} s")
    print(f"\nsummary: {summary_path}")
    failed = table[table.status != "ok"]
    if len(failed):
        print(f"{len(failed)} notebook run(s) failed; see the executed notebooks for the error cell", file=sys.stderr)
    index = write_report(rows, args.profile, ROOT / "outputs" / "report", time.perf_counter() - t_start)
    print(f"\nreport: {index}", flush=True)
    return 1 if len(failed) else 0


def write_report(rows: list[dict], profile: str, out_dir: Path, wall_seconds: float | None = None) -> Path:
    """outputs/report/: each executed notebook as HTML and index.html (question, headline, wall time of each)."""
    from altgrad_lib.notebook.report import ReportEntry, build_report
    from altgrad_lib.notebook.profile import code_version

    entries = [ReportEntry(f"{Path(r['output']).parent.name}[{Path(r['output']).stem}]", Path(r["output"]),
                           r["status"], r["seconds"], r["error"]) for r in rows]
    return build_report(entries, out_dir, title=f"AltGrad notebooks, profile {profile}",
                        subtitle=f"code: {code_version()}", wall_seconds=wall_seconds)


if __name__ == "__main__":
    sys.exit(main())
