"""state.Snapshots (the training loop's per-step snapshot) against snapshot_state (state_dict + clone + deepcopy), bit
for bit: the same keys and values, restored by restore_snapshot to exactly the pre-step state; its reused tensors
follow a re-assigned buffer; a model with state_dict hooks takes state_dict's path."""
from __future__ import annotations

import pytest
import torch
from helpers import assert_same_state

from altgrad_lib.model import GPT, GPTConfig
from altgrad_lib.quantize.convert import quantize_model
from altgrad_lib.quantize.recipes import get_policy
from altgrad_lib.state import Snapshots, restore_snapshot, snapshot_state


def _model(recipe: str) -> GPT:
    torch.manual_seed(0)
    m = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=32, block_size=16, vocab_size=64))
    quantize_model(m, get_policy(recipe), verbose=False)
    return m


def _step(m: GPT, seed: int) -> None:
    x = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(seed))
    m(x, x)[1].backward()


@pytest.mark.parametrize("recipe", ["fp8_hybrid", "nvfp4", "hp"])   # nvfp4: stochastic rounding generators
def test_snapshots_equal_snapshot_state_and_restore_the_pre_step_state(recipe):
    m = _model(recipe)
    snaps = Snapshots(m)
    assert snaps._bufs is not None          # the fast path, not state_dict's
    for seed in range(3):
        _step(m, seed)                      # counters, scaler histories, SR generators move
        ref, snap = snapshot_state(m), snaps.take()
        assert_same_state(snap["state"], ref["state"])
        assert_same_state(snap["rng"], ref["rng"])
        _step(m, 10 + seed)
        torch.rand(3)                       # the torch RNG moves too
        restore_snapshot(m, snap)
        assert_same_state(snapshot_state(m), ref)


def test_snapshots_follow_a_reassigned_buffer():
    m = _model("fp8_hybrid")
    snaps = Snapshots(m)
    snaps.take()
    q = m.transformer.h[0].mlp.c_fc.x_quant
    q._buffers["n_elements"] = torch.full((), 7, dtype=torch.int64)
    assert_same_state(snaps.take()["state"], snapshot_state(m)["state"])


def test_snapshots_with_a_state_dict_hook_take_state_dicts_path():
    m = _model("fp8_hybrid")
    m.transformer.h[0].register_state_dict_post_hook(lambda *args: None)   # a hook could change any key
    snaps = Snapshots(m)
    assert snaps._bufs is None
    _step(m, 0)
    assert_same_state(snaps.take()["state"], snapshot_state(m)["state"])
