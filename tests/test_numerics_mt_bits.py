"""mt_bits.randint_pow2 against its oracle, torch.randint itself: the same values and the same generator state."""
from __future__ import annotations

import pytest
import torch

from altgrad_lib.numerics import mt_bits
from altgrad_lib.numerics.quantizer import Quantizer

# shapes: under and over the 624-word state, not multiples of it, one draw spanning ~420 state regenerations
SHAPES = [(mt_bits.MIN_ELEMENTS,), (4097,), (64, 100), (623 * 7 + 1,), (1024, 256)]


@pytest.fixture
def no_fallback(monkeypatch):
    """Fail if a draw the fast path should take goes to torch.randint (the oracle is captured before)."""
    assert mt_bits._load(), "the fast draw could not be built on this machine"
    oracle = torch.randint

    def refuse(*a, **k):
        raise AssertionError("randint_pow2 fell back to torch.randint")

    monkeypatch.setattr(mt_bits.torch, "randint", refuse)
    return oracle


@pytest.mark.parametrize("seed", [0, 1, 12345, 2**40 + 3])
def test_same_values_and_state_as_torch_randint(no_fallback, seed):
    randint = no_fallback
    g_ref, g = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
    for k in (1, 5, 22, 23):
        for shape in SHAPES:
            ref = randint(0, 2**k, shape, dtype=torch.int32, generator=g_ref)
            got = mt_bits.randint_pow2(shape, k, g)
            assert got.dtype == torch.int32 and got.shape == ref.shape
            assert torch.equal(got, ref), (seed, k, shape)
            assert torch.equal(g.get_state(), g_ref.get_state()), (seed, k, shape)
        # other draws of the same generator in between (float uniforms, normals: >= 16 leave no cached sample)
        for gen in (g_ref, g):
            torch.rand(5, generator=gen)
            torch.randn(33, generator=gen)
    assert torch.equal(g.get_state(), g_ref.get_state())


def test_a_resumed_generator_draws_the_same():
    """A state restored with set_state (a checkpoint's) continues exactly as torch's own draws."""
    g = torch.Generator().manual_seed(3)
    torch.randint(0, 7, (1000,), generator=g)
    saved = g.get_state()
    ref = torch.randint(0, 2**23, (5000,), dtype=torch.int32, generator=g)
    g2 = torch.Generator()
    g2.set_state(saved)
    assert torch.equal(mt_bits.randint_pow2((5000,), 23, g2), ref)
    assert torch.equal(g2.get_state(), g.get_state())


def test_states_it_does_not_take_fall_back_to_torch():
    """A cached double normal (set_state would not restore it as it was) and small draws go to torch.randint."""
    g_ref, g = torch.Generator().manual_seed(9), torch.Generator().manual_seed(9)
    for gen in (g_ref, g):
        torch.randn(1, dtype=torch.float64, generator=gen)      # leaves a cached double normal
    assert int(g.get_state()[5040:5044].view(torch.int32)) == 1   # where this module reads that flag
    ref = torch.randint(0, 2**23, (8192,), dtype=torch.int32, generator=g_ref)
    assert torch.equal(mt_bits.randint_pow2((8192,), 23, g), ref)
    assert torch.equal(g.get_state(), g_ref.get_state())
    assert torch.equal(torch.randn(4, dtype=torch.float64, generator=g),
                       torch.randn(4, dtype=torch.float64, generator=g_ref))
    small = (mt_bits.MIN_ELEMENTS - 1,)
    assert torch.equal(mt_bits.randint_pow2(small, 23, g),
                       torch.randint(0, 2**23, small, dtype=torch.int32, generator=g_ref))


def test_stochastic_block_quantizer_unchanged(monkeypatch):
    """An SR nvfp4 quantizer gives the same outputs and generator state with the fast draw as with torch.randint."""
    x = torch.randn(256, 64, generator=torch.Generator().manual_seed(0))
    spec = {"fmt": "E2M1", "scaling": {"kind": "nvfp4"}, "rounding": "stochastic"}
    fast, slow = Quantizer(spec, seed=5), Quantizer(spec, seed=5)
    y_fast = [fast.quantize(x, axis=a) for a in (-1, 0, -1)]
    monkeypatch.setattr(mt_bits, "_lib", False)
    y_slow = [slow.quantize(x, axis=a) for a in (-1, 0, -1)]
    for a, b in zip(y_fast, y_slow):
        assert torch.equal(a, b)
    assert torch.equal(fast.generator().get_state(), slow.generator().get_state())
