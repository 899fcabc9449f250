"""optim/adamw.py: our AdamW = torch's, the cancellation of StiffnessAdamW, the ULP-step law of GridAdamW."""
from __future__ import annotations

import pytest
import torch
from helpers import grid_ordinal_bruteforce

from altgrad_lib.numerics.formats import get_format
from altgrad_lib.optim.adamw import AdamW, GridAdamW, StiffnessAdamW


def _run(opt, params, grads):
    for g in grads:
        for p, gp in zip(params, g):
            p.grad = gp.clone()
        opt.step()


def _grads(shapes, n, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [[torch.randn(s, generator=gen) for s in shapes] for _ in range(n)]


def test_adamw_fp32_matches_torch_adamw():
    torch.manual_seed(0)
    w0 = [torch.randn(16, 8) * 0.02, torch.randn(8)]
    ours = [torch.nn.Parameter(w.clone()) for w in w0]
    ref = [torch.nn.Parameter(w.clone()) for w in w0]
    grads = _grads([w.shape for w in w0], 10)
    _run(AdamW(ours, lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1), ours, grads)
    _run(torch.optim.AdamW(ref, lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1, foreach=False), ref, grads)
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)    # lr, bias corrections in fp32 (torch: float64)


def test_stiffness_adamw_cancels_inside_one_binade():
    """S constant per coordinate => Adam(S g, eps) == Adam(g, eps / S): the naive recipe does nothing."""
    gen = torch.Generator().manual_seed(1)
    w0 = (1 + torch.rand(64, generator=gen)) * 2.0**-5          # one binade [2^-5, 2^-4): S = 2^-8 everywhere
    S = 2.0 ** (-5 - 3)
    grads = _grads([w0.shape], 20, seed=2)
    naive, ref, ref_eps = (torch.nn.Parameter(w0.clone()) for _ in range(3))
    opt = StiffnessAdamW([naive], lr=1e-5, eps=1e-8, weight_decay=0.1, fmt="E4M3", grid_exp=0)
    naive.grad = grads[0][0].clone()
    opt.step()
    torch.testing.assert_close(opt.state[naive]["m"], 0.1 * S * grads[0][0], rtol=1e-6, atol=0)   # S was applied
    _run(opt, [naive], grads[1:])
    _run(torch.optim.AdamW([ref_eps], lr=1e-5, eps=1e-8 / S, weight_decay=0.1, foreach=False), [ref_eps], grads)
    _run(torch.optim.AdamW([ref], lr=1e-5, eps=1e-8, weight_decay=0.1, foreach=False), [ref], grads)
    assert torch.all((naive >= 2.0**-5) & (naive < 2.0**-4)), "stayed inside the binade"
    moved = (ref - w0).abs().detach()
    assert float(moved.min()) > 0
    torch.testing.assert_close(naive, ref_eps, rtol=1e-6, atol=1e-10)         # exactly AdamW with eps / S
    assert float(((naive - ref).detach().abs() / moved).max()) < 1e-3            # = AdamW up to eps effects


def _ulp_law(fmt_name, lr, sign_g, mode="step"):
    """One GridAdamW step (betas 0, eps 0: m̂/sqrt(v̂) = sign(g)) from every grid value; returns (w, new)."""
    f = get_format(fmt_name)
    vals = f.values().float()
    w = torch.cat([vals[(vals > 0) & (vals < f.max / 4)], -vals[(vals > 0) & (vals < f.max / 4)], vals[vals == 0]])
    p = torch.nn.Parameter(w.clone())
    opt = GridAdamW([p], lr=lr, betas=(0.0, 0.0), eps=0.0, fmt=fmt_name, grid_exp=0, storage="grid_rne",
                    ulp_mode=mode)
    p.grad = torch.full_like(w, sign_g)
    opt.step()
    return f, w, p.detach()


@pytest.mark.parametrize("fmt_name", ["E4M3", "E5M2", "E3M4", "E7M0"])
@pytest.mark.parametrize("sign_g", [1.0, -1.0])
def test_grid_adamw_moves_one_code_everywhere(fmt_name, sign_g):
    """lr_ulp = 1: every weight (binade edges, subnormals, zero, both signs) moves exactly one code, against g."""
    f, w, new = _ulp_law(fmt_name, 1.0, sign_g)
    d = torch.tensor(grid_ordinal_bruteforce(new.tolist(), f)) - torch.tensor(grid_ordinal_bruteforce(w.tolist(), f))
    assert torch.all(d == -int(sign_g)), d.unique()


def test_grid_adamw_up_mode_skips_a_code_at_binade_edges():
    """The alternative 'up' rule: stepping toward zero from a power of two jumps two codes (why 'step' is default)."""
    f, w, new = _ulp_law("E4M3", 1.0, 1.0, mode="up")
    d = torch.tensor(grid_ordinal_bruteforce(new.tolist(), f)) - torch.tensor(grid_ordinal_bruteforce(w.tolist(), f))
    pow2 = (w > f.min_normal) & (torch.frexp(w)[0] == 0.5)
    assert torch.all(d[pow2] == -2) and torch.all(d[(w > 0) & ~pow2] == -1)


@pytest.mark.parametrize("k", [2, 3])
def test_grid_adamw_moves_k_codes_inside_a_binade_and_near_zero(k):
    f = get_format("E4M3")
    w = torch.tensor([1.25, -1.25, 0.0, 2.0**-9, 5 * 2.0**-9])            # binade interior, zero, subnormals
    p = torch.nn.Parameter(w.clone())
    opt = GridAdamW([p], lr=float(k), betas=(0.0, 0.0), eps=0.0, fmt="E4M3", grid_exp=0, storage="grid_rne")
    p.grad = torch.tensor([-1.0, 1.0, -1.0, 1.0, 1.0])                      # up, down(-), up from 0, down across 0
    opt.step()
    d = [b - a for a, b in zip(grid_ordinal_bruteforce(w.tolist(), f), grid_ordinal_bruteforce(p.tolist(), f))]
    assert d == [k, -k, k, -k, -k]


def test_grid_adamw_clip_and_fp32_group():
    p = torch.nn.Parameter(torch.tensor([1.25]))
    hp = torch.nn.Parameter(torch.tensor([1.0]))
    opt = GridAdamW([{"params": [p], "fmt": "E4M3", "grid_exp": 0, "storage": "grid_rne"},
                     {"params": [hp], "lr": 1e-3}], lr=5.0, betas=(0.0, 0.0), eps=0.0, clip_ulp=2.0)
    p.grad, hp.grad = torch.tensor([-1.0]), torch.tensor([1.0])
    opt.step()
    assert p.item() == 1.25 + 2 * 0.125                   # clipped to 2 ULPs
    assert hp.item() == pytest.approx(1.0 - 1e-3)           # fp32 group: plain AdamW, lr in weight units


def test_low_precision_states_bytes_and_close_to_fp32():
    from altgrad_lib.optim.lowp_state import state_bytes
    torch.manual_seed(0)
    w0 = torch.randn(64, 256) * 0.02
    a, b = torch.nn.Parameter(w0.clone()), torch.nn.Parameter(w0.clone())
    grads = _grads([w0.shape], 5)
    oa = AdamW([a], lr=1e-3)
    ob = AdamW([b], lr=1e-3, state_m="E4M3", state_v="E5M2")
    _run(oa, [a], grads), _run(ob, [b], grads)
    assert "m_codes" in ob.state[b] and ob.state[b]["m_codes"].dtype == torch.uint8
    assert state_bytes(ob)["bytes_per_param"] < 0.27 * state_bytes(oa)["bytes_per_param"]
    moved = (a - w0).abs().mean().detach()
    assert float((a - b).abs().mean().detach()) < 0.1 * float(moved)


def test_validation_errors_name_the_choices():
    p = torch.nn.Parameter(torch.ones(2))
    with pytest.raises(ValueError, match="valid choices"):
        GridAdamW([p], fmt="E4M3", ulp_mode="sideways")
    with pytest.raises(ValueError, match="valid choices"):
        StiffnessAdamW([p], fmt="E4M3", stiffness="magic")
    with pytest.raises(ValueError, match="needs a weight format"):
        AdamW([p], storage="grid_sr")
    assert GridAdamW([p], fmt="E4M3", storage="grid_sr", clip_ulp=4).short_str() == \
        "grid_adamw[e4m3fn/grid_sr/step/clip4]"


def test_stiffness_ablations_at_zero():
    """The plain S = 2^(floor(log2|w|) - M) is 0 at w = 0, so a zero weight never moves; the exponent-aware
    ULP moves it one subnormal step; damping S + delta moves it by lr * delta."""
    out = {}
    for kind, damping in (("mantissa", 0.0), ("ulp", 0.0), ("mantissa", 2.0**-7)):
        p = torch.nn.Parameter(torch.zeros(2))
        opt = GridAdamW([p], lr=1.0, betas=(0.0, 0.0), eps=0.0, fmt="E4M3", grid_exp=0, stiffness=kind,
                        damping=damping)
        p.grad = torch.tensor([1.0, -1.0])
        opt.step()
        out[(kind, damping)] = p.detach().tolist()
    assert out[("mantissa", 0.0)] == [0.0, 0.0]
    assert out[("ulp", 0.0)] == [-2.0**-9, 2.0**-9]
    assert out[("mantissa", 2.0**-7)] == [-2.0**-7, 2.0**-7]
