"""User errors versus bugs: the exception classes that mean "what was asked for cannot be done as asked".

Validation code raises a `UserError` subclass for a mistake in the input (config value, YAML file, run
directory, checkpoint file); `altgrad train` prints it as one line `altgrad: error: ...` and exits 2 (the
argparse convention), while any other exception is a bug and keeps its traceback. Each class also derives
from the builtin its callers already catch (ValueError, TypeError, RuntimeError), so `except ValueError`
code keeps working.
"""
from __future__ import annotations

import difflib
import os
from typing import Any, Callable, Mapping


class UserError(Exception):
    """Base of every error caused by the input rather than by the code; its message is one line saying
    what is wrong, naming the bad value / file and what would be valid."""


class ConfigError(UserError, ValueError):
    """A bad configuration or input value (TrainConfig field, recipe, corpus, tokenizer, device, YAML file)."""


class ConfigTypeError(ConfigError, TypeError):
    """A configuration value of the wrong type (TrainConfig.n_layer='two')."""


class SizeWarning(UserWarning):
    """A run that fits but will be very large or slow (see altgrad_lib.training.preflight.estimate_memory)."""


def check_keys(cls: type, d: "Mapping[str, object]", what: str | None = None) -> list[str]:
    """The init field names of dataclass `cls` (a field built in __post_init__ is no key); raises one line naming
    the unknown keys of `d` and the valid ones (the check every config's from_dict makes before `cls(**d)`)."""
    import dataclasses

    valid = [f.name for f in dataclasses.fields(cls) if f.init]
    unknown = sorted(set(d) - set(valid))
    if unknown:
        raise ValueError(f"unknown {what or cls.__name__} key(s) {unknown}; valid keys: {', '.join(valid)}")
    return valid


def did_you_mean(value: object, choices: "tuple[str, ...] | list[str]") -> str:
    """'; did you mean 'x'?' when one of `choices` is close to `value` (difflib's default cutoff), else ''."""
    near = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1)
    return f"; did you mean {near[0]!r}?" if near else ""


def invalid(name: str, value: Any, valid: Any, cls: type[Exception] = ValueError) -> Exception:
    """The one "bad value" error, one line: `<name>=<value> is invalid[; did you mean 'x'?]; valid choices: (...)`
    for a tuple / list of choices, `...; valid: <valid>` for a description ("an int >= 1"). `cls`: ConfigError
    where the value is a config key's."""
    if isinstance(valid, (tuple, list)):
        return cls(f"{name}={value!r} is invalid{did_you_mean(value, valid)}; valid choices: {tuple(valid)}")
    return cls(f"{name}={value!r} is invalid; valid: {valid}")


def check_choice(name: str, value: Any, choices: tuple | list, cls: type[Exception] = ValueError) -> None:
    """Raise invalid(...) unless `value` is one of `choices`."""
    if value not in choices:
        raise invalid(name, value, choices, cls)


def number_arg(flag: str, lo: float, hi: float | None = None, kind: type = int,
               valid: str | None = None) -> Callable[[str], Any]:
    """The argparse `type=` of a numeric flag: `kind` (int or float, finite) in [lo, hi]. Anything else (negative,
    absurdly large, not a number) raises a UserError naming the flag, the value and what is valid; argparse lets it
    through (it turns only ValueError / TypeError into its usage message), so `altgrad` prints it as its one error
    line and exits 2, before the command computes anything. `valid`: the description, when a bare range says less."""
    def parse(text: str) -> Any:
        try:
            v = kind(text)
        except ValueError:
            v = None
        if v is None or v != v or v in (float("inf"), float("-inf")) or v < lo or (hi is not None and v > hi):
            what = valid or (f"{'an int' if kind is int else 'a number'} >= {lo}" if hi is None
                             else f"{'an int' if kind is int else 'a number'} in [{lo}, {hi}]")
            raise UserError(f"{flag}={text} is invalid; valid: {what}")
        return v

    parse.__name__ = kind.__name__   # what argparse calls the type in its own messages
    return parse


class ProcessMode:
    """A process-wide mode: the value set in code (`set`; None = unset), else $`env`, else `default`. A value
    outside `choices` from either raises one line naming it and the valid ones."""

    def __init__(self, what: str, env: str, choices: "tuple[str, ...]", default: str):
        self.what, self.env, self.choices, self.default = what, env, choices, default
        self.chosen: str | None = None

    def set(self, mode: str | None) -> None:
        if mode is not None and mode not in self.choices:
            raise ConfigError(f"{self.what} {mode!r} is invalid; valid choices: {', '.join(self.choices)}")
        self.chosen = mode

    def get(self) -> str:
        if self.chosen is not None:
            return self.chosen
        value = os.environ.get(self.env, "").strip() or self.default
        if value not in self.choices:
            raise ConfigError(f"{self.env}={value!r} is invalid; valid choices: {', '.join(self.choices)}")
        return value


def one_line(msg: object) -> str:
    """A message squeezed onto one line (YAML and library errors often span several)."""
    return " ".join(part.strip() for part in str(msg).splitlines() if part.strip())


def exc_line(exc: BaseException, limit: int = 300) -> str:
    """`Type: first line of the message`, at most `limit` characters (a failed job's error in indexes and
    summaries: a worker's traceback-like message must not fill a table cell). A first line that ends in ":" only
    introduces the cause (dynamo's "backend='inductor' raised:"), so the next line joins it."""
    lines = [part.strip() for part in str(exc).splitlines() if part.strip()]
    first = " ".join(lines[:2]) if len(lines) > 1 and lines[0].endswith(":") else (lines or [""])[0]
    return f"{type(exc).__name__}: {first}"[:limit]


class Interrupted(KeyboardInterrupt):
    """A run or study stopped on SIGTERM / SIGINT after writing its state (training/interrupt.py); re-running the
    same command resumes it. A KeyboardInterrupt, so a notebook cell stops as it does on Ctrl-C."""

    def __init__(self, message: str, step: int | None = None):
        super().__init__(message)
        self.step = step
