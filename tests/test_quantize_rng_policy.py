"""The RNG policy of each randomized technique (issue 30): Hadamard signs fixed per layer (TransformerEngine) or
re-drawn per step (Quartet-II's replica), stochastic rounding from one seeded stream per quantizer or keyed per
call; and the high-precision switches hp_first / hp_last / hp_layers of every recipe."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
from helpers import gemm_data as data, gemm_layer as make, gemm_step as run

from altgrad_lib.model import GPT, GPTConfig
from altgrad_lib.numerics.counter_rng import derive_keys, hash_bits
from altgrad_lib.numerics.quantizer import Quantizer
from altgrad_lib.numerics.quant_spec import QuantSpec
from altgrad_lib.quantize.convert import quantize_model
from altgrad_lib.quantize.gemm_quant import GemmOptions, layer_signs, rht_signs
from altgrad_lib.quantize.linear import QuantizedLinear, module_seed, set_hp_gemms, set_rng_step
from altgrad_lib.quantize.recipes import LayerSpec, canonical_recipe, get_policy

NV = {"fmt": "E2M1", "scaling": {"kind": "nvfp4"}}
NV_SR = {**NV, "rounding": "stochastic"}


# ---------------------------------------------------------------------------------------------- validation

def test_rng_fields_validate_in_one_line_and_keep_default_dicts():
    with pytest.raises(ValueError, match=r"sr_rng='per_step'.*per_quantizer.*per_call"):
        QuantSpec(fmt="E2M1", rounding="stochastic", sr_rng="per_step")
    with pytest.raises(ValueError, match="only applies to rounding='stochastic'"):
        QuantSpec(fmt="E2M1", sr_rng="per_call")
    with pytest.raises(ValueError, match=r"rht_rng='per_call' is invalid; valid choices: \('fixed', 'per_step'\)"):
        GemmOptions(rht=("wgrad",), rht_rng="per_call")
    # defaults are left out of the dicts (so every recipe from before keeps its config hash); set ones round-trip
    assert "sr_rng" not in QuantSpec(fmt="E2M1", rounding="stochastic").to_dict()
    assert "rht_rng" not in GemmOptions(rht=("wgrad",)).to_dict()
    q = QuantSpec(fmt="E2M1", rounding="stochastic", sr_rng="per_call")
    assert QuantSpec.from_dict(q.to_dict()) == q and q.short_str().endswith("/sr@call")
    g = GemmOptions(rht=("wgrad",), rht_rng="per_step")
    assert GemmOptions.from_dict(g.to_dict()) == g and g.short_str() == "rht:wgrad@step"


def test_named_switches_set_the_policy_and_show_it_in_the_layer_table():
    pol = get_policy("nvfp4:rht_per_step:sr_per_call")
    spec = pol.spec_for("mlp_up")
    assert spec.gemm.rht_rng == "per_step" and spec.grad_output.sr_rng == "per_call"
    assert spec.input.sr_rng == "per_quantizer"                       # X is rounded to nearest: no RNG
    rows = quantize_model(GPT(GPTConfig(n_layer=1, n_head=1, n_embd=32, block_size=8, vocab_size=64)), pol,
                          verbose=False)
    up = next(r for r in rows if r["class"] == "mlp_up")
    assert "@step" in up["gemm"] and "@call" in up["grad_output"]


def test_ordering_switches():
    spec = get_policy("nvfp4:sr_x:sr_w:rht_fprop:rht_dgrad").spec_for("mlp_up")
    assert spec.input.rounding == spec.weight.rounding == spec.grad_output.rounding == "stochastic"
    assert spec.gemm.rht == ("fprop", "dgrad", "wgrad")
    assert get_policy("nvfp4:disable_rht:rht_fprop").spec_for("mlp_up").gemm.rht == ("fprop",)
    assert get_policy("nvfp4").spec_for("mlp_up").input.rounding == "nearest"


# ---------------------------------------------------------------------------------------------- RHT signs

def test_fixed_signs_are_the_seeded_vector_of_before():
    """rht_rng fixed (the default): the layer rotates with rht_signs(d, module_seed(seed, fqn, "rht")), the formula
    of the code before the RNG policy, whatever step the loop sets."""
    m = QuantizedLinear.from_linear(nn.Linear(64, 48), LayerSpec(input=NV, weight=NV, grad_output=NV_SR),
                                    "mlp_up", "h.0.mlp.c_fc", seed=7)
    before = rht_signs(16, module_seed(7, "h.0.mlp.c_fc", "rht"))
    for step in (0, 5):
        set_rng_step(m, step)
        assert torch.equal(layer_signs(m), before)
    assert not hasattr(m, "rng_step")          # no new state: checkpoints of before load as they were


def _per_step_layer(seed=0):
    spec = LayerSpec(input=NV, weight=NV, grad_output=NV_SR, gemm=GemmOptions(rht=("wgrad",), rht_rng="per_step"))
    return make(spec, seed=seed)


def test_per_step_signs_differ_across_steps_and_are_a_function_of_the_step():
    m = _per_step_layer()
    signs = []
    for step in range(6):
        set_rng_step(m, step)
        s = layer_signs(m)
        assert set(s.unique().tolist()) <= {-1.0, 1.0} and s.numel() == 16
        signs.append(s.clone())
    assert all(not torch.equal(a, b) for i, a in enumerate(signs) for b in signs[i + 1:])   # 2^-16 per pair
    set_rng_step(m, 3)
    assert torch.equal(layer_signs(m), signs[3])                   # a resumed run at step 3 rotates the same
    # the independent oracle: the counter hash of (layer seed, step), bits 0/1 -> -1/+1
    ref = hash_bits(torch.tensor(3 * 16), 16, m.rht_keys, 1) * 2 - 1
    assert torch.equal(signs[3], ref.float())


def test_per_step_rotation_is_exact_in_high_precision():
    """Whatever signs a step draws, M is orthogonal: with high-precision operands the GEMMs are unchanged."""
    m = make(LayerSpec(gemm=GemmOptions(rht=("fprop", "dgrad", "wgrad"), rht_rng="per_step")), dtype=torch.float64)
    with torch.no_grad():
        m.weight.copy_(torch.randint(-4, 4, m.weight.shape).double())
    x = torch.randint(-8, 8, (2, 21, 64)).double()
    dy = torch.randint(-8, 8, (2, 21, 48)).double()
    for step in (0, 1):
        set_rng_step(m, step)
        y, gx, gw = run(m, x, dy)
        assert torch.equal(gw, dy.reshape(-1, 48).t() @ x.reshape(-1, 64))   # wgrad
        assert torch.equal(gx, dy @ m.weight.detach())                        # dgrad
        assert torch.equal(y, x @ m.weight.detach().t() + m.bias.detach())    # fprop


def test_per_step_layer_state_resumes():
    a = _per_step_layer()
    set_rng_step(a, 4)
    state = copy.deepcopy(a.state_dict())
    assert int(state["rng_step"]) == 4
    b = _per_step_layer(seed=1)
    b.load_state_dict(state)
    x, dy = data()
    for u, v in zip(run(a, x, dy), run(b, x, dy)):
        assert torch.equal(u, v)


# ---------------------------------------------------------------------------------------------- SR streams

def test_per_quantizer_stream_is_the_seeded_generator_of_before():
    """sr_rng per_quantizer (the default): the bits are torch.Generator(seed)'s randint stream (the oracle)."""
    q = Quantizer({"fmt": "E2M1", "rounding": "stochastic"}, seed=11)
    x = torch.randn(300)
    g = torch.Generator().manual_seed(11)
    for _ in range(2):
        assert torch.equal(q.draw_bits(x), torch.randint(0, 2**23, x.shape, dtype=torch.int32, generator=g))


def test_per_call_bits_are_keyed_by_seed_step_and_call():
    spec = {"fmt": "E2M1", "rounding": "stochastic", "sr_rng": "per_call"}
    q, other = Quantizer(spec, seed=3), Quantizer(spec, seed=3)
    x = torch.randn(500)
    q.set_rng_step(2)
    first, second = q.draw_bits(x), q.draw_bits(x)
    assert not torch.equal(first, second)                              # each call its own bits
    for _ in range(5):                                                 # any history before the step...
        other.draw_bits(x)
    other.set_rng_step(2)
    assert torch.equal(other.draw_bits(x), first)                      # ...draws the same bits at (step 2, call 0)
    ref = hash_bits(torch.tensor(0), 500, derive_keys(3, 2, 0), 23).to(torch.int32)
    assert torch.equal(first, ref)
    q.set_rng_step(3)
    assert not torch.equal(q.draw_bits(x), first)
    assert q.generator() is None and q.get_extra_state()["rng_step"] == 3


def test_per_call_stochastic_rounding_is_unbiased():
    """Monte-Carlo over 2000 calls: the mean of Q(x) is x within 4 standard errors (x between two E2M1 grid points,
    so each call is a Bernoulli draw between them)."""
    q = Quantizer({"fmt": "E2M1", "rounding": "stochastic", "scaling": "none", "sr_rng": "per_call"}, seed=0)
    x = torch.tensor([1.1, 1.3, 2.6, -3.7, 0.2])
    lo = torch.tensor([1.0, 1.0, 2.0, -4.0, 0.0])
    hi = torch.tensor([1.5, 1.5, 3.0, -3.5, 0.5])
    n = 2000
    acc = torch.zeros_like(x, dtype=torch.float64)
    for step in range(n):
        q.set_rng_step(step)
        acc += q.quantize(x).double()
    p = (x - lo) / (hi - lo)
    se = (hi - lo) * torch.sqrt(p * (1 - p) / n)
    assert torch.all((acc / n - x.double()).abs() <= 4 * se.double() + 1e-12), (acc / n, x)


# ---------------------------------------------------------------------------------------------- hp_first / hp_layers

def _rows(recipe, n_layer=4):
    model = GPT(GPTConfig(n_layer=n_layer, n_head=1, n_embd=32, block_size=8, vocab_size=64))
    return {r["module"]: r for r in quantize_model(model, get_policy(recipe), verbose=False)}


@pytest.mark.parametrize("recipe", ["fp8_hybrid", "fmt:E3M4", "nvfp4", "mxfp8:rceil"])
def test_hp_first_last_and_layers_work_for_every_recipe(recipe):
    rows = _rows(f"{recipe}:hp_first=1:hp_last=1:hp_layers=2+lm_head")
    by_block = {i: [r for m, r in rows.items() if f".h.{i}." in m] for i in range(4)}
    assert all(r["gemm"] == "kept:hp_first" and r["backend"] == "-" for r in by_block[0])
    assert all(r["gemm"] == "kept:hp_last" for r in by_block[3])
    assert all(r["gemm"] == "kept:hp_layers" for r in by_block[2])
    assert all(r["backend"] != "-" for r in by_block[1])
    assert rows["lm_head"]["backend"] == "-"


def test_hp_switch_spellings_are_canonical_and_dicts_accept_them():
    assert canonical_recipe("fp8_hybrid:hp_layers=lm_head+1:hp_last=1:hp_first=2") == \
        "fp8_hybrid:hp_first=2:hp_last=1:hp_layers=1+lm_head"
    assert canonical_recipe("fmt:e4m3:hp_first=0") == "fmt:E4M3"
    assert canonical_recipe("NVFP4:hp_first=1:disable_rht") == "nvfp4:disable_rht:hp_first=1"
    pol = get_policy({"recipe": "fp8_hybrid", "hp_first_blocks": 1, "hp_layers": ["h.1.mlp.c_fc"]})
    assert pol.hp_first_blocks == 1 and pol.hp_layers == ("h.1.mlp.c_fc",)
    rows = _rows(pol)
    assert rows["transformer.h.1.mlp.c_fc"]["gemm"] == "kept:hp_layers"
    with pytest.raises(ValueError, match="hp_first is given twice"):
        get_policy("fp8_hybrid:hp_first=1:hp_first=2")
    with pytest.raises(ValueError, match="which is no Linear of this model"):
        _rows("fp8_hybrid:hp_layers=attn.nope")
    with pytest.raises(ValueError, match="block 7"):
        _rows("fp8_hybrid:hp_layers=7")


# ---------------------------------------------------------------------------------------------- precision switch

def test_set_hp_gemms_switches_and_restores():
    spec = LayerSpec(input="E4M3", weight="E4M3", grad_output="E5M2")
    m = make(spec)
    assert m.gemm is None
    x, dy = data()
    before = run(m, x, dy)
    assert set_hp_gemms(m, ("fprop",)) and m.gemm.hp_gemms == ("fprop",)
    y, _, _ = run(m, x, dy)
    assert torch.equal(y, torch.nn.functional.linear(x, m.weight.detach(), m.bias.detach()))
    assert not set_hp_gemms(m, ("fprop",))                  # already so: no change reported
    assert set_hp_gemms(m, ()) and m.gemm is None
    for u, v in zip(run(m, x, dy), before):
        assert torch.equal(u, v)
