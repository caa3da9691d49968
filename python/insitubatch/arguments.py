"""Argument checks for the public constructors, and the one table of their limits.

Every check raises an :class:`~insitubatch.errors.InSituError` subclass naming the
argument, the value and what is accepted, at construction — never later, inside a pass.
``docs/limits.md`` is this table in prose.
"""

from __future__ import annotations

import math
import numbers
import operator
from typing import Any

import numpy as np

from .errors import InvalidArgumentError

#: name -> (smallest, largest) accepted value. Past these a value cannot work (a thread or
#: connection storm, a queue no machine holds) or means a typo. max_inflight and the thread
#: counts are the engine's own (EngineConfig, engine/engine.h).
LIMITS: dict[str, tuple[int, int]] = {
    "batch_size": (1, 2**31 - 1),
    "block_chunks": (1, 2**31 - 1),
    "prefetch_depth": (1, 1024),
    "seed": (0, 2**64 - 1),        # numpy's PCG64 keys take unsigned 64-bit words
    "epoch": (0, 2**64 - 1),
    "iterations": (1, 1024),
    "cache_budget_bytes": (1, 2**63 - 1),
}


def integer(name: str, value: Any, limits: tuple[int, int] | None = None) -> int:
    """``value`` as an int within ``limits`` (default ``LIMITS[name]``, else a positive
    int64); a bool, a float or anything else that is not an integer is refused rather than
    converted."""
    lo, hi = limits if limits is not None else LIMITS.get(name, (1, 2**63 - 1))
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        try:  # numpy integers and other __index__ types
            if isinstance(value, bool):
                raise TypeError
            value = operator.index(value)
        except TypeError:
            raise InvalidArgumentError(
                f"{name} must be an integer in [{lo}, {hi}], got {value!r} ({type(value).__name__})"
            ) from None
    number = int(value)
    if not lo <= number <= hi:
        raise InvalidArgumentError(f"{name} must be in [{lo}, {hi}], got {number}")
    return number


def flag(name: str, value: Any) -> bool:
    """True or False (numpy booleans too); anything else is refused, not coerced."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise InvalidArgumentError(f"{name} must be True or False, got {value!r}")


def finite_fraction(name: str, value: Any) -> float:
    """A real number in [0, 1]."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidArgumentError(f"{name} must be a number in [0, 1], got {value!r}")
    number = float(value)
    if not math.isfinite(number) or not 0.0 <= number <= 1.0:
        raise InvalidArgumentError(f"{name} must be a finite number in [0, 1], got {number!r}")
    return number


def machine_memory_bytes() -> int:
    """The memory this process may use: physical RAM, or the cgroup limit if lower. The
    engine's own figure (engine/sizing), so a requested budget is checked against what the
    engine's automatic budget grows toward."""
    from . import _ext  # lazy: arguments loads without the extension in its own tests

    return int(_ext.machine_memory_bytes())


__all__ = ["LIMITS", "finite_fraction", "flag", "integer", "machine_memory_bytes"]
