"""Chunk-granular train/val/test splits and window anchor ranges.

A split is a set of whole chunks on the *anchor grid* (the manifest's
``sample_chunk_size``): no sample straddles two splits, every read serves one split, and
autocorrelated neighbours stay together. ``contiguous=True`` (the default) keeps each
split a run of consecutive chunks, which is what time series need.
"""

from __future__ import annotations

import enum
import json
import math
import os
from collections import Counter
from collections.abc import Sequence
from typing import Any
from dataclasses import asdict, dataclass, field

import numpy as np

from . import arguments
from .errors import InvalidArgumentError, InvalidTypeError

_SPLITS = arguments.CHOICES["split"]


class SplitName(enum.StrEnum):
    TRAIN = "train"
    VAL = "val"
    TEST = "test"


_INT64 = (-(2**63), 2**63 - 1)


def _split_key(split: str) -> str:
    key = str(split.value if isinstance(split, SplitName) else split)
    if key not in _SPLITS:
        raise InvalidArgumentError(f"unknown split {split!r}; expected one of {', '.join(_SPLITS)}")
    return key


def _plain_ids(ids: Any, n_chunks: int) -> list[int] | None:
    """``ids`` as a list when they are plainly valid -- Python ints (not bools) or a 1-D
    integer array, all in ``[0, n_chunks)`` -- in one pass instead of an argument check per
    id (a million-chunk split's manifest spent about a second there); None sends them through
    the per-id checks and their messages."""
    out: list[int] | None
    if isinstance(ids, np.ndarray):
        out = ids.tolist() if ids.ndim == 1 and ids.dtype.kind in "iu" else None
    elif isinstance(ids, range) or (isinstance(ids, (list, tuple)) and not set(map(type, ids)) - {int}):
        out = list(ids)
    else:
        out = None
    if out is None or (out and not (0 <= min(out) and max(out) < n_chunks)):
        return None
    return out


@dataclass
class SplitManifest:
    """Which anchor chunks belong to which split. A plain, JSON-serializable record.

    ``n_chunks`` is the array's full chunk count (not the ``sample_range`` subset);
    ``sample_chunk_size`` and ``n_samples`` define the anchor grid the chunk ids live on.
    """

    n_chunks: int
    sample_chunk_size: int
    n_samples: int
    chunks: dict[str, list[int]] = field(default_factory=lambda: {s: [] for s in _SPLITS})
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("n_chunks", "sample_chunk_size", "n_samples", "seed"):
            setattr(self, name, arguments.integer(f"SplitManifest.{name}", getattr(self, name),
                                                  arguments.LIMITS["seed"] if name == "seed" else _INT64))
        if self.sample_chunk_size < 1 or self.n_samples < 0:
            raise InvalidArgumentError(
                f"SplitManifest: invalid grid (sample_chunk_size={self.sample_chunk_size},"
                f" n_samples={self.n_samples})"
            )
        expected = math.ceil(self.n_samples / self.sample_chunk_size)
        if self.n_chunks != expected:
            raise InvalidArgumentError(
                f"SplitManifest: n_chunks={self.n_chunks} does not match"
                f" ceil(n_samples / sample_chunk_size) ="
                f" ceil({self.n_samples} / {self.sample_chunk_size}) = {expected}"
            )
        if not isinstance(self.chunks, dict):
            raise InvalidArgumentError(
                f"SplitManifest: chunks must be a dict, got {type(self.chunks).__name__}"
            )
        chunks: dict[str, list[int]] = {s: [] for s in _SPLITS}
        seen: set[int] = set()
        for name, ids in self.chunks.items():
            key = _split_key(name)
            if not isinstance(ids, (list, tuple, np.ndarray, range)):
                raise InvalidArgumentError(
                    f"SplitManifest: chunks[{key!r}] must be a list of chunk ids"
                )
            plain = _plain_ids(ids, self.n_chunks)
            if plain is None:
                chunks[key] = [arguments.integer(f"SplitManifest.chunks[{key!r}]", c, _INT64) for c in ids]
                bad = [c for c in chunks[key] if not 0 <= c < self.n_chunks]
                if bad:
                    raise InvalidArgumentError(
                        f"SplitManifest: chunks[{key!r}] has ids {bad[:5]} outside [0, {self.n_chunks})"
                    )
            else:
                chunks[key] = plain
            # Splits partition anchors: a chunk listed twice would yield its samples twice.
            # (One set per split; the repeats are counted only to name them.)
            distinct = set(chunks[key])
            if len(distinct) != len(chunks[key]) or not seen.isdisjoint(distinct):
                counts = Counter(chunks[key])
                repeated = sorted(c for c, k in counts.items() if k > 1 or c in seen)
                raise InvalidArgumentError(
                    f"SplitManifest: chunk ids {repeated[:5]} of chunks[{key!r}] are listed"
                    " more than once"
                )
            seen |= distinct
        self.chunks = chunks

    def chunk_ids(self, split: str) -> list[int]:
        """The sorted anchor-chunk ids of ``split``."""
        return list(self.chunks[_split_key(split)])

    def sample_indices(self, split: str, geom: Any = None) -> np.ndarray:
        """Global sample indices of ``split`` (int64, ascending for a sorted chunk list).

        Chunks expand on the manifest's anchor grid; the short final chunk contributes only
        its real samples. ``geom`` (accepted for compatibility) must have the manifest's
        sample-axis length; its own chunking does not matter.
        """
        if geom is not None and geom.n_samples != self.n_samples:
            raise InvalidArgumentError(
                f"manifest sample-axis length {self.n_samples} does not match"
                f" {getattr(geom, 'path', 'the geometry')!r} ({geom.n_samples})"
            )
        spc = self.sample_chunk_size
        starts = np.asarray(self.chunks[_split_key(split)], dtype=np.int64) * spc
        lengths = np.clip(self.n_samples - starts, 0, spc)
        offsets = np.cumsum(lengths) - lengths  # where each chunk's run starts in the output
        indices: np.ndarray = np.arange(int(lengths.sum()), dtype=np.int64) + np.repeat(starts - offsets, lengths)
        return indices

    def to_json(self, path: str | os.PathLike[str]) -> None:
        with open(os.fspath(path), "w", encoding="utf-8") as f:
            json.dump(asdict(self), f, indent=2)
            f.write("\n")

    @classmethod
    def from_json(cls, path: str | os.PathLike[str]) -> SplitManifest:
        with open(os.fspath(path), encoding="utf-8") as f:
            try:
                data = json.load(f)
            except json.JSONDecodeError as exc:
                raise InvalidArgumentError(
                    f"split manifest {os.fspath(path)!r} is not valid JSON: {exc}"
                ) from exc
        fields = ("n_chunks", "sample_chunk_size", "n_samples", "chunks", "seed")
        if not isinstance(data, dict) or any(k not in data for k in fields):
            raise InvalidArgumentError(
                f"split manifest {os.fspath(path)!r} must be an object with keys"
                f" {', '.join(fields)}"
            )
        return cls(**{k: data[k] for k in fields})


def split_by_chunk(
    geom: Any,
    *,
    fractions: Sequence[float] = (0.8, 0.1, 0.1),
    seed: int = 0,
    contiguous: bool = True,
    sample_range: tuple[int, int] | None = None,
) -> SplitManifest:
    """Partition the anchor chunks of ``geom`` into train/val/test.

    ``sample_range=(start, stop)`` restricts to the chunks overlapping that half-open
    sample range (snapping outward: edge chunks come in whole). Counts are
    ``round(fraction * n)`` for train and val (Python's round), test takes the rest; a
    split may get zero chunks. ``contiguous=False`` permutes the candidates with
    ``numpy.random.default_rng(seed)`` first (only for exchangeable samples).
    """
    if isinstance(fractions, (str, bytes)) or not isinstance(fractions, Sequence):
        raise InvalidArgumentError(f"fractions must be three numbers (train, val, test), got {fractions!r}")
    if len(fractions) != 3:
        raise InvalidArgumentError(f"fractions must be three numbers (train, val, test), got {fractions!r}")
    fractions = tuple(
        arguments.finite_fraction(f"fractions[{i}] ({name})", f)
        for i, (name, f) in enumerate(zip(_SPLITS, fractions))
    )
    if abs(sum(fractions) - 1.0) > 1e-6:
        raise InvalidArgumentError(
            f"fractions must sum to 1.0, got {fractions} (sum {sum(fractions)})"
        )
    seed = arguments.integer("seed", seed)
    contiguous = arguments.flag("contiguous", contiguous)

    spc = geom.sample_chunk_size
    n_samples = geom.n_samples
    if sample_range is None:
        candidates = np.arange(geom.n_chunks, dtype=np.int64)
    else:
        if isinstance(sample_range, (str, bytes)) or not isinstance(sample_range, Sequence) or len(sample_range) != 2:
            raise InvalidTypeError(f"sample_range must be a (start, stop) pair of integers, got {sample_range!r}")
        start, stop = (arguments.integer(f"sample_range[{i}]", v, _INT64) for i, v in enumerate(sample_range))
        if not 0 <= start < stop <= n_samples:
            raise InvalidArgumentError(
                f"sample_range must satisfy 0 <= start < stop <= n_samples ({n_samples}),"
                f" got {sample_range!r}"
            )
        candidates = np.arange(start // spc, -(-stop // spc), dtype=np.int64)
    if not contiguous:
        candidates = np.random.default_rng(seed).permutation(candidates)

    n = len(candidates)
    n_train = round(fractions[0] * n)
    n_val = round(fractions[1] * n)
    parts = (
        candidates[:n_train],
        candidates[n_train : n_train + n_val],
        candidates[n_train + n_val :],
    )
    return SplitManifest(
        n_chunks=geom.n_chunks,
        sample_chunk_size=spc,
        n_samples=n_samples,
        chunks={name: np.sort(part).tolist() for name, part in zip(_SPLITS, parts, strict=True)},
        seed=seed,
    )


def valid_anchor_range(offsets: Sequence[int], n_samples: int) -> tuple[int, int]:
    """Half-open anchor range ``[lo, hi)`` for which every ``anchor + offset`` lies in
    ``[0, n_samples)``; empty (``lo == hi``) when the window is wider than the array."""
    from . import _ext  # the engine's rule (engine/sizing.h); lazy: splits loads first

    keys = [arguments.integer(f"offsets[{i}]", k, _INT64) for i, k in enumerate(offsets)]
    lo, hi = _ext.valid_anchor_range(keys, arguments.integer("n_samples", n_samples, (0, 2**63 - 1)))
    return lo, hi


__all__ = ["SplitManifest", "SplitName", "split_by_chunk", "valid_anchor_range"]
