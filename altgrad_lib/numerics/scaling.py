"""Scaling for simulated low-precision casts: which multiplier `s` to apply before quantizing.

A quantized tensor is `Q(x * s) / s` where `Q` rounds onto a format grid (formats.py). This module only
decides `s`:

- ``none``      s = 1.
- ``current``   per-tensor, from this tensor's amax: s = fmt.max / amax / 2**margin.
- ``delayed``   per-tensor, TransformerEngine ``DelayedScaling`` semantics: the scale used at call t comes
                from the amax history of calls < t (reduced by "max" or "most_recent"), then this call's amax
                is recorded. First call (history empty): see ``ScalingConfig.delayed_init``.
                Where it differs from TE (defaults; "te_delayed" = TE's): history 16 (TE 1024); first scale
                from the first amax (TE: 1.0). Like TE, an amax of 0 (or non-finite) keeps the previous
                scale. TE updates once per optimizer step, we once per training forward call: the same
                thing without gradient accumulation. Evaluation (module.eval()) reads the state and never
                updates it (``Scaler.scale_peek``), as TE does not update outside training steps.
- ``per_row``   one scale per row (amax along the last dim), i.e. per output channel for a weight.

Block scaling (OCP MX, NVFP4) is not a kind here: it lives in block_scaling.py, one implementation that quantizes
along any axis (each GEMM's reduction dim, gemm_quant.py). The old kind "per_block" is a QuantSpec spelling of
MX FLOOR there (``scaling: per_block`` = ``scaling: mx``); ScalingConfig(kind="per_block") is refused.

``Scaler`` keeps the state (amax history, last scale, counters) in buffers so it checkpoints through
``state_dict`` and is free of host syncs (usable under torch.compile and on CUDA).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

import torch
from torch import Tensor, nn

from altgrad_lib.errors import check_choice, check_keys
from altgrad_lib.numerics.formats import get_format

SCALING_KINDS = ("none", "current", "delayed", "per_row")
DELAYED_REDUCE = ("max", "most_recent")
DELAYED_INIT = ("current", "one")

# Scales are clamped to [2**-126, 2**126]: keeps s and 1/s finite normal fp32 numbers (an all-zero tensor with
# amax_eps=1e-12 gives s ~ fmax * 1e12, far inside this range for 8-bit formats). Written as literals where used:
# torch.compile(dynamic=True) (numerics/kernels.py) lifts a float read from a module global to a graph input,
# and clamp's bounds then specialize it, which restarts dynamo's analysis of the whole kernel.


@dataclass(frozen=True)
class ScalingConfig:
    """How to compute the scale multiplier. See the module docstring for the semantics of each kind."""

    kind: str = "current"  # one of SCALING_KINDS
    history_len: int = 16  # delayed only (TE amax_history_len)
    reduce: str = "max"  # delayed: "max" | "most_recent" (TE amax_compute_algo)
    margin: int = 0  # scale = fmt.max / amax / 2**margin
    pow2: bool = False  # round the scale DOWN to a power of two (never causes overflow)
    # unused since block scaling moved to block_scaling.py; kept (and validated) so that recorded QuantSpec dicts
    # keep their keys
    block_size: int = 32
    amax_eps: float = 1e-12  # floor for amax; each time it fires, Scaler.eps_hits counts it
    # delayed, first call (empty history): "current" = bootstrap from this call's amax (like current scaling);
    # "one" = scale 1.0, which is what TE does (its scale buffer starts at 1).
    delayed_init: str = "current"

    def __post_init__(self) -> None:
        if self.kind not in SCALING_KINDS:
            hint = " (did you mean QuantSpec scaling 'mx'? 'per_block' is its spelling there)" \
                if self.kind == "per_block" else ""
            raise ValueError(f"kind={self.kind!r} is invalid; valid choices: {', '.join(map(repr, SCALING_KINDS))}; "
                             f"block scaling ('mx', alias 'per_block', and 'nvfp4') is a QuantSpec scaling of "
                             f"numerics/block_scaling.py{hint}")
        check_choice("reduce", self.reduce, DELAYED_REDUCE)
        check_choice("delayed_init", self.delayed_init, DELAYED_INIT)
        if not isinstance(self.history_len, int) or isinstance(self.history_len, bool) or self.history_len < 1:
            raise ValueError(f"history_len={self.history_len!r} is invalid; valid: an int >= 1")
        if not isinstance(self.block_size, int) or isinstance(self.block_size, bool) or self.block_size < 1:
            raise ValueError(f"block_size={self.block_size!r} is invalid; valid: an int >= 1 (MX uses 32)")
        if not isinstance(self.margin, int) or isinstance(self.margin, bool):
            raise ValueError(f"margin={self.margin!r} is invalid; valid: an int (power-of-two headroom)")
        if not isinstance(self.pow2, bool):
            raise ValueError(f"pow2={self.pow2!r} is invalid; valid choices: True, False")
        eps = self.amax_eps
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not (0.0 < eps < math.inf):
            raise ValueError(f"amax_eps={eps!r} is invalid; valid: a finite float > 0")

    def short_str(self) -> str:
        """Compact tag: "none", "cur", "dly16max-m0", "row" (+ "-p2" for pow2, "-m<k>" for margin)."""
        if self.kind == "none":
            return "none"
        if self.kind == "delayed":
            red = "max" if self.reduce == "max" else "rec"
            s = f"dly{self.history_len}{red}-m{self.margin}"
        else:
            s = {"current": "cur", "per_row": "row"}[self.kind]
            if self.margin:
                s += f"-m{self.margin}"
        if self.pow2:
            s += "-p2"
        return s

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def te_delayed(cls) -> ScalingConfig:
        """TransformerEngine's DelayedScaling defaults (also the string "te_delayed"): history 1024, max,
        initial scale 1. Our "delayed" default differs on purpose: history 16 (a short CPU run would
        otherwise scale by a max over its whole life) and a first scale bootstrapped from the first amax
        instead of 1 (TE's 1 overflows E4M3 on the first step when |x| > 448)."""
        return cls(kind="delayed", history_len=1024, reduce="max", delayed_init="one")

    @classmethod
    def from_dict(cls, d: dict | str | ScalingConfig) -> ScalingConfig:
        """From a YAML dict ({"kind": "delayed", "history_len": 16}), a bare kind string, or a config."""
        if isinstance(d, ScalingConfig):
            return d
        if isinstance(d, str):
            return cls.te_delayed() if d == "te_delayed" else cls(kind=d)
        if not isinstance(d, dict):
            raise TypeError(f"scaling config must be a dict, str or ScalingConfig, got {type(d).__name__}")
        check_keys(cls, d, "ScalingConfig")
        if d.get("kind") == "te_delayed":     # {"kind": "te_delayed", "margin": 1}: TE's defaults, then the rest
            return replace(cls.te_delayed(), **{k: v for k, v in d.items() if k != "kind"})
        return cls(**d)


# ----------------------------------------------------------------------------------------------------------
# Stateless pieces (shared by Scaler and by fake_quant without a Scaler)


def pow2_floor(t: Tensor) -> Tensor:
    """Largest power of two <= t, exact, for positive normal fp32 t (keeps only the exponent bits)."""
    t = t.to(torch.float32)
    return (t.view(torch.int32) & 0x7F800000).view(torch.float32)


def amax_per_tensor(x: Tensor) -> Tensor:
    return x.detach().abs().amax().to(torch.float32)  # ()


def amax_per_row(x: Tensor) -> Tensor:
    x = x.detach()
    if x.dim() == 0:
        return x.abs().to(torch.float32)
    return x.abs().amax(dim=-1, keepdim=True).to(torch.float32)  # (..., 1)


def floor_amax(amax: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """Apply the amax epsilon floor; returns (floored amax, number of elements where the floor fired)."""
    hit = amax < eps  # NaN amax is not a hit: NaNs propagate honestly
    return torch.where(hit, torch.full_like(amax, eps), amax), hit.sum()


def scale_from_amax(amax: Tensor, fmt, config: ScalingConfig) -> Tensor:
    """s = fmt.max / amax / 2**margin (optionally rounded down to pow2), clamped to [2**-126, 2**126].

    `amax` must already be floored (see floor_amax).
    """
    s = fmt.kernel.max / amax              # kernel.max, not fmt.max: stays constant under torch.compile
    # fp32 division may round up so that amax*s lands just above fmt.max: it would count as saturated and
    # the clipped STE would drop the gradient of the largest element. Step one ulp down in that case
    # (checked in fp64, so any later fp32/fp64 product rounds to <= fmt.max).
    over = amax.double() * s.double() > fmt.kernel.max
    s = torch.where(over, torch.nextafter(s, torch.zeros_like(s)), s)
    if config.margin:
        s = s * (2.0 ** -config.margin)
    s = torch.clamp(s, min=2.0**-126, max=2.0**126)   # also maps +inf (amax=0 without floor) to a finite scale
    if config.pow2:
        s = pow2_floor(s)  # round DOWN: x*s never exceeds what the unrounded scale allowed
    return s


def compact_scale(x: Tensor, fmt, config: ScalingConfig) -> tuple[Tensor, Tensor, Tensor]:
    """(s in compact shape: () / (..., 1), raw amax in the same shape, eps hits) for the stateless kinds. One
    pass over x (the amax); everything after is on the small amax tensor."""
    amax = amax_per_tensor(x) if config.kind == "current" else amax_per_row(x)
    amax_f, hits = floor_amax(amax, config.amax_eps)
    return scale_from_amax(amax_f, fmt, config), amax, hits


def stateless_scale(x: Tensor, fmt, config: ScalingConfig) -> tuple[Tensor, Tensor]:
    """Scale for current / per_row / none without state: returns (s broadcastable to x, eps_hits)."""
    if config.kind == "none":
        return torch.ones((), dtype=torch.float32, device=x.device), torch.zeros((), dtype=torch.int64, device=x.device)
    if config.kind == "delayed":
        raise ValueError(
            "scaling kind 'delayed' needs state (an amax history): pass a Scaler (or use a Quantizer); "
            "stateless kinds: 'none', 'current', 'per_row'"
        )
    with torch.no_grad():
        s, _, hits = compact_scale(x, fmt, config)
    return s, hits


def push_amax(history: Tensor, amax: Tensor) -> None:
    """history[0] = amax, the newest; the rest rolls one place so the oldest entry falls off the end."""
    if history.numel() > 1:
        history.copy_(torch.roll(history, 1, 0))
    history[0] = amax


def record_into(history: Tensor, scale: Tensor, eps_hits: Tensor, n_updates: Tensor, s: Tensor,
                amax: Tensor | None, hits: Tensor | None) -> None:
    """Scaler.record's update of a stateless kind, in place on the Scaler's buffers (kernels.py's compiled kernels
    trace it with the buffers as their inputs: one kernel instead of ~5 small ops a call)."""
    if amax is not None:
        eps_hits.add_(hits)
        push_amax(history, amax.amax() if amax.dim() else amax)
        scale.copy_(s.amin() if s.dim() else s)
    n_updates.add_(1)   # in place, never `+=`: see Quantizer._count


def delayed_scale(x: Tensor, fmt, cfg: ScalingConfig, history: Tensor, scale: Tensor, eps_hits: Tensor,
                  n_updates: Tensor, update: bool) -> Tensor:
    """Delayed scaling's s for x from a Scaler's buffers (scale_for with update: the buffers updated in place;
    scale_peek without). Module level so kernels.py's compiled kernels trace it with the buffers as inputs."""
    amax_now = amax_per_tensor(x)
    # Scale from the history of *previous* calls (TE: computed after the previous step, used in this one).
    if cfg.reduce == "max":
        amax_hist = history.amax()
    else:
        amax_hist = history[0]
    prev = scale
    hit = amax_hist < cfg.amax_eps
    s_hist = scale_from_amax(torch.clamp(amax_hist, min=cfg.amax_eps), fmt, cfg)
    # TE keeps the previous scale when the reduced amax is 0 or non-finite.
    keep = hit | ~torch.isfinite(amax_hist)
    s_hist = torch.where(keep, prev, s_hist)
    first = n_updates == 0
    if cfg.delayed_init == "current":
        amax_f, hit_now = floor_amax(amax_now, cfg.amax_eps)
        s_first = scale_from_amax(amax_f, fmt, cfg)
    else:
        s_first = torch.ones_like(s_hist)  # TE's initial scale
        hit_now = torch.zeros_like(eps_hits)
    s = torch.where(first, s_first, s_hist)
    if update:
        eps_hits.add_(torch.where(first, hit_now, hit.to(torch.int64)))
        scale.copy_(s)
        push_amax(history, amax_now)
        n_updates.add_(1)   # in place, never `+=`: see Quantizer._count
    return s


# ----------------------------------------------------------------------------------------------------------


class Scaler(nn.Module):
    """Stateful scale computation; all state in buffers (checkpointable, no host syncs).

    Buffers:
      amax_history (history_len,) fp32: [0] = most recent amax (per-tensor; for per_row the max over rows);
                   delayed reduces over it, other kinds keep only the most recent (len 1).
      scale        () fp32: last per-tensor scale used (per_row: the smallest row scale).
      eps_hits     () int64: how many amaxes (tensor or row) hit the amax_eps floor
                   (delayed: how often the reduced history amax was < eps, so the previous scale was kept).
      n_updates    () int64: number of scale_for calls.
    """

    def __init__(self, config: ScalingConfig, fmt) -> None:
        super().__init__()
        self.config = config
        self.fmt = get_format(fmt)
        hist = config.history_len if config.kind == "delayed" else 1
        self.register_buffer("amax_history", torch.zeros(hist, dtype=torch.float32))
        self.register_buffer("scale", torch.ones((), dtype=torch.float32))
        self.register_buffer("eps_hits", torch.zeros((), dtype=torch.int64))
        self.register_buffer("n_updates", torch.zeros((), dtype=torch.int64))

    def extra_repr(self) -> str:
        return f"{self.config.short_str()}, fmt={self.fmt.short_str()}"

    def reset(self) -> None:
        """Forget history and counters (e.g. when the tensor's role changes)."""
        self.amax_history.zero_()
        self.scale.fill_(1.0)
        self.eps_hits.zero_()
        self.n_updates.zero_()

    @torch.no_grad()
    def scale_for(self, x: Tensor) -> Tensor:
        """Multiplier s broadcastable to x (quantized value = Q(x*s)/s); updates history and counters."""
        cfg = self.config
        if cfg.kind == "delayed":
            return delayed_scale(x, self.fmt, cfg, self.amax_history, self.scale, self.eps_hits, self.n_updates, True)
        if cfg.kind == "none":
            s, amax, hits = torch.ones((), dtype=torch.float32, device=x.device), None, None
        else:
            s, amax, hits = compact_scale(x, self.fmt, cfg)
        self.record(s, amax, hits)
        return s

    @torch.no_grad()
    def record(self, s: Tensor, amax: Tensor | None, hits: Tensor | None) -> None:
        """The state update of scale_for for a stateless kind (current / per_row; none: amax None) whose
        (s, amax, eps hits) of compact_scale were computed elsewhere (kernels.py's compiled kernels)."""
        record_into(self.amax_history, self.scale, self.eps_hits, self.n_updates, s, amax, hits)

    @torch.no_grad()
    def scale_peek(self, x: Tensor) -> Tensor:
        """The scale for x *without updating any state* (history, scale, counters): for evaluation.

        Delayed: the scale the next training call would take from the history (bootstrap rule before the
        first call); the stateless kinds are computed from x as usual. So evaluating never changes what
        training does next, whatever eval_interval is.
        """
        cfg = self.config
        if cfg.kind == "delayed":
            return delayed_scale(x, self.fmt, cfg, self.amax_history, self.scale, self.eps_hits, self.n_updates,
                                 False)
        s, _ = stateless_scale(x, self.fmt, cfg)
        return s
