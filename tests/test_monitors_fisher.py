"""Tests for altgrad_lib.monitors.fisher against a dense Fisher computed independently with torch.

The oracle differentiates the *original* model (not the monitor's proxy) token by token and label by label
with plain torch.autograd.grad: the exact Fisher F = 1/(B·T) Σ_{n,t} Σ_y p_y ∇log p_y ∇log p_yᵀ over a
vocabulary of 8, and the Monte-Carlo Fisher of the same sampled labels. Models are one-block GPTs with C = 4 in float64
(a 192-parameter block), so dense matrices and their eigvalsh take milliseconds.

K-FAC is an approximation; it is tested where its factorisation is exact (one token row; all rows of a layer
sharing one input, where F = (x xᵀ) ⊗ E[gy gyᵀ] by construction), never against a threshold fitted to an output.
Its error on ordinary inputs is reported by bench/fisher.py, not tested.
"""
from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch

from altgrad_lib.model import GPT, GPTConfig
from altgrad_lib.monitors import fisher as fi
from altgrad_lib.monitors.curvature import hessian_mode
from altgrad_lib.quantize.convert import quantize_model
from altgrad_lib.quantize.linear import QuantizedLinear
from altgrad_lib.state import snapshot_state
from helpers import SR_DELAYED, assert_same_state, losses_with_probe

V = 8
RECIPES = (None, "fp8_hybrid", "fmt:E2M1")
CONVERGED = dict(iters=2000, tol=1e-12)   # the test is about the operator, not the stopping rule


def tiny_gpt(recipe=None, seed: int = 0, T: int = 3, dropout: float = 0.0) -> GPT:
    torch.manual_seed(seed)
    m = GPT(GPTConfig(block_size=T, vocab_size=V, n_layer=1, n_head=2, n_embd=4, vocab_multiple=1, dropout=dropout))
    if recipe is not None:
        quantize_model(m, recipe, verbose=False)
    return m.double()


def tokens(B: int, T: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


def block_params(m: GPT) -> list[torch.Tensor]:
    return [p for fqn in fi.block_linears(m)["transformer.h.0"] for p in m.get_submodule(fqn).parameters()]


def _logp(m: GPT, idx: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(m(idx)[0], dim=-1)


def _flat(gs) -> torch.Tensor:
    return torch.cat([g.reshape(-1) for g in gs])


class Oracle:
    """Per-token, per-label gradients of the original model w.r.t. its block Linear weights, in the mode the
    monitor measures: eval, dY quantization off (its STE gradient is then dYᵀ·Q(X) for the hp weight W)."""

    def __init__(self, m: GPT, idx: torch.Tensor) -> None:
        self.m, self.idx, self.ps = m, idx, block_params(m)
        m.eval()
        for q in m.modules():
            if isinstance(q, QuantizedLinear):
                q.g_quant = None

    # one forward of the whole batch: with per-tensor scaling a sequence's logits depend on the batch it is in
    def exact(self) -> torch.Tensor:
        B, T = self.idx.shape
        lp = _logp(self.m, self.idx)
        F = 0
        for n in range(B):
            for t in range(T):
                p = lp[n, t].exp().detach()
                for y in range(V):
                    g = _flat(torch.autograd.grad(lp[n, t, y], self.ps, retain_graph=True))
                    F = F + p[y] * torch.outer(g, g)
        return F / (B * T)

    def sequence_grads(self, yhat: torch.Tensor) -> torch.Tensor:
        lp = _logp(self.m, self.idx)
        rows = []
        for n in range(self.idx.shape[0]):
            ll = lp[n].gather(-1, yhat[n].unsqueeze(-1)).sum()
            rows.append(_flat(torch.autograd.grad(ll, self.ps, retain_graph=True)))
        return torch.stack(rows) / math.sqrt(self.idx.shape[1])

    def sampled(self, yhat: torch.Tensor) -> torch.Tensor:
        G = self.sequence_grads(yhat)
        return G.T @ G / G.shape[0]


def labels(m: GPT, idx: torch.Tensor, seed: int) -> torch.Tensor:
    """The labels fisher_rows draws: the same sampler on the same logits (the model in the monitor's mode)."""
    with hessian_mode(m), torch.no_grad():
        return fi.sample_labels(m(idx)[0], seed)


def rows_of(m, idx, **kw) -> dict[str, float]:
    return {r["metric"]: r["value"] for r in fi.fisher_rows(m, idx, step=0, **kw) if r["layer"] == "transformer.h.0"}


def layer_slices(m: GPT) -> dict[str, slice]:
    out, start = {}, 0
    for fqn in fi.block_linears(m)["transformer.h.0"]:
        n = sum(p.numel() for p in m.get_submodule(fqn).parameters())
        out[fqn] = slice(start, start + n)
        start += n
    return out


# ------------------------------------------------------------------------------------------ the monitor's numbers


@pytest.mark.parametrize("recipe", RECIPES)
def test_proxy_gradients_are_the_models_ste_gradients(recipe):
    """The monitor differentiates a proxy (2-D Linears on Q(X), Q(W) leaves); its per-sequence gradients must be
    those of the model itself."""
    m, idx = tiny_gpt(recipe), tokens(3, 3)
    yhat = labels(m, idx, seed=5)
    with hessian_mode(m):
        proxy, blocks = fi.fisher_proxy(m)
    ps = [p for lid in blocks["transformer.h.0"] for p in proxy.get_submodule(lid).parameters()]
    ours = fi.per_sequence_grads(proxy, idx, yhat, ps)
    ref = Oracle(m, idx).sequence_grads(yhat)
    torch.testing.assert_close(ours, ref, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("recipe", RECIPES)
def test_trace_and_diagonal_equal_the_dense_sampled_fisher(recipe):
    m, idx = tiny_gpt(recipe), tokens(4, 3)
    got = rows_of(m, idx, seed=3, iters=2)
    F = Oracle(m, idx).sampled(labels(m, idx, seed=3))
    assert got["fisher_trace"] == pytest.approx(float(torch.trace(F)), rel=1e-10)
    assert got["diag_max"] == pytest.approx(float(F.diagonal().max()), rel=1e-10)


@pytest.mark.parametrize("recipe", RECIPES)
def test_lambda_max_is_the_top_eigenvalue_of_the_dense_exact_fisher(recipe):
    m, idx = tiny_gpt(recipe), tokens(2, 3)
    got = rows_of(m, idx, **CONVERGED)
    F = Oracle(m, idx).exact()
    assert got["fisher_lambda_max"] == pytest.approx(float(torch.linalg.eigvalsh(F)[-1]), rel=1e-6)


def test_fisher_vector_products_are_the_dense_exact_fisher():
    m, idx = tiny_gpt("fp8_hybrid"), tokens(2, 3)
    with hessian_mode(m):
        proxy, blocks = fi.fisher_proxy(m)
        ps = [p for lid in blocks["transformer.h.0"] for p in proxy.get_submodule(lid).parameters()]
        fvp = fi.FisherVP(proxy, idx, ps)
    sizes = [p.numel() for p in ps]
    cols = []
    for j in range(sum(sizes)):           # F e_j, column by column
        e = torch.zeros(sum(sizes), dtype=torch.float64)
        e[j] = 1
        cols.append(_flat(fvp([c.view_as(p) for c, p in zip(torch.split(e, sizes), ps)])))
    torch.testing.assert_close(torch.stack(cols, 1), Oracle(m, idx).exact(), rtol=1e-9, atol=1e-12)


# ------------------------------------------------------------------------------------------ NNGeometry


def _nng(m, idx, yhat):
    with hessian_mode(m):
        proxy, blocks = fi.fisher_proxy(m)
    ids = blocks["transformer.h.0"]
    return proxy, ids, fi.nngeometry_backend(proxy, ids), fi.nngeometry_examples(proxy, idx, yhat)


@pytest.mark.parametrize("recipe", RECIPES)
def test_nngeometry_diagonal_equals_the_dense_diagonal_for_one_token_sequences(recipe):
    """With T = 1 each token row is one sequence, so NNGeometry's per-row diagonal is the diagonal of F."""
    from nngeometry.object import PMatDiag
    m, idx = tiny_gpt(recipe, T=1), tokens(5, 1)
    yhat = labels(m, idx, seed=1)
    proxy, ids, gen, ex = _nng(m, idx, yhat)
    diag = PMatDiag(generator=gen, examples=ex)
    F = Oracle(m, idx).sampled(yhat)
    torch.testing.assert_close(diag.get_diag().double(), F.diagonal(), rtol=1e-9, atol=1e-14)
    assert float(diag.trace()) == pytest.approx(float(torch.trace(F)), rel=1e-9)


@pytest.mark.parametrize("recipe", RECIPES)
def test_kfac_is_exact_for_one_token_row(recipe):
    """B = T = 1: each layer's Fisher block is (gy gyᵀ) ⊗ (x xᵀ), exactly K-FAC's form."""
    m, idx = tiny_gpt(recipe, T=1), tokens(1, 1, seed=3)
    yhat = labels(m, idx, seed=2)
    _, ids, _, _ = _nng(m, idx, yhat)
    with hessian_mode(m):
        proxy, _ = fi.fisher_proxy(m)
    kfac = fi.kfac_blocks(proxy, idx, yhat, ids)
    F = Oracle(m, idx).sampled(yhat)
    for lid, sl in zip(ids, layer_slices(m).values()):
        a, g = kfac[lid]
        torch.testing.assert_close(torch.kron(g, a).double(), F[sl, sl], rtol=1e-9, atol=1e-14)


def _constant_inputs(m: GPT) -> None:
    with torch.no_grad():                 # no position signal: every token row of every Linear sees one input
        m.transformer.wpe.weight.zero_()


def test_kfac_is_exact_when_every_row_of_a_layer_has_the_same_input():
    """T = 1, one token repeated over the batch, labels sampled apart: x is shared, so F_layer = E[gy gyᵀ] ⊗ x xᵀ
    and K-FAC's factorisation is exact; also its trace and λ_max as the monitor reports them."""
    m = tiny_gpt("fp8_hybrid", T=1)
    idx = torch.full((6, 1), 3)
    yhat = labels(m, idx, seed=4)
    with hessian_mode(m):
        proxy, blocks = fi.fisher_proxy(m)
    ids = blocks["transformer.h.0"]
    kfac = fi.kfac_blocks(proxy, idx, yhat, ids)
    F = Oracle(m, idx).sampled(yhat)
    for lid, sl in zip(ids, layer_slices(m).values()):
        a, g = kfac[lid]
        torch.testing.assert_close(torch.kron(g, a).double(), F[sl, sl], rtol=1e-9, atol=1e-14)
    got = rows_of(m, idx, seed=4, iters=2)
    sls = list(layer_slices(m).values())
    assert got["kfac_trace"] == pytest.approx(float(torch.trace(F)), rel=1e-9)
    assert got["kfac_lambda_max"] == pytest.approx(max(float(torch.linalg.eigvalsh(F[s, s])[-1]) for s in sls),
                                                   rel=1e-9)


def test_kfac_factor_a_is_the_mean_over_token_rows():
    """T > 1 with one shared input per layer (same token everywhere, no position embedding): NNGeometry's own
    per-row diagonal Σ_rows gy²x² / B must equal diag(A ⊗ G) with A the mean over the B·T rows — without the
    monitor's division of A by T it would be T times larger."""
    from nngeometry.object import PMatDiag
    T = 3
    m = tiny_gpt(T=T)
    _constant_inputs(m)
    idx = torch.full((4, T), 5)
    yhat = labels(m, idx, seed=6)
    proxy, ids, gen, ex = _nng(m, idx, yhat)
    expand = PMatDiag(generator=gen, examples=ex).get_diag().double()
    kfac = fi.kfac_blocks(proxy, idx, yhat, ids)
    ours = torch.cat([torch.kron(g, a).diagonal().double() for a, g in (kfac[i] for i in ids)])
    torch.testing.assert_close(ours, expand, rtol=1e-9, atol=1e-14)


def test_nngeometry_skips_quantized_linear_silently_which_is_why_the_collection_is_built_by_hand():
    from nngeometry.layercollection import LayerCollection
    m = tiny_gpt("fp8_hybrid")
    lc = LayerCollection.from_model(m.transformer.h[0], ignore_unsupported_layers=True)
    assert list(lc.layers) == ["ln_1", "ln_2"]     # its four (Quantized)Linears are missing, without a word
    assert all(isinstance(m.get_submodule(f), QuantizedLinear) for f in fi.block_linears(m)["transformer.h.0"])
    with pytest.raises(Exception, match="do not know"):
        LayerCollection.from_model(m)     # the embedding


# ------------------------------------------------------------------------------------------ the live model, errors


def test_measuring_changes_nothing_in_the_live_model():
    m, idx = tiny_gpt(SR_DELAYED), tokens(3, 3)
    m.train()
    m(idx, idx)[1].backward()
    before = snapshot_state(m)            # buffers, amax history, counters, SR generators, torch RNG
    params = [p.detach().clone() for p in m.parameters()]
    grads = [p.grad.clone() for p in m.parameters()]
    rng = (np.random.get_state(), random.getstate())
    fi.fisher_rows(m, idx, step=1, iters=3)
    assert_same_state(snapshot_state(m), before)
    assert all(torch.equal(p, q) for p, q in zip(m.parameters(), params))
    assert all(torch.equal(p.grad, g) for p, g in zip(m.parameters(), grads))
    now = np.random.get_state()
    assert np.array_equal(now[1], rng[0][1]) and now[2:] == rng[0][2:] and random.getstate() == rng[1]
    assert all(mod.training for mod in m.modules())
    assert all(q.g_quant is not None for q in m.modules() if isinstance(q, QuantizedLinear))


def _train(measure: bool) -> list[float]:
    batches = [(tokens(3, 3, step), tokens(3, 3, step + 7)) for step in range(4)]
    probe = (lambda m, b, step: fi.fisher_rows(m, b[0], step=step, iters=3)) if measure else None
    return losses_with_probe(tiny_gpt(SR_DELAYED, seed=2, dropout=0.1), batches, lambda m, b: m(*b)[1], probe)


def test_training_is_bit_identical_with_and_without_measurements():
    assert _train(measure=True) == _train(measure=False)


def test_rows_are_tidy_and_say_what_they_measure():
    rows = fi.fisher_rows(tiny_gpt("fp8_hybrid"), tokens(2, 3), step=9, iters=3)
    assert {r["metric"] for r in rows} == set(fi.METRICS) and {r["layer"] for r in rows} == {"transformer.h.0"}
    assert {r["role"] for r in rows} == {"ste_surrogate"} and {r["step"] for r in rows} == {9}
    assert {r["role"] for r in fi.fisher_rows(tiny_gpt(), tokens(2, 3), step=0, iters=2)} == {"exact"}


def test_gemm_faithful_block_recipes_are_refused_with_the_layer_named():
    m = tiny_gpt("nvfp4")
    if not any(getattr(q, "gemm", None) is not None for q in m.modules()):
        pytest.skip("nvfp4 has no GEMM options in this build")
    with pytest.raises(ValueError, match=r"fisher: transformer\.h\.0\..* GEMM-faithful"):
        fi.fisher_rows(m, tokens(2, 3), step=0)


# ------------------------------------------------------------------------------------------ the diagnostics group


def test_fisher_monitor_in_diagnostics_uses_a_fixed_probe(tmp_path):
    from altgrad_lib.monitors import read_diagnostics
    from altgrad_lib.monitors.config import DiagnosticsConfig
    from altgrad_lib.monitors.diagnostics import Diagnostics
    m = tiny_gpt("fp8_hybrid")
    cfg = DiagnosticsConfig(preset="off", fisher_interval=2, fisher_samples=2, fisher_iters=2000)
    assert cfg.active_groups == ("fisher",) and "fisher@2" in cfg.short_str()
    d = Diagnostics(cfg, tmp_path, m)
    d.start(0, None)
    b1, b2 = tokens(3, 3, 0), tokens(3, 3, 1)
    for step, b in ((1, b1), (2, b2), (3, b2)):    # the monitor keeps the first 2 sequences of step 1
        d.after_backward(step, b, b, None)
        d.after_step(step, 1.0, 0.5, 0.1)
    d.close()
    v = read_diagnostics(tmp_path).set_index(["step", "layer", "metric"])["value"]
    assert sorted({s for s, _, _ in v.index}) == [1, 2]
    m2 = tiny_gpt("fp8_hybrid")
    lam = float(torch.linalg.eigvalsh(Oracle(m2, b1[:2]).exact())[-1])
    # the monitor stops its power iteration at a relative change ≤ 1e-3 (fisher_rows' tol), so compare at that
    assert v[(2, "transformer.h.0", "fisher_lambda_max")] == pytest.approx(lam, rel=1e-3)
    assert v[(1, "transformer.h.0", "fisher_lambda_max")] == pytest.approx(lam, rel=1e-3)


def test_fisher_monitor_state_survives_a_resume(tmp_path):
    """The probe is checkpointed: a Diagnostics restarted from step 1's state measures step 2 on the same probe."""
    from altgrad_lib.monitors import read_diagnostics
    from altgrad_lib.monitors.config import DiagnosticsConfig
    from altgrad_lib.monitors.diagnostics import Diagnostics
    cfg = DiagnosticsConfig(preset="off", fisher_interval=2, fisher_samples=2, fisher_iters=5)
    m = tiny_gpt("fp8_hybrid")

    def steps(d, todo):
        for step in todo:
            b = tokens(3, 3, step)       # another batch every step: only the first is the probe
            d.after_backward(step, b, b, None)
            d.after_step(step, 1.0, 0.5, 0.1)

    whole = Diagnostics(cfg, tmp_path / "a", m)
    whole.start(0, None)
    steps(whole, (1, 2))
    whole.close()
    first = Diagnostics(cfg, tmp_path / "b", m)
    first.start(0, None)
    steps(first, (1,))
    state = first.state_dict()
    first.close()
    again = Diagnostics(cfg, tmp_path / "b", m)
    again.start(1, state)
    steps(again, (2,))
    again.close()
    a, b = read_diagnostics(tmp_path / "a"), read_diagnostics(tmp_path / "b")
    assert a.equals(b) and set(a["step"]) == {1, 2}


def test_fisher_config_is_validated_with_one_line_errors():
    from altgrad_lib.monitors.config import DiagnosticsConfig
    assert "fisher" not in DiagnosticsConfig(preset="full").active_groups
    c = DiagnosticsConfig.from_value({"preset": "cheap", "fisher_interval": 50})
    assert c.active_groups[-1] == "fisher" and c.interval_of("fisher") == 50 and c.due("fisher", 100)
    for name, bad in (("fisher_interval", -1), ("fisher_interval", 1.5), ("fisher_samples", 0),
                      ("fisher_iters", True)):
        with pytest.raises(ValueError, match=f"DiagnosticsConfig.{name}=") as e:
            DiagnosticsConfig(**{name: bad})
        assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="fisher: set fisher_interval"):
        DiagnosticsConfig(groups=("fisher",))
