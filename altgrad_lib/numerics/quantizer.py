"""Quantizer: the stateful fake-quantization point of one tensor (a Scaler, the stochastic-rounding RNG that
torch.compile traces, cheap counters, observers) and the QuantEvent it reports. Its numerics are quant.py's (qdq,
FakeQuantFn, StraightThrough), the same as fake_quant's; a Quantizer adds the state around them.
"""
from __future__ import annotations

import itertools
import weakref
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Callable

import torch
from torch import Tensor, nn
from torch.utils.hooks import RemovableHandle

from altgrad_lib.choices import SR_RNG
from altgrad_lib.numerics.block_scaling import BlockScaling, block_qdq, elementwise_scale, same_tiles_axis
from altgrad_lib.numerics.counter_rng import derive_keys, hash_bits
from altgrad_lib.numerics.kernels import block_kernel_fn, compiled_kernel, qdq_kernel_fn
from altgrad_lib.numerics.quant import ClippedStraightThrough, FakeQuantFn, StraightThrough, add_counts, qdq
from altgrad_lib.numerics.quant_spec import QuantSpec
from altgrad_lib.numerics.rounding import default_sr_bits, random_bits
from altgrad_lib.numerics.scaling import Scaler, stateless_scale


# ----------------------------------------------------------------------------------------------------------
# Stochastic-rounding random bits that torch.compile can trace.
#
# Dynamo (torch 2.13) cannot put a random op with an explicit `generator=` into a graph: every such draw is a
# graph break (plus more in the enclosing frames), and creating a torch.Generator inside the compiled region
# is another. So the draw is a custom op, opaque to dynamo, that runs the same torch.randint with the
# Quantizer's Generator at run time: compiled and eager runs draw identical bits and advance the same state.
# A Generator cannot be an op argument, so the op gets the Quantizer's token tensor [handle, n_draws]:
# - the handle is read from the tensor at run time (a Python int attribute would be specialized by dynamo,
#   recompiling the same code once per Quantizer instance);
# - the op increments n_draws, a side effect, so the compiler keeps every draw, in program order, and never
#   merges two calls (a pure op with equal arguments could be CSE'd).
# The token stays on the CPU (see Quantizer._apply): reading the handle never syncs with an accelerator.

_QUANTIZERS: weakref.WeakValueDictionary[int, Quantizer] = weakref.WeakValueDictionary()
_HANDLES = itertools.count()


@torch.library.custom_op("altgrad::sr_random_bits", mutates_args=("token",))
def _sr_random_bits(x: Tensor, token: Tensor, dtype: torch.dtype) -> Tensor:
    """Uniform integers for stochastic rounding of x (formats' random_bits) from the token's Quantizer RNG."""
    handle = int(token[0])
    q = _QUANTIZERS.get(handle)
    if q is None:
        raise RuntimeError(f"stochastic-rounding Quantizer handle {handle} is no longer alive")
    token[1] += 1
    if q.spec.sr_rng == "per_call":
        return q.call_bits(x, dtype)
    return random_bits(x, q.spec.fmt.kernel, q.spec.sr_bits, q.generator(x.device))


@_sr_random_bits.register_fake
def _(x: Tensor, token: Tensor, dtype: torch.dtype) -> Tensor:
    return x.new_empty(x.shape, dtype=dtype)


@dataclass(frozen=True)
class QuantEvent:
    """What one call of a Quantizer did (Quantizer.observe), in the call's layout with its scaling axis last (a
    GEMM's reduction dim). Detached tensors; nothing here is part of the autograd graph."""

    x: Tensor                # the input
    y: Tensor                # the fake-quantized output
    scale: Tensor            # the multiplier used (y = Q(x·s)/s): () per tensor, (..., 1) per row, x's shape for
                             # block kinds (each element's block scale)
    eps_hits: Tensor | None  # amax-floor hits of this call (the Scaler's; None for block kinds, which have none)
    training: bool           # a training call (state updated) or eval (state read only)


def _moved(x: Tensor, axis: int) -> bool:
    """Is `axis` another dim than x's last? (per_row then scales along it: the same rule on x with it moved)"""
    return x.dim() > 1 and axis % x.dim() != x.dim() - 1


class Quantizer(nn.Module):
    """Stateful fake-quantization point: a Scaler, an RNG for stochastic rounding, and cheap counters.

    The RNG (spec.sr_rng "per_quantizer") is a torch.Generator seeded from `seed`, created at construction (and
    re-created on a device move) so that compiled code never constructs one; its state goes through
    get_extra_state/set_extra_state so model.state_dict() carries it and a resumed run continues the same random
    stream. (Moving between devices re-seeds: CPU and CUDA generator states are not compatible.) With sr_rng
    "per_call" there is no stream: call c after set_rng_step(t) draws counter_rng.hash_bits keyed by (seed, t, c),
    the same on every device; (t, c) is the whole state. Draws go through the altgrad::sr_random_bits
    custom op, so forward() and quantize() compile without graph breaks and draw the same bits as eager.

    Counter buffers (int64, no host sync; reset_counters() zeroes them; count=False skips them for speed):
      n_elements   elements seen; n_saturated: |x*s| > fmt.max; n_underflow: nonzero inputs that became 0.
    """

    def __init__(self, spec: QuantSpec | dict | str, seed: int = 0, count: bool = True) -> None:
        super().__init__()
        self.spec = QuantSpec.from_dict(spec)
        self.seed = int(seed)
        self.count = count
        self.scaler = Scaler(self.spec.scaling, self.spec.fmt)   # block kinds: unused (they are stateless)
        self._block = isinstance(self.spec.scaling, BlockScaling)
        # eval mode: deterministic rounding, so evaluating never draws from the training SR stream
        self._eval_spec = (replace(self.spec, rounding="nearest", sr_bits=None, sr_rng=SR_RNG[0])
                           if self.spec.rounding == "stochastic" else self.spec)
        self._per_call = self.spec.sr_rng == "per_call"
        self._rng_step, self._rng_calls = 0, 0      # per_call: the step set_rng_step gave, draws since then
        self._gen: torch.Generator | None = None
        for name in ("n_elements", "n_saturated", "n_underflow"):
            self.register_buffer(name, torch.zeros((), dtype=torch.int64))
        # RNG op token [handle, draws since construction/copy] (see _sr_random_bits); not checkpointed
        self.register_buffer("_rng_token", torch.zeros(2, dtype=torch.int64), persistent=False)
        self._register_handle()
        self._rbits_dtype: dict[torch.dtype, torch.dtype] = {}  # work float dtype -> random-bits int dtype
        # observe(): empty in training (no cost); an OrderedDict, as torch's RemovableHandle holds a weakref to it
        self._observers: OrderedDict[int, Callable[[QuantEvent], None]] = OrderedDict()
        if self.spec.rounding == "stochastic":
            self._gen = None if self._per_call else self._seeded_generator(torch.device("cpu"))
            for wdt in (torch.float32, torch.float64):
                try:  # a 0-element draw: the dtype only, without touching any RNG state
                    self._rbits_dtype[wdt] = random_bits(
                        torch.empty(0, dtype=wdt), self.spec.fmt.kernel, self.spec.sr_bits, None
                    ).dtype
                except ValueError:
                    pass  # sr_bits too large for this work precision: random_bits() raises at use

    # -- observers ---------------------------------------------------------------------------------------
    def observe(self, fn: Callable[[QuantEvent], None]) -> RemovableHandle:
        """Call fn(QuantEvent) after every quantization (forward, quantize) from now on, until the returned
        handle's remove(): how monitors learn the scale a call used (per block where blocked) without
        re-deriving it or patching the quantizer."""
        handle = RemovableHandle(self._observers)
        self._observers[handle.id] = fn
        return handle

    def _notify(self, x: Tensor, y: Tensor, s: Tensor | None, eps0: Tensor | None, training: bool) -> None:
        """x, y with the scaling axis last; s None for block kinds (their per-element scale is computed here,
        only when someone observes)."""
        x, y = x.detach(), y.detach()
        if s is None:
            s = elementwise_scale(x, self.spec.fmt, self.spec.scaling)
        ev = QuantEvent(x=x, y=y, scale=s.detach(), training=training,
                        eps_hits=None if eps0 is None else self.scaler.eps_hits - eps0)
        for fn in list(self._observers.values()):
            fn(ev)

    def _eps0(self) -> Tensor | None:
        return self.scaler.eps_hits.clone() if self._observers and not self._block else None

    def scale_of(self, x: Tensor, axis: int = -1) -> Tensor:
        """The multiplier this quantizer applies to x in the current step, changing no state: delayed scaling's
        scale of its last training call (one per step), the stateless kinds' scale of x, broadcastable to x with
        `axis` last (block kinds: x's shape). For monitors that need the grid of a tensor outside a call (the
        weight before and after an optimizer step)."""
        if self.stateful:
            return self.scaler.scale.detach().clone()
        x = x.detach().movedim(axis, -1) if _moved(x, axis) else x.detach()
        with torch.no_grad():
            if self._block:
                return elementwise_scale(x, self.spec.fmt, self.spec.scaling)
            return stateless_scale(x, self.spec.fmt, self.spec.scaling)[0]

    @property
    def per_tensor(self) -> bool:
        """One scale for the whole tensor (none / current / delayed): the quantized copy does not depend on the
        layout, so one copy serves every GEMM."""
        return not self._block and self.spec.scaling.kind in ("none", "current", "delayed")

    @property
    def stateful(self) -> bool:
        """The scale depends on earlier calls (delayed: an amax history), not on the tensor alone."""
        return not self._block and self.spec.scaling.kind == "delayed"

    def _register_handle(self) -> None:
        self._handle = next(_HANDLES)
        _QUANTIZERS[self._handle] = self
        self._rng_token[0] = self._handle

    def __setstate__(self, state: dict) -> None:
        # deepcopy / unpickle: the copy needs its own handle, or its draws would use the original's generator
        super().__setstate__(state)
        self._register_handle()

    def _apply(self, fn, recurse: bool = True):
        super()._apply(fn, recurse)
        tok = self._rng_token
        if tok.device.type != "cpu":  # host-side: the op reads the handle from it
            tok = torch.zeros(2, dtype=torch.int64) if tok.is_meta else tok.cpu()
            self._buffers["_rng_token"] = tok
        tok[0] = self._handle  # e.g. to_empty() from meta leaves it uninitialized
        dev = self.n_elements.device
        g = self._gen
        if g is not None and g.device.type != dev.type and dev.type != "meta" and not self._per_call:
            self._gen = self._seeded_generator(dev)  # eagerly, so compiled code never creates one
        return self

    # -- RNG ---------------------------------------------------------------------------------------------
    def generator(self, device: torch.device | str = "cpu") -> torch.Generator | None:
        """The stochastic-rounding generator on `device` (None for deterministic rounding)."""
        if self.spec.rounding != "stochastic" or self._per_call:
            return None
        device = torch.device(device)
        if self._gen is None or self._gen.device.type != device.type:
            self._gen = self._seeded_generator(device)
        return self._gen

    def _seeded_generator(self, device: torch.device) -> torch.Generator:
        g = torch.Generator(device=device)
        g.manual_seed(self.seed)
        return g

    def draw_bits(self, x: Tensor) -> Tensor | None:
        """The random integers stochastic rounding of x will use (None for deterministic rounding).

        Traceable by torch.compile without a graph break; advances this quantizer's generator exactly as an
        eager fake_quant(x, spec, generator=self.generator(x.device)) would.
        """
        if self.spec.rounding != "stochastic":
            return None
        wdt = torch.float64 if x.dtype == torch.float64 else torch.float32  # qdq's work dtype
        if wdt not in self._rbits_dtype:
            return random_bits(x, self.spec.fmt.kernel, self.spec.sr_bits, None)  # raises the sr_bits error
        return _sr_random_bits(x.detach(), self._rng_token, self._rbits_dtype[wdt])

    def set_rng_step(self, step: int) -> None:
        """sr_rng "per_call": the training step whose draws follow (their call count restarts at 0). The
        training loop sets it before every step (quantize/linear.set_rng_step), so a resumed run draws the same."""
        self._rng_step, self._rng_calls = int(step), 0

    def call_bits(self, x: Tensor, dtype: torch.dtype) -> Tensor:
        """sr_rng "per_call": the bits of this call, hash_bits keyed by (seed, step, call), in `dtype` (the work
        int dtype of x); what random_bits draws from a Generator otherwise (same range: sr_bits or the default)."""
        k = self.spec.sr_bits or default_sr_bits(torch.float64 if x.dtype == torch.float64 else torch.float32,
                                                 self.spec.fmt.kernel)
        keys = derive_keys(self.seed, self._rng_step, self._rng_calls)
        self._rng_calls += 1
        zero = torch.zeros((), dtype=torch.int64, device=x.device)
        return hash_bits(zero, x.numel(), keys, k).reshape(x.shape).to(dtype)

    # get_extra_state builds a new dict (the generator state: a new tensor) every call: state.Snapshots need not
    # deep-copy it
    extra_state_is_fresh = True

    def get_extra_state(self) -> dict:
        g = self._gen
        out = {
            "seed": self.seed,
            "rng_device": None if g is None else str(g.device),
            "rng_state": None if g is None else g.get_state(),
        }
        if self._per_call:   # the whole per-call state (a replayed step re-draws the same bits)
            out.update(rng_step=self._rng_step, rng_calls=self._rng_calls)
        return out

    def set_extra_state(self, state: dict) -> None:
        self.seed = int(state["seed"])
        if self._per_call:
            self._rng_step, self._rng_calls = int(state.get("rng_step", 0)), int(state.get("rng_calls", 0))
            return
        if state.get("rng_state") is None:
            # fresh: seed from `seed`, same as the saved (unused) generator would have
            sr = self.spec.rounding == "stochastic"
            self._gen = self._seeded_generator(self.n_elements.device) if sr else None
            return
        dev = torch.device(state["rng_device"])
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError(
                f"checkpoint holds a {dev} stochastic-rounding RNG state but CUDA is not available; "
                "CPU and CUDA generator states are not interchangeable"
            )
        g = torch.Generator(device=dev)
        g.set_state(state["rng_state"])
        self._gen = g

    # -- numerics ----------------------------------------------------------------------------------------
    def _count(self, x: Tensor, n_sat: Tensor, n_under: Tensor) -> None:
        add_counts(self.n_elements, self.n_saturated, self.n_underflow, x.numel(), n_sat, n_under)

    def forward(self, x: Tensor, axis: int = -1) -> Tensor:
        """Fake quantization with the spec's STE (autograd); block kinds and per_row scale along `axis`.

        In eval mode the quantizer *uses* its state and never updates it: the delayed-scaling history, the
        counters and the stochastic-rounding stream stay as training left them (stochastic rounding becomes
        round-to-nearest there), so validation never changes what training does next.
        """
        if self._block:
            return StraightThrough.apply(x, self._block_qdq(x, self.training, axis=axis))
        if _moved(x, axis):
            return self.forward(x.movedim(axis, -1)).movedim(-1, axis)
        eps0 = self._eps0()
        spec = self.spec if self.training else self._eval_spec
        fast = self._compiled_qdq(x, spec, self.training, spec.ste == "clipped", self.training and self.count)
        if fast is not None:     # the kernel counted (want_stats) and updated the scaler (training) itself
            y, over, s = fast
            # the kernel returns the mask only for the clipped STE (the counters use it inside)
            y = ClippedStraightThrough.apply(x, y, over) if over is not None else StraightThrough.apply(x, y)
        elif not self.training:
            s = self.scaler.scale_peek(x)
            y, _, _ = FakeQuantFn.apply(x, s, self._eval_spec, None, False, None)
        else:
            s = self.scaler.scale_for(x)
            y, n_sat, n_under = FakeQuantFn.apply(x, s, self.spec, None, self.count, self.draw_bits(x))
            if self.count:
                self._count(x, n_sat, n_under)
        if self._observers:
            self._notify(x, y, s, eps0, self.training)
        return y

    @torch.no_grad()
    def quantize(self, x: Tensor, axis: int = -1) -> Tensor:
        """Same numerics as forward, no autograd (e.g. for grad_output inside a custom backward)."""
        if self._block:
            return self._block_qdq(x, True, axis=axis)
        if _moved(x, axis):
            return self.quantize(x.movedim(axis, -1)).movedim(-1, axis)
        eps0 = self._eps0()
        fast = self._compiled_qdq(x, self.spec, True, False, self.count)
        if fast is not None:     # counted and recorded by the kernel
            y, _, s = fast
        else:
            s = self.scaler.scale_for(x)
            y, _, n_sat, n_under = qdq(x, s, self.spec, None, False, self.count, self.draw_bits(x))
            if self.count:
                self._count(x, n_sat, n_under)
        if self._observers:
            self._notify(x, y, s, eps0, True)
        return y

    @torch.no_grad()
    def quantize_stateless(self, x: Tensor) -> Tensor:
        """quantize() without touching the Scaler or the counters; only the SR generator advances.

        Same numerics as quantize() for the stateless scaling kinds (none/current/per_row/block kinds; delayed
        raises). Meant for compiled backward passes, where buffer updates would break the graph; the RNG op
        traces there too (no graph break), unlike fake_quant(..., generator=self.generator(x.device)).
        """
        if self._block:
            return self._block_qdq(x, True, count=False)
        fast = None if self.stateful else self._compiled_qdq(x, self.spec, False, False, False)
        if fast is not None:
            return fast[0]
        s, _ = stateless_scale(x, self.spec.fmt, self.spec.scaling)
        y, _, _, _ = qdq(x, s, self.spec, None, False, False, self.draw_bits(x))
        return y

    @property
    def is_block(self) -> bool:
        """A block kind (nvfp4 / mx): stateless, its Scaler is unused (scale stays 1, no amax history)."""
        return self._block

    def _block_qdq(self, x: Tensor, train: bool, count: bool = True, axis: int = -1) -> Tensor:
        """Block kinds (nvfp4 / mx, stateless): training draws SR bits and counts; eval rounds to nearest."""
        spec = self.spec if train else self._eval_spec
        stochastic = spec.rounding == "stochastic"
        count = count and train and self.count
        # the kernel of blocks along the last dim where those are the same blocks (2D tiles of a weight, RNE)
        fast = self._compiled_block(x, spec, count, same_tiles_axis(x, spec.scaling, spec.rounding, axis))
        if fast is not None:
            y, n_sat, n_under = fast
        else:
            y, n_sat, n_under = block_qdq(x, spec.fmt, spec.scaling, spec.rounding,
                                          self.draw_bits if stochastic else None, spec.sr_bits, want_stats=count,
                                          axis=axis)
        if count:
            self._count(x, n_sat, n_under)
        if self._observers:
            self._notify(x.movedim(axis, -1), y.movedim(axis, -1), None, None, train)
        return y

    # -- compiled kernels (numerics/kernels.py): None = run the eager code ------------------------------------
    def _sr_dtype(self, spec: QuantSpec, wdt: torch.dtype) -> torch.dtype | None | bool:
        """Random-bits dtype of stochastic rounding in work dtype wdt, None for deterministic rounding, False when
        the eager path must run (sr_bits too large: it raises there)."""
        if spec.rounding != "stochastic":
            return None
        return self._rbits_dtype.get(wdt, False)

    def _compiled_qdq(self, x: Tensor, spec: QuantSpec, update: bool, want_mask: bool, want_stats: bool):
        """(y, mask, s) by the compiled kernel of this configuration, the scaler updated as scale_for would (update)
        or read as scale_peek does, and with want_stats (update) the counters updated as _count would; None where it
        is not used (kernels.compiled_kernel)."""
        if torch.compiler.is_compiling() or not x.is_floating_point() or x.dim() == 0:
            return None
        rdt = self._sr_dtype(spec, torch.float64 if x.dtype == torch.float64 else torch.float32)
        if rdt is False:
            return None
        # eval of a round-to-nearest, non-delayed spec: its values do not depend on the state (the scale comes from
        # x), so the training forward's kernel serves it, its state updates going to scratch copies of the buffers:
        # one kernel of the configuration to trace per process (and, on a cold cache, to compile), not two
        scratch = not update and spec is self.spec and rdt is None and spec.scaling.kind != "delayed"
        if scratch:
            update, want_stats = True, self.count
        count = update and want_stats
        key = ("qdq", spec, want_mask, want_stats, rdt, update, count)
        kern = compiled_kernel(key, x.device, lambda: qdq_kernel_fn(spec, want_mask, want_stats, rdt,
                                                                    _sr_random_bits, update, count))
        if kern is None:
            return None
        # flattened (per_row: to rows of the last dim), so one compiled graph serves every shape
        xf = x.detach().reshape(-1, x.shape[-1]) if spec.scaling.kind == "per_row" else x.detach().reshape(-1)
        # the Scaler's buffers, updated (update) or read (delayed) by the kernel, and the counters; from _buffers
        # (what Module.__getattr__ returns for them, without its lookups on every call)
        sb, qb = self.scaler._buffers, self._buffers
        scaler_bufs = ((sb["amax_history"], sb["scale"], sb["eps_hits"], sb["n_updates"])
                       if update or spec.scaling.kind == "delayed" else (None,) * 4)
        counters = (qb["n_elements"], qb["n_saturated"], qb["n_underflow"]) if count else (None,) * 3
        if scratch:
            scaler_bufs, counters = self._scratch_of(scaler_bufs, counters)
        with torch.no_grad():
            y, over, s, _, _, _, _ = kern(xf, qb["_rng_token"], *scaler_bufs, *counters)
        if s.dim():            # per_row: (rows, 1) of the flattened x, back to x's (..., 1)
            s = s.view(*x.shape[:-1], 1)
        return y.view(x.shape), None if over is None else over.view(x.shape), s

    def _scratch_of(self, scaler_bufs: tuple, counters: tuple) -> tuple[tuple, tuple]:
        """Zeroed tensors like the buffers (None stays None), made once per device (not buffers: no state_dict,
        snapshot or checkpoint holds them); what a kernel writes into them is never read."""
        bufs = (*scaler_bufs, *counters)
        held = self.__dict__.get("_scratch")
        if held is None or len(held) != len(bufs) or any(
                (a is None) != (b is None) or (a is not None and (a.device, a.dtype, a.shape) != (b.device, b.dtype,
                                                                                              b.shape))
                for a, b in zip(held, bufs)):
            held = tuple(None if b is None else torch.zeros_like(b) for b in bufs)
            self.__dict__["_scratch"] = held
        return held[:4], held[4:]

    def _compiled_block(self, x: Tensor, spec: QuantSpec, want_stats: bool, axis: int):
        """block_qdq's (y, n_sat, n_under) by the compiled kernel of this configuration, or None."""
        if torch.compiler.is_compiling() or not x.is_floating_point() or x.dim() == 0:
            return None
        rdt = self._sr_dtype(spec, torch.float32)        # block_qdq rounds fp32 blocks
        if rdt is False:
            return None
        key = ("block", spec, want_stats, rdt, axis)
        kern = compiled_kernel(key, x.device, lambda: block_kernel_fn(spec, want_stats, rdt, axis, _sr_random_bits))
        if kern is None:
            return None
        # 1 x K blocks along the last dim: the leading dims flattened, so one compiled graph serves every shape
        flat = x.dim() > 2 and axis % x.dim() == x.dim() - 1 and not spec.scaling.tile_2d
        with torch.no_grad():
            y, n_sat, n_under = kern(x.detach().reshape(-1, x.shape[-1]) if flat else x.detach(), self._rng_token)
        return y.view(x.shape), n_sat, n_under

    # -- bookkeeping -------------------------------------------------------------------------------------
    def reset_counters(self) -> None:
        self.n_elements.zero_()
        self.n_saturated.zero_()
        self.n_underflow.zero_()

    def stats(self) -> dict[str, float]:
        """Counters as Python numbers (host sync: for logging, not the hot path)."""
        n = int(self.n_elements)
        return {
            "n_elements": n,
            "n_saturated": int(self.n_saturated),
            "n_underflow": int(self.n_underflow),
            "sat_frac": int(self.n_saturated) / n if n else 0.0,
            "underflow_frac": int(self.n_underflow) / n if n else 0.0,
            "eps_hits": int(self.scaler.eps_hits),
            "scale": float(self.scaler.scale),
        }

    def extra_repr(self) -> str:
        r = self.spec.short_str()
        if self.spec.rounding == "stochastic":   # per_call: keyed by seed too
            r += f", seed={self.seed}"
        return r
