"""Run a command on a loaded machine: as many busy processes as cores (or -n N) for the command's duration, always
stopped after it (`make test-loaded`; tests/helpers.py's `cpu_load` for a test's own duration).

    python tools/cpu_load.py [-n N] -- COMMAND ...     # exit status: the command's

Why: a shared research box runs other jobs; a test that passes only on an idle machine (a worker that outlives its
driver by a poll's lag, a service's start-up timeout) fails there. Each hog spins in plain Python at nice 0, so
it takes a full core's share beside the command; it dies with this process (Linux's parent-death signal, and a
check of its parent between spins of a few milliseconds for a start from a thread or on another OS), so even a
SIGKILL of this tool leaves no hog behind.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import time
from typing import Iterator

HOG = r"""
import ctypes, os, signal, sys
parent = int(sys.argv[1])
if sys.platform.startswith("linux"):
    ctypes.CDLL(None).prctl(1, int(signal.SIGKILL), 0, 0, 0)   # PR_SET_PDEATHSIG
while os.getppid() == parent:
    for _ in range(100_000):
        pass
"""


@contextlib.contextmanager
def cpu_load(n: int | None = None) -> Iterator[list[int]]:
    """`n` busy processes (default: one per core) while the block runs; their pids. Always killed at the end."""
    n = n if n is not None else os.cpu_count() or 1
    hogs = [subprocess.Popen([sys.executable, "-I", "-S", "-c", HOG, str(os.getpid())], stdin=subprocess.DEVNULL)
            for _ in range(n)]
    try:
        yield [h.pid for h in hogs]
    finally:
        for h in hogs:
            h.kill()
        for h in hogs:
            h.wait()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 usage="python tools/cpu_load.py [-n N] -- COMMAND ...")
    ap.add_argument("-n", type=int, default=os.cpu_count() or 1, help="busy processes (default: one per core)")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="the command to run under the load")
    args = ap.parse_args(argv)
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        ap.error("no command given; usage: python tools/cpu_load.py [-n N] -- COMMAND ...")
    if args.n < 1:
        ap.error(f"-n {args.n} invalid; valid: N >= 1 busy processes")
    t0 = time.perf_counter()
    with cpu_load(args.n):
        print(f"cpu_load: {args.n} busy process(es) on {os.cpu_count()} core(s) while: {' '.join(cmd)}", flush=True)
        rc = subprocess.call(cmd)
    print(f"cpu_load: exit {rc} after {time.perf_counter() - t0:.0f} s under load", flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
