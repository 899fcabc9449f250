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
03-06, 04's runs in 06). `--workers N` / `--executor ray` override that for every notebook. tcmalloc is preloaded
into the kernels when the machine has it (glibc page-faults on every new large tensor). The sweep ends with
the wall time of each notebook and the path of the report it wrote: `outputs/report/index.html` (each notebook, its
question, its headline result and its wall time) beside every executed notebook as HTML (notebook/report.py).
"""
from __future__ import annotations

import argparse
import sys
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


def run_job(job: Job, kernel: str) -> tuple[str, str]:
    import papermill as pm  # imported lazily: only the sweep needs it

    print(f"start {job.label}", flush=True)
    params = yaml.safe_load(job.params_file.read_text()) or {}
    job.output.parent.mkdir(parents=True, exist_ok=True)
    try:
        pm.execute_notebook(str(job.notebook), str(job.output), parameters=params, kernel_name=kernel,
                            cwd=str(NOTEBOOK_DIR), progress_bar=True, extra_arguments=list(KERNEL_ARGS))
        return "ok", ""
    except Exception as exc:  # papermill still writes the failed notebook with the error cell
        return "failed", f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]


def _run_item(item: tuple[Job, str] | tuple[Job, str, int]) -> tuple[str, str]:
    """Executor job (module level, picklable): one notebook; with a thread count, its kernel gets that many."""
    job, kernel, *threads = item
    if threads and threads[0]:
        import os

        os.environ["OMP_NUM_THREADS"] = str(threads[0])   # read by the kernel's torch at start-up
    return run_job(job, kernel)


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
    from altgrad_lib.studies.executors import ExecutorError, get_executor

    lib = preload_tcmalloc()
    print(f"allocator: {'tcmalloc (' + lib + ')' if lib else 'glibc malloc (no libtcmalloc_minimal.so.4 here)'}")
    rows, walls, t_start = [], {}, time.perf_counter()
    for stage_jobs, workers in stages(jobs, args.workers):
        try:
            executor = get_executor(args.executor, workers=workers, threads=1 if workers > 1 else None,
                                    address=args.address)
        except (ExecutorError, ValueError) as e:
            raise SystemExit(f"sweep: error: {e}") from None
        t0 = time.perf_counter()
        items = [(job, args.kernel, 1 if workers > 1 else 0) for job in stage_jobs]
        for (job, *_), out in executor.map(_run_item, items):
            status, error = out.value if out.ok else ("failed", out.error)
            rows.append({"notebook": job.notebook.stem, "params": str(job.params_file.relative_to(ROOT)),
                         "status": status, "seconds": round(out.seconds, 1), "output": str(job.output),
                         "error": error})
            # Written after every job so an interrupted sweep still leaves its record.
            pd.DataFrame(rows).to_csv(summary_path, index=False)
            print(f"[{len(rows)}/{len(jobs)}] {job.label}: {status} in {rows[-1]['seconds']} s {error}", flush=True)
        nb = stage_jobs[0].notebook.stem
        walls[nb] = walls.get(nb, 0.0) + time.perf_counter() - t0

    table = pd.DataFrame(rows)
    print("\n" + table[["notebook", "params", "status", "seconds"]].to_string(index=False))
    wall = pd.DataFrame({"notebook": list(walls), "jobs": [int((table.notebook == n).sum()) for n in walls],
                         "wall_s": [round(w, 1) for w in walls.values()]})
    wall.to_csv(summary_path.with_name("wall.csv"), index=False)
    print(f"\nwall time per notebook (profile {args.profile}):\n{wall.to_string(index=False)}\n"
          f"total {time.perf_counter() - t_start:.1f} s")
    print(f"\nsummary: {summary_path}")
    failed = table[table.status != "ok"]
    if len(failed):
        print(f"{len(failed)} notebook run(s) failed; see the executed notebooks for the error cell", file=sys.stderr)
    index = write_report(rows, args.profile, ROOT / "outputs" / "report")
    print(f"\nreport: {index}", flush=True)
    return 1 if len(failed) else 0


def write_report(rows: list[dict], profile: str, out_dir: Path) -> Path:
    """outputs/report/: each executed notebook as HTML and index.html (question, headline, wall time of each)."""
    from altgrad_lib.notebook.report import ReportEntry, build_report
    from altgrad_lib.notebook.profile import code_version

    entries = [ReportEntry(f"{Path(r['output']).parent.name}[{Path(r['output']).stem}]", Path(r["output"]),
                           r["status"], r["seconds"], r["error"]) for r in rows]
    return build_report(entries, out_dir, title=f"AltGrad notebooks, profile {profile}",
                        subtitle=f"code: {code_version()}")


if __name__ == "__main__":
    sys.exit(main())
