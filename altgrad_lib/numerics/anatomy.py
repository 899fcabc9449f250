"""Format anatomy: binades, rounding error, ULP up/down (stiffness), stochastic-rounding bias/variance, and the
rounding SQNR a format's mantissa gives (expected_sqnr_db: what a measured per-tensor SQNR is compared with).

The numbers behind notebook 01's tables and figures; one row per observation (pandas), so they can be
printed, plotted and asserted on (tests/test_numerics_anatomy.py).
"""
from __future__ import annotations

import math
from typing import Iterable

import numpy as np
import pandas as pd
import torch

from altgrad_lib.numerics.formats import FloatFormat, get_format
from altgrad_lib.numerics.formats_tables import show_number


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
    def rel(q):
        return ((q.double() - x.double()).abs() / x.double()).numpy()

    return pd.DataFrame({"x": x.double().numpy(), "rel_err_rne": rel(q_rne), "rel_err_sr": rel(q_sr),
                         "region": np.where(x.numpy() < f.min_normal, "subnormal", "normal")})


def ulp_at_grid(fmt: FloatFormat | str) -> pd.DataFrame:
    """Grid spacing up (away from zero) and down (toward zero) at every positive value of the format.

    `ulp_*` is the stiffness S (absolute grid spacing, `FloatFormat.ulp(x, "up")`); `rel_ulp_*` =
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


def expected_sqnr_db(fmt: FloatFormat | str) -> float:
    """SQNR = Σx² / Σ(x − Q(x))² (dB) of round-to-nearest on an m-mantissa-bit grid for values spread log-uniformly
    over whole normal binades: in binade 2^e the error is uniform over ±ulp/2 (power ulp²/12, ulp = 2^(e−m)) and the
    signal power is 2^2e·E[s²] with E[s²] = 3 / (2 ln 2) for the significand s log-uniform on [1, 2), so
    SQNR = 10·log10(12 · 2^2m · 3 / (2 ln 2)) = 6.02·m + 14.14 dB, whatever the binades. Data that is not
    log-uniform moves it by a fraction of a dB; subnormals, flushes and saturation add noise on top."""
    m = get_format(fmt).mbits
    return 10 * math.log10(12 * 2.0 ** (2 * m) * 3 / (2 * math.log(2)))


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
