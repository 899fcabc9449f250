"""Tests for altgrad_lib.training.checkpoint: atomic writes, clear errors on bad files, RNG and snapshot round trips.

End-to-end resume exactness (model + optimizer + quantizer state) is tested in tests/test_train.py.
"""
from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from altgrad_lib import io, state
from altgrad_lib.training import checkpoint as ckpt


def _model_opt(seed: int = 0):
    torch.manual_seed(seed)
    m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.LayerNorm(8), torch.nn.Linear(8, 2))
    m.register_buffer("amax_history", torch.zeros(3))
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    m(torch.randn(5, 4)).sum().backward()
    opt.step()
    return m, opt


def test_save_load_roundtrip(tmp_path):
    m, opt = _model_opt()
    p = tmp_path / "ck" / "last.pt"
    ckpt.save_checkpoint(p, model=m, optimizer=opt, step=7, config_hash="abc")
    st = ckpt.load_checkpoint(p, "abc")
    assert st["step"] == 7 and st["config_hash"] == "abc" and "torch_version" in st
    m2, opt2 = _model_opt(seed=1)
    assert ckpt.restore_training_state(st, model=m2, optimizer=opt2) == 7
    for a, b in zip(m.state_dict().values(), m2.state_dict().values()):
        assert torch.equal(a, b)
    assert torch.equal(opt.state_dict()["state"][0]["exp_avg"], opt2.state_dict()["state"][0]["exp_avg"])
    assert not list(p.parent.glob(".*tmp*"))


def test_rng_state_roundtrip():
    st = state.capture_rng_state()
    a = (torch.rand(3), np.random.rand(3), random.random())
    torch.rand(10), np.random.rand(10), random.random()  # move every generator on
    state.restore_rng_state(st)
    b = (torch.rand(3), np.random.rand(3), random.random())
    assert torch.equal(a[0], b[0]) and np.array_equal(a[1], b[1]) and a[2] == b[2]


def test_crash_mid_write_keeps_previous_checkpoint(tmp_path, monkeypatch):
    m, opt = _model_opt()
    p = tmp_path / "last.pt"
    ckpt.save_checkpoint(p, model=m, optimizer=opt, step=1, config_hash="h")
    before = p.read_bytes()

    def half_then_die(fh, data):
        fh.write(data[: len(data) // 2])
        raise KeyboardInterrupt("simulated crash mid-write")

    monkeypatch.setattr(io, "_write_payload", half_then_die)
    with pytest.raises(KeyboardInterrupt):
        ckpt.save_checkpoint(p, model=m, optimizer=opt, step=2, config_hash="h")
    assert p.read_bytes() == before
    assert ckpt.load_checkpoint(p, "h")["step"] == 1


def test_remove_stale_tmp(tmp_path):
    (tmp_path / ".last.pt.tmp.123").write_bytes(b"partial")
    (tmp_path / "last.pt").write_bytes(b"keep")
    removed = io.remove_stale_tmp(tmp_path)
    assert [r.name for r in removed] == [".last.pt.tmp.123"] and (tmp_path / "last.pt").exists()


def test_truncated_checkpoint_is_a_clear_error(tmp_path):
    m, opt = _model_opt()
    p = tmp_path / "last.pt"
    ckpt.save_checkpoint(p, model=m, optimizer=opt, step=3, config_hash="h")
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 3])
    with pytest.raises(ckpt.CheckpointError, match="corrupt or truncated") as ei:
        ckpt.load_checkpoint(p, "h")
    assert str(p) in str(ei.value)


def test_garbage_and_foreign_files(tmp_path):
    g = tmp_path / "garbage.pt"
    g.write_bytes(b"not a checkpoint at all")
    with pytest.raises(ckpt.CheckpointError, match=str(g)):
        ckpt.load_checkpoint(g)
    f = tmp_path / "foreign.pt"
    torch.save({"model": {}}, f)
    with pytest.raises(ckpt.CheckpointError, match="missing keys"):
        ckpt.load_checkpoint(f)
    with pytest.raises(ckpt.CheckpointError, match="does not exist"):
        ckpt.load_checkpoint(tmp_path / "nope.pt")


def test_config_hash_mismatch_names_both_hashes(tmp_path):
    m, opt = _model_opt()
    p = tmp_path / "last.pt"
    ckpt.save_checkpoint(p, model=m, optimizer=opt, step=3, config_hash="aaaa")
    with pytest.raises(ckpt.CheckpointError) as ei:
        ckpt.load_checkpoint(p, "bbbb")
    msg = str(ei.value)
    assert str(p) in msg and "aaaa" in msg and "bbbb" in msg


def test_shape_mismatch_on_restore_is_a_checkpoint_error(tmp_path):
    m, opt = _model_opt()
    p = tmp_path / "last.pt"
    ckpt.save_checkpoint(p, model=m, optimizer=opt, step=3, config_hash="h")
    other = torch.nn.Sequential(torch.nn.Linear(4, 16))
    with pytest.raises(ckpt.CheckpointError, match="does not match"):
        ckpt.restore_training_state(ckpt.load_checkpoint(p), model=other,
                                    optimizer=torch.optim.AdamW(other.parameters()), path=p)


def test_snapshot_restores_buffers_and_rng_not_params():
    m, _ = _model_opt()
    snap = state.snapshot_state(m)
    w_before = m[0].weight.detach().clone()
    r1 = torch.rand(4)
    m.amax_history.fill_(5.0)
    with torch.no_grad():
        m[0].weight.add_(1.0)
    state.restore_snapshot(m, snap)
    assert torch.equal(m.amax_history, torch.zeros(3))       # buffer rolled back
    assert torch.equal(torch.rand(4), r1)                    # RNG rolled back
    assert torch.equal(m[0].weight, w_before + 1.0)          # parameters untouched


def _flip_byte_inside(p, needle: bytes, offset: int) -> None:
    data = bytearray(p.read_bytes())
    i = data.find(needle)
    assert i >= 0, "tensor bytes not found verbatim in the checkpoint"
    data[i + offset] ^= 0x10
    p.write_bytes(bytes(data))


def test_flipped_bytes_in_tensor_data_are_caught(tmp_path):
    # torch.load itself reads such a file without complaint (checked below): the checksum is what catches it
    torch.manual_seed(0)
    m = torch.nn.Linear(64, 64)
    opt = torch.optim.AdamW(m.parameters())
    p = tmp_path / "last.pt"
    ckpt.save_checkpoint(p, model=m, optimizer=opt, step=4, config_hash="h")
    _flip_byte_inside(p, m.weight.detach().numpy().tobytes(), 1000)
    raw = torch.load(p, weights_only=False)
    assert not torch.equal(raw["model"]["weight"], m.weight)          # the flip reached the tensor silently
    with pytest.raises(ckpt.CheckpointError, match="checksum") as ei:
        ckpt.load_checkpoint(p, "h")
    assert str(p) in str(ei.value) and "\n" not in str(ei.value)


def test_checksum_covers_every_part_and_is_stable(tmp_path):
    m, opt = _model_opt()
    p = tmp_path / "last.pt"
    ckpt.save_checkpoint(p, model=m, optimizer=opt, step=2, config_hash="h")
    st = ckpt.load_checkpoint(p, "h")                                  # verifies after a disk round trip
    assert st["checksum"] == ckpt.state_checksum(st)
    for path, change in ((("optimizer", "state", 0, "exp_avg"), lambda t: t.add_(1e-7)),
                         (("rng", "torch"), lambda t: t.__setitem__(5, t[5] ^ 1)),
                         (("model", "amax_history"), lambda t: t.fill_(1.0))):
        st2 = torch.load(p, weights_only=False)
        obj = st2
        for k in path:
            obj = obj[k]
        change(obj)
        assert ckpt.state_checksum(st2) != st["checksum"], path
    st3 = torch.load(p, weights_only=False)
    st3["step"] = 3
    assert ckpt.state_checksum(st3) != st["checksum"]
    legacy = torch.load(p, weights_only=False)
    del legacy["checksum"]                                             # checkpoints written before the checksum
    torch.save(legacy, p)
    assert ckpt.load_checkpoint(p, "h")["step"] == 2
