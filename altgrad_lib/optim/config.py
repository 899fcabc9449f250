"""`OptimConfig`: TrainConfig's `optimizer` + `optim:` section, validated (torch-free, so TrainConfig stays cheap).

    optimizer: grid_adamw          # OPTIMIZERS
    optim: {lr: 1.0, storage: grid_sr, state_m: E4M3, state_v: E5M2}

`optimizer: adamw` with an empty `optim` is torch.optim.AdamW (the default, unchanged path); any `optim` key
selects this package's AdamW.  Keys (each optimizer accepts the shared ones plus its own, see OWN_KEYS):
  lr            peak LR in the optimizer's own units, following TrainConfig's warmup + cosine shape;
                None = TrainConfig.lr (adamw, stiffness_adamw, grid_sgd), 1.0 ULP (grid_adamw), 0.01 (madam)
  storage       storage.STORAGE_MODES: fp32 (master weight; the forward fake-quantizes it) | grid_rne | grid_sr | kahan
                | error_feedback (ECO: RNE, residual into m; Adam family with fp32 m only, optim/error_feedback.py)
                | error_feedback_sr (the same with stochastic rounding, as ECO's main results)
  weight_fmt    the weights' grid; None = the recipe's weight format on the layers the recipe quantizes; any
                8-bit-or-less format name, E2M1 (4 bits), or bf16 / E8M7 and fp16 / E5M10 (formats_wide.py)
  grid_headroom binades left above a tensor's first amax (grid.py); kahan_dtype bf16 | fp32; sr_bits
                (grid_sr / error_feedback_sr: random bits per rounding, 1..62; None = full fp32 precision)
  state_m / state_v  low-precision Adam moments: a format name (v also "UE<x>M<y>", unsigned), with state_block,
                state_rounding, state_min_numel, state_m_transform / state_v_transform (none | sqrt | expand;
                optim/state_codec.py), state_scale (pow2 | amax: the block scale, optim/lowp_state.py)
  track_stats   stall rate / Δcode metrics (optim/*): True every step, N every N-th step (from the first);
                (with update_visibility = PULSE's 1 - S1 and osc_ratio, optim/stats.py); compile: torch.compile
  osc_window    measured steps per oscillation-ratio window (TetraJet-v2's sum|ΔQ| / sum|Δw|; default 50)
  osc_reset     TetraJet-v2's oscillation reset (optim/osc_reset.py; default False): every osc_reset_period steps
                (default 200) from step osc_reset_start (default 0) it measures each element's sum|ΔQ| / sum|Δw| over
                osc_reset_window steps (default 50) and moves the latent weight of those >= osc_reset_threshold
                (default 8) to its grid value; needs storage fp32 or kahan (a latent weight below the grid)
muon / manifold_muon (optim/muon.py): lr is the Muon matrices' peak lr (default 0.02), adam_lr the AdamW groups'
                (embeddings, lm_head, gains, biases; default TrainConfig.lr); momentum (default 0.95), nesterov,
                ns_steps (>= 1), ns_fmt (the NS GEMM's format or recipe; None = FP32), ns_accum (its accumulator),
                adjust_lr (MUON_ADJUST_LR); state_m stores the Muon momentum as it stores Adam's m.  manifold_muon:
                dual_steps, dual_alpha, dual_tol, msign (polar | ns), msign_steps; storage fp32 only
  constraint    none | hypersphere | stiefel (optim/constraints.py): a retraction after each step of any optimizer;
                constrain: parameter-name patterns (default: every block Linear weight); storage fp32 only
Weight decay is TrainConfig.weight_decay on matrices; for optimizers whose lr is not in weight units
(grid_adamw's format groups, madam) it is converted so the per-step decay at the peak LR equals AdamW's.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from altgrad_lib.errors import check_choice
from altgrad_lib.choices import (CONSTRAINTS, EF_MODES, MASTER_MODES, MSIGN_METHODS, MUON_ADJUST_LR, OPTIMIZERS,
                                 SR_BITS_MAX, SR_MODES, STATE_SCALES, STATE_TRANSFORMS, STIFFNESS_KINDS, STORAGE_MODES,
                                 ULP_MODES)

ROUNDINGS = ("nearest", "stochastic")
SHARED_KEYS = ("lr", "storage", "weight_fmt", "grid_headroom", "kahan_dtype", "sr_bits", "track_stats", "compile",
               "osc_window", "osc_reset", "osc_reset_period", "osc_reset_window", "osc_reset_threshold",
               "osc_reset_start", "constraint", "constrain")
_ADAM = ("eps", "state_m", "state_v", "state_block", "state_rounding", "state_min_numel", "state_m_transform",
         "state_v_transform", "state_scale")
_MUON = ("momentum", "nesterov", "ns_steps", "ns_fmt", "ns_accum", "adjust_lr", "adam_lr")
OWN_KEYS = {
    "adamw": _ADAM,
    "stiffness_adamw": _ADAM + ("stiffness", "damping"),
    "grid_adamw": _ADAM + ("stiffness", "damping", "ulp_mode", "clip_ulp"),
    "madam": ("beta2", "p_scale", "g_bound"),
    "grid_sgd": ("momentum", "stiffness", "damping", "ulp_mode"),
    "muon": _ADAM + _MUON,
    "manifold_muon": _ADAM + _MUON + ("dual_steps", "dual_alpha", "dual_tol", "msign", "msign_steps"),
}
DEFAULT_LR = {"grid_adamw": 1.0, "madam": 0.01, "muon": 0.02, "manifold_muon": 0.02}
MUON_MOMENTUM = 0.95      # optim.momentum of muon / manifold_muon when not set (torch.optim.Muon's default)
RUN_FIELDS = ("train_lr", "weight_decay", "betas", "seed", "recipe")   # OptimConfig fields TrainConfig fills in
_EF_OPTIMIZERS = ("adamw", "stiffness_adamw", "grid_adamw")     # those with a first moment to hold the residual


def on_grid(storage: str) -> bool:
    """The stored weight itself stays on its format's grid (every storage mode but fp32; optim/storage.py)."""
    return storage != "fp32"


def check_schedule(period: Any, window: Any, threshold: Any, start: Any,
                   name: Callable[[str], str] = lambda k: f"osc_reset {k}") -> None:
    """One-line errors for a bad oscillation-reset schedule (optim/osc_reset.py); `name` spells a setting as its
    caller's user writes it."""
    for key, v, lo in (("period", period, 2), ("window", window, 1), ("start", start, 0)):
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise ValueError(f"{name(key)}={v!r} is invalid; valid: an int >= {lo} (steps)")
    if window >= period:
        raise ValueError(f"{name('window')}={window!r} must be < {name('period')}={period!r} "
                         f"(one measured window per period)")
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not threshold > 0:
        raise ValueError(f"{name('threshold')}={threshold!r} is invalid; valid: a number > 0")


@dataclass(frozen=True)
class OptimConfig:
    name: str = "adamw"
    lr: float | None = None
    storage: str = "fp32"
    weight_fmt: str | None = None
    grid_headroom: int = 1
    kahan_dtype: str = "bf16"
    sr_bits: int | None = None
    track_stats: bool | int = False
    compile: bool = False
    osc_window: int = 50
    osc_reset: bool = False
    osc_reset_period: int = 200       # TetraJet-v2's configs: period 200, window 50, threshold 8
    osc_reset_window: int = 50
    osc_reset_threshold: float = 8.0
    osc_reset_start: int = 0
    eps: float = 1e-8
    state_m: str | None = None
    state_v: str | None = None
    state_block: int = 256
    state_rounding: str = "nearest"
    state_min_numel: int = 4096
    state_m_transform: str = "none"
    state_v_transform: str = "none"
    state_scale: str = "pow2"
    stiffness: str = "ulp"
    damping: float = 0.0
    ulp_mode: str = "step"
    clip_ulp: float | None = None
    beta2: float = 0.999
    p_scale: float = 3.0
    g_bound: float = 10.0
    momentum: float = 0.0             # grid_sgd's; muon / manifold_muon: MUON_MOMENTUM when not set
    nesterov: bool = True
    ns_steps: int = 5
    ns_fmt: str | None = None
    ns_accum: Any = None
    adjust_lr: str = "original"
    adam_lr: float | None = None
    dual_steps: int = 100            # the published dual-ascent defaults: 100 steps, alpha 0.01, tol 1e-6
    dual_alpha: float = 0.01
    dual_tol: float = 1e-6
    msign: str = "polar"
    msign_steps: int = 20
    constraint: str = "none"
    constrain: tuple | None = None
    explicit: tuple = field(default=(), compare=False)     # the keys the user set
    # what the run supplies (TrainConfig's lr, weight_decay, beta1/beta2, seed, recipe): no `optim:` key sets them
    train_lr: float = 1e-3            # the schedule's peak LR; each group's lr_mult is relative to it
    weight_decay: float = 0.1         # on matrices (converted for optimizers whose lr is not in weight units)
    betas: tuple[float, float] = (0.9, 0.95)
    seed: int = 0                     # the SR generator's seed is this + factory.SR_SEED_OFFSET
    recipe: str = field(default="", compare=False)          # the recipe's name, for messages

    def __post_init__(self) -> None:
        for name, value, choices in (("optimizer", self.name, OPTIMIZERS),
                                     ("optim.storage", self.storage, STORAGE_MODES),
                                     ("optim.kahan_dtype", self.kahan_dtype, ("bf16", "fp32")),
                                     ("optim.stiffness", self.stiffness, STIFFNESS_KINDS),
                                     ("optim.ulp_mode", self.ulp_mode, ULP_MODES),
                                     ("optim.state_rounding", self.state_rounding, ROUNDINGS),
                                     ("optim.state_m_transform", self.state_m_transform, STATE_TRANSFORMS),
                                     ("optim.state_v_transform", self.state_v_transform, STATE_TRANSFORMS),
                                     ("optim.state_scale", self.state_scale, STATE_SCALES),
                                     ("optim.adjust_lr", self.adjust_lr, MUON_ADJUST_LR),
                                     ("optim.msign", self.msign, MSIGN_METHODS),
                                     ("optim.constraint", self.constraint, CONSTRAINTS)):
            check_choice(name, value, choices)
        self._check_muon()
        for name in ("lr", "clip_ulp"):
            v = getattr(self, name)
            if v is not None and not (isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0):
                raise ValueError(f"optim.{name}={v!r} is invalid; valid: None or a number > 0")
        for name in ("eps", "damping", "momentum"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                raise ValueError(f"optim.{name}={v!r} is invalid; valid: a number >= 0")
        if isinstance(self.osc_window, bool) or not isinstance(self.osc_window, int) or self.osc_window < 1:
            raise ValueError(f"optim.osc_window={self.osc_window!r} is invalid; valid: an int >= 1 (steps)")
        self._check_osc_reset()
        for name in ("grid_headroom", "state_block", "state_min_numel"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"optim.{name}={v!r} is invalid; valid: an int >= 0")
        for name in ("weight_fmt", "state_m", "state_v"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, str) or not v):
                raise ValueError(f"optim.{name}={v!r} is invalid; valid: None or a format name such as 'E4M3'")
        if self.storage in EF_MODES and (self.name not in _EF_OPTIMIZERS or self.state_m is not None):
            raise ValueError(f"optim.storage={self.storage!r} needs optimizer in {_EF_OPTIMIZERS} (got {self.name!r}) "
                             f"and optim.state_m=None (got {self.state_m!r}): the residual is kept in an fp32 m")
        if self.sr_bits is not None:
            v = self.sr_bits
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= SR_BITS_MAX:
                raise ValueError(f"optim.sr_bits={v!r} is invalid; valid: None (full precision) or an int in "
                                 f"[1, {SR_BITS_MAX}] (random bits of stochastic rounding)")
            if self.storage not in SR_MODES:
                raise ValueError(f"optim.sr_bits={v!r} only applies to optim.storage in {SR_MODES} (got "
                                 f"{self.storage!r}); remove it or use a stochastic storage")
        if not isinstance(self.compile, bool):
            raise ValueError(f"optim.compile={self.compile!r} is invalid; valid choices: True, False")
        if not isinstance(self.track_stats, (bool, int)) or self.track_stats < 0:
            raise ValueError(f"optim.track_stats={self.track_stats!r} is invalid; valid: True, False, or N >= 1 "
                             f"(measure every N-th step)")
        if not 0 <= self.beta2 < 1 or not 0 <= self.momentum < 1:
            raise ValueError(f"optim.beta2={self.beta2!r} and optim.momentum={self.momentum!r} must be in [0, 1)")

    def _check_muon(self) -> None:
        for name in ("ns_steps", "dual_steps", "msign_steps"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"optim.{name}={v!r} is invalid; valid: an int >= 1 (iterations)")
        for name in ("adam_lr", "dual_alpha", "dual_tol"):
            v = getattr(self, name)
            if (v is not None or name != "adam_lr") and (isinstance(v, bool) or not isinstance(v, (int, float))
                                                         or not v > 0):
                raise ValueError(f"optim.{name}={v!r} is invalid; valid: a number > 0")
        if not isinstance(self.nesterov, bool):
            raise ValueError(f"optim.nesterov={self.nesterov!r} is invalid; valid choices: True, False")
        if self.ns_fmt is not None and (not isinstance(self.ns_fmt, str) or not self.ns_fmt):
            raise ValueError(f"optim.ns_fmt={self.ns_fmt!r} is invalid; valid: None (FP32), a format name or a recipe")
        if self.ns_accum is not None and self.ns_fmt is None:
            raise ValueError(f"optim.ns_accum={self.ns_accum!r} needs optim.ns_fmt (the NS GEMM it accumulates); "
                             f"set ns_fmt, e.g. 'E4M3', or remove ns_accum")
        if self.constrain is not None:
            pats = [self.constrain] if isinstance(self.constrain, str) else self.constrain
            if not isinstance(pats, (list, tuple)) or not pats or not all(isinstance(x, str) and x for x in pats):
                raise ValueError(f"optim.constrain={self.constrain!r} is invalid; valid: None (every block Linear "
                                 f"weight) or a list of parameter-name patterns")
            object.__setattr__(self, "constrain", tuple(pats))
            if self.constraint == "none" and self.name != "manifold_muon":
                raise ValueError(f"optim.constrain={list(pats)!r} is set but optim.constraint is 'none'; set "
                                 f"constraint {CONSTRAINTS[1:]} or remove constrain")
        if self.name == "manifold_muon" and self.constraint not in ("none", "stiefel"):
            raise ValueError(f"optim.constraint={self.constraint!r} with optimizer 'manifold_muon': its matrices live "
                             f"on the Stiefel manifold; valid: 'stiefel' (or leave it unset), or another optimizer "
                             f"for {self.constraint!r}")
        if self.name == "manifold_muon" and self.constrain is not None:
            raise ValueError(f"optim.constrain={list(self.constrain)!r} with optimizer 'manifold_muon': it constrains "
                             f"exactly its Muon matrices (every block Linear weight); remove constrain")
        if (self.constraint != "none" or self.name == "manifold_muon") and self.on_grid:
            raise ValueError(f"optim.storage={self.storage!r} with a manifold constraint ({self.name}, constraint "
                             f"{self.constraint!r}): the retraction after a grid step moves the stored weights off "
                             f"its format's grid (measured: bench/results/manifold_grid.md; retract-then-round is not "
                             f"implemented); valid: storage 'fp32' (the recipe still quantizes the forward)")

    def _check_osc_reset(self) -> None:
        if not isinstance(self.osc_reset, bool):
            raise ValueError(f"optim.osc_reset={self.osc_reset!r} is invalid; valid choices: True, False")
        check_schedule(self.osc_reset_period, self.osc_reset_window, self.osc_reset_threshold, self.osc_reset_start,
                       name=lambda k: f"optim.osc_reset_{k}")
        if self.osc_reset and self.storage not in MASTER_MODES:
            raise ValueError(f"optim.osc_reset=True needs optim.storage in {MASTER_MODES} (got {self.storage!r}): "
                             f"only they keep a latent weight below the grid to reset (optim/osc_reset.py)")
        unused = [k for k in self.explicit if k.startswith("osc_reset_")]
        if unused and not self.osc_reset:
            raise ValueError(f"optim key(s) {unused} are set but optim.osc_reset is False; set osc_reset: true or "
                             f"remove them")

    @classmethod
    def from_dict(cls, name: str, optim: Mapping[str, Any] | None, **run: Any) -> "OptimConfig":
        """`optimizer` + `optim:` as written (only the keys OWN_KEYS / SHARED_KEYS allow), with `run`'s fields
        (RUN_FIELDS: what TrainConfig supplies)."""
        bad_run = sorted(set(run) - set(RUN_FIELDS))
        if bad_run:
            raise TypeError(f"OptimConfig.from_dict: {bad_run} are no run fields; valid: {RUN_FIELDS}")
        optim = dict(optim or {})
        check_choice("optimizer", name, OPTIMIZERS)
        valid = SHARED_KEYS + OWN_KEYS[name]
        bad = sorted(set(optim) - set(valid))
        if bad:
            raise ValueError(f"optim key(s) {bad} do not apply to optimizer {name!r}; valid keys: {valid}")
        return cls(name=name, explicit=tuple(sorted(optim)), **optim, **run)

    @property
    def is_torch_adamw(self) -> bool:
        """The default path: torch.optim.AdamW, nothing of this package."""
        return self.name == "adamw" and not self.explicit

    @property
    def on_grid(self) -> bool:
        return on_grid(self.storage)

    def peak_lr(self, train_lr: float | None = None) -> float:
        """The peak LR in the optimizer's own units (None: the run's train_lr)."""
        train_lr = self.train_lr if train_lr is None else train_lr
        return self.lr if self.lr is not None else DEFAULT_LR.get(self.name, train_lr)

    def short_str(self) -> str:
        if self.is_torch_adamw:
            return "adamw"
        bits = [self.name, self.storage]
        if self.lr is not None:
            bits.append(f"lr{self.lr:g}")
        if self.state_m or self.state_v:
            bits.append(f"m{self.state_m or 'fp32'}v{self.state_v or 'fp32'}")
        return "/".join(bits)


def canonical_optim(optim: Mapping[str, Any]) -> dict[str, Any]:
    """`optim` with weight_fmt under its canonical format name ('e4m3fn' -> 'E4M3'; an unknown name raises
    get_format's error), so aliases of one format give one run identity; a canonical spelling is unchanged.
    state_m / state_v are left as written."""
    out = dict(optim)
    if isinstance(out.get("weight_fmt"), str):
        from altgrad_lib.numerics.formats import get_format   # imports torch: only when a format is named

        out["weight_fmt"] = get_format(out["weight_fmt"]).name
    return out
