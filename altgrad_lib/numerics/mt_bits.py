"""torch.randint(0, 2**k, shape, dtype=torch.int32, generator=g) for a CPU torch.Generator, drawn ~7x faster.

Why: stochastic rounding's bits come from each Quantizer's own torch.Generator (Mersenne Twister, MT19937), and
those draws define every SR result a run has produced, so neither the generator nor the order or number of draws
may change. torch's CPU kernel draws one 32-bit output per element, serially through the generator: ~2.7 ns an
element, ~6 ms of a ~45 ms nvfp4 training step on the cpu profile's model (bench/results/block_step.md). This
module runs the same MT19937 on the generator's own state in a small C function, compiled once per machine with the
system's C compiler (cached in the temp dir, as inductor caches its kernels; ~0.2 s): the state recurrence
vectorizes 227 words at a time and the output tempering and the mask by the power-of-two range are plain vector
loops (1024 x 256 draws, one thread, AMD EPYC: ~90 against ~690 us).

Exactly torch's draw, values and generator state alike: torch's `random_from_to` for an int32 range 2^k, k <= 23
(the int32 work dtype's; from 2^28 on torch draws 64-bit words) is `random() % 2^k`, one 32-bit MT output per
element in the tensor's element order; `random()` is MT19937 (Matsumoto and Nishimura 1998; ATen's mt19937:
`--left == 0` regenerates the 624-word state, then the word at `next` is tempered). The state moves through
`Generator.get_state()` / `set_state()`, whose byte layout is ATen's CPUGeneratorImplState (legacy POD: seed, left,
seeded, next, 624 words as uint64, the cached double normal, then the cached float normal); a state this module
does not recognise (another size, a cached double normal, which set_state would not restore as it was) falls back
to torch.randint itself, and so does a machine where the function cannot be built (a warning says why, once).
tests/test_numerics_mt_bits.py compares values and states with torch.randint.
"""
from __future__ import annotations

import ctypes
import getpass
import hashlib
import math
import os
import shutil
import subprocess
import sys
import tempfile
import warnings

import torch

from altgrad_lib.io import atomic_write_bytes

MIN_ELEMENTS = 4096      # below this torch.randint: the state's round trip (~5 us) outweighs ~2.7 ns an element
_STATE_BYTES = 5056      # sizeof(CPUGeneratorImplState) on 64-bit platforms (torch 2.x)
_NORMAL_IS_VALID = slice(5040, 5044)   # its legacy part's int32 normal_is_valid (LegacyState below)

_SOURCE = r"""
#include <stdint.h>
#include <string.h>
#define MT_N 624
#define MT_M 397

/* ATen's CPUGeneratorImplStateLegacy (Generator.get_state's bytes), then the float normal cache */
struct LegacyState {
  int64_t seed; int32_t left; int32_t seeded; uint64_t next; uint64_t state[MT_N];
  double normal_x, normal_y, normal_rho; int32_t normal_is_valid;
};

/* one build for every x86-64 CPU, the widest vectors it has picked at load time (gcc's ifunc clones; the helpers
   are inlined into each clone so that they vectorize with its ISA) */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) && !defined(MT_NO_CLONES)
#define MT_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define MT_CLONES
#endif
#define MT_INLINE static inline __attribute__((always_inline))

MT_INLINE uint32_t twist(uint32_t u, uint32_t v) {
  return (((u & 0x80000000u) | (v & 0x7fffffffu)) >> 1) ^ ((0u - (v & 1u)) & 0x9908b0dfu);
}

/* ATen's mt19937::next_state, the in-place recurrence written out of place: word i < N-M reads the old words
   i, i+1, i+M; word i >= N-M reads the new word i+M-N, computed N-M = 227 words earlier */
MT_INLINE void next_state(uint32_t *__restrict s) {
  uint32_t t[MT_N];
  for (int i = 0; i < MT_N - MT_M; i++) t[i] = s[i + MT_M] ^ twist(s[i], s[i + 1]);
  for (int i = MT_N - MT_M; i < 2 * (MT_N - MT_M); i++) t[i] = t[i + MT_M - MT_N] ^ twist(s[i], s[i + 1]);
  for (int i = 2 * (MT_N - MT_M); i < MT_N - 1; i++) t[i] = t[i + MT_M - MT_N] ^ twist(s[i], s[i + 1]);
  t[MT_N - 1] = t[MT_M - 1] ^ twist(s[MT_N - 1], t[0]);
  memcpy(s, t, sizeof t);
}

MT_INLINE void temper(const uint32_t *__restrict s, int32_t *__restrict out, int64_t n, uint32_t mask) {
  for (int64_t i = 0; i < n; i++) {
    uint32_t y = s[i];
    y ^= (y >> 11);
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= (y >> 18);
    out[i] = (int32_t)(y & mask);
  }
}

/* n draws of (MT output & mask) into out; st updated as n calls of ATen's mt19937 would. 0: done; 1: a state
   ATen's engine would not accept (nothing written) */
MT_CLONES int mt_draw(struct LegacyState *st, int32_t *out, int64_t n, uint32_t mask) {
  int64_t left = st->left, next = (int64_t)st->next;
  if (!st->seeded || left < 1 || left > MT_N || next > MT_N) return 1;
  if (left != 1 && left + next != MT_N + 1) return 1;   /* not a state ATen's own draws leave */
  uint32_t s[MT_N];
  for (int i = 0; i < MT_N; i++) s[i] = (uint32_t)st->state[i];
  int64_t i = 0;
  while (i < n) {
    if (left == 1) { next_state(s); left = MT_N + 1; next = 0; }   /* the call that takes --left to 0 */
    int64_t take = left - 1;
    if (take > MT_N - next) take = MT_N - next;
    if (take > n - i) take = n - i;
    temper(s + next, out + i, take, mask);
    next += take; left -= take; i += take;
  }
  for (int j = 0; j < MT_N; j++) st->state[j] = s[j];
  st->left = (int32_t)left;
  st->next = (uint64_t)next;
  return 0;
}
"""
_FLAGS = ("-O3", "-shared", "-fPIC")
_lib: object = None      # None: not tried yet; False: unavailable (torch.randint from then on)


def _compile_draw() -> ctypes.CDLL:
    """The compiled library, built on first use into <tempdir>/altgrad_<user> under its source's hash (a
    concurrent worker building the same file is harmless: each builds in its own directory, io.atomic_write_bytes
    puts the result in place)."""
    cc = os.environ.get("CC") or next((c for c in ("cc", "gcc", "clang") if shutil.which(c)), None)
    if cc is None:
        raise RuntimeError("no C compiler found (cc, gcc, clang; or set $CC)")
    key = hashlib.sha256(repr((_SOURCE, cc, _FLAGS, sys.platform)).encode()).hexdigest()[:20]
    d = os.path.join(tempfile.gettempdir(), f"altgrad_{getpass.getuser()}")
    so = os.path.join(d, f"mt_bits_{key}.so")
    if not os.path.exists(so):
        os.makedirs(d, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=d) as work:   # built privately, then put in place atomically
            src, out = os.path.join(work, "mt_bits.c"), os.path.join(work, "mt_bits.so")
            with open(src, "w") as f:
                f.write(_SOURCE)
            r = subprocess.run([cc, *_FLAGS, "-x", "c", src, "-o", out], capture_output=True, text=True)
            if r.returncode:   # a gcc without the x86-64-v4/v3 clone names (before gcc 11): one build, no clones
                r = subprocess.run([cc, *_FLAGS, "-DMT_NO_CLONES", "-x", "c", src, "-o", out],
                                   capture_output=True, text=True)
            if r.returncode:
                raise RuntimeError(f"{cc} failed: {(r.stderr.strip().splitlines() or [''])[-1][:200]}")
            with open(out, "rb") as f:
                atomic_write_bytes(so, f.read())
    fn = ctypes.CDLL(so).mt_draw
    fn.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_uint32)
    fn.restype = ctypes.c_int
    return fn


def _load():
    global _lib
    if _lib is None:
        try:
            _lib = _compile_draw()
        except Exception as e:   # no compiler, a read-only temp dir: torch.randint (the same numbers, its speed)
            _lib = False
            warnings.warn(f"stochastic rounding draws its bits with torch.randint (the same bits, ~7x slower): the "
                          f"fast Mersenne-Twister draw could not be built ({type(e).__name__}: {e})", RuntimeWarning,
                          stacklevel=3)
    return _lib


def randint_pow2(shape: tuple[int, ...] | torch.Size, k: int, generator: torch.Generator | None,
                 device: torch.device | str = "cpu") -> torch.Tensor:
    """torch.randint(0, 2**k, shape, dtype=torch.int32, device=device, generator=generator), bit for bit, and
    the generator's state afterwards too (1 <= k <= 23: the int32 work dtype's range; torch draws 64-bit words
    from a range of 2^28 on)."""
    n = math.prod(shape)
    fast = (generator is not None and generator.device.type == "cpu" and torch.device(device).type == "cpu"
            and 1 <= k <= 23 and n >= MIN_ELEMENTS)
    fn = _load() if fast else None
    if fn:
        st = generator.get_state()
        # a cached double normal: set_state rebuilds it from fields get_state leaves 0, so it would not survive
        if st.numel() == _STATE_BYTES and int(st[_NORMAL_IS_VALID].view(torch.int32)) == 0:
            out = torch.empty(tuple(shape), dtype=torch.int32)
            if fn(st.data_ptr(), out.data_ptr(), n, (1 << k) - 1) == 0:
                generator.set_state(st)
                return out
    return torch.randint(0, 2**k, tuple(shape), dtype=torch.int32, device=device, generator=generator)
