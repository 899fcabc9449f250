"""Weights: compact log2-magnitude histograms, fraction at ±max, staleness, KL to a baseline run.

Rows (layer = module fqn of every matrix parameter, role "W"):
    hist.log2w:<k>     fraction of weights with floor(log2|w|) = k (k clamped to [hist_min_log2, hist_max_log2];
                       only non-empty bins are written; exact zeros are counted in zero_frac instead)
    zero_frac          fraction of exact zeros
    frac_at_max        quantized weights only: fraction whose grid point is ±fmt.max (|Q(w·s)| = max)
    staleness          quantized weights only: fraction whose code is unchanged since the previous diagnostic
                       step of this group (no row at the first one)
    kl_log2w_bits      when DiagnosticsConfig.baseline_run is set and that run's diagnostics.csv has the same
                       layer at the same step: KL(p ‖ q) in bits between this run's log2|w| histogram p and
                       the baseline's q, with q smoothed as (q + 1e-6) / (1 + 1e-6·bins)
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from altgrad_lib.monitors.base import Monitor, Row, StepContext
from altgrad_lib.numerics.grid_metrics import codes, log2_hist
from altgrad_lib.monitors.geometry import weight_points
from altgrad_lib.monitors.writer import read_diagnostics

KL_EPS = 1e-6


def kl_bits(p: dict[str, float], q: dict[str, float], n_bins: int) -> float:
    """KL(p ‖ q) in bits over histogram bins (dicts bin -> fraction; missing = 0), q smoothed by KL_EPS."""
    total = 0.0
    for b, pb in p.items():
        if pb > 0:
            qb = (q.get(b, 0.0) + KL_EPS) / (1 + KL_EPS * n_bins)
            total += pb * math.log2(pb / qb)
    return total


class WeightsMonitor(Monitor):
    def __init__(self, att) -> None:
        super().__init__(att)
        self.prev_codes: dict[str, torch.Tensor] = {}
        self.baseline = self._load_baseline(att.cfg.baseline_run)

    @staticmethod
    def _load_baseline(run: str) -> dict[tuple[int, str], dict[str, float]]:
        if not run:
            return {}
        if not (Path(run) / "diagnostics.csv").exists():
            raise FileNotFoundError(f"DiagnosticsConfig.baseline_run={run!r} has no diagnostics.csv; run it with "
                                    f"the weights group on, or leave baseline_run empty")
        df = read_diagnostics(run)
        df = df[df["metric"].str.startswith("hist.log2w:")]
        out: dict[tuple[int, str], dict[str, float]] = {}
        for (step, layer), g in df.groupby(["step", "layer"]):
            out[(int(step), layer)] = dict(zip(g["metric"], g["value"]))
        return out

    def on_step(self, ctx: StepContext) -> None:
        lo, hi = self.cfg.hist_min_log2, self.cfg.hist_max_log2
        for name, p in self.att.model.named_parameters():
            if p.dim() < 2:
                continue
            layer = name.rpartition(".")[0]
            w = p.detach()
            ctx.emit_hist(layer, "W", "hist.log2w", log2_hist(w.abs(), lo, hi), list(range(lo, hi + 1)))
            ctx.emit(layer, "W", "zero_frac", (w == 0).double().mean())
        done = ctx.cache.get("codes_post", {})
        for fqn, q, w in weight_points(self.att):
            s = q.scale_of(w)
            ctx.emit(fqn, "W", "frac_at_max", (q.spec.fmt.quantize(w.detach().float() * s).abs() == q.spec.fmt.max)
                     .double().mean())
            c = done[fqn] if fqn in done else codes(w, q.spec.fmt, s)
            if fqn in self.prev_codes:
                ctx.emit(fqn, "W", "staleness", (self.prev_codes[fqn].to(c.device) == c).double().mean())
            self.prev_codes[fqn] = c.clone()

    def on_rows(self, step: int, rows: list[Row], ctx: StepContext) -> None:
        if not self.baseline:
            return
        n_bins = self.cfg.hist_max_log2 - self.cfg.hist_min_log2 + 1
        mine: dict[str, dict[str, float]] = {}
        for _, layer, _, metric, v in rows:
            if metric.startswith("hist.log2w:"):
                mine.setdefault(layer, {})[metric] = v
        for layer, p in mine.items():
            q = self.baseline.get((step, layer))
            if q is not None:
                ctx.emit(layer, "W", "kl_log2w_bits", kl_bits(p, q, n_bins))

    def state_dict(self) -> dict[str, Any]:
        return {"prev_codes": {k: v.cpu() for k, v in self.prev_codes.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.prev_codes = dict(state.get("prev_codes", {}))
