"""Tests for altgrad_lib.monitors.health: TE's underflow/overflow definitions and the other health metrics
on synthetic tensors, checked against numpy / ml_dtypes counts."""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
import torch

from altgrad_lib.numerics.formats import get_format
from altgrad_lib.monitors.health import tensor_health
from altgrad_lib.numerics.quant import sqnr_db

E4M3 = get_format("E4M3")


def _synthetic() -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1000, generator=g)
    x[:50] = 0.0                                     # zeros before quantization
    x[50:120] = torch.rand(70, generator=g) * 2.0 ** -10   # below half the smallest subnormal (2^-9 / 2)
    x[120:160] = 500 + torch.rand(40, generator=g) * 100   # beyond E4M3's max 448
    x[160:170] = 2.0 ** -7 * (1 + torch.rand(10, generator=g))   # subnormal range [2^-9, 2^-6)
    x[170], x[171], x[172] = math.nan, math.inf, -math.inf
    return x


def _te_reference(x: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """TransformerEngine's LogFp8TensorStats definitions, written out with numpy."""
    n = x.size
    return {"underflow_frac": (np.count_nonzero(y == 0) - np.count_nonzero(x == 0)) / n,
            "flush_frac": np.count_nonzero((x != 0) & (y == 0)) / n}


@pytest.mark.parametrize("scale", [1.0, 1.5])
def test_health_matches_independent_counts(scale):
    x = _synthetic()
    s = torch.tensor(scale)
    y = E4M3.quantize(x * s) / s
    h = {k: float(v) for k, v in tensor_health(x, y, s, E4M3, eps_hits=3).items()}
    xn = x.numpy().astype(np.float64)
    prod = x.numpy() * np.float32(scale)                                     # float32 x·s, as the library
    xs = np.clip(np.nan_to_num(prod, posinf=448, neginf=-448), -448, 448)
    ref_q = xs.astype(ml_dtypes.float8_e4m3fn).astype(np.float32)          # independent rounding
    ref_q[np.isnan(xn)] = np.nan
    yn = (ref_q / np.float32(scale)).astype(np.float64)
    assert np.array_equal(np.nan_to_num(y.double().numpy(), nan=7.0), np.nan_to_num(yn, nan=7.0))
    ref = _te_reference(xn, yn)
    assert h["underflow_frac"] == pytest.approx(ref["underflow_frac"], abs=0)
    assert h["flush_frac"] == pytest.approx(ref["flush_frac"], abs=0)
    assert h["underflow_frac"] > 0.03   # the synthetic tensor does underflow (guards against a vacuous pass)
    finite = np.isfinite(xn)
    assert h["overflow_frac"] == pytest.approx(np.count_nonzero(finite & (np.abs(xn * scale) > 448)) / xn.size, abs=0)
    assert h["overflow_frac"] >= 0.04
    sub = np.count_nonzero((ref_q != 0) & (np.abs(ref_q) < 2.0 ** -6) & np.isfinite(ref_q))
    assert h["subnormal_frac"] == pytest.approx(sub / xn.size, abs=0) and sub > 0
    assert (h["nan_in"], h["inf_in"], h["nan_out"]) == (1, 2, 1)
    assert h["inf_out"] == 0            # E4M3 saturates: inf -> ±448
    both = np.isfinite(xn) & np.isfinite(yn)
    assert h["mse"] == pytest.approx(np.mean((xn[both] - yn[both]) ** 2), rel=1e-6)   # float32 squares
    assert h["amax"] == np.abs(xn[finite]).max() and h["scale"] == scale and h["eps_hits"] == 3
    both = np.isfinite(xn) & np.isfinite(yn)
    # rel 1e-6: float32 squares
    assert h["sqnr_db"] == pytest.approx(sqnr_db(torch.from_numpy(xn[both]), torch.from_numpy(yn[both])), rel=1e-6)


def test_underflow_is_te_definition_not_flush_when_zeros_appear_and_vanish():
    # a zero input stays zero; TE counts net new zeros, flush counts non-zero inputs that became zero
    x = torch.tensor([0.0, 0.0, 1e-6, 1.0])
    y = torch.tensor([0.0, 0.0, 0.0, 1.0])
    h = tensor_health(x, y, 1.0, E4M3)
    assert float(h["underflow_frac"]) == 0.25 and float(h["flush_frac"]) == 0.25
    assert float(h["amax"]) == 1.0 and float(h["sqnr_db"]) == pytest.approx(10 * math.log10(1 / 1e-12), rel=1e-6)


def test_formats_without_subnormals_report_none():
    e8 = get_format("E8M0FNU")
    x = torch.tensor([2.0 ** -120, 1.0, 4.0])
    assert float(tensor_health(x, e8.quantize(x), 1.0, e8)["subnormal_frac"]) == 0.0
