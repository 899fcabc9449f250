"""`GridOptimizer`: what every optimizer of this package shares (param groups with a weight format and a storage
mode, the step loop, the seeded stochastic-rounding generator, bit-exact state_dict, per-step diagnostics).

A subclass implements `_update(p, g, st, group, fmt, s, lr_t) -> w_new` (fp32, weight decay included) and
`_init_extra(p, st, group)`; the base class rounds w_new into param.data per the group's storage mode.

Per-group options (besides each optimizer's own): fmt (None or a format name: the weight's grid; None = an
fp32 parameter), storage (storage.STORAGE_MODES), grid_headroom (binades above the first amax, grid.py),
grid_exp (None = from the first amax; an int k fixes the grid to grid(fmt) / 2^k, 0 = the unscaled format),
kahan_dtype ("bf16" | "fp32"), sr_bits (stochastic rounding random bits; None = full precision).

The LR is copied each step into a 0-d tensor per group, so a schedule that changes group["lr"] never forces
a recompilation of the compiled update (`compile=True`); the step count is a tensor for the same reason.

Speed (bench/optim_step.py): a group whose parameters are all fp32 and whose states are all fp32 / bf16 tensors
is stepped as one flat buffer: its elementwise states (m, v, Kahan buffers, momentum) live in one flat buffer
per state key (self.state[p][k] are views into it, so state_dict() is unchanged), the per-tensor constants
(grid scale, Madam's bound) are expanded once into per-element vectors, and an eager step is torch.cat of the
weights and gradients, one update over the flat buffer and a foreach copy back.  Compiled (compile=True), the
group's tensors go through one graph instead (one static-shape graph per group: no cat, no copy back), and the
step's scalars (`_step_consts`: Adam's bias corrections) through one small graph of their own, so the update's
loop does not recompute a pow of the step for every vector.  Groups with low-precision states, with some gradients
missing, or with track_stats (per-tensor diagnostics) take the per-parameter loop; both paths compute the same
elementwise arithmetic.
Grid storage with stochastic rounding draws its bits from counter_rng (a hash of seed and element index,
fused into the compiled update; one integer of state, `sr_offset`, in state_dict()).  Both paths draw in
parameter order, so they consume the same bits.  `self.generator` (torch, seeded) remains for stochastic
rounding of low-precision states; its state is in state_dict() too, as are the diagnostic counters.
`set_osc_reset(...)` adds TetraJet-v2's oscillation reset after the steps (optim/osc_reset.py; its open round's
tensors are in state_dict() under "altgrad").
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from altgrad_lib.choices import EF_MODES, SR_MODES
from altgrad_lib.numerics.formats import get_format
from altgrad_lib.optim.stats import StepStats
from altgrad_lib.numerics.counter_rng import hash_bits, seed_keys
from altgrad_lib.optim.error_feedback import round_with_residual
from altgrad_lib.optim.osc_reset import OscReset
from altgrad_lib.numerics.grid import grid_exp, grid_scale, to_grid
from altgrad_lib.optim.config import on_grid
from altgrad_lib.optim.storage import KAHAN_DTYPES, STORAGE_MODES, write
from altgrad_lib.numerics.rounding import default_sr_bits
from altgrad_lib.errors import check_choice

CHUNK = 1 << 18          # elements per eager flat update (1 MiB of fp32)
_SR_MODES = SR_MODES     # stored with stochastic rounding (counter_rng bits)
_COMMON = dict(fmt=None, storage="fp32", grid_headroom=1, grid_exp=None, kahan_dtype="bf16", sr_bits=None)


class GridOptimizer(torch.optim.Optimizer):
    """Base class; see the module docstring."""

    tag = "grid"          # short_str prefix

    def __init__(self, params, defaults: dict[str, Any], *, seed: int = 0, track_stats: bool = False,
                 compile: bool = False) -> None:
        self.seed, self.track_stats, self.compiled = int(seed), bool(track_stats), bool(compile)
        # track_stats=N (an int): measure every N-th step only (the measuring path costs ~30 % of a small model's step)
        self.stats_every, self._calls = (1 if isinstance(track_stats, bool) else max(1, int(track_stats))), 0
        super().__init__(params, {**_COMMON, **defaults})
        dev = self.param_groups[0]["params"][0].device
        self.generator = torch.Generator(device=dev).manual_seed(self.seed)   # low-precision state SR only
        self._sr_keys, self.sr_offset = seed_keys(self.seed), 0             # weight SR: counter_rng
        self._offset_t = torch.zeros((), dtype=torch.int64, device=dev)      # sr_offset as a tensor (no recompiles)
        self._lr_t: list[torch.Tensor] = [torch.zeros((), dtype=torch.float32, device=dev) for _ in self.param_groups]
        self.stats = StepStats(device=dev)
        self.osc_reset: OscReset | None = None             # set_osc_reset (optim/osc_reset.py); None = off
        fused = type(self)._update_and_write
        self._kernel: Callable = torch.compile(type(self)._update) if compile else type(self)._update
        self._fused: Callable = torch.compile(fused) if compile else fused   # update + rounding: one kernel
        # eager flat step: _update_and_write over chunks of the group's flat buffer; compiled: the group's tensors in
        # one graph (no cat, no copy back), static shapes (automatic-dynamic's SymInts / SymFloats buy nothing here)
        self._group_fused: Callable | None = (torch.compile(type(self)._group_update_and_write, dynamic=False)
                                              if compile else None)
        # the group's per-step scalars, compiled apart from the update so inductor computes them once (the same
        # float expression it used to inline into the update's loop: bit-identical) instead of per vector
        consts = type(self)._step_consts
        self._consts: Callable | None = (None if consts is GridOptimizer._step_consts else
                                         torch.compile(consts, dynamic=False) if compile else consts)
        self._flat: list[dict[str, Any] | None] = []
        for group in self.param_groups:       # grid state (and projection onto the grid) before the first forward
            for p in group["params"]:
                self._init_state(p, group)
            self._flat.append(self._flatten(group))

    # ---- groups and state
    def add_param_group(self, group: dict[str, Any]) -> None:
        super().add_param_group(group)
        g = self.param_groups[-1]
        check_choice("storage", g["storage"], STORAGE_MODES)
        check_choice("kahan_dtype", g["kahan_dtype"], tuple(KAHAN_DTYPES))
        if g["fmt"] is not None:
            g["fmt"] = get_format(g["fmt"]).name      # a name, so state_dict()["param_groups"] stays plain data
        elif on_grid(g["storage"]):
            raise ValueError(f"storage={g['storage']!r} needs a weight format (fmt=None only allows 'fp32')")
        if g["storage"] in EF_MODES and type(self)._feedback is GridOptimizer._feedback:
            raise ValueError(f"storage={g['storage']!r} is not implemented for {type(self).__name__}; valid for the "
                             f"Adam family (AdamW, StiffnessAdamW, GridAdamW)")
        if g["lr"] < 0 or g.get("weight_decay", 0.0) < 0:
            raise ValueError(f"lr={g['lr']!r} and weight_decay={g.get('weight_decay')!r} must be >= 0")
        self._check_group(g)
        if getattr(self, "osc_reset", None) is not None:
            OscReset.check_groups([g])
        if hasattr(self, "_lr_t"):
            self._lr_t.append(torch.zeros((), dtype=torch.float32, device=g["params"][0].device))
            for p in g["params"]:
                self._init_state(p, g)
            self._flat.append(self._flatten(g))

    def _check_group(self, group: dict[str, Any]) -> None:
        """Validate a subclass's own options (override)."""

    @torch.no_grad()
    def _init_state(self, p: torch.Tensor, group: dict[str, Any]) -> None:
        st = self.state[p]
        if st:
            return
        st["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
        if group["fmt"] is not None:
            fmt = get_format(group["fmt"])
            k = grid_exp(p, fmt, group["grid_headroom"]) if group["grid_exp"] is None else int(group["grid_exp"])
            st["grid_scale"] = grid_scale(k).to(p.device)
            if on_grid(group["storage"]):
                p.copy_(to_grid(p.float(), fmt, st["grid_scale"]).to(p.dtype))
            if group["storage"] == "kahan":
                st["comp"] = torch.zeros_like(p, dtype=KAHAN_DTYPES[group["kahan_dtype"]])
        self._init_extra(p, st, group)

    def _init_extra(self, p: torch.Tensor, st: dict[str, Any], group: dict[str, Any]) -> None:
        """Create the optimizer's own state tensors (override)."""

    # ---- the step
    def _update(self, p: torch.Tensor, g: torch.Tensor, st: dict[str, Any], group: dict[str, Any], fmt,
                s: torch.Tensor | None, lr_t: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if self.osc_reset is not None:
            self.osc_reset.before_step(self, self._calls)
        self._calls += 1
        due = self.track_stats and (self._calls - 1) % self.stats_every == 0
        for gi, group in enumerate(self.param_groups):
            fmt = get_format(group["fmt"]) if group["fmt"] is not None else None
            lr_t = self._lr_t[gi]
            lr_t.fill_(group["lr"])
            params = [p for p in group["params"] if p.grad is not None]
            flat = self._flat[gi]
            if flat is not None and len(params) < len(group["params"]):
                flat["synced"] = False            # step counts now differ inside the group: per-parameter from here on
            if (flat is not None and flat["synced"] and not (due and fmt is not None)
                    and all(p.grad.dtype == torch.float32 for p in params)):
                self._step_flat(params, group, flat, fmt, lr_t)
                continue
            for p in params:
                st = self.state[p]
                self._init_state(p, group)
                st["step"] += 1
                s = st.get("grid_scale")
                self._offset_t.fill_(self.sr_offset)
                if not (due and fmt is not None):
                    self._fused(self, p, p.grad, st, group, fmt, s, lr_t, self._offset_t)
                    self._advance(group, fmt, p.numel())
                    continue
                w_old = p.detach().float().clone()
                w_new = self._kernel(self, w_old, p.grad.float(), st, group, fmt, s, lr_t)
                rbits = self._sr_bits(w_new, group, fmt, self._offset_t)
                self._advance(group, fmt, p.numel())
                q_old = w_old if on_grid(group["storage"]) else to_grid(w_old, fmt, s)
                self._write(p, w_new, st, group, fmt, s, lr_t, rbits)
                pf = p.detach().float()
                q_new = pf if on_grid(group["storage"]) else to_grid(pf, fmt, s)
                self.stats.record(q_old, q_new, w_new - w_old, fmt, s)
        if due:
            self.stats.end_step()
        if self.osc_reset is not None:
            self.osc_reset.after_step(self, self._calls)
        return loss

    def set_osc_reset(self, period: int = 200, window: int = 50, threshold: float = 8.0, start: int = 0) -> None:
        """Turn on TetraJet-v2's oscillation reset (optim/osc_reset.py); groups with a format need fp32 or kahan."""
        OscReset.check_groups(self.param_groups)
        self.osc_reset = OscReset(period, window, threshold, start)

    def _step_flat(self, params: list[torch.Tensor], group: dict[str, Any], flat: dict[str, Any], fmt,
                   lr_t: torch.Tensor) -> None:
        torch._foreach_add_(flat["steps"], 1)
        self._offset_t.fill_(self.sr_offset)
        # per-step scalars (Adam's bias corrections) computed once here: inside a compiled kernel a scalar pow of
        # the step is recomputed for every vector of elements (its cost: bench/results/optim_step.md)
        consts = {} if self._consts is None else self._consts(self, group, flat["steps"][0])
        if self._group_fused is not None:
            self._group_fused(self, [p.detach() for p in params], [p.grad for p in params],
                              [self.state[p] for p in params], group, fmt, lr_t, self._offset_t, consts)
            self._advance(group, fmt, sum(flat["numels"]))
            return
        # eager: chunks of <= CHUNK elements, so temporaries stay small (a fresh >= 32 MiB tensor page-faults under
        # glibc) and cache-resident; a chunk inside one tensor is updated in place, others are cat'ed and copied back
        st = {"step": flat["steps"][0], **consts}
        for a, b, pieces in flat["chunks"]:
            ws = [params[i].detach().view(-1)[lo:hi] for i, lo, hi in pieces]
            gs = [params[i].grad.reshape(-1)[lo:hi] for i, lo, hi in pieces]
            w = ws[0] if len(ws) == 1 else torch.cat(ws)
            g = gs[0] if len(gs) == 1 else torch.cat(gs)
            st.update({k: v[a:b] for k, v in flat["state"].items()})
            s = flat["s"][a:b] if flat["s"] is not None else None
            self._offset_t.fill_(self.sr_offset + a)
            self._update_and_write(w, g, st, group, fmt, s, lr_t, self._offset_t)   # fp32: .float()/.to() are no-ops
            if len(ws) > 1:
                torch._foreach_copy_(ws, list(w.split([hi - lo for _, lo, hi in pieces])))
        self._advance(group, fmt, sum(flat["numels"]))

    def _step_consts(self, group: dict[str, Any], t: torch.Tensor) -> dict[str, torch.Tensor]:
        """Scalars of a step shared by a group's tensors, from the step count t (override; see _step_flat)."""
        return {}

    def _sr_bits(self, w: torch.Tensor, group: dict[str, Any], fmt, offset_t: torch.Tensor) -> torch.Tensor | None:
        """The stochastic-rounding integers of w's elements (None unless the group stores with grid_sr)."""
        if group["storage"] not in _SR_MODES or fmt is None:
            return None
        k = default_sr_bits(torch.float32, fmt.kernel) if group["sr_bits"] is None else int(group["sr_bits"])
        return hash_bits(offset_t, w.numel(), self._sr_keys, k, w.device).view(w.shape)

    def _advance(self, group: dict[str, Any], fmt, n: int) -> None:
        if group["storage"] in _SR_MODES and fmt is not None:
            self.sr_offset += n

    def _update_and_write(self, p: torch.Tensor, grad: torch.Tensor, st: dict[str, Any], group: dict[str, Any], fmt,
                          s: torch.Tensor | None, lr_t: torch.Tensor, offset_t: torch.Tensor) -> None:
        w_new = self._update(p.detach().float(), grad.float(), st, group, fmt, s, lr_t)
        rbits = self._sr_bits(w_new, group, fmt, offset_t)
        self._write(p, w_new, st, group, fmt, s, lr_t, rbits)

    def _write(self, p: torch.Tensor, w_new: torch.Tensor, st: dict[str, Any], group: dict[str, Any], fmt,
               s: torch.Tensor | None, lr_t: torch.Tensor, rbits: torch.Tensor | None) -> None:
        """Round w_new into p per the group's storage; error_feedback first puts the residual into the optimizer's
        state (`_feedback`, while p still holds the old weight; error_feedback.py)."""
        if group["storage"] in EF_MODES and fmt is not None:
            q, r = round_with_residual(w_new, fmt, s, rbits, group["sr_bits"])
            self._feedback(p.detach().float(), r, st, group, fmt, s, lr_t)
            p.copy_(q)
        else:
            write(p, w_new.to(p.dtype), group["storage"], fmt, s, st.get("comp"), rbits, group["sr_bits"])

    def _feedback(self, w: torch.Tensor, r: torch.Tensor, st: dict[str, Any], group: dict[str, Any], fmt,
                  s: torch.Tensor | None, lr_t: torch.Tensor) -> None:
        """Put the rounding residual r into the state (override: optimizers that support error_feedback)."""
        raise NotImplementedError

    def _group_update_and_write(self, ps: list[torch.Tensor], grads: list[torch.Tensor], sts: list[dict[str, Any]],
                                group: dict[str, Any], fmt, lr_t: torch.Tensor, offset_t: torch.Tensor,
                                consts: dict[str, torch.Tensor]) -> None:
        """The compiled form of the flat step: every tensor of the group in one graph, SR offsets in order."""
        off = 0
        for p, g, st in zip(ps, grads, sts):
            st = {**st, **consts}                 # a shallow copy: the state tensors themselves are updated in place
            s = st.get("grid_scale")
            w_new = self._update(p, g, st, group, fmt, s, lr_t)
            rbits = self._sr_bits(w_new, group, fmt, offset_t + off)
            self._write(p, w_new, st, group, fmt, s, lr_t, rbits)
            off += p.numel()

    # ---- flat buffers
    @torch.no_grad()
    def _flatten(self, group: dict[str, Any]) -> dict[str, Any] | None:
        """Move a group's elementwise states into flat buffers (states become views); None if not eligible."""
        ps = group["params"]
        if not ps or any(p.dtype != torch.float32 or p.dim() == 0 or not p.is_contiguous() for p in ps):
            return None
        sts = [self.state[p] for p in ps]

        def kinds(p, st):
            elem = {k for k, v in st.items() if torch.is_tensor(v) and k != "step" and v.shape == p.shape}
            const = {k for k, v in st.items() if torch.is_tensor(v) and k != "step" and v.dim() == 0}
            return elem, const, set(st) - elem - const - {"step"}
        elem, const, other = kinds(ps[0], sts[0])
        if other or any(kinds(p, st) != (elem, const, other) for p, st in zip(ps, sts)):
            return None                           # e.g. low-precision states (codes + scales): per-parameter
        numels = [p.numel() for p in ps]
        state = {}
        for k in sorted(elem):
            buf = torch.cat([st[k].reshape(-1) for st in sts])
            for st, chunk, p in zip(sts, buf.split(numels), ps):
                st[k] = chunk.view(p.shape)
            state[k] = buf
        for k in sorted(const):                   # per-tensor constants -> per-element vectors (fixed after init)
            state[k] = torch.cat([st[k].float().reshape(1).expand(n) for st, n in zip(sts, numels)])
        steps = [st["step"] for st in sts]
        starts = [sum(numels[:i]) for i in range(len(numels))]
        chunks = []                               # (a, b, [(param index, lo, hi)]) covering [0, N) in CHUNK pieces
        for a in range(0, sum(numels), CHUNK):
            b = min(a + CHUNK, sum(numels))
            chunks.append((a, b, [(i, max(a, o) - o, min(b, o + n) - o) for i, (o, n) in enumerate(zip(starts, numels))
                                  if o < b and o + n > a]))
        return {"numels": numels, "chunks": chunks, "state": state, "s": state.pop("grid_scale", None), "steps": steps,
                "synced": bool((torch.stack(steps) == steps[0]).all())}

    # ---- checkpoints
    def state_dict(self) -> dict[str, Any]:
        sd = super().state_dict()
        sd["altgrad"] = {"generator": self.generator.get_state(), "stats": self.stats.state_dict(),
                         "seed": self.seed, "sr_offset": self.sr_offset, "calls": self._calls,
                         "osc_reset": None if self.osc_reset is None else self.osc_reset.state_dict()}
        return sd

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        sd = dict(state_dict)
        extra = sd.pop("altgrad", None)
        if extra is None:
            raise ValueError(f"{type(self).__name__}.load_state_dict: no 'altgrad' entry (generator state); "
                             f"this state_dict was not written by {type(self).__name__}")
        if "sr_offset" not in extra:
            raise ValueError(f"{type(self).__name__}.load_state_dict: no 'sr_offset' (stochastic-rounding counter); "
                             f"this state_dict predates counter_rng and cannot resume bit-exactly")
        # torch casts every state tensor to the param's dtype (uint8 codes, bf16 Kahan buffers -> fp32): undo it,
        # exactly (those values are exact in fp32), from the dtypes saved in the state_dict
        dtypes = {i: {k: v.dtype for k, v in st.items() if torch.is_tensor(v)} for i, st in sd["state"].items()}
        super().load_state_dict(sd)
        ids = [i for g in sd["param_groups"] for i in g["params"]]
        params = [p for g in self.param_groups for p in g["params"]]
        for i, p in zip(ids, params):
            st = self.state.get(p, {})
            for k, dt in dtypes.get(i, {}).items():
                st[k] = st[k].to(dt)
        self.generator.set_state(extra["generator"])
        self._calls = int(extra.get("calls", 0))
        self.sr_offset = int(extra["sr_offset"])
        self.stats.load_state_dict(extra["stats"])
        if self.osc_reset is not None:
            self.osc_reset.load_state_dict(extra.get("osc_reset"))
        self._flat = [self._flatten(g) for g in self.param_groups]     # the loaded states are new tensors

    # ---- printing
    def short_str(self) -> str:
        """e.g. "grid_adamw[e4m3fn/grid_sr]" (groups with a format; fp32 groups are not listed)."""
        parts = sorted({f"{get_format(g['fmt']).short_str()}/{g['storage']}{self._group_tag(g)}"
                        for g in self.param_groups if g["fmt"] is not None})
        return f"{self.tag}[{', '.join(parts) or 'fp32'}]"

    def _group_tag(self, group: dict[str, Any]) -> str:
        return ""
