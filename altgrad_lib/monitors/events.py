"""Divergence early warning: events written to events.csv (step, kind, layer, value, threshold).

Every step (from the loss and total gradient norm the loop already has as Python floats, so no sync):
    loss_spike / grad_norm_spike   value > EMA + spike_sigma·EMA-std (EMA weight 0.1, after 10 steps)
    loss_nonfinite                 loss is NaN or ±inf (threshold NaN)
At diagnostic steps, from the activations group's rows:
    kurtosis_alarm                 excess kurtosis of a Linear input > kurtosis_alarm
    kurtosis_trend                 kurtosis > kurtosis_trend × its mean over the last `window` diagnostic steps
    attn_entropy_drop              a head's entropy < entropy_drop × its window mean (layer "<fqn>/head<i>")
Other monitors add "unavailable:<what>" notes when a number cannot be measured in this run (e.g. dY
counters under torch.compile). Thresholds are settings, reported with each event, never tuned to a run.
"""
from __future__ import annotations

import math
from typing import Any, Callable

from altgrad_lib.monitors.base import Monitor, Row, StepContext

EMA_ALPHA = 0.1
WARMUP = 10
MIN_HISTORY = 3


class EventsMonitor(Monitor):
    def __init__(self, att) -> None:
        super().__init__(att)
        self.ema: dict[str, list[float]] = {}          # name -> [n, mean, var]
        self.hist: dict[str, list[float]] = {}         # "kurtosis|<layer>" / "entropy|<layer>/<head>" -> window

    def _spike(self, name: str, v: float, emit: Callable[..., None]) -> None:
        n, mean, var = self.ema.get(name, [0, 0.0, 0.0])
        if n >= WARMUP:
            thr = mean + self.cfg.spike_sigma * math.sqrt(var)
            if v > thr:
                emit(f"{name}_spike", "", v, thr)
        if n == 0:
            mean, var = v, 0.0
        else:
            d = v - mean
            mean += EMA_ALPHA * d
            var = (1 - EMA_ALPHA) * (var + EMA_ALPHA * d * d)
        self.ema[name] = [n + 1, mean, var]

    def observe(self, step: int, loss: float, grad_norm: float, events: Callable[..., None]) -> None:
        if not math.isfinite(loss):
            events("loss_nonfinite", "", loss, math.nan)
            return
        self._spike("loss", loss, events)
        if math.isfinite(grad_norm):
            self._spike("grad_norm", grad_norm, events)

    def _trend(self, key: str, v: float) -> float | None:
        """Mean of the window before this value (None until MIN_HISTORY values), then append v."""
        win = self.hist.setdefault(key, [])
        mean = sum(win) / len(win) if len(win) >= MIN_HISTORY else None
        win.append(v)
        del win[:-self.cfg.window]
        return mean

    def on_rows(self, step: int, rows: list[Row], ctx: StepContext) -> None:
        for _, layer, role, metric, v in rows:
            if not math.isfinite(v):
                continue
            if metric == "kurtosis":
                if v > self.cfg.kurtosis_alarm:
                    ctx.event("kurtosis_alarm", layer, v, self.cfg.kurtosis_alarm)
                mean = self._trend(f"kurtosis|{layer}", v)
                if mean is not None and mean > 0 and v > self.cfg.kurtosis_trend * mean:
                    ctx.event("kurtosis_trend", layer, v, self.cfg.kurtosis_trend * mean)
            elif metric == "attn_entropy":
                mean = self._trend(f"entropy|{layer}/{role}", v)
                if mean is not None and v < self.cfg.entropy_drop * mean:
                    ctx.event("attn_entropy_drop", f"{layer}/{role}", v, self.cfg.entropy_drop * mean)

    def state_dict(self) -> dict[str, Any]:
        return {"ema": {k: list(v) for k, v in self.ema.items()}, "hist": {k: list(v) for k, v in self.hist.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.ema = {k: list(v) for k, v in state.get("ema", {}).items()}
        self.hist = {k: list(v) for k, v in state.get("hist", {}).items()}
