"""Preemption: SIGTERM / SIGINT stop a run (or a study) at a clean point instead of killing it mid-step.

Rented GPUs are often preemptible: the provider sends SIGTERM and kills the process a little later. Inside an
`InterruptScope` the first SIGTERM or SIGINT only sets `signum`; train() checks it after every step, writes a
checkpoint of that step (atomically) and raises errors.Interrupted, which the CLI prints as one line and turns
into exit code EXIT_INTERRUPTED. A second signal aborts at once (SIGINT: KeyboardInterrupt, SIGTERM: the default
action, i.e. death by the signal); the last checkpoint stays valid because checkpoints are written atomically.

Handlers can only be installed from the main thread; elsewhere (a notebook's background thread) the scope does
nothing and signals keep their usual effect.
"""
from __future__ import annotations

import os
import signal
import threading
from typing import Any, Callable

# sysexits.h EX_TEMPFAIL, "temporary failure, the user is invited to retry": the run is intact and resumes.
# Distinct from 0 (done), 1 (a run failed), 2 (input error) and 128+N (killed by signal N).
EXIT_INTERRUPTED = 75
SIGNALS = (signal.SIGINT, signal.SIGTERM)
RESUME_HINT = "re-run the same command to resume"


class InterruptScope:
    """Context manager: while inside, the first SIGINT/SIGTERM sets `signum` (and calls `on_signal(signum)`, e.g.
    to forward it to worker processes); a second one calls `on_abort(signum)` and then aborts (see the module)."""

    def __init__(self, on_signal: Callable[[int], None] | None = None,
                 on_abort: Callable[[int], None] | None = None):
        self.signum: int | None = None
        self._on_signal, self._on_abort = on_signal, on_abort
        self._prev: dict[int, Any] = {}

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum else ""

    def __bool__(self) -> bool:   # `if stop:` reads "a stop was asked for"
        return self.signum is not None

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum is None:
            self.signum = signum
            if self._on_signal is not None:
                self._on_signal(signum)
            return
        if self._on_abort is not None:
            self._on_abort(signum)
        self._restore()
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    def _restore(self) -> None:
        for s, h in self._prev.items():
            signal.signal(s, h)
        self._prev = {}

    def __enter__(self) -> "InterruptScope":
        if threading.current_thread() is threading.main_thread():
            for s in SIGNALS:
                self._prev[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        self._restore()
