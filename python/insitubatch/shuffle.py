"""Shuffle helpers (behaviour-spec A.10, B.6): pure index math over the anchor grid.

Thin wrappers over the engine's C++ order builders, so these return exactly the orders
the engine iterates. Orders are ``(N, 2)`` int64 arrays of ``[chunk_id, within]`` rows;
the sample a row names is ``chunk_id * spc + within``.

The block-local shuffle permutes the chunks with an RNG keyed by ``(seed, epoch)``, cuts
the permutation into blocks of ``block_chunks`` chunks and shuffles the rows inside each
block. Orders are deterministic per ``(seed, epoch)`` on every platform; they are not
numpy's PCG64 stream.
"""

from __future__ import annotations

import operator

import numpy as np

from . import _ext
from .errors import InvalidArgumentError

_MAX_U64 = 2**64 - 1


def _chunk_ids(chunk_ids) -> np.ndarray:
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


def _key(name: str, value) -> int:
    try:
        value = operator.index(value)
    except TypeError:
        raise InvalidArgumentError(f"{name} must be an integer, got {value!r}") from None
    if not 0 <= value <= _MAX_U64:
        raise InvalidArgumentError(f"{name} must be in [0, 2**64), got {value}")
    return value


def _int(name: str, value) -> int:
    try:
        return operator.index(value)
    except TypeError:
        raise InvalidArgumentError(f"{name} must be an integer, got {value!r}") from None


def chunk_permutation(chunk_ids, *, seed: int, epoch: int) -> np.ndarray:
    """A permutation of ``chunk_ids`` keyed by ``(seed, epoch)`` (int64)."""
    return _ext.chunk_permutation(_chunk_ids(chunk_ids), _key("seed", seed), _key("epoch", epoch))


def block_shuffled_order(
    chunk_ids, spc: int, n_samples: int, *, block_chunks: int, seed: int, epoch: int
) -> np.ndarray:
    """The epoch's ``(N, 2)`` draw order: every valid sample of ``chunk_ids`` exactly once,
    shuffled within blocks of ``block_chunks`` chunks of the epoch's chunk permutation.
    A short final chunk of the array contributes only its real samples."""
    rows, _ = _ext.block_shuffled_order(
        _chunk_ids(chunk_ids),
        _int("spc", spc),
        _int("n_samples", n_samples),
        _int("block_chunks", block_chunks),
        _key("seed", seed),
        _key("epoch", epoch),
    )
    return rows


def sequential_order(
    chunk_ids, spc: int, n_samples: int, *, block_chunks: int | None = None
) -> np.ndarray:
    """``chunk_ids`` in the given order, samples ascending within each: ``(N, 2)``.

    ``block_chunks`` only groups the rows into blocks inside the engine; the rows
    returned here do not depend on it.
    """
    ids = _chunk_ids(chunk_ids)
    blocks = max(1, len(ids)) if block_chunks is None else _int("block_chunks", block_chunks)
    rows, _ = _ext.sequential_order(ids, _int("spc", spc), _int("n_samples", n_samples), blocks)
    return rows


def shuffle_quality(order, spc: int) -> float:
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
    return float(_ext.shuffle_quality(np.ascontiguousarray(rows, dtype=np.int64), _int("spc", spc)))


__all__ = ["block_shuffled_order", "chunk_permutation", "sequential_order", "shuffle_quality"]
