"""The numerics doctor: at a checkpoint, which GEMM's quantization costs the loss, and how (`altgrad doctor RUN_DIR`,
`doctor_report(...)` in a notebook).

Per quantized Linear and each of its GEMMs (fprop Y = X·Wᵀ, dgrad dX = dY·W, wgrad dW = dYᵀ·X), and per quantized
attention core (fprop O, dgrad dQ|dK|dV), on K held-out batches:

1. The GEMM's own error. The model runs each batch once with every GEMM and the attention in high precision, and the
   operands each GEMM received (X, W, dY; Q, K, V, dO) are kept. Each layer then runs its quantized GEMMs (its own
   code path and Quantizers, train mode, so SR draws) R times on those operands; the reference is the exact product
   of the same operands in float64. So a row measures that GEMM alone, not the error upstream of it. With g the
   quantized output of draw r of batch k, g* the reference, m_k the mean of batch k's draws, s²_k their variance
   (summed over elements, ddof 1):
       gain      Σ⟨g, g*⟩ / (R Σ‖g*‖²)      1 = unbiased scale; its SE from the K per-batch gains
       cosine    mean cos(g, g*)
       rel_var   Σ_k s²_k / Σ‖g*‖²           the noise of one draw (0 for round-to-nearest)
       rel_bias  sqrt(max(0, Σ_k ‖m_k − g*‖² − s²_k / R) / Σ‖g*‖²): the deterministic error, the noise the mean
                 of R draws still holds subtracted (for round-to-nearest: the whole error)
       bias_se   sqrt(Σ_k s²_k / R / Σ‖g*‖²): that noise, the standard error of rel_bias's mean
       sqnr_db   10·log10(Σ‖g*‖² / mean over draws of Σ‖g − g*‖²)
2. Loss attribution: one GEMM at a time in high precision (a Linear's GEMM via GemmOptions.hp_gemms, the attention's
   forward or backward quantizer points removed), the rest as the recipe has it, paired with the recipe on the same
   batch. fprop: the held-out loss of batch k at the checkpoint (eval mode). dgrad / wgrad: one optimizer step from
   the checkpoint on the run's next training batch (step + k), then the held-out loss of batch k; every other
   Quantizer draws the same bits in both arms (its own stream, restored). cost = loss(recipe) − loss(GEMM in high
   precision), mean and 95 % t-interval over the K batches (studies/stats.mean_ci).
3. Optimizer-state health (arXiv 2603.16731's stalled states): over the recipe's K steps, the share of each
   optimizer-state tensor's entries that did not change in the step.

Flags (each row may raise several; its score = the largest ratio to its threshold; the table ranks flagged rows
by score, then every row by attributed cost):
    gain     |gain − 1| > GAIN_TOL
    sqnr     SQNR more than SQNR_DROP_DB below the median of the same GEMM over the model's quantized layers
    sr_var   an SR GEMM whose draws vary SR_VAR_FACTOR times less than the median SR GEMM of its kind: repeated bits
    bias     an SR GEMM whose stochastically rounded operand (drawn R times on its reference operand, along the
             GEMM's reduction dim) is biased: the mean of the draws misses the operand by more than SR_BIAS_TOL of one
             draw's noise amplitude (the noise the mean keeps subtracted), at z > SR_BIAS_Z (elements taken as
             independent); a GEMM-level bias would hide it under the round-to-nearest error of the other operand
    stalled  an optimizer-state tensor with more than STALL_TOL of its entries unchanged in a step
The thresholds' sources: GAIN_TOL lies between the gain TransformerEngine's NVFP4 wgrad showed (0.97, healthy) and
the swizzle bug's (0.88) in the harness the issue cites; the peer rules compare a GEMM with its own kind in the same
model and recipe (a layer-specific fault stands out, a format's uniform error does not); 6 dB = twice the error
amplitude of the median GEMM of its kind; SR_BIAS_TOL: a bias of a tenth of the noise SR is meant to add. The
false-alarm rate of these rules on clean runs is not measured yet.

The run is read through its config.yaml and checkpoints/last.pt; only the sim backend (QuantizedLinear) is
covered, in float32 (a bf16 run's autocast is not applied). `--inject` (quantize/faults.py) puts a known fault in
first, to show that the doctor finds it.
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from altgrad_lib.errors import ConfigError, UserError, one_line
from altgrad_lib.model import freeze_blocks
from altgrad_lib.numerics.quantizer import Quantizer
from altgrad_lib.optim import factory
from altgrad_lib.quantize.attention import QuantizedAttention
from altgrad_lib.quantize.faults import Fault, inject_fault, role_quantizer
from altgrad_lib.quantize.gemm_overrides import GEMM_OPERANDS, GEMMS
from altgrad_lib.quantize.gemm_quant import GemmOptions
from altgrad_lib.quantize.linear import QuantizedLinear, set_hp_gemms, set_rng_step
from altgrad_lib.state import capture_rng_state, restore_rng_state
from altgrad_lib.studies.stats import mean_ci
from altgrad_lib.training import checkpoint as ckpt
from altgrad_lib.training.build import build_model
from altgrad_lib.training.config import TrainConfig
from altgrad_lib.training.data import TokenCorpus
from altgrad_lib.training.preflight import build_corpus, vocab_size_of
from altgrad_lib.training.run_dir import Run
from altgrad_lib.training.schedules import lr_at

GAIN_TOL = 0.05
SQNR_DROP_DB = 6.0
SR_VAR_FACTOR = 10.0
SR_BIAS_TOL = 0.1       # an SR operand's bias above a tenth of one draw's noise amplitude
SR_BIAS_Z = 4.0
STALL_TOL = 0.5
SCORE_CAP = 1e3          # a ratio to a threshold of 0 (identical draws) is reported as this
DOCTOR_SEED = 51         # the held-out batches: val split, a seed of their own (not the run's val/loss batches)
ATTN_GEMMS = {"fprop": ("qkv", "s", "o"), "dgrad": ("do", "dp", "dqkv")}   # the attention's points per pass


class DoctorError(UserError, ValueError):
    """A run directory, step, fault or setting the doctor cannot use; one line."""


# ------------------------------------------------------------------------------------------ the patient

@dataclass
class Patient:
    """A run's model and optimizer at its checkpoint, faults injected: what doctor_report examines."""

    run_dir: Path
    config: TrainConfig
    step: int
    model: nn.Module
    optimizer: torch.optim.Optimizer
    faults: tuple[Fault, ...]
    linears: dict[str, QuantizedLinear]
    attns: dict[str, QuantizedAttention]     # fqn of the CausalSelfAttention -> its attention_op
    sr: bool                                 # any Quantizer rounds stochastically


def _has_sr(model: nn.Module) -> bool:
    return any(isinstance(m, Quantizer) and m.spec.rounding == "stochastic" for m in model.modules())


def examine(run_dir: str | Path, step: int | None = None, batches: int = 4, draws: int = 8,
            inject_faults: Sequence[str | Fault] = ()) -> Patient:
    """Every check of the doctor's input, one line each (DoctorError), before any batch is computed: the run
    directory and its checkpoint, the step, the settings, the faults (layer and GEMM, with did-you-mean), SR with
    one draw, a recipe that quantizes nothing. Returns the model and optimizer restored from the checkpoint."""
    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").is_file():
        raise DoctorError(f"altgrad doctor: {run_dir} is not a run directory (no config.yaml); valid: a directory "
                          f"`altgrad train` wrote (<outputs>/runs/<run_name>)")
    if isinstance(batches, bool) or not isinstance(batches, int) or batches < 2:
        raise DoctorError(f"altgrad doctor: --batches={batches!r} is invalid; valid: an int >= 2 (the intervals "
                          f"need two batches)")
    if isinstance(draws, bool) or not isinstance(draws, int) or draws < 1:
        raise DoctorError(f"altgrad doctor: --draws={draws!r} is invalid; valid: an int >= 1")
    faults = []
    for f in inject_faults:
        try:
            faults.append(f if isinstance(f, Fault) else Fault.parse(f))
        except ValueError as e:
            raise DoctorError(f"altgrad doctor: {one_line(e)}") from None
    try:
        run = Run.load(run_dir)
    except (FileNotFoundError, ValueError, TypeError) as e:
        raise DoctorError(f"altgrad doctor: {run_dir}: {one_line(e)}") from None
    cfg = run.config
    path = run.ckpt_path
    if not path.is_file():
        raise DoctorError(f"altgrad doctor: {run_dir} has no checkpoint ({path.relative_to(run_dir)} is missing); "
                          f"valid: a run trained at least to its first checkpoint")
    if cfg.backend != "sim":
        raise DoctorError(f"altgrad doctor: {run_dir.name} uses backend {cfg.backend!r}; valid: a backend 'sim' "
                          f"run (the doctor reads the simulated GEMMs' quantizers)")
    try:
        policy = cfg.quant_policy
    except (ValueError, TypeError) as e:
        raise DoctorError(f"altgrad doctor: {one_line(e)}") from None
    with torch.random.fork_rng(devices=[]):
        model, _ = build_model(cfg.model_config, vocab_size_of(cfg.data_config), policy)
    if cfg.freeze_blocks:
        freeze_blocks(model)
    linears = {n: m for n, m in model.named_modules() if isinstance(m, QuantizedLinear)}
    attns = {n: m.attention_op for n, m in model.named_modules()
             if isinstance(getattr(m, "attention_op", None), QuantizedAttention)}
    if not linears and not attns:
        raise DoctorError(f"altgrad doctor: recipe {cfg.recipe_name!r} of {run_dir.name} quantizes nothing (no "
                          f"quantized Linear or attention); valid: a run of a low-precision recipe")
    state = ckpt.load_checkpoint(path, cfg.config_hash())
    if step is not None and int(step) != int(state["step"]):
        raise DoctorError(f"altgrad doctor: --step={step} is invalid; {run_dir.name} keeps one checkpoint, at step "
                          f"{state['step']}; valid: --step {state['step']} (or leave --step out)")
    rng = capture_rng_state()   # the checkpoint's RNGs are the run's, not the caller's: theirs come back after
    try:
        optimizer = factory.build_optimizer(model, cfg.optim_config, torch.device("cpu"))
        ckpt.restore_training_state(state, model=model, optimizer=optimizer, path=path)
    finally:
        restore_rng_state(rng)
    if cfg.hp_schedule:   # the GEMMs the run kept in high precision at this step stay so
        set_hp_gemms(model, cfg.hp_schedule.hp_gemms_at(int(state["step"])))
    for f in faults:
        try:
            inject_fault(model, f)
        except ValueError as e:
            raise DoctorError(f"altgrad doctor: {one_line(e)}") from None
    sr = _has_sr(model)
    if sr and draws < 2:
        raise DoctorError(f"altgrad doctor: --draws={draws} with recipe {cfg.recipe_name!r}, which rounds "
                          f"stochastically: the bias needs the mean of several draws; valid: --draws >= 2")
    return Patient(run_dir, cfg, int(state["step"]), model, optimizer, tuple(faults), linears, attns, sr)


# ------------------------------------------------------------------------------------------ switches

def _hp_options(opts: GemmOptions | None, gemms: Sequence[str]) -> GemmOptions:
    """`opts` with `gemms` in high precision (their operand overrides and accumulators dropped)."""
    base = opts if opts is not None else GemmOptions()
    hp = tuple(g for g in GEMMS if g in gemms or g in base.hp_gemms)
    return dataclasses.replace(base, hp_gemms=hp, overrides=tuple(o for o in base.overrides if o[0] not in hp),
                               accum=tuple(a for a in base.accum if a[0] not in hp))


@contextlib.contextmanager
def _switched(p: Patient, layer: str, gemms: Sequence[str]) -> Iterator[None]:
    """`gemms` of `layer` (a Linear, or an attention core by its CausalSelfAttention's name) in high precision."""
    if layer in p.linears:
        m = p.linears[layer]
        old = m.gemm
        m.gemm = _hp_options(old, gemms)
        try:
            yield
        finally:
            m.gemm = old
        return
    op = p.attns[layer]
    kept = {k: op.quants[k] for g in gemms for k in ATTN_GEMMS[g] if k in op.quants}
    for k in kept:
        del op.quants[k]
    try:
        yield
    finally:
        for k, q in kept.items():
            op.quants[k] = q


class _ExactAttention(nn.Module):
    """The attention core in high precision with QuantizedAttention's call and output layout (hookable)."""

    def forward(self, q: Tensor, k: Tensor, v: Tensor, dropout_p: float = 0.0, capture: Any = None) -> Tensor:
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        B, nh, T, hs = y.shape
        return y.transpose(1, 2).reshape(B, T, nh * hs)


@contextlib.contextmanager
def _all_hp(p: Patient) -> Iterator[None]:
    old = {n: m.gemm for n, m in p.linears.items()}
    for m in p.linears.values():
        m.gemm = _hp_options(m.gemm, GEMMS)
    parents = {n: p.model.get_submodule(n) for n in p.attns}
    for n, mod in parents.items():
        mod.attention_op = _ExactAttention()
    try:
        yield
    finally:
        for n, m in p.linears.items():
            m.gemm = old[n]
        for n, mod in parents.items():
            mod.attention_op = p.attns[n]


# ------------------------------------------------------------------------------------------ 1. per-GEMM error

def _quantized_gemms(p: Patient, row: str) -> list[str]:
    """The GEMMs of a Linear / attention core that the recipe quantizes."""
    if row in p.attns:
        op = p.attns[row]
        return [g for g, pts in ATTN_GEMMS.items() if any(k in op.quants for k in pts)]
    m = p.linears[row]
    hp = m.gemm.hp_gemms if m.gemm is not None else ()
    return [g for g in GEMMS if g not in hp and any(role_quantizer(m, g, r) is not None for r in GEMM_OPERANDS[g])]


def _sr_gemm(p: Patient, row: str, gemm: str) -> bool:
    if row in p.attns:
        op = p.attns[row]
        return any(op.quants[k].spec.rounding == "stochastic" for k in ATTN_GEMMS[gemm] if k in op.quants)
    m = p.linears[row]
    return any((q := role_quantizer(m, gemm, r)) is not None and q.spec.rounding == "stochastic"
               for r in GEMM_OPERANDS[gemm])


def _reference_operands(p: Patient, x: Tensor, y: Tensor) -> dict[str, dict[str, Tensor]]:
    """One forward / backward of batch (x, y) with every GEMM and attention in high precision (eval mode: no
    dropout); the operands each quantized GEMM received: Linear X and dY, attention Q, K, V and dO."""
    store: dict[str, dict[str, Tensor]] = {}
    handles = []

    def hook(name: str, n_in: int):
        def fwd(mod, inp, out):
            store[name] = {f"in{i}": inp[i].detach() for i in range(n_in)}
            out.register_hook(lambda g: store[name].__setitem__("dy", g.detach()))
        return fwd

    was = p.model.training
    with _all_hp(p):
        for n, m in p.linears.items():
            handles.append(m.register_forward_hook(hook(n, 1)))
        for n in p.attns:
            handles.append(p.model.get_submodule(n).attention_op.register_forward_hook(hook(n, 3)))
        try:
            p.model.eval()
            p.model.zero_grad(set_to_none=True)
            _, loss = p.model(x, y)
            loss.backward()
        finally:
            for h in handles:
                h.remove()
            p.model.zero_grad(set_to_none=True)
            p.model.train(was)
    return store


def _linear_outputs(m: QuantizedLinear, ops: dict[str, Tensor]) -> dict[str, Tensor]:
    """Y, dX, dW of the layer's own quantized GEMMs (train mode) on the reference operands; 2-D, float32."""
    x = ops["in0"].clone().requires_grad_(True)
    w = m.weight.detach().clone().requires_grad_(True)
    m.train()
    with torch.enable_grad():
        out = m._quantized_gemm(x, w)
        out.backward(ops["dy"])
    return {"fprop": out.detach().reshape(-1, out.shape[-1]), "dgrad": x.grad.reshape(-1, x.shape[-1]),
            "wgrad": w.grad}


def _linear_exact(m: QuantizedLinear, ops: dict[str, Tensor]) -> dict[str, Tensor]:
    x = ops["in0"].double().reshape(-1, ops["in0"].shape[-1])
    w = m.weight.detach().double()
    dy = ops["dy"].double().reshape(-1, ops["dy"].shape[-1])
    return {"fprop": x @ w.t(), "dgrad": dy @ w, "wgrad": dy.t() @ x}


def _attention_outputs(op: QuantizedAttention, ops: dict[str, Tensor], exact: bool) -> dict[str, Tensor]:
    q, k, v = ((ops[f"in{i}"].double() if exact else ops[f"in{i}"]).clone().requires_grad_(True) for i in range(3))
    dy = ops["dy"].double() if exact else ops["dy"]
    op.train()
    with torch.enable_grad():
        out = _ExactAttention()(q, k, v) if exact else op(q, k, v, dropout_p=0.0)
        out.backward(dy)
    return {"fprop": out.detach(), "dgrad": torch.cat([t.grad.reshape(-1) for t in (q, k, v)])}


@dataclass
class _Acc:
    """Sums over batches and draws of one (layer, GEMM)."""

    ref2: float = 0.0
    cross: float = 0.0
    err2: float = 0.0
    bias2: float = 0.0
    var: float = 0.0
    gains: list[float] = field(default_factory=list)
    cosines: list[float] = field(default_factory=list)

    def add(self, draws: list[Tensor], ref: Tensor) -> None:
        g = torch.stack([d.double().reshape(-1) for d in draws])   # (R, n)
        r = ref.double().reshape(-1)
        rr = float(r @ r)
        cross = g @ r                                              # (R,)
        self.ref2 += rr
        self.cross += float(cross.mean())
        self.err2 += float(((g - r) ** 2).sum(1).mean())
        mean = g.mean(0)
        s2 = float(((g - mean) ** 2).sum() / (len(draws) - 1)) if len(draws) > 1 else 0.0
        self.bias2 += float(((mean - r) ** 2).sum()) - s2 / len(draws)
        self.var += s2
        self.gains.append(float(cross.mean()) / rr if rr > 0 else math.nan)
        norms = g.norm(dim=1) * math.sqrt(rr)
        self.cosines.extend((cross / norms).tolist())

    def stats(self, n_draws: int) -> dict[str, float]:
        ref2 = self.ref2 if self.ref2 > 0 else math.nan
        gains = np.asarray(self.gains)
        return {
            "gain": self.cross / ref2,
            "gain_se": float(gains.std(ddof=1) / math.sqrt(len(gains))) if len(gains) > 1 else math.nan,
            "cosine": float(np.mean(self.cosines)),
            "rel_bias": math.sqrt(max(0.0, self.bias2) / ref2),
            "bias_se": math.sqrt(self.var / n_draws / ref2),
            "rel_var": self.var / ref2,
            "sqnr_db": 10 * math.log10(ref2 / self.err2) if self.err2 > 0 else math.inf,
        }


OPERAND_AXIS = {("fprop", "input"): -1, ("fprop", "weight"): -1, ("dgrad", "grad_output"): -1,
                ("dgrad", "weight"): 0, ("wgrad", "grad_output"): 0, ("wgrad", "input"): 0}   # its reduction dim


@dataclass
class _SrAcc:
    """The SR operands of one (layer, GEMM) over the batches: per row of each operand, the debiased squared bias of
    the mean of R draws, ‖m_i − t_i‖² − s²_i / R, and the per-draw variance s²_i (ddof 1, summed over the row)."""

    bias2: list[Tensor] = field(default_factory=list)
    var: list[Tensor] = field(default_factory=list)

    def add(self, q, t: Tensor, axis: int, draws: int) -> None:
        with torch.no_grad():
            g = torch.stack([q.quantize(t, axis=axis).double() for _ in range(draws)])   # (R, rows, cols)
        mean = g.mean(0)
        s2 = ((g - mean) ** 2).sum(0).sum(-1) / (draws - 1)
        self.bias2.append(((mean - t.double()) ** 2).sum(-1) - s2 / draws)
        self.var.append(s2)

    def stats(self) -> dict[str, float]:
        """sr_bias: sqrt(Σ debiased bias² / Σ s²), the bias over one draw's noise (amplitudes); sr_bias_z: Σ debiased
        bias² over its standard error, from the spread of the rows' terms (robust to heavy-tailed operands, where a
        per-element count would overstate the information)."""
        if not self.bias2:
            return {"sr_bias": math.nan, "sr_bias_z": math.nan}
        b2, var = torch.cat(self.bias2), torch.cat(self.var)
        tot, v = float(b2.sum()), float(var.sum())
        se = float(b2.std()) * math.sqrt(b2.numel()) if b2.numel() > 1 else math.nan
        if v <= 0 or not se > 0:
            return {"sr_bias": math.nan, "sr_bias_z": math.nan}
        return {"sr_bias": math.sqrt(max(0.0, tot) / v), "sr_bias_z": tot / se}


def _sr_operands(p: Patient, name: str, gemm: str) -> list[tuple[str, Any]]:
    m = p.linears[name]
    return [(r, q) for r in GEMM_OPERANDS[gemm]
            if (q := role_quantizer(m, gemm, r)) is not None and q.spec.rounding == "stochastic"]


def gemm_errors(p: Patient, batches: list[tuple[Tensor, Tensor]], draws: int) -> pd.DataFrame:
    """Part 1 (module docstring): one row per quantized (layer, GEMM)."""
    rows = [*((n, "linear") for n in p.linears), *((n, "attention") for n in p.attns)]
    acc = {(n, g): _Acc() for n, _ in rows for g in _quantized_gemms(p, n)}
    sr_acc = {key: _SrAcc() for key in acc}
    for x, y in batches:
        ops = _reference_operands(p, x, y)
        for name, kind in rows:
            gemms = _quantized_gemms(p, name)
            if not gemms:
                continue
            if kind == "linear":
                m = p.linears[name]
                outs = [_linear_outputs(m, ops[name]) for _ in range(draws)]
                ref = _linear_exact(m, ops[name])
                tensors = {"input": ops[name]["in0"].reshape(-1, m.in_features), "weight": m.weight.detach(),
                           "grad_output": ops[name]["dy"].reshape(-1, m.out_features)}
                if draws > 1:
                    for g in gemms:
                        for role, q in _sr_operands(p, name, g):
                            sr_acc[(name, g)].add(q, tensors[role], OPERAND_AXIS[(g, role)], draws)
            else:
                op = p.attns[name]
                outs = [_attention_outputs(op, ops[name], False) for _ in range(draws)]
                ref = _attention_outputs(op, ops[name], True)
            for g in gemms:
                acc[(name, g)].add([o[g] for o in outs], ref[g])
    out = []
    for (name, g), a in acc.items():
        kind = "attention" if name in p.attns else "linear"
        out.append({"layer": name, "module": kind, "gemm": g, "sr": _sr_gemm(p, name, g), **a.stats(draws),
                    **sr_acc[(name, g)].stats()})
    return pd.DataFrame(out)


# ------------------------------------------------------------------------------------------ 2. attribution

@torch.no_grad()
def _eval_loss(model: nn.Module, x: Tensor, y: Tensor) -> float:
    was = model.training
    model.eval()
    try:
        return float(model(x, y)[1])
    finally:
        model.train(was)


class _Restorer:
    """The checkpoint's model and optimizer state (faults included), restored before every arm of a pair."""

    def __init__(self, p: Patient):
        self.p = p
        self.model_sd = copy.deepcopy(p.model.state_dict())
        self.opt_sd = copy.deepcopy(p.optimizer.state_dict())

    def restore(self) -> None:
        self.p.model.load_state_dict(self.model_sd)
        self.p.optimizer.load_state_dict(copy.deepcopy(self.opt_sd))


def _state_tensors(opt: torch.optim.Optimizer, names: dict[int, str]) -> dict[tuple[str, str], tuple[Tensor, Any]]:
    """(param name, state key) -> (a copy of the state tensor, the param's gradient now)."""
    out = {}
    for param, st in opt.state.items():
        for key, t in st.items():
            if torch.is_tensor(t) and t.numel() > 1:
                out[(names.get(id(param), "?"), key)] = (t.detach().clone(), param.grad)
    return out


def _stalled(before: dict, after: dict) -> list[dict]:
    """Per state tensor, the share of its entries the step left unchanged, over the entries whose parameter got a
    non-zero gradient (rows of tokens a batch never holds are not stalled: nothing asked them to move)."""
    rows = []
    for k, (b, grad) in before.items():
        a = after.get(k, (None,))[0]
        if a is None or a.shape != b.shape:
            continue
        same = (a == b) | (torch.isnan(a) & torch.isnan(b)) if a.is_floating_point() else a == b
        if grad is not None and grad.shape == b.shape:
            same = same[grad != 0]
        if same.numel():
            rows.append({"param": k[0], "state": k[1], "dtype": str(b.dtype).replace("torch.", ""),
                         "numel": b.numel(), "stalled": float(same.double().mean())})
    return rows


def _step_loss(p: Patient, it: int, train: tuple[Tensor, Tensor], held: tuple[Tensor, Tensor],
               stalls: list | None = None) -> float:
    """One optimizer step from the restored checkpoint on `train` (0-based step `it`), then the held-out loss."""
    cfg, model, opt = p.config, p.model, p.optimizer
    lr = lr_at(it, cfg)
    for g in opt.param_groups:
        g["lr"] = lr * g.get("lr_mult", 1.0)
    set_rng_step(model, it)
    model.train()
    opt.zero_grad(set_to_none=True)
    _, loss = model(*train)
    loss.backward()
    params = [q for q in model.parameters() if q.requires_grad]
    torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip if cfg.grad_clip > 0 else math.inf)
    if stalls is not None:
        names = {id(q): n for n, q in model.named_parameters()}
        before = _state_tensors(opt, names)
    opt.step()
    if stalls is not None:
        stalls.extend(_stalled(before, _state_tensors(opt, names)))
    return _eval_loss(model, *held)


def attribution(p: Patient, held: list[tuple[Tensor, Tensor]], train: list[tuple[Tensor, Tensor]],
                gemms: pd.DataFrame, rs: "_Restorer") -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Part 2 and 3 (module docstring): per row of `gemms` the paired loss cost of its quantization over the K
    batches; per layer the cost of all its GEMMs (one step, then the held-out loss with the layer still in high
    precision); the optimizer-state stall shares of the recipe's K steps. `rs`: the checkpoint's state."""
    stalls: list[dict] = []
    base_fwd, base_step = [], []
    for k, (hb, tb) in enumerate(zip(held, train)):
        rs.restore()
        base_fwd.append(_eval_loss(p.model, *hb))
        base_step.append(_step_loss(p, p.step + k, tb, hb, stalls))
    rows = []
    for r in gemms.itertuples():
        costs = []
        for k, (hb, tb) in enumerate(zip(held, train)):
            rs.restore()
            with _switched(p, r.layer, (r.gemm,)):
                if r.gemm == "fprop":
                    costs.append(base_fwd[k] - _eval_loss(p.model, *hb))
                else:
                    costs.append(base_step[k] - _step_loss(p, p.step + k, tb, hb))
        mean, half = mean_ci(costs)
        rows.append({"layer": r.layer, "gemm": r.gemm, "loss_cost": mean, "loss_ci": half})
    layers = []
    for name in dict.fromkeys(gemms.layer):   # the whole layer: its forward and its update, one step
        costs = []
        for k, (hb, tb) in enumerate(zip(held, train)):
            rs.restore()
            with _switched(p, name, tuple(gemms[gemms.layer == name].gemm)):
                costs.append(base_step[k] - _step_loss(p, p.step + k, tb, hb))
        mean, half = mean_ci(costs)
        layers.append({"layer": name, "loss_cost": mean, "loss_ci": half})
    rs.restore()
    stall = (pd.DataFrame(stalls).groupby(["param", "state", "dtype", "numel"], as_index=False, sort=False)
             ["stalled"].mean() if stalls else pd.DataFrame(columns=["param", "state", "dtype", "numel", "stalled"]))
    layer_df = pd.DataFrame(layers).sort_values("loss_cost", ascending=False, kind="stable").reset_index(drop=True)
    return pd.DataFrame(rows), layer_df, stall


# ------------------------------------------------------------------------------------------ 3. flags

def _flags(df: pd.DataFrame) -> pd.DataFrame:
    """The flags of the module docstring, a verdict line each; `score` (max ratio to a threshold) and `rank`."""
    df = df.copy()
    flags: list[list[tuple[str, float, str]]] = [[] for _ in range(len(df))]
    for i, r in enumerate(df.itertuples()):
        where = f"{r.layer} {r.gemm}"
        dev = abs(r.gain - 1)
        if dev > GAIN_TOL:
            flags[i].append(("gain", dev / GAIN_TOL,
                             f"{where}: gain {r.gain:.3f} ± {r.gain_se:.3f} (|gain − 1| > {GAIN_TOL}): the GEMM "
                             f"scales its output by {r.gain:.3f}, a scale bug (scale factor, swizzle)"))
        peers = df[(df.gemm == r.gemm) & (df.module == r.module)]
        if len(peers) >= 3:
            drop = float(np.median(peers.sqnr_db.replace(np.inf, np.nan).dropna())) - r.sqnr_db
            if drop > SQNR_DROP_DB:
                flags[i].append(("sqnr", drop / SQNR_DROP_DB,
                                 f"{where}: SQNR {r.sqnr_db:.1f} dB, {drop:.1f} dB below the median of the model's "
                                 f"{r.gemm} GEMMs (> {SQNR_DROP_DB:g} dB): an operand is misquantized (scales on "
                                 f"the wrong blocks?)"))
        sr_peers = peers[peers.sr]
        if r.sr and len(sr_peers) >= 3:
            med_var = float(np.median(sr_peers.rel_var))
            if med_var > 0 and r.rel_var * SR_VAR_FACTOR < med_var:
                score = min(SCORE_CAP, med_var / SR_VAR_FACTOR / r.rel_var) if r.rel_var > 0 else SCORE_CAP
                how = (f"{med_var / r.rel_var:.3g}x less between draws than" if r.rel_var > 0
                       else "not at all between draws, unlike")
                flags[i].append(("sr_var", score,
                                 f"{where}: its stochastic rounding varies {how} the median SR {r.gemm} GEMM "
                                 f"(rel. variance {r.rel_var:.2e} vs {med_var:.2e}): the random bits repeat "
                                 f"(correlated SR)"))
        if r.sr and r.sr_bias_z > SR_BIAS_Z and r.sr_bias > SR_BIAS_TOL:
            flags[i].append(("bias", r.sr_bias / SR_BIAS_TOL,
                             f"{where}: its stochastically rounded operand is biased: the mean of its draws misses "
                             f"the operand by {r.sr_bias:.3g} of one draw's noise (z = {r.sr_bias_z:.1f}; > "
                             f"{SR_BIAS_TOL:g} and z > {SR_BIAS_Z:g}): SR with too few random bits?"))
    df["flags"] = ["+".join(f[0] for f in fl) for fl in flags]
    df["score"] = [max((f[1] for f in fl), default=0.0) for fl in flags]
    df["verdicts"] = [" | ".join(f[2] for f in fl) for fl in flags]
    df = df.sort_values(["score", "loss_cost"], ascending=[False, False], kind="stable").reset_index(drop=True)
    df.insert(0, "rank", range(1, len(df) + 1))
    return df


# ------------------------------------------------------------------------------------------ the report

@dataclass
class DoctorReport:
    """What `altgrad doctor` prints: the ranked GEMM table, the verdicts, the optimizer-state health."""

    run_dir: Path
    step: int
    recipe: str
    batches: int
    draws: int
    faults: tuple[str, ...]
    gemms: pd.DataFrame          # ranked: rank, layer, module, gemm, sr, gain..., loss_cost, loss_ci, flags, score
    optimizer: pd.DataFrame      # param, state, dtype, numel, stalled
    layers: pd.DataFrame         # layer, loss_cost, loss_ci: the whole layer in high precision, costliest first

    def verdicts(self) -> list[str]:
        lines = [v for vs in self.gemms.verdicts if vs for v in vs.split(" | ")]
        for r in self.optimizer.itertuples():
            if r.stalled > STALL_TOL:
                lines.append(f"{r.param} {r.state} ({r.dtype}): {r.stalled:.0%} of its entries did not change in a "
                             f"step (> {STALL_TOL:.0%}): a stalled optimizer state (updates below its precision)")
        return lines

    def table(self) -> pd.DataFrame:
        cols = ["rank", "layer", "gemm", "flags", "score", "gain", "gain_se", "cosine", "rel_bias", "bias_se",
                "rel_var", "sr_bias", "sqnr_db", "loss_cost", "loss_ci"]
        return self.gemms[cols]

    def __str__(self) -> str:
        head = (f"altgrad doctor: {self.run_dir.name} at step {self.step}, recipe {self.recipe}, {self.batches} "
                f"held-out batches x {self.draws} draws"
                + (f", injected {', '.join(self.faults)}" if self.faults else ""))
        t = self.table().copy()
        t["flags"] = t["flags"].replace("", "-")
        with pd.option_context("display.width", 200, "display.max_columns", 30, "display.max_rows", 500):
            body = t.to_string(index=False, float_format=lambda v: f"{v:.4g}")
        v = self.verdicts()
        with pd.option_context("display.width", 200, "display.max_rows", 500):
            layers = (self.layers.to_string(index=False, float_format=lambda x: f"{x:.4g}") if len(self.layers)
                      else "(not measured)")
        stalled = self.optimizer.sort_values("stalled", ascending=False).head(5)
        with pd.option_context("display.width", 200):
            opt = stalled.to_string(index=False, float_format=lambda x: f"{x:.3f}") if len(stalled) else "(no state)"
        return "\n".join([
            head,
            "GEMMs, worst first (loss_cost: nats the GEMM's quantization costs, ± loss_ci 95 %; fprop at the "
            "checkpoint, dgrad / wgrad after one step):",
            body, "",
            f"verdicts ({len(v)}):" if v else "verdicts: nothing flagged",
            *(f"  {line}" for line in v), "",
            "optimizer state, most stalled first (share of entries unchanged in a step):", opt, "",
            "layers, costliest first (nats: every GEMM of the layer in high precision, one step, ± 95 %):",
            layers])

    def to_csv(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.gemms.to_csv(path, index=False)
        return path


def doctor_report(run_dir: str | Path, step: int | None = None, batches: int = 4, draws: int = 8,
                  inject_faults: Sequence[str | Fault] = (), attribute: bool = True) -> DoctorReport:
    """The doctor's report of a run at its checkpoint (module docstring). Input mistakes raise one line (examine)
    before anything is computed. attribute=False skips the loss attribution and the optimizer steps (its columns
    NaN, the optimizer table empty): the per-GEMM tests alone, a fraction of the time."""
    p = examine(run_dir, step, batches, draws, inject_faults)
    cfg = p.config
    try:
        corpus: TokenCorpus = build_corpus(cfg.data_config)
    except ConfigError as e:
        raise DoctorError(f"altgrad doctor: {one_line(e)}") from None
    data = cfg.data_config
    held = [corpus.get_batch("val", data.batch_size, data.block_size, seed=DOCTOR_SEED, step=k)
            for k in range(batches)]
    train = [corpus.train_batch(data, p.step + k) for k in range(batches)]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        rs = _Restorer(p)   # before the draws move the SR streams and scaler histories
        errs = gemm_errors(p, held, draws)
        if attribute:
            cost, layers, stall = attribution(p, held, train, errs, rs)
        else:
            cost = errs[["layer", "gemm"]].assign(loss_cost=math.nan, loss_ci=math.nan)
            layers = pd.DataFrame(columns=["layer", "loss_cost", "loss_ci"])
            stall = pd.DataFrame(columns=["param", "state", "dtype", "numel", "stalled"])
    df = _flags(errs.merge(cost, on=["layer", "gemm"], how="left"))
    return DoctorReport(Path(p.run_dir), p.step, cfg.recipe_name, batches, draws, tuple(map(str, p.faults)), df,
                        stall, layers)
