"""optim/storage.py through the optimizers: on-grid invariant, SR unbiasedness (3 sigma), RNE stalls, Kahan
compensation, weight decay applied in fp32 then rounded."""
from __future__ import annotations

import math

import pytest
import torch

from altgrad_lib.numerics.formats import get_format
from altgrad_lib.optim.adamw import AdamW, GridAdamW
from altgrad_lib.optim.madam import Madam
from altgrad_lib.optim.sgd import GridSGD
from altgrad_lib.optim.storage import write

N = 20000


def _fixed_step_sgd(storage: str, frac: float, w: float = 1.25, fmt: str = "E4M3", steps: int = 1, **kw):
    """GridSGD with S = ULP (1/8 at 1.25 in E4M3) and g = frac: each step asks for -frac ULP on N copies."""
    p = torch.nn.Parameter(torch.full((N,), w))
    opt = GridSGD([p], lr=1.0, fmt=fmt, grid_exp=0, storage=storage, seed=3, **kw)
    for _ in range(steps):
        p.grad = torch.full((N,), frac)
        opt.step()
    return p.detach(), opt


def test_sr_grid_updates_are_unbiased_3sigma():
    ulp = 0.125
    new, _ = _fixed_step_sgd("grid_sr", 0.3)
    assert set(new.unique().tolist()) == {1.25, 1.25 - ulp}
    p_down = 0.3                                       # E[new] = 1.25 - 0.3 ulp
    sigma = ulp * math.sqrt(p_down * (1 - p_down) / N)
    assert abs(float(new.mean()) - (1.25 - 0.3 * ulp)) < 3 * sigma


def test_rne_grid_updates_stall_below_half_an_ulp():
    new, _ = _fixed_step_sgd("grid_rne", 0.3)
    assert torch.all(new == 1.25)
    new, _ = _fixed_step_sgd("grid_rne", 0.7)
    assert torch.all(new == 1.25 - 0.125)


@pytest.mark.parametrize("kahan_dtype", ["bf16", "fp32"])
def test_kahan_storage_accumulates_sub_ulp_steps(kahan_dtype):
    """AdamW with betas 0, eps 0 steps exactly -lr: 10 steps of 0.3 ULP(1.25) land on 1.25 - 3/8 = 0.875."""
    out = {}
    for storage in ("grid_rne", "kahan"):
        p = torch.nn.Parameter(torch.full((N,), 1.25))
        opt = AdamW([p], lr=0.3 * 0.125, betas=(0.0, 0.0), eps=0.0, fmt="E4M3", grid_exp=0, storage=storage,
                    kahan_dtype=kahan_dtype)
        for _ in range(10):
            p.grad = torch.ones(N)
            opt.step()
        out[storage] = p.detach()
    assert torch.all(out["grid_rne"] == 1.25)              # every step rounded away
    assert torch.all(out["kahan"] == 0.875)
    comp = next(iter(opt.state.values()))["comp"]
    assert comp.dtype == {"bf16": torch.bfloat16, "fp32": torch.float32}[kahan_dtype]


@pytest.mark.parametrize("storage", ["fp32", "grid_rne", "grid_sr", "kahan"])
@pytest.mark.parametrize("cls", [AdamW, GridAdamW, Madam, GridSGD])
@pytest.mark.parametrize("fmt", ["E4M3", "E5M2", "E7M0", "E1M6"])
def test_on_grid_after_every_step(storage, cls, fmt):
    f = get_format(fmt)
    gen = torch.Generator().manual_seed(0)
    p = torch.nn.Parameter(torch.randn(32, 16, generator=gen) * 0.02)
    lr = {AdamW: 1e-2, GridAdamW: 2.0, Madam: 0.1, GridSGD: 1.0}[cls]
    opt = cls([p], lr=lr, fmt=fmt, storage=storage, weight_decay=0.01)
    s = opt.state[p]["grid_scale"]
    def on_grid():
        return torch.equal(f.quantize(p.detach() * s), p.detach() * s)

    assert on_grid() or storage == "fp32"              # projected at construction
    start = p.detach().clone()
    for _ in range(4):
        p.grad = torch.randn(p.shape, generator=gen)
        opt.step()
        assert on_grid() or storage == "fp32"
    assert not torch.equal(p.detach(), start) or storage == "grid_rne"   # RNE may stall (Madam on E7M0 does)


def test_weight_decay_in_fp32_then_rounded():
    """Decay of 1 % per step (under half an ULP of E4M3): RNE stalls, SR shrinks |w| on average, kahan exactly."""
    w = torch.full((N,), 1.25)
    out = {}
    for storage in ("grid_rne", "grid_sr", "kahan"):
        p = torch.nn.Parameter(w.clone())
        opt = AdamW([p], lr=0.1, weight_decay=0.1, fmt="E4M3", grid_exp=0, storage=storage, seed=1)
        for _ in range(10):
            p.grad = torch.zeros_like(p)                 # Adam direction 0: decay only
            opt.step()
        out[storage] = p.detach()
    target = 1.25 * 0.99**10                             # 1.1305
    assert torch.all(out["grid_rne"] == 1.25)
    assert abs(float(out["grid_sr"].mean()) - target) < 0.01
    assert abs(float(out["kahan"][0]) - target) <= 0.125 / 2 and torch.all(out["kahan"] == out["kahan"][0])


def test_write_rejects_unknown_mode():
    with pytest.raises(ValueError, match="valid choices"):
        write(torch.zeros(2), torch.zeros(2), "fp16", get_format("E4M3"), torch.tensor(1.0))
