"""The driver's reaper: one small process per driver that kills the driver's workers, and their children, as soon as
the driver dies, however it dies (SIGKILL, OOM killer, a crashed notebook kernel) and however loaded the machine is.

    guard(pid)          # a child of this process, just started: killed with everything below it when we die
    before = descendants(); ray.init()                                  # executors.start_ray
    [guard(p, parent) for p, parent in descendants().items() if p not in before]

How, without a poll: this process holds one end of a Unix socket pair, the reaper blocks on the other. The kernel
closes a dead process's descriptors, so the reaper's read returns end-of-file the moment the driver is gone, and the
reaper then sends SIGKILL to every process it was handed and to their descendants. Each process is handed over as a
pidfd (a handle on that very process, so a recycled pid is never signalled), opened while the process is still our
unreaped child and sent right after it is started: a worker still importing torch when the driver dies goes as
promptly as one that trains (a SIGKILL in the instant between a worker's fork and its hand-over leaves that worker
to its own guards, set once its imports are done). The reaper also watches those pidfds (one becomes readable when
its process exits) and closes the ended ones, so a long-lived notebook kernel does not pile them up. It lives in a
session of its own (a terminal's Ctrl-C does not reach it) and imports nothing heavy, so its start costs one bare
interpreter.
A process forked (not spawned) from the driver would inherit the driver's end and keep it open: os.register_at_fork
closes it in such a child. Linux >= 5.3 only (pidfd_open); elsewhere `guard` does nothing and the workers' own
guards remain (executors.die_with_parent: the parent-death signal, and a thread blocked on the driver's pipe)."""
from __future__ import annotations

import os
import socket
import sys
import threading

# Runs as `python -c REAPER_CODE <fd>`: argv[1] is the reaper's end of the socket pair.
REAPER_CODE = r"""
import os, select, signal, socket, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
os.chdir("/")                                # holds no directory of the driver's (a temporary one, a mount)
sock = socket.socket(fileno=int(sys.argv[1]))
watch = select.poll()
watch.register(sock, select.POLLIN)
handed = {}                                  # pidfd -> pid of every process handed over and not yet ended

def tree(roots):
    "roots and all their descendants, from /proc (a process cannot be reparented under a root while it lives)"
    kids = {}
    for d in os.listdir("/proc"):
        try:
            with open(f"/proc/{d}/stat") as f:
                kids.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(int(d))
        except (OSError, ValueError, IndexError):
            pass
    out, todo = set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid not in out:
            out.add(pid)
            todo.extend(kids.get(pid, ()))
    return out

while True:
    for fd, _ in watch.poll():
        if fd != sock.fileno():              # a handed process ended
            watch.unregister(fd)
            os.close(fd)
            handed.pop(fd, None)
            continue
        msg, fds, _, _ = socket.recv_fds(sock, 64, 1)
        if not msg:                          # end of file: the driver is gone
            pidfds = list(handed)
            for pid in tree(handed.values()) - set(handed.values()):
                try:
                    pidfds.append(os.pidfd_open(pid))
                except OSError:
                    pass
            for pfd in pidfds:               # handles first, then the signals: nobody escapes by reparenting
                try:
                    signal.pidfd_send_signal(pfd, signal.SIGKILL)
                except OSError:
                    pass
            os._exit(0)
        for pfd in fds:                      # one per message: the pid is the message
            handed[pfd] = int(msg)
            watch.register(pfd, select.POLLIN)
"""

_state: dict = {}   # "sock": this process's end, "owner": the pid that started the reaper, "reaper": its pid
_lock = threading.Lock()


def supported() -> bool:
    return sys.platform.startswith("linux") and hasattr(os, "pidfd_open") and hasattr(socket, "send_fds")


def _forget_after_fork() -> None:
    """In a forked child: close the parent's end (holding it would keep the parent's reaper from seeing its death),
    and take a new lock (another thread of the parent may have held it at the fork)."""
    global _lock
    _lock = threading.Lock()
    sock = _state.pop("sock", None)
    _state.clear()
    if sock is not None:
        sock.close()


def _start() -> socket.socket:
    # SOCK_SEQPACKET: one message per process handed over, never merged with the next
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        os.set_inheritable(theirs.fileno(), True)   # only the reaper needs it; ours stays close-on-exec
        pid = os.posix_spawn(sys.executable, [sys.executable, "-I", "-S", "-c", REAPER_CODE, str(theirs.fileno())],
                             {}, setsid=True)
    finally:
        theirs.close()
    _state.update(sock=ours, owner=os.getpid(), reaper=pid)
    return ours


def guard(pid: int, parent: int | None = None) -> bool:
    """Hand process `pid` to this process's reaper (started on first use): a child not yet waited for, or, with
    `parent`, a live descendant whose parent that is (checked after its pidfd is open, so a pid recycled between a
    listing and the hand-over is never handed); False where that is not possible (no pidfd here, the process gone)."""
    if not supported():
        return False
    with _lock:
        if _state.get("owner") != os.getpid():   # first use in this process
            _state.clear()
            _start()
        if pid == _state["reaper"]:
            return False
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            return False
        try:
            if parent is not None and _parent(pid) != parent:
                return False
            socket.send_fds(_state["sock"], [str(pid).encode()], [fd])
        except OSError:   # the reaper is gone (killed by hand): the workers' own guards remain
            return False
        finally:
            os.close(fd)
        return True


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process (from /proc; {} where there is none)."""
    pids = [int(d) for d in os.listdir("/proc") if d.isdigit()] if os.path.isdir("/proc") else []
    return {pid: ppid for pid in pids if (ppid := _parent(pid)) is not None}


def descendants() -> dict[int, int]:
    """pid -> parent pid of every process below this one (children, theirs, ...), this process's reaper excepted.
    Ray's raylet starts its agents below itself: a SIGKILLed driver's raylet dies of its parent-death signal, which
    may come before the reaper's own scan, and reparents them out of any tree the reaper could walk then."""
    parents, out, todo = _parents(), {}, [os.getpid()]
    kids: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        kids.setdefault(ppid, []).append(pid)
    while todo:
        for pid in kids.get(todo.pop(), ()):
            if pid != _state.get("reaper") and pid not in out:
                out[pid] = parents[pid]
                todo.append(pid)
    return out


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)
