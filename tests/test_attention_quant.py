"""Low-precision attention (quantize/attention.py) against references written for these tests.

Oracles, both written here from TransformerEngine's description of its FP8 attention emulation
(UnfusedDotProductAttention + FP8EmulationFunc: Q, K, V quantized together, S = the softmax output before P·V,
O; in backward dO, dP = the gradient of the softmax input, dQKV), independently of the module's code:
- `_reference`: einsum forward and a backward derived by hand from the chain rule, with an explicit
  quantize-dequantize at each point, each matmul's operands blocked along that matmul's reduction dim (for block
  kinds; a per-tensor kind has one copy). It checks per-tensor current scaling and MX, with and without Hadamard.
- `_te_style`: TE's structure literally: identity / quantize functions around plain torch ops, backward by
  autograd (no hand-derived gradient at all); for per-tensor kinds, where TE's one-copy emulation is the model.
The quantize-dequantize primitives are the package's (fake_quant, block_qdq), which tests/test_numerics_* check
against torch, ml_dtypes, gfloat and torchao; what is under test here is where, along which axis and with which
shared scale the attention quantizes, and its backward math. Matmuls use the same torch kernels, so bit-exact.
"""
from __future__ import annotations

import math

import pytest
import scipy.linalg
import torch
import torch.nn.functional as F

from altgrad_lib.errors import ConfigError
from altgrad_lib.model import GPT, GPTConfig
from altgrad_lib.numerics.block_scaling import BlockScaling, block_qdq
from altgrad_lib.numerics.quant import fake_quant
from altgrad_lib.numerics.quant_spec import QuantSpec
from altgrad_lib.quantize.attention import ATTN_POINTS, AttnSpec, QuantizedAttention
from altgrad_lib.quantize.convert import format_conversion, quantize_model
from altgrad_lib.quantize.recipes import canonical_recipe, get_policy
from altgrad_lib.training.config import TrainConfig

CUR = {"qkv": "E4M3", "s": "E4M3", "o": "E4M3", "do": "E5M2", "dp": "E5M2", "dqkv": "E5M2"}
MX = {p: {"fmt": "E4M3" if p in ("qkv", "s", "o") else "E5M2", "scaling": "mx"} for p in ATTN_POINTS}
# small MX blocks, so that T = 16 and d = 16 hold several blocks along every axis
MX8 = {p: {"fmt": "E4M3" if p in ("qkv", "s", "o") else "E5M2", "scaling": {"kind": "mx", "block_size": 8}}
       for p in ATTN_POINTS}
SPECS = {"current": CUR, "mx32": MX, "mx8": MX8,
         "mixed": {"qkv": MX8["qkv"], "s": "E4M3", "do": MX8["do"], "dp": "E5M2"}}


# ------------------------------------------------------------------------------------------ the references

def _qdq(t, spec: QuantSpec | None, axis: int = -1):
    """Quantize-dequantize t with spec: per-tensor kinds over the whole tensor, block kinds along `axis`."""
    if spec is None:
        return t
    if isinstance(spec.scaling, BlockScaling):
        y, _, _ = block_qdq(t.movedim(axis, -1), spec.fmt, spec.scaling, spec.rounding)
        return y.movedim(-1, axis)
    return fake_quant(t, spec).detach()


def _qdq_joint(ts, spec):
    """TE's combine_and_quantize for per-tensor kinds: one scale from the three tensors together."""
    if spec is None or isinstance(spec.scaling, BlockScaling):
        return None
    flat = _qdq(torch.cat([t.flatten() for t in ts]), spec)
    sizes = [t.numel() for t in ts]
    return [part.view(t.shape) for part, t in zip(flat.split(sizes), ts)]


def _hadamard(n: int, signs: torch.Tensor, d: int) -> torch.Tensor:
    """blockdiag(diag(s)·H_n/sqrt(n)) of size d, from scipy's Sylvester Hadamard matrix."""
    m = torch.from_numpy(signs.double().numpy()[:, None] * scipy.linalg.hadamard(n) / math.sqrt(n)).float()
    return torch.block_diag(*[m] * (d // n))


def _rot(x, m):
    # block by block, x[..., blocks, n] · M_n: the product a block-diagonal rotation needs (no zero terms)
    if m is None:
        return x
    n = _block_n(m)
    return torch.einsum("...kn,nj->...kj", x.reshape(*x.shape[:-1], -1, n), m[:n, :n]).reshape(x.shape)


def _unrot(x, m):
    if m is None:
        return x
    n = _block_n(m)
    return torch.einsum("...kn,jn->...kj", x.reshape(*x.shape[:-1], -1, n), m[:n, :n]).reshape(x.shape)


def _block_n(m):
    n = 1
    while n < m.shape[0] and bool(m[0, n] != 0):
        n += 1
    return n


def _reference(q, k, v, spec: AttnSpec, dy, had: torch.Tensor | None = None):
    """(y, dq, dk, dv) of causal attention with spec's quantize-dequantize points; backward by hand."""
    B, H, T, d = q.shape
    c = 1.0 / math.sqrt(d)
    mq = had if spec.hadamard == "qkv" else None
    mv = had if spec.hadamard in ("qkv", "v") else None
    q, k, v = _rot(q, mq), _rot(k, mq), _rot(v, mv)
    j = _qdq_joint([q, k, v], spec.qkv)
    # forward operands: Q, K along d (Q·Kᵀ), V along the keys (P·V)
    qf, kf, vf = j if j else (_qdq(q, spec.qkv, -1), _qdq(k, spec.qkv, -1), _qdq(v, spec.qkv, -2))
    a = torch.einsum("bhid,bhjd->bhij", qf, kf) * c
    allowed = torch.tril(torch.ones(T, T, dtype=torch.bool))
    p = torch.softmax(a.masked_fill(~allowed, -math.inf), dim=-1)
    pf = _qdq(p, spec.s, -1)
    o = _unrot(torch.einsum("bhij,bhjd->bhid", pf, vf), mv)
    y = _qdq(o.transpose(1, 2).reshape(B, T, H * d), spec.o, -1)
    # backward: dO in the rotated basis, one copy per matmul
    g = _rot(dy.reshape(B, T, H, d).transpose(1, 2), mv)
    def per_tensor(s):
        return s is None or not isinstance(s.scaling, BlockScaling)

    g_d = _qdq(g, spec.do, -1)                                   # dO·Vᵀ: reduction over d
    g_t = g_d if per_tensor(spec.do) else _qdq(g, spec.do, -2)   # Pᵀ·dO: reduction over the queries
    v_d = vf if per_tensor(spec.qkv) else _qdq(v, spec.qkv, -1)
    p_t = pf if per_tensor(spec.s) else _qdq(p, spec.s, -2)
    dv = torch.einsum("bhij,bhid->bhjd", p_t, g_t)
    dpp = torch.einsum("bhid,bhjd->bhij", g_d, v_d)
    # softmax: dA_ij = P_ij (dP_ij - sum_k dP_ik P_ik), zero where masked
    da = (p * (dpp - (dpp * p).sum(-1, keepdim=True))).masked_fill(~allowed, 0.0)
    da_k = _qdq(da, spec.dp, -1)
    da_q = da_k if per_tensor(spec.dp) else _qdq(da, spec.dp, -2)
    k_t = kf if per_tensor(spec.qkv) else _qdq(k, spec.qkv, -2)
    q_t = qf if per_tensor(spec.qkv) else _qdq(q, spec.qkv, -2)
    dq = torch.einsum("bhij,bhjd->bhid", da_k * c, k_t)
    dk = torch.einsum("bhij,bhid->bhjd", da_q * c, q_t)
    dq, dk, dv = _unrot(dq, mq), _unrot(dk, mq), _unrot(dv, mv)
    j = _qdq_joint([dq, dk, dv], spec.dqkv)
    dq, dk, dv = j if j else (_qdq(dq, spec.dqkv, -1), _qdq(dk, spec.dqkv, -1), _qdq(dv, spec.dqkv, -1))
    return y, dq, dk, dv


class _QdqFwd(torch.autograd.Function):      # TE's FP8EmulationFunc for QKV / S / O: forward qdq, backward identity
    @staticmethod
    def forward(ctx, t, spec):
        return _qdq(t, spec)

    @staticmethod
    def backward(ctx, g):
        return g, None


class _QdqBwd(torch.autograd.Function):      # ... for dO / dP / dQKV: forward identity, backward qdq
    @staticmethod
    def forward(ctx, t, spec):
        ctx.spec = spec
        return t.view_as(t)

    @staticmethod
    def backward(ctx, g):
        return _qdq(g, ctx.spec), None


class _JointFwd(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, spec):
        return tuple(_qdq_joint([q, k, v], spec)) if spec is not None else (q.clone(), k.clone(), v.clone())

    @staticmethod
    def backward(ctx, gq, gk, gv):
        return gq, gk, gv, None


class _JointBwd(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, spec):
        ctx.spec = spec
        return q.view_as(q), k.view_as(k), v.view_as(v)

    @staticmethod
    def backward(ctx, gq, gk, gv):
        j = _qdq_joint([gq, gk, gv], ctx.spec) if ctx.spec is not None else (gq, gk, gv)
        return j[0], j[1], j[2], None


def _te_style(q, k, v, spec: AttnSpec):
    """UnfusedDotProductAttention's order of operations, per-tensor kinds, autograd for the backward."""
    B, H, T, d = q.shape
    q, k, v = _JointBwd.apply(q, k, v, spec.dqkv)
    q, k, v = _JointFwd.apply(q, k, v, spec.qkv)
    a = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
    a = _QdqBwd.apply(a, spec.dp)
    allowed = torch.tril(torch.ones(T, T, dtype=torch.bool))
    p = torch.softmax(a.masked_fill(~allowed, -math.inf), dim=-1)
    p = _QdqFwd.apply(p, spec.s)
    o = (p @ v).transpose(1, 2).reshape(B, T, H * d)
    o = _QdqFwd.apply(o, spec.o)
    return _QdqBwd.apply(o, spec.do)


# ------------------------------------------------------------------------------------------ helpers

def _inputs(B=2, H=2, T=16, d=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, H, T, d, generator=g) * s for s in (1.0, 1.0, 3.0))
    q[0, 0, 3, 5] = 40.0            # an outlier: what per-tensor scaling and the Hadamard rotation are about
    dy = torch.randn(B, T, H * d, generator=g) * 1e-3
    return q, k, v, dy


def _ours(q, k, v, dy, spec: AttnSpec, seed: int = 0):
    op = QuantizedAttention(spec, q.shape[-1], seed_of=lambda p: seed)
    q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
    y = op(q, k, v)
    y.backward(dy)
    return op, y.detach(), q.grad, k.grad, v.grad


def _assert_exact(ours, ref, names=("y", "dq", "dk", "dv")):
    for n, a, b in zip(names, ours, ref):
        assert a.shape == b.shape, (n, a.shape, b.shape)
        assert torch.equal(a, b), f"{n}: {int((a != b).sum())} of {a.numel()} differ, max {float((a - b).abs().max())}"


# ------------------------------------------------------------------------------------------ the oracle tests

@pytest.mark.parametrize("name", list(SPECS))
def test_forward_and_qkv_gradients_bit_exact_against_reference(name):
    spec = AttnSpec.from_value(SPECS[name])
    q, k, v, dy = _inputs()
    _, *ours = _ours(q, k, v, dy, spec)
    _assert_exact(ours, _reference(q, k, v, spec, dy))
    # not vacuous: the quantization changes every output against high precision
    hp = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(dy.shape)
    assert not torch.equal(ours[0], hp)


def test_per_tensor_matches_te_style_autograd_emulation():
    spec = AttnSpec.from_value(CUR)
    q, k, v, dy = _inputs(seed=1)
    _, *ours = _ours(q, k, v, dy, spec)
    qq, kk, vv = (t.clone().requires_grad_() for t in (q, k, v))
    y = _te_style(qq, kk, vv, spec)
    y.backward(dy)
    _assert_exact(ours, (y.detach(), qq.grad, kk.grad, vv.grad))


@pytest.mark.parametrize("mode", ["qkv", "v"])
@pytest.mark.parametrize("name,n", [("current", 0), ("mx8", 0), ("current", 4), ("mx8", 8)])
def test_hadamard_switches_bit_exact_against_reference(mode, name, n):
    spec = AttnSpec.from_value({**SPECS[name], "hadamard": mode, "hadamard_dim": n})
    q, k, v, dy = _inputs(seed=2)
    op, *ours = _ours(q, k, v, dy, spec)
    had = _hadamard(n or q.shape[-1], op.had_signs, q.shape[-1])
    _assert_exact(ours, _reference(q, k, v, spec, dy, had))
    # the two modes are different computations (a test that could not tell them apart would pass either way)
    other = AttnSpec.from_value({**SPECS[name], "hadamard": "v" if mode == "qkv" else "qkv", "hadamard_dim": n})
    assert not torch.equal(ours[1], _ours(q, k, v, dy, other)[2])


def test_hadamard_reduces_the_error_of_an_outlier_in_v():
    """Not an oracle test: the rotation spreads V's outlier over the head dim, so per-tensor E4M3 of V loses less
    (the reason torchao offers it). Bound: the plain error must exceed the rotated one; nothing tighter."""
    q, k, v, dy = _inputs(seed=3)
    v[..., 0] *= 50.0
    hp = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(dy.shape)
    err = {m: float((_ours(q, k, v, dy, AttnSpec(qkv="E4M3", hadamard=m))[1] - hp).norm()) for m in ("none", "v")}
    assert err["v"] < err["none"], err


def test_dropout_matches_reference_with_the_same_mask():
    spec = AttnSpec.from_value(CUR)
    q, k, v, dy = _inputs(seed=4)
    op = QuantizedAttention(spec, 16)
    qq = q.clone().requires_grad_()
    torch.manual_seed(7)
    y = op(qq, k, v, dropout_p=0.25)
    y.backward(dy)
    torch.manual_seed(7)     # the same Bernoulli draw, applied by hand to P before S's quantizer (TE's order)
    mask = torch.empty(2, 2, 16, 16).bernoulli_(0.75) / 0.75
    assert torch.equal(y.detach(), _dropout_reference(q, k, v, spec, mask))
    op.eval()
    assert torch.equal(op(q, k, v, dropout_p=0.0), _reference(q, k, v, spec, dy)[0])


def _dropout_reference(q, k, v, spec, mask):
    B, H, T, d = q.shape
    j = _qdq_joint([q, k, v], spec.qkv)
    a = torch.einsum("bhid,bhjd->bhij", j[0], j[1]) * (1.0 / math.sqrt(d))
    p = torch.softmax(a.masked_fill(~torch.tril(torch.ones(T, T, dtype=torch.bool)), -math.inf), dim=-1)
    o = torch.einsum("bhij,bhjd->bhid", _qdq(p * mask, spec.s), j[2])
    return _qdq(o.transpose(1, 2).reshape(B, T, H * d), spec.o)


# ------------------------------------------------------------------------------------------ model integration

def _model(recipe, seed=0, **cfg):
    torch.manual_seed(seed)
    m = GPT(GPTConfig(**{"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 16, "vocab_size": 64, **cfg}))
    if recipe is not None:
        quantize_model(m, get_policy(recipe, seed=3), verbose=False)
    return m


def _batch():
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, 64, (2, 16), generator=g), torch.randint(0, 64, (2, 16), generator=g)


def _loss_and_grads(m, x, y):
    m.zero_grad(set_to_none=True)
    _, loss = m(x, y)
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in m.named_parameters()}


def test_attn_null_is_the_sdpa_attention_bit_for_bit():
    x, y = _batch()
    for recipe in ({"recipe": "fp8_hybrid", "attn": None}, {"recipe": "mxfp8:mxfp8_attn", "attn": None}):
        m = _model(recipe)
        assert all(b.attn.attention_op is None for b in m.transformer.h)
        # the attention module against SDPA written out here (what model.py did before attention_op existed)
        a = m.transformer.h[0].attn
        h = torch.randn(2, 16, 32)
        qkv = a.c_attn(h).split(32, dim=2)
        q, k, v = (t.view(2, 16, 2, 16).transpose(1, 2) for t in qkv)
        by_hand = a.c_proj(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(2, 16, 32))
        assert torch.equal(a(h), by_hand)
    # and the whole model with attn: null against the same recipe without the key, forward and backward
    la, ga = _loss_and_grads(_model({"recipe": "fp8_hybrid", "attn": None}), x, y)
    lb, gb = _loss_and_grads(_model("fp8_hybrid"), x, y)
    assert torch.equal(la, lb) and all(torch.equal(ga[n], gb[n]) for n in ga)


def test_attn_null_keeps_every_config_hash():
    """No `attn:` key, `attn: null` and a spec that quantizes nothing are one run (one hash); a dict recipe's
    canonical form has no attn key unless attention is quantized, so earlier runs keep their hashes."""
    base = {"name": "x", "recipe": "fp8_hybrid"}
    h = TrainConfig(recipe=base).config_hash()
    assert TrainConfig(recipe={**base, "attn": None}).config_hash() == h
    assert TrainConfig(recipe={**base, "attn": {"hadamard": "v"}}).config_hash() == h
    assert "attn" not in canonical_recipe(base) and "attn" not in get_policy("fp8_hybrid").to_dict()
    assert TrainConfig(recipe={**base, "attn": "fp8"}).config_hash() != h
    # a preset is written out in full (config.yaml shows every point), so it hashes as its expansion
    full = canonical_recipe({**base, "attn": "fp8"})["attn"]
    assert full == AttnSpec.from_value("fp8").to_dict() and full["qkv"]["fmt"] == "E4M3"
    assert TrainConfig(recipe={**base, "attn": full}).config_hash() == TrainConfig(recipe={**base, "attn": "fp8"}
                                                                                  ).config_hash()
    # null over a base recipe that quantizes attention switches it off: a different run
    assert canonical_recipe({"name": "y", "recipe": "mxfp8:mxfp8_attn", "attn": None})["attn"] is None


def test_recipe_switch_policy_dict_short_str_and_table():
    p = get_policy("mxfp8:mxfp8_attn")
    assert p.attn == AttnSpec.from_value("mxfp8") and p.attn.s is None and p.attn.dp is None
    assert get_policy("mxfp8").attn is None
    assert "attn=qkv:e4m3fn/mx32f/rne" in p.short_str()
    d = get_policy({"name": "a", "recipe": "fp8_hybrid", "attn": {"preset": "fp8", "hadamard": "v"}})
    assert get_policy(d.to_dict()) == d
    rows = quantize_model(_model(None), d, verbose=False)
    text = format_conversion(rows, d)
    assert "attention matmuls: qkv:e4m3fn/cur/rne" in text and "had:v" in text
    assert format_conversion(rows, "fp8_hybrid").endswith("softmax, attention matmuls")   # the old line, unchanged


def test_model_installs_one_op_per_block_and_keeps_hp_last_blocks():
    m = _model("nvfp4:mxfp8_attn:hp_last=1")
    ops = [b.attn.attention_op for b in m.transformer.h]
    assert isinstance(ops[0], QuantizedAttention) and ops[1] is None
    sd = m.state_dict()
    assert "transformer.h.0.attn.attention_op.quants.qkv.n_elements" in sd
    m = _model({"recipe": "fp8_hybrid", "attn": {"preset": "fp8", "hadamard": "qkv"}})
    assert "transformer.h.1.attn.attention_op.had_signs" in m.state_dict()   # checkpointed


def test_capture_attention_still_returns_probabilities():
    m = _model({"recipe": "fp8_hybrid", "attn": "fp8"})
    x, _ = _batch()
    with m.capture_attention() as probs:
        m(x)
    assert len(probs) == 2 and probs[0].shape == (2, 2, 16, 16)
    assert torch.allclose(probs[0].sum(-1), torch.ones(2, 2, 16))
    assert bool((probs[0].triu(1) == 0).all())
    assert all(b.attn.capture is None for b in m.transformer.h)


@pytest.mark.parametrize("recipe", [{"recipe": "fp8_hybrid", "attn": "fp8_delayed"},
                                    {"recipe": "fp8_hybrid", "attn": {"preset": "mxfp8", "hadamard": "v"}}],
                         ids=["fp8_delayed", "mxfp8_had_v"])
def test_compiled_gradients_equal_eager(recipe):
    """tests/test_compile_grads.py's check for the attention Function: two steps (the delayed history advances),
    aot_eager (the same ATen kernels as eager) must give the same gradients bit for bit."""
    torch._dynamo.reset()
    x, y = _batch()
    eager, compiled = _model(recipe, n_layer=1), _model(recipe, n_layer=1)
    fwd = torch.compile(compiled, backend="aot_eager")
    for _ in range(2):
        le, ge = _loss_and_grads(eager, x, y)
        compiled.zero_grad(set_to_none=True)
        _, lc = fwd(x, y)
        lc.backward()
    assert torch.equal(lc.detach(), le)
    for n, p in compiled.named_parameters():
        assert torch.equal(p.grad, ge[n]), n
    assert bool((ge["transformer.h.0.attn.c_attn.weight"] != 0).any())


def test_model_trains_with_fp8_attention():
    m = _model({"recipe": "fp8_hybrid", "attn": "fp8"})
    x, y = _batch()
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3)
    losses = []
    for _ in range(15):
        opt.zero_grad()
        _, loss = m(x, y)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    # memorising one batch: from ln(64) = 4.16 well down (a model whose attention gradient were wrong still
    # learns through the MLPs, so also check the attention weights received a gradient)
    assert all(math.isfinite(v) for v in losses) and losses[-1] < losses[0] - 1.0, losses
    assert float(m.transformer.h[0].attn.c_attn.weight.grad.norm()) > 0
    q = m.transformer.h[0].attn.attention_op.quants
    assert int(q["qkv"].n_elements) > 0 and int(q["dp"].n_elements) > 0   # forward and backward points ran


# ------------------------------------------------------------------------------------------ errors, before compute

@pytest.mark.parametrize("attn,msg", [
    ("fp9", "attn preset 'fp9' is unknown; valid choices: ('fp8', 'fp8_delayed', 'mxfp8')"),
    ({"qkvv": "E4M3"}, "attn: unknown key(s) ['qkvv']"),
    ({"qkv": "E4M3", "hadamard": "k"}, "attn.hadamard='k' is invalid; valid choices: ('none', 'qkv', 'v')"),
    ({"qkv": "E4M3", "hadamard_dim": 12}, "attn.hadamard_dim=12 is invalid"),
    ({"do": "E8M0FNU"}, "attn.do: format E8M0FNU has no sign bit"),
    ({"s": {"fmt": "E4M3", "scaling": "blocky"}}, "kind='blocky' is invalid"),
])
def test_bad_attn_values_fail_at_config_load_in_one_line(attn, msg):
    with pytest.raises(ConfigError) as e:
        TrainConfig(recipe={"name": "x", "recipe": "fp8_hybrid", "attn": attn})
    assert msg in str(e.value) and "\n" not in str(e.value)


def test_bad_switch_and_head_dim_fail_before_the_model_changes():
    with pytest.raises(ValueError, match="unknown switch 'mxfp8attn'.*mxfp8_attn"):
        get_policy("nvfp4:mxfp8attn")
    m = _model(None, n_head=4, n_embd=48)       # head dim 12: no power-of-two Hadamard fits it
    before = {n: type(mm) for n, mm in m.named_modules()}
    with pytest.raises(ValueError, match="hadamard_dim=12 must be a power of two dividing the head dim 12"):
        quantize_model(m, get_policy({"recipe": "fp8_hybrid", "attn": {"qkv": "E4M3", "hadamard": "v"}}),
                       verbose=False)
    assert {n: type(mm) for n, mm in m.named_modules()} == before     # no Linear swapped either


def test_the_study_file_loads_with_its_attention_arms():
    from pathlib import Path

    from altgrad_lib.studies.study import Study
    s = Study.from_yaml(Path(__file__).resolve().parent.parent / "params/studies/cpu_fp8_attention.yaml")
    points = s.expand()
    attn = {p.name.rsplit("-s", 1)[0]: get_policy(p.config.recipe).attn for p in points}
    assert attn["fp8_hybrid"] is None and attn["fp8_hybrid-fp8-attn"] == AttnSpec.from_value("fp8")
    assert attn["fp8_hybrid-mxfp8-attn"] == AttnSpec.from_value("mxfp8")
    assert len(points) == 16 and len({p.config.config_hash() for p in points}) == 16


def test_curvature_refuses_low_precision_attention_before_measuring():
    """Its backward is once-differentiable (quantizers run without autograd): a Hessian-vector product through it
    would be wrong, so the curvature monitor's measuring mode refuses the model up front, in one line."""
    from altgrad_lib.monitors import curvature as cv
    m = _model({"recipe": "fp8_hybrid", "attn": "fp8"})
    with pytest.raises(ValueError, match="transformer.h.0.attn runs low-precision attention .*valid: attn: null"):
        with cv.hessian_mode(m):
            pass
    m = _model({"name": "hp-attn", "recipe": "hp", "attn": "fp8"})   # hp linears: dY keeps its graph up to it
    x, y = _batch()
    _, loss = m(x, y)
    (g,) = torch.autograd.grad(loss, [m.transformer.h[0].attn.c_attn.weight], create_graph=True)
    with pytest.raises(RuntimeError, match="once_differentiable"):
        g.sum().backward()
