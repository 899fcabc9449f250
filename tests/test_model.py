"""Tests for altgrad_lib.model: config validation, init loss, attention capture, SwiGLU, weight tying."""
from __future__ import annotations

import math

import pytest
import torch

from altgrad_lib.model import GPT, GPTConfig

SMALL = dict(block_size=32, vocab_size=257, n_layer=2, n_head=4, n_embd=64)


def _model(**kw) -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(**{**SMALL, **kw}))


def test_config_errors_name_value_and_choices():
    with pytest.raises(ValueError, match=r"n_embd=100.*n_head=3"):
        GPTConfig(n_embd=100, n_head=3)
    with pytest.raises(ValueError, match=r"'relu'.*gelu.*swiglu"):
        GPTConfig(mlp="relu")
    with pytest.raises(ValueError, match="n_layer"):
        GPTConfig(n_layer=0)
    with pytest.raises(ValueError, match="dropout"):
        GPTConfig(dropout=1.5)


def test_sequence_longer_than_block_size_raises():
    m = _model()
    with pytest.raises(ValueError, match=r"sequence length 33 > block_size 32"):
        m(torch.zeros(1, 33, dtype=torch.long))


def test_forward_shapes_and_loss_at_init_is_ln_vocab():
    m = _model()
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, 257, (8, 32), generator=g)
    targets = torch.randint(0, 257, (8, 32), generator=g)  # independent of idx: no tied-embedding shortcut
    logits, loss = m(idx, targets)
    assert logits.shape == (8, 32, 257)
    # small init -> near-uniform predictions; the logit variance adds ~var/2 to ln(V)
    assert abs(loss.item() - math.log(257)) < 0.1
    assert m(idx)[1] is None


def test_gpt2_init_scales_residual_projections():
    m = _model(n_layer=8)
    std_fc = m.transformer.h[0].mlp.c_fc.weight.std().item()
    std_proj = m.transformer.h[0].mlp.c_proj.weight.std().item()
    assert std_fc == pytest.approx(0.02, rel=0.05)
    assert std_proj == pytest.approx(0.02 / math.sqrt(16), rel=0.05)


def test_weight_tying_and_num_params():
    tied, untied = _model(), _model(tie_weights=False)
    assert tied.lm_head.weight is tied.transformer.wte.weight
    assert untied.lm_head.weight is not untied.transformer.wte.weight
    assert untied.num_params() - tied.num_params() == 320 * 64   # tied matrix counted once (257 padded to 320)
    assert tied.num_params(non_embedding=True) == tied.num_params() - 32 * 64


def test_capture_attention_probs_are_causal_rows_sum_to_one_and_match_sdpa():
    m = _model()
    idx = torch.randint(0, 257, (2, 16))
    logits_sdpa, _ = m(idx)
    with m.capture_attention() as probs:
        logits_explicit, _ = m(idx)
    assert len(probs) == 2 and probs[0].shape == (2, 4, 16, 16)
    for p in probs:
        torch.testing.assert_close(p.sum(-1), torch.ones(2, 4, 16))
        assert (p.triu(diagonal=1) == 0).all()            # no attention to future tokens
        assert (p.diagonal(dim1=-2, dim2=-1) > 0).all()
    torch.testing.assert_close(logits_explicit, logits_sdpa, atol=1e-5, rtol=1e-5)
    # outside the context: back to SDPA, nothing captured
    m(idx)
    assert len(probs) == 2
    assert all(b.attn.capture is None for b in m.transformer.h)


def test_swiglu_has_gate_and_trains():
    m = _model(mlp="swiglu")
    mlp = m.transformer.h[0].mlp
    assert mlp.c_gate.weight.shape == mlp.c_fc.weight.shape
    assert mlp.c_fc.out_features % 16 == 0
    gelu_params = _model().num_params()
    assert abs(m.num_params() - gelu_params) / gelu_params < 0.05   # 2/3 hidden keeps the size comparable
    idx = torch.randint(0, 257, (2, 16))
    _, loss = m(idx, idx)
    loss.backward()
    assert mlp.c_gate.weight.grad is not None and mlp.c_gate.weight.grad.abs().sum() > 0


def test_module_names_match_the_surgery_contract():
    names = {n for n, _ in _model(mlp="swiglu").named_modules()}
    for n in ("transformer.wte", "transformer.wpe", "transformer.ln_f", "lm_head", "transformer.h.1.ln_1",
              "transformer.h.1.attn.c_attn", "transformer.h.1.attn.c_proj", "transformer.h.1.ln_2",
              "transformer.h.1.mlp.c_fc", "transformer.h.1.mlp.c_gate", "transformer.h.1.mlp.c_proj"):
        assert n in names, n


def test_vocab_is_padded_for_fp8_gemms_and_padding_is_never_predicted():
    cfg = GPTConfig(n_layer=1, n_head=2, n_embd=32, block_size=8, vocab_size=4097)
    assert cfg.padded_vocab_size == 4160 and GPTConfig(vocab_size=50257).padded_vocab_size == 50304
    torch.manual_seed(0)
    m = GPT(cfg)
    assert m.transformer.wte.weight.shape == (4160, 32)
    idx = torch.randint(0, 4097, (2, 8))
    logits, loss = m(idx, idx)
    assert logits.shape == (2, 8, 4097)
    ref = torch.nn.functional.cross_entropy(m.lm_head(m.transformer.ln_f(
        m.transformer.h[0](m.transformer.wte(idx) + m.transformer.wpe(torch.arange(8)))))[..., :4097].reshape(-1, 4097),
        idx.reshape(-1))
    torch.testing.assert_close(loss, ref)
    loss.backward()
    assert not m.transformer.wte.weight.grad[4097:].any()      # padded rows: never looked up nor predicted
    assert GPT(GPTConfig(vocab_size=100, vocab_multiple=1, n_layer=1)).transformer.wte.weight.shape[0] == 100
