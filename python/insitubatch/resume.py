"""Exact mid-epoch resume from a few integers.

An epoch's order is a pure function of ``(seed, epoch)`` (and the view: split, shuffling,
share), and batches are cut positionally over that order. So where a pass stands is one
number, the rows it has delivered; a pass that starts from a saved cursor recomputes the
order, drops the rows before the cursor and yields, batch for batch, what the uninterrupted
pass would have yielded next. No sample list is saved.

A view's state is::

    {"format": 1, "split": "train", "shuffled": True, "share": [0, 1], "seed": 0,
     "block_chunks": 16, "epoch": 3, "cursor": 640, "world_size": 1}

``cursor`` counts the rows of the epoch already delivered (a multiple of the batch size,
except at the end of the epoch); ``share`` is the view's ``shard(index, count)`` (a rank's
share of a data-parallel job: ``[rank, world_size]``).
"""

from __future__ import annotations

import operator
from typing import Any, Mapping

import numpy as np

from .errors import InvalidArgumentError, InvalidTypeError

FORMAT = 1
_KEYS = ("format", "split", "shuffled", "share", "seed", "block_chunks", "epoch", "cursor", "world_size")

# (split, shuffled, share): which pass a cursor belongs to.
ViewKey = tuple[str, bool, tuple[int, int]]


def make_state(key: ViewKey, *, seed: int, block_chunks: int, epoch: int, cursor: int,
               world_size: int = 1) -> dict[str, Any]:
    split, shuffled, share = key
    return {"format": FORMAT, "split": split, "shuffled": shuffled, "share": list(share), "seed": seed,
            "block_chunks": block_chunks, "epoch": epoch, "cursor": cursor, "world_size": world_size}


def _int(state: Mapping[str, Any], name: str, lo: int = 0) -> int:
    value = state[name]
    if isinstance(value, bool):
        raise InvalidArgumentError(f"resume state: {name!r} must be an integer, got {value!r}")
    try:
        value = operator.index(value)
    except TypeError:
        raise InvalidArgumentError(f"resume state: {name!r} must be an integer, got {value!r}") from None
    if value < lo:
        raise InvalidArgumentError(f"resume state: {name!r} must be >= {lo}, got {value}")
    return value


def check_state(state: Any, key: ViewKey, *, seed: int, block_chunks: int, world_size: int = 1) -> tuple[int, int]:
    """``(epoch, cursor)`` of a state saved by :func:`make_state` for the same view of a
    dataset built the same way; anything else raises naming the field."""
    if not isinstance(state, Mapping):
        raise InvalidTypeError(f"resume state must be a dict (from state_dict()), got {type(state).__name__}")
    missing = [k for k in _KEYS if k not in state]
    if missing:
        raise InvalidArgumentError(f"resume state lacks {', '.join(map(repr, missing))}: was it saved by state_dict()?")
    if _int(state, "format") != FORMAT:
        raise InvalidArgumentError(f"resume state has format {state['format']!r}; this version reads format {FORMAT}")
    split, shuffled, share = key
    saved_share = state["share"]
    if not isinstance(saved_share, (list, tuple)) or len(saved_share) != 2:
        raise InvalidArgumentError(f"resume state: 'share' must be [index, count], got {saved_share!r}")
    saved = (state["split"], bool(state["shuffled"]), (operator.index(saved_share[0]), operator.index(saved_share[1])))
    if saved != key:
        raise InvalidArgumentError(
            f"resume state belongs to view {saved[0]!r} (shuffled={saved[1]}, share {list(saved[2])}), not to"
            f" {split!r} (shuffled={shuffled}, share {list(share)})")
    for name, have in (("seed", seed), ("block_chunks", block_chunks)):
        if _int(state, name) != have:
            raise InvalidArgumentError(
                f"resume state was saved with {name}={state[name]}, this dataset has {name}={have}: the epoch"
                " order differs, so the saved cursor means other samples")
    if _int(state, "world_size", 1) != world_size:
        raise InvalidArgumentError(
            f"resume state was saved by a job of world_size={state['world_size']}, this one has"
            f" world_size={world_size}: resuming across a change of world size is not supported yet")
    return _int(state, "epoch"), _int(state, "cursor")


def keep_anchors(rows: np.ndarray, bounds: np.ndarray, spc: int, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """The order without rows whose anchor lies outside ``[lo, hi)`` (a window's edges), as
    the engine drops them; block bounds follow."""
    rows = np.asarray(rows, dtype=np.int64).reshape(-1, 2)
    anchors = rows[:, 0] * spc + rows[:, 1]
    keep = (anchors >= lo) & (anchors < hi)
    if keep.all():
        return rows, np.asarray(bounds, dtype=np.int64)
    kept_before = np.concatenate([[0], np.cumsum(keep)])
    return np.ascontiguousarray(rows[keep]), kept_before[np.asarray(bounds, dtype=np.int64)]


def skip_rows(rows: np.ndarray, bounds: np.ndarray, cursor: int) -> tuple[np.ndarray, np.ndarray]:
    """The order from row ``cursor`` on: the block the cursor falls in starts there."""
    bounds = np.asarray(bounds, dtype=np.int64)
    cursor = min(cursor, len(rows))
    shifted = bounds - cursor
    return np.ascontiguousarray(rows[cursor:]), np.concatenate([[0], shifted[shifted > 0]]).astype(np.int64)
