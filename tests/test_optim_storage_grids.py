"""Weight grids from 16 to 4 bits as storage: BF16, FP16 (formats_wide.py), E4M3, and E2M1 with its per-tensor
power-of-two scale.  Every grid storage mode keeps the stored weight on the grid bitwise after every step (for the
16-bit grids: equal to torch's own cast of itself), with and without the measuring (track_stats) path."""
from __future__ import annotations

import pytest
import torch

from altgrad_lib.numerics.formats import get_format
from altgrad_lib.optim.adamw import AdamW, GridAdamW
from altgrad_lib.numerics.grid import to_grid

CASTS = {"bf16": torch.bfloat16, "fp16": torch.float16}


@pytest.mark.parametrize("track", [False, True])
@pytest.mark.parametrize("storage", ["grid_rne", "grid_sr", "kahan", "error_feedback", "error_feedback_sr"])
@pytest.mark.parametrize("fmt", ["bf16", "fp16", "E4M3", "E2M1"])
@pytest.mark.parametrize("cls,lr", [(AdamW, 3e-3), (GridAdamW, 0.7)])
def test_every_storage_mode_stays_on_the_grid(cls, lr, fmt, storage, track):
    gen = torch.Generator().manual_seed(0)
    ps = [torch.nn.Parameter(torch.randn(40, 50, generator=gen) * 0.05),
          torch.nn.Parameter(torch.randn(30, generator=gen))]
    if fmt == "E2M1" and cls is AdamW:
        lr = 0.05                                        # E2M1's spacing (1/8 .. 1 of max/6): a step that can move
    opt = cls(ps, lr=lr, fmt=fmt, storage=storage, weight_decay=0.1, seed=2, track_stats=track)
    f = get_format(fmt)
    start = [p.detach().clone() for p in ps]
    for _ in range(5):
        for p in ps:
            p.grad = torch.randn(p.shape, generator=gen)
        opt.step()
        for p in ps:
            s, w = opt.state[p]["grid_scale"], p.detach()
            assert torch.equal(to_grid(w, f, s), w)
            if fmt in CASTS:
                assert torch.equal((w * s).to(CASTS[fmt]).float() / s, w)      # torch's cast: the same grid
    assert any(not torch.equal(a, p.detach()) for a, p in zip(start, ps))
    if fmt == "bf16":
        assert all(float(opt.state[p]["grid_scale"]) == 1.0 for p in ps)       # the plain bf16 grid (grid.grid_exp)
    if track:
        m = opt.stats.pop()
        assert 0 <= m["optim/stall_rate"] <= 1 and 0 < m["optim/frac_moved"] <= 1


def test_factory_builds_bf16_and_e2m1_storage():
    from altgrad_lib.optim.config import OptimConfig
    from altgrad_lib.optim.factory import build_optimizer

    for wf in ("bf16", "E5M10", "E2M1"):
        from altgrad_lib.model import GPT, GPTConfig    # a real model: weight_fmt puts the block Linears on the grid
        m = GPT(GPTConfig(vocab_size=64, block_size=16, n_layer=1, n_head=2, n_embd=32))
        oc = OptimConfig.from_dict("adamw", {"storage": "error_feedback", "weight_fmt": wf}, train_lr=1e-3,
                                   weight_decay=0.1, betas=(0.9, 0.95), seed=0, recipe="hp")
        opt = build_optimizer(m, oc)
        fmts = {g["fmt"] for g in opt.param_groups} - {None}
        assert fmts == {get_format(wf).name}


def test_sixteen_bit_formats_are_weight_grids_not_state_formats():
    from altgrad_lib.optim.lowp_state import StateFormat

    for name in ("bf16", "fp16"):
        with pytest.raises(ValueError, match="<= 8 bits"):
            StateFormat(fmt=name)
