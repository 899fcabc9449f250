"""Diagnostics: the one object train() creates; it runs the configured monitor groups and writes their files.

    diag = Diagnostics.for_run(cfg.diagnostics_config, run_dir, model, autocast, backend=..., grad_clip=...)
    diag.start(start_step, saved_state)      # fresh start: stale files removed; resume: rows after the
                                             # checkpoint dropped, monitor state restored
    ... loss.backward(); diag.after_backward(step, x, y, snap)      # before clipping / optimizer.step
    ... optimizer.step(); diag.after_step(step, loss, grad_norm, lr)
    checkpoint extra["diagnostics"] = diag.state_dict(); diag.sync() before saving; diag.close() at the end

On steps where no group is due both calls return after an integer test and a few float comparisons: no
tensor work and no device sync. On due steps every monitor's numbers go to the host in one transfer.
Nothing here writes the live model, its gradients, its quantizers or the RNG streams (replays run on a
private copy, probe.py), so a run with diagnostics on trains bit-identically to the same run with them off.
"""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from altgrad_lib.monitors.activations import ActivationsMonitor
from altgrad_lib.monitors.base import Attached, Monitor, StepContext
from altgrad_lib.monitors.config import DiagnosticsConfig
from altgrad_lib.monitors.curvature import CurvatureMonitor
from altgrad_lib.monitors.events import EventsMonitor
from altgrad_lib.monitors.fisher import FisherMonitor
from altgrad_lib.monitors.geometry import GridMonitor
from altgrad_lib.monitors.gradients import GradientsMonitor, ShadowMonitor
from altgrad_lib.monitors.health import CountersMonitor, NumericsMonitor
from altgrad_lib.monitors.manifold import ManifoldMonitor
from altgrad_lib.monitors.probe import Probe
from altgrad_lib.monitors.weights import WeightsMonitor
from altgrad_lib.monitors.writer import DIAG_FILE, DIAG_HEADER, EVENTS_FILE, EVENTS_HEADER, TidyWriter
from altgrad_lib.quantize.convert import quantized_modules
from altgrad_lib.quantize.linear import QuantizedLinear

PROBE_GROUPS = ("numerics", "shadow", "activations")
SIM_ONLY = ("counters", "numerics", "shadow", "grid")   # need simulated QuantizedLinear layers
# the class of each group of config.MONITORS (a torch-free tuple of names there; the two agree:
# tests/test_monitors_diagnostics.py)
MONITOR_CLASSES: dict[str, type[Monitor]] = {
    "counters": CountersMonitor, "gradients": GradientsMonitor, "numerics": NumericsMonitor, "shadow": ShadowMonitor,
    "grid": GridMonitor, "weights": WeightsMonitor, "activations": ActivationsMonitor, "events": EventsMonitor,
    "curvature": CurvatureMonitor, "fisher": FisherMonitor, "manifold": ManifoldMonitor,
}


class Diagnostics:
    def __init__(self, cfg: DiagnosticsConfig, run_dir: str | Path, model: nn.Module, *, backend: str = "sim",
                 compiled: bool = False, grad_clip: float = 0.0,
                 autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
                 optimizer: torch.optim.Optimizer | None = None) -> None:
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.diag = TidyWriter(self.run_dir / DIAG_FILE, DIAG_HEADER)
        self.events = TidyWriter(self.run_dir / EVENTS_FILE, EVENTS_HEADER)
        self.monitors: dict[str, Monitor] = {}
        self._ctx: tuple[StepContext, list[str]] | None = None
        self._pending: list[tuple] = []
        self._noted: set[str] = set()
        if not cfg.enabled:
            return
        everything = quantized_modules(model)
        sim = {k: m for k, m in everything.items() if isinstance(m, QuantizedLinear)}
        self._unsim = bool(everything) and len(sim) < len(everything)   # torchao / scaled_mm layers
        probe = None
        if any(g in PROBE_GROUPS for g in cfg.active_groups):
            probe = Probe(model, autocast)
        self.att = Attached(cfg=cfg, model=model, quantized=sim, backend=backend, compiled=compiled,
                            grad_clip=grad_clip, run_dir=self.run_dir, probe=probe, optimizer=optimizer)
        self.monitors = {g: MONITOR_CLASSES[g](self.att) for g in cfg.active_groups}

    @classmethod
    def for_run(cls, cfg: DiagnosticsConfig, run_dir: str | Path, model: nn.Module,
                autocast: Callable[[], contextlib.AbstractContextManager], *, backend: str = "sim",
                compiled: bool = False, grad_clip: float = 0.0,
                optimizer: torch.optim.Optimizer | None = None) -> "Diagnostics":
        """train()'s one call (TrainConfig.diagnostics_config and the run's backend, compile, grad_clip)."""
        return cls(cfg, run_dir, model, backend=backend, compiled=compiled, grad_clip=grad_clip, autocast=autocast,
                   optimizer=optimizer)

    @property
    def enabled(self) -> bool:
        return bool(self.monitors)

    # -- lifecycle ---------------------------------------------------------------------------------------
    def start(self, step: int, state: dict[str, Any] | None) -> None:
        """Fresh start (step 0): remove files of an earlier attempt. Resume: drop rows after `step` and
        restore the monitors' state saved with that checkpoint."""
        for w in (self.diag, self.events):
            w.truncate(step if step > 0 else -1)
        if state:
            self._noted = set(state.get("noted", ()))
            for g, st in state.get("groups", {}).items():
                if g in self.monitors:
                    self.monitors[g].load_state_dict(st)

    def state_dict(self) -> dict[str, Any]:
        return {"groups": {g: m.state_dict() for g, m in self.monitors.items()}, "noted": sorted(self._noted)}

    def sync(self) -> None:
        self.diag.sync()
        self.events.sync()

    def close(self) -> None:
        self.diag.close()
        self.events.close()

    # -- per step ----------------------------------------------------------------------------------------
    def after_backward(self, step: int, x: torch.Tensor, y: torch.Tensor, snap: dict[str, Any] | None) -> None:
        if not self.monitors:
            return
        due = [g for g in self.monitors if self.cfg.due(g, step)]
        if not due:
            return
        ctx = StepContext(step=step, x=x, y=y, snap=snap)
        for g in due:
            if g in SIM_ONLY and self._unsim and g not in self._noted:
                ctx.event(f"unavailable:{g}", self.att.backend, float("nan"), float("nan"))
                self._noted.add(g)
        num = any(self.monitors[g].replay_numerics for g in due)
        act = any(self.monitors[g].replay_activations for g in due)
        if (num or act) and self.att.probe is not None:
            with torch.no_grad() if not num else contextlib.nullcontext():
                ctx.cache["replay"] = self.att.probe.replay(x, y, snap, numerics=num, activations=act)
        for g in due:
            self.monitors[g].on_backward(ctx)
        self._ctx = (ctx, due)

    def after_step(self, step: int, loss: float, grad_norm: float, lr: float) -> None:
        if not self.monitors:
            return
        def emit(kind, layer, v, thr):
            self._pending.append((step, kind, layer, float(v), float(thr)))

        for m in self.monitors.values():
            m.observe(step, loss, grad_norm, emit)
        if self._ctx is not None and self._ctx[0].step == step:
            ctx, due = self._ctx
            self._ctx = None
            ctx.loss, ctx.grad_norm, ctx.lr = loss, grad_norm, lr
            for g in due:
                self.monitors[g].on_step(ctx)
            rows = ctx.materialize()
            for m in self.monitors.values():
                m.on_rows(step, rows, ctx)
            rows += ctx.materialize()
            self.diag.write(rows)
            self._pending += ctx.events
        if self._pending:
            self.events.write(self._pending)
            self._pending = []

    def short_str(self) -> str:
        return self.cfg.short_str()
