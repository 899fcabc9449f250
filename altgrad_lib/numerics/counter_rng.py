"""Counter-based random integers for stochastic rounding of stored weights: bits = hash(key, offset + i).

Why not torch.Generator: on CPU `torch.randint(..., generator=g)` runs a Mersenne Twister at ~7 ns per element
(it was ~60 % of a grid_sr step), and a draw with an explicit generator breaks a torch.compile graph.  A hash of
the element's global index is a handful of integer ops that inductor fuses into the update kernel, gives the
same bits eager and compiled, and its whole state is one integer (`offset`, the number of values drawn so far),
so a checkpoint resumes it exactly.  Draws are laid out in parameter order, so one bulk draw over a group's
flattened parameters equals the per-parameter draws one after the other (base.py relies on it).

The mixer is Thomas Mueller's 32-bit integer hash (x ^= x >> 16; x *= 0x45d9f3b; twice; x ^= x >> 16), applied
in three rounds that absorb the key and the 64-bit index.  Everything runs on int64 holding values < 2^32 and
multipliers < 2^31, so no product overflows (no signed-overflow tricks for a compiler to exploit).  Statistical
checks (uniformity of every bit, chi-square, serial correlation, SR unbiasedness) in tests/test_numerics_counter_rng.py.
"""
from __future__ import annotations

import torch

from altgrad_lib.choices import SR_BITS_MAX

_M32 = 0xFFFFFFFF
_MUL = 0x45D9F3B


def _mix(x: torch.Tensor) -> torch.Tensor:
    """One 32-bit avalanche round on int64 values in [0, 2^32), in place on x (a fresh temporary of the caller:
    eager then allocates one shift temporary per line instead of three tensors)."""
    x.bitwise_xor_(x >> 16)
    x.mul_(_MUL).bitwise_and_(_M32)
    x.bitwise_xor_(x >> 16)
    x.mul_(_MUL).bitwise_and_(_M32)
    return x.bitwise_xor_(x >> 16)


def _mix_int(x: int) -> int:
    x ^= x >> 16
    x = (x * _MUL) & _M32
    x ^= x >> 16
    x = (x * _MUL) & _M32
    return x ^ (x >> 16)


def seed_keys(seed: int) -> tuple[int, int]:
    """Two 32-bit keys from a seed (Python ints: constants of the traced code, never recomputed inside it)."""
    s = int(seed) & 0xFFFFFFFFFFFFFFFF
    return _mix_int((s & _M32) ^ 0x9E3779B9), _mix_int(((s >> 32) ^ 0x85EBCA6B) & _M32)


def hash_bits(offset: torch.Tensor, n: int, keys: tuple[int, int], k: int, device=None) -> torch.Tensor:
    """n uniform integers in [0, 2^k) (int64; k <= SR_BITS_MAX = 62), for global indices offset .. offset + n - 1.

    offset: a 0-d int64 tensor (a tensor so a changing offset never recompiles a compiled caller)."""
    if not 1 <= k <= SR_BITS_MAX:
        raise ValueError(f"k={k} random bits is invalid; valid: 1 <= k <= {SR_BITS_MAX}")
    i = torch.arange(n, dtype=torch.int64, device=device if device is not None else offset.device).add_(offset)
    hi = (i >> 32).bitwise_and_(_M32)
    x = _mix(i.bitwise_and_(_M32).bitwise_xor_(keys[0]))
    x = _mix(x.bitwise_xor_(hi).bitwise_xor_(keys[1]))
    if k <= 32:
        return x >> (32 - k)
    y = _mix(x ^ 0x68E31DA4)                        # (a new tensor: x is still needed)
    return ((x << 30) | (y >> 2)) >> (62 - k)


def derive_keys(seed: int, *counters: int) -> tuple[int, int]:
    """The keys of the stream (seed, c1, c2, ...): seed_keys(seed) with each counter (an int >= 0 below 2^64)
    absorbed in turn by one mixing round per key half, so (seed, step, call) names its own independent-looking
    stream without any state (per-call SR of operands and per-step Hadamard signs, quantize/)."""
    k0, k1 = seed_keys(seed)
    for c in counters:
        c = int(c) & 0xFFFFFFFFFFFFFFFF
        k0 = _mix_int(k0 ^ (c & _M32) ^ 0x27D4EB2F)
        k1 = _mix_int(k1 ^ (c >> 32) ^ k0)
    return k0, k1
