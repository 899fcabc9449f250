"""Executors: run independent jobs (training runs of a study, notebooks of the sweep) and yield each outcome as
it finishes.

    ex = get_executor("local", workers=2)          # or get_executor("ray", address="auto")
    for item, outcome in ex.map(fn, items, stop):  # outcome: Outcome(ok, value, error, seconds, interrupted)
        ...

`fn` must be a module-level function (it is pickled by reference) and `items` picklable. A job that raises,
or whose worker process dies, comes back as `ok=False` with a one-line error; the other jobs go on. A job that
raises errors.Interrupted (train() on SIGTERM / SIGINT) comes back `interrupted=True`. Once `stop()` is true
(the driver got a signal, see runs.run_points), jobs not yet started are not started: they come back
`interrupted=True` too ("not started").

- `local` (default): `workers` processes (spawned, so no forked torch thread pools), each running
  `threads` torch threads (default: the machine's cores divided among the workers). With `workers=1`
  jobs run in this process, one after another.
  Default (`auto_executor`, used by studies, notebooks and the sweep): on CPU one single-threaded worker per core
  for the runs still to train, on a GPU one worker. Why: the models of the cpu profiles are tiny, and their GEMMs
  scale badly over threads. Measured on 2 idle cores, one 300-step run of the shared cpu model (2 x 64, T 64):
  12.0 s on 1 thread, 9.3 s on 2 threads, so two runs side by side (one thread each) beat two in a row on two
  threads if they slow each other by less than 1.55x (the sweep's timing of `make run` is the end-to-end check).
  On a busy machine the opposite held (load ~11 from other jobs, 2 tiny 30-step runs: 1 worker 28-34 s, 2
  workers 40-57 s, each process paying ~5 s of torch import): set `ALTGRAD_WORKERS=1` there.
  Workers persist: the pool outlives one `map` and serves the next one of this process with the same number of
  workers, environment, working directory, sys.path and altgrad_lib sources (a notebook's looks, its studies and
  envelopes), so a
  worker pays its start (torch import, corpus parse, each quantizer configuration's compile: 5-15 s a worker
  measured on the cpu profile) once per process, not once per call. A map that ends early (a signal, a dead
  worker, a consumer that stops) discards the pool; the last one is shut down when this process exits.
  A worker process that dies (OOM, segfault) breaks the pool; the jobs it left unfinished are then retried
  one per fresh process, so only the job that kills its process comes back failed ("worker process died").
  Threads: `OMP_NUM_THREADS`, when set, is the per-worker default (a shared box's setting is respected).
  Workers never outlive the driver, however it dies (SIGKILL: no code of the driver runs then) and however loaded
  the machine is; nothing polls. The driver's reaper (reaper.py) gets each worker the moment it is started and kills
  it, and what it started, when the driver's end of their socket closes; each worker also blocks a thread on the
  pipe its driver holds the write end of (multiprocessing's parent sentinel: end-of-file when the driver dies) and,
  when started from the driver's main thread, sets Linux's PR_SET_PDEATHSIG = SIGKILL (Linux sends it when the
  *thread* that started the process exits, so not for a worker a thread started). Each worker also leaves the
  driver's process group (a terminal's Ctrl-C reaches only the driver, which forwards one SIGTERM: two would abort
  the run instead of checkpointing it) and ignores SIGINT between jobs.
- `ray`: one Ray task per job, `cpus_per_job` / `gpus_per_job` reserved each, on the cluster at `address`
  ("auto" = the one `ray start` made on this node; None = a private local instance). Ray is imported only
  here; without it the error names the extra to install. Every node needs altgrad_lib importable
  (`pip install altgrad` on each box, as for any Ray job) and the same `ALTGRAD_OUTPUTS` when runs must land
  on shared storage. A private instance (start_ray) is retried on Ray's start-up timeout, and its processes are
  handed to the reaper: Ray's own agents outlive a SIGKILLed driver, waiting on its dead GCS.
"""
from __future__ import annotations

import atexit
import contextlib
import gc
import multiprocessing.context as mp_context
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from altgrad_lib.errors import Interrupted, exc_line
from altgrad_lib.studies import reaper

EXECUTORS = ("local", "ray")


class ExecutorError(RuntimeError):
    """The executor cannot start (missing Ray, bad address, ...)."""


@dataclass(frozen=True)
class Outcome:
    ok: bool
    value: Any = None
    error: str = ""
    seconds: float = 0.0
    interrupted: bool = False   # the job was stopped by a signal (its state saved) or never started


NOT_STARTED = Outcome(False, None, "not started: the study was interrupted", interrupted=True)


def default_threads(workers: int) -> int:
    """Torch threads per worker: OMP_NUM_THREADS when set (the box's owner asked for it), else cores // workers."""
    env = os.environ.get("OMP_NUM_THREADS", "").strip()
    if env.isdigit() and int(env) >= 1:
        return int(env)
    return max(1, (os.cpu_count() or 1) // max(1, workers))


def die_with_parent(parent: int, from_main_thread: bool = True) -> str:
    """Make this worker die when its driver `parent` does, even by SIGKILL, at once and at any load (the reaper,
    reaper.py, is the third guard); returns how ("prctl+pipe" or "pipe"). `from_main_thread`: whether `parent`
    started this process from its main thread. Linux's parent-death signal fires when the parent *thread* that
    started the process exits: a worker that a map in another thread started (tools/sweep.py's background stage)
    died with that thread, idle or not, and the semaphores it held were reported leaked when the driver exited.
    The pipe serves every worker: a daemon thread blocks on reading the parent sentinel, the read end of a pipe
    whose write end only the driver holds; the kernel closes it when the driver dies, the read returns end-of-file
    and the thread kills this process. (A poll of the parent pid did this before: on a loaded machine such workers
    outlived a SIGKILLed driver.)"""
    import multiprocessing as mp

    how = "pipe"
    if from_main_thread and sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1   # <linux/prctl.h>
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(pr_set_pdeathsig, int(signal.SIGKILL), 0, 0, 0) == 0:
            how = "prctl+pipe"
    driver = mp.parent_process()
    if driver is None or driver.pid != parent:
        raise RuntimeError(f"die_with_parent({parent}) outside a worker that process {parent} started")
    sentinel = driver.sentinel

    def watch() -> None:   # blocks in read(2): no CPU, no timer; b"" once the driver's end is closed
        while os.read(sentinel, 4096):
            pass
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="altgrad-driver-pipe", daemon=True).start()
    if os.getppid() != parent:   # the driver died before any guard was set: the pipe is closed already
        os._exit(1)
    return how


_worker = {"in_worker": False, "stopped": False,   # this process's role; a worker stopped by a signal takes no new job
           "frozen": False}                         # its first job's survivors are out of the cyclic GC's reach


def _freeze_survivors() -> None:
    """After a worker's first job: collect once, then move every object left (torch, dynamo and inductor modules,
    the compiled kernels: ~480k objects in a study worker) to the GC's permanent generation. Python's full
    collections walk all tracked objects, ~0.3-0.4 s each in such a worker, every 2-3 runs of the cpu profile;
    after the freeze they walk only what later jobs made (bench/results/run_fixed_costs.md). The collection before
    the freeze frees the first job's garbage, so what is frozen is the process's long-lived state; frozen objects
    are still freed by reference counting, only a cycle among them that later becomes garbage would stay."""
    if _worker["in_worker"] and not _worker["frozen"]:
        _worker["frozen"] = True
        gc.collect()
        gc.freeze()


def _exit_now() -> None:
    """A worker's last act: skip the interpreter's teardown of torch & co. (measured: 3 s of a 2-worker
    study's 10 s from SIGTERM to exit on a loaded 2-core box, 0.1 s without). Jobs have returned by then, so
    their files are closed; only stdout / stderr need a flush."""
    for f in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            f.flush()
    os._exit(0)


def yield_cpu(nice: int) -> None:
    """Lower this process's priority to `nice` (absolute, inherited by its children) and, on Linux, its session's:
    with autogroup scheduling (sched_autogroup_enabled) CPU time is shared between sessions first, and a Jupyter
    kernel is a session of its own, so a nice value alone would not make it yield to other kernels' workers.
    Never raises a priority (a process already nicer keeps its value). Best effort: a system without
    /proc/self/autogroup keeps the nice value only."""
    os.setpriority(os.PRIO_PROCESS, 0, max(nice, os.getpriority(os.PRIO_PROCESS, 0)))
    with contextlib.suppress(OSError, ValueError, IndexError):
        group = Path("/proc/self/autogroup")   # "/autogroup-70 nice 0"
        group.write_text(str(max(nice, int(group.read_text().split()[-1]))))


def _worker_init(driver: int, from_main_thread: bool) -> None:
    """First thing in every local worker (see the module note): die with the driver, own process group, no SIGINT."""
    _worker["in_worker"] = True
    atexit.register(_exit_now)   # registered first, so it runs after every library's atexit handler
    die_with_parent(driver, from_main_thread)
    os.setpgrp()
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # train() installs its own handlers while it runs


def _call(fn: Callable[[Any], Any], item: Any, threads: int | None) -> Outcome:
    """Runs in the worker: torch thread count first, then the job; an exception becomes an Outcome."""
    if _worker["stopped"]:   # the pool queues a job ahead per worker; after an interruption none may start
        return NOT_STARTED
    t0 = time.perf_counter()
    prev = None
    if threads:
        import torch

        prev = torch.get_num_threads()
        torch.set_num_threads(int(threads))
    try:
        return Outcome(True, fn(item), "", time.perf_counter() - t0)
    except Interrupted as e:  # SIGTERM / SIGINT: the job saved its state and stopped
        _worker["stopped"] = _worker["in_worker"]
        return Outcome(False, None, str(e), time.perf_counter() - t0, interrupted=True)
    except Exception as e:  # a failing job must never stop the others
        return Outcome(False, None, exc_line(e), time.perf_counter() - t0)
    finally:
        if prev is not None:
            import torch

            torch.set_num_threads(prev)
        _freeze_survivors()


@dataclass(frozen=True)
class LocalExecutor:
    workers: int = 1
    threads: int | None = None          # torch threads per worker; None = cores // workers

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError(f"LocalExecutor.workers={self.workers!r} must be >= 1")
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"LocalExecutor.threads={self.threads!r} must be >= 1 or None")

    def short_str(self) -> str:
        return f"local[{self.workers} worker(s) x {self.threads or default_threads(self.workers)} thread(s)]"

    def map(self, fn: Callable[[Any], Any], items: Iterable[Any],
            stop: Callable[[], bool] | None = None) -> Iterator[tuple[Any, Outcome]]:
        items = list(items)
        stop = stop or (lambda: False)
        threads = self.threads or default_threads(self.workers)
        if self.workers == 1 or len(items) <= 1:
            for item in items:
                yield item, (NOT_STARTED if stop() else _call(fn, item, threads if self.threads else None))
            return
        from concurrent.futures import CancelledError, ProcessPoolExecutor, as_completed
        from concurrent.futures.process import BrokenProcessPool

        orphans, interrupted = [], False
        pool = _shared_pool(self.workers)
        try:
            futures = {pool.submit(_call, fn, item, threads): item for item in items}
            for fut in as_completed(futures):
                if stop():   # jobs not yet started stay so (they come out of as_completed as cancelled)
                    for f in futures:
                        f.cancel()
                try:
                    out = fut.result()
                except CancelledError:
                    out = NOT_STARTED
                except BrokenProcessPool:  # a worker died (killed, out of memory, segfault): culprit unknown
                    orphans.append(futures[fut])
                    continue
                interrupted = interrupted or out.interrupted   # a worker stopped by a signal takes no new job
                yield futures[fut], out
        except BaseException:
            # Ctrl-C in a driver that does not forward signals itself (tools/sweep.py), or the consumer stopped
            # early: the workers are in their own process group, so tell them (SIGTERM: a run checkpoints and
            # stops, anything else dies) instead of waiting for every job to end.
            _drop_pool(pool, signal.SIGTERM)
            raise
        if orphans or interrupted or stop():   # a broken pool, or workers that a signal stopped: not reused
            _drop_pool(pool)
        for item in orphans:  # retry each alone, so only the job that kills its process fails
            if stop():
                yield item, Outcome(False, None, "worker stopped by the interruption", interrupted=True)
                continue
            with ProcessPoolExecutor(max_workers=1, **_pool_kw()) as solo:
                try:
                    out = solo.submit(_call, fn, item, threads).result()
                except BrokenProcessPool as e:
                    out = Outcome(False, None, f"worker process died: {exc_line(e)}")
            yield item, out


_pool: dict[str, Any] = {}   # the persistent local pool: "pool" and the "key" it was started under


def _pool_kw() -> dict[str, Any]:
    # a worker is started by the thread that submits: the map's that made the pool (_pool_key records which kind)
    return {"mp_context": _GuardedSpawn(), "initializer": _worker_init, "initargs": (os.getpid(), _on_main_thread())}


class _ReapedProcess(mp_context.SpawnProcess):
    """A spawned worker handed to this process's reaper as soon as it exists, before it imports anything."""

    def start(self) -> None:
        super().start()
        reaper.guard(self.pid)


class _GuardedSpawn(mp_context.SpawnContext):
    """multiprocessing's spawn context whose processes are _ReapedProcess (ProcessPoolExecutor's mp_context)."""
    Process = _ReapedProcess


def _on_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _pool_key(workers: int) -> tuple:
    """What a spawned worker took from this process when it started: a pool started under another key (other
    environment variables, e.g. $ALTGRAD_OUTPUTS or $ALTGRAD_QDQ_KERNEL, another cwd or sys.path, or an edited
    altgrad_lib source file: a worker would run the code it imported) is not reused. Nor is a pool of the main
    thread by another thread, whose map could start the pool's missing workers with the main thread's death
    signal (die_with_parent)."""
    return (workers, os.getpid(), tuple(sorted(os.environ.items())), os.getcwd(), tuple(sys.path),
            _package_stamp(), _on_main_thread())


def _package_stamp() -> tuple:
    """(name, size, mtime) of every altgrad_lib source file (~150 stats, a few ms)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = []
    for d, _, files in os.walk(root):
        for f in files:
            if f.endswith(".py"):
                with contextlib.suppress(OSError):
                    st = os.stat(os.path.join(d, f))
                    out.append((os.path.join(d, f), st.st_size, st.st_mtime_ns))
    return tuple(sorted(out))


def _shared_pool(workers: int) -> Any:
    """The pool of `workers` spawned workers this process keeps between maps (module note), started if need be."""
    from concurrent.futures import ProcessPoolExecutor

    key, pool = _pool_key(workers), _pool.get("pool")
    alive = pool is not None and not pool._broken and not pool._shutdown_thread and all(
        p.is_alive() for p in (pool._processes or {}).values())
    if pool is not None and (_pool.get("key") != key or not alive):
        _drop_pool(pool)
        pool = None
    if pool is None:
        pool = ProcessPoolExecutor(max_workers=workers, **_pool_kw())   # workers start on demand, one per job
        _pool.update(pool=pool, key=key)
    return pool


def _drop_pool(pool: Any, signum: int | None = None) -> None:
    """Forget `pool` (a later map starts a new one); with `signum`, send it to each worker first and do not wait
    for them (they stop, or die, on their own), else wait for the idle workers to exit."""
    if _pool.get("pool") is pool:
        _pool.clear()
    if signum is not None:
        for child in pool._processes.values() if pool._processes else ():
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.pid, signum)
        pool.shutdown(wait=False, cancel_futures=True)
    else:
        pool.shutdown(wait=True, cancel_futures=True)


def shutdown_pool() -> None:
    """Stop the persistent workers now (tests, and this process's exit: atexit below)."""
    if _pool.get("pool") is not None:
        _drop_pool(_pool["pool"])


# At exit, before the interpreter tears its modules down: a pool still referenced then is collected during the
# teardown, and concurrent.futures' callback prints "Exception ignored in: ... weakref_cb" on stderr.
atexit.register(shutdown_pool)


def map_jobs(executor: Any, fn: Callable[[Any], Any], items: list[Any], stop: Callable[[], bool]) -> Any:
    """executor.map(fn, items, stop=stop); an executor of one's own whose map takes no `stop` gets none."""
    import inspect

    takes_stop = "stop" in inspect.signature(executor.map).parameters
    return executor.map(fn, items, stop=stop) if takes_stop else executor.map(fn, items)


def stop_workers(signum: int = signal.SIGTERM) -> None:
    """A driver's first SIGTERM / SIGINT: one SIGTERM to each local worker process (a run checkpoints and stops).
    Workers are in their own process group, so a terminal's Ctrl-C did not reach them (module note)."""
    import multiprocessing as mp

    for child in mp.active_children():
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signal.SIGTERM)


def kill_workers(signum: int = signal.SIGKILL) -> None:
    """A driver's second signal: abort now; each run's last checkpoint is intact (written atomically)."""
    import multiprocessing as mp

    for child in mp.active_children():
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signal.SIGKILL)


def import_ray() -> Any:
    try:
        import ray
    except ImportError as e:
        raise ExecutorError(f"executor 'ray' needs Ray, which is not installed ({e}); "
                            f"install the extra: pip install 'altgrad[ray]'") from None
    return ray


# A new Ray node's start has two fixed waits that no setting reaches (Ray 2.60): the raylet aborts when its dashboard
# agent has not written its ports within ~15 s (node_manager.cc, WaitForDashboardAgentPorts), and ray.init gives the
# raylet 30 s to register (raylet_start_wait_time_s in ray/_private/node.py). A loaded machine can miss either; a
# later start finds Ray's files in the page cache and its bytecode compiled, so a private instance gets this many.
RAY_START_TRIES = 3


def start_ray(address: str | None = "auto", **init_kw: Any) -> None:
    """ray.init(address=address, **init_kw), failing in one line (ExecutorError). A private instance (address None)
    is started again after Ray's start-up timeout ("The current node timed out during startup"), up to
    RAY_START_TRIES times, and the processes it started (GCS, raylet, the raylet's agents and idle workers; the
    workers it starts later are below the raylet) are handed to this process's reaper, so they end with it even
    when it is SIGKILLed."""
    ray = import_ray()
    before = set(reaper.descendants())
    tries = RAY_START_TRIES if address is None else 1
    for attempt in range(1, tries + 1):
        try:
            ray.init(address=address, **init_kw)
            break
        except Exception as e:  # Ray raises a bare Exception for its start-up timeout
            with contextlib.suppress(Exception):
                ray.shutdown()
            if address is not None:
                raise ExecutorError(f"cannot connect to Ray at address={address!r} ({exc_line(e)}); "
                                    f"start a cluster with `ray start --head` or pass --address") from None
            if attempt == tries or "timed out during startup" not in str(e):
                raise ExecutorError(f"a local Ray instance did not start ({exc_line(e)}; {attempt} start(s), "
                                    f"each within Ray's own start-up timeout)") from None
    if address is None:
        for pid, parent in reaper.descendants().items():
            if pid not in before:
                reaper.guard(pid, parent)


@dataclass(frozen=True)
class RayExecutor:
    address: str | None = "auto"        # "auto" = the cluster `ray start` made; None = a private local instance
    cpus_per_job: float = 1
    gpus_per_job: float = 0
    threads: int | None = None          # torch threads per job; None = cpus_per_job (at least 1)

    def short_str(self) -> str:
        return f"ray[{self.address or 'local'}, {self.cpus_per_job} cpu / {self.gpus_per_job} gpu per job]"

    def map(self, fn: Callable[[Any], Any], items: Iterable[Any],
            stop: Callable[[], bool] | None = None) -> Iterator[tuple[Any, Outcome]]:
        """`stop` is accepted for the common interface but not acted on: Ray signals its tasks itself
        (forwarding a study's SIGTERM to Ray tasks is not implemented)."""
        ray = import_ray()
        if not ray.is_initialized():
            start_ray(address=self.address, log_to_driver=False)
        threads = self.threads or max(1, int(self.cpus_per_job))
        task = ray.remote(num_cpus=self.cpus_per_job, num_gpus=self.gpus_per_job, max_retries=0)(_call)
        pending = {task.remote(fn, item, threads): item for item in items}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                item = pending.pop(ref)
                try:
                    out = ray.get(ref)
                except Exception as e:  # the task's worker died, or Ray could not run it
                    out = Outcome(False, None, f"ray task failed: {exc_line(e)}")
                yield item, out


def auto_workers(n_jobs: int, device: str = "cpu") -> int:
    """Default parallelism for `n_jobs` training runs on TrainConfig.device `device` ("auto" resolved as training
    does): `ALTGRAD_WORKERS` if set; on CPU one single-threaded worker per core (tiny GEMMs scale badly over
    threads: see the module note); on a GPU one (the runs share it)."""
    env = os.environ.get("ALTGRAD_WORKERS", "").strip()
    if env:
        if not env.isdigit() or int(env) < 1:
            raise ValueError(f"ALTGRAD_WORKERS={env!r} must be a positive integer")
        return int(env)
    if n_jobs <= 1:
        return 1
    from altgrad_lib.training.preflight import resolve_device   # local: imports torch (this module stays torch-free)
    if not resolve_device(str(device)).startswith("cpu"):
        return 1
    return max(1, min(n_jobs, os.cpu_count() or 1))


def auto_executor(n_jobs: int, device: str = "cpu") -> LocalExecutor:
    """LocalExecutor sized by auto_workers; with one worker the jobs run in this process (no start-up cost)."""
    workers = auto_workers(n_jobs, device)
    return LocalExecutor(workers=workers, threads=None if workers == 1 else default_threads(workers))


def get_executor(name: str = "local", **kwargs: Any) -> LocalExecutor | RayExecutor:
    """`local` (workers, threads) or `ray` (address, cpus_per_job, gpus_per_job, threads)."""
    if name == "local":
        return LocalExecutor(**{k: v for k, v in kwargs.items() if k in ("workers", "threads")})
    if name == "ray":
        import_ray()  # fail before anything runs
        return RayExecutor(**{k: v for k, v in kwargs.items() if k in ("address", "cpus_per_job", "gpus_per_job",
                                                                         "threads")})
    raise ValueError(f"executor={name!r} invalid; valid choices: {EXECUTORS}")
