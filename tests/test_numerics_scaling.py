"""Tests for altgrad_lib.numerics.scaling: config validation, current/delayed/per_row scales, eps floor,
state_dict round trip; delayed scaling against a hand-written TransformerEngine reference; and the old kind
"per_block", now a QuantSpec spelling of block_scaling.py's MX (refused by ScalingConfig), against the OCP MX rule
and torchao's MX implementation (an oracle written by someone else)."""
from __future__ import annotations

import math

import pytest
import torch

from altgrad_lib.numerics.formats import get_format
from altgrad_lib.numerics.scaling import Scaler, ScalingConfig, stateless_scale

E4M3 = get_format("E4M3")


def is_pow2(t: torch.Tensor) -> bool:
    m, _ = torch.frexp(t.double())
    return bool((m == 0.5).all())


# ---------------------------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    "kwargs, needles",
    [
        ({"kind": "bogus"}, ["bogus", "per_block", "delayed"]),
        ({"reduce": "mean"}, ["mean", "most_recent"]),
        ({"history_len": 0}, ["history_len=0", ">= 1"]),
        ({"block_size": -2}, ["block_size=-2"]),
        ({"amax_eps": 0.0}, ["amax_eps=0.0", "> 0"]),
        ({"delayed_init": "zero"}, ["zero", "current", "one"]),
        ({"margin": 1.5}, ["margin=1.5"]),
    ],
)
def test_config_validation_names_value_and_choices(kwargs, needles):
    with pytest.raises(ValueError) as e:
        ScalingConfig(**kwargs)
    for n in needles:
        assert n in str(e.value)


def test_short_str_and_dict_round_trip():
    assert ScalingConfig().short_str() == "cur"
    assert ScalingConfig(kind="delayed").short_str() == "dly16max-m0"
    assert ScalingConfig(kind="delayed", history_len=4, reduce="most_recent", margin=1).short_str() == "dly4rec-m1"
    assert ScalingConfig(kind="per_row").short_str() == "row"
    assert ScalingConfig(kind="current", pow2=True).short_str() == "cur-p2"
    assert ScalingConfig(kind="none").short_str() == "none"
    c = ScalingConfig(kind="delayed", history_len=8, pow2=True)
    assert ScalingConfig.from_dict(c.to_dict()) == c
    assert ScalingConfig.from_dict("per_row") == ScalingConfig(kind="per_row")
    with pytest.raises(ValueError, match="history_length.*valid keys.*history_len"):
        ScalingConfig.from_dict({"history_length": 3})


# ---------------------------------------------------------------------------------------------- stateless


def test_current_scale_and_pow2_round_down():
    x = torch.tensor([0.3, -7.0, 2.5])
    s, hits = stateless_scale(x, E4M3, ScalingConfig())
    assert s.shape == () and int(hits) == 0
    assert float(s) == pytest.approx(448.0 / 7.0, rel=1e-7)
    s2, _ = stateless_scale(x, E4M3, ScalingConfig(pow2=True))
    assert is_pow2(s2) and float(s2) <= float(s) < 2 * float(s2)
    assert float(s2) == 64.0
    s3, _ = stateless_scale(x, E4M3, ScalingConfig(margin=2))
    assert float(s3) == pytest.approx(448.0 / 7.0 / 4.0, rel=1e-7)
    s0, _ = stateless_scale(x, E4M3, ScalingConfig(kind="none"))
    assert float(s0) == 1.0


def test_per_row_scale():
    x = torch.randn(5, 7) * torch.tensor([1.0, 10.0, 0.1, 1e3, 3.0])[:, None]
    s, _ = stateless_scale(x, E4M3, ScalingConfig(kind="per_row"))
    assert s.shape == (5, 1)
    torch.testing.assert_close(s, 448.0 / x.abs().amax(-1, keepdim=True), rtol=1e-6, atol=0)
    assert (x * s).abs().amax(-1).sub(448.0).abs().max() < 1e-3  # each row's amax lands on fmt.max


def test_per_block_is_a_spelling_of_mx_and_refused_by_scaling_config():
    from altgrad_lib.numerics.block_scaling import BlockScaling
    from altgrad_lib.numerics.quant_spec import QuantSpec

    with pytest.raises(ValueError,
                       match=r"kind='per_block' is invalid; valid choices: .*'per_row'.*did you mean.*'mx'"):
        ScalingConfig(kind="per_block")
    assert QuantSpec(fmt="E4M3", scaling="per_block").scaling == BlockScaling(kind="mx", mode="floor", block_size=32)
    assert QuantSpec(fmt="E4M3", scaling={"kind": "per_block", "block_size": 16}).scaling == BlockScaling("mx", 16)
    assert QuantSpec(fmt="E4M3", scaling="per_block").short_str().split("/")[1] == "mx32f"
    with pytest.raises(ValueError, match=r"'per_block'.*only 'block_size', got \['margin'\].*kind 'mx'"):
        QuantSpec(fmt="E4M3", scaling={"kind": "per_block", "margin": 1})
    with pytest.raises(ValueError, match="ste='identity'"):     # MX saturates; the clipped STE has no meaning there
        QuantSpec(fmt="E4M3", scaling="per_block", ste="clipped")


@pytest.mark.parametrize("k", [64, 70, 5])  # 70, 5: ragged last block
def test_per_block_mx_scale(k):
    from altgrad_lib.numerics.block_scaling import elementwise_scale
    from altgrad_lib.numerics.quant_spec import QuantSpec

    torch.manual_seed(0)
    x = torch.randn(3, k) * torch.logspace(-3, 3, k)
    spec = QuantSpec(fmt=E4M3, scaling={"kind": "per_block", "block_size": 32})
    s = elementwise_scale(x, E4M3, spec.scaling)
    assert s.shape == x.shape and is_pow2(s)
    for j0 in range(0, k, 32):
        blk = x[:, j0 : j0 + 32]
        amax = blk.abs().amax(-1).double()
        shared_exp = torch.floor(torch.log2(amax)) - 8  # E4M3 emax = 8 (OCP MX spec, section 6.3)
        expect = torch.exp2(-shared_exp).float()
        for j in range(blk.shape[1]):
            assert torch.equal(s[:, j0 + j], expect)


def test_per_block_against_torchao_mx_bit_exact():
    from torchao.prototype.mx_formats.mx_tensor import ScaleCalculationMode, get_fp_scale, to_mx

    from altgrad_lib.numerics.block_scaling import block_scales
    from altgrad_lib.numerics.quant import fake_quant
    from altgrad_lib.numerics.quant_spec import QuantSpec

    torch.manual_seed(1)
    # wide dynamic range per block, plus values that saturate under MX FLOOR scaling (amax mantissa > 1.75)
    x = torch.randn(16, 128) * torch.exp(torch.randn(16, 4, 1) * 3).expand(16, 4, 32).reshape(16, 128)
    x[0, :32] = 1.99
    x[1, 32:64] = torch.linspace(-1, 1, 32) * 1e-30  # tiny block
    scale_e8m0, data_lp = to_mx(x, torch.float8_e4m3fn, 32, ScaleCalculationMode.FLOOR)
    x_ref = data_lp.float() * get_fp_scale(scale_e8m0).repeat_interleave(32, dim=-1)
    # MX has no amax floor (E8M0 reaches 2**-127): the tiny block too is exact
    spec = QuantSpec(fmt="E4M3", scaling={"kind": "per_block", "block_size": 32})
    y = fake_quant(x, spec)
    assert torch.equal(y, x_ref)
    assert torch.equal(block_scales(x, spec.fmt, spec.scaling), get_fp_scale(scale_e8m0).flatten())


# ---------------------------------------------------------------------------------------------- delayed


def te_delayed_reference(amaxes, fmax, history_len, reduce, margin, pow2):
    """Hand-written TransformerEngine DelayedScaling (scale buffer starts at 1; the amax of step t goes into
    history slot 0, then reduce -> new scale (kept if amax is 0/inf), then roll the history)."""
    hist = [0.0] * history_len
    scale = 1.0
    used = []
    for a in amaxes:
        used.append(scale)  # the forward at step t casts with the scale computed after step t-1
        hist[0] = a
        red = max(hist) if reduce == "max" else hist[0]
        if red > 0 and math.isfinite(red):
            sf = fmax / red / 2.0**margin
            if pow2:
                sf = 2.0 ** math.floor(math.log2(sf))
            scale = sf
        hist = [0.0] + hist[:-1]  # free slot 0 for the next step, dropping the oldest amax
    return used


@pytest.mark.parametrize("history_len", [1, 3, 16])
@pytest.mark.parametrize("reduce", ["max", "most_recent"])
@pytest.mark.parametrize("margin, pow2", [(0, False), (2, False), (0, True), (1, True)])
def test_delayed_matches_te_reference(history_len, reduce, margin, pow2):
    g = torch.Generator().manual_seed(history_len * 7 + margin)
    amaxes = [float(v) for v in torch.exp(torch.randn(24, generator=g) * 2).tolist()]
    amaxes[5] = 0.0  # zero tensor: TE keeps the previous scale
    cfg = ScalingConfig(
        kind="delayed", history_len=history_len, reduce=reduce, margin=margin, pow2=pow2, delayed_init="one"
    )
    sc = Scaler(cfg, E4M3)
    got = []
    for a in amaxes:
        x = torch.tensor([a * 0.5, -a, 0.25 * a])
        got.append(float(sc.scale_for(x)))
    ref = te_delayed_reference([float(torch.tensor(a)) for a in amaxes], 448.0, history_len, reduce, margin, pow2)
    assert got == pytest.approx(ref, rel=1e-6)
    if pow2:
        assert got == ref  # exact powers of two
    assert int(sc.n_updates) == len(amaxes)


def test_delayed_first_call_bootstraps_from_current_amax():
    sc = Scaler(ScalingConfig(kind="delayed", history_len=4), E4M3)
    s0 = sc.scale_for(torch.tensor([2.0, -1.0]))
    assert float(s0) == pytest.approx(224.0)  # same as current scaling on the first call
    s1 = sc.scale_for(torch.tensor([100.0]))  # uses history (amax 2), not this call's amax
    assert float(s1) == pytest.approx(224.0)
    s2 = sc.scale_for(torch.tensor([1.0]))
    assert float(s2) == pytest.approx(4.48)  # max over history {2, 100}
    assert sc.amax_history.tolist() == [1.0, 100.0, 2.0, 0.0]


def test_scaler_state_dict_restores_exactly():
    cfg = ScalingConfig(kind="delayed", history_len=5, reduce="max")
    a = Scaler(cfg, E4M3)
    torch.manual_seed(0)
    xs = [torch.randn(10) * (i + 1) for i in range(8)]
    for x in xs[:4]:
        a.scale_for(x)
    b = Scaler(cfg, E4M3)
    b.load_state_dict(a.state_dict())
    for x in xs[4:]:
        assert torch.equal(a.scale_for(x), b.scale_for(x))
    for k, v in a.state_dict().items():
        assert torch.equal(v, b.state_dict()[k]), k


# ---------------------------------------------------------------------------------------------- eps floor


@pytest.mark.parametrize("kind", ["current", "delayed", "per_row"])   # MX (per_block) has no floor: E8M0's range
def test_eps_floor_counts_and_no_nan(kind):
    from altgrad_lib.numerics.quant import fake_quant
    from altgrad_lib.numerics.quant_spec import QuantSpec

    cfg = ScalingConfig(kind=kind, block_size=4)
    sc = Scaler(cfg, E4M3)
    x = torch.zeros(3, 8)
    x[1] = torch.arange(8.0)  # one nonzero row (two blocks: first block amax 3, second 7)
    expect = {"current": 0, "delayed": 0, "per_row": 2}[kind]
    y = fake_quant(x, QuantSpec(fmt=E4M3, scaling=cfg), scaler=sc)
    assert int(sc.eps_hits) == expect
    assert torch.isfinite(y).all()
    z = torch.zeros(3, 8)
    y = fake_quant(z, QuantSpec(fmt=E4M3, scaling=cfg), scaler=sc)
    assert torch.equal(y, z) and not torch.isnan(y).any()
    n_amax = {"current": 1, "delayed": 0, "per_row": 3}[kind]
    # delayed: the zero tensor's scale comes from history (nonzero), its own amax 0 is only recorded
    assert int(sc.eps_hits) == expect + n_amax
    if kind == "delayed":
        y = fake_quant(z, QuantSpec(fmt=E4M3, scaling=cfg), scaler=sc)  # history still has amax 7
        assert int(sc.eps_hits) == 0
        sc2 = Scaler(ScalingConfig(kind="delayed", history_len=1), E4M3)
        for _ in range(3):
            s = sc2.scale_for(z)
            assert torch.isfinite(s) and float(s) > 0
        assert int(sc2.eps_hits) == 3  # first call (current amax) + two calls with an all-zero history


def test_stateless_eps_hits_returned():
    s, hits = stateless_scale(torch.zeros(4), E4M3, ScalingConfig())
    assert int(hits) == 1 and torch.isfinite(s) and float(s) > 0


@pytest.mark.parametrize("kind", ["current", "per_row", "none"])
def test_scaler_records_global_amax_and_scale(kind):
    sc = Scaler(ScalingConfig(kind=kind, block_size=4), E4M3)
    x = torch.tensor([[1.0, -2.0, 0.5, 0.25, 8.0, 0.0], [0.0, 0.0, 0.0, 0.0, -16.0, 1.0]])
    s = sc.scale_for(x)
    s_ref, _ = stateless_scale(x, E4M3, sc.config)
    assert torch.equal(s, s_ref)
    assert int(sc.n_updates) == 1
    if kind == "none":
        assert float(s) == 1.0 and float(sc.amax_history[0]) == 0.0
        return
    assert float(sc.amax_history[0]) == 16.0
    assert float(sc.scale) == float(s.amin())


def test_scale_peek_reads_but_never_writes_the_delayed_state():
    sc = Scaler(ScalingConfig(kind="delayed", history_len=4), "E4M3")
    g = torch.Generator().manual_seed(0)
    for _ in range(3):
        sc.scale_for(torch.randn(64, generator=g))
    before = {k: v.clone() for k, v in sc.state_dict().items()}
    x = torch.randn(64, generator=g) * 100            # an eval batch with a very different amax
    peek = sc.scale_peek(x)
    assert all(torch.equal(before[k], v) for k, v in sc.state_dict().items())
    assert torch.equal(peek, sc.scale_for(x))          # what the next training call uses


def test_te_delayed_preset_is_transformer_engines_defaults():
    te = ScalingConfig.from_dict("te_delayed")
    assert (te.kind, te.history_len, te.reduce, te.delayed_init) == ("delayed", 1024, "max", "one")
    sc = Scaler(te, "E4M3")
    assert float(sc.scale_for(torch.full((8,), 1000.0))) == 1.0   # TE: the first step uses scale 1
