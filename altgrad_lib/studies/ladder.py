"""A study's scale ladder: model sizes x token budgets, each rung a config of its own, for a scaling-law fit.

A study file's `ladder:` section (study.py) multiplies the study's axes (recipes, seeds) by rungs:

    ladder:
      sizes: [[1, 32], [2, 64], [3, 96]]   # [n_layer, n_embd] (or [n_layer, n_embd, n_head]); n_head otherwise keeps
                                           #   the base config's head width n_embd / n_head (n_embd a multiple of it)
      tokens_per_param: [5, 10, 20]        # D = tokens_per_param x N, rounded to whole steps of batch x block tokens
      lr_rule: {lr: 1.0e-3, ref_embd: 64, power: 1.0}     # lr = lr x (ref_embd / n_embd)^power; min_lr and the base's
                                                          #   min_lr / lr ratio follow it (default: the base's lr)
      batch_rule: {batch_size: 16, ref_embd: 64, power: 0.0}   # batch = round(batch_size x (n_embd / ref_embd)^power)
      lr_check: {factors: [0.5, 2.0], recipe: hp}   # optional: per size, `recipe` at the smallest budget and the
                                                    #   first seed, at lr x each factor (is the rule's lr near best?)

N is the non-embedding parameter count as nanoGPT's GPT.num_params(non_embedding=True) counts it (all parameters
less the position embedding; the tied token embedding counts once), taken from the model on the meta device. Each
rung's run also gets warmup_steps = min(the base's, max_steps // 10). The index records n_layer, n_embd, max_steps,
lr and batch_size as the config has them, and n_params, tokens and lr_factor (1 on the ladder, the factor on an lr
check) for the fit (scaling_law.py).

A ladder with one size or one token budget cannot separate A N^-α from B D^-β: it is refused in one line.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from altgrad_lib.training.config import TrainConfig
from altgrad_lib.training.preflight import count_params, vocab_size_of

LADDER_KEYS = ("sizes", "tokens_per_param", "lr_rule", "batch_rule", "lr_check")
LR_RULE_KEYS = ("lr", "ref_embd", "power")
BATCH_RULE_KEYS = ("batch_size", "ref_embd", "power")
LR_CHECK_KEYS = ("factors", "recipe")
# keys a rung sets: an axis or point of the study may not set them too
RUNG_KEYS = ("n_layer", "n_embd", "n_head", "max_steps", "lr", "min_lr", "batch_size", "warmup_steps")
# index columns of a ladder study (config keys first, then the rung's own values)
LADDER_COLUMNS = ("n_layer", "n_embd", "max_steps", "lr", "batch_size", "n_params", "tokens", "lr_factor")


def _finite_num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


@dataclass(frozen=True)
class Rung:
    """One point of the ladder: the config keys it sets, its N and D, and its lr factor (1 on the ladder)."""
    keys: dict[str, Any]
    n_params: int
    tokens: int
    lr_factor: float = 1.0

    def axes(self) -> dict[str, Any]:
        """What the run name spells out (study.run_name) and the index records beside the config's columns."""
        named = {k: self.keys[k] for k in ("n_layer", "n_embd", "max_steps")}
        if self.lr_factor != 1.0:
            named["lr"] = self.keys["lr"]
        return named

    def columns(self) -> dict[str, Any]:
        return {"n_params": self.n_params, "tokens": self.tokens, "lr_factor": self.lr_factor}


@dataclass(frozen=True)
class Ladder:
    sizes: tuple[tuple[int, ...], ...]
    tokens_per_param: tuple[float, ...]
    lr_rule: dict[str, Any]
    batch_rule: dict[str, Any]
    lr_check: dict[str, Any]

    @classmethod
    def from_spec(cls, d: Any) -> "Ladder":
        """The `ladder:` mapping of a study file, checked: every mistake one line naming the value and what is valid."""
        eg = "ladder: {sizes: [[1, 32], [2, 64]], tokens_per_param: [10, 20]}"
        if not isinstance(d, Mapping):
            raise ValueError(f"study ladder: {d!r} must be a mapping, e.g. {eg}")
        unknown = sorted(set(d) - set(LADDER_KEYS))
        if unknown:
            raise ValueError(f"study ladder: unknown key(s) {unknown}; valid keys: {LADDER_KEYS}")
        sizes = d.get("sizes")
        if not isinstance(sizes, list) or not all(isinstance(s, list) and len(s) in (2, 3)
                                                   and all(isinstance(v, int) and not isinstance(v, bool) and v >= 1
                                                           for v in s) for s in sizes):
            raise ValueError(f"study ladder: sizes={sizes!r} must be a list of [n_layer, n_embd] (or [n_layer, n_embd, "
                             f"n_head]) positive ints, e.g. {eg}")
        tpp = d.get("tokens_per_param")
        if not isinstance(tpp, list) or not all(_finite_num(t) and t > 0 for t in tpp):
            raise ValueError(f"study ladder: tokens_per_param={tpp!r} must be a list of positive numbers, e.g. {eg}")
        uniq_sizes = list(dict.fromkeys(tuple(s) for s in sizes))
        if len(uniq_sizes) < 2 or len(set(tpp)) < 2:
            what = (f"sizes {sizes!r} has {len(uniq_sizes)} size" if len(uniq_sizes) < 2
                    else f"tokens_per_param {tpp!r} has {len(set(tpp))} budget")
            raise ValueError(f"study ladder: {what}; a fit of L(N, D) = E + A N^-α + B D^-β needs >= 2 sizes and "
                             f">= 2 token budgets, e.g. {eg}")
        if len(uniq_sizes) < len(sizes) or len(set(tpp)) < len(tpp):
            raise ValueError(f"study ladder: sizes={sizes!r} / tokens_per_param={tpp!r} list a value twice; list each "
                             f"once")
        rules = []
        for key, valid in (("lr_rule", LR_RULE_KEYS), ("batch_rule", BATCH_RULE_KEYS)):
            r = d.get(key) or {}
            bad = sorted(set(r) - set(valid)) if isinstance(r, Mapping) else [repr(r)]
            if bad:
                raise ValueError(f"study ladder: {key} has invalid key(s) {bad}; valid keys: {valid}")
            nonpos = {k: v for k, v in r.items() if not _finite_num(v) or (k != "power" and v <= 0)}
            if nonpos:
                raise ValueError(f"study ladder: {key} {nonpos} invalid; valid: positive numbers (power: any number)")
            rules.append(dict(r))
        chk = d.get("lr_check") or {}
        bad = sorted(set(chk) - set(LR_CHECK_KEYS)) if isinstance(chk, Mapping) else [repr(chk)]
        if bad:
            raise ValueError(f"study ladder: lr_check has invalid key(s) {bad}; valid keys: {LR_CHECK_KEYS}")
        if chk and (not isinstance(chk.get("factors"), list) or not chk["factors"]
                    or not all(_finite_num(f) and f > 0 and f != 1 for f in chk["factors"])):
            raise ValueError(f"study ladder: lr_check factors={chk.get('factors')!r} must be a non-empty list of "
                             f"positive numbers other than 1, e.g. lr_check: {{factors: [0.5, 2.0], recipe: hp}}")
        return cls(sizes=tuple(uniq_sizes), tokens_per_param=tuple(tpp), lr_rule=rules[0], batch_rule=rules[1],
                   lr_check=dict(chk))

    def to_dict(self) -> dict[str, Any]:
        """The ladder as the study file states it (Study.identity hashes it)."""
        return {"sizes": [list(s) for s in self.sizes], "tokens_per_param": list(self.tokens_per_param),
                "lr_rule": self.lr_rule, "batch_rule": self.batch_rule, "lr_check": self.lr_check}

    def check_axes(self, keys: Any) -> None:
        """An axis or point that sets a key the rungs set would fight the ladder: refused in one line."""
        clash = [k for k in keys if k in RUNG_KEYS]
        if clash:
            raise ValueError(f"study ladder: the axes / points set {clash}, which the ladder's rungs set; keys the "
                             f"ladder sets: {RUNG_KEYS}")

    def rungs(self, base: Mapping[str, Any]) -> list[Rung]:
        """Every size x budget as config keys on top of `base` (sizes in file order, budgets inside)."""
        cfg0 = TrainConfig.from_dict(dict(base))
        vocab = vocab_size_of(cfg0.data_config)
        head_dim = cfg0.n_embd // cfg0.n_head
        lr0 = self.lr_rule.get("lr", cfg0.lr)
        out = []
        for size in self.sizes:
            n_layer, n_embd = size[:2]
            n_head = size[2] if len(size) == 3 else n_embd // head_dim
            if len(size) == 2 and n_embd % head_dim:
                raise ValueError(f"study ladder: size {list(size)}: n_embd={n_embd} is not a multiple of the base's "
                                 f"head width {head_dim} (n_embd / n_head); valid: a multiple of {head_dim}, or "
                                 f"[n_layer, n_embd, n_head]")
            if n_head < 1 or n_embd % n_head:
                raise ValueError(f"study ladder: size {list(size)}: n_embd={n_embd} is not divisible by n_head="
                                 f"{n_head}; valid: an n_head that divides n_embd")
            scale = (self.lr_rule.get("ref_embd", n_embd) / n_embd) ** self.lr_rule.get("power", 1.0)
            lr = lr0 * scale
            width = (n_embd / self.batch_rule.get("ref_embd", n_embd)) ** self.batch_rule.get("power", 0.0)
            batch = max(1, round(self.batch_rule.get("batch_size", cfg0.batch_size) * width))
            shape = cfg0.replace(n_layer=n_layer, n_embd=n_embd, n_head=n_head)
            n = count_params(shape, vocab) - cfg0.block_size * n_embd      # less wpe: GPT.num_params(non_embedding)
            for tpp in self.tokens_per_param:
                steps = max(1, round(tpp * n / (batch * cfg0.block_size)))
                keys = {"n_layer": n_layer, "n_embd": n_embd, "n_head": n_head, "max_steps": steps,
                        "lr": lr, "min_lr": cfg0.min_lr * lr / cfg0.lr, "batch_size": batch,
                        "warmup_steps": min(cfg0.warmup_steps, steps // 10)}
                out.append(Rung(keys, n, steps * batch * cfg0.block_size))
        return out

    def lr_checks(self, rungs: list[Rung]) -> list[Rung]:
        """Per size, the smallest budget's rung at lr x each lr_check factor."""
        out = []
        smallest = min(self.tokens_per_param)
        for i, _ in enumerate(self.sizes):
            r = rungs[i * len(self.tokens_per_param) + self.tokens_per_param.index(smallest)]
            for f in self.lr_check.get("factors", ()):
                out.append(Rung({**r.keys, "lr": r.keys["lr"] * f, "min_lr": r.keys["min_lr"] * f}, r.n_params,
                                r.tokens, float(f)))
        return out

    def describe(self, rungs: list[Rung]) -> str:
        """One line for the dry run: sizes, N and D ranges, budgets."""
        ns = sorted({r.n_params for r in rungs if r.lr_factor == 1.0})
        ds = sorted({r.tokens for r in rungs if r.lr_factor == 1.0})
        return (f"ladder: {len(self.sizes)} sizes (N {ns[0]:,}-{ns[-1]:,} params, {ns[-1] / ns[0]:.3g}x) "
                f"x {len(self.tokens_per_param)} token budgets ({', '.join(f'{t:g}' for t in self.tokens_per_param)} "
                f"tokens/param; D {ds[0]:,}-{ds[-1]:,}) = {len(ns) * len(self.tokens_per_param)} rungs"
                + (f", + {len(self.sizes) * len(self.lr_check['factors'])} lr-check rung(s) at lr x "
                   f"{self.lr_check['factors']} for {self.lr_check.get('recipe', 'hp')}" if self.lr_check else ""))
