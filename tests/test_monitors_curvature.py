"""Tests for altgrad_lib.monitors.curvature: power iteration against torch.linalg.eigvalsh of the dense Hessian
(torch.autograd.functional.hessian) of tiny models, Hutchinson against the exact trace (3-sigma), the STE
surrogate claim against an unquantized model at the quantized weights, and "measuring changes nothing".

Models are tiny and float64 (a few hundred parameters), so dense Hessians take milliseconds.
"""
from __future__ import annotations

import copy
import math
import random

import numpy as np
import pytest
import torch
from torch import nn
from torch.func import functional_call

from altgrad_lib.model import GPT, GPTConfig
from altgrad_lib.monitors import curvature as cv
from altgrad_lib.numerics.quant_spec import QuantSpec
from altgrad_lib.quantize.recipes import LayerSpec
from altgrad_lib.quantize.linear import QuantizedLinear
from altgrad_lib.quantize.convert import quantize_model
from helpers import losses_with_probe

SR_DELAYED = {"name": "sr_delayed", "layers": {"*": {
    "input": {"fmt": "E4M3", "scaling": {"kind": "delayed"}},
    "weight": {"fmt": "E4M3", "rounding": "stochastic"},
    "grad_output": {"fmt": "E5M2", "rounding": "stochastic"}}}}
EXACT = dict(iters=1000, tol=1e-6)   # converge fully: the test is about the operator, not the stopping rule


def mlp_loss(model, batch):
    x, y = batch
    return nn.functional.cross_entropy(model(x), y)


def tiny_mlp(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3)).double()


def mlp_batch(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(16, 4, generator=g, dtype=torch.float64), torch.randint(0, 3, (16,), generator=g)


def tiny_gpt(recipe: str | dict | None = None, seed: int = 0, dropout: float = 0.0) -> GPT:
    torch.manual_seed(seed)
    m = GPT(GPTConfig(block_size=4, vocab_size=8, n_layer=1, n_head=2, n_embd=4, vocab_multiple=1, dropout=dropout))
    if recipe is not None:
        quantize_model(m, recipe, verbose=False)
    return m.double()


def gpt_batch(seed: int = 0, B: int = 3):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 8, (B, 4), generator=g), torch.randint(0, 8, (B, 4), generator=g)


def dense_hessian(model, loss_fn, batch, params=None) -> torch.Tensor:
    """The oracle: torch.autograd.functional.hessian of the loss as a function of the flattened parameters,
    measured in the same mode as the power iteration (eval, dY quantization off)."""
    params = [p for p in model.parameters() if p.requires_grad] if params is None else params
    names = {id(p): n for n, p in model.named_parameters()}
    keys, sizes, shapes = [names[id(p)] for p in params], [p.numel() for p in params], [p.shape for p in params]
    flat0 = torch.cat([p.detach().reshape(-1) for p in params])

    class Wrapped(nn.Module):     # functional_call needs a module whose forward takes the batch
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, *b):
            return loss_fn(self.m, b)

    w = Wrapped()

    def f(flat):
        d = {"m." + k: c.view(s) for k, c, s in zip(keys, flat.split(sizes), shapes)}
        return functional_call(w, d, tuple(batch))

    with cv.hessian_mode(model):
        H = torch.autograd.functional.hessian(f, flat0, vectorize=True)
    return (H + H.T) / 2


def block(H: torch.Tensor, model, params) -> torch.Tensor:
    allp = [p for p in model.parameters() if p.requires_grad]
    offs, o = {}, 0
    for p in allp:
        offs[id(p)] = (o, o + p.numel())
        o += p.numel()
    idx = torch.cat([torch.arange(*offs[id(p)]) for p in params])
    return H[idx][:, idx]


def within(lam: float, ref: float, rel: float = 0.05) -> bool:
    return abs(lam - ref) <= rel * abs(ref)


# ------------------------------------------------------------------------------------------ eigenvalues vs dense


@pytest.mark.parametrize("seed", [0, 1])
def test_mlp_whole_model_and_per_layer_match_eigvalsh(seed):
    m, b = tiny_mlp(seed), mlp_batch(seed)
    H = dense_hessian(m, mlp_loss, b)
    ev = torch.linalg.eigvalsh(H)
    lam, n = cv.top_eigenvalue(m, mlp_loss, b, **EXACT)
    assert within(lam, float(ev.max())) and 1 <= n <= EXACT["iters"]
    layer = list(m[2].parameters())
    lam_l, _ = cv.top_eigenvalue(m, mlp_loss, b, params=layer, **EXACT)
    assert within(lam_l, float(torch.linalg.eigvalsh(block(H, m, layer)).max()))
    # the first layer's block is a different matrix: the restriction is really used
    first = list(m[0].parameters())
    lam_f, _ = cv.top_eigenvalue(m, mlp_loss, b, params=first, **EXACT)
    assert within(lam_f, float(torch.linalg.eigvalsh(block(H, m, first)).max()))


def test_negative_dominant_eigenvalue_largest_vs_magnitude():
    # the negated loss has the negated Hessian: its dominant eigenvalue is negative, so "largest" needs the shift
    m, b = tiny_mlp(3), mlp_batch(3)
    def neg(model, batch):
        return -mlp_loss(model, batch)

    ev = torch.linalg.eigvalsh(dense_hessian(m, neg, b))
    assert abs(float(ev.min())) > abs(float(ev.max()))
    lam_mag, _ = cv.top_eigenvalue(m, neg, b, which="magnitude", **EXACT)
    lam_top, _ = cv.top_eigenvalue(m, neg, b, which="largest", **EXACT)
    assert within(lam_mag, float(ev.min()))
    assert abs(lam_top - float(ev.max())) <= 0.05 * float(ev.abs().max())   # λ_max may be ~0 here


@pytest.mark.parametrize("recipe", [None, "fp8_hybrid"])
def test_gpt_whole_model_and_per_layer_match_eigvalsh(recipe):
    m, b = tiny_gpt(recipe), gpt_batch()
    H = dense_hessian(m, cv.gpt_loss, b)
    assert 200 <= H.shape[0] <= 400                                # "a GPT with a few hundred parameters"
    lam, _ = cv.top_eigenvalue(m, cv.gpt_loss, b, **EXACT)
    assert within(lam, float(torch.linalg.eigvalsh(H).max()))
    groups = cv.layer_groups(m, by="block")
    assert {"transformer.h.0", "transformer.wte", "transformer.wpe", "transformer.ln_f"} == set(groups)
    linears = cv.layer_groups(m, by="linear")
    for name in ("transformer.h.0.mlp.c_fc", "transformer.h.0.attn.c_attn"):    # per-layer blocks of H
        lam_l, _ = cv.top_eigenvalue(m, cv.gpt_loss, b, params=linears[name], **EXACT)
        assert within(lam_l, float(torch.linalg.eigvalsh(block(H, m, linears[name])).max())), name


def test_several_batches_give_the_mean_hessian():
    m = tiny_mlp(4)
    b1, b2 = mlp_batch(1), mlp_batch(2)
    H = (dense_hessian(m, mlp_loss, b1) + dense_hessian(m, mlp_loss, b2)) / 2
    lam, _ = cv.top_eigenvalue(m, mlp_loss, [b1, b2], **EXACT)
    assert within(lam, float(torch.linalg.eigvalsh(H).max()))


def test_preconditioned_operator_is_dhd():
    m, b = tiny_mlp(5), mlp_batch(5)
    H = dense_hessian(m, mlp_loss, b)
    g = torch.Generator().manual_seed(0)
    d = [torch.rand(p.shape, generator=g, dtype=torch.float64) + 0.5 for p in m.parameters()]
    D = torch.diag(torch.cat([x.reshape(-1) for x in d]))
    lam, _ = cv.top_eigenvalue(m, mlp_loss, b, precond=d, **EXACT)
    assert within(lam, float(torch.linalg.eigvalsh(D @ H @ D).max()))


def test_adam_preconditioner_reproduces_torch_adamw_step():
    # D² = 1/(√v̂ + ε) must be exactly the factor AdamW applied: Δp = −lr · m̂ · D² (no weight decay)
    m, b = tiny_mlp(6), mlp_batch(6)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2, betas=(0.9, 0.95), weight_decay=0.0)
    for _ in range(3):
        opt.zero_grad()
        mlp_loss(m, b).backward()
        before = [p.detach().clone() for p in m.parameters()]
        opt.step()
    d = cv.adam_preconditioner(opt, list(m.parameters()))
    for p, p0, di in zip(m.parameters(), before, d):
        st = opt.state[p]
        m_hat = st["exp_avg"] / (1 - 0.9 ** float(st["step"]))
        torch.testing.assert_close(p.detach() - p0, -1e-2 * m_hat * di**2, rtol=1e-9, atol=1e-15)
    assert cv.adam_stability_limit(0.9) == pytest.approx(38.0)


def test_ste_surrogate_is_the_float_hessian_at_the_quantized_weights():
    """The documented claim: with weight-only quantization (identity STE) the HVP-based Hessian equals the dense
    Hessian of the *unquantized* network evaluated at W = Q(W) — not zero, as the quantized model's would be."""
    torch.manual_seed(7)
    spec = LayerSpec(weight=QuantSpec(fmt="E4M3"))
    q = nn.Sequential(QuantizedLinear(4, 8, layer_spec=spec), nn.Tanh(),
                      QuantizedLinear(8, 3, layer_spec=spec)).double()
    plain = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3)).double()
    with torch.no_grad():
        for i in (0, 2):
            q[i].eval()
            plain[i].weight.copy_(q[i].w_quant(q[i].weight))     # Q(W), read-only in eval mode
            plain[i].bias.copy_(q[i].bias)
            q[i].train()
            assert not torch.equal(plain[i].weight, q[i].weight)  # rounding really moved the weights
    b = mlp_batch(7)
    H_plain = dense_hessian(plain, mlp_loss, b)
    lam, _ = cv.top_eigenvalue(q, mlp_loss, b, **EXACT)
    assert within(lam, float(torch.linalg.eigvalsh(H_plain).max()))
    torch.testing.assert_close(dense_hessian(q, mlp_loss, b), H_plain)


# ------------------------------------------------------------------------------------------ Hutchinson


def test_hutchinson_trace_within_three_sigma_of_exact_trace():
    m, b = tiny_gpt("fp8_hybrid", seed=1), gpt_batch(1)
    H = dense_hessian(m, cv.gpt_loss, b)
    n = 32
    est, se = cv.hutchinson_trace(m, cv.gpt_loss, b, samples=n, seed=3)
    off = H - torch.diag(torch.diag(H))
    sigma = math.sqrt(2 * float((off**2).sum()))           # std of vᵀHv for Rademacher v
    assert abs(est - float(torch.trace(H))) <= 3 * sigma / math.sqrt(n)
    assert se == pytest.approx(sigma / math.sqrt(n), rel=0.5)   # the reported error is the right size


# ------------------------------------------------------------------------------------------ changes nothing


def _state(model) -> dict:
    return copy.deepcopy(model.state_dict())


def _same(a, b) -> bool:
    if torch.is_tensor(a):
        return torch.is_tensor(b) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and np.array_equal(a, b)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def test_measuring_restores_training_flags_state_rngs_and_grads():
    m, b = tiny_gpt(SR_DELAYED, dropout=0.1), gpt_batch()
    m.train()
    m.transformer.h[0].mlp.eval()                      # a mixed model: each module gets its own flag back
    cv.gpt_loss(m, b).backward()                       # SR streams advanced, history filled, .grad set
    flags = {n: mod.training for n, mod in m.named_modules()}
    state, grads = _state(m), [p.grad.clone() for p in m.parameters()]
    rng = (torch.get_rng_state(), np.random.get_state(), random.getstate())
    cv.top_eigenvalue(m, cv.gpt_loss, b, iters=5)
    cv.hutchinson_trace(m, cv.gpt_loss, [b, gpt_batch(1)], samples=3)
    cv.curvature_rows(m, b, step=1, lr=1e-3, by="block", iters=3, trace_samples=2)
    assert {n: mod.training for n, mod in m.named_modules()} == flags
    assert _same(_state(m), state)                     # buffers, counters, amax history, SR generator states
    assert all(torch.equal(p.grad, g) for p, g in zip(m.parameters(), grads))
    assert torch.equal(torch.get_rng_state(), rng[0]) and _same(np.random.get_state(), rng[1])
    assert random.getstate() == rng[2]
    assert all(mod.g_quant is not None for mod in m.modules() if isinstance(mod, QuantizedLinear))


def _train(measure: bool) -> list[float]:
    probe = (lambda m, b, step: cv.curvature_rows(m, b, step=step, lr=1e-2, iters=4, trace_samples=2)) \
        if measure else None
    return losses_with_probe(tiny_gpt(SR_DELAYED, seed=2, dropout=0.1), [gpt_batch(step) for step in range(4)],
                             cv.gpt_loss, probe)


def test_training_is_bit_identical_with_and_without_measurements():
    assert _train(measure=True) == _train(measure=False)


# ------------------------------------------------------------------------------------------ rows, alarm, errors


def test_curvature_rows_are_tidy_and_say_what_they_measure():
    m, b = tiny_gpt("fp8_hybrid"), gpt_batch()
    rows = cv.curvature_rows(m, b, step=7, lr=0.5, by="block", iters=8, tol=1e-4, trace_samples=2)
    assert all(set(r) == {"step", "layer", "role", "metric", "value"} and r["step"] == 7 for r in rows)
    assert {r["role"] for r in rows} == {"ste_surrogate"}
    layers = {r["layer"] for r in rows}
    assert {"model", "transformer.h.0", "transformer.wte", "transformer.wpe", "transformer.ln_f"} == layers
    val = {(r["layer"], r["metric"]): r["value"] for r in rows}
    lam, n = cv.top_eigenvalue(m, cv.gpt_loss, b, iters=8, tol=1e-4)   # the same computation, one layer
    assert val[("model", "lambda_max")] == pytest.approx(lam, rel=1e-9) and val[("model", "power_iters")] == n
    assert val[("model", "lr_lambda_max")] == pytest.approx(0.5 * val[("model", "lambda_max")])
    assert {r["metric"] for r in rows} == {"lambda_max", "lr_lambda_max", "power_iters", "trace"}
    assert {r["role"] for r in cv.curvature_rows(tiny_gpt(), b, step=0, lr=1.0, by=None, iters=2)} == {"exact"}
    assert "STE" in cv.STE_NOTE and "STE surrogate" in cv.__doc__.replace("**", "")


def test_stability_alarm():
    assert cv.lr_sharpness(0.1, 30.0) == pytest.approx(3.0)
    assert cv.stability_alarm(0.1, 30.0) and not cv.stability_alarm(0.1, 19.0)
    assert not cv.stability_alarm(0.1, 300.0, limit=cv.adam_stability_limit(0.9))


def test_nonfinite_loss_gives_nan():
    m, b = tiny_mlp(), mlp_batch()
    with torch.no_grad():
        m[0].weight[0, 0] = math.nan
    assert math.isnan(cv.top_eigenvalue(m, mlp_loss, b, iters=5)[0])


def test_bad_arguments_and_backends_are_refused():
    m, b = tiny_mlp(), mlp_batch()
    with pytest.raises(ValueError, match="which='smallest'.*largest"):
        cv.top_eigenvalue(m, mlp_loss, b, which="smallest")
    with pytest.raises(ValueError, match="by='head'"):
        cv.layer_groups(m, by="head")
    with pytest.raises(ValueError, match="eager model"):
        cv.top_eigenvalue(torch.compile(m), mlp_loss, b)
    with pytest.raises(ValueError, match="no parameters"):
        cv.top_eigenvalue(m, mlp_loss, b, params=[])


# ------------------------------------------------------------------------------------------ the diagnostics group


def test_curvature_monitor_rows_match_eigvalsh_on_a_fixed_batch(tmp_path):
    from altgrad_lib.monitors import read_diagnostics
    from altgrad_lib.monitors.config import DiagnosticsConfig
    from altgrad_lib.monitors.diagnostics import Diagnostics
    m = tiny_gpt("fp8_hybrid")
    cfg = DiagnosticsConfig(preset="off", hessian_interval=2, hessian_iters=1000)
    assert cfg.active_groups == ("curvature",) and "hessian@2" in cfg.short_str()
    d = Diagnostics(cfg, tmp_path, m)
    d.start(0, None)
    b1, b2 = gpt_batch(0), gpt_batch(1)
    flags = [mod.training for mod in m.modules()]
    for step, b in ((1, b1), (2, b2), (3, b2)):      # step 2 gets another batch: the monitor keeps the first
        d.after_backward(step, *b, None)
        d.after_step(step, 1.0, 0.5, 0.1)
    assert [mod.training for mod in m.modules()] == flags
    d.close()
    df = read_diagnostics(tmp_path)
    assert set(df["step"]) == {1, 2}
    assert set(df["role"]) == {"ste_surrogate"}
    v = df.set_index(["step", "layer", "metric"])["value"]
    H = dense_hessian(m, cv.gpt_loss, b1)
    ref = float(torch.linalg.eigvalsh(H).max())
    for step in (1, 2):
        assert within(v[(step, "model", "lambda_max")], ref)
        assert v[(step, "model", "lr_lambda_max")] == pytest.approx(0.1 * v[(step, "model", "lambda_max")], rel=1e-12)
    groups = cv.layer_groups(m, by="block")
    h0 = float(torch.linalg.eigvalsh(block(H, m, groups["transformer.h.0"])).max())
    assert within(v[(1, "transformer.h.0", "lambda_max")], h0)
    other = float(torch.linalg.eigvalsh(dense_hessian(m, cv.gpt_loss, b2)).max())
    assert not within(other, ref, 0.001)                 # the second batch would give another number


def test_hessian_interval_config():
    from altgrad_lib.monitors.config import DiagnosticsConfig
    assert "curvature" not in DiagnosticsConfig(preset="full").active_groups
    assert "curvature" not in DiagnosticsConfig(preset="cheap").active_groups
    full = DiagnosticsConfig.from_value({"hessian_interval": 50})
    assert full.active_groups[-1] == "curvature" and full.interval_of("curvature") == 50
    assert full.due("curvature", 50) and not full.due("curvature", 51)
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="hessian_interval"):
            DiagnosticsConfig(hessian_interval=bad)
    with pytest.raises(ValueError, match="hessian_interval"):
        DiagnosticsConfig(groups=("curvature",))


def test_hessian_mode_removes_per_gemm_dy_overrides_and_restores_them():
    """dY quantization off means the per-GEMM dY overrides (quantize/gemm_overrides.py) too: inside hessian_mode a
    layer's backward equals the one with dY unquantized; on exit the same Quantizer objects are back."""
    ov = {"rht": [], "overrides": {"wgrad": {"input": "E5M2", "grad_output": "E4M3"}, "dgrad": {"grad_output": "E4M3"}}}
    spec = LayerSpec(input="E4M3", weight="E4M3", grad_output="E5M2", gemm=ov)
    no_dy = LayerSpec(input="E4M3", weight="E4M3", gemm={"rht": [], "overrides": {"wgrad": {"input": "E5M2"}}})
    torch.manual_seed(0)
    lin = nn.Linear(32, 16, dtype=torch.float64)
    model = nn.Sequential(QuantizedLinear.from_linear(lin, spec, "mlp_up", "0"))
    ref = QuantizedLinear.from_linear(copy.deepcopy(lin), no_dy, "mlp_up", "0").eval()
    x = torch.randn(8, 32, dtype=torch.float64)
    before = dict(model[0].gemm_quants.items())

    def grads(m):
        m.zero_grad(set_to_none=True)
        m(x).pow(2).sum().backward()
        return m.weight.grad.clone()

    with cv.hessian_mode(model):
        assert set(model[0].gemm_quants) == {"wgrad_input"}
        inside = grads(model[0])
    assert torch.equal(inside, grads(ref))
    assert dict(model[0].gemm_quants.items()) == before and model[0].training
    assert not torch.equal(grads(model[0]), inside)          # dY quantized again (E4M3 / E5M2 differ from fp64)
