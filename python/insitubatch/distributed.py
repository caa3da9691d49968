"""Ranks: each process of a data-parallel job reads its own whole chunks and takes the same
number of steps as every other.

A dataset with ``world_size > 1`` gives rank ``r`` every ``world_size``-th chunk of each
split (``view.shard(r, world_size)``), so no two ranks fetch one chunk and each rank's cache
holds only its own. Ranks hold different numbers of rows (a chunk count that does not divide,
a short last chunk, window edges), and a collective step that one rank skips hangs the job;
so every rank's pass is cut to one length computed from all ranks' row counts, which every
rank computes alike without communicating:

* ``remainder="drop"`` (the default): every rank yields the steps of the rank with the
  fewest rows, full batches only; the rows past that are not seen this epoch (the order,
  hence what is dropped, changes every epoch).
* ``remainder="pad"``: every rank yields the steps of the rank with the most rows; ranks with
  fewer repeat rows from the start of their own order (their own chunks), so every row of
  the split is seen, a few twice.
"""

from __future__ import annotations

import math
import os
import sys

import numpy as np

from . import arguments
from .errors import InvalidArgumentError, InvalidTypeError
from .resume import rows_between

REMAINDERS = arguments.CHOICES["remainder"]


def resolve(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """``(rank, world_size)``: as given; else torch.distributed's when it is initialised;
    else ``RANK`` / ``WORLD_SIZE``; else JAX's process index and count when JAX is loaded
    and runs several processes; else ``(0, 1)``. Never imports a framework."""
    if (rank is None) != (world_size is None):
        raise InvalidArgumentError("pass rank and world_size together (or neither)")
    if rank is None:
        rank, world_size = _detect()
    try:  # numpy integers too; the range is checked below
        rank, world_size = (arguments.integer(name, value, (-(2**63), 2**63 - 1))
                            for name, value in (("rank", rank), ("world_size", world_size)))
    except InvalidTypeError:
        raise InvalidTypeError(f"rank and world_size must be integers, got {rank!r} and {world_size!r}") from None
    if world_size < 1 or not 0 <= rank < world_size:
        raise InvalidArgumentError(f"rank must be in [0, world_size), got rank={rank}, world_size={world_size}")
    return rank, world_size


def _detect() -> tuple[int, int]:
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return int(dist.get_rank()), int(dist.get_world_size())
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        try:
            return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        except ValueError:
            raise InvalidArgumentError(f"RANK={os.environ['RANK']!r} / WORLD_SIZE={os.environ['WORLD_SIZE']!r}"
                                       " are not integers") from None
    jax = sys.modules.get("jax")
    if jax is not None:
        try:
            count = int(jax.process_count())
        except Exception:  # JAX loaded but no backend: a single process
            count = 1
        if count > 1:
            return int(jax.process_index()), count
    return 0, 1


def target_rows(rows_per_rank: list[int], batch_size: int, remainder: str) -> int:
    """The rows every rank's pass holds: whole batches of the smallest rank (drop), or the
    largest rank's batches, padded (pad)."""
    if remainder == "drop":
        return (min(rows_per_rank) // batch_size) * batch_size
    return math.ceil(max(rows_per_rank) / batch_size) * batch_size


def equalize(rows: np.ndarray, bounds: np.ndarray, target: int) -> tuple[np.ndarray, np.ndarray]:
    """This rank's order cut (or padded from its own start) to ``target`` rows."""
    if len(rows) >= target:
        return rows_between(rows, bounds, 0, target)
    if len(rows) == 0:
        raise InvalidArgumentError("remainder='pad': this rank holds no rows to repeat (more ranks than chunks)")
    repeats = np.resize(np.arange(len(rows)), target - len(rows))  # wraps around this rank's own rows
    padded = np.concatenate([rows, rows[repeats]])
    return np.ascontiguousarray(padded), np.concatenate([np.asarray(bounds, dtype=np.int64), [target]])
