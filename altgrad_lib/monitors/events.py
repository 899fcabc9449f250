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

Reading the events back as early warnings (`first_alarms`, `warning_outcome`; bench/early_warning.py):
    ALARMS groups event kinds into alarm families — "kurtosis" (kurtosis_alarm or kurtosis_trend, any Linear),
    "attn_entropy" (attn_entropy_drop, any head), "grad_norm" (grad_norm_spike) — and a run's alarm is the first
    step any kind of its family fired. Against the step of the failure event (e.g. envelope.first_spike: loss
    non-finite or doubled) the outcome is the lead in steps (alarm strictly before the event), "missed" (no
    alarm before it: none at all, or only at / after the event), "false" (an alarm but no event) or "none".
    The default thresholds (DiagnosticsConfig) are used unchanged, not fitted to any early-warning run; why
    they are reasonable a priori: kurtosis 50 (a Gaussian has excess kurtosis 0, a Laplace 3; 50 means a few
    outlier features dominate the fourth moment, the regime FOG / Fishman et al. flag), trend 2× and entropy 0.5×
    the mean of the last `window` diagnostic steps (a halving / doubling within a few intervals, far outside
    step-to-step noise), spike 6 EMA-std (a one-in-~10^9 excursion for Gaussian noise). Measured lead times,
    misses and false alarms: bench/results/early_warning.md (the kurtosis trend on *excess* kurtosis, whose
    baseline is near 0, turned out to be a low bar there).
"""
from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Mapping

from altgrad_lib.monitors.base import Monitor, Row, StepContext

EMA_ALPHA = 0.1
WARMUP = 10
MIN_HISTORY = 3
ALARMS: dict[str, tuple[str, ...]] = {     # alarm family -> the event kinds that raise it
    "kurtosis": ("kurtosis_alarm", "kurtosis_trend"),
    "attn_entropy": ("attn_entropy_drop",),
    "grad_norm": ("grad_norm_spike",),
}


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


def first_alarms(events: Any, families: Mapping[str, Iterable[str]] = ALARMS) -> dict[str, int | None]:
    """Family -> first step any of its event kinds fired (None: never). `events` is read_events(run_dir)
    (columns step, kind) or any iterable of (step, kind, ...) tuples."""
    pairs = zip(events["step"], events["kind"]) if hasattr(events, "columns") else ((e[0], e[1]) for e in events)
    kind_to_family = {k: f for f, kinds in families.items() for k in kinds}
    first: dict[str, int | None] = {f: None for f in families}
    for step, kind in pairs:
        f = kind_to_family.get(kind)
        if f is not None and (first[f] is None or int(step) < first[f]):
            first[f] = int(step)
    return first


def warning_outcome(event: int | None, alarm: int | None) -> int | str:
    """The alarm's lead over the failure event in steps (int > 0), or "missed" (event without an alarm strictly
    before it), "false" (alarm, no event) or "none" (neither)."""
    if event is None:
        return "false" if alarm is not None else "none"
    return "missed" if alarm is None or alarm >= event else int(event - alarm)
