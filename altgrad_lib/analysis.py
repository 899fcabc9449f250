"""Notebook helpers: the computations behind every table and figure in `notebooks/`.

A notebook cell should be a line or two calling one function here (numbers) and one in `plots.py`
(figures). Everything returns a pandas DataFrame with one row per observation so that the same
tables can be printed, plotted, saved, and asserted on in `tests/test_analysis.py`.

Sections
  - provenance             : the banner every notebook prints first
  - format anatomy         : binades, rounding error, ULP up/down, stochastic-rounding bias/variance
  - oracle agreement       : our rounding vs torch float8 dtypes, ml_dtypes and gfloat on all bf16 patterns
  - SQNR                   : signal-to-quantization-noise ratio, per Linear layer vs an FP32 copy
  - runs and corpora       : metric tables, corpus statistics, loss gaps, throughput
  - training notebooks     : TrainConfig from notebook globals, model summary, trained-model loading,
                             variants x seeds, SQNR per backend

Candidates to move into other modules later (kept here so notebooks stay thin): `gpt_config` and
`load_trained_model` (train.py/checkpoint.py), `Reference`/`oracle_agreement` (a formats test helper).
"""
from __future__ import annotations

import copy
import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import numpy as np
import pandas as pd
import torch

from altgrad_lib.formats import BUILTIN_FORMATS, FloatFormat, get_format, show_number
from altgrad_lib.oracles import gfloat_format_info  # noqa: F401  (used by notebook 01)
from altgrad_lib.quant import sqnr_db  # noqa: F401  (one copy; notebooks call analysis.sqnr_db)

# ----------------------------------------------------------------------------------------------------
# provenance


def git_sha(short: bool = True) -> str:
    """SHA of HEAD plus '-dirty' when tracked files differ (runs.git_info; 'unknown' without git)."""
    from altgrad_lib.runs import git_info

    info = git_info()
    sha = info["sha"][:12] if short and info["sha"] != "unknown" else info["sha"]
    return sha + ("-dirty" if info["dirty"] else "")


def params_hash(params: Mapping[str, Any]) -> str:
    """Stable 12-hex hash of a parameter dict (sorted JSON), for notebooks without a run."""
    blob = json.dumps(dict(params), sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def provenance_banner(params: Mapping[str, Any], run: Any | None = None) -> str:
    """One block of text for the first output cell: versions, SHA, seed, parameter/config hash."""
    import altgrad_lib

    lines = [f"altgrad {altgrad_lib.__version__} | git {git_sha()} | torch {torch.__version__} "
             f"| numpy {np.__version__} | threads {torch.get_num_threads()}",
             f"seed {params.get('seed', '-')} | params hash {params_hash(params)}"]
    if run is not None:
        prov = getattr(run, "provenance", None) or {}
        lines.append(f"run {Path(run.dir).name} | status {getattr(run, 'status', '?')} "
                     f"| config hash {str(prov.get('config_hash', '?'))[:12]}")
    lines.append("params: " + ", ".join(f"{k}={v}" for k, v in params.items()))
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------------
# format anatomy


def positive_values(fmt: FloatFormat | str) -> np.ndarray:
    """Strictly positive finite values of the format, ascending (float64)."""
    v = get_format(fmt).values().double().numpy()
    return v[v > 0]


def binade_counts(fmt: FloatFormat | str) -> pd.DataFrame:
    """Number of positive values in each binade [2^e, 2^(e+1)); subnormal binades hold fewer."""
    f = get_format(fmt)
    v = positive_values(f)
    e = np.floor(np.log2(v)).astype(int)
    df = pd.Series(e).value_counts().sort_index().rename_axis("exponent").reset_index(name="n_values")
    df["region"] = np.where(df.exponent < f.emin, "subnormal", "normal")
    df["lo"] = np.exp2(df.exponent.astype(float))
    return df


def log_uniform(lo: float, hi: float, n: int, seed: int = 0) -> torch.Tensor:
    """n float32 magnitudes log-uniform in [lo, hi), sorted, from a seeded generator."""
    g = torch.Generator().manual_seed(seed)
    u = torch.rand(n, generator=g, dtype=torch.float64)
    x = torch.exp2(math.log2(lo) + u * (math.log2(hi) - math.log2(lo)))
    return x.sort().values.float()


def rounding_error(fmt: FloatFormat | str, n: int = 20_000, seed: int = 0) -> pd.DataFrame:
    """Relative error |Q(x) - x| / |x| of round-to-nearest-even and one stochastic-rounding draw.

    x is log-uniform from a quarter of the smallest subnormal to the largest value, so the curve shows
    the flat ~2^-(m+1) band of normals, the 1/|x| growth across subnormals and total underflow.
    """
    f = get_format(fmt)
    x = log_uniform(f.min_subnormal / 4, f.max, n, seed)
    g = torch.Generator().manual_seed(seed + 1)
    q_rne = f.quantize(x, rounding="nearest")
    q_sr = f.quantize(x, rounding="stochastic", generator=g)
    rel = lambda q: ((q.double() - x.double()).abs() / x.double()).numpy()  # noqa: E731
    return pd.DataFrame({"x": x.double().numpy(), "rel_err_rne": rel(q_rne), "rel_err_sr": rel(q_sr),
                         "region": np.where(x.numpy() < f.min_normal, "subnormal", "normal")})


def ulp_at_grid(fmt: FloatFormat | str) -> pd.DataFrame:
    """Grid spacing up (away from zero) and down (toward zero) at every positive value of the format.

    `ulp_*` is the plan's stiffness S (absolute grid spacing, `FloatFormat.stiffness`); `rel_ulp_*` =
    ulp / |w| is the smallest relative update that can move a weight stored in this format: an update
    below half of it is rounded away under RNE. At a binade boundary 2^e the down spacing is half the
    up spacing, so shrinking a weight is easier than growing it; in the subnormal region the spacing is
    constant and the relative spacing grows as 1/|w|.
    """
    f = get_format(fmt)
    w = torch.from_numpy(positive_values(f)).float()
    up = f.ulp(w, direction="up").double().numpy()
    down = f.ulp(w, direction="down").double().numpy()
    wd = w.double().numpy()
    return pd.DataFrame({"w": wd, "ulp_up": up, "ulp_down": down, "rel_ulp_up": up / wd,
                         "rel_ulp_down": down / wd,
                         "region": np.where(wd < f.min_normal, "subnormal", "normal")})


def sr_probe_points(fmt: FloatFormat | str, fracs: Iterable[float] = (0.1, 0.3, 0.5, 0.8)) -> pd.DataFrame:
    """Points between adjacent grid values at fixed fractions, across subnormal, normal and top binades.

    Returns columns x, lo, hi, frac, region. Fixed (not random) points make the Monte Carlo table
    deterministic and comparable across formats.
    """
    f = get_format(fmt)
    v = positive_values(f)
    anchors = {"subnormal": f.min_subnormal, "min_normal": f.min_normal, "one": 1.0, "near_max": v[-2]}
    rows = []
    for name, a in anchors.items():
        i = int(np.searchsorted(v, a))
        if i + 1 >= len(v) or (name == "subnormal" and a >= f.min_normal):
            continue  # e.g. no subnormals, or 1.0 is the top value of a tiny format
        lo, hi = v[i], v[i + 1]
        for fr in fracs:
            rows.append({"anchor": name, "lo": lo, "hi": hi, "frac": fr, "x": lo + fr * (hi - lo)})
    df = pd.DataFrame(rows).drop_duplicates(subset="x").reset_index(drop=True)
    # keep only points exactly representable in float32 (the dtype we quantize from)
    df["x"] = df["x"].astype(np.float32).astype(np.float64)
    df["frac"] = (df.x - df.lo) / (df.hi - df.lo)
    return df


def sr_bias_variance(fmt: FloatFormat | str, n_samples: int = 4096, seed: int = 0,
                     sr_bits: int | None = None) -> pd.DataFrame:
    """Monte Carlo check of stochastic rounding: E[Q(x)] = x and Var[Q(x)] = ulp^2 p (1 - p).

    p = (x - lo) / ulp is the probability of rounding up. `bias_z` is the bias in units of its standard
    error sqrt(Var/n); |bias_z| < 3 for all points is what an unbiased SR looks like.
    """
    f = get_format(fmt)
    pts = sr_probe_points(f)
    x = torch.tensor(pts.x.to_numpy(), dtype=torch.float32)
    g = torch.Generator().manual_seed(seed)
    q = f.quantize(x.expand(n_samples, -1).contiguous(), rounding="stochastic", generator=g,
                   sr_bits=sr_bits).double()  # (n_samples, n_points)
    ulp = (pts.hi - pts.lo).to_numpy()
    p = pts.frac.to_numpy()
    out = pts.assign(mean=q.mean(0).numpy(), var=q.var(0).numpy(), p_up=(q > x.double()).double().mean(0).numpy())
    out["bias_ulp"] = (out["mean"] - out.x) / ulp
    out["var_theory"] = ulp**2 * p * (1 - p)
    out["var_ratio"] = out["var"] / out.var_theory
    out["bias_z"] = (out["mean"] - out.x) / np.sqrt(out.var_theory / n_samples)
    return out


def format_overview(fmt: FloatFormat | str) -> pd.DataFrame:
    """One-column table of the numbers a reader wants first: range, precision, code usage."""
    f = get_format(fmt)
    return pd.DataFrame({"value": {
        "name": f.name, "short": f.short_str(), "bits": f.bits, "bias": f.bias, "specials": f.specials,
        "max": show_number(f.max), "min_normal": show_number(f.min_normal) if f.has_normals else "none",
        "min_subnormal": show_number(f.min_subnormal),
        "emin": f.emin, "emax": f.emax, "finite codes": f.n_finite,
        "binades (max/min_subnormal)": round(math.log2(f.max / f.min_subnormal), 2),
        "unit roundoff 2^-(m+1)": 2.0 ** -(f.mbits + 1)}})


# ----------------------------------------------------------------------------------------------------
# oracle agreement


@dataclass(frozen=True)
class Reference:
    """An independent implementation of one convention: (ebits, mbits, bias, specials)."""
    library: str  # "torch" | "ml_dtypes"
    dtype_name: str
    ebits: int
    mbits: int
    bias: int
    specials: str
    signed: bool = True
    subnormals: bool = True

    @property
    def convention(self) -> tuple:
        return (self.ebits, self.mbits, self.bias, self.specials, self.signed, self.subnormals)

    @property
    def label(self) -> str:
        return f"{self.library}.{self.dtype_name}"

    def cast(self, x: torch.Tensor) -> torch.Tensor:
        """float32 -> reference dtype -> float32 (round-to-nearest-even, the library's overflow rule)."""
        if self.library == "torch":
            return x.to(getattr(torch, self.dtype_name)).float()
        import ml_dtypes

        return torch.from_numpy(x.numpy().astype(getattr(ml_dtypes, self.dtype_name)).astype(np.float32))


REFERENCES = (
    Reference("torch", "float8_e4m3fn", 4, 3, 7, "fn"),
    Reference("torch", "float8_e5m2", 5, 2, 15, "ieee"),
    Reference("torch", "float8_e4m3fnuz", 4, 3, 8, "fnuz"),
    Reference("torch", "float8_e5m2fnuz", 5, 2, 16, "fnuz"),
    Reference("ml_dtypes", "float8_e4m3fn", 4, 3, 7, "fn"),
    Reference("ml_dtypes", "float8_e5m2", 5, 2, 15, "ieee"),
    Reference("ml_dtypes", "float8_e4m3", 4, 3, 7, "ieee"),
    Reference("ml_dtypes", "float8_e3m4", 3, 4, 3, "ieee"),
    Reference("ml_dtypes", "float8_e4m3fnuz", 4, 3, 8, "fnuz"),
    Reference("ml_dtypes", "float8_e5m2fnuz", 5, 2, 16, "fnuz"),
    Reference("ml_dtypes", "float8_e4m3b11fnuz", 4, 3, 11, "fnuz"),
    Reference("ml_dtypes", "float6_e2m3fn", 2, 3, 1, "none"),
    Reference("ml_dtypes", "float6_e3m2fn", 3, 2, 3, "none"),
    Reference("ml_dtypes", "float4_e2m1fn", 2, 1, 1, "none"),
    Reference("torch", "float8_e8m0fnu", 8, 0, 127, "fn", signed=False, subnormals=False),
    Reference("ml_dtypes", "float8_e8m0fnu", 8, 0, 127, "fn", signed=False, subnormals=False),
)


def matching_references(fmt: FloatFormat | str) -> list[Reference]:
    """References whose convention is exactly the format's (same grid, same special codes)."""
    f = get_format(fmt)
    key = (f.ebits, f.mbits, f.bias, f.specials, f.signed, f.subnormals)
    return [r for r in REFERENCES if r.convention == key]


def all_bf16_values(finite_only: bool = True) -> torch.Tensor:
    """Every bf16 bit pattern as float32 (65536 patterns; 65280 finite)."""
    bits = torch.from_numpy(np.arange(2**16, dtype=np.uint16).view(np.int16))
    x = bits.view(torch.bfloat16).float()
    return x[torch.isfinite(x)] if finite_only else x


def count_mismatches(ours: torch.Tensor, ref: torch.Tensor, check_zero_sign: bool = True) -> int:
    """Elements that differ in value (NaN == NaN counts as agreement) or, optionally, in the sign of zero."""
    a, b = ours.double(), ref.double()
    same = (a == b) | (torch.isnan(a) & torch.isnan(b))
    if check_zero_sign:
        same &= ~((a == 0) & (b == 0) & (torch.signbit(a) != torch.signbit(b)))
    return int((~same).sum())


def oracle_agreement(formats: Iterable[FloatFormat | str] | None = None,
                     include_gfloat: bool = True) -> pd.DataFrame:
    """Our round-to-nearest-even against every independent implementation of the same convention.

    Inputs: all 65280 finite bf16 bit patterns (NaN/inf inputs are left out because libraries differ
    in policy there, e.g. torch saturates inf to 448 for e4m3fn while ml_dtypes returns NaN).
    Each reference's overflow rule (saturate or not) is detected by casting 2^100, and our
    quantizer runs with the same `saturate`, so mismatches measure rounding, not policy.
    gfloat is configured to the format's convention and run saturating (gfloat cannot express
    non-saturating casts for formats without inf/NaN).
    """
    x_all = all_bf16_values()
    huge = torch.tensor([torch.finfo(torch.float32).max])
    rows = []
    for fmt in formats if formats is not None else BUILTIN_FORMATS.values():
        f = get_format(fmt)
        # unsigned formats: negative inputs and zero are outside the format (policy, not rounding)
        x = x_all if f.signed else x_all[x_all > 0]
        domain = "finite" if f.signed else "finite > 0"
        zero_sign = f.specials != "fnuz"  # fnuz has no -0 code: its zero is unsigned by definition
        for ref in matching_references(f):
            sat = bool(torch.isfinite(ref.cast(huge)).all())
            ours = f.quantize(x, rounding="nearest", saturate=sat)
            rows.append({"format": f.name, "reference": ref.label, "saturate": sat, "inputs": domain,
                         "n_inputs": x.numel(), "mismatches": count_mismatches(ours, ref.cast(x), zero_sign)})
        if include_gfloat:
            import gfloat

            ref_x = gfloat.round_ndarray(gfloat_format_info(f), x.double().numpy(), sat=True)
            ours = f.quantize(x, rounding="nearest", saturate=True)
            rows.append({"format": f.name, "reference": "gfloat.round_ndarray", "saturate": True, "inputs": domain,
                         "n_inputs": x.numel(),
                         "mismatches": count_mismatches(ours, torch.from_numpy(ref_x), zero_sign)})
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------------------------------
# SQNR


def _capture_linears(model: torch.nn.Module) -> tuple[dict[str, dict[str, torch.Tensor]], list]:
    """Forward/backward hooks on every nn.Linear storing output Y and input gradient dX."""
    store: dict[str, dict[str, torch.Tensor]] = {}
    handles = []
    for name, mod in model.named_modules():
        if not isinstance(mod, torch.nn.Linear):
            continue
        store[name] = {}

        def fwd(m, inp, out, name=name):
            store[name]["out"] = out.detach().float().clone()

        def bwd(m, grad_in, grad_out, name=name):
            if grad_in[0] is not None:
                store[name]["grad_in"] = grad_in[0].detach().float().clone()

        handles += [mod.register_forward_hook(fwd), mod.register_full_backward_hook(bwd)]
    return store, handles


def layer_sqnr(model_ref: torch.nn.Module, model_test: torch.nn.Module, x: torch.Tensor,
               y: torch.Tensor) -> pd.DataFrame:
    """Per-Linear SQNR (dB) of output Y, input gradient dX and weight gradient dW, test vs reference.

    Both models run one forward/backward on the same batch; errors include everything upstream, so the
    table shows how quantization noise accumulates through depth (forward) and back (backward).
    """
    tables = []
    for model in (model_ref, model_test):
        model.zero_grad(set_to_none=True)
        store, handles = _capture_linears(model)
        try:
            _, loss = model(x, y)
            loss.backward()
        finally:
            for h in handles:
                h.remove()
        for name, mod in model.named_modules():
            if name in store and mod.weight.grad is not None:
                store[name]["grad_w"] = mod.weight.grad.detach().float().clone()
        tables.append(store)
    ref, test = tables
    rows = []
    for name in ref:
        if name not in test:
            continue
        row = {"layer": name}
        for key, col in (("out", "out_sqnr_db"), ("grad_in", "grad_in_sqnr_db"), ("grad_w", "grad_w_sqnr_db")):
            if key in ref[name] and key in test[name]:
                row[col] = sqnr_db(ref[name][key], test[name][key])
        rows.append(row)
    return pd.DataFrame(rows)


def quantized_copy_sqnr(model: torch.nn.Module, policy: Any, x: torch.Tensor, y: torch.Tensor,
                        convert: Callable[[torch.nn.Module, Any], Any] | None = None) -> pd.DataFrame:
    """layer_sqnr of a quantized deep copy of `model` against an FP32 deep copy of the same weights.

    `convert(copy, policy)` quantizes the copy in place; by default `surgery.quantize_model`.
    """
    if convert is None:
        from altgrad_lib.surgery import quantize_model

        convert = lambda m, p: quantize_model(m, p, verbose=False)  # noqa: E731
    model_fp32 = copy.deepcopy(model).float()
    model_q = copy.deepcopy(model).float()
    convert(model_q, policy)
    return layer_sqnr(model_fp32, model_q, x, y)


# ----------------------------------------------------------------------------------------------------
# runs and corpora


def corpus_summary(tc: Any) -> pd.DataFrame:
    """TokenCorpus.summary() as a readable table (statistic x split); entropy in nats/token."""
    s = tc.summary()
    rows = {}
    for k in ("docs", "chars", "tokens"):
        rows[k] = {sp: f"{int(s[f'{sp}_{k}']):,}" for sp in ("train", "val")}
    for k in ("bytes_per_token", "unigram_entropy"):
        rows[k] = {sp: f"{s[f'{sp}_{k}']:.3f}" for sp in ("train", "val")}
    rows["unigram_perplexity"] = {sp: f"{math.exp(s[f'{sp}_unigram_entropy']):.1f}" for sp in ("train", "val")}
    df = pd.DataFrame(rows).T
    df.attrs["title"] = f"{s['corpus']} / {s['tokenizer']} (vocab {s['vocab_size']})"
    return df


def metrics_wide(run: Any) -> pd.DataFrame:
    """Run metrics (long table step,name,value) pivoted to one row per step, one column per metric."""
    m = run.metrics if isinstance(run.metrics, pd.DataFrame) else pd.read_csv(Path(run.dir) / "metrics.csv")
    return m.pivot_table(index="step", columns="name", values="value", aggfunc="last").reset_index()


def find_metric(columns: Iterable[str], *candidates: str) -> str | None:
    """First metric name present among `candidates` (train.py's names), else None."""
    cols = set(columns)
    return next((c for c in candidates if c in cols), None)


VAL_LOSS = ("val/loss", "val_loss", "loss/val")
TRAIN_LOSS = ("train/loss", "train_loss", "loss/train", "loss")
THROUGHPUT = ("perf/tokens_per_s", "tokens_per_s", "throughput/tokens_per_s", "tok/s", "tokens_per_sec")


def loss_table(runs: Mapping[str, Any]) -> pd.DataFrame:
    """Long table (label, step, split, loss) of train and val loss for several runs."""
    frames = []
    for label, run in runs.items():
        w = metrics_wide(run)
        for split, names in (("train", TRAIN_LOSS), ("val", VAL_LOSS)):
            col = find_metric(w.columns, *names)
            if col is not None:
                d = w[["step", col]].dropna().rename(columns={col: "loss"})
                frames.append(d.assign(label=label, split=split))
    return pd.concat(frames, ignore_index=True)[["label", "step", "split", "loss"]]


def run_summary(runs: Mapping[str, Any], baseline: str | None = None) -> pd.DataFrame:
    """Final train/val loss, perplexity, median throughput and (optionally) % gap to a baseline run.

    A diverged run has no final loss (NaN): its last logged val/loss predates the divergence (e.g. step 0)."""
    rows = []
    for label, run in runs.items():
        w = metrics_wide(run)
        row: dict[str, Any] = {"run": label}
        diverged = bool(getattr(run, "diverged", False))
        for key, names in (("final_train_loss", TRAIN_LOSS), ("final_val_loss", VAL_LOSS)):
            col = find_metric(w.columns, *names)
            row[key] = float(w[col].dropna().iloc[-1]) if col and not diverged else math.nan
        row["val_ppl"] = math.exp(row["final_val_loss"])
        col = find_metric(w.columns, *THROUGHPUT)
        row["tokens_per_s"] = float(w[col].dropna().median()) if col else math.nan
        row["diverged"] = bool(getattr(run, "diverged", False))
        rows.append(row)
    df = pd.DataFrame(rows)
    if baseline is not None:
        base = df.loc[df.run == baseline, "final_val_loss"].iloc[0]
        df["val_gap_pct"] = 100 * (df.final_val_loss - base) / base
    return df


# ----------------------------------------------------------------------------------------------------
# training notebooks (02, 03)


def train_config_from(namespace: Mapping[str, Any], **overrides: Any):
    """TrainConfig from the notebook's parameter globals: every name that is a TrainConfig field.

    nanoGPT-style: the papermill parameters cell *is* the config, and a params/*.yaml maps 1:1 onto it.
    """
    from altgrad_lib.train import TrainConfig

    d = {k: namespace[k] for k in TrainConfig.keys() if k in namespace}
    return TrainConfig.from_dict({**d, **overrides})


def gpt_config(cfg: Any, vocab_size: int):
    """The GPTConfig that train() builds for a TrainConfig."""
    from altgrad_lib.model import GPTConfig

    return GPTConfig(block_size=cfg.block_size, vocab_size=vocab_size, n_layer=cfg.n_layer, n_head=cfg.n_head,
                     n_embd=cfg.n_embd, dropout=cfg.dropout, bias=cfg.bias, mlp=cfg.mlp,
                     tie_weights=cfg.tie_weights)


def model_summary(cfg: Any, vocab_size: int) -> pd.DataFrame:
    """Shape and parameter counts of the model a TrainConfig trains (built on CPU, not trained)."""
    from altgrad_lib.model import GPT

    model = GPT(gpt_config(cfg, vocab_size))
    total, non_emb = model.num_params(), model.num_params(non_embedding=True)
    n_linear = sum(isinstance(m, torch.nn.Linear) for m in model.modules())
    return pd.DataFrame({"value": {
        "layers x heads x width": f"{cfg.n_layer} x {cfg.n_head} x {cfg.n_embd}", "context": cfg.block_size,
        "vocab": vocab_size, "wte / lm_head rows (padded)": model.config.padded_vocab_size, "mlp": cfg.mlp, "params": total, "params (non-embedding)": non_emb,
        "Linear layers": n_linear, "tokens / step": cfg.batch_size * cfg.block_size,
        "tokens seen": cfg.batch_size * cfg.block_size * cfg.max_steps}})


def load_trained_model(run: Any, vocab_size: int):
    """The GPT of a finished high-precision run with its final weights (checkpoints/last.pt), in eval mode."""
    from altgrad_lib.checkpoint import load_checkpoint
    from altgrad_lib.model import GPT

    model = GPT(gpt_config(run.config, vocab_size))
    model.load_state_dict(load_checkpoint(Path(run.dir) / "checkpoints" / "last.pt")["model"])
    return model.eval()


def throughput(runs: Mapping[str, Any], skip: int = 5) -> pd.Series:
    """Median tokens/s per run, ignoring the first `skip` steps (allocation, compile warm-up)."""
    out = {}
    for label, run in runs.items():
        w = metrics_wide(run)
        col = find_metric(w.columns, *THROUGHPUT)
        out[label] = float(w.loc[w.step > skip, col].dropna().median()) if col else math.nan
    return pd.Series(out, name="tokens_per_s")


def train_variants(cfg: Any, variants: Mapping[str, Mapping[str, Any]], seeds: Iterable[int],
                   **train_kwargs: Any) -> dict[str, Any]:
    """Train (or reuse) cfg with each variant's overrides for each seed; keys "<label> s<seed>".

    train() returns an existing completed run with the same config hash, so a baseline trained by
    notebook 02 is reused here rather than retrained.
    """
    from altgrad_lib.train import train

    runs = {}
    for seed in seeds:
        for label, overrides in variants.items():
            runs[f"{label} s{seed}"] = train(cfg.replace(seed=int(seed), **overrides), **train_kwargs)
    return runs


def seed_table(summary: pd.DataFrame, value: str = "val_gap_pct") -> pd.DataFrame:
    """Mean, std and count over seeds of one summary column, per variant (run labels "<variant> s<seed>")."""
    variant = summary.run.str.replace(r" s\d+$", "", regex=True)
    return summary.groupby(variant)[value].agg(["mean", "std", "count"]).rename_axis("variant")


def sqnr_by_backend(model: torch.nn.Module, recipe: Any, backends: Iterable[str], x: torch.Tensor,
                    y: torch.Tensor, seed: int = 0) -> pd.DataFrame:
    """layer_sqnr of `recipe` through each backend vs FP32, stacked with a `backend` column."""
    from altgrad_lib.surgery import get_policy

    frames = [quantized_copy_sqnr(model, get_policy(recipe, backend=b, seed=seed), x, y).assign(backend=b)
              for b in backends]
    return pd.concat(frames, ignore_index=True)
