"""DiagnosticsConfig: which monitor groups run, how often, and where they write (torch-free: the CLI's
--help and TrainConfig validation import it).

`TrainConfig.diagnostics` holds a preset name ("off" | "cheap" | "full") or a dict of these fields, e.g.
`{"preset": "full", "interval": 25}`; from the shell `-p diagnostics=cheap -p diagnostics.interval=1`.
A dict without "preset" means "full".

Groups (what each measures: see the class of each in diagnostics.MONITOR_CLASSES):
    counters     quantizer counters of the training step itself (saturation, flush-to-zero, scale, eps hits)
    gradients    per-parameter gradient norm / mean / var, grad-to-weight ratio, clipping events
    numerics     per quantized tensor (X, W, dY) health from an eager replay of the step (TE-style
                 under/overflow, subnormals, NaN/Inf, amax, scale, eps hits, SQNR); works under torch.compile
    shadow       gradient SNR and cosine against an FP32 shadow (same batch and weights, quantization off)
    weights      log2-magnitude histograms, fraction at +-max, staleness, KL to a baseline run
    grid         stiffness field, misalignment, stall rate, Δcode, bit flips, code usage, grad-stiffness corr.
    activations  kurtosis of each Linear's input, attention entropy per head, dead MLP units over a window
    events       divergence early warnings (loss / grad-norm spikes, kurtosis trend, attention-entropy drop)
    curvature    top Hessian eigenvalue of the STE surrogate (curvature.STE_NOTE) and lr·λ_max, whole model and
                 per block, on a fixed batch; switched on by hessian_interval > 0 alone (in no preset: one
                 measurement costs up to hessian_iters x (1 + blocks) Hessian-vector products)
    fisher       Fisher information of the model's predictive distribution (Monte-Carlo true Fisher, labels
                 sampled from the model) per block: trace and diagonal from per-sequence gradients, top
                 eigenvalue by power iteration on Fisher-vector products, nngeometry's K-FAC trace / top
                 eigenvalue; switched on by fisher_interval > 0 alone (in no preset: fisher_samples backward
                 passes, up to 2 x fisher_iters per block, one nngeometry pass; bench/results/fisher.md)
    manifold     constraint residuals (‖WᵀW - I‖, row norms), singular values, the NS / dual-ascent residuals of
                 muon / manifold_muon, the constraint_budget event; switched on by manifold_interval > 0 alone
A new monitor (e.g. curvature) plugs in with its group name in MONITORS and its class in diagnostics.MONITOR_CLASSES
(see base.Monitor).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Mapping

from altgrad_lib.errors import invalid

# the groups (presets run them in this order); their classes: diagnostics.MONITOR_CLASSES (this file stays torch-free)
MONITORS: tuple[str, ...] = (
    "counters",
    "gradients",
    "numerics",
    "shadow",
    "grid",          # before weights: it leaves the codes for staleness
    "weights",
    "activations",
    "events",
    "curvature",     # only through hessian_interval
    "fisher",        # only through fisher_interval
    "manifold",      # only through manifold_interval
)
INTERVAL_FIELDS = {"curvature": "hessian_interval", "fisher": "fisher_interval", "manifold": "manifold_interval"}
INTERVAL_GROUPS = tuple(INTERVAL_FIELDS)   # groups switched on by their own interval field, never by a preset / groups
CHEAP_GROUPS = ("counters", "gradients", "events")
PRESETS: dict[str, tuple[tuple[str, ...], int]] = {   # preset -> (groups, default interval)
    "off": ((), 0),
    "cheap": (CHEAP_GROUPS, 10),
    # a full diagnostic step costs ~4 CPU training steps (bench/diagnostics.py)
    "full": (tuple(g for g in MONITORS if g not in INTERVAL_GROUPS), 100),
}
OUTPUT_FORMATS = ("csv",)


@dataclass(frozen=True)
class DiagnosticsConfig:
    """What the monitors record. interval 0 = the preset's default (cheap 10, full 100); groups None = the
    preset's groups. group_intervals overrides the interval per group (e.g. {"curvature": 200})."""

    preset: str = "full"
    interval: int = 0
    groups: tuple[str, ...] | None = None
    group_intervals: Mapping[str, int] = field(default_factory=dict)
    window: int = 8                     # diagnostic steps in the dead-unit window and the early-warning trends
    hist_min_log2: int = -24            # log2-magnitude histogram bins [2^k, 2^(k+1)), k clamped to [min, max]
    hist_max_log2: int = 8
    dcode_max: int = 4                  # Δcode histogram bins -dcode_max..dcode_max (ends are "or more")
    spike_sigma: float = 6.0            # loss / grad-norm spike: value > EMA + spike_sigma·EMA-std
    kurtosis_alarm: float = 50.0        # excess kurtosis of a Linear input above this is an alarm
    kurtosis_trend: float = 2.0         # ... and so is kurtosis above this factor times its window mean
    entropy_drop: float = 0.5           # a head's attention entropy below this fraction of its window mean
    baseline_run: str = ""              # run dir whose diagnostics.csv (weights group) is the KL reference
    hessian_interval: int = 0           # curvature group every N steps (0 = off), on the first due step's batch
    hessian_iters: int = 20             # power-iteration cap per λ_max (stops earlier at rel. change < 1e-3)
    fisher_interval: int = 0            # fisher group every N steps (0 = off), on the first due step's inputs
    fisher_samples: int = 8             # probe sequences (one backward pass each; at most the batch size)
    fisher_iters: int = 20              # power-iteration cap per Fisher λ_max (stops earlier at rel. change < 1e-3)
    manifold_interval: int = 0          # manifold group every N steps (0 = off): constraint residuals, svdvals
    constraint_budget: float = 0.0      # manifold group: event when a constraint residual exceeds it (0 = off)
    output_format: str = "csv"

    def __post_init__(self) -> None:
        if self.preset not in PRESETS:
            raise invalid("DiagnosticsConfig.preset", self.preset, tuple(PRESETS))
        if isinstance(self.interval, bool) or not isinstance(self.interval, int) or self.interval < 0:
            raise invalid("DiagnosticsConfig.interval", self.interval, "an int >= 0 (0 = the preset's default)")
        if self.groups is not None:
            groups = (self.groups,) if isinstance(self.groups, str) else tuple(self.groups)
            valid = tuple(g for g in MONITORS if g not in INTERVAL_GROUPS)
            bad = [g for g in groups if g not in valid]
            if bad:
                raise invalid("DiagnosticsConfig.groups", bad[0] if len(bad) == 1 else bad,
                           f"{valid} (curvature: set hessian_interval; fisher: set fisher_interval)")
            object.__setattr__(self, "groups", groups)
        gi = dict(self.group_intervals or {})
        for g, n in gi.items():
            if g not in MONITORS or g in INTERVAL_GROUPS:
                raise invalid("DiagnosticsConfig.group_intervals", g,
                              f"{tuple(x for x in MONITORS if x not in INTERVAL_GROUPS)} "
                              f"(curvature: set hessian_interval; fisher: set fisher_interval)")
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise invalid(f"DiagnosticsConfig.group_intervals[{g!r}]", n, "an int >= 1")
        object.__setattr__(self, "group_intervals", gi)
        for name in INTERVAL_FIELDS.values():
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise invalid(f"DiagnosticsConfig.{name}", v, "an int >= 0 (0 = off)")
        for name in ("window", "dcode_max", "hessian_iters", "fisher_samples", "fisher_iters"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise invalid(f"DiagnosticsConfig.{name}", v, "an int >= 1")
        if not self.hist_min_log2 < self.hist_max_log2:
            raise invalid("DiagnosticsConfig.hist_min_log2", self.hist_min_log2,
                          f"an int < hist_max_log2={self.hist_max_log2}")
        for name in ("spike_sigma", "kurtosis_alarm", "kurtosis_trend"):
            if not float(getattr(self, name)) > 0:
                raise invalid(f"DiagnosticsConfig.{name}", getattr(self, name), "a number > 0")
        v = self.constraint_budget
        if isinstance(v, str):      # YAML 1.1 reads "1e-3" as a string
            try:
                v = float(v)
                object.__setattr__(self, "constraint_budget", v)
            except ValueError:
                pass
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0:
            raise invalid("DiagnosticsConfig.constraint_budget", v, "a number >= 0 (0 = off)")
        if not 0 < float(self.entropy_drop) < 1:
            raise invalid("DiagnosticsConfig.entropy_drop", self.entropy_drop, "a number in (0, 1)")
        if self.output_format not in OUTPUT_FORMATS:
            raise invalid("DiagnosticsConfig.output_format", self.output_format, OUTPUT_FORMATS)

    # -- construction
    @classmethod
    def from_value(cls, value: "str | Mapping[str, Any] | DiagnosticsConfig | None") -> "DiagnosticsConfig":
        """A preset name, a dict of fields, None ("off") or a DiagnosticsConfig."""
        if isinstance(value, DiagnosticsConfig):
            return value
        if value is None:
            value = "off"
        if isinstance(value, str):
            if value not in PRESETS:
                raise invalid("DiagnosticsConfig.preset", value, tuple(PRESETS))
            return cls(preset=value)
        if not isinstance(value, Mapping):
            raise TypeError(f"diagnostics={value!r} must be a preset name {tuple(PRESETS)} or a dict of "
                            f"{[f.name for f in fields(cls)]}")
        unknown = sorted(set(value) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"unknown diagnostics key(s) {unknown}; valid keys: {[f.name for f in fields(cls)]}")
        return cls(**dict(value))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["groups"] = list(self.groups) if self.groups is not None else None
        d["group_intervals"] = dict(self.group_intervals)
        return d

    # -- views
    @property
    def enabled(self) -> bool:
        return bool(self.active_groups)

    @property
    def active_groups(self) -> tuple[str, ...]:
        base = self.groups if self.groups is not None else PRESETS[self.preset][0]
        return base + tuple(g for g, f in INTERVAL_FIELDS.items() if getattr(self, f) > 0)

    @property
    def every(self) -> int:
        """The diagnostic interval in steps (the preset's default when interval is 0)."""
        return self.interval or PRESETS[self.preset][1] or PRESETS["full"][1]

    def interval_of(self, group: str) -> int:
        if group in INTERVAL_FIELDS:
            return getattr(self, INTERVAL_FIELDS[group])
        return int(self.group_intervals.get(group, self.every))

    def not_covered_by(self, recorded: "DiagnosticsConfig") -> list[str]:
        """The groups this config asks for that a run recorded under `recorded` lacks ("fisher"), or has at another
        interval ("fisher@5 (recorded @50)"): what reusing that finished run would not give."""
        out = []
        for g in self.active_groups:
            if g not in recorded.active_groups:
                out.append(g)
            elif recorded.interval_of(g) != self.interval_of(g):
                out.append(f"{g}@{self.interval_of(g)} (recorded @{recorded.interval_of(g)})")
        return out

    def due(self, group: str, step: int) -> bool:
        """Does `group` record at this (1-based) step? Every interval, and at step 1 for a starting point."""
        return step == 1 or step % self.interval_of(group) == 0

    def short_str(self) -> str:
        if not self.enabled:
            return "diag:off"
        h = f",hessian@{self.hessian_interval}" if self.hessian_interval else ""
        h += f",fisher@{self.fisher_interval}" if self.fisher_interval else ""
        h += f",manifold@{self.manifold_interval}" if self.manifold_interval else ""
        groups = [g for g in self.active_groups if g not in INTERVAL_GROUPS]
        return f"diag:{self.preset}@{self.every}[{','.join(groups)}{h}]"
