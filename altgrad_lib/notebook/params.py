"""Notebook parameters that fail loudly: unknown injected names, wrong types and bad choices stop the notebook.

Papermill injects `-p name value` as a cell after the cell tagged `parameters` and only *warns* about a name the
notebook does not declare, so `-p learning_rate 0.1` used to run silently with the default lr. Each notebook
therefore follows one pattern:

    # setup cell (before the parameters cell)
    from altgrad_lib.notebook import params as notebook_params
    guard = notebook_params.watch(globals())   # the names defined so far are not parameters

    # parameters cell: one annotated assignment per parameter; the annotation is the type, the comment the help
    lr: float = 1e-3                                  # peak AdamW learning rate

    # (papermill's injected-parameters cell lands here)

    # first cell after it
    P = guard.check(globals(), choices={"backends": BACKENDS})   # dict of the declared parameters

A parameter is a name annotated in the parameters cell (`__annotations__` of the notebook's namespace). A name
defined or rebound after `watch` (`-p plots 1` would shadow an import) that is not declared and not private
(`_...`, which covers IPython's `_i3`/`_3` history names) can only have come from injection: `check` rejects it,
naming the closest declared name. In JupyterLab
nothing is injected and the check passes; running `check` again without re-running `watch` skips the name check
(later cells have defined more names by then) but still validates every value.
"""
from __future__ import annotations

import difflib
import types
from typing import Any, Mapping, Union, get_args, get_origin

__all__ = ["ParamGuard", "watch", "check_value", "closest_name"]


def watch(namespace: Mapping[str, Any]) -> "ParamGuard":
    """Note the names defined before the parameters cell; call in the cell just before it."""
    return ParamGuard(dict(namespace))


class ParamGuard:
    def __init__(self, before: dict[str, Any]):
        self._before: dict[str, Any] | None = before   # name -> object: a reassigned import counts as injected

    def check(self, namespace: dict[str, Any], *, choices: Mapping[str, tuple] | None = None) -> dict[str, Any]:
        """Declared parameters -> values, after rejecting unknown injected names and wrong types or choices.

        `choices` maps a parameter to its valid values (for a list parameter: the valid elements). Ints given for
        float parameters become floats, in the namespace too, so the notebook's globals and the result agree.
        """
        declared = list(namespace.get("__annotations__", {}))
        if not declared:
            raise ValueError("no notebook parameters declared: write the parameters cell as annotated assignments, "
                             "e.g. `lr: float = 1e-3  # help`")
        undeclared_choices = sorted(set(choices or {}) - set(declared))
        if undeclared_choices:   # a notebook bug, not a user error
            raise KeyError(f"choices given for undeclared parameter(s) {undeclared_choices}")
        problems = []
        if self._before is not None:
            extra = sorted(n for n, v in namespace.items()
                           if n not in declared and not n.startswith("_") and v is not self   # `guard = watch()`
                           and (n not in self._before or self._before[n] is not v))
            problems += [_unknown_message(n, declared) for n in extra]
            self._before = None   # see the module docstring: a second check cannot tell injected from later names
        params = {}
        for name in declared:
            if name not in namespace:
                problems.append(f"parameter {name!r} is declared but has no value")
                continue
            try:
                params[name] = namespace[name] = check_value(name, namespace[name], namespace["__annotations__"][name],
                                                             (choices or {}).get(name))
            except (TypeError, ValueError) as e:
                problems.append(str(e))
        if problems:
            raise ValueError("; ".join(problems) + f" (valid parameters: {', '.join(declared)})")
        return params


def closest_name(name: str, valid: list[str]) -> str | None:
    """The declared name a typo most likely meant: the one whose initials it spells out ('learning_rate' -> 'lr'),
    else difflib's closest match (ratio >= 0.6), else None."""
    words = [w for w in name.lower().split("_") if w]
    if len(words) > 1:
        initials = "".join(w[0] for w in words)
        if initials in valid:
            return initials
    match = difflib.get_close_matches(name, valid, n=1, cutoff=0.6)
    return match[0] if match else None


def _unknown_message(name: str, declared: list[str]) -> str:
    guess = closest_name(name, declared)
    hint = f"did you mean {guess!r}?" if guess else "no declared parameter is close"
    return f"unknown notebook parameter {name!r} ({hint})"


def check_value(name: str, value: Any, annotation: Any, choices: tuple | None = None) -> Any:
    """`value` checked against a parameter's type annotation (and choices); returns it, ints widened for floats.

    A list parameter must be non-empty and without repeats (a notebook loops over it: `seeds=[]` would train
    nothing, `seeds=[0, 0]` one run twice under one label)."""
    tp = _resolve(annotation)
    ok, out = _match(value, tp)
    if not ok:
        hint = " (papermill -p passes text: give lists and dicts with -y or -f YAML)" if isinstance(value, str) else ""
        raise TypeError(f"parameter {name}={value!r} has type {type(value).__name__}, expected {_type_name(tp)}{hint}")
    if choices is not None:
        items = out if isinstance(out, list) else [out]
        bad = [v for v in items if v not in choices]
        if bad:
            raise ValueError(f"parameter {name}={value!r}: {', '.join(map(repr, bad))} invalid; "
                             f"valid choices: {tuple(choices)}")
    if isinstance(out, list):
        if not out:
            raise ValueError(f"parameter {name}=[] is empty"
                             + (f"; valid choices: {tuple(choices)}" if choices else ""))
        repeats = sorted({repr(v) for i, v in enumerate(out) if v in out[:i]})
        if repeats:
            raise ValueError(f"parameter {name}={value!r} repeats {', '.join(repeats)}")
    return out


def _resolve(annotation: Any) -> Any:
    if isinstance(annotation, str):   # a quoted annotation, e.g. "Optional[int]"
        import typing

        return eval(annotation, {**vars(typing), "list": list, "dict": dict})   # eval: our own notebooks' annotations
    return annotation


def _match(value: Any, tp: Any) -> tuple[bool, Any]:
    origin = get_origin(tp)
    if tp is Any:
        return True, value
    if tp is None or tp is type(None):
        return value is None, value
    if origin in (Union, types.UnionType):
        for option in get_args(tp):
            ok, out = _match(value, option)
            if ok:
                return True, out
        return False, value
    if origin is list:
        if not isinstance(value, (list, tuple)):
            return False, value
        (item_tp,) = get_args(tp) or (Any,)
        out = []
        for v in value:
            ok, o = _match(v, item_tp)
            if not ok:
                return False, value
            out.append(o)
        return True, out
    if tp is bool:
        return isinstance(value, bool), value
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool), value
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return True, float(value)
        if isinstance(value, str):   # YAML 1.1 reads "3e-4" (no dot) as text, as TrainConfig also accepts
            try:
                return True, float(value)
            except ValueError:
                pass
        return False, value
    if tp is dict or origin is dict:
        return isinstance(value, Mapping), dict(value) if isinstance(value, Mapping) else value
    if isinstance(tp, type):
        return isinstance(value, tp), value
    raise TypeError(f"unsupported parameter annotation {tp!r}")


def _type_name(tp: Any) -> str:
    if get_origin(tp) in (Union, types.UnionType):
        return " | ".join(_type_name(t) for t in get_args(tp))
    if tp is type(None):
        return "None"
    return getattr(tp, "__name__", None) if get_origin(tp) is None else str(tp).replace("typing.", "")
