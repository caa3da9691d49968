"""Argument checks for the public constructors of both packages (insitubatch and
planfetch), the one table of their limits and the string options' accepted values.

Every check raises an :class:`~insitubatch.errors.InSituError` subclass naming the
argument, the value and what is accepted, at construction — never later, inside a pass.
One class per mistake: a value of the wrong type is an
:class:`~insitubatch.errors.InvalidTypeError` (also a ``TypeError``), a value of the right
type out of range or not among the choices an
:class:`~insitubatch.errors.InvalidArgumentError` (also a ``ValueError``); the first
derives from the second, so ``except InvalidArgumentError`` catches both.
``docs/limits.md`` is this table in prose.
"""

from __future__ import annotations

import math
import numbers
import operator
from typing import Any, Literal, get_args

import numpy as np

from .errors import InvalidArgumentError, InvalidTypeError

#: name -> (smallest, largest) accepted value. Past these a value cannot work (a thread or
#: connection storm, a queue no machine holds) or means a typo. max_inflight and the thread
#: counts are the engine's own (EngineConfig, engine/engine.h).
LIMITS: dict[str, tuple[int, int]] = {
    "block_chunks": (1, 2**31 - 1),
    "seed": (0, 2**64 - 1),        # numpy's PCG64 keys take unsigned 64-bit words
    "epoch": (0, 2**64 - 1),
    "iterations": (1, 1024),
    "cache_budget_bytes": (1, 2**63 - 1),
}

# The string options, typed for signatures; CHOICES holds their values for the checks.
OnBadChunk = Literal["raise", "nan"]
Eviction = Literal["next_use", "lru"]
Revalidate = Literal["open", "first_use", "never"]
Plan = Literal["shuffle", "stratified", "balanced"]
Remainder = Literal["drop", "pad"]
Split = Literal["train", "val", "test"]
PruneMode = Literal["window", "pressure"]
PruneBackend = Literal["meta", "scan"]
PatchMode = Literal["grid", "random"]
PatchEdges = Literal["inside", "cover", "pad"]

CHOICES: dict[str, tuple[str, ...]] = {
    "on_bad_chunk": get_args(OnBadChunk),
    "eviction": get_args(Eviction),
    "revalidate": get_args(Revalidate),
    "plan": get_args(Plan),
    "remainder": get_args(Remainder),
    "split": get_args(Split),
    "prune_mode": get_args(PruneMode),
    "prune_backend": get_args(PruneBackend),
    "patch_mode": get_args(PatchMode),
    "patch_edges": get_args(PatchEdges),
}


def integer(name: str, value: Any, limits: tuple[int, int | None] | None = None) -> int:
    """``value`` as an int within ``limits`` (default ``LIMITS[name]``, else a positive
    int64; an upper bound of None: no upper bound). Python and numpy integers (anything with
    ``__index__``) are taken; a bool, a float or anything else that is not an integer is
    refused rather than converted."""
    lo, hi = limits if limits is not None else LIMITS.get(name, (1, 2**63 - 1))
    accepted = f"in [{lo}, {hi}]" if hi is not None else f">= {lo}"
    number: int | None = None
    if not isinstance(value, (bool, np.bool_)):
        try:
            number = operator.index(value)
        except TypeError:
            pass
    if number is None:
        raise InvalidTypeError(f"{name} must be an integer {accepted}, got {value!r} ({type(value).__name__})")
    if number < lo or (hi is not None and number > hi):
        raise InvalidArgumentError(f"{name} must be {accepted}, got {number}")
    return number


def flag(name: str, value: Any) -> bool:
    """True or False (numpy booleans too); anything else is refused, not coerced."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise InvalidTypeError(f"{name} must be True or False, got {value!r}")


def number(name: str, value: Any, lo: float, hi: float | None = None, *, open_lo: bool = False) -> float:
    """A finite real number (not a bool) in ``[lo, hi]`` (``(lo, hi]`` with ``open_lo``;
    no upper bound when ``hi`` is None)."""
    if hi is None:
        accepted = f"{'>' if open_lo else '>='} {lo:g}"
    else:
        accepted = f"in {'(' if open_lo else '['}{lo:g}, {hi:g}]"
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise InvalidTypeError(f"{name} must be a number {accepted}, got {value!r} ({type(value).__name__})")
    real = float(value)
    if not math.isfinite(real):
        raise InvalidArgumentError(f"{name} must be a number {accepted}, got {real!r} (not finite)")
    if real < lo or (open_lo and real == lo) or (hi is not None and real > hi):
        raise InvalidArgumentError(f"{name} must be a number {accepted}, got {real!r}")
    return real


def finite_fraction(name: str, value: Any) -> float:
    """A real number in [0, 1]."""
    return number(name, value, 0.0, 1.0)


def choice(name: str, value: Any, options: tuple[str, ...] | None = None) -> str:
    """One of ``options`` (default ``CHOICES[name]``), compared exactly."""
    options = options if options is not None else CHOICES[name]
    if len(options) == 2:
        accepted = f'"{options[0]}" or "{options[1]}"'
    else:
        accepted = f"one of {', '.join(map(repr, options))}"
    if not isinstance(value, str):
        raise InvalidTypeError(f"{name} must be {accepted}, got {value!r} ({type(value).__name__})")
    if value not in options:
        raise InvalidArgumentError(f"{name} must be {accepted}, got {value!r}")
    return value


def text(name: str, value: Any) -> str:
    """A non-empty single-line string. The message names the type only: the value may be
    a credential."""
    if not isinstance(value, str):
        raise InvalidTypeError(f"{name} must be a string, got {type(value).__name__}")
    if not value:
        raise InvalidArgumentError(f"{name} must not be empty")
    if "\x00" in value or "\n" in value or "\r" in value:
        raise InvalidArgumentError(f"{name} contains a NUL or line break")
    return value


__all__ = [
    "CHOICES", "Eviction", "LIMITS", "OnBadChunk", "PatchEdges", "PatchMode", "Plan", "PruneBackend", "PruneMode",
    "Remainder", "Revalidate", "Split",
    "choice", "finite_fraction", "flag", "integer", "number", "text",
]
