"""Every plotting function of altgrad_lib/notebook/ drawn on small synthetic data and checked by
notebook/figure_check.py (units on every axis, no constant or all-NaN image, no legend over data, dpi >= 110, no
internal metric names), plus the checker itself on figures built to break each rule, and the fixes of issue 28's
figures (controls out of the Δ panel, "all zero" instead of a constant heatmap, the stiffness field's cropped rows,
attention entropy against the uniform-attention reference).

ALTGRAD_FIG_DIR=/some/dir saves every gallery figure there as PNG (to look at them)."""
from __future__ import annotations

import math
import os

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from altgrad_lib.notebook import analysis, dashboard, plots, plots_bench
from altgrad_lib.notebook import plots_diagnostics as pdiag
from altgrad_lib.notebook import plots_optim
from altgrad_lib.notebook import plots_publish as ppub
from altgrad_lib.notebook.figure_check import figure_problems, internal_names, label_ok
from altgrad_lib.notebook.names import layer_name, metric_label
from altgrad_lib.numerics.formats import format_summary_table

LAYERS = [f"transformer.h.{b}.{p}" for b in range(2) for p in ("attn.c_attn", "attn.c_proj", "mlp.c_fc",
                                                               "mlp.c_proj")]
STEPS = [10, 20, 30, 40]


def _run(metrics: dict[str, list[float]]):
    rows = [(s, n, v) for n, vals in metrics.items() for s, v in zip(range(0, 50, 10), vals)]
    return type("R", (), {"metrics": pd.DataFrame(rows, columns=["step", "name", "value"]), "dir": "x"})()


def _curve(off: float) -> list[float]:
    return [5.0 - 0.3 * i + off for i in range(5)]


def _losses(with_control: bool = True) -> pd.DataFrame:
    runs = {"hp": _run({"train/loss": _curve(0), "val/loss": _curve(0.02)})}
    for i, name in enumerate(("E4M3", "E5M2", "E3M4")):
        runs[name] = _run({"train/loss": _curve(0.005 * (i + 1)), "val/loss": _curve(0.02 + 0.008 * (i + 1))})
    if with_control:   # the frozen-blocks control: +0.45 nats, as in notebook 04
        runs["hp freeze_blocks"] = _run({"train/loss": _curve(0.45), "val/loss": _curve(0.47)})
    return analysis.loss_table(runs)


def _diag(zero_metric: str = "ctr.sat_frac") -> pd.DataFrame:
    """A tidy diagnostics frame (monitors.read_diagnostics' columns) of two blocks over four steps."""
    rng = np.random.default_rng(0)
    rows = []
    for s in STEPS:
        for lyr in LAYERS:
            for role in ("X", "W", "dY"):
                rows.append((s, lyr, role, "overflow_frac", float(rng.uniform(0, 1e-3))))
                rows.append((s, lyr, role, zero_metric, 0.0))
                rows.append((s, lyr, role, "grad_snr_db", float(rng.uniform(10, 30))))
            rows.append((s, lyr, "X", "kurtosis", float(rng.uniform(0, 20) + s / 10)))
            for k in range(-12, -3):   # scaled-grid ULPs: only rows -12..-4 hold weights (of -20..+8)
                rows.append((s, lyr, "W", f"hist.log2ulp:{k}", (k + 13) / 45))
            for k in (-20, -19, 7, 8):
                rows.append((s, lyr, "W", f"hist.log2ulp:{k}", 0.0))
            for k in range(-3, 4):
                rows.append((s, lyr, "W", f"hist.dcode:{k}", float(0.9 if k == 0 else 0.1 / 6)))
            for c in ("0x38", "0x39", "0x40", "0x41"):
                rows.append((s, lyr, "W", f"hist.code:{c}", 0.25))
            for k in range(-8, -2):
                rows.append((s, lyr, "W", f"hist.log2w:{k}", 1 / 6))
            rows.append((s, lyr, "weight", "grad_norm", float(0.1 + rng.uniform(0, 1))))
        for b in range(2):
            for h in range(2):   # a 0.003-nat drift, as in notebook 04
                rows.append((s, f"transformer.h.{b}.attn", f"head{h}", "attn_entropy", 3.2029 + 0.00001 * s * h))
    return pd.DataFrame(rows, columns=["step", "layer", "role", "metric", "value"])


def _study_metrics() -> pd.DataFrame:
    rows = []
    for recipe, off in (("bf16", 0.0), ("fp8_hybrid", 0.05)):
        for seed in (0, 1):
            for step in (0, 10, 20):
                run = f"{recipe}-s{seed}"
                rows.append((run, recipe, seed, step, "val/loss", 5 - step / 10 + off + 0.01 * seed))
                rows.append((run, recipe, seed, step, "train/grad_norm", 1 + seed + step / 20))
    return pd.DataFrame(rows, columns=["run", "recipe", "seed", "step", "name", "value"])


def _claims():
    claims = pd.DataFrame({"level": ["E4M3", "E5M2"], "n": [2, 2], "gap_nats": [0.01, 0.03],
                           "gap_lo": [0.0, 0.02], "gap_hi": [0.02, 0.04], "delta_nats": [0.01, 0.01]})
    gaps = pd.DataFrame({"level": ["E4M3", "E4M3", "E5M2", "E5M2"], "seed": [0, 1, 0, 1],
                         "gap_nats": [0.008, 0.012, 0.028, 0.032]})
    return gaps, claims


def _trials():
    from helpers import lr_envelope_trials

    return lr_envelope_trials()


def _sqnr():
    sq = pd.DataFrame({"layer": LAYERS + ["lm_head"], "out_sqnr_db": np.linspace(20, 30, 9),
                       "grad_in_sqnr_db": np.linspace(15, 25, 9), "grad_w_sqnr_db": np.linspace(18, 28, 9)})
    return sq


def _final():
    return pd.DataFrame({"config": ["bf16", "bf16", "fp8_hybrid", "fp8_hybrid"], "val/loss": [3.1, 3.2, 3.3, 3.35],
                         "overflow_rate": [0.0, 0.0, 0.01, 0.02], "stall_rate": [0.1, 0.12, 0.3, 0.32]})


def _seed_losses() -> pd.DataFrame:
    """(label, seed, step, loss): hp, two formats (E5M2 costs 0.03 nats, growing over training), the control."""
    rows = []
    for seed in (0, 1, 2):
        for step in range(0, 101, 20):
            base = 5.0 - step / 40 + 0.01 * seed
            for label, off in (("hp", 0.0), ("E4M3", 0.002 * (seed - 1)), ("E5M2", 0.0003 * step + 0.002 * seed),
                               ("hp control", 0.45)):
                rows.append((label, seed, step, base + off))
    return pd.DataFrame(rows, columns=["label", "seed", "step", "loss"])


def _forest_claims() -> pd.DataFrame:
    return pd.DataFrame({"level": ["E7M0", "fp8_hybrid", "E1M6", "E4M3", "E5M2"], "baseline": "hp",
                         "n": [3, 3, 3, 3, 1], "gap_nats": [0.2, 0.001, 0.004, -0.002, 0.03],
                         "ci_lo": [0.15, -0.004, 0.0, -0.008, np.nan], "ci_hi": [0.25, 0.006, 0.008, 0.004, np.nan],
                         "ci_level": 0.95, "delta_nats": 0.01,
                         "verdict": ["worse", "equivalent within ±δ", "inconclusive (MDE 0.01)", "equivalent within ±δ",
                                     "too few seeds"],
                         "verdict_kind": ["below_control", "equivalent", "no_delta", "equivalent", "too_few"]})


def _format_diags() -> dict[str, pd.DataFrame]:
    rng = np.random.default_rng(1)
    out = {}
    for fmt, scale in (("E4M3", 2.0 ** 4), ("E5M2", 2.0 ** 10), ("E7M0", 2.0 ** 40)):
        rows = []
        for s in STEPS:
            for i, lyr in enumerate(LAYERS):
                for role in ("X", "W", "dY"):
                    amax = float(rng.uniform(0.5, 2) * (1e-4 if role == "dY" else 1) * (1 + i))
                    rows += [(s, lyr, role, "amax", amax), (s, lyr, role, "scale", scale / amax),
                             (s, lyr, role, "underflow_frac", float(rng.uniform(0, 0.1) if role == "dY" else 0)),
                             (s, lyr, role, "overflow_frac", 0.0)]
        out[fmt] = pd.DataFrame(rows, columns=["step", "layer", "role", "metric", "value"])
    return out


def _scaled_hist_diag() -> pd.DataFrame:
    """log2|w| histograms of two quantized layers and the (unscaled) embedding, W scales 2^10 and 2^12 at step 40."""
    rows = []
    for lyr, log2s in ((LAYERS[0], 10.0), (LAYERS[1], 12.0), ("transformer.wte", None)):
        for k, frac in ((-6, 0.25), (-5, 0.5), (-4, 0.25)):
            rows.append((40, lyr, "W", f"hist.log2w:{k}", frac))
        if log2s is not None:
            rows += [(40, lyr, "W", "scale", 2.0 ** log2s), (40, lyr, "W", "ctr.scale", 1.0)]
    return pd.DataFrame(rows, columns=["step", "layer", "role", "metric", "value"])


def _tensor_hist_diag() -> pd.DataFrame:
    """hist.log2xs of X, W, dY of the two blocks' Linears at steps 10 and 40: X and W centred at 2^6 (E4M3's max
    448 = 2^8.8), dY spread down into the subnormals; block 1 one binade lower."""
    rows = []
    for s in (10, 40):
        for lyr in LAYERS:
            shift = -int(lyr.split(".")[2])
            for role, centre, width in (("X", 6, 3), ("W", 5, 2), ("dY", 2, 7)):
                ks = np.arange(centre - width, centre + 3)
                p = np.exp(-0.5 * ((ks - centre) / (width / 2)) ** 2)
                rows += [(s, lyr, role, f"hist.log2xs:{k + shift}", float(v)) for k, v in zip(ks, p / p.sum())]
    return pd.DataFrame(rows, columns=["step", "layer", "role", "metric", "value"])


def _sqnr_diags() -> dict[str, pd.DataFrame]:
    """sqnr_db of X, W, dY per Linear over two steps, for three formats: E2M5 best, E7M0 worst, dY of block 1
    lowest; lm_head quantized for E4M3 only."""
    out = {}
    for fmt, base in (("E2M5", 38.0), ("E4M3", 30.0), ("E7M0", 9.0)):
        rows = []
        for s in (10, 20):
            for i, lyr in enumerate(LAYERS + (["lm_head"] if fmt == "E4M3" else [])):
                for role, off in (("X", 0.0), ("W", 1.0), ("dY", -2.0 - 3.0 * (i // 4))):
                    rows.append((s, lyr, role, "sqnr_db", base + off + 0.5 * (i % 4) + 0.1 * s))
        out[fmt] = pd.DataFrame(rows, columns=["step", "layer", "role", "metric", "value"])
    return out


def _hp_index() -> pd.DataFrame:
    """A study index (study.csv columns) of nvfp4 with hp_first=1 / hp_last=1 over three seeds, its frozen-blocks
    control and a precision-schedule point (both left out), one hp_first seed diverged."""
    rows = []
    for seed in (0, 1, 2):
        for recipe, off in (("nvfp4", 0.0), ("nvfp4:hp_last=1", -0.02), ("nvfp4:hp_first=1", -0.005)):
            diverged = recipe == "nvfp4:hp_first=1" and seed == 2
            rows.append({"recipe": recipe, "seed": seed, "freeze_blocks": False, "precision_schedule": "{}",
                         "status": "diverged" if diverged else "completed",
                         "final_val_loss": math.nan if diverged else 2.5 + off + 0.01 * seed})
        rows.append({"recipe": "nvfp4:hp_last=2", "seed": seed, "freeze_blocks": False, "precision_schedule": "{}",
                     "status": "pending", "final_val_loss": math.nan})   # not run yet: no row
        rows.append({"recipe": "nvfp4", "seed": seed, "freeze_blocks": True, "precision_schedule": "{}",
                     "status": "completed", "final_val_loss": 3.0})
        rows.append({"recipe": "nvfp4", "seed": seed, "freeze_blocks": False,
                     "precision_schedule": '{"fwd_hp_from": 481}', "status": "completed", "final_val_loss": 2.4})
    return pd.DataFrame(rows)


def _optim():
    from test_notebook_plots_optim import PARTS, _per_step   # tests/ is on the path (as helpers)

    from altgrad_lib.notebook.optim_view import step_summary

    return _per_step(), PARTS, step_summary(_per_step().assign(seed=0), PARTS)


def _storage_claims():
    from test_notebook_plots_optim import _storage_claims as claims   # tests/ is on the path (as helpers)

    return claims()


def gemm_frame(device: str = "NVIDIA H100 80GB HBM3", emulated: bool = False, failed: str = "") -> pd.DataFrame:
    """bench/gemm_speedup.py's columns: squares 256..8192 and three model shapes; FP8 overtakes BF16 with size.
    `failed`: a variant whose rows have no time (as the bench writes a variant the GPU lacks)."""
    shapes = {(d, d, d): "square" for d in (256, 512, 1024, 2048, 4096, 8192)}
    shapes.update({(16384, 512, 1536): "h100 model: attn.c_attn fwd", (1536, 16384, 512): "h100 model: attn.c_attn dW",
                   (16384, 2048, 512): "h100 model: mlp.c_proj fwd"})
    gain = {"BF16 torch.mm": 1.0, "E4M3 tensor-wise": 1.6, "E4M3 tensor-wise, fast accum": 1.9,
            "E4M3 row-wise": 1.4, "E4M3 row-wise, fast accum": 1.7}
    rows = []
    for (m, k, n), group in shapes.items():
        flop = 2 * m * k * n
        fill = 1 - math.exp(-flop / 2e10)   # small GEMMs do not fill the GPU
        bf16_ms = flop / (700e9 * fill + 1e9)
        for v, g in gain.items():
            ms = float("nan") if v == failed else bf16_ms / (1 + (g - 1) * fill)
            rows.append(dict(M=m, K=k, N=n, shape=f"{m}x{k}x{n}", group=group, flop=flop, variant=v, ms=ms,
                             tflops=flop / ms / 1e9, speedup=bf16_ms / ms, rel_err=0.002, error="" if ms == ms else
                             "RuntimeError: not supported", device=device, device_type="cpu" if emulated else "cuda",
                             emulated=emulated, torch="2.13.0"))
    return pd.DataFrame(rows)


GALLERY = {
    "speedup_vs_shape": lambda: plots_bench.speedup_vs_shape(gemm_frame()),
    "speedup_vs_shape_failed": lambda: plots_bench.speedup_vs_shape(gemm_frame(failed="E4M3 row-wise, fast accum")),
    "gap_over_training": lambda: ppub.gap_over_training(_seed_losses(), "hp", 0.01),
    "forest": lambda: ppub.forest(_forest_claims()),
    "layer_grid": lambda: ppub.layer_grid(_format_diags()),
    "scaled_weight_hist": lambda: ppub.scaled_weight_hist(_scaled_hist_diag(), "E4M3"),
    "tensor_hist": lambda: ppub.tensor_hist(_tensor_hist_diag(), {"X": "E4M3", "W": "E4M3", "dY": "E5M2"}),
    "tensor_hist_one_layer": lambda: ppub.tensor_hist(
        _tensor_hist_diag().query("layer == @LAYERS[2]"), "E4M3"),
    "layer_sensitivity": lambda: ppub.layer_sensitivity(_sqnr_diags()),
    "layer_sensitivity_gaps_only": lambda: ppub.layer_sensitivity(None, ppub.hp_block_gaps(_hp_index())),
    "layer_sensitivity_gaps": lambda: ppub.layer_sensitivity(_sqnr_diags(), ppub.hp_block_gaps(_hp_index())),
    "storage_forest": lambda: plots_optim.storage_forest(_storage_claims(), ["E4M3", "E7M0"], 3),
    "step_curves": lambda: plots_optim.step_curves(_optim()[0], _optim()[1], "adamw fp32"),
    "ulp_steps": lambda: plots_optim.ulp_steps(_optim()[2], _optim()[0], _optim()[1], "E7M0 grid_adamw grid_sr",
                                               "E7M0 adamw fp32", "adamw fp32"),
    "format_grid": lambda: plots.format_grid("E4M3", analysis.binade_counts("E4M3")),
    "rounding_error": lambda: plots.rounding_error(analysis.rounding_error("E4M3", n=500), "E4M3"),
    "ulp_stiffness": lambda: plots.ulp_stiffness(analysis.ulp_at_grid("E4M3"), "E4M3"),
    "sr_bias": lambda: plots.sr_bias(analysis.sr_bias_variance("E4M3", n_samples=200), "E4M3", 200),
    "format_tradeoff": lambda: plots.format_tradeoff(format_summary_table().reset_index(), x="dynamic_range_log2",
                                                     y="values_per_binade", label="format", highlight="E4M3"),
    "loss_curves": lambda: plots.loss_curves(_losses(False), entropy=6.2, title="bf16 baseline"),
    "loss_curves_delta": lambda: plots.loss_curves(_losses(), entropy=6.2, title="formats vs hp", baseline="hp"),
    "sqnr_bars": lambda: plots.sqnr_bars(_sqnr(), title="fp8_hybrid"),
    "sqnr_heatmap": lambda: plots.sqnr_heatmap(pd.concat([_sqnr().assign(backend="sim"),
                                                          _sqnr().assign(backend="torchao")]), title="fp8_hybrid"),
    "bars": lambda: plots.bars(pd.Series({"sim": 100.0, "torchao": 50.0}), "throughput (tokens/s)", "throughput"),
    "paired_gaps": lambda: plots.paired_gaps(*_claims()),
    "lr_envelope": lambda: plots.lr_envelope(_trials()),
    "layer_step_heatmap": lambda: pdiag.layer_step_heatmap(_diag(), "overflow_frac", "dY"),
    "layer_step_heatmap_zero": lambda: pdiag.layer_step_heatmap(_diag(), "ctr.sat_frac", "X"),
    "layer_step_heatmap_log": lambda: pdiag.layer_step_heatmap(_diag(), "overflow_frac", "X", log=True),
    "layer_step_heatmap_snr": lambda: pdiag.layer_step_heatmap(_diag(), "grad_snr_db"),
    "stiffness_field": lambda: pdiag.stiffness_field(_diag(), LAYERS[2]),
    "hist_dcode": lambda: pdiag.hist_at_steps(_diag(), LAYERS[2], "hist.dcode"),
    "hist_code": lambda: pdiag.hist_at_steps(_diag(), LAYERS[2], "hist.code", steps=[40]),
    "attention_entropy": lambda: pdiag.attention_entropy(_diag(), seq_len=64, reference=3.5),
    "kurtosis": lambda: pdiag.kurtosis(_diag()),
    "curves": lambda: dashboard.curves(_study_metrics(), "val/loss", "recipe"),
    "curves_grad": lambda: dashboard.curves(_study_metrics(), "train/grad_norm", "recipe"),
    "parallel_coordinates": lambda: dashboard.parallel_coordinates(_final(), "config",
                                                                   ["val/loss", "overflow_rate", "stall_rate"]),
    "layer_heatmap": lambda: dashboard.layer_heatmap(_diag(), "overflow_frac", "W"),
    "layer_heatmap_zero": lambda: dashboard.layer_heatmap(_diag(), "ctr.sat_frac"),
    "drilldown": lambda: dashboard.drilldown(_diag(), "E4M3"),
    "drilldown_layer": lambda: dashboard.drilldown(_diag(), "E4M3", layer=LAYERS[0]),
    "drilldown_empty": lambda: dashboard.drilldown(None, "hp"),
}


@pytest.fixture(autouse=True)
def _style():
    plots.setup()
    yield
    plt.close("all")


@pytest.mark.parametrize("name", sorted(GALLERY))
def test_every_figure_passes_the_check(name):
    fig = GALLERY[name]()
    if os.environ.get("ALTGRAD_FIG_DIR"):
        # bbox_inches="tight", as the notebooks' inline backend saves figures
        fig.savefig(os.path.join(os.environ["ALTGRAD_FIG_DIR"], f"{name}.png"), bbox_inches="tight")
    assert figure_problems(fig) == []


def test_the_gallery_covers_every_plotting_function():
    """A new plotting function (public, returns a Figure by its annotation) must get a gallery entry."""
    import inspect

    from altgrad_lib.notebook import optim_view

    drawn = {"format_grid", "rounding_error", "ulp_stiffness", "sr_bias", "format_tradeoff", "loss_curves",
             "sqnr_bars", "sqnr_heatmap", "bars", "paired_gaps", "lr_envelope", "layer_step_heatmap",
             "stiffness_field", "hist_at_steps", "attention_entropy", "kurtosis", "curves", "parallel_coordinates",
             "layer_heatmap", "drilldown", "gap_over_training", "forest", "layer_grid", "scaled_weight_hist",
             "tensor_hist", "layer_sensitivity", "step_curves", "ulp_steps", "storage_forest", "speedup_vs_shape"}
    found = set()
    for mod in (plots, pdiag, ppub, plots_optim, plots_bench, dashboard, optim_view, analysis):
        for n, f in vars(mod).items():
            if (inspect.isfunction(f) and not n.startswith("_") and f.__module__ == mod.__name__
                    and "Figure" in str(inspect.signature(f).return_annotation)):
                found.add(n)
    assert found == drawn


# ---------------------------------------------------------------------------------------------- the checker


def test_label_rule():
    assert label_ok("cross-entropy (nats/token)") and label_ok("SQNR [dB]") and label_ok("training step")
    assert label_ok("fraction of weights") and label_ok("count")
    assert not label_ok("") and not label_ok("loss") and not label_ok("relative error |Q(x)-x| / |x|")


def test_internal_names():
    assert internal_names("ctr.sat_frac per layer") == ["ctr.sat_frac"]
    assert internal_names("val/loss by recipe") == ["val/loss"]
    assert internal_names("h.0.a.c_attn (step 10)") and internal_names("transformer.h.1.mlp.c_fc")
    assert internal_names("validation loss (nats/token)") == [] and internal_names("block 0 attn QKV") == []
    assert layer_name("transformer.h.0.attn.c_attn") == layer_name("h.0.a.c_attn") == "block 0 attn QKV"
    assert layer_name("transformer.h.1.mlp.c_proj") == "block 1 MLP down" and layer_name("lm_head") == "LM head"
    # notebook 04's gradient-SNR heatmap showed "h.0.ln_1 weight": every part of a block gets a name
    assert layer_name("transformer.h.0.ln_1") == "block 0 LayerNorm 1"
    assert layer_name("h.1.ln_2") == "block 1 LayerNorm 2"
    assert layer_name("transformer.ln_f") == "final LayerNorm" and not internal_names(layer_name("transformer.h.3.x.y"))
    assert metric_label("val/loss") == "validation loss (nats/token)"


def _bad(build) -> list[str]:
    fig, ax = plt.subplots(dpi=120)
    build(fig, ax)
    out = figure_problems(fig)
    plt.close(fig)
    return out


def test_the_checker_catches_each_defect():
    def ok(fig, ax):
        ax.plot([0, 10], [0, 1], label="a")
        ax.set(xlabel="step", ylabel="loss (nats)", title="fine", xticks=[0, 5, 10])
        ax.legend(loc="lower right")
    assert _bad(ok) == []

    def low_dpi(fig, ax):
        ok(fig, ax)
        fig.set_dpi(80)
    assert any("dpi" in p for p in _bad(low_dpi))

    def no_unit(fig, ax):
        ok(fig, ax)
        ax.set_ylabel("loss")
    assert any("names no unit" in p for p in _bad(no_unit))

    def raw_name(fig, ax):
        ok(fig, ax)
        ax.set_title("ctr.sat_frac of h.0.a.c_attn")
    assert any("internal names" in p for p in _bad(raw_name))

    def on_data(fig, ax):
        ok(fig, ax)
        ax.plot([0, 1], [1, 0.9])   # a second line in the upper-left corner, under the legend box
        ax.legend(loc="upper left")
    assert any("legend covers" in p for p in _bad(on_data))

    def constant(fig, ax):
        im = ax.imshow(np.zeros((3, 4)))
        fig.colorbar(im, ax=ax, label="overflow (fraction of elements)")
        ax.set(xlabel="step", ylabel="layer")
    assert any("constant" in p for p in _bad(constant))

    def all_nan(fig, ax):
        ax.imshow(np.full((3, 4), np.nan))
        ax.set(xlabel="step", ylabel="layer")
    assert any("all NaN" in p for p in _bad(all_nan))

    def half_steps(fig, ax):
        ok(fig, ax)
        ax.set_xticks([0, 2.5, 5, 7.5, 10])
    assert any("not whole numbers on a counted axis" in p for p in _bad(half_steps))


# ---------------------------------------------------------------------------------------------- the fixes


def test_delta_panel_leaves_the_control_out_and_says_so():
    """Issue 28 item 1: the frozen-blocks control (+0.45 nats) set the Δ panel's y range; the formats' gaps
    (<= 0.024) lay flat on zero."""
    fig = plots.loss_curves(_losses(), baseline="hp", title="formats vs hp")
    axd = fig.axes[1]
    labels = [ln.get_label() for ln in axd.lines]
    assert not any("freeze_blocks" in lb for lb in labels) and any("E4M3" in lb for lb in labels)
    assert axd.get_ylim()[1] < 0.1   # the formats' largest gap is 0.024 + margins; the control's 0.45 is not drawn
    said = " ".join([axd.get_title()] + [t.get_text() for t in axd.texts])
    assert "freeze_blocks" in said and "+0.45" in said


def test_constant_heatmap_says_all_zero_and_fraction_scales_start_at_zero():
    """Issue 28 item 2: all-zero panels were drawn with -0.1..+0.1 colour bars."""
    for fig in (pdiag.layer_step_heatmap(_diag(), "ctr.sat_frac", "X"),
                dashboard.layer_heatmap(_diag(), "ctr.sat_frac")):
        ax = fig.axes[0]
        assert not ax.images and any("all zero" in t.get_text() for t in ax.texts)
    fig = pdiag.layer_step_heatmap(_diag(), "overflow_frac", "dY")
    assert fig.axes[0].images[0].get_clim()[0] == 0.0


def test_stiffness_field_crops_empty_rows_and_names_the_scaled_grid():
    """Issue 28 item 3: rows that hold no weight at any step were drawn; the y label said ULP at w·s while the
    title said ULP(w)."""
    fig = pdiag.stiffness_field(_diag(), LAYERS[2])
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == [str(k) for k in range(-12, -3)]
    assert "w·s" in ax.get_ylabel() and "w·s" in ax.get_title()


def test_attention_entropy_draws_the_uniform_reference_and_keeps_the_range():
    """Issue 28 item 4: a 0.003-nat drift filled the y range; no uniform-attention reference."""
    T = 64
    fig = pdiag.attention_entropy(_diag(), seq_len=T, reference=3.5)
    ax = fig.axes[0]
    uniform = np.mean(np.log(np.arange(1, T + 1)))   # causal row t attends to t tokens: ln t, averaged over rows
    ys = [ln.get_ydata()[0] for ln in ax.lines if ln.get_transform() is not ax.transData]
    assert any(math.isclose(y, uniform) for y in ys) and any(math.isclose(y, 3.5) for y in ys)
    lo, hi = ax.get_ylim()
    assert lo <= 0.0 and hi >= uniform   # the whole [0, uniform] range: a 0.003-nat drift stays small
    assert pdiag.attention_entropy(_diag()).axes[0].get_ylim()[0] <= 0.0   # the old call still works


def test_setup_dpi_at_least_110():
    with pytest.warns(UserWarning, match="dpi=80"):
        plots.setup(dpi=80)   # the committed notebooks still ask for 80
    assert plt.rcParams["figure.dpi"] >= 110
    plots.setup()
    assert plt.rcParams["figure.dpi"] >= 110


# ---------------------------------------------------------------------------------------------- (a), (e), (c)


def test_gap_over_training_pairs_by_seed_and_leaves_the_control_out():
    fig = ppub.gap_over_training(_seed_losses(), "hp", 0.01)
    ax = fig.axes[0]
    lines = {ln.get_label(): ln for ln in ax.lines if not ln.get_label().startswith("_")}
    assert set(lines) == {"E4M3 (mean of 3)", "E5M2 (mean of 3)"}           # no control, no hp
    # E5M2's gap at step 100: 0.0003 * 100 + 0.002 * mean(0, 1, 2) = 0.032 (paired: hp's seed offset cancels)
    x, y = lines["E5M2 (mean of 3)"].get_data()
    assert y[list(x).index(100)] == pytest.approx(0.032)
    band = ax.collections[0]                            # the first band: E4M3's seeds
    ys = band.get_paths()[0].vertices[:, 1]
    assert ys.min() == pytest.approx(-0.002) and ys.max() == pytest.approx(0.002)  # min..max over seeds, not sd
    assert [p.get_label() for p in ax.patches] == ["±δ = 0.01 nats"]


def test_gap_over_training_names_a_missing_baseline():
    with pytest.raises(ValueError, match=r"baseline 'bf16' not among the labels \['E4M3'"):
        ppub.gap_over_training(_seed_losses(), "bf16")


def test_forest_orders_rows_by_exponent_bits_and_marks_rows_without_a_ci():
    fig = ppub.forest(_forest_claims())
    ticks = [t.get_text().split("\n")[0] for t in fig.axes[0].get_yticklabels()]
    assert ticks == ["E1M6 [1 exp / 6 man bits]", "E4M3 [4 exp / 3 man bits]", "E5M2 [5 exp / 2 man bits]",
                     "E7M0 [7 exp / 0 man bits]", "fp8_hybrid"]
    assert "too few seeds (n=1, no CI)" in fig.axes[0].get_yticklabels()[2].get_text()
    # the label is the kind's short words (verdicts.short_words), never a cut of the table's `verdict` text
    said = [t.get_text().split("\n")[1] for t in fig.axes[0].get_yticklabels()]
    assert said == ["inconclusive (n=3)", "equivalent within ±0.01 (n=3)", "too few seeds (n=1, no CI)",
                    "worse (n=3)", "equivalent within ±0.01 (n=3)"]


def test_layer_grid_says_all_zero_instead_of_a_flat_line():
    fig = ppub.layer_grid(_format_diags())
    texts = {t.get_text() for ax in fig.axes for t in ax.texts}
    assert "all zero" in texts                         # overflow is 0 everywhere
    over = fig.axes[3 * 3 + 0]                          # row overflow, column X
    assert not over.lines and [t.get_text() for t in over.texts] == ["all zero"]
    assert len(fig.axes[0].lines) == 3                  # amax of X: one marker series per format
    assert fig.axes[0].get_yscale() == "log"


def test_scaled_weight_hist_shifts_by_the_measured_scale_and_draws_the_window():
    fig = ppub.scaled_weight_hist(_scaled_hist_diag(), "E4M3")
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in axes] == ["block 0 attn QKV", "block 0 attn out"]
    lefts = sorted(round(b.get_x(), 6) for b in axes[1].patches if b.get_height() > 0 and b.get_width() == 1.0)
    assert lefts == [6.0, 7.0, 8.0]                      # floor(log2|w|) -6..-4 shifted by log2 s = 12 ("scale")
    lines = sorted(ln.get_xdata()[0] for ln in axes[0].lines)
    assert lines == pytest.approx([-9.0, math.log2(448)])  # E4M3: min subnormal 2^-9, max 448
    assert "not scaled, left out: token embedding" in fig._suptitle.get_text()


def test_tensor_hist_draws_each_tensor_against_its_own_format_window():
    fig = ppub.tensor_hist(_tensor_hist_diag(), {"X": "E4M3", "W": "E4M3", "dY": "E5M2"})
    axes = np.array(fig.axes[:12]).reshape(3, 4)          # rows X, W, dY; columns the four layer classes
    assert [ax.get_title() for ax in axes[:, 0]] == ["input X (E4M3) · attn QKV", "weight W (E4M3) · attn QKV",
                                                     "output gradient dY (E5M2) · attn QKV"]
    assert [ax.get_title().split(" · ")[1] for ax in axes[0]] == ["attn QKV", "attn out", "MLP up", "MLP down"]
    def red(ax):
        return sorted(ln.get_xdata()[0] for ln in ax.lines)

    assert red(axes[0, 0]) == pytest.approx([-9.0, math.log2(448)])      # E4M3: 2^-9 .. 448
    assert red(axes[2, 0]) == pytest.approx([-16.0, math.log2(57344)])   # E5M2: 2^-16 .. 57344
    from matplotlib.patches import StepPatch

    steps = [p for p in axes[0, 0].patches if isinstance(p, StepPatch)]   # one line per block, the last step (40)
    assert len(steps) == 2
    vals, edges, _ = steps[0].get_data()
    d = _tensor_hist_diag()
    ref = d[(d.step == 40) & (d.layer == LAYERS[0]) & (d.role == "X")]
    assert edges[0] == ref.metric.str.split(":").str[1].astype(int).min()
    assert np.nansum(vals) == pytest.approx(1.0)


def test_tensor_hist_names_a_missing_histogram():
    with pytest.raises(ValueError, match="numerics monitor"):
        ppub.tensor_hist(_diag(), "E4M3")


def test_hp_block_gaps_pairs_by_seed_and_keeps_a_diverged_seed():
    g = ppub.hp_block_gaps(_hp_index())
    assert len(g) == 6 and set(g["where"]) == {"first", "last"} and set(g.k) == {1}
    last = g[g["where"] == "last"].sort_values("seed")
    assert last.gap.to_numpy() == pytest.approx([-0.02] * 3)   # the control and the schedule point are left out
    first = g[g["where"] == "first"].set_index("seed")
    assert first.loc[2, "diverged"] and math.isnan(first.loc[2, "gap"])
    assert first.loc[0, "gap"] == pytest.approx(-0.005)


def test_layer_sensitivity_orders_depth_and_means_over_the_blocks_linears():
    fig = ppub.layer_sensitivity(_sqnr_diags(), ppub.hp_block_gaps(_hp_index()))
    x_ax = fig.axes[0]
    assert [t.get_text() for t in x_ax.get_xticklabels()] == ["block 0", "block 1", "LM head"]
    e4m3 = x_ax.containers[1]                       # errorbar containers in run order: E2M5, E4M3, E7M0
    xs, ys = e4m3.lines[0].get_data()
    # block 0: X of four Linears at 30 + 0.5·(0..3), mean over steps 10, 20 adds 1.5
    assert list(xs) == [0.0, 1.0, 2.0] and ys[0] == pytest.approx(30 + 0.75 + 1.5)
    gap_ax = fig.axes[-1]
    assert any("1 diverged seed" in t.get_text() for t in gap_ax.get_legend().get_texts())
