"""The Monitor interface and the per-step context the orchestrator (diagnostics.py) hands to monitors.

A monitor is one group of config.MONITORS. Diagnostics calls, on the steps where the group is due:
    on_backward(ctx)   gradients of the training step present (before clipping), weights not yet updated
    on_step(ctx)       after optimizer.step(): updated weights
and on every step `observe(step, loss, grad_norm)` with the Python floats the loop already has (no sync).
Monitors emit numbers with ctx.emit(layer, role, metric, value): value may be a 0-d tensor; the context
moves all of a step's tensors to the host in one transfer (the one device sync of a diagnostic step) and
then calls on_rows(step, rows) so a monitor (events) can react to other groups' numbers.
State that must survive a resume goes through state_dict() / load_state_dict() (saved in the checkpoint).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import nn

from altgrad_lib.monitors.config import DiagnosticsConfig

Row = tuple[int, str, str, str, float]          # step, layer, role, metric, value
Event = tuple[int, str, str, float, float]      # step, kind, layer, value, threshold


@dataclass
class Attached:
    """What every monitor may use: the live model (never compiled), its quantized layers, the config."""

    cfg: DiagnosticsConfig
    model: nn.Module
    quantized: dict[str, nn.Module]             # fqn -> QuantizedLinear (sim backend; others are unavailable)
    backend: str
    compiled: bool
    grad_clip: float
    run_dir: Any
    probe: Any                                  # probe.Probe (lazy eager replays on a private copy)
    optimizer: Any = None                       # the run's optimizer (the manifold group reads its measurements)


@dataclass
class StepContext:
    step: int
    x: torch.Tensor                             # (B, T) the step's batch
    y: torch.Tensor                             # (B, T)
    snap: dict[str, Any] | None                 # pre-step buffers + RNG (state.Snapshots.take: valid in its step)
    loss: float = math.nan                      # set for on_step
    grad_norm: float = math.nan                 # pre-clip total norm, set for on_step
    lr: float = math.nan
    cache: dict[str, Any] = field(default_factory=dict)   # shared between monitors within one step
    _rows: list[tuple[str, str, str, Any]] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)

    def emit(self, layer: str, role: str, metric: str, value: Any) -> None:
        self._rows.append((layer, role, metric, value))

    def emit_hist(self, layer: str, role: str, prefix: str, counts: torch.Tensor, labels: list) -> None:
        """A histogram as rows `<prefix>:<label>` holding fractions of the total; only non-empty bins are
        written (a missing bin is 0)."""
        self._rows.append((layer, role, prefix, _Hist(counts, [str(b) for b in labels])))

    def emit_many(self, keys: list[tuple[str, str, str]], values: torch.Tensor) -> None:
        """One row per (layer, role, metric) key from the matching entry of a 1-d tensor (a batched
        computation: one tensor instead of len(keys) 0-d ones, so materialize stays one cheap transfer)."""
        if len(keys) != values.numel():
            raise ValueError(f"emit_many: {len(keys)} keys for {values.numel()} values")
        self._rows.append(("", "", "", _Vec(values, list(keys))))

    def event(self, kind: str, layer: str, value: float, threshold: float) -> None:
        self.events.append((self.step, kind, layer, float(value), float(threshold)))

    def materialize(self) -> list[Row]:
        """All emitted values as Python floats, with one device->host transfer for all tensor values."""
        parts = []
        for *_, v in self._rows:
            if isinstance(v, _Hist):
                c = v.counts.detach().reshape(-1).to(torch.float64)
                parts.append(c / c.sum().clamp_min(1))
            elif isinstance(v, _Vec):
                parts.append(v.values.detach().reshape(-1).to(torch.float64))
            elif torch.is_tensor(v):
                parts.append(v.detach().reshape(1).to(torch.float64))
        host = torch.cat(_same_device(parts)).cpu().tolist() if parts else []
        out: list[Row] = []
        i = 0
        for layer, role, metric, v in self._rows:
            if isinstance(v, _Hist):
                n = len(v.labels)
                out += [(self.step, layer, role, f"{metric}:{b}", f) for b, f in zip(v.labels, host[i:i + n]) if f]
                i += n
            elif isinstance(v, _Vec):
                out += [(self.step, *k, f) for k, f in zip(v.keys, host[i:i + len(v.keys)])]
                i += len(v.keys)
            elif torch.is_tensor(v):
                out.append((self.step, layer, role, metric, host[i]))
                i += 1
            else:
                out.append((self.step, layer, role, metric, float(v)))
        self._rows.clear()
        return out


@dataclass
class _Hist:
    counts: torch.Tensor
    labels: list[str]


@dataclass
class _Vec:
    values: torch.Tensor
    keys: list[tuple[str, str, str]]


def _same_device(ts: list[torch.Tensor]) -> list[torch.Tensor]:
    # one transfer: concatenate on the (first) accelerator, then a single .cpu()
    dev = next((t.device for t in ts if t.device.type != "cpu"), None)
    return [torch.cat([t.to(dev) for t in ts])] if dev is not None else ts


class Monitor:
    """Base class: override what the group needs. `needs_pre_weights` asks Diagnostics to keep a copy of the
    weights from before optimizer.step() in ctx.cache["w_pre"] (only on due steps)."""

    needs_pre_weights = False
    replay_numerics = False      # needs ctx.cache["replay"]["health"] (probe.Probe.replay with backward)
    replay_activations = False   # needs ctx.cache["replay"]["kurtosis" | "attn_entropy" | "fired"]

    def __init__(self, att: Attached) -> None:
        self.att = att
        self.cfg = att.cfg

    def observe(self, step: int, loss: float, grad_norm: float, events: Callable[..., None]) -> None:
        """Every step, with the floats the loop already computed. events(kind, layer, value, threshold)."""

    def on_backward(self, ctx: StepContext) -> None:
        pass

    def on_step(self, ctx: StepContext) -> None:
        pass

    def on_rows(self, step: int, rows: list[Row], ctx: StepContext) -> None:
        pass

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass
