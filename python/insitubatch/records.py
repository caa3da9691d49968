"""Data records handed to users: Batch, DecodedChunk, ChunkRead, StoredChunkRead."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np


@dataclass
class Batch:
    """One batch: ``arrays[label]`` is ``(batch, *field)``; row ``i`` of every label shares
    the anchor ``sample_indices[i]`` and reads ``sample_indices[i] + offsets[label]``.

    The arrays own C++ buffers (no copy); each buffer returns to the engine's recycling
    pool only after every reference to it (numpy, torch, JAX) is gone.
    """

    arrays: dict[str, np.ndarray]
    # Empty when a batch transform builds a Batch without provenance (as the original takes).
    sample_indices: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    offsets: dict[str, int] = field(default_factory=dict)
    # Patch samples: row i's patch origin along the patch dimensions, (rows, len(dims)),
    # and those dimensions' names; None without patches.
    patch_origins: np.ndarray | None = None
    patch_dims: tuple[str, ...] = ()
    # on_bad_chunk="nan": for each label some of whose rows were filled in for a bad chunk
    # (NaN for floats, the fill value for integers, bools, records and text), a bool per
    # row, True where its values came (even in part) from such a chunk. Empty otherwise.
    filled: dict[str, np.ndarray] = field(default_factory=dict)

    def read_indices(self, label: str) -> np.ndarray:
        """The sample-axis index each row of ``label`` was read from."""
        return self.sample_indices + self.offsets.get(label, 0)

    def stack(self, labels: Sequence[str], axis: int = 1) -> np.ndarray:
        """``np.stack`` of the listed labels, e.g. ``(B, 3, H, W)`` for three fields."""
        return np.stack([self.arrays[label] for label in labels], axis=axis)

    def __len__(self) -> int:
        """Rows in the batch (the last of an epoch is short): the anchors, or without them
        the rows of the first array."""
        n = int(self.sample_indices.shape[0])
        if n == 0 and self.arrays:
            return int(np.shape(next(iter(self.arrays.values())))[0])
        return n

    def __repr__(self) -> str:  # shapes, not values: a batch prints in one line
        fields = ", ".join(f"{k}: {a.dtype}{list(a.shape)}" for k, a in self.arrays.items())
        idx = self.sample_indices
        first = f", samples {int(idx[0])}..." if len(idx) else ""
        return f"Batch({len(self)} rows; {fields}{first})"


@dataclass(frozen=True)
class ChunkRead:
    array: str
    chunk_index: int


@dataclass(frozen=True)
class StoredChunkRead:
    array: str
    chunk_index: int
    inner_coord: tuple[int, ...]
    # Why its bytes did not decode (the codec's error); not part of its identity.
    reason: str = field(default="", compare=False)

    @property
    def coords(self) -> tuple[int, ...]:
        return (self.chunk_index, *self.inner_coord)


@dataclass
class DecodedChunk:
    """One decoded outer chunk of one variable, sample-first (chunk transforms see this)."""

    read: ChunkRead
    data: np.ndarray
    sample_offset: int


__all__ = ["Batch", "ChunkRead", "DecodedChunk", "StoredChunkRead"]
