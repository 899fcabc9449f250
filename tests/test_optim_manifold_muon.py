"""Oracles of the orthogonalizing optimizers (numerics/matrix.py, optim/muon.py, optim/constraints.py): Newton–Schulz
and msign against the SVD, the dual-ascent step against a slow reference written from the published equations, the
Stiefel and hypersphere constraints after every step, geoopt's RiemannianAdam on geoopt.Stiefel as a peer; the
low-precision NS GEMM and momentum; refusals; tiny runs."""
from __future__ import annotations

import math

import geoopt
import numpy as np
import pytest
import torch

from altgrad_lib.errors import ConfigError
from altgrad_lib.numerics.matrix import (CUBIC, QUINTIC, cubic_ns_error, gram_residual, msign, newton_schulz,
                                         sphere_residual, stiefel_scale)
from altgrad_lib.numerics.quant_spec import QuantSpec
from altgrad_lib.numerics.quantizer import Quantizer
from altgrad_lib.optim.constraints import constrain
from altgrad_lib.optim.factory import build_optimizer
from altgrad_lib.optim.lowp_state import StateFormat
from altgrad_lib.optim.muon import ManifoldMuon, Muon, NSGemm, dual_ascent, ns_layer_spec
from altgrad_lib.quantize.linear import QuantizedLinear
from altgrad_lib.quantize.recipes import hidden_matrices
from altgrad_lib.training.build import build_model
from altgrad_lib.training.checkpoint import load_checkpoint
from altgrad_lib.training.loop import TrainConfig, train
from altgrad_lib.training.preflight import check_policy, check_settings

EPS32 = torch.finfo(torch.float32).eps
SHAPES = [(48, 16), (16, 48), (16, 16)]
TINY = dict(n_layer=1, n_head=2, n_embd=32, block_size=32, batch_size=4, max_docs=50, tokenizer="gpt2-512",
            max_steps=2, warmup_steps=1, eval_interval=0, eval_iters=1, ckpt_interval=0, lr=2e-3)


def _rand(shape, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


# ---- Newton–Schulz and msign against the SVD
@pytest.mark.parametrize("steps", [3, 8, 20])
def test_cubic_msign_error_is_the_ns_error_bound(steps):
    """‖NS_k(X) - U Vᵀ‖_2 is the scalar recurrence e <- e²(3 - e)/2 from e = 1 - σ_min / ‖X‖_F (matrix.py), exactly
    in exact arithmetic: NS acts on each singular value alone and 1 - p^k(σ) is largest at σ_min. The fp32 term:
    each step's products round at about n eps relative (n = the reduction length), and the iteration contracts
    errors near 1 (p'(1) = 0), so k steps add at most k n eps."""
    x = _rand((48, 16), 1).double()
    u, s, vh = torch.linalg.svd(x, full_matrices=False)
    bound = cubic_ns_error((s[-1] / x.norm()).item(), steps)
    err = torch.linalg.matrix_norm(msign(x.float(), "ns", steps).double() - u @ vh, ord=2).item()
    assert abs(err - bound) <= steps * 48 * EPS32


def test_polar_msign_is_the_svds_u_vt():
    """fp32 SVD against fp64: U Vᵀ is well conditioned here (σ_min / σ_max of a 24 x 8 Gaussian is far from 0), so
    the difference is the fp32 SVD's backward error, about n eps."""
    x = _rand((24, 8), 2)
    u, s, vh = torch.linalg.svd(x.double(), full_matrices=False)
    assert torch.linalg.matrix_norm(msign(x, "polar").double() - u @ vh, ord=2) <= 24 * EPS32


@pytest.mark.parametrize("shape", SHAPES)
def test_quintic_ns_is_the_polynomial_on_the_singular_values(shape):
    """NS_k(X) = U p^k(Σ / ‖X‖_F) Vᵀ, p(σ) = aσ + bσ³ + cσ⁵ (Keller Jordan's coefficients), from an fp64 SVD.
    fp32 term: k steps of products of length <= 48, each step's slope at most a = 3.4445 (p's largest derivative on
    [0, 1.2]), so rounding grows at most a^k; 5 steps: a^5 k n eps."""
    x = _rand(shape, 3)
    u, s, vh = torch.linalg.svd(x.double(), full_matrices=False)
    sig = s / x.double().norm()
    a, b, c = QUINTIC
    for _ in range(5):
        sig = a * sig + b * sig**3 + c * sig**5
    ref = (u * sig) @ vh
    err = (newton_schulz(x, 5).double() - ref).abs().max().item()
    assert err <= a**5 * 5 * max(shape) * EPS32
    assert not torch.allclose(newton_schulz(x, 5).double(), u @ vh, atol=0.05)   # quintic: not the exact sign


# ---- the dual-ascent step against a slow reference written from the published equations
def slow_reference_manifold_muon_from_published_equations(w, g, eta, alpha, steps, tol):
    """Bernstein, "Modular Manifolds" (Thinking Machines, 2025) / Modula docs "Stiefel manifold", the dual ascent
    algorithm as written there, in float64 numpy with an SVD msign (no code of ours):
    1. Λ = -¼ (WᵀG + GᵀW)   2. A = -msign(G + 2WΛ)   3. H = WᵀA + AᵀW
    4. stop if ‖H‖_F / √(n·n) < tol, else Λ <- Λ + α (1 - j / steps) H (the post's code anneals α so) and go to 2.
    Then W <- msign(W + η A) (the retraction by msign the post recommends). Returns (A, new W, steps taken)."""
    def ms(x):
        u, s, vt = np.linalg.svd(x, full_matrices=False)
        return u @ vt
    lam = -0.25 * (w.T @ g + g.T @ w)
    for j in range(steps):
        a = -ms(g + 2 * w @ lam)
        h = w.T @ a + a.T @ w
        if np.linalg.norm(h) / math.sqrt(h.size) < tol:
            return a, ms(w + eta * a), j + 1
        lam = lam + alpha * (1 - j / steps) * h
    return a, ms(w + eta * a), steps


@pytest.mark.parametrize("shape, steps", [((12, 4), 100), ((10, 6), 30), ((8, 8), 100)])
def test_dual_ascent_matches_the_slow_reference(shape, steps):
    """fp32 against float64: each of the <= 100 dual steps takes an msign of a matrix of norm ~1 (fp32 SVD: n eps)
    and the dual update is a contraction-free sum, so the primal A may drift by steps n eps."""
    u, _, vt = np.linalg.svd(_rand(shape, 4).double().numpy(), full_matrices=False)
    q = u @ vt                                       # on the manifold to float64 rounding
    g = _rand(shape, 5).double().numpy()
    a_ref, w_ref, k_ref = slow_reference_manifold_muon_from_published_equations(q, g, 0.1, 0.01, steps, 1e-6)
    a, _, k = dual_ascent(torch.tensor(q, dtype=torch.float32), torch.tensor(g, dtype=torch.float32), steps)
    assert np.abs(-a.double().numpy() - a_ref).max() <= steps * max(shape) * EPS32
    if shape[0] == shape[1]:
        assert k_ref == 1    # the post: its initialization makes the square case exact at the first step
    else:
        assert k == k_ref


def test_manifold_muon_step_is_the_reference_step_on_the_scaled_manifold():
    """One ManifoldMuon step (momentum 0, so the NS input is the gradient) on a wide weight: W = s Q with s =
    sqrt(out/in), the reference on Q = Wᵀ / s with G = s Gᵀ."""
    shape = (6, 12)
    s = stiefel_scale(shape)
    w0 = s * msign(_rand(shape, 6)).T.T
    p = torch.nn.Parameter(w0.clone())
    opt = ManifoldMuon([{"params": [p], "muon": True}], lr=0.05, momentum=0.0, dual_steps=50)
    assert gram_residual(p, s) <= 12 * EPS32                    # projected when built
    g = _rand(shape, 7)
    p.grad = g.clone()
    q0 = (p.detach().double().T / s).numpy()
    opt.step()
    _, w_ref, _ = slow_reference_manifold_muon_from_published_equations(q0, (s * g.T).double().numpy(), 0.05, 0.01,
                                                                        50, 1e-6)
    assert np.abs(p.detach().double().numpy() - s * w_ref.T).max() <= 50 * 12 * EPS32


# ---- constraints after every step
@pytest.mark.parametrize("shape", SHAPES)
def test_stiefel_constraint_holds_after_every_step_to_fp32_rounding(shape):
    """Polar retraction in fp32: the SVD's U, V are orthogonal to about n eps (backward stable), so
    ‖ŴᵀŴ - I‖_F / √n <= max(out, in) eps."""
    p = torch.nn.Parameter(_rand(shape, 8))
    opt = ManifoldMuon([{"params": [p], "muon": True}], lr=0.05)
    s = stiefel_scale(shape)
    for i in range(5):
        p.grad = _rand(shape, 10 + i)
        opt.step()
        assert gram_residual(p, s) <= max(shape) * EPS32
        sv = torch.linalg.svdvals(p.detach().double())
        assert (sv / s - 1).abs().max() <= max(shape) * EPS32


@pytest.mark.parametrize("make", ["torch_adamw", "muon"])
def test_hypersphere_constraint_for_any_optimizer(make):
    """Rows divided by their norm in fp32: |‖w_i‖ - 1| is the norm's rounding, <= (√n + 2) eps."""
    ps = [torch.nn.Parameter(_rand(s, 20 + i)) for i, s in enumerate(SHAPES)]
    opt = (torch.optim.AdamW(ps, lr=0.01) if make == "torch_adamw" else
           Muon([{"params": ps, "muon": True}], lr=0.02))
    constrain(opt, ps, "hypersphere")
    for i in range(3):
        for j, p in enumerate(ps):
            p.grad = _rand(p.shape, 40 + 3 * i + j)
        opt.step()
        for p in ps:
            assert sphere_residual(p) <= (math.sqrt(p.shape[1]) + 2) * EPS32


# ---- geoopt as a peer
def test_geoopt_riemannian_adam_on_stiefel_is_a_peer():
    """Orthogonal Procrustes on a wide weight W = s Qᵀ: min ½‖W - T‖_F², whose optimum over the scaled manifold is
    s msign(T / s) (the polar factor). ManifoldMuon and geoopt's RiemannianAdam on geoopt.Stiefel (Q tall, QᵀQ = I)
    both stay on the manifold and both reach the optimum: the remaining gap is below 1 % of the starting gap (each
    with its own step size and 300 steps, a decaying lr)."""
    shape = (8, 16)
    s = stiefel_scale(shape)
    t = _rand(shape, 30)
    w_opt = s * msign(t / s)

    def f(w):
        return 0.5 * ((w - t) ** 2).sum()

    w0 = s * msign(_rand(shape, 31))
    ours = torch.nn.Parameter(w0.clone())
    opt = ManifoldMuon([{"params": [ours], "muon": True}], lr=0.1, momentum=0.0)
    peer = geoopt.ManifoldParameter((w0.T / s).clone(), manifold=geoopt.Stiefel())
    popt = geoopt.optim.RiemannianAdam([peer], lr=0.1)
    for i in range(300):
        decay = 1 - i / 300
        for grp in opt.param_groups:
            grp["lr"] = 0.1 * decay
        for grp in popt.param_groups:
            grp["lr"] = 0.1 * decay
        opt.zero_grad()
        f(ours).backward()
        opt.step()
        popt.zero_grad()
        f(s * peer.T).backward()
        popt.step()
    gap0 = (f(w0) - f(w_opt)).item()
    # the constraint: ours is re-projected by the polar msign each step (fp32 SVD: max(shape) eps); geoopt retracts
    # from its previous point, so its rounding may add up over the 300 steps
    for w, bound in ((ours.detach(), max(shape) * EPS32), (s * peer.detach().T, 300 * max(shape) * EPS32)):
        assert (f(w) - f(w_opt)).item() <= 0.01 * gap0
        assert gram_residual(w, s) <= bound


# ---- low precision: the NS GEMM and the momentum
def test_ns_gemm_is_the_quantized_linears_gemm():
    """E4M3: the product of the two per-tensor fake-quantized operands (Quantizer, as QuantizedLinear's classic path
    quantizes X and W); nvfp4: a QuantizedLinear of the recipe's mlp_up spec with weight bᵀ gives the same bits."""
    a, b = _rand((16, 32), 40), _rand((32, 24), 41)
    q = Quantizer(QuantSpec(fmt="E4M3"))
    assert torch.equal(NSGemm(ns_layer_spec("E4M3"))(a, b), q(a) @ q(b.T.contiguous()).T)
    spec = ns_layer_spec("nvfp4")
    layer = QuantizedLinear.from_linear(torch.nn.Linear(32, 24, bias=False), spec, "mlp_up", fqn="optim.ns_gemm",
                                        seed=104729)
    with torch.no_grad():
        layer.weight.copy_(b.T)
        assert torch.equal(NSGemm(spec, seed=0)(a, b), layer(a))


def test_ns_fmt_runs_every_ns_product_through_the_quantized_gemm(monkeypatch):
    calls = []
    orig = QuantizedLinear._quantized_gemm
    monkeypatch.setattr(QuantizedLinear, "_quantized_gemm", lambda self, x, w: calls.append(1) or orig(self, x, w))
    x = _rand((32, 16), 42)
    errs = {}
    for fmt in ("bf16", "E4M3"):
        calls.clear()
        errs[fmt] = ((newton_schulz(x, 5, mm=NSGemm(ns_layer_spec(fmt))) - newton_schulz(x, 5)).norm()
                     / newton_schulz(x, 5).norm()).item()
        assert len(calls) == 3 * 5                     # X Xᵀ, A², B X per step
    assert 0 < errs["bf16"] < errs["E4M3"]            # 7 mantissa bits against 3


def test_ns_fmt_and_accum_reach_the_optimizer_and_bad_ones_fail_in_one_line():
    cfg = TrainConfig.from_dict({**TINY, "optimizer": "muon", "optim": {"ns_fmt": "mxfp8", "ns_accum": "bf16",
                                                                        "ns_steps": 3}})
    torch.manual_seed(0)
    model, _ = build_model(cfg.model_config, 512, check_policy(cfg))
    opt = build_optimizer(model, cfg.optim_config)
    (gemm,) = opt._ns_gemms.values()
    assert gemm.spec.gemm_options.accum_for("fprop").fmt == "bf16"
    assert "mx" in gemm.spec.input.short_str()
    for bad, match in (("E9M9", "neither a format nor a recipe"), ("hp", "quantizes no operand")):
        with pytest.raises(ConfigError, match=match) as e:
            check_settings(TrainConfig.from_dict({**TINY, "optimizer": "muon", "optim": {"ns_fmt": bad}}))
        assert "\n" not in str(e.value)


@pytest.mark.parametrize("fmt, rounding", [("E4M3", "nearest"), ("E2M1", "stochastic")])
def test_low_precision_momentum_is_lowp_states_codes(fmt, rounding):
    """The Muon momentum B stored by StateFormat (AdamW's m machinery): after one step from B = 0, the stored codes
    decode to StateFormat's round trip of (1 - μ) G (nearest), or a value on its grid within one grid step (SR)."""
    sf = StateFormat(fmt=fmt, block=32, rounding=rounding, min_numel=0)
    p = torch.nn.Parameter(_rand((32, 16), 50))
    opt = Muon([{"params": [p], "muon": True}], lr=0.02, momentum=0.9,
               state_m={"fmt": fmt, "block": 32, "rounding": rounding, "min_numel": 0})
    g = _rand((32, 16), 51)
    p.grad = g.clone()
    opt.step()
    st = opt.state[p]
    assert "m" not in st and st["m_codes"].dtype == torch.uint8
    got = sf.decode(st["m_codes"], st["m_scale"], p)
    if rounding == "nearest":
        assert torch.equal(got, sf.decode(*sf.encode(0.1 * g), p))
    else:
        lo = sf.decode(*StateFormat(fmt=fmt, block=32, min_numel=0).encode(0.1 * g), p)
        assert (got - lo).abs().max() <= (0.1 * g).abs().max()      # one E2M1 grid step is at most amax / 2


# ---- refusals and runs
@pytest.mark.parametrize("optim, match", [
    ({"constraint": "hypersphere", "constrain": ["transformer.wte.weight"]}, "an embedding"),
    ({"constraint": "hypersphere", "constrain": ["*.ln_1.weight"]}, "1-D"),
    ({"constraint": "stiefel", "constrain": ["nothing.*"]}, "selects no trainable parameter"),
])
def test_a_constraint_on_a_parameter_it_cannot_hold_fails_in_one_line(optim, match):
    with pytest.raises(ConfigError, match=match) as e:
        check_settings(TrainConfig.from_dict({**TINY, "optimizer": "adamw", "optim": optim}))
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("optimizer, optim, match", [
    ("muon", {"constraint": "hypersphere", "storage": "grid_sr", "weight_fmt": "E4M3"}, "off its format's grid"),
    ("manifold_muon", {"storage": "kahan", "weight_fmt": "E4M3"}, "off its format's grid"),
    ("manifold_muon", {"constraint": "hypersphere"}, "Stiefel"),
    ("manifold_muon", {"ns_fmt": "E4M3"}, "polar msign is an SVD"),
    ("muon", {"constrain": ["*"]}, "constraint is 'none'"),
])
def test_contradictory_manifold_settings_fail_in_one_line(optimizer, optim, match):
    with pytest.raises(ConfigError, match=match) as e:
        check_settings(TrainConfig.from_dict({**TINY, "optimizer": optimizer, "optim": optim}))
    assert "\n" not in str(e.value)


def test_manifold_muon_checkpoint_weights_satisfy_the_constraint(tmp_path):
    cfg = TrainConfig.from_dict({**TINY, "optimizer": "manifold_muon", "recipe": "nvfp4", "out_dir": str(tmp_path),
                                 "optim": {"dual_steps": 20}})
    run = train(cfg, verbose=False, progress=False)
    assert run.status == "completed"
    state = load_checkpoint(run.ckpt_path, cfg.config_hash())
    names = list(hidden_matrices(build_model(cfg.model_config, 512, check_policy(cfg))[0]))
    assert len(names) == 4
    for name in names:
        w = state["model"][name]
        assert gram_residual(w, stiefel_scale(w.shape)) <= max(w.shape) * EPS32


def test_hypersphere_run_with_torch_adamw_keys(tmp_path):
    cfg = TrainConfig.from_dict({**TINY, "optimizer": "adamw", "recipe": "fp8_hybrid", "out_dir": str(tmp_path),
                                 "optim": {"constraint": "hypersphere"}})
    run = train(cfg, verbose=False, progress=False)
    state = load_checkpoint(run.ckpt_path, cfg.config_hash())
    for name in hidden_matrices(build_model(cfg.model_config, 512, check_policy(cfg))[0]):
        assert sphere_residual(state["model"][name]) <= (math.sqrt(32 * 4) + 2) * EPS32


def test_cubic_is_convergent_and_quintic_is_not():
    for sigma in (0.05, 0.5, 1.0, 1.5):
        v = sigma
        for _ in range(40):
            v = CUBIC[0] * v + CUBIC[1] * v**3
        assert abs(v - 1) < 1e-6
