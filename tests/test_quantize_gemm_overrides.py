"""Per-GEMM operand overrides (altgrad_lib.quantize.gemm_overrides): each GEMM's operands in their own spec, checked
bit for bit against a hand-written reference of the three GEMMs; an override is its own Quantizer (counters, SR
stream, checkpoint); validation and the dict / YAML round trip; delayed scaling with the RHT refused."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn

from altgrad_lib.numerics.quant import fake_quant
from altgrad_lib.numerics.quant_spec import QuantSpec
from altgrad_lib.quantize.gemm_quant import GemmOptions
from altgrad_lib.quantize.linear import QuantizedLinear
from altgrad_lib.quantize.recipes import LayerSpec, QuantPolicy, get_policy
from helpers import gemm_data, gemm_layer, gemm_step, q_along, rot_along

NV = {"fmt": "E2M1", "scaling": {"kind": "nvfp4"}}
NV2D = {"fmt": "E2M1", "scaling": {"kind": "nvfp4", "tile_2d": True}}
MX8 = {"fmt": "E4M3", "scaling": {"kind": "mx"}}
MX6 = {"fmt": "E3M2", "scaling": {"kind": "mx", "mode": "rceil"}}
DELAYED = {"fmt": "E4M3", "scaling": {"kind": "delayed", "history_len": 4}}
# NVFP4 fprop; dgrad's W per-tensor E4M3 and its dY in MXFP6; the wgrad operands in MXFP8
OVERRIDES = {"dgrad": {"weight": "E4M3", "grad_output": MX6}, "wgrad": {"input": MX8, "grad_output": MX8}}


@pytest.mark.parametrize("rht", [(), ("wgrad",), ("dgrad", "wgrad")])
def test_overridden_gemms_match_hand_written_reference(rht):
    """dX = Q_dgrad(dY)·Q_dgrad(W), dW = Q_wgrad(dY)ᵀ·Q_wgrad(X), Y = Q(X)·Q(W)ᵀ, each along its reduction dim."""
    m = gemm_layer(LayerSpec(input=NV, weight=NV2D, grad_output=NV, gemm=GemmOptions(rht=rht, overrides=OVERRIDES)))
    x, dy = gemm_data(t=37)                  # 111 tokens: the wgrad blocks along tokens are ragged
    y, gx, gw = gemm_step(m, x, dy)
    x2, dy2, w, s = x.reshape(-1, 64), dy.reshape(-1, 48), m.weight.detach(), m.rht_signs
    y_ref = nn.functional.linear(q_along(x2, NV, 1).reshape(x.shape), q_along(w, NV2D, 1)) + m.bias.detach()
    if "dgrad" in rht:                       # dY and W rotated along `out` (48: no padding)
        gx_ref = q_along(rot_along(dy2, s, 1), MX6, 1).mm(fake_quant(rot_along(w, s, 0), "E4M3").detach())
    else:                                    # E4M3 current scaling is per tensor: no blocking dim
        gx_ref = q_along(dy2, MX6, 1).mm(fake_quant(w, "E4M3").detach())
    xw, gw_in = (rot_along(x2, s, 0), rot_along(dy2, s, 0)) if "wgrad" in rht else (x2, dy2)
    gw_ref = q_along(xw, MX8, 0).t().mm(q_along(gw_in, MX8, 0)).t()          # blocked along the tokens
    assert torch.equal(y, y_ref)
    assert torch.equal(gx, gx_ref.reshape(x.shape))
    assert torch.equal(gw, gw_ref)
    # the overrides did something: the role specs give another dX and dW
    base = gemm_layer(LayerSpec(input=NV, weight=NV2D, grad_output=NV, gemm=GemmOptions(rht=rht)))
    _, gx0, gw0 = gemm_step(base, x, dy)
    assert not torch.equal(gx, gx0) and not torch.equal(gw, gw0)


def test_an_override_is_its_own_quantizer():
    """Counters: the role quantizer of X sees only fprop's copy, the wgrad override the rotated (padded) one;
    SR streams: an override with the role's own spec and seed-independent numerics (RNE) gives identical results,
    while its SR stream is its own (not the role quantizer's)."""
    sr = {**NV, "rounding": "stochastic"}
    m = gemm_layer(LayerSpec(input=NV, weight=NV2D, grad_output=sr,
                             gemm={"rht": ["wgrad"], "overrides": {"wgrad": {"input": MX8}}}))
    x, dy = gemm_data(t=37)
    gemm_step(m, x, dy)
    own = m.gemm_quants["wgrad_input"]
    assert int(m.x_quant.n_elements) == x.numel()                     # fprop only
    assert int(own.n_elements) == 112 * 64                            # 111 tokens rotated, padded to 112
    assert "gemm_quants.wgrad_input.n_elements" in m.state_dict()
    same = gemm_layer(LayerSpec(input=NV, weight=NV2D, grad_output=NV, gemm={"overrides": {"wgrad": {"input": NV}}}))
    plain = gemm_layer(LayerSpec(input=NV, weight=NV2D, grad_output=NV))
    for u, v in zip(gemm_step(same, x, dy), gemm_step(plain, x, dy)):
        assert torch.equal(u, v)
    # dY in wgrad overridden with the role's SR spec: its own generator (seeded from its own name), so dW differs
    sr_own = gemm_layer(LayerSpec(input=NV, weight=NV2D, grad_output=sr,
                                  gemm={"overrides": {"wgrad": {"grad_output": sr}}}))
    sr_role = gemm_layer(LayerSpec(input=NV, weight=NV2D, grad_output=sr))
    a, b = gemm_step(sr_own, x, dy), gemm_step(sr_role, x, dy)
    assert not torch.equal(a[2], b[2])
    assert int(sr_own.g_quant.n_elements) == dy.numel()              # the role quantizer: dgrad's copy only


def test_override_to_high_precision_and_dequantized_columnwise_source():
    """null = that operand in high precision. With columnwise_source="dequantized" a column-wise copy comes from the
    row-wise one of the same Quantizer only, and never from dgrad's copy of dY when dgrad rotates it."""
    m = gemm_layer(LayerSpec(input=NV, weight=NV, grad_output=NV,
                             gemm={"rht": [], "overrides": {"dgrad": {"weight": None}}}))
    x, dy = gemm_data()
    _, gx, _ = gemm_step(m, x, dy)
    dy2 = dy.reshape(-1, 48)
    assert torch.equal(gx, q_along(dy2, NV, 1).mm(m.weight.detach()).reshape(x.shape))
    d = gemm_layer(LayerSpec(input=NV, weight=NV, grad_output=NV,
                             gemm={"rht": ["dgrad"], "columnwise_source": "dequantized"}))
    _, _, gw = gemm_step(d, x, dy)
    x2 = x.reshape(-1, 64)
    assert torch.equal(gw, q_along(q_along(x2, NV, 1), NV, 0).t().mm(q_along(dy2, NV, 0)).t())
    # X of wgrad overridden (same spec): its own Quantizer, so its copy comes from the high-precision X
    o = gemm_layer(LayerSpec(input=NV, weight=NV, grad_output=NV, gemm={
        "rht": [], "columnwise_source": "dequantized", "overrides": {"wgrad": {"input": NV}}}))
    _, _, gw = gemm_step(o, x, dy)
    assert torch.equal(gw, q_along(x2, NV, 0).t().mm(q_along(q_along(dy2, NV, 1), NV, 0)).t())


def test_overrides_survive_a_checkpoint():
    sr = {**MX8, "rounding": "stochastic"}
    spec = LayerSpec(input=NV, weight=NV2D, grad_output=NV, gemm={"overrides": {"wgrad": {"grad_output": sr}}})
    a = gemm_layer(spec)
    x, dy = gemm_data()
    gemm_step(a, x, dy)                                     # advance the override's SR stream
    state = copy.deepcopy(a.state_dict())
    b = QuantizedLinear.from_linear(nn.Linear(64, 48), spec, "mlp_up", "h.9.other", seed=123)
    b.load_state_dict(state)
    x, dy = gemm_data(seed=5)
    for u, v in zip(gemm_step(a, x, dy), gemm_step(b, x, dy)):
        assert torch.equal(u, v)


def test_dict_round_trip_and_old_dicts_unchanged():
    d = {"name": "nv_mx8wgrad", "recipe": "nvfp4", "layers": {"*": {
        "input": NV, "weight": NV2D, "grad_output": {**NV, "rounding": "stochastic"},
        "gemm": {"rht": ["wgrad"], "overrides": OVERRIDES}}}}
    p = get_policy(d)
    spec = p.spec_for("mlp_up")
    assert {(g, r) for g, r, _ in spec.gemm.overrides} == {("dgrad", "weight"), ("dgrad", "grad_output"),
                                                            ("wgrad", "input"), ("wgrad", "grad_output")}
    assert spec.gemm.overrides[1][2] == QuantSpec(fmt="E4M3")       # dgrad W, a format name: default scaling / rounding
    assert QuantPolicy.from_dict(p.to_dict()) == p and p.spec_for("lm_head") is None
    assert "ov:dgrad.g=e3m2fn/mx32r/rne+dgrad.w=e4m3fn/cur/rne" in spec.short_str()
    assert "overrides" not in get_policy("nvfp4").spec_for("mlp_up").gemm.to_dict()   # old dicts, old hashes
    # override-only layer: still a quantized layer
    only = LayerSpec(gemm={"rht": [], "overrides": {"wgrad": {"input": "E4M3"}}})
    assert only.is_quantized and QuantPolicy(name="o", layers={"*": only}).spec_for("mlp_up") == only


def test_train_config_accepts_an_override_recipe_and_refuses_a_bad_one_before_any_run():
    from altgrad_lib.errors import ConfigError
    from altgrad_lib.training.config import TrainConfig
    recipe = {"name": "nv_mx8wgrad", "recipe": "nvfp4", "layers": {"*": {
        "input": NV, "weight": NV2D, "grad_output": NV, "gemm": {"overrides": {"wgrad": {"input": "e4m3fn"}}}}}}
    cfg = TrainConfig(recipe=recipe)
    assert cfg.recipe["layers"]["*"]["gemm"]["overrides"]["wgrad"]["input"] == "E4M3"   # canonical spelling
    bad = copy.deepcopy(recipe)
    bad["layers"]["*"]["gemm"]["overrides"]["wgrad"] = {"weight": "E4M3"}
    with pytest.raises(ConfigError, match=r"overrides\['wgrad'\]: unknown operand\(s\) \['weight'\]; valid choices "
                                          r"for wgrad: \('grad_output', 'input'\)") as ei:
        TrainConfig(recipe=bad)
    assert "\n" not in str(ei.value)


@pytest.mark.parametrize("gemm, needle", [
    ({"overrides": {"bwd": {}}}, r"unknown GEMM\(s\) \['bwd'\]; valid choices: \('fprop', 'dgrad', 'wgrad'\)"),
    ({"overrides": {"dgrad": {"input": "E4M3"}}}, r"overrides\['dgrad'\]: unknown operand\(s\) \['input'\]; "
                                                  r"valid choices for dgrad: \('grad_output', 'weight'\)"),
    ({"overrides": {"wgrad": {"input": "E4M3"}}, "hp_gemms": ["wgrad"]}, r"overrides names \['wgrad'\], which "
                                                                          r"hp_gemms keeps in high precision"),
    ({"overrides": {"wgrad": {"input": "E8M0FNU"}}}, r"overrides\['wgrad'\]\['input'\]: format E8M0FNU has no sign"),
    ({"overrides": {"wgrad": {"input": {"fmt": "E4M3", "scaling": "mxx"}}}},
     r"overrides\['wgrad'\]\['input'\]: kind='mxx' is invalid; valid choices"),
    ({"overrides": {"wgrad": ["E4M3"]}}, r"overrides\['wgrad'\]=\['E4M3'\]: expected a dict"),
])
def test_bad_overrides_are_one_line_errors(gemm, needle):
    with pytest.raises((ValueError, TypeError), match=needle) as ei:
        LayerSpec(input=NV, gemm=gemm)
    assert "\n" not in str(ei.value)


def test_delayed_scaling_with_rht_is_refused_where_one_history_would_mix_copies():
    """One delayed Quantizer quantizing both the rotated and another copy of its tensor records both amaxes in one
    history (shown below: two entries per step); refused at construction, before any compute."""
    with pytest.raises(ValueError, match=r"LayerSpec.input: delayed scaling is invalid with gemm.rht=\['wgrad'\]: "
                                         r"one amax history would mix the copies of fprop\+wgrad") as ei:
        LayerSpec(input=DELAYED, weight=NV, gemm={"rht": ["wgrad"]})
    assert "\n" not in str(ei.value)
    with pytest.raises(ValueError, match=r"LayerSpec.grad_output: delayed scaling .* dgrad\+wgrad"):
        LayerSpec(grad_output=DELAYED, gemm={"rht": ["dgrad", "wgrad"]})
    with pytest.raises(ValueError, match="delayed scaling is invalid"):
        get_policy({"name": "d", "layers": {"*": {"input": DELAYED, "gemm": {"rht": ["fprop"]}}}})
    # accepted: each delayed Quantizer sees a single copy per step
    for ok in (dict(input=DELAYED, weight=NV, gemm={"rht": []}),
               dict(input=DELAYED, weight=NV, gemm={"hp_gemms": ["fprop"]}),
               dict(input=DELAYED, weight=NV, gemm={"overrides": {"wgrad": {"input": DELAYED}}}),
               dict(input="E4M3", weight=NV),
               dict(input=DELAYED, weight=NV)):          # block weight, default GemmOptions: no RHT
        LayerSpec(**ok)
    # what the refusal prevents: without the check (object.__new__ skips __post_init__), the X history gets the
    # amax of X and of the rotated X in every step
    spec = object.__new__(LayerSpec)
    for k, v in dict(input=QuantSpec.from_dict(DELAYED), weight=None, grad_output=None,
                 gemm=GemmOptions(rht=("wgrad",))).items():
        object.__setattr__(spec, k, v)
    m = gemm_layer(spec)
    x, dy = gemm_data()
    gemm_step(m, x, dy)
    hist = m.x_quant.scaler.amax_history
    assert int(m.x_quant.scaler.n_updates) == 2 and float(hist[1]) == float(x.abs().max()) != float(hist[0])


def test_the_readme_example_is_a_valid_recipe():
    """README's `overrides` YAML example, as a `-f` file would give it: accepted by TrainConfig, and it makes the
    overrides it shows."""
    import re
    from pathlib import Path

    import yaml

    from altgrad_lib.training.config import TrainConfig
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    block = next(b for b in re.findall(r"```yaml\n(.*?)```", readme, re.S) if "overrides:" in b)
    cfg = TrainConfig(**yaml.safe_load(block))
    spec = get_policy(cfg.recipe).spec_for("mlp_down")
    assert [(g, r, s.short_str()) for g, r, s in spec.gemm.overrides] == [
        ("dgrad", "weight", "e4m3fn/cur/rne"), ("wgrad", "grad_output", "e4m3fn/mx32f/rne"),
        ("wgrad", "input", "e4m3fn/mx32f/rne")]
    assert get_policy(cfg.recipe).spec_for("lm_head") is None
