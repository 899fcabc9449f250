"""Training diagnostics: monitors that show what a number format does to tensors, gradients and weights.

Attached through `TrainConfig.diagnostics` ("off" | "cheap" | "full" or a dict, see config.py); train()
creates one `Diagnostics` object. Files, one job each:
    config.py       DiagnosticsConfig (presets, groups, intervals, thresholds) and MONITORS (the group names)
    base.py         Monitor interface, StepContext (emit rows, one host transfer per diagnostic step)
    diagnostics.py  Diagnostics: runs the due monitors at two points of the step, checkpoint state, files;
                    MONITOR_CLASSES (group -> Monitor class)
    writer.py       diagnostics.csv / events.csv writers (append + flush, truncate on resume) and readers
    probe.py        eager replays of a step on a private model copy (quantized with hooks; FP32 shadow)
    health.py       numerical health of X / W / dY (TE-style under/overflow, subnormals, NaN/Inf, ...)
    gradients.py    per-parameter gradient stats, clipping, SNR / cosine vs the FP32 shadow
    weights.py      log2-magnitude histograms, fraction at ±max, staleness, KL to a baseline run
    geometry.py     the weight-grid monitor (stiffness, misalignment, stall rate, update lost, Δcode, bit flips,
                    code usage; the arithmetic is numerics/grid_metrics.py)
    activations.py  kurtosis of Linear inputs, attention entropy per head, dead MLP units
    events.py       divergence early-warning events
    curvature.py    top Hessian eigenvalue (power iteration on HVPs), Hutchinson trace, lr·λ_max alarm
    manifold.py     constraint residuals (‖WᵀW - I‖_F/√n, row norms), svdvals, Muon's NS / dual-ascent residuals,
                    the constraint-violation budget event
    fisher.py       per-block Fisher (true Fisher, sampled labels): trace, diagonal, λ_max, NNGeometry K-FAC
The curvature group (curvature.CurvatureMonitor) runs only when DiagnosticsConfig.hessian_interval > 0, the fisher
group (fisher.FisherMonitor) only when fisher_interval > 0.

What is written (next to metrics.csv; `read_diagnostics(run_dir)`, `read_events(run_dir)`):
    diagnostics.csv  step:int, layer:str (module fqn; "" = whole model, "*" = all parameters), role:str,
                     metric:str, value:float (NaN = not measurable here, never a stand-in 0)
    events.csv       step:int, kind:str, layer:str, value:float, threshold:float
Rows by group (role in brackets; histograms are `<prefix>:<bin>` rows holding fractions, empty bins omitted):
    counters     [X|W|dY] ctr.sat_frac ctr.flush_frac ctr.eps_hits ctr.scale ctr.amax
    numerics     [X|W|dY] overflow_frac underflow_frac flush_frac subnormal_frac nan_in inf_in nan_out inf_out
                 amax scale eps_hits sqnr_db mse hist.log2xs:<k> (|x·s| per binade over the format's window);
                 block-scaled operands also blk_log2s_mean/_std/_min/_max
                 (log2 block scales) blk_flush_mean/_std/_max/_any (per-block fraction flushed to 0)
    gradients    [weight|bias] grad_norm grad_mean grad_var grad_to_weight; [""] grad_norm_total clipped clipped_frac
    shadow       [weight|bias] grad_snr_db grad_cos; layer "*": the same over all parameters
    weights      [W] hist.log2w:<k> zero_frac, quantized only: frac_at_max staleness (kl_log2w_bits with a baseline)
    grid         [W] hist.log2ulp:<k> stiffness_entropy_bits log2S_mean misalignment_mean stall_rate update_ratio
                 update_lost (share of the update the weight rounding hides from the forward) moved_frac
                 hist.dcode:<d> flips:<sign|e3..e0|m2..m0> code_entropy_bits codes_used capacity_use
                 hist.code:<0xNN> grad_stiffness_corr
    activations  [X] kurtosis (every Linear); [head<i>] attn_entropy (layer = attention fqn, nats);
                 [hidden] dead_frac fired_frac (layer = MLP fqn)
    curvature    [ste_surrogate|exact] lambda_max lr_lambda_max power_iters (layer "model" and each block)
    fisher       [ste_surrogate|exact] fisher_trace diag_max fisher_lambda_max fisher_power_iters kfac_trace
                 kfac_lambda_max (each block)
    manifold     [W] orth_residual sphere_residual sigma_max sigma_min cond hist.log2sv:<k> ns_residual dual_residual
                 dual_steps (block Linears; manifold_interval > 0)
    events       loss_spike grad_norm_spike loss_nonfinite kurtosis_alarm kurtosis_trend attn_entropy_drop
                 unavailable:<group> constraint_violation
"""
import importlib

from altgrad_lib.monitors.config import MONITORS, PRESETS, DiagnosticsConfig  # noqa: F401  (torch-free)

# Lazy, not explicit imports: TrainConfig imports monitors.config, which runs this file first, and must stay torch-
# and pandas-free; notebooks read `monitors.read_diagnostics(run_dir)`. In the package, import from the module.
_LAZY = {"Diagnostics": "diagnostics", "read_diagnostics": "writer", "read_events": "writer",
         "DIAG_FILE": "writer", "EVENTS_FILE": "writer"}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
