"""optim/state_codec.py through lowp_state.StateFormat: square-root-domain v against a float64 hand computation
rounded by ml_dtypes, unsigned formats against a hand-built grid, COAT range expansion invertible and within its
error bound, validation errors, bit-exact resume with the new options."""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
import torch

from altgrad_lib.optim.adamw import AdamW
from altgrad_lib.optim.config import OptimConfig
from altgrad_lib.optim.lowp_state import StateFormat
from altgrad_lib.optim.state_codec import contract, emax_pow2, expand, state_format


def _v(n=1000, seed=0):
    gen = torch.Generator().manual_seed(seed)
    g = torch.randn(n, generator=gen) * torch.logspace(-5, 0, n)
    v = g * g
    v[7] = 0.0
    return v


@pytest.mark.parametrize("block", [0, 256, 100])
def test_sqrt_domain_equals_float64_hand_computation_with_ml_dtypes_rounding(block):
    v = _v()
    sf = StateFormat(fmt="E4M3", block=block, transform="sqrt")
    got = sf.decode(*sf.encode(v), v)
    s = np.sqrt(v.double().numpy())                                     # float64 square root
    b = block or s.size
    want = np.empty_like(s)
    for i in range(0, s.size, b):
        blk = s[i:i + b]
        amax = blk.max()
        scale = 2.0 ** math.floor(math.log2(448.0 / amax)) if amax > 0 else 1.0
        q = (blk * scale).astype(ml_dtypes.float8_e4m3fn).astype(np.float64)   # RNE onto E4M3 (ml_dtypes)
        want[i:i + b] = (q / scale) ** 2
    assert np.array_equal(got.double().numpy(), want)
    assert float(got[7]) == 0.0


def test_amax_scale_equals_float32_hand_computation_with_ml_dtypes_rounding():
    v = _v(1024)
    sf = StateFormat(fmt="E4M3", block=256, scale="amax")
    codes, scale = sf.encode(v)
    got = sf.decode(codes, scale, v).numpy()
    x = v.numpy().reshape(-1, 256)
    s = scale.numpy()[:, None]
    # the scale is 448 / amax up to fp32 rounding (torch computes scalar / tensor as a reciprocal times 448)
    assert np.allclose(s, 448.0 / x.astype(np.float64).max(axis=1, keepdims=True), rtol=2.0**-22, atol=0)
    q = (x * s).astype(ml_dtypes.float8_e4m3fn).astype(np.float32)       # RNE onto E4M3 (ml_dtypes)
    assert np.array_equal(got, (q / s).reshape(-1))
    assert sf.short_str() == "e4m3fn/b256/rne/amax"


def test_amax_scale_follows_a_uniform_decay_that_pow2_scales_round_away():
    """v <- 0.999 v with no new gradient: every code stays; only the amax scale carries the decay."""
    v = _v(256)
    for scale, decays in (("pow2", False), ("amax", True)):
        sf = StateFormat(fmt="E5M2", block=256, scale=scale)
        x0 = x = sf.decode(*sf.encode(v), v)
        for _ in range(10):
            x = sf.decode(*sf.encode(x * 0.999), v)
        ratio = float(x.max() / x0.max())
        assert (abs(ratio - 0.999**10) < 1e-5) if decays else ratio == 1.0


def _unsigned_grid(e, m):
    """Every finite value of the unsigned generic E<e>M<m> (bias 2^(e-1)-1, subnormals, NaN = all-ones code)."""
    bias = 2 ** (e - 1) - 1
    vals = []
    for code in range((1 << (e + m)) - 1):                             # the last code is NaN
        ex, man = code >> m, code & ((1 << m) - 1)
        vals.append(man / 2**m * 2.0 ** (1 - bias) if ex == 0 else (1 + man / 2**m) * 2.0 ** (ex - bias))
    return np.array(vals)


def _rne(x, grid):
    """Round to nearest on a sorted grid, ties to the even code (index)."""
    i = np.clip(np.searchsorted(grid, x), 1, len(grid) - 1)
    lo, hi = grid[i - 1], grid[i]
    pick_hi = (x - lo > hi - x) | ((x - lo == hi - x) & (i % 2 == 0))
    return np.where(pick_hi, hi, lo)


@pytest.mark.parametrize("name, e, m", [("UE5M3", 5, 3), ("UE4M4", 4, 4)])
def test_unsigned_format_grid_and_rounding_by_hand(name, e, m):
    fmt = state_format(name)
    grid = _unsigned_grid(e, m)
    assert not fmt.signed and fmt.bits == 8 and fmt.max == grid.max()
    assert np.array_equal(fmt.values().numpy(), grid)
    v = _v()
    sf = StateFormat(fmt=name, block=0)
    got = sf.decode(*sf.encode(v), v).double().numpy()
    scale = 2.0 ** math.floor(math.log2(grid.max() / float(v.max())))
    assert np.array_equal(got, _rne(v.double().numpy() * scale, grid) / scale)


def test_range_expansion_is_invertible_and_fills_the_format():
    gen = torch.Generator().manual_seed(0)
    xb = torch.randn(4, 256, generator=gen, dtype=torch.float64) * torch.logspace(-2, 0, 256, dtype=torch.float64)
    xb[2] = 0.0                                                         # all-zero block: k = 1
    xb[3] = -0.5                                                        # one magnitude: k = 1
    fmt = state_format("E4M3")
    y, aux = expand(xb, fmt)
    assert torch.allclose(contract(y, aux, fmt), xb, rtol=1e-12, atol=0)
    a = y[:2].abs()
    assert torch.allclose(a.amax(1), torch.full((2,), emax_pow2(fmt), dtype=torch.float64))
    assert torch.allclose(a.amin(1), torch.full((2,), fmt.min_normal, dtype=torch.float64), rtol=1e-9)
    assert aux[2, 1] == 1 and aux[3, 1] == 1 and torch.equal(y[3], torch.full((256,), -emax_pow2(fmt), dtype=y.dtype))


def test_range_expansion_round_trip_error_bound():
    """Every y lies in the normal range, so |Q(y)/y - 1| <= 2^-(M+1) (RNE); x ~ y^(1/k) gives
    |x_hat/x - 1| <= (1 + 2^-(M+1))^(1/k) - 1 (or 1 - (1 - 2^-(M+1))^(1/k)), plus fp32 arithmetic."""
    gen = torch.Generator().manual_seed(1)
    sign = torch.randint(0, 2, (8, 256), generator=gen) * 2.0 - 1
    x = sign * 2.0 ** (-3 * torch.rand(8, 256, generator=gen))          # 3 binades: k = 14 / 3 for E4M3
    sf = StateFormat(fmt="E4M3", block=256, transform="expand")
    codes, aux = sf.encode(x)
    assert aux.shape == (8, 2)
    got = sf.decode(codes, aux, x).view(8, 256)
    u = 2.0 ** -4
    k = aux[:, 1:2].double()
    bound = torch.maximum((1 + u) ** (1 / k) - 1, 1 - (1 - u) ** (1 / k)) + 1e-5
    assert bool(((got.double() / x.double() - 1).abs() <= bound).all())
    plain = StateFormat(fmt="E4M3", block=256)
    err_plain = float((plain.decode(*plain.encode(x), x) - x).norm() / x.norm())
    err_exp = float((got - x).norm() / x.norm())
    assert err_exp < err_plain                                          # k > 1: the bound above is k times tighter


def test_validation_errors_are_one_line_and_name_the_choices():
    for kw, match in [({"transform": "cube"}, r"valid choices: \('none', 'sqrt', 'expand'\)"),
                      ({"scale": "e8m0"}, r"valid choices: \('pow2', 'amax'\)"),
                      ({"fmt": "UE5M2"}, "x \\+ y = 8"), ({"fmt": "UE0M8"}, "x >= 1")]:
        with pytest.raises(ValueError, match=match) as ei:
            StateFormat(**kw)
        assert "\n" not in str(ei.value)
    with pytest.raises(ValueError, match="valid choices: \\('none', 'sqrt', 'expand'\\)"):
        OptimConfig.from_dict("adamw", {"state_v_transform": "log"})
    with pytest.raises(ValueError, match="valid choices: \\('pow2', 'amax'\\)"):
        OptimConfig.from_dict("adamw", {"state_scale": "max"})
    with pytest.raises(ValueError, match="unsigned .* only for state_v"):
        AdamW([torch.nn.Parameter(torch.zeros(4096))], state_m="UE5M3")
    oc = OptimConfig.from_dict("grid_adamw", {"state_v": "UE5M3", "state_v_transform": "sqrt"})
    assert oc.state_m_transform == "none" and oc.state_v_transform == "sqrt"


@pytest.mark.parametrize("state_m, state_v", [
    ({"fmt": "E4M3", "transform": "expand", "rounding": "stochastic"}, {"fmt": "E4M3", "transform": "expand"}),
    ("E4M3", {"fmt": "UE4M4", "transform": "sqrt", "rounding": "stochastic"}),
    ({"fmt": "E4M3", "scale": "amax"}, {"fmt": "E5M2", "scale": "amax", "rounding": "stochastic"}),
])
def test_resume_is_bit_exact_with_transforms(state_m, state_v):
    from test_optim_base import _check_resume, _model_params   # noqa: F401  (the shared resume harness)

    def make(ps):
        return AdamW([{"params": ps[:2], "weight_decay": 0.01}, {"params": ps[2:]}], lr=1e-2, seed=5,
                     state_m=state_m, state_v=state_v)
    opt, _ = _check_resume(make, 3)
    st = opt.state[opt.param_groups[0]["params"][0]]
    assert "m_codes" in st and "v_codes" in st and "m" not in st


def test_adamw_with_transformed_states_tracks_fp32_states():
    """Same gradients: the direction with sqrt-domain / expanded 8-bit states stays near the fp32-state one
    (one-step quantization only: a few % of the norm, see the module docstrings for the per-element bounds)."""
    gen = torch.Generator().manual_seed(0)
    a = torch.nn.Parameter(torch.randn(64, 80, generator=gen) * 0.02)
    b = torch.nn.Parameter(a.detach().clone())
    oa = AdamW([a], lr=1e-3)
    ob = AdamW([b], lr=1e-3, state_m={"fmt": "E4M3", "transform": "expand"},
               state_v={"fmt": "E4M3", "transform": "sqrt"})
    g = torch.randn(64, 80, generator=gen)
    a.grad, b.grad = g, g.clone()
    w0 = a.detach().clone()
    oa.step()
    ob.step()
    rel = float(((b - w0) - (a - w0)).norm() / (a - w0).norm())
    assert rel < (1 + 2.0**-4) / (1 - 2.0**-4) - 1    # per-element worst case, m and sqrt(v) normal in E4M3
