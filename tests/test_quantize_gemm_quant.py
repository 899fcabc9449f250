"""GEMM-faithful QuantizedLinear (altgrad_lib.quantize.gemm_quant): each GEMM's operands quantized along its own
reduction dim, checked bit for bit against a hand-written reference of the three GEMMs; per-tensor specs
bit-identical to the classic QuantizedLinear path; random Hadamard transform exactness; resume."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn

from altgrad_lib.quantize.gemm_quant import GemmOptions, apply_rht, hadamard, rht_matrix, rht_signs
from altgrad_lib.numerics.quant_spec import QuantSpec
from altgrad_lib.quantize.recipes import LayerSpec
from altgrad_lib.quantize.linear import QuantizedLinear
from helpers import gemm_data as data, gemm_layer as make, gemm_step as run, q_along, rot_along as rot

NV = {"fmt": "E2M1", "scaling": {"kind": "nvfp4"}}
NV2D = {"fmt": "E2M1", "scaling": {"kind": "nvfp4", "tile_2d": True}}
MX4 = {"fmt": "E2M1", "scaling": {"kind": "mx"}}


# ---------------------------------------------------------------------------------------------- per-tensor identity

@pytest.mark.parametrize("specs", [
    dict(input="E4M3", weight="E4M3", grad_output="E5M2"),
    dict(input="E3M4", weight={"fmt": "E2M3", "scaling": "none"},
         grad_output={"fmt": "E5M2", "rounding": "stochastic"}),
    dict(input={"fmt": "E4M3", "scaling": {"kind": "delayed", "history_len": 4}}, weight=None, grad_output="E5M2"),
])
def test_per_tensor_specs_bit_identical_to_classic_path(specs):
    classic = make(LayerSpec(**specs))
    faithful = make(LayerSpec(**specs, gemm=GemmOptions(rht=())))
    assert classic.gemm is None and faithful.gemm is not None
    for step in range(3):                       # delayed history, SR streams and counters evolve alike
        x, dy = data(seed=step)
        a, b = run(classic, x, dy), run(faithful, x, dy)
        for u, v, what in zip(a, b, ("y", "dX", "dW")):
            assert torch.equal(u, v), f"step {step}: {what} differs"
    sa, sb = classic.state_dict(), faithful.state_dict()
    for k, v in sa.items():                     # same counters, scaler state and RNG state
        if isinstance(v, torch.Tensor):
            assert torch.equal(v, sb[k]), k


# ---------------------------------------------------------------------------------------------- hand reference

@pytest.mark.parametrize("rht", [(), ("wgrad",)])
@pytest.mark.parametrize("w_spec", [NV, NV2D, MX4])
def test_three_gemms_match_hand_written_reference(rht, w_spec):
    spec = LayerSpec(input=NV, weight=w_spec, grad_output=MX4, gemm=GemmOptions(rht=rht))
    m = make(spec)
    x, dy = data(t=37)                       # 111 tokens: the wgrad blocks along tokens are ragged
    y, gx, gw = run(m, x, dy)
    x2, dy2, w = x.reshape(-1, 64), dy.reshape(-1, 48), m.weight.detach()
    y_ref = torch.nn.functional.linear(q_along(x2, NV, 1).reshape(x.shape), q_along(w, w_spec, 1)) + m.bias
    gx_ref = q_along(dy2, MX4, 1).mm(q_along(w, w_spec, 0))               # dY and W blocked along `out`
    if rht:
        s = m.rht_signs
        xr, gr = rot(x2, s, 0), rot(dy2, s, 0)                               # rotated along tokens (padded)
        gw_ref = q_along(xr, NV, 0).t().mm(q_along(gr, MX4, 0)).t()
    else:
        gw_ref = q_along(x2, NV, 0).t().mm(q_along(dy2, MX4, 0)).t()      # dY and X blocked along tokens
    assert torch.equal(y, y_ref.detach())
    assert torch.equal(gx, gx_ref.reshape(x.shape))
    assert torch.equal(gw, gw_ref)
    # the classic path would reuse the fprop copy of W for dX: a different answer (2D tiles: the same W)
    assert not torch.equal(gx, q_along(dy2, MX4, 1).mm(q_along(w, w_spec, 1)).reshape(x.shape)) or w_spec is NV2D


def test_hp_gemm_and_columnwise_from_dequantized():
    x, dy = data()
    m = make(LayerSpec(input=NV, weight=NV, grad_output=NV, gemm=GemmOptions(hp_gemms=("wgrad",), rht=())))
    _, _, gw = run(m, x, dy)
    assert torch.equal(gw, x.reshape(-1, 64).t().mm(dy.reshape(-1, 48)).t())
    m2 = make(LayerSpec(input=NV, weight=NV, grad_output=NV, gemm=GemmOptions(rht=(), columnwise_source="dequantized")))
    _, gx2, _ = run(m2, x, dy)
    w = m2.weight.detach()
    ref = q_along(dy.reshape(-1, 48), NV, 1).mm(q_along(q_along(w, NV, 1), NV, 0))   # W col copy from Q_row(W)
    assert torch.equal(gx2, ref.reshape(x.shape))


def test_block_specs_take_gemm_path_and_options_validate():
    assert LayerSpec(input=NV).gemm_options == GemmOptions()
    assert LayerSpec(input="E4M3").gemm_options is None
    assert LayerSpec.from_dict({"input": NV, "gemm": {"rht": []}}).gemm == GemmOptions(rht=())
    assert "gemm" not in LayerSpec(input="E4M3").to_dict()
    with pytest.raises(ValueError, match="'bwd'.*fprop.*dgrad.*wgrad"):
        GemmOptions(hp_gemms=("bwd",))
    with pytest.raises(ValueError, match="rht_dim=12.*power of two"):
        GemmOptions(rht_dim=12)
    with pytest.raises(ValueError, match="unknown GemmOptions key.*rth"):
        GemmOptions.from_dict({"rth": ["wgrad"]})
    with pytest.raises(ValueError, match="ste='identity'"):
        QuantSpec(fmt="E2M1", scaling="nvfp4", ste="clipped")


# ---------------------------------------------------------------------------------------------- RHT

@pytest.mark.parametrize("d", [2, 4, 16, 32])
def test_hadamard_orthogonal_and_inverse_in_float64(d):
    h = hadamard(d)
    assert torch.equal(h @ h.t(), d * torch.eye(d, dtype=torch.float64))
    m = rht_matrix(rht_signs(d, 3), torch.float64)
    eye = torch.eye(d, dtype=torch.float64)
    a = torch.randint(-8, 8, (5, 3 * d)).double()
    back = apply_rht(a, rht_signs(d, 3)) @ torch.block_diag(*[m.t()] * 3)     # the inverse is Mᵀ
    if d in (4, 16):       # entries ±2^-k: every product and sum exact
        assert torch.equal(m @ m.t(), eye) and torch.equal(back, a)
    else:                  # entries ±1/sqrt(d): exact only up to rounding
        torch.testing.assert_close(m @ m.t(), eye, rtol=0, atol=1e-15)
        torch.testing.assert_close(back, a, rtol=0, atol=1e-13)



def test_rht_matrix_follows_its_signs():
    """The eager cache of M per sign vector: the same bits as a fresh computation, per dtype, and an in-place change
    of the signs (a checkpoint loaded into the buffer) is seen."""
    signs = rht_signs(16, 3)
    ref = (signs.double()[:, None] * hadamard(16) / 4.0).float()
    assert torch.equal(rht_matrix(signs), ref) and torch.equal(rht_matrix(signs), ref)
    assert rht_matrix(signs, torch.float64).dtype == torch.float64
    signs.copy_(rht_signs(16, 4))
    assert torch.equal(rht_matrix(signs), (signs.double()[:, None] * hadamard(16) / 4.0).float())
    assert not torch.equal(rht_matrix(signs), ref)

def test_rht_leaves_hp_wgrad_exact():
    """Both wgrad operands rotated along tokens: dYᵀX unchanged (float64, integer data: every sum exact)."""
    m = make(LayerSpec(gemm=GemmOptions(rht=("wgrad", "dgrad", "fprop"))), dtype=torch.float64)
    with torch.no_grad():
        m.weight.copy_(torch.randint(-4, 4, m.weight.shape).double())
    x = torch.randint(-8, 8, (2, 21, 64)).double()          # 42 tokens: padded to 48 inside
    dy = torch.randint(-8, 8, (2, 21, 48)).double()
    y, gx, gw = run(m, x, dy)
    assert torch.equal(gw, dy.reshape(-1, 48).t() @ x.reshape(-1, 64))
    assert torch.equal(gx, dy @ m.weight.detach())
    assert torch.equal(y, x @ m.weight.detach().t() + m.bias.detach())


def test_rht_signs_and_sr_stream_survive_resume():
    spec = LayerSpec(input=NV, weight=NV2D, grad_output={**NV, "rounding": "stochastic"})
    a = make(spec)
    x, dy = data()
    run(a, x, dy)                                           # advance the SR stream
    state = copy.deepcopy(a.state_dict())
    assert "rht_signs" in state
    b = QuantizedLinear.from_linear(nn.Linear(64, 48), spec, "mlp_up", "h.9.other", seed=123)
    b.load_state_dict(state)
    assert torch.equal(b.rht_signs, a.rht_signs)
    x, dy = data(seed=5)
    ra, rb = run(a, x, dy), run(b, x, dy)
    for u, v in zip(ra, rb):
        assert torch.equal(u, v)
    rc = run(a, x, dy)                                      # the stream moved on: a second step differs
    assert not torch.equal(rc[2], ra[2])


def test_per_row_scaling_opt_in_is_gemm_faithful():
    """Classic per_row scaling with `gemm:` set: dgrad's W copy is scaled per column of W (its `out` dim),
    wgrad's X and dY copies per column (the token dim), each from the high-precision tensor."""
    from altgrad_lib.numerics.quant import fake_quant
    row = {"fmt": "E4M3", "scaling": "per_row"}
    m = make(LayerSpec(input=row, weight=row, grad_output=row, gemm=GemmOptions(rht=())))
    x, dy = data()
    y, gx, gw = run(m, x, dy)
    x2, dy2, w = x.reshape(-1, 64), dy.reshape(-1, 48), m.weight.detach()

    def q(t, dim):   # per-row scale along `dim` (1: rows of t; 0: columns of t)
        return fake_quant(t, row).detach() if dim == 1 else fake_quant(t.t().contiguous(), row).detach().t()

    assert torch.equal(y, torch.nn.functional.linear(q(x2, 1).reshape(x.shape), q(w, 1)) + m.bias.detach())
    assert torch.equal(gx, q(dy2, 1).mm(q(w, 0)).reshape(x.shape))
    assert torch.equal(gw, q(x2, 0).t().mm(q(dy2, 0)).t())


# ---------------------------------------------------------------------------------------------- defaults (issue 25)

def torchao_mx_along(t: torch.Tensor, dim: int) -> torch.Tensor:
    """torchao's MXTensor.to_mx (E4M3 elements, E8M0 FLOOR scales, blocks of 32) of a 2D tensor with its blocks
    along `dim`, dequantized: the oracle of one GEMM operand."""
    from torchao.prototype.mx_formats.mx_tensor import MXTensor
    tt = t if dim == 1 else t.t().contiguous()
    r = MXTensor.to_mx(tt, torch.float8_e4m3fn, 32).dequantize(torch.float32)
    return r if dim == 1 else r.t()


@pytest.mark.parametrize("kind", ["mx", "per_block"])
def test_block_scaled_mx_e4m3_layer_is_gemm_faithful_with_its_defaults(kind):
    """A layer whose specs name MX E4M3 (or its spelling per_block) and write no `gemm:`: each GEMM's two operands are
    torchao's MX copies along that GEMM's reduction dim (fprop: `in`, dgrad: `out`, wgrad: tokens), no RHT.
    Fails on the old code: per_block took the classic path (dgrad / wgrad copies along the forward's dims, relative
    error ~2e-2), mx got RHT on wgrad by default."""
    mx = {"fmt": "E4M3", "scaling": kind}
    spec = LayerSpec(input=mx, weight=mx, grad_output=mx)
    m = make(spec, out=96)
    x, dy = data(b=2, t=32, out=96)           # 64 tokens, in 64, out 96: every reduction dim a multiple of 32
    y, gx, gw = run(m, x, dy)
    x2, dy2, w = x.reshape(-1, 64), dy.reshape(-1, 96), m.weight.detach()
    ao = torchao_mx_along
    y_ref = torch.nn.functional.linear(ao(x2, 1).reshape(x.shape), ao(w, 1)) + m.bias.detach()
    assert torch.equal(y, y_ref)
    assert torch.equal(gx, ao(dy2, 1).mm(ao(w, 0)).reshape(x.shape))
    assert torch.equal(gw, ao(x2, 0).t().mm(ao(dy2, 0)).t())
    m.eval()                                   # eval (no SR here): the same copies through forward(x, axis)
    with torch.no_grad():
        assert torch.equal(m(x), y_ref)
    assert spec.gemm_options == GemmOptions() and spec.gemm_options.rht == ()
    assert "gemm:plain" in spec.short_str()    # the layer table's and short_str's word for "no GEMM option on"


def test_a_gemm_block_without_rht_gets_no_rht():
    """`gemm: {hp_gemms: [dgrad]}` on per-tensor E4M3: dgrad in high precision, nothing rotated, so dW and Y are
    bit-identical to the classic path's (which has no RHT). Fails on the old code (RHT on wgrad by default)."""
    e4 = dict(input="E4M3", weight="E4M3", grad_output="E4M3")
    spec = LayerSpec.from_dict({**e4, "gemm": {"hp_gemms": ["dgrad"]}})
    classic, faithful = make(LayerSpec(**e4)), make(spec)
    x, dy = data()
    (y0, _, gw0), (y1, gx1, gw1) = run(classic, x, dy), run(faithful, x, dy)
    assert torch.equal(y1, y0) and torch.equal(gw1, gw0)
    assert torch.equal(gx1, dy @ faithful.weight.detach())     # dgrad: dY·W in high precision
    assert spec.gemm.rht == () and "rht" not in spec.short_str()


def test_quantizer_axis_is_the_same_rule_on_the_moved_tensor():
    """Quantizer(..., axis=0) is the quantizer along the last dim of the transposed tensor, for a block kind (with
    SR: the same random draws) and for per_row."""
    from altgrad_lib.numerics.quantizer import Quantizer
    t = torch.randn(64, 40) * torch.exp2(torch.randint(-6, 6, (1, 40)).float())
    for spec in ({"fmt": "E2M1", "scaling": "mx", "rounding": "stochastic"}, {"fmt": "E4M3", "scaling": "per_row"}):
        a, b = Quantizer(spec, seed=3), Quantizer(spec, seed=3)
        assert torch.equal(a.quantize(t, axis=0), b.quantize(t.t().contiguous()).t())


def test_rht_stays_on_the_operands_device():
    # On an H100 every block recipe failed in the backward: the Hadamard matrix was built on the CPU and multiplied
    # with CUDA signs. The meta device stands in for CUDA here (it refuses CPU operands the same way).
    signs = rht_signs(16, seed=1).to("meta")
    assert rht_matrix(signs).device.type == "meta"
    assert apply_rht(torch.empty(4, 40, device="meta"), signs).shape == (4, 48)
