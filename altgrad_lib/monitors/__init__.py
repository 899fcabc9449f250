"""Training diagnostics: monitors that show what a number format does to tensors, gradients and weights.

Attached through `TrainConfig.diagnostics` ("off" | "cheap" | "full" or a dict, see config.py); train()
creates one `Diagnostics` object. Files, one job each:
    config.py       DiagnosticsConfig (presets, groups, intervals, thresholds) and the MONITORS registry
    base.py         Monitor interface, StepContext (emit rows, one host transfer per diagnostic step)
    diagnostics.py  Diagnostics: runs the due monitors at two points of the step, checkpoint state, files
    writer.py       diagnostics.csv / events.csv writers (append + flush, truncate on resume) and readers
    probe.py        eager replays of a step on a private model copy (quantized with hooks; FP32 shadow)
    health.py       numerical health of X / W / dY (TE-style under/overflow, subnormals, NaN/Inf, ...)
    gradients.py    per-parameter gradient stats, clipping, SNR / cosine vs the FP32 shadow
    weights.py      log2-magnitude histograms, fraction at ±max, staleness, KL to a baseline run
    grid.py         grid geometry (stiffness, misalignment, stall rate, Δcode, bit flips, code usage)
    activations.py  kurtosis of Linear inputs, attention entropy per head, dead MLP units
    events.py       divergence early-warning events
    curvature.py    top Hessian eigenvalue (power iteration on HVPs), Hutchinson trace, lr·λ_max alarm
A curvature monitor plugs in as one more MONITORS entry ("curvature": "altgrad_lib.monitors.curvature:...").
"""
import importlib

from altgrad_lib.monitors.config import MONITORS, PRESETS, DiagnosticsConfig  # noqa: F401  (torch-free)

_LAZY = {"Diagnostics": "diagnostics", "read_diagnostics": "writer", "read_events": "writer",
         "DIAG_FILE": "writer", "EVENTS_FILE": "writer"}   # lazy: the config must stay torch- and pandas-free


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
