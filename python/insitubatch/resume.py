"""Exact mid-epoch resume from a few integers.

An epoch's order is a pure function of ``(seed, epoch)`` (and the view: split, shuffling,
share), and batches are cut positionally over that order. So where a pass stands is one
number, the rows it has delivered; a pass that starts from a saved cursor recomputes the
order, drops the rows before the cursor and yields, batch for batch, what the uninterrupted
pass would have yielded next. No sample list is saved.

A view's state is::

    {"format": 1, "split": "train", "shuffled": True, "share": [0, 1], "seed": 0,
     "block_chunks": 16, "epoch": 3, "cursor": 640, "world_size": 1, "history": []}

``cursor`` counts the rows of the epoch already delivered (a multiple of the batch size,
except at the end of the epoch); ``share`` is the view's ``shard(index, count)`` (a rank's
share of a data-parallel job: ``[rank, world_size]``). ``history`` lists the earlier world
sizes of the epoch and the cursor each stopped at: a job resumed under another world size
deals what every old rank had left, whole chunks each, to the new ranks (:func:`redeal`),
so no row is seen twice in the epoch.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping, Sequence

import numpy as np

from . import arguments
from .errors import InvalidArgumentError, InvalidTypeError

logger = logging.getLogger("insitubatch")

FORMAT = 1
_KEYS = ("format", "split", "shuffled", "share", "seed", "block_chunks", "epoch", "cursor", "world_size")  # + history

# (split, shuffled, share): which pass a cursor belongs to.
ViewKey = tuple[str, bool, tuple[int, int]]


# The earlier world sizes of an epoch and where each left it: [(world_size, cursor), ...].
History = list[tuple[int, int]]


def make_state(key: ViewKey, *, seed: int, block_chunks: int, epoch: int, cursor: int,
               world_size: int = 1, history: Sequence[tuple[int, int]] = (), draw: str = "") -> dict[str, Any]:
    """``draw``: how samples are drawn beyond whole fields (patches, filters), which a cursor
    also depends on; stored only when not empty."""
    split, shuffled, share = key
    state = {"format": FORMAT, "split": split, "shuffled": shuffled, "share": list(share), "seed": seed,
             "block_chunks": block_chunks, "epoch": epoch, "cursor": cursor, "world_size": world_size,
             "history": [list(h) for h in history]}
    if draw:
        state["draw"] = draw
    return state


def _int(state: Mapping[str, Any], name: str, lo: int = 0) -> int:
    return _integer(state[name], repr(name), lo)


def _integer(value: Any, what: str, lo: int = 0) -> int:
    return arguments.integer(f"resume state: {what}", value, (lo, None))


def check_state(state: Any, key: ViewKey, *, seed: int, block_chunks: int,
                world_size: int = 1, draw: str = "") -> tuple[int, int, History]:
    """``(epoch, cursor, history)`` of a state saved by :func:`make_state` for the same view
    of a dataset built the same way; anything else raises naming the field. A rank's state
    from a job of another world size is taken too (every rank stood at the same step): the
    saved world size and cursor join the history and this rank starts the rest at 0."""
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
    saved = (state["split"], bool(state["shuffled"]), (_integer(saved_share[0], "share[0]"), _integer(saved_share[1], "share[1]", 1)))
    saved_world = _int(state, "world_size", 1)
    history = _history(state.get("history", []))
    rank_views = saved[2][1] == saved_world and key[2][1] == world_size
    if saved_world != world_size and rank_views and saved[:2] == key[:2]:
        saved = key  # another world size: any rank's state says where every rank stood
        history = history + [(saved_world, _int(state, "cursor"))]
    if saved != key:
        raise InvalidArgumentError(
            f"resume state belongs to view {saved[0]!r} (shuffled={saved[1]}, share {list(saved[2])}), not to"
            f" {split!r} (shuffled={shuffled}, share {list(share)})")
    for name, have in (("seed", seed), ("block_chunks", block_chunks)):
        if _int(state, name) != have:
            raise InvalidArgumentError(
                f"resume state was saved with {name}={state[name]}, this dataset has {name}={have}: the epoch"
                " order differs, so the saved cursor means other samples")
    if str(state.get("draw", "")) != draw:
        raise InvalidArgumentError(
            f"resume state was saved drawing samples as {state.get('draw') or 'whole fields'!r}, this dataset draws"
            f" {draw or 'whole fields'!r}: the saved cursor means other samples")
    if saved_world != world_size and not history:
        raise InvalidArgumentError(
            f"resume state was saved by a job of world_size={saved_world} for share {list(state['share'])},"
            f" this view is share {list(share)} of world_size={world_size}")
    cursor = 0 if saved_world != world_size else _int(state, "cursor")
    return _int(state, "epoch"), cursor, history


def _history(value: Any) -> History:
    if not isinstance(value, (list, tuple)):
        raise InvalidArgumentError(f"resume state: 'history' must be a list of [world_size, cursor], got {value!r}")
    out: History = []
    for entry in value:
        if not isinstance(entry, (list, tuple)) or len(entry) != 2:
            raise InvalidArgumentError(f"resume state: a 'history' entry must be [world_size, cursor], got {entry!r}")
        out.append((_integer(entry[0], "a history world_size", 1), _integer(entry[1], "a history cursor")))
    return out


def redeal(remainders: list[tuple[np.ndarray, np.ndarray]], world_size: int,
           block_chunks: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """What ``len(remainders)`` ranks had left of an epoch, dealt to ``world_size`` ranks:
    rows grouped by chunk (in their order, each chunk whole to one rank), chunk groups
    dealt round robin, ``block_chunks`` groups a block."""
    rows = np.concatenate([r for r, _ in remainders]) if remainders else np.zeros((0, 2), np.int64)
    rows = rows.reshape(-1, 2)
    chunks, first, inverse = np.unique(rows[:, 0], return_index=True, return_inverse=True)
    group_of_chunk = np.empty(len(chunks), dtype=np.int64)
    group_of_chunk[np.argsort(first, kind="stable")] = np.arange(len(chunks))
    group = group_of_chunk[inverse]  # each row's chunk group, in order of first appearance
    out = []
    for rank in range(world_size):
        mine = np.flatnonzero(group % world_size == rank)
        mine = mine[np.argsort(group[mine], kind="stable")]  # group by group, rows in their order
        groups = group[mine]
        starts = np.flatnonzero(np.r_[True, groups[1:] != groups[:-1]]) if len(mine) else np.zeros(0, np.int64)
        bounds = np.r_[starts[::block_chunks], len(mine)].astype(np.int64)
        out.append((np.ascontiguousarray(rows[mine]), np.unique(np.r_[0, bounds])))
    return out


def skip_rows(rows: np.ndarray, bounds: np.ndarray, cursor: int) -> tuple[np.ndarray, np.ndarray]:
    """The order from row ``cursor`` on: the block the cursor falls in starts there."""
    return rows_between(rows, bounds, cursor, len(rows))


def rows_between(rows: np.ndarray, bounds: np.ndarray, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``[start, stop)`` of an order, its block bounds cut to them (a block cut at
    ``start`` begins there; one cut at ``stop`` ends there)."""
    start, stop = min(start, len(rows)), min(stop, len(rows))
    cut = np.minimum(np.asarray(bounds, dtype=np.int64), stop) - start
    return np.ascontiguousarray(rows[start:stop]), np.concatenate([[0], cut[cut > 0]]).astype(np.int64)


class Progress:
    """Where each view of a dataset stands: the rows its passes delivered in an epoch, the
    cursors a load asked for, and the earlier world sizes of the epoch. The dataset keeps
    one; a pass reports to it through its context."""

    def __init__(self, *, seed: int, block_chunks: int, rank: int, world_size: int, draw: str = "") -> None:
        self._seed, self._block_chunks, self._draw = seed, block_chunks, draw
        self._rank, self._world_size = rank, world_size
        self._delivered: dict[ViewKey, tuple[int, int]] = {}  # view -> (epoch, rows)
        self._resume_at: dict[ViewKey, tuple[int, int, History]] = {}
        self._history: dict[ViewKey, tuple[int, History]] = {}  # an epoch's earlier world sizes

    def _check(self, state: Any, key: ViewKey) -> tuple[int, int, History]:
        return check_state(state, key, seed=self._seed, block_chunks=self._block_chunks, draw=self._draw,
                           world_size=self._world_size)

    def view_state(self, key: ViewKey, epoch: int) -> dict[str, Any]:
        at_epoch, cursor = self._delivered.get(key, (epoch, 0))
        if at_epoch != epoch:  # the view has not run in this epoch yet
            cursor = 0
        seen_epoch, history = self._history.get(key, (epoch, []))
        history = history if seen_epoch == epoch else []
        if key in self._resume_at and self._resume_at[key][0] == epoch:
            _, cursor, history = self._resume_at[key]  # loaded, not yet iterated: still where it was
        return make_state(key, seed=self._seed, block_chunks=self._block_chunks, epoch=epoch, cursor=cursor, draw=self._draw,
                          world_size=self._world_size, history=history)

    def check_view(self, key: ViewKey, state: Any) -> tuple[ViewKey, tuple[int, int, History]]:
        """One view's saved state, checked against this dataset (nothing is taken yet)."""
        return key, self._check(state, key)

    def state_dict(self, epoch: int) -> dict[str, Any]:
        keys = sorted(set(self._delivered) | set(self._resume_at), key=repr)
        return {"format": FORMAT, "epoch": epoch, "views": [self.view_state(k, epoch) for k in keys]}

    def check_state_dict(self, state: Any) -> list[tuple[ViewKey, tuple[int, int, History]]]:
        """Every view of a dataset's saved state, checked (nothing is taken yet)."""
        if not isinstance(state, Mapping) or "views" not in state or "epoch" not in state:
            raise InvalidTypeError("load_state_dict takes what InSituDataset.state_dict() returned")
        views = state["views"]
        if not isinstance(views, (list, tuple)):
            raise InvalidArgumentError("resume state: 'views' must be a list of view states")
        checked = []
        for view in views:
            if not isinstance(view, Mapping) or not {"split", "shuffled", "share"} <= set(view):
                raise InvalidArgumentError(f"resume state: a view entry is not a view state: {view!r}")
            key: ViewKey = (view["split"], bool(view["shuffled"]), tuple(view["share"]))
            if view.get("world_size") != self._world_size:
                key = (key[0], key[1], (self._rank, self._world_size))  # another job's rank: this rank's view
            checked.append((key, self._check(view, key)))
        return checked

    def take(self, checked: list[tuple[ViewKey, tuple[int, int, History]]]) -> None:
        """Each view's next pass starts where its checked state stood."""
        for key, resumed in checked:
            self._resume_at[key] = resumed

    def start(self, key: ViewKey, epoch: int) -> tuple[int, History]:
        """``(cursor, history)`` a new pass of the view starts from in ``epoch``: a loaded
        state's, once (one of another epoch is dropped, with a warning), else the start."""
        loaded_epoch, cursor, history = self._resume_at.pop(key, (epoch, 0, []))
        if loaded_epoch != epoch:
            logger.warning("a resume state for epoch %d was loaded, but the dataset is at epoch %d:"
                           " the pass starts at the beginning", loaded_epoch, epoch)
            cursor, history = 0, []
        self._history[key] = (epoch, history)
        return cursor, history

    def delivered(self, key: ViewKey, epoch: int, rows: int) -> None:
        """A pass of the view has delivered ``rows`` of ``epoch`` (its start included)."""
        self._delivered[key] = (epoch, rows)
