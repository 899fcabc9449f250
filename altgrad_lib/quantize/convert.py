"""Model surgery: swap every nn.Linear of a model for the QuantizedLinear (or hardware FP8 linear) its policy names,
and, for a policy with `attn:`, put a QuantizedAttention (attention.py) in each attention module's `attention_op`.

`quantize_model` returns plain rows (one dict per Linear); `format_conversion` is the text it prints with
verbose=True, and notebook/tables.quantization_table the DataFrame notebooks show.
"""
from __future__ import annotations

import functools
import re
from typing import Any, Mapping, Sequence

import torch.nn as nn

from altgrad_lib.quantize.attention import QuantizedAttention
from altgrad_lib.quantize.hw_fp8 import ScaledMMLinear, convert_torchao, is_float8_linear
from altgrad_lib.quantize.linear import QuantizedLinear, module_seed
from altgrad_lib.quantize.recipes import LayerSpec, QuantPolicy, get_policy, layer_class_of, spec_str

COLUMNS = ("module", "class", "shape", "input", "weight", "grad_output", "gemm", "backend")


def quantize_model(model: nn.Module, policy: str | Mapping | QuantPolicy,
                   verbose: bool = True) -> list[dict[str, Any]]:
    """Swap the policy's Linears in place; returns one row per Linear of what is quantized where (and prints
    them with verbose=True).

    Row keys (COLUMNS): module, class, shape (out, in), input, weight (forward), grad_output (backward), gemm (the
    GEMM-faithful path's settings in force, GemmOptions.short_str, e.g. "rht:wgrad" or "plain"; "-" on the classic
    path; "kept:hp_first" / "kept:hp_last" / "kept:hp_layers" where the policy's high-precision switches keep a Linear
    its layer class would quantize), backend."""
    policy = get_policy(policy)
    linears = [(fqn, m) for fqn, m in model.named_modules() if isinstance(m, nn.Linear)]
    chosen: dict[str, LayerSpec] = {}
    rows = []
    kept = kept_high_precision(linears, policy)
    for fqn, lin in linears:
        cls = layer_class_of(fqn)
        spec = policy.spec_for(cls) if cls is not None else None
        why = kept.get(fqn) if spec is not None else None
        if why:
            spec = None
        if type(lin) is not nn.Linear and spec is not None:
            raise ValueError(f"{fqn} is already a {type(lin).__name__}; quantize_model must run once per model")
        if spec is not None:
            chosen[fqn] = spec
        rows.append({"module": fqn, "class": cls or "-", "shape": tuple(lin.weight.shape),
                     "input": spec_str(spec.input) if spec else "hp", "weight": spec_str(spec.weight) if spec else "hp",
                     "grad_output": spec_str(spec.grad_output) if spec else "hp",
                     "gemm": (spec.gemm_options.short_str() if spec and spec.gemm_options
                              else f"kept:{why}" if why else "-"),
                     "backend": policy.backend if spec else "-"})

    # built before any swap: a bad one changes nothing
    attn_ops = _attention_ops(model, policy, _hp_blocks(linears, policy))
    if policy.backend == "torchao":
        convert_torchao(model, chosen)
    elif chosen:
        if policy.backend == "scaled_mm":
            make = ScaledMMLinear.from_linear
        else:
            make = functools.partial(QuantizedLinear.from_linear, seed=policy.seed)
        new_modules = {fqn: make(model.get_submodule(fqn), spec, layer_class_of(fqn), fqn)
                       for fqn, spec in chosen.items()}   # build all first: a bad layer leaves the model untouched
        for fqn, new in new_modules.items():
            parent_name, _, child = fqn.rpartition(".")
            setattr(model.get_submodule(parent_name) if parent_name else model, child, new)
    for fqn, op in attn_ops.items():
        model.get_submodule(fqn).attention_op = op

    if verbose:
        print(format_conversion(rows, policy))
    return rows


def _hp_blocks(linears: Sequence[tuple[str, nn.Module]], policy: QuantPolicy) -> set[int]:
    """Transformer blocks kept whole in high precision (hp_first / hp_last, and hp_layers' block indices): their
    attention core stays high precision too."""
    blocks = sorted({i for i in (block_index(f) for f, _ in linears) if i is not None})
    n = len(blocks)
    out = {b for pos, b in enumerate(blocks) if pos < policy.hp_first_blocks or pos >= n - policy.hp_last_blocks}
    return out | {item for item in policy.hp_layers if isinstance(item, int)}


def _attention_ops(model: nn.Module, policy: QuantPolicy, hp_blocks: set[int]) -> dict[str, nn.Module]:
    """fqn -> QuantizedAttention for every attention module (one with an `attention_op` slot, model.py) outside the
    policy's high-precision blocks; {} without `attn:`."""
    if policy.attn is None:
        return {}
    out = {}
    for fqn, m in model.named_modules():
        if not hasattr(m, "attention_op"):
            continue
        if m.attention_op is not None:
            raise ValueError(f"{fqn} already has a low-precision attention; quantize_model must run once per model")
        i = block_index(fqn + ".")
        if i in hp_blocks:
            continue
        def seed_of(point, fqn=fqn):
            return module_seed(policy.seed, fqn, f"attn/{point}")

        op = QuantizedAttention(policy.attn, m.n_embd // m.n_head, seed_of=seed_of, fqn=fqn)
        out[fqn] = op.to(next(m.parameters()).device)
    return out


def conversion_summary(rows: Sequence[Mapping[str, Any]], policy: str | Mapping | QuantPolicy) -> str:
    """One line: how many Linears `policy` quantized and which stayed in high precision (and, with `attn:`, what
    the attention matmuls run in)."""
    policy = get_policy(policy)
    kept = sorted({r["class"] if r["class"] != "-" else r["module"] for r in rows if r["backend"] == "-"})
    n = sum(r["backend"] != "-" for r in rows)
    head = (f"{policy.name}[{policy.backend}]: {n}/{len(rows)} Linear quantized "
            f"(fwd X,W; bwd dY); high precision: {', '.join(kept) or 'none'} + embeddings, LayerNorm, softmax")
    if policy.attn is None:
        return head + ", attention matmuls"
    hp_kept = [f"the first {policy.hp_first_blocks}" if policy.hp_first_blocks else "",
               f"the last {policy.hp_last_blocks}" if policy.hp_last_blocks else ""]
    last = f" (not in {' and '.join(k for k in hp_kept if k)} blocks)" if any(hp_kept) else ""
    return head + f"; attention matmuls{last}: {policy.attn.short_str()}"


def format_conversion(rows: Sequence[Mapping[str, Any]], policy: str | Mapping | QuantPolicy) -> str:
    """What quantize_model(verbose=True) prints: the rows as a right-aligned text table (the layout of pandas'
    to_string(index=False)), then conversion_summary."""
    cells = [list(COLUMNS)] + [[str(r[c]) for c in COLUMNS] for r in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(COLUMNS))]
    table = "\n".join(" ".join(v.rjust(w) for v, w in zip(line, widths)) for line in cells)
    return f"{table}\n{conversion_summary(rows, policy)}"


def block_index(fqn: str) -> int | None:
    """Transformer block of a module name ('transformer.h.3.mlp.c_fc' -> 3), None outside the blocks."""
    m = re.search(r"(?:^|\.)h\.(\d+)\.", fqn)
    return int(m.group(1)) if m else None


def kept_high_precision(linears: Sequence[tuple[str, nn.Module]], policy: QuantPolicy) -> dict[str, str]:
    """fqn -> which switch keeps it in high precision ("hp_first", "hp_last" or "hp_layers"; the first that
    applies), for the Linears QuantPolicy.hp_first_blocks / hp_last_blocks / hp_layers name. An hp_layers item
    that names no Linear (a block index past the last block, a module name no Linear has or ends with) raises a
    one-line ValueError naming the valid choices."""
    blocks = sorted({i for i in (block_index(f) for f, _ in linears) if i is not None})
    n = len(blocks)
    out: dict[str, str] = {}
    for f, _ in linears:
        i = block_index(f)
        if i is None or i not in blocks:
            continue
        pos = blocks.index(i)
        if pos < policy.hp_first_blocks:
            out[f] = "hp_first"
        elif pos >= n - policy.hp_last_blocks:
            out[f] = "hp_last"
    for item in policy.hp_layers:
        if isinstance(item, int):
            hit = [f for f, _ in linears if block_index(f) == item]
        else:
            hit = [f for f, _ in linears if f == item or f.endswith("." + item)]
        if not hit:
            what = (f"block {item} (the model has blocks 0..{n - 1})" if isinstance(item, int)
                    else f"module {item!r} (Linears: {[f for f, _ in linears]})")
            raise ValueError(f"QuantPolicy.hp_layers names {what}, which is no Linear of this model; valid: a block "
                             f"index below n_layer={n} or a Linear's name or dotted suffix")
        for f in hit:
            out.setdefault(f, "hp_layers")
    return out


def quantized_modules(model: nn.Module) -> dict[str, nn.Module]:
    """fqn -> swapped module (sim, scaled_mm or torchao) for inspection and monitors."""
    out = {}
    for fqn, m in model.named_modules():
        if isinstance(m, (QuantizedLinear, ScaledMMLinear)) or is_float8_linear(m):
            out[fqn] = m
    return out
