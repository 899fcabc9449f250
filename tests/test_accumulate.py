"""Accumulator precision inside a GEMM (numerics/accumulate.py) and its wiring (GemmOptions.accum).

Oracles: one addition against exact rational arithmetic (fractions.Fraction) written from the model's equations
(round-to-nearest-even; alignment truncation as Fasi et al. 2021 describe it); the per-add BF16 / FP16 accumulators
against sequential loops in ml_dtypes bfloat16 / numpy float16 (round to nearest even after every addition); the
fast per-chunk path against a slow loop of the same model written here; promotion against plain float32 loops.
"""
from __future__ import annotations

import json
import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from altgrad_lib.model import GPT, GPTConfig, compile_units
from altgrad_lib.numerics import accumulate
from altgrad_lib.numerics.accumulate import (AccumSpec, accumulate_add, accumulate_matmul,
                                             accumulate_matmul_per_add_reference)
from altgrad_lib.numerics.block_scaling import STORES_IN_KERNEL
from altgrad_lib.numerics.formats import get_format
from altgrad_lib.numerics.rounding import quantize_tensor
from altgrad_lib.quantize.convert import quantize_model
from altgrad_lib.quantize.gemm_quant import GemmOptions
from altgrad_lib.quantize.linear import QuantizedLinear, accum_loop_steps
from altgrad_lib.quantize.recipes import LayerSpec, get_policy
from altgrad_lib.training.config import TrainConfig
from altgrad_lib.training.loop import train

E4M3 = get_format("E4M3")
FP8 = {"input": "E4M3", "weight": "E4M3", "grad_output": "E5M2"}


def _fp8_operands(m: int, k: int, n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """E4M3-grid operands (power-of-two scale 1): products have <= 8 significant bits, exact in every accumulator
    here, and float64 sums of them are exact (so any summation order gives the same chunk sums)."""
    g = torch.Generator().manual_seed(seed)
    a = E4M3.quantize(torch.randn(m, k, generator=g) * 4)
    b = E4M3.quantize(torch.randn(k, n, generator=g) * 4)
    return a, b


# ------------------------------------------------------------------ one addition vs exact rational arithmetic

def _floor_log2(x: Fraction) -> int:
    e = x.numerator.bit_length() - x.denominator.bit_length()
    return e if Fraction(2) ** e <= x else e - 1


def _oracle_add(acc: float, p: float, spec: AccumSpec) -> float:
    """The model's addition in exact arithmetic: IEEE-style format (bias 2^(e-1)-1, subnormals), RNE of the exact
    sum, or (truncate) both addends cut at the accumulator's last place at the larger one's exponent, then the sum
    truncated toward zero."""
    e_bits, m = spec.exp_bits, spec.man_bits
    bias = 2 ** (e_bits - 1) - 1
    emin, fmax = 1 - bias, (2 - Fraction(1, 2**m)) * Fraction(2) ** (2**e_bits - 2 - bias)

    def quantum(x: Fraction) -> Fraction:
        return Fraction(2) ** (max(_floor_log2(abs(x)) if x else emin, emin) - m)

    fa, fp = Fraction(acc), Fraction(p)
    if spec.rounding == "nearest":
        s = fa + fp
        if s == 0:
            return 0.0
        q = quantum(s)
        r = round(s / q) * q                 # Fraction's round(): half to even
        return math.copysign(math.inf, r) if abs(r) > fmax else float(r)
    q = quantum(max(abs(fa), abs(fp)))
    s = (int(fa / q) + int(fp / q)) * q      # int(): toward zero
    if s == 0:
        return 0.0
    q2 = quantum(s)
    r = int(s / q2) * q2
    return float(max(min(r, fmax), -fmax))


_SPECS = [AccumSpec("fp22"), AccumSpec("fp22", rounding="nearest"), AccumSpec("bf16"), AccumSpec("fp16"),
          AccumSpec("bf16", rounding="truncate"), AccumSpec("fp16", exp_bits=4, man_bits=3)]
_f32 = st.floats(width=32, allow_nan=False, allow_infinity=False, min_value=-(2.0**50), max_value=2.0**50)


@settings(max_examples=300, deadline=None)
@given(spec=st.sampled_from(_SPECS), acc=_f32, x=_f32, y=_f32)
def test_one_addition_equals_exact_rational_oracle(spec, acc, x, y):
    acc = _oracle_add(acc, 0.0, AccumSpec(spec.fmt, exp_bits=spec.exp_bits, man_bits=spec.man_bits))  # on grid
    if math.isinf(acc):
        return
    p = float(Fraction(x) * Fraction(y))        # the exact product of two float32 (48 bits: a float64)
    got = accumulate_add(torch.tensor([acc], dtype=torch.float64), torch.tensor([p], dtype=torch.float64), spec)
    assert got.item() == _oracle_add(acc, p, spec)


def test_nearest_is_not_a_double_rounding():
    """1 + (2^-14 + 2^-60) at 13 mantissa bits: just above the tie 1 + 2^-14, so it rounds up; float64's own sum
    drops the 2^-60 and would tie to even (1.0)."""
    spec = AccumSpec("fp22", rounding="nearest")
    acc, p = torch.tensor([1.0, -1.0], dtype=torch.float64), torch.tensor([2**-14 + 2**-60, -(2**-14 + 2**-60)],
                                                                            dtype=torch.float64)
    assert accumulate_add(acc, p, spec).tolist() == [1 + 2**-13, -(1 + 2**-13)]
    naive = quantize_tensor(acc + p, spec.kernel, "nearest", saturate=False)   # the double rounding guarded against
    assert naive.tolist() == [1.0, -1.0]


def test_truncate_drops_the_small_addend_below_the_last_place():
    """fp22 (13 mantissa bits) at 1.0: adding 2^-14 (half a unit) changes nothing, -2^-14 changes nothing either
    (aligned and truncated to 0: no sticky bit), while round-toward-zero of the exact sum would give 1 - 2^-14."""
    spec = AccumSpec("fp22")
    acc = torch.ones(3, dtype=torch.float64)
    p = torch.tensor([2**-14, -(2**-14), 2**-13 + 2**-14], dtype=torch.float64)
    assert accumulate_add(acc, p, spec).tolist() == [1.0, 1.0, 1 + 2**-13]


def test_kernels_are_the_packages_wide_formats():
    assert AccumSpec("bf16").kernel == get_format("BF16").kernel
    assert AccumSpec("fp16").kernel == get_format("FP16").kernel


# ------------------------------------------------------------------ per-add vs independent BF16 / FP16 loops

@pytest.mark.parametrize("fmt,dtype", [("bf16", ml_dtypes.bfloat16), ("fp16", np.float16)])
def test_per_add_bf16_fp16_equal_sequential_numpy_loops(fmt, dtype):
    """acc <- dtype(acc + a_k b_k) for k = 0..K-1, in numpy (float64 sum of float32 operands' products: exact
    here, 48-bit products of values within a few binades; numpy float16 and ml_dtypes bfloat16 round to nearest
    even from float64). Scaled fp32 operands, not FP8 ones: the products use all their bits."""
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(6, 200, generator=g) / 3, torch.randn(200, 5, generator=g) / 3
    spec = AccumSpec(fmt, model="per_add")
    an, bn = a.double().numpy(), b.double().numpy()
    acc = np.zeros((6, 5), dtype=dtype)
    for k in range(200):
        acc = (acc.astype(np.float64) + an[:, k:k + 1] * bn[k:k + 1, :]).astype(dtype)
    want = torch.from_numpy(acc.astype(np.float32))
    assert torch.equal(accumulate_matmul_per_add_reference(a, b, spec), want)
    assert torch.equal(accumulate_matmul(a, b, spec), want)
    assert not torch.equal(want, a.mm(b))               # the accumulator changed the result


# ------------------------------------------------------------------ per-chunk fast path vs a slow loop

def _slow_per_chunk(a, b, spec: AccumSpec) -> torch.Tensor:
    """The per-chunk model as a plain loop: chunk sums by float64 mm of the K-slices, promotion by product count."""
    k, c = a.shape[1], spec.chunk
    n = spec.promote_every if 0 < spec.promote_every < k else None
    total = torch.zeros(a.shape[0], b.shape[1])
    acc = torch.zeros(a.shape[0], b.shape[1], dtype=torch.float64)
    for start in range(0, k, c):
        end = min(start + c, k)
        acc = accumulate_add(acc, a[:, start:end].double().mm(b[start:end].double()), spec)
        if n is not None and end % n == 0 and end < k:
            total, acc = total + acc.float(), torch.zeros_like(acc)
    return total + acc.float()


@settings(max_examples=40, deadline=None)
@given(k=st.integers(1, 700), chunk=st.sampled_from([1, 4, 32, 48]), times=st.sampled_from([0, 1, 2, 4, 100]),
       spec=st.sampled_from([AccumSpec("fp22"), AccumSpec("bf16"), AccumSpec("fp16")]),
       seed=st.integers(0, 2**16))
def test_fast_per_chunk_equals_slow_loop(k, chunk, times, spec, seed):
    spec = AccumSpec(spec.fmt, chunk=chunk, promote_every=chunk * times)
    a, b = _fp8_operands(5, k, 3, seed)
    assert torch.equal(accumulate_matmul(a, b, spec), _slow_per_chunk(a, b, spec))


def test_chunk_one_is_per_add():
    a, b = _fp8_operands(7, 300, 4)
    for fmt in ("fp22", "bf16"):
        for n in (0, 64):
            got = accumulate_matmul(a, b, AccumSpec(fmt, chunk=1, promote_every=n))
            assert torch.equal(got, accumulate_matmul_per_add_reference(a, b, AccumSpec(fmt, model="per_add",
                                                                                       promote_every=n)))


def test_per_add_vs_per_chunk_distance():
    """How far the per-chunk model (chunk 32) is from the per-add ground truth, on E4M3-grid operands (randn*4,
    16 x K x 16, seed K). Measured (max |err| / max |exact|; fp22 = 8 exponent, 13 mantissa bits, no promotion):
        K      truncate: per_add  per_chunk  chunk-vs-add  chunk+p128 | nearest: per_add  per_chunk  chunk-vs-add
        256              2.5e-04    2.6e-04     4.2e-04      1.1e-04  |          2.0e-04    8.0e-05     2.1e-04
        1024             7.4e-04    4.5e-04     9.0e-04      1.1e-04  |          4.7e-04    1.7e-04     5.3e-04
        4096             2.1e-03    7.1e-04     2.3e-03      7.7e-05  |          1.3e-03    4.5e-04     9.8e-04
    and per_chunk differs from per_add in 85 % / 95 % / 97 % of the elements (truncate): the per-chunk model is
    not the per-add one to the bit, but its error is of the same order and grows more slowly with K (K/32
    roundings instead of K). Asserted: per_chunk closer to the exact sum on average (each truncation loses up
    to one unit, toward zero on a same-sign run), and both within K units in the last place of the largest
    partial sum (the bound of K truncations)."""
    for k in (256, 1024, 4096):
        a, b = _fp8_operands(16, k, 16, seed=k)
        exact = a.double().mm(b.double())
        add = accumulate_matmul_per_add_reference(a, b, AccumSpec("fp22", model="per_add")).double()
        chunk = accumulate_matmul(a, b, AccumSpec("fp22")).double()
        assert (chunk - exact).abs().mean() < (add - exact).abs().mean()
        bound = k * 2.0**-13 * (a.double().abs().mm(b.double().abs())).max()
        assert (add - exact).abs().max() <= bound and (chunk - exact).abs().max() <= bound


# ------------------------------------------------------------------ promotion

def test_promote_every_k_or_more_is_never():
    a, b = _fp8_operands(4, 256, 5)
    never = accumulate_matmul(a, b, AccumSpec("fp22"))
    for n in (256, 512, 2**20):
        assert torch.equal(accumulate_matmul(a, b, AccumSpec("fp22", promote_every=n)), never)
    assert not torch.equal(accumulate_matmul(a, b, AccumSpec("fp22", promote_every=128)), never)


def test_promote_every_product_is_a_sequential_fp32_sum():
    """promote_every=1 (per_add): each product is rounded to the accumulator alone and added into the FP32 total.
    E4M3 products have <= 8 significant bits, exact in fp22 and bf16, so this is the sequential float32 sum of the
    products (float32 products of E4M3 values are exact too)."""
    a, b = _fp8_operands(4, 300, 5)
    total = torch.zeros(4, 5)
    for j in range(300):
        total = total + a[:, j, None] * b[None, j, :]
    for fmt in ("fp22", "bf16"):
        spec = AccumSpec(fmt, model="per_add", promote_every=1)
        assert torch.equal(accumulate_matmul_per_add_reference(a, b, spec), total)
        assert torch.equal(accumulate_matmul(a, b, spec), total)


def test_promote_every_chunk_is_an_fp32_sum_of_rounded_chunks():
    a, b = _fp8_operands(4, 256, 5)
    spec = AccumSpec("fp22", promote_every=32)
    total = torch.zeros(4, 5)
    for s in range(0, 256, 32):     # fp22 truncation of one exact chunk sum, then float32 addition
        part = accumulate_add(torch.zeros(4, 5, dtype=torch.float64), a[:, s:s + 32].double().mm(b[s:s + 32].double()),
                              spec)
        total = total + part.float()
    assert torch.equal(accumulate_matmul(a, b, spec), total)


# ------------------------------------------------------------------ the FP32 default and run identity

def test_fp32_is_the_plain_matmul():
    a, b = torch.randn(8, 70), torch.randn(70, 9)
    assert torch.equal(accumulate_matmul(a, b, AccumSpec()), a.mm(b))
    assert torch.equal(accumulate_matmul(a, b, None), a.mm(b))
    assert GemmOptions(accum="fp32").accum == () == GemmOptions(accum={"wgrad": "fp32"}).accum


def test_hashes_of_existing_recipes_unchanged():
    """The hash of a GEMM-faithful dict recipe, computed on the code before accumulators existed (commit 79f649b):
    a default `accum` in GemmOptions.to_dict would change it. Named recipes' GemmOptions carry no `accum` key."""
    d = {"name": "x", "layers": {"*": dict(FP8, gemm={"rht": ["wgrad"]})}}
    assert TrainConfig(recipe=d).config_hash()[:16] == "529b39888268c1ad"
    d0 = {"name": "y", "layers": {"*": dict(FP8, gemm={})}}
    assert TrainConfig(recipe=d0).config_hash()[:16] == "d7ce6e9506a55332"
    assert "accum" not in GemmOptions().to_dict()
    for name in ("nvfp4", "mxfp8", "mxfp4"):
        assert "accum" not in get_policy(name).spec_for("mlp_up").gemm_options.to_dict()
    # an explicit FP32 accumulator is the default: the same run
    d32 = {"name": "x", "layers": {"*": dict(FP8, gemm={"rht": ["wgrad"], "accum": "fp32"})}}
    assert TrainConfig(recipe=d32).config_hash() == TrainConfig(recipe=d).config_hash()


def test_shorthand_and_per_gemm_spellings_are_one_run():
    full = {g: {"fmt": "fp22"} for g in ("fprop", "dgrad", "wgrad")}
    a = TrainConfig(recipe={"name": "x", "layers": {"*": dict(FP8, gemm={"accum": "fp22"})}})
    b = TrainConfig(recipe={"name": "x", "layers": {"*": dict(FP8, gemm={"accum": full})}})
    c = TrainConfig(recipe={"name": "x", "layers": {"*": dict(FP8, gemm={"accum": {"wgrad": "fp22"}})}})
    assert a.config_hash() == b.config_hash() != c.config_hash()


def test_short_str_and_layer_table_show_the_accumulator():
    pol = get_policy({"name": "x", "recipe": "fp8_hybrid",
                      "layers": {"*": dict(FP8, gemm={"accum": {"wgrad": {"fmt": "fp22", "promote_every": 128}}})}})
    assert "acc:wgrad=fp22/rz/c32/p128" in pol.short_str()
    assert (GemmOptions(accum="bf16", hp_gemms=["dgrad"]).short_str()
            == "hp:dgrad,acc:fprop=bf16/rn/c32+wgrad=bf16/rn/c32")
    assert GemmOptions(accum={"fmt": "fp22", "model": "per_add"}).short_str() == "acc:fp22/rz/add"
    m = torch.nn.Sequential()
    m.add_module("mlp", torch.nn.Module())
    m.mlp.add_module("c_fc", torch.nn.Linear(8, 8))
    rows = quantize_model(m, pol, verbose=False)
    assert rows[0]["gemm"] == "acc:wgrad=fp22/rz/c32/p128"


# ------------------------------------------------------------------ one-line errors before any compute

@pytest.mark.parametrize("kwargs,needle", [
    ({"fmt": "fp8"}, "valid choices: ('fp32', 'bf16', 'fp16', 'fp22')"),
    ({"fmt": "fp22", "rounding": "stochastic"}, "valid choices: ('nearest', 'truncate')"),
    ({"fmt": "fp22", "model": "kahan"}, "valid choices: ('per_add', 'per_chunk')"),
    ({"fmt": "fp22", "chunk": 0}, "chunk=0 is invalid"),
    ({"fmt": "fp22", "promote_every": -1}, "promote_every=-1 is invalid"),
    ({"fmt": "fp22", "promote_every": 100}, "not a multiple of chunk=32"),
    ({"fmt": "fp22", "man_bits": 30}, "man_bits=30 is invalid"),
    ({"fmt": "bf16", "exp_bits": 9}, "exp_bits=9 is invalid"),
    ({"fmt": "fp32", "promote_every": 128}, "takes no other field"),
])
def test_bad_spec_one_line_error(kwargs, needle):
    with pytest.raises(ValueError) as e:
        AccumSpec(**kwargs)
    assert needle in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("accum,needle", [
    ({"wgrad2": "fp22"}, "valid: GEMMs ('fprop', 'dgrad', 'wgrad')"),
    ({"wgrad": "fp22", "x": 1}, "unknown GEMM(s) ['x']"),
    ({"wgrad": {"fmt": "fp22", "chunky": 4}}, "GemmOptions.accum['wgrad']: unknown AccumSpec key(s) ['chunky']"),
    ("fp23", "GemmOptions.accum: AccumSpec.fmt='fp23' is invalid"),
])
def test_bad_accum_in_a_recipe_fails_at_config_load(accum, needle):
    with pytest.raises(ValueError) as e:
        TrainConfig(recipe={"name": "x", "layers": {"*": dict(FP8, gemm={"accum": accum})}})
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_accum_on_a_high_precision_gemm_is_refused_but_the_shorthand_skips_it():
    with pytest.raises(ValueError, match="hp_gemms keeps in high precision"):
        GemmOptions(hp_gemms=("wgrad",), accum={"wgrad": "fp22"})
    assert [g for g, _ in GemmOptions(hp_gemms=("wgrad",), accum="fp22").accum] == ["fprop", "dgrad"]


def test_spec_round_trips():
    for spec in _SPECS + [AccumSpec("fp22", model="per_add", promote_every=100)]:
        assert AccumSpec.from_dict(spec.to_dict()) == spec
        assert AccumSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    assert AccumSpec.from_dict("fp22") == AccumSpec(fmt="fp22", exp_bits=8, man_bits=13, rounding="truncate")


# ------------------------------------------------------------------ in a layer: each GEMM, and compiled == eager

def _layer(accum, seed: int = 0, shape=(48, 24)) -> QuantizedLinear:
    torch.manual_seed(seed)
    return QuantizedLinear(*shape, bias=False, layer_spec=LayerSpec(**FP8, gemm={"accum": accum}), seed=3)


def _layer_grads(layer, x, fn=None):
    x = x.clone().requires_grad_(True)
    y = (layer if fn is None else fn)(x)
    (y * torch.linspace(-1, 1, y.numel()).reshape(y.shape)).sum().backward()
    return y.detach(), x.grad, layer.weight.grad


def test_each_gemm_uses_its_accumulator():
    """Only the GEMM given an accumulator changes (bf16, per_add: far from FP32 at K = 48 / 24 / 160 tokens)."""
    x = torch.randn(10, 16, 48)
    base = _layer_grads(_layer({}), x)
    for i, g in enumerate(("fprop", "dgrad", "wgrad")):
        got = _layer_grads(_layer({g: {"fmt": "bf16", "model": "per_add"}}), x)
        for j in range(3):
            assert torch.equal(got[j], base[j]) == (j != i), (g, j)


@pytest.mark.parametrize("compile_backend", ["aot_eager", "inductor"])
def test_compiled_gradients_equal_eager(compile_backend):
    """Bit-exact: the accumulator's arithmetic is elementwise (inductor compiles without FMA contraction or
    reassociation on CPU, rounding.py) and the chunk sums are the same float64 bmm. Small K on purpose: the loop
    over chunks is unrolled into the graph, and each unrolled addition costs inductor ~1 s on 2 cores (K = 16 in 2
    chunks, 4 per-add steps, 24 tokens in 3 chunks: 2 promotion groups of 2, the last one padded)."""
    x = torch.randn(2, 12, 16)
    accum = {"fprop": {"fmt": "bf16", "chunk": 8}, "dgrad": {"fmt": "fp22", "model": "per_add"},
             "wgrad": {"fmt": "fp22", "chunk": 8, "promote_every": 16}}
    eager = _layer_grads(_layer(accum, shape=(16, 4)), x)
    torch._dynamo.reset()
    layer = _layer(accum, shape=(16, 4))
    comp = _layer_grads(layer, x, torch.compile(layer, backend=compile_backend))
    for e, c in zip(eager, comp):
        assert torch.equal(e, c)


@pytest.mark.skipif(not STORES_IN_KERNEL, reason="torch < 2.13: stored_in_kernel is the identity (block_scaling.py)")
@pytest.mark.parametrize("spec", [AccumSpec("bf16", chunk=8), AccumSpec("fp22", promote_every=64)],
                         ids=lambda s: s.short_str())
def test_the_compiled_loop_stores_each_steps_sum_and_result(spec):
    """Compiled, each unrolled step's rounded sum and its input are stored (block_scaling.stored_in_kernel), not
    inlined into every later use: inlined, the ops inductor generated code for grew far faster than the steps (bf16,
    chunk 8, K = 64: 104-107 s to compile 8 steps, 7-8 s stored; bench/results/accum_compile.md). Counted in the graph
    dynamo hands the backend: two stores per step, so a step that loses one fails here, not as a slow compile."""
    graphs = []

    def capture(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    a, b = torch.randn(8, 128), torch.randn(128, 4)
    out = torch.compile(lambda a, b: accumulate_matmul(a, b, spec), backend=capture, fullgraph=True)(a, b)
    assert torch.equal(out, accumulate_matmul(a, b, spec))
    stores = sum(n.op == "call_function" and "inductor_force_stride_order" in str(n.target)
                 for gm in graphs for n in gm.graph.nodes)
    steps = accumulate.loop_steps(128, spec)
    assert steps >= 2 and stores == 2 * steps, (stores, steps)


def _counting_adds(monkeypatch) -> list[int]:
    """accumulate_add, counted: one entry per step of accumulate_matmul's loop (what torch.compile unrolls)."""
    calls = []

    def counted(acc, p, spec):
        calls.append(1)
        return accumulate_add(acc, p, spec)
    monkeypatch.setattr(accumulate, "accumulate_add", counted)
    return calls


@pytest.mark.parametrize("spec", [AccumSpec("fp22"), AccumSpec("fp22", promote_every=128), AccumSpec("bf16", chunk=8),
                                  AccumSpec("fp22", model="per_add", promote_every=4), AccumSpec("fp32")],
                         ids=lambda s: s.short_str())
def test_loop_steps_counts_the_loop_accumulate_matmul_runs(spec, monkeypatch):
    calls = _counting_adds(monkeypatch)
    for k in (1, 7, 32, 33, 160, 1024):     # padded last chunk / group, promotion groups side by side
        calls.clear()
        accumulate_matmul(torch.randn(3, k), torch.randn(k, 2), spec)
        assert len(calls) == accumulate.loop_steps(k, spec), (k, len(calls))
    assert spec.is_fp32 or accumulate.loop_steps(1024, spec) > 0     # non-vacuous: the loop ran


def test_a_models_accumulator_steps_are_the_ones_a_training_step_runs(monkeypatch):
    """accum_loop_steps (the figure the training loop warns with before compiling) against the accumulate_add
    calls of one forward + backward: fprop over the inputs, dgrad over the outputs, wgrad over the tokens."""
    calls = _counting_adds(monkeypatch)
    accum = {"fprop": {"fmt": "bf16", "chunk": 8}, "dgrad": {"fmt": "fp22", "model": "per_add"},
             "wgrad": {"fmt": "fp22", "chunk": 8, "promote_every": 16}}
    x = torch.randn(2, 20, 16)
    _layer_grads(_layer(accum, shape=(16, 4)), x)
    assert len(calls) == accum_loop_steps([_layer(accum, shape=(16, 4))], tokens=40) == 2 + 4 + 2
    assert accum_loop_steps([_layer({})], tokens=40) == 0


def test_compiling_an_accumulator_recipe_says_it_can_take_minutes(tmp_path, monkeypatch, capsys):
    """One line, with this model's step count, when compile=True meets an accumulator; none without one.
    torch.compile is replaced by the identity: nothing compiles here."""
    monkeypatch.setattr(torch, "compile", lambda model, **kw: model)
    base = dict(n_layer=1, n_head=2, n_embd=32, block_size=16, batch_size=2, max_docs=20, tokenizer="gpt2-256",
                max_steps=1, eval_interval=1, eval_iters=1, compile=True)
    acc = {"name": "acc", "recipe": "fp8_hybrid", "layers": {"*": {"input": "E4M3", "weight": "E4M3",
           "grad_output": "E5M2", "gemm": {"accum": "fp22"}}}}
    for recipe, said in ((acc, True), ("fp8_hybrid", False)):
        train(TrainConfig(**base, recipe=recipe, out_dir=str(tmp_path / str(said))), progress=False)
        lines = [ln for ln in capsys.readouterr().out.splitlines() if "accumulator loop" in ln]
        if said:   # 4 Linears, chunks of 32: fprop K 32/32/32/128 (7), dgrad K 96/32/128/32 (9), wgrad 32 tokens (4)
            assert len(lines) == 1 and "accumulator loop (20 steps in this model's GEMMs)" in lines[0], lines
        else:
            assert not lines
    # compile_scope=blocks: two identical blocks share one graph, so their steps count once (40 with the whole model)
    two = {**base, "n_layer": 2, "recipe": acc}
    model = GPT(GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=256))
    quantize_model(model, get_policy(acc, seed=0), verbose=False)
    assert accum_loop_steps(compile_units(model, "model"), 32) == 2 * accum_loop_steps(compile_units(model, "blocks"),
                                                                                        32) == 40
    train(TrainConfig(**two, compile_scope="blocks", out_dir=str(tmp_path / "blocks")), progress=False)
    lines = [ln for ln in capsys.readouterr().out.splitlines() if "accumulator loop" in ln]
    assert len(lines) == 1 and "(20 steps in the blocks' GEMMs, once per block configuration" in lines[0], lines


def test_the_readme_example_is_a_valid_recipe():
    """README's `accum` YAML example, as a `-f` file would give it: accepted by TrainConfig, FP22 on wgrad only."""
    import re
    from pathlib import Path

    import yaml
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    block = next(b for b in re.findall(r"```yaml\n(.*?)```", readme, re.S) if "accum:" in b)
    spec = get_policy(TrainConfig(**yaml.safe_load(block)).recipe).spec_for("mlp_up")
    assert spec.gemm.accum == (("wgrad", AccumSpec("fp22", promote_every=128)),)
