"""tools/cpu_load.py (`make test-loaded`): the command runs beside busy processes, its exit status comes back, and no
busy process outlives the tool, even when the tool is SIGKILLed."""
from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from pathlib import Path

import psutil
from helpers import cpu_load, exit_deadline, still_alive

TOOL = Path(__file__).resolve().parents[1] / "tools" / "cpu_load.py"


def test_the_command_runs_under_the_load_and_its_exit_status_comes_back():
    # the command counts its siblings, the tool's other children: the hogs
    probe = ("import psutil, sys; me = psutil.Process(); "
             "print(sum(p.pid != me.pid for p in me.parent().children())); sys.exit(7)")
    p = subprocess.run([sys.executable, str(TOOL), "-n", "2", "--", sys.executable, "-c", probe],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 7, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].startswith("cpu_load: 2 busy process(es)") and lines[1] == "2", p.stdout
    assert lines[-1].startswith("cpu_load: exit 7 after"), p.stdout
    bad = subprocess.run([sys.executable, str(TOOL), "-n", "0", "--", "true"], capture_output=True, text=True)
    assert bad.returncode == 2 and "-n 0 invalid; valid: N >= 1" in bad.stderr, bad.stderr


def test_no_hog_outlives_the_tool_or_the_block():
    with cpu_load(2) as hogs:
        assert len(hogs) == 2 and still_alive(hogs) == hogs
    assert not still_alive(hogs)                 # the block's end kills them (and waits)
    p = subprocess.Popen([sys.executable, str(TOOL), "-n", "2", "--", "sleep", "600"], stdout=subprocess.PIPE,
                         text=True)
    assert p.stdout.readline().startswith("cpu_load:")
    def named(kids):
        with contextlib.suppress(psutil.NoSuchProcess):
            return [c.name() for c in kids]
        return []

    kids = psutil.Process(p.pid).children()
    # the hogs, then the command once exec'd: a loaded machine shows the forked child under python's name first
    while len(kids) < 3 or "sleep" not in named(kids):
        assert p.poll() is None
        time.sleep(0.05)
        kids = psutil.Process(p.pid).children()
    hogs = [c.pid for c in kids if c.name() != "sleep"]
    assert len(hogs) == 2, kids
    p.kill()                                     # SIGKILL: no finally of the tool runs; the kernel's signal does it
    p.wait(timeout=60)
    p.stdout.close()
    alive = still_alive(hogs, exit_deadline())
    for c in kids:                               # the orphaned `sleep 600`: the tool does not own its command's fate
        with contextlib.suppress(psutil.NoSuchProcess):
            c.kill()
    assert not alive, alive
