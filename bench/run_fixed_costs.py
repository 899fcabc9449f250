"""Benchmark: the wall time of one cpu-profile run in a fresh process (`altgrad train`), warm and cold inductor
cache, for code checked out in one or more directories (e.g. a base commit exported next to the working tree), and
whether the runs' numbers agree across them (metrics.csv without the timing rows, diagnostics.csv, the last
checkpoint's model tensors).

    python bench/run_fixed_costs.py --roots /tmp/base . --recipes hp fp8_hybrid nvfp4 --warm 3 --cold 1
    python bench/run_fixed_costs.py --recipes nvfp4 --param diagnostics=off --cold 0

Each (recipe, root) gets its own inductor cache dir: a cold run starts from an empty one (as a user's first
`make run`) and leaves it warm for the warm runs after it. Roots alternate within a recipe, so a change in the
machine's load hits both alike; the load average is printed with each run (shared machines: report medians; the
CPU time, user + system of the run's process, is less sensitive to other processes than its wall time).
One thread (OMP_NUM_THREADS=1), as a study worker. Not a test: numbers depend on the machine.
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

PARAMS = "params/02_bf16_baseline/cpu.yaml"


def one_run(root: Path, recipe: str, cache: Path, out: Path, extra: list[str]) -> tuple[float, float]:
    """(wall s, CPU s: user + system of the process and its children) of one `altgrad train`."""
    env = {**os.environ, "PYTHONPATH": str(root), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "ALTGRAD_OFFLINE": "1", "ALTGRAD_OUTPUTS": str(out), "OMP_NUM_THREADS": "1",
           "TORCHINDUCTOR_CACHE_DIR": str(cache)}
    cmd = [sys.executable, "-m", "altgrad_lib.cli", "train", "-f", PARAMS, "-p", f"recipe={recipe}", "--no-progress",
           "--no-resume", "-p", f"out_dir={out}", *extra]
    r0, t = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    subprocess.run(cmd, cwd=root, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.perf_counter() - t, r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime


def numbers(run_dir: Path) -> tuple[str, str, dict]:
    metrics = "\n".join(ln for ln in (run_dir / "metrics.csv").read_text().splitlines() if ",perf/" not in ln)
    diag = run_dir / "diagnostics.csv"
    ck = torch.load(run_dir / "checkpoints" / "last.pt", map_location="cpu", weights_only=False)
    return metrics, diag.read_text() if diag.exists() else "", {k: ck[k] for k in ("model", "optimizer") if k in ck}


def _equal(a, b) -> bool:
    """Tensors bit for bit (NaN where NaN), containers element by element, anything else by ==."""
    if torch.is_tensor(a):
        return torch.is_tensor(b) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(
            a.view(-1).view(torch.uint8) if a.is_floating_point() else a, b.view(-1).view(torch.uint8)
            if b.is_floating_point() else b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    return a == b


def same_numbers(a: Path, b: Path) -> bool:
    (ma, da, sa), (mb, db, sb) = numbers(a), numbers(b)
    return ma == mb and da == db and _equal(sa, sb)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--roots", nargs="+", default=["."], help="code checkouts to compare (PYTHONPATH of each run)")
    ap.add_argument("--recipes", nargs="+", default=["hp", "fp8_hybrid", "nvfp4"])
    ap.add_argument("--warm", type=int, default=3, help="warm-cache runs per (recipe, root)")
    ap.add_argument("--cold", type=int, default=1, help="cold-cache runs per (recipe, root)")
    ap.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                    help="a TrainConfig override for every run, e.g. diagnostics=off (repeatable)")
    args = ap.parse_args(argv)
    roots = [Path(r).resolve() for r in args.roots]
    work = Path(tempfile.mkdtemp(prefix="run_fixed_costs-"))
    print(f"cpu: {_cpu()}; torch {torch.__version__}; scratch {work}")
    for recipe in args.recipes:
        times: dict[tuple[str, Path], list[tuple[float, float]]] = {}
        dirs: dict[Path, Path] = {}
        for kind, n in (("cold", args.cold), ("warm", args.warm)):
            for i in range(n):
                for r, root in enumerate(roots):
                    # a cold run starts from an empty cache; the warm runs reuse the first cold run's (or a primed one)
                    cache = work / f"cache-{recipe}-{r}-cold{i}"
                    if kind == "warm":
                        cache = work / f"cache-{recipe}-{r}-{'cold0' if args.cold else 'primed'}"
                        if not cache.exists():   # no cold run before: prime it (not timed)
                            one_run(root, recipe, cache, work / "prime", [a for kv in args.param for a in ("-p", kv)])
                    out = work / f"out-{recipe}-{r}-{kind}{i}"
                    dt = one_run(root, recipe, cache, out, [a for kv in args.param for a in ("-p", kv)])
                    dirs[root] = next(p.parent for p in out.glob("*/metrics.csv"))
                    times.setdefault((kind, root), []).append(dt)
                    print(f"{recipe:12s} {kind} {root}: wall {dt[0]:6.1f} s, cpu {dt[1]:6.1f} s "
                          f"(load {os.getloadavg()[0]:.2f})", flush=True)
        for (kind, root), ts in times.items():
            print(f"{recipe:12s} {kind} {root}: median wall {statistics.median(t[0] for t in ts):.1f} s, "
                  f"cpu {statistics.median(t[1] for t in ts):.1f} s of {len(ts)}: "
                  + ", ".join(f"{w:.1f}/{c:.1f}" for w, c in ts))
        if len(roots) > 1:
            same = all(same_numbers(dirs[roots[0]], dirs[r]) for r in roots[1:])
            print(f"{recipe:12s} same numbers (metrics, diagnostics, checkpoint) across roots: {same}")
    return 0


def _cpu() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        return next(ln.split(":", 1)[1].strip() for ln in out.splitlines() if ln.startswith("Model name"))
    except (OSError, StopIteration):
        return "unknown"


if __name__ == "__main__":
    raise SystemExit(main())
