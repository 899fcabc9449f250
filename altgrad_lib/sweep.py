"""The main job: run every notebook over its papermill parameter files and collect the results.

`python -m altgrad_lib.sweep --profile cpu` executes, in order,
  - `notebooks/01_formats.ipynb` once per `params/01_formats/*.yaml` (one YAML per format), and
  - every other notebook once with `params/<notebook>/<profile>.yaml` (profiles: `cpu`, `h100`),
writing executed notebooks to `outputs/notebooks/<notebook>/<params>.ipynb` and a summary table to
`outputs/sweep/summary.csv`. A failing notebook is recorded and the sweep goes on, so one bad format
never loses the others; the exit code is non-zero if any notebook failed.

Notebooks run through the same executors as studies (executors.py): one after another in this process by
default; `--workers N` (local processes) or `--executor ray` run them side by side. Only notebooks that
share no run may run side by side (03 reuses the baseline 02 trains), so keep the default for those.
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


def run_job(job: Job, kernel: str) -> tuple[str, str]:
    import papermill as pm  # imported lazily: only the sweep needs it

    print(f"start {job.label}", flush=True)
    params = yaml.safe_load(job.params_file.read_text()) or {}
    job.output.parent.mkdir(parents=True, exist_ok=True)
    try:
        pm.execute_notebook(str(job.notebook), str(job.output), parameters=params,
                            kernel_name=kernel, cwd=str(NOTEBOOK_DIR), progress_bar=True)
        return "ok", ""
    except Exception as exc:  # papermill still writes the failed notebook with the error cell
        return "failed", f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]


def _run_item(item: tuple[Job, str]) -> tuple[str, str]:
    """Executor job (module level, picklable): one notebook."""
    job, kernel = item
    return run_job(job, kernel)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="cpu", help="params profile for training notebooks (cpu, h100)")
    ap.add_argument("--only", nargs="*", help="notebook stems to run, e.g. 01_formats 02_bf16_baseline")
    ap.add_argument("--out", default=str(ROOT / "outputs" / "notebooks"), help="where executed notebooks go")
    ap.add_argument("--kernel", default="python3")
    ap.add_argument("--dry-run", action="store_true", help="list the jobs and exit")
    ap.add_argument("--executor", default="local", choices=("local", "ray"), help="where notebooks run")
    ap.add_argument("--workers", type=int, default=1, help="local: notebooks side by side (default 1)")
    ap.add_argument("--address", default="auto", help="ray: cluster address")
    args = ap.parse_args(argv)

    import pandas as pd

    jobs = plan_jobs(args.profile, Path(args.out), args.only)
    print(f"sweep: {len(jobs)} notebook runs, profile={args.profile}")
    for job in jobs:
        print(f"  {job.label:40s} -> {job.output.relative_to(ROOT) if job.output.is_relative_to(ROOT) else job.output}")
    if args.dry_run:
        return 0

    summary_path = ROOT / "outputs" / "sweep" / "summary.csv"
    summary_path.parent.mkdir(parents=True, exist_ok=True)
    from altgrad_lib.executors import ExecutorError, get_executor

    try:
        executor = get_executor(args.executor, workers=args.workers, address=args.address)
    except (ExecutorError, ValueError) as e:
        raise SystemExit(f"sweep: error: {e}") from None
    rows = []
    for i, ((job, _), out) in enumerate(executor.map(_run_item, [(job, args.kernel) for job in jobs]), 1):
        status, error = out.value if out.ok else ("failed", out.error)
        rows.append({"notebook": job.notebook.stem, "params": str(job.params_file.relative_to(ROOT)),
                     "status": status, "seconds": round(out.seconds, 1), "output": str(job.output), "error": error})
        # Written after every job so an interrupted sweep still leaves its record.
        pd.DataFrame(rows).to_csv(summary_path, index=False)
        print(f"[{i}/{len(jobs)}] {job.label}: {status} in {rows[-1]['seconds']} s {error}", flush=True)

    table = pd.DataFrame(rows)
    print("\n" + table[["notebook", "params", "status", "seconds"]].to_string(index=False))
    print(f"\nsummary: {summary_path}")
    failed = table[table.status != "ok"]
    if len(failed):
        print(f"{len(failed)} notebook run(s) failed; see the executed notebooks for the error cell", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
