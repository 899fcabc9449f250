"""Tests for altgrad_lib.quantize.recipes: policies/recipes, simulated QuantizedLinear numerics, quantize_model."""
from __future__ import annotations

import copy
import math

import pandas as pd
import pytest
import torch
import torch.nn as nn

from altgrad_lib.numerics.formats import get_format
from altgrad_lib.model import GPT, GPTConfig
from altgrad_lib.numerics.quant_spec import QuantSpec
from altgrad_lib.quantize.recipes import LAYER_CLASSES, LayerSpec, QuantPolicy, get_policy, layer_class_of, sqnr_db
from altgrad_lib.quantize.linear import QuantizedLinear
from altgrad_lib.quantize.convert import COLUMNS, conversion_summary, quantize_model

SMALL = dict(block_size=32, vocab_size=256, n_layer=2, n_head=4, n_embd=64)


def _gpt(**kw) -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(**{**SMALL, **kw}))


def _fwd_bwd(layer: nn.Module, x: torch.Tensor, grad_y: torch.Tensor):
    """(y, dX, dW) of one linear for a fixed input and upstream gradient."""
    x = x.clone().requires_grad_(True)
    layer.zero_grad(set_to_none=True)
    y = layer(x)
    y.backward(grad_y)
    return y.detach(), x.grad.detach(), layer.weight.grad.detach()


def _linear_case(seed=0, m=256, k=128, n=64):
    g = torch.Generator().manual_seed(seed)
    lin = nn.Linear(k, n, bias=False)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(n, k, generator=g) * 0.05)
    x = torch.randn(m, k, generator=g)
    grad_y = torch.randn(m, n, generator=g) * 1e-3   # small, like real gradients: scaling must handle it
    return lin, x, grad_y


def _swap(lin: nn.Linear, policy, layer_class="mlp_up") -> QuantizedLinear:
    spec = get_policy(policy).spec_for(layer_class)
    return QuantizedLinear.from_linear(copy.deepcopy(lin), spec, layer_class, "l")


# ----------------------------------------------------------------------------- policies

def test_recipes_and_layer_classes():
    assert get_policy("hp").spec_for("mlp_up") is None
    assert get_policy("bf16") == get_policy("hp") and get_policy("bf16").name == "hp"   # old name: an alias
    hyb = get_policy("fp8_hybrid")
    s = hyb.spec_for("attn_qkv")
    assert (s.input.fmt.name, s.weight.fmt.name, s.grad_output.fmt.name) == ("E4M3", "E4M3", "E5M2")
    assert s.input.scaling.kind == "current"
    assert hyb.spec_for("lm_head") is None                       # kept high precision by default
    assert get_policy("fp8_hybrid_all").spec_for("lm_head") == s
    assert get_policy("fp8_e4m3").spec_for("mlp_down").grad_output.fmt.name == "E4M3"
    ex = get_policy("fmt:E3M4").spec_for("mlp_down")
    assert (ex.input.fmt.name, ex.weight.fmt.name, ex.grad_output.fmt.name) == ("E3M4", "E3M4", "E5M2")
    assert get_policy("fmt:E2M1:E4M3").spec_for("attn_out").grad_output.fmt.name == "E4M3"
    assert get_policy("fp8_hybrid", backend="torchao").backend == "torchao"
    assert layer_class_of("transformer.h.3.mlp.c_gate") == "mlp_up"
    assert layer_class_of("transformer.h.3.mlp.c_proj") == "mlp_down"
    assert layer_class_of("transformer.h.3.attn.c_proj") == "attn_out"
    assert layer_class_of("transformer.wte") is None
    assert "fp8_hybrid" in hyb.short_str() and "e5m2" in hyb.short_str()


def test_policy_errors_name_valid_choices():
    with pytest.raises(ValueError, match=r"unknown recipe 'fp7'.*fp8_hybrid"):
        get_policy("fp7")
    with pytest.raises(ValueError, match=r"'mlp'.*attn_qkv"):
        QuantPolicy.from_dict({"name": "x", "layers": {"mlp": None}})
    with pytest.raises(ValueError, match=r"'cuda'.*scaled_mm"):
        QuantPolicy.from_dict({"name": "x", "backend": "cuda", "layers": {}})
    with pytest.raises(ValueError, match=r"'inputs'.*grad_output"):
        QuantPolicy.from_dict({"name": "x", "layers": {"*": {"inputs": {"fmt": "E4M3"}}}})
    with pytest.raises(ValueError, match=r"'lr'.*valid keys"):
        QuantPolicy.from_dict({"name": "x", "lr": 1})
    with pytest.raises(ValueError, match="E9M9|format"):
        QuantPolicy.from_dict({"name": "x", "layers": {"*": {"input": {"fmt": "E9M9"}}}})


def test_policy_from_dict_round_trip():
    d = {"name": "custom", "backend": "sim", "seed": 3,
         "layers": {"*": {"input": {"fmt": "E4M3"}, "weight": {"fmt": "E4M3"}, "grad_output": {"fmt": "E5M2"}},
                    "attn_qkv": {"input": {"fmt": "E3M4", "rounding": "stochastic"}, "weight": "E3M4"},
                    "lm_head": None}}
    p = QuantPolicy.from_dict(d)
    assert p.spec_for("attn_qkv").grad_output is None and p.spec_for("attn_qkv").input.rounding == "stochastic"
    assert p.spec_for("lm_head") is None and p.spec_for("mlp_down").input.fmt.name == "E4M3"
    assert QuantPolicy.from_dict(p.to_dict()) == p
    for name in ("fp8_hybrid", "fp8_hybrid_all", "fp8_e4m3", "fmt:E2M3", "hp"):
        assert QuantPolicy.from_dict(get_policy(name).to_dict()) == get_policy(name)
    # a recipe as base with overrides
    q = get_policy({"recipe": "fp8_hybrid", "backend": "torchao", "layers": {"mlp_down": None}})
    assert q.name == "fp8_hybrid" and q.backend == "torchao" and q.spec_for("mlp_down") is None


# ----------------------------------------------------------------------------- QuantizedLinear numerics

def test_sim_fp8_hybrid_matches_an_independent_reference():
    """Y, dX, dW of fp8_hybrid (E4M3 X/W, E5M2 dY, current scaling) against gfloat codes + FP64 GEMMs: the
    disagreement must be at least 30 dB (1000x in error energy) below the quantization error itself."""
    from helpers import quantized_linear_reference

    lin, x, gy = _linear_case()
    exact = _fwd_bwd(lin, x, gy)
    got = _fwd_bwd(_swap(lin, "fp8_hybrid"), x, gy)
    ref = quantized_linear_reference(x, lin.weight, gy)
    for name, e, g, r in zip(("y", "dX", "dW"), exact, got, ref):
        assert sqnr_db(r, g) > sqnr_db(e, g) + 30, (name, sqnr_db(r, g), sqnr_db(e, g))
        assert sqnr_db(e, g) < 60, name                          # it really quantized something


def test_backward_quantizes_grad_output_once_onto_the_grid():
    # identity weight and no X/W quantization: dX = Q(dY) exactly, so the hook sees the quantized gradient
    k = 64
    lin = nn.Linear(k, k, bias=False)
    with torch.no_grad():
        lin.weight.copy_(torch.eye(k))
    spec = LayerSpec(grad_output=QuantSpec(fmt="E2M1"))          # coarse: 2**-1 grid steps, max 6
    q = QuantizedLinear.from_linear(lin, spec, "mlp_up", "l")
    g = torch.Generator().manual_seed(0)
    x = torch.randn(32, k, generator=g).requires_grad_(True)
    gy = torch.randn(32, k, generator=g)
    seen = []
    x.register_hook(lambda grad: seen.append(grad.clone()))
    q(x).backward(gy)
    (dx,) = seen
    s = get_format("E2M1").max / gy.abs().max()                  # current per-tensor scale
    grid = get_format("E2M1").values().float()
    on_grid = (dx * s).unsqueeze(-1).sub(grid).abs().min(-1).values
    assert on_grid.max() < 1e-5
    assert sqnr_db(gy, dx) < 20                                 # very coarse, so clearly not FP32
    # dW used the same Q(dY): dW = Q(dY)ᵀ · X
    torch.testing.assert_close(q.weight.grad, dx.t() @ x.detach(), rtol=1e-5, atol=1e-6)
    assert sqnr_db(gy.t() @ x.detach(), q.weight.grad) < 20


def test_ste_reaches_master_weights():
    lin, x, gy = _linear_case()
    q = _swap(lin, "fp8_hybrid")
    assert q.weight.dtype == torch.float32 and q.weight.requires_grad
    y, dx, dw = _fwd_bwd(q, x, gy)
    # identity STE: dW = Q(dY)ᵀ · Q(X), a dense fp32 gradient on the fp32 master weight
    assert dw.shape == q.weight.shape and dw.abs().gt(0).float().mean() > 0.99
    w0 = q.weight.detach().clone()
    torch.optim.SGD(q.parameters(), lr=1.0).step()
    assert not torch.equal(w0, q.weight.detach())
    torch.testing.assert_close(q.weight.detach(), w0 - dw)     # plain fp32 update of the master weight


def test_each_quantizer_gets_a_distinct_deterministic_seed():
    m1, m2 = _gpt(), _gpt()
    pol = get_policy("fp8_hybrid", seed=7)
    quantize_model(m1, pol, verbose=False)
    quantize_model(m2, pol, verbose=False)
    seeds1 = [q.seed for mod in m1.modules() if isinstance(mod, QuantizedLinear)
              for q in (mod.x_quant, mod.w_quant, mod.g_quant)]
    seeds2 = [q.seed for mod in m2.modules() if isinstance(mod, QuantizedLinear)
              for q in (mod.x_quant, mod.w_quant, mod.g_quant)]
    assert seeds1 == seeds2 and len(set(seeds1)) == len(seeds1)


# ----------------------------------------------------------------------------- quantize_model

def test_per_layer_policy_puts_the_right_spec_on_the_right_module():
    m = _gpt(mlp="swiglu")
    pol = QuantPolicy.from_dict({"name": "mix", "layers": {
        "*": {"input": "E4M3", "weight": "E4M3", "grad_output": "E5M2"},
        "attn_qkv": {"input": "E3M4", "weight": "E3M4"},
        "mlp_down": None,
    }})
    table = quantize_model(m, pol, verbose=False)
    blk = m.transformer.h[1]
    assert isinstance(blk.attn.c_attn, QuantizedLinear) and blk.attn.c_attn.x_quant.spec.fmt.name == "E3M4"
    assert blk.attn.c_attn.g_quant is None
    assert blk.attn.c_proj.w_quant.spec.fmt.name == "E4M3" and blk.attn.c_proj.g_quant.spec.fmt.name == "E5M2"
    assert isinstance(blk.mlp.c_gate, QuantizedLinear) and isinstance(blk.mlp.c_fc, QuantizedLinear)
    assert type(blk.mlp.c_proj) is nn.Linear
    assert isinstance(m.lm_head, QuantizedLinear)              # "*" applies to lm_head when not overridden
    t = {r["module"]: r for r in table}
    row = t["transformer.h.1.attn.c_attn"]
    assert row["class"] == "attn_qkv" and row["input"].startswith("e3m4") and row["grad_output"] == "hp"
    assert t["transformer.h.0.mlp.c_proj"]["backend"] == "-"


def test_quantize_model_rows_and_what_it_prints(capsys):
    m = _gpt()
    rows = quantize_model(m, "fp8_hybrid")
    out = capsys.readouterr().out
    assert isinstance(rows, list) and all(list(r) == list(COLUMNS) for r in rows)   # plain data, no pandas
    assert COLUMNS == ("module", "class", "shape", "input", "weight", "grad_output", "gemm", "backend")
    assert len(rows) == 2 * 4 + 1                               # 4 Linears per GELU block + lm_head
    t = {r["module"]: r for r in rows}
    assert t["lm_head"]["input"] == "hp" and t["lm_head"]["backend"] == "-"
    assert t["transformer.h.0.attn.c_attn"]["shape"] == (192, 64)
    assert t["transformer.h.0.mlp.c_fc"]["grad_output"].startswith("e5m2")
    assert {r["gemm"] for r in rows} == {"-"}                   # per-tensor, no `gemm:`: the classic path
    summary = conversion_summary(rows, "fp8_hybrid")
    assert "8/9 Linear quantized" in summary and "lm_head" in summary
    # the printed table is the one pandas prints (the oracle: what quantize_model printed before)
    with pd.option_context("display.width", 200, "display.max_columns", 10, "display.max_colwidth", 40):
        expected = pd.DataFrame(rows, columns=list(COLUMNS)).to_string(index=False)
    assert out == f"{expected}\n{summary}\n"
    with pytest.raises(ValueError, match="once per model"):
        quantize_model(m, "fp8_hybrid", verbose=False)


def test_model_surgery_imports_no_pandas():
    import subprocess
    import sys

    code = "import sys, altgrad_lib.quantize.convert; print('pandas' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_quantization_table_is_the_rows_as_a_frame():
    from altgrad_lib.notebook.tables import quantization_table

    rows = quantize_model(_gpt(mlp="swiglu"), "fp8_hybrid", verbose=False)
    df = quantization_table(rows)
    assert list(df.columns) == list(COLUMNS) and df.to_dict("records") == rows


def test_tied_weights_stay_tied():
    m = _gpt()
    quantize_model(m, "fp8_hybrid_all", verbose=False)
    assert isinstance(m.lm_head, QuantizedLinear)
    assert m.lm_head.weight is m.transformer.wte.weight
    idx = torch.randint(0, 256, (2, 16))
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    m(idx, idx)[1].backward()
    opt.step()
    assert m.lm_head.weight is m.transformer.wte.weight
    assert len(list(m.parameters())) == len(list(_gpt().parameters()))


def test_hp_recipe_changes_nothing():
    ref, m = _gpt(), _gpt()
    rows = quantize_model(m, "hp", verbose=False)
    assert {r["backend"] for r in rows} == {"-"}
    idx = torch.randint(0, 256, (2, 32))
    assert torch.equal(ref(idx)[0], m(idx)[0])
    assert all(type(mod) is nn.Linear for mod in m.modules() if isinstance(mod, nn.Linear))


def test_quantized_model_loss_close_to_fp32_and_trains():
    ref, m = _gpt(mlp="swiglu"), _gpt(mlp="swiglu")
    quantize_model(m, "fp8_hybrid", verbose=False)
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, 256, (4, 32), generator=g)
    tgt = torch.randint(0, 256, (4, 32), generator=g)
    loss_ref, loss = ref(idx, tgt)[1], m(idx, tgt)[1]
    assert abs(loss.item() - math.log(256)) < 0.1
    assert abs(loss.item() - loss_ref.item()) < 1e-2
    loss.backward()
    assert all(p.grad is not None for p in m.parameters())


def test_state_dict_round_trip_reproduces_next_step_bit_exactly():
    sr = {"fmt": "E4M3", "rounding": "stochastic"}
    pol = QuantPolicy.from_dict({"name": "sr", "seed": 1, "layers": {
        "*": {"input": sr, "weight": {"fmt": "E4M3"}, "grad_output": {"fmt": "E5M2", "rounding": "stochastic"}}}})
    m = _gpt()
    quantize_model(m, pol, verbose=False)
    idx = torch.randint(0, 256, (2, 32))
    m(idx, idx)[1].backward()                                   # advances SR generators and counters
    state = copy.deepcopy(m.state_dict())
    assert any(k.endswith("_extra_state") for k in state)

    def step(model):
        model.zero_grad(set_to_none=True)
        logits, loss = model(idx, idx)
        loss.backward()
        return logits.detach(), model.transformer.h[0].attn.c_attn.weight.grad.clone()

    logits_a, grad_a = step(m)
    m2 = _gpt()
    quantize_model(m2, pol, verbose=False)
    m2.load_state_dict(state)
    logits_b, grad_b = step(m2)
    assert torch.equal(logits_a, logits_b) and torch.equal(grad_a, grad_b)
    logits_c, _ = step(m2)                                      # the stream moved on: SR is really random
    assert not torch.equal(logits_b, logits_c)


@pytest.mark.parametrize("mlp", ["gelu", "swiglu"])
def test_every_gpt_linear_has_a_layer_class_and_every_class_occurs(mlp):
    """The module-name contract, checked on the real model: no Linear escapes the policy, no class is dead."""
    m = _gpt(mlp=mlp)
    linears = [n for n, mod in m.named_modules() if isinstance(mod, nn.Linear)]
    classes = {n: layer_class_of(n) for n in linears}
    assert None not in classes.values(), classes
    assert set(classes.values()) == set(LAYER_CLASSES)


def test_compiles_without_graph_breaks_and_matches_eager():
    # buffer updates inside the dY backward used to break the graph at every layer (~5x slower compiled)
    m = _gpt(n_layer=1)
    quantize_model(m, "fp8_hybrid", verbose=False)
    idx = torch.randint(0, 256, (2, 32))
    explain = torch._dynamo.explain(m)(idx, idx)
    assert explain.graph_break_count == 0, [b.reason for b in explain.break_reasons]
    # numerics of the compiled (stateless dY) path equal the eager (stateful) one; aot_eager keeps it cheap
    lin, x, gy = _linear_case()
    q = _swap(lin, "fp8_hybrid")
    eager = _fwd_bwd(q, x, gy)
    n_grad_elems = q.g_quant.n_elements.clone()
    torch._dynamo.reset()
    compiled = _fwd_bwd(torch.compile(q, backend="aot_eager"), x, gy)
    for a, b in zip(eager, compiled):
        assert torch.equal(a, b)
    assert torch.equal(q.g_quant.n_elements, n_grad_elems)   # the stateless dY path ran (counters: eager only)


def test_bf16_autocast_does_not_round_the_quantized_operands_again():
    """Under autocast the GEMM sees the exact quantized values (as FP8 hardware sees the exact codes): the
    output is the fp32 result rounded to bf16 once, and it matches an FP64 GEMM of codes computed by gfloat."""
    import gfloat
    from gfloat import RoundMode

    from helpers import gfloat_info

    lin, x, gy = _linear_case()
    layer = _swap(lin, "fmt:E1M6")
    y32, dx32, dw32 = _fwd_bwd(layer, x, gy.bfloat16().float())
    xa = x.clone().requires_grad_(True)
    layer.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        yac = layer(xa)
    yac.backward(gy.bfloat16())                                   # as train() does: backward outside autocast
    yac, dxac, dwac = yac.detach(), xa.grad, layer.weight.grad
    assert yac.dtype == torch.bfloat16
    assert torch.equal(yac, y32.bfloat16())                       # one rounding, of the fp32 result
    assert torch.equal(dxac.float(), dx32) and torch.equal(dwac, dw32)
    # independent reference: E1M6 codes from gfloat, FP64 GEMM, per-tensor scales fmax/amax as in the spec
    fmt = get_format("E1M6")
    fi = gfloat_info(fmt)
    sx = fmt.max / x.abs().max().double()
    sw = fmt.max / lin.weight.detach().abs().max().double()
    cx = torch.from_numpy(gfloat.round_ndarray(fi, (x.double() * sx).numpy(), RoundMode.TiesToEven, sat=True))
    cw = torch.from_numpy(gfloat.round_ndarray(fi, (lin.weight.detach().double() * sw).numpy(), RoundMode.TiesToEven,
                                               sat=True))
    ref = (cx @ cw.t()) / (sx * sw)
    assert float(((y32.double() - ref).norm() / ref.norm())) < 1e-5


@pytest.mark.parametrize("make, role", [
    (lambda: LayerSpec(input="E8M0FNU"), "input"),
    (lambda: LayerSpec(weight=QuantSpec(fmt="E8M0FNU")), "weight"),
    (lambda: get_policy("fmt:E4M3:E8M0FNU"), "grad_output"),
    (lambda: get_policy("fmt:E8M0"), "input"),                                    # the alias: same format
    (lambda: QuantPolicy.from_dict({"name": "u", "layers": {"mlp_up": {"weight": {"fmt": "e8m0fnu"}}}}), "weight"),
])
def test_unsigned_formats_are_refused_for_signed_operands(make, role):
    # E8M0FNU has no sign bit (FloatFormat.signed=False); as an operand format every negative
    # X / W / dY value became NaN at step 0, recorded as a "diverged" result
    with pytest.raises(ValueError, match=rf"LayerSpec.{role}: format E8M0FNU has no sign bit, but the {role} tensor "
                                         r"holds negative values; use a signed format") as ei:
        make()
    assert "\n" not in str(ei.value)


def test_unsigned_e8m0_stays_what_it_is_for():
    # the MX block scale (numerics/block_scaling.py, also spelled per_block) and the format itself (notebook 01)
    # still work
    f = get_format("E8M0FNU")
    assert not f.signed and f.quantize(torch.tensor([0.25, 4.0])).tolist() == [0.25, 4.0]   # powers of two
    spec = LayerSpec(input=QuantSpec(fmt="E4M3", scaling={"kind": "per_block", "block_size": 32}))
    assert spec.input.scaling.kind == "mx" and spec.input.scaling.block_size == 32


def test_recipe_typo_suggests_the_near_name():
    with pytest.raises(ValueError, match=r"unknown recipe 'fp8_hybird'; did you mean 'fp8_hybrid'\?; valid choices"):
        get_policy("fp8_hybird")


def test_every_gemm_setting_in_force_is_in_the_config_and_the_layer_table():
    """A dict recipe on the GEMM-faithful path records every GemmOptions setting it runs with (config.yaml is
    TrainConfig.to_dict) and its block scaling in full ('per_block' as the MX it is: one run identity with 'mx');
    the layer table's gemm column says the same. Classic-path dicts keep their dict (and hash)."""
    from altgrad_lib.quantize.recipes import canonical_recipe
    from altgrad_lib.training.config import TrainConfig

    def recipe(scaling, gemm=None, fmt="E4M3"):
        spec = {r: {"fmt": fmt, "scaling": scaling} for r in ("input", "weight", "grad_output")}
        return {"name": "r", "layers": {"*": {**spec, **({"gemm": gemm} if gemm is not None else {})}, "lm_head": None}}

    c = TrainConfig(recipe=recipe("per_block"))
    star = c.recipe["layers"]["*"]
    assert star["gemm"] == {"hp_gemms": [], "rht": [], "rht_dim": 16, "columnwise_source": "hp"}
    assert star["input"]["scaling"] == {"kind": "mx", "block_size": 32, "tile_2d": False, "mode": "floor",
                                        "headroom": 1.0}
    assert TrainConfig(recipe=recipe("mx")).config_hash() == c.config_hash()
    assert TrainConfig(recipe=c.recipe).config_hash() == c.config_hash()          # canonical is a fixed point
    # a `gemm:` block keeps the keys it wrote and shows the rest: no RHT unless asked for
    g = canonical_recipe(recipe("current", {"hp_gemms": ["dgrad"]}))["layers"]["*"]["gemm"]
    assert g == {"hp_gemms": ["dgrad"], "rht": [], "rht_dim": 16, "columnwise_source": "hp"}
    plain = recipe("current")
    assert canonical_recipe(plain) == plain
    rows = quantize_model(_gpt(), c.recipe, verbose=False)
    assert {r["gemm"] for r in rows if r["backend"] != "-"} == {"plain"}
    rows = quantize_model(_gpt(), "nvfp4", verbose=False)
    assert {r["gemm"] for r in rows if r["backend"] != "-"} == {"rht:wgrad"}
