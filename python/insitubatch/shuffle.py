"""Shuffle helpers: pure index math over the anchor grid.

The shuffled order is the original insitubatch's, draw for draw: numpy's PCG64 keyed by
``(seed, epoch)`` permutes the chunks, and a second generator keyed by
``(seed, epoch, 7919)``, advancing from block to block, shuffles the rows inside each block
of ``block_chunks`` chunks. So the same seed gives the same batches as
the original (and the seed's printed ``shuffle quality 0.99``), on every platform. The
engine builds it in one call, running numpy's permutation loop on those generators' own
bits (a numpy call per block took half a second for a million one-sample chunks, before
the first read); numpy alone builds it where a numpy would draw otherwise (checked once).
Orders are ``(N, 2)`` int64 arrays of ``[chunk_id, within]`` rows; the sample a row names
is ``chunk_id * spc + within``. The sequential order and the quality score come from the
engine's C++ helpers too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np

from . import _compat, _ext, arguments
from .errors import InvalidArgumentError

# The order's sizes are checked by the engine's order code (engine/order.cc): here only
# their type.
_INT64 = (-(2**63), 2**63 - 1)


def _chunk_ids(chunk_ids: Any) -> np.ndarray:
    ids = np.asarray(chunk_ids)
    if ids.size == 0:
        return np.zeros(0, dtype=np.int64)
    if ids.ndim != 1 or ids.dtype.kind not in "iu":
        raise InvalidArgumentError(
            f"chunk_ids must be a 1-D sequence of integers, got {ids.ndim}-D {ids.dtype}"
        )
    if ids.dtype.kind == "u" and int(ids.max()) > np.iinfo(np.int64).max:
        raise InvalidArgumentError(f"chunk_ids: id {int(ids.max())} does not fit int64")
    return np.ascontiguousarray(ids, dtype=np.int64)


def chunk_permutation(chunk_ids: Any, *, seed: int, epoch: int) -> np.ndarray:
    """A permutation of ``chunk_ids`` keyed by ``(seed, epoch)`` (int64)."""
    ids = _chunk_ids(chunk_ids)
    return np.random.default_rng((arguments.integer("seed", seed), arguments.integer("epoch", epoch))).permutation(ids)


def _rows_of(chunks: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """``[chunk, within]`` rows of ``chunks`` in order, ``lens[i]`` rows for chunk ``i``."""
    within = np.arange(int(lens.sum()), dtype=np.int64) - np.repeat(np.cumsum(lens) - lens, lens)
    return np.stack([np.repeat(chunks, lens), within], axis=1)


def epoch_order(chunk_ids: Any, spc: int, n_samples: int, block_chunks: int, seed: int,
                epoch: int) -> tuple[np.ndarray, np.ndarray]:
    """The shuffled order and its block bounds (``n_blocks + 1`` row offsets), as the
    engine takes them; arguments as :func:`block_shuffled_order`."""
    ids = _chunk_ids(chunk_ids)
    chunk_rng, row_rng = np.random.default_rng((seed, epoch)), np.random.default_rng((seed, epoch, 7919))
    if _native_draws_numpys():
        return _native_order(ids, spc, n_samples, block_chunks, chunk_rng, row_rng)
    _ext.check_order_args(ids, spc, n_samples, block_chunks)  # the engine's own checks
    return _numpy_order(ids, spc, n_samples, block_chunks, chunk_rng, row_rng)


def _numpy_order(ids: np.ndarray, spc: int, n_samples: int, block_chunks: int, chunk_rng: np.random.Generator,
                 row_rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """epoch_order in numpy alone: a numpy call per block (~5 µs each: half a second for a
    million one-sample chunks), so it stands in only where the engine's draws would differ."""
    perm = chunk_rng.permutation(ids)
    # A short final chunk of the array contributes only its real rows.
    lens = np.minimum(spc, n_samples - perm * spc)
    rows = _rows_of(perm, lens)  # every block's rows, blocks in order, not yet shuffled
    starts = np.arange(0, len(perm), block_chunks)
    bounds = np.zeros(len(starts) + 1, dtype=np.int64)
    if len(perm):
        bounds[1:] = np.cumsum(np.add.reduceat(lens, starts))
    # The original shuffles each block's (k, 2) rows in place with one generator shared by
    # the blocks; numpy draws the same swaps for an index array of k, so permuting indices
    # block by block and gathering once gives the same rows, without a copy per block.
    index = [lo + row_rng.permutation(hi - lo) for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist())]
    shuffled = rows[np.concatenate(index)] if index else rows
    return np.ascontiguousarray(shuffled, dtype=np.int64), bounds


def _native_order(ids: np.ndarray, spc: int, n_samples: int, block_chunks: int, chunk_rng: np.random.Generator,
                  row_rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The same order from the engine (engine/order.h ShuffledOrder), which runs numpy's
    permutation loop on numpy's own bit generators: one call for the whole epoch."""
    a, b = chunk_rng.bit_generator, row_rng.bit_generator
    with a.lock, b.lock:
        rows, bounds = _ext.shuffled_order(ids, spc, n_samples, block_chunks, a.capsule, b.capsule)
    return np.asarray(rows), np.asarray(bounds, dtype=np.int64)


_native_ok: bool | None = None


def _native_draws_numpys() -> bool:
    """Whether the engine's shuffled order is this numpy's, checked once per process on a
    small epoch (a shuffled subset of the grid, a short last chunk, blocks of 3)."""
    global _native_ok
    if _native_ok is None:
        ids = np.array([22, 3, 17, 0, 9, 21, 4, 12, 1, 15, 7, 19, 2, 11, 20, 6], dtype=np.int64)
        args = (ids, 3, 67, 3)  # chunk 22 holds one row
        try:
            native = _native_order(*args, np.random.default_rng((1, 2)), np.random.default_rng((1, 2, 7919)))
        except Exception:  # noqa: BLE001  (a numpy whose bit generators have no capsule)
            _native_ok = False
        else:
            plain = _numpy_order(*args, np.random.default_rng((1, 2)), np.random.default_rng((1, 2, 7919)))
            _native_ok = all(np.array_equal(x, y) for x, y in zip(native, plain))
    return _native_ok


@dataclass(eq=False)
class DrawOrder:
    """One epoch's ``(N, 2)`` ``[chunk_id, within]`` draw rows and the blocks holding them:
    ``bounds`` has ``n_blocks + 1`` row offsets, block ``i`` is ``rows[bounds[i]:bounds[i + 1]]``.

    It reads as its rows wherever an array is expected (``np.asarray(order)``, ``order[:, 0]``,
    ``len(order)``); the rows' other attributes (``order.shape``) still work but are
    deprecated: read ``order.rows.shape``.
    """

    rows: np.ndarray
    bounds: np.ndarray

    def __len__(self) -> int:
        return int(len(self.rows))

    @property
    def n_blocks(self) -> int:
        return max(int(len(self.bounds)) - 1, 0)

    def block(self, index: int) -> tuple[int, int]:
        """Half-open row range ``[start, stop)`` of block ``index``."""
        return int(self.bounds[index]), int(self.bounds[index + 1])

    def keep(self, mask: np.ndarray) -> "DrawOrder":
        """The rows ``mask`` keeps, each block narrowed to its survivors (emptied ones dropped)."""
        kept = np.flatnonzero(np.asarray(mask, dtype=bool))
        bounds = np.searchsorted(kept, self.bounds)  # an old offset -> survivors before it
        nonempty = np.concatenate([[True], np.diff(bounds) > 0])
        return DrawOrder(self.rows[kept], bounds[nonempty].astype(np.int64))

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self.rows if dtype is None else self.rows.astype(dtype)

    def __getitem__(self, index: Any) -> Any:
        return self.rows[index]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.rows)

    def __getattr__(self, name: str) -> Any:  # shape, dtype, astype, tolist, ...: the rows' (deprecated)
        if name.startswith("__") or name in ("rows", "bounds"):
            raise AttributeError(name)
        return _compat.rows_attribute(self.rows, name)

    def __repr__(self) -> str:
        return f"DrawOrder({len(self)} rows in {self.n_blocks} blocks)"


def block_shuffled_order(
    chunk_ids: Any, samples_per_chunk: int, n_samples: int, *, block_chunks: int, seed: int, epoch: int
) -> DrawOrder:
    """The epoch's ``(N, 2)`` draw order: every valid sample of ``chunk_ids`` exactly once,
    shuffled within blocks of ``block_chunks`` chunks of the epoch's chunk permutation.
    A short final chunk of the array contributes only its real samples."""
    rows, bounds = epoch_order(chunk_ids, arguments.integer("samples_per_chunk", samples_per_chunk, _INT64),
                               arguments.integer("n_samples", n_samples, _INT64),
                               arguments.integer("block_chunks", block_chunks, _INT64), arguments.integer("seed", seed),
                               arguments.integer("epoch", epoch))
    return DrawOrder(rows, bounds)


def sequential_order(
    chunk_ids: Any, samples_per_chunk: int, n_samples: int, *, block_chunks: int | None = None
) -> DrawOrder:
    """``chunk_ids`` in the given order, samples ascending within each: ``(N, 2)``.

    ``block_chunks`` only groups the rows into blocks inside the engine; the rows
    returned here do not depend on it.
    """
    ids = _chunk_ids(chunk_ids)
    blocks = max(1, len(ids)) if block_chunks is None else arguments.integer("block_chunks", block_chunks, _INT64)
    rows, bounds = _ext.sequential_order(ids, arguments.integer("samples_per_chunk", samples_per_chunk, _INT64),
                                         arguments.integer("n_samples", n_samples, _INT64), blocks)
    return DrawOrder(np.asarray(rows), np.asarray(bounds, dtype=np.int64))


def shuffle_quality(order: Any, samples_per_chunk: int) -> float:
    """How close ``order`` comes to a global shuffle, in ``[0, 1]``.

    ``mean(|diff(rank)|) / (n / 3)`` clipped to 1, with ``rank = chunk * spc + within``;
    ``n / 3`` is the expected mean gap of a uniform random permutation of ``n`` items.
    0.0 for fewer than 2 rows. A heuristic: non-contiguous splits saturate at 1.
    """
    rows = np.asarray(order)
    if rows.size == 0:
        return 0.0
    if rows.ndim != 2 or rows.shape[1] != 2 or rows.dtype.kind not in "iu":
        raise InvalidArgumentError(
            f"order must be an (N, 2) integer array of [chunk, within] rows, got shape"
            f" {rows.shape} {rows.dtype}"
        )
    return float(_ext.shuffle_quality(np.ascontiguousarray(rows, dtype=np.int64),
                                      arguments.integer("samples_per_chunk", samples_per_chunk, _INT64)))


__all__ = ["DrawOrder", "block_shuffled_order", "chunk_permutation", "sequential_order", "shuffle_quality"]
