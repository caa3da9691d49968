"""ZarrWriter: inference outputs written back into Zarr, chunk by chunk, in any order.

A shuffled inference pass hands out samples in an order no output chunk follows. The writer
keeps each output chunk's rows in a buffer until its last row arrives, then encodes the
chunk natively (the array's own codecs) and writes it once, whole, on a small pool of
threads that run without the GIL.

A writer knows which chunks are its own: it records a run identity in the array's
attributes, and resumes only into an array whose identity is its own. There a chunk
already in the store is complete (each is written atomically, once all its rows are in),
so a job killed half way and restarted writes only what is missing. Any other existing
array is refused unless ``mode="w"`` clears it first.
"""

from __future__ import annotations

import concurrent.futures
import datetime
import hashlib
import itertools
import json
import math
import os
import sys
from typing import Any, Literal, Sequence

import numpy as np

from . import _ext, arguments
from .errors import FailedPreconditionError, InvalidArgumentError, InvalidTypeError, ResourceExhaustedError
from .geometry import ArrayGeometry

DEFAULT_BUDGET_BYTES = 256 << 20
#: The array attribute a writer records its run in.
RUN_ATTRIBUTE = "insitubatch_writer"


def _writable_stores(store: Any) -> tuple[Any, Any]:
    """(the native store, the zarr-python face of it) for a writable store or URL."""
    from .stores import as_native_store, store as open_store
    from .zarr_store import ZarrStore

    if isinstance(store, (str, os.PathLike)):
        store = open_store(store, read_only=False)
    native = as_native_store(store)
    if not isinstance(native, _ext.Store):
        raise InvalidTypeError("ZarrWriter writes through an insitubatch store (insitubatch.store(url,"
                               f" read_only=False) or obstore_store(...)), got {type(store).__name__}")
    if not native.writable:
        raise InvalidArgumentError(f"ZarrWriter: {native.describe('')} was opened read-only: open it with"
                                   " read_only=False")
    face = store if isinstance(store, ZarrStore) and not store.read_only else ZarrStore(native)
    return native, face


class ZarrWriter:
    """Writes samples into a Zarr array (sample axis first), one chunk at a time.

    ``ZarrWriter(store, "pred", like=geoms["t2m"])`` creates ``pred`` with the source's
    sample count and chunking (``inner_shape=`` / ``dtype=`` change the field), or pass
    ``shape=``, ``chunks=`` and ``dtype=``; ``compressors=``, ``fill_value=``,
    ``zarr_format=`` and ``dimension_names=`` go to zarr-python's ``create_array``.

    ``run=`` names this run (a model and checkpoint, say); by default it is derived from the
    command line that runs the writer, the source (``like=``) and the output's layout, so
    the same command over the same source resumes itself and another model's command does
    not. It is recorded in the array's attributes. ``mode="a"`` (the default) creates the
    array, or resumes one this run wrote (its complete chunks are skipped), or takes one that
    holds no chunk and records no run (created for it, with the codecs wanted), and refuses
    any other; ``mode="w"`` deletes what is at ``name`` first; ``mode="w-"`` refuses an
    existing array. ``write(sample_indices, values)`` takes batches in any order, each
    sample once; rows are held per chunk under ``budget_bytes``; ``close()`` (or leaving a
    ``with`` block) writes the rest and consolidates the metadata where the store had
    consolidated metadata.
    """

    def __init__(self, store: Any, name: str, *, like: ArrayGeometry | None = None,
                 shape: Sequence[int] | None = None, chunks: Sequence[int] | None = None, dtype: Any = None,
                 inner_shape: Sequence[int] | None = None, compressors: Any = "auto", fill_value: Any = None,
                 zarr_format: int = 3, dimension_names: Sequence[str] | None = None,
                 budget_bytes: int = DEFAULT_BUDGET_BYTES, threads: int | None = None, run: str | None = None,
                 mode: Literal["a", "w", "w-"] = "a") -> None:
        import zarr

        self.name = arguments.text("name", name)
        self.budget_bytes = arguments.integer("budget_bytes", budget_bytes, (1, None))
        threads = min(8, os.cpu_count() or 1) if threads is None else arguments.integer("threads", threads, (1, 256))
        arguments.choice("mode", mode, ("a", "w", "w-"))
        self._native, self._zarr_store = _writable_stores(store)
        shape, chunks, dtype = self._layout(like, shape, chunks, dtype, inner_shape)
        self.run = _default_run(like, shape, chunks, dtype) if run is None else arguments.text("run", run)
        self._consolidate = self._store_was_consolidated()
        existing = None if mode == "w" else self._existing(zarr, shape, chunks, dtype, refuse=mode == "w-")
        if existing is None:
            kwargs: dict[str, Any] = dict(name=self.name, shape=shape, chunks=chunks, dtype=dtype,
                                          compressors=compressors, zarr_format=zarr_format,
                                          attributes={RUN_ATTRIBUTE: _run_record(self.run)})
            if fill_value is not None:
                kwargs["fill_value"] = fill_value
            if dimension_names is not None:
                kwargs["dimension_names"] = list(dimension_names)
            # overwrite: mode="w" deletes what was there (old chunks included) before the new
            # metadata is written; otherwise nothing is there.
            existing = zarr.create_array(self._zarr_store, overwrite=mode == "w", **kwargs)
        self.shape, self.chunks, self.dtype = shape, chunks, np.dtype(dtype)
        self.fill_value = existing.fill_value
        self._array = _ext.open_hierarchy(self._native).open_array(self.name)
        self._inner_grid = [range(math.ceil(s / c)) for s, c in zip(shape[1:], chunks[1:])]
        self.n_chunks = math.ceil(shape[0] / chunks[0])
        self._skipped = frozenset(self._complete_chunks())  # this run's, complete before this writer started
        self._complete = set(self._skipped)
        self._flushed: set[int] = set()  # written (or being written) by this writer
        self.chunks_skipped = len(self._skipped)
        self.chunks_written = 0
        self.peak_buffered_bytes = 0
        self._open: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # chunk -> (rows, written mask)
        self._buffered = 0
        self._pool = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="insitu-write")
        self._max_pending = 2 * threads
        self._pending: list[tuple[int, np.ndarray, concurrent.futures.Future[None]]] = []
        self._spare: list[np.ndarray] = []  # buffers of written chunks, kept for the next ones
        self._closed = False

    # -- opening ------------------------------------------------------------------------------

    def _layout(self, like: ArrayGeometry | None, shape: Sequence[int] | None, chunks: Sequence[int] | None,
                dtype: Any, inner_shape: Sequence[int] | None) -> tuple[tuple[int, ...], tuple[int, ...], np.dtype]:
        if like is not None:
            if not isinstance(like, ArrayGeometry):
                raise InvalidTypeError(f"like= takes an ArrayGeometry (open_geometries(...)[name]), got"
                                       f" {type(like).__name__}")
            if shape is not None or chunks is not None:
                raise InvalidArgumentError("pass like= or shape=/chunks=, not both")
            inner = tuple(like.inner_shape) if inner_shape is None else self._dims("inner_shape", inner_shape)
            inner_chunks = tuple(like.inner_chunks) if inner == tuple(like.inner_shape) else inner
            return ((like.n_samples, *inner), (like.sample_chunk_size, *inner_chunks),
                    np.dtype(like.dtype if dtype is None else dtype))
        if shape is None or dtype is None:
            raise InvalidArgumentError("ZarrWriter needs like= (a source geometry) or shape= and dtype=")
        shape_t = self._dims("shape", shape, allow_zero=True)
        chunks_t = shape_t if chunks is None else self._dims("chunks", chunks)
        if len(chunks_t) != len(shape_t):
            raise InvalidArgumentError(f"chunks {chunks_t} and shape {shape_t} differ in rank")
        if inner_shape is not None:
            raise InvalidArgumentError("inner_shape= goes with like=; with shape= give the whole shape")
        return shape_t, chunks_t, np.dtype(dtype)

    @staticmethod
    def _dims(name: str, value: Sequence[int], *, allow_zero: bool = False) -> tuple[int, ...]:
        if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or len(value) == 0:
            raise InvalidTypeError(f"{name} must be a non-empty sequence of integers, got {value!r}")
        return tuple(arguments.integer(f"{name}[{i}]", v, (0 if allow_zero else 1, None)) for i, v in enumerate(value))

    def _store_was_consolidated(self) -> bool:
        try:
            return bool(_ext.open_hierarchy(self._native).consolidated)
        except Exception:  # an empty store has no root yet: nothing to keep consolidated
            return False

    def _existing(self, zarr: Any, shape: tuple[int, ...], chunks: tuple[int, ...], dtype: np.dtype, *,
                  refuse: bool) -> Any:
        """The array at ``name`` if this run may resume it; None if there is none."""
        try:
            array = zarr.open_array(self._zarr_store, path=self.name, mode="r")
        except zarr.errors.NodeNotFoundError:
            return None
        where = self._native.describe(self.name)
        if refuse:
            raise FailedPreconditionError(f"{where} already holds an array, and mode='w-' creates only: write to"
                                          " another name, or pass mode='w' to overwrite it")
        stored = tuple(getattr(array, "shards", None) or array.chunks)  # a shard is one stored chunk
        if tuple(array.shape) != shape or stored != chunks or np.dtype(array.dtype) != dtype:
            raise FailedPreconditionError(
                f"{where} already holds an array of shape {tuple(array.shape)}, chunks {stored}, dtype"
                f" {array.dtype}; this writer's is {shape}, {chunks}, {dtype}: write to another name, or pass"
                " mode='w' to overwrite it")
        record = array.attrs.get(RUN_ATTRIBUTE)
        theirs = record.get("run") if isinstance(record, dict) else None
        if theirs is None and not self._holds_chunks():
            # An array created for this writer (zarr-python's create_array with the codecs
            # wanted) and never written: nothing in it to mistake for this run's; it is this run's.
            return zarr.open_array(self._zarr_store, path=self.name, mode="r+").update_attributes(
                {RUN_ATTRIBUTE: _run_record(self.run)})
        if theirs != self.run:
            written_by = (f"was written by run {theirs!r} ({_describe_record(record)})" if theirs is not None else
                          "was not written by a ZarrWriter (it records no run: another tool's, or an older"
                          " version's)")
            raise FailedPreconditionError(
                f"{where} {written_by}; this writer's run is {self.run!r} ({_describe_record(_run_record(self.run))}),"
                " so its chunks are not this run's to resume. Pass mode='w' to overwrite it, write to another name,"
                " or, if this is that run restarted, pass run= its name")
        return array

    def _holds_chunks(self) -> bool:
        """Whether any object under the array's prefix is not its metadata."""
        prefix = f"{self.name}/" if self.name else ""
        metadata = {"zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata"}
        return any(key[len(prefix):] not in metadata for key in self._native.list(prefix))

    def _inner_coords(self) -> list[tuple[int, ...]]:
        return [tuple(c) for c in np.ndindex(*(len(r) for r in self._inner_grid))] or [()]

    def _complete_chunks(self) -> set[int]:
        """The outer chunks all of whose stored chunks are in the store: from one listing of
        what exists, never a probe per chunk (an empty array of 10^10 chunks opens at once)."""
        prefix = f"{self.name}/" if self.name else ""
        parse = _chunk_key_parser(self._array, len(self.shape))
        present: dict[int, int] = {}
        for key in self._native.list(prefix):
            coords = parse(key)
            if coords is None or coords[0] >= self.n_chunks:
                continue
            if all(c < len(r) for c, r in zip(coords[1:], self._inner_grid)):
                present[coords[0]] = present.get(coords[0], 0) + 1
        inner = math.prod(len(r) for r in self._inner_grid)
        return {c for c, n in present.items() if n == inner}

    # -- writing ------------------------------------------------------------------------------

    def _rows(self, chunk: int) -> int:
        return min(self.chunks[0], self.shape[0] - chunk * self.chunks[0])

    def write(self, sample_indices: Any, values: Any) -> None:
        """Writes ``values[k]`` as sample ``sample_indices[k]``, in any order; each sample
        once. Samples of chunks that were complete when the writer opened are skipped."""
        if self._closed:
            raise FailedPreconditionError(f"ZarrWriter for {self.name!r} is closed")
        self._raise_failed_writes(wait=False)
        indices = np.asarray(sample_indices)
        if indices.ndim != 1 or (indices.size and indices.dtype.kind not in "iu"):
            raise InvalidTypeError(f"sample_indices must be a 1-D array of integers, got {indices.dtype}"
                                   f" of shape {indices.shape}")
        values = np.asarray(values)
        expected = (len(indices), *self.shape[1:])
        if values.shape != expected:
            raise InvalidArgumentError(f"{self.name!r}: values of shape {values.shape} for {len(indices)} samples;"
                                       f" expected {expected}")
        if not np.can_cast(values.dtype, self.dtype, casting="same_kind"):
            raise InvalidTypeError(f"{self.name!r}: values of dtype {values.dtype} cannot be written as"
                                   f" {self.dtype} without changing their kind")
        if indices.size and (indices.min() < 0 or indices.max() >= self.shape[0]):
            bad = int(indices[(indices < 0) | (indices >= self.shape[0])][0])
            raise InvalidArgumentError(f"{self.name!r}: sample index {bad} is outside [0, {self.shape[0]})")
        if values.dtype != self.dtype or not values.flags.c_contiguous:
            values = np.ascontiguousarray(values, dtype=self.dtype)
        spc = self.chunks[0]
        order = np.argsort(indices, kind="stable").astype(np.int64, copy=False)
        sorted_indices = indices[order].astype(np.int64, copy=False)
        chunk_of = sorted_indices // spc
        starts: list[int] = np.flatnonzero(np.r_[True, chunk_of[1:] != chunk_of[:-1]]).tolist() if indices.size else []
        bounds = starts + [len(order)]
        for a, b in zip(bounds[:-1], bounds[1:]):  # one pass per output chunk the batch touches
            chunk = int(chunk_of[a])
            if chunk in self._skipped:
                continue  # written before (a resumed job): its rows are already in the store
            if chunk in self._flushed:
                raise InvalidArgumentError(f"{self.name!r}: sample {int(sorted_indices[a])} was written twice (its"
                                           f" chunk {chunk} was already written)")
            rows, seen = self._open_chunk(chunk)
            local = sorted_indices[a:b] - chunk * spc
            uses = np.bincount(local, minlength=spc) + seen
            if (uses > 1).any():
                twice = int(np.flatnonzero(uses > 1)[0]) + chunk * spc
                raise InvalidArgumentError(f"{self.name!r}: sample {twice} was written twice")
            _ext.copy_rows(rows, local, values, order[a:b])  # each row copied once, without the GIL
            seen[local] = True
            if seen[: self._rows(chunk)].all():
                self._flush(chunk)

    def _chunk_nbytes(self) -> int:
        return int(self.chunks[0] * math.prod(self.shape[1:]) * self.dtype.itemsize)

    def _open_chunk(self, chunk: int) -> tuple[np.ndarray, np.ndarray]:
        opened = self._open.get(chunk)
        if opened is None:
            nbytes = self._chunk_nbytes()
            if not self._spare and self._buffered + nbytes > self.budget_bytes and self._pending:
                self._raise_failed_writes(wait=True)  # chunks being written give their rows back first
            if self._spare:  # a written chunk's buffer: warm memory, already within the budget
                rows = self._spare.pop()
            elif self._buffered + nbytes > self.budget_bytes:
                raise ResourceExhaustedError(
                    f"ZarrWriter for {self.name!r}: {len(self._open)} chunks are waiting for rows"
                    f" ({self._buffered} bytes) and chunk {chunk} needs {nbytes} more, past budget_bytes"
                    f"={self.budget_bytes}: raise budget_bytes, or write in an order that finishes chunks sooner"
                    " (a shuffle with smaller blocks)")
            else:
                rows = np.empty(self.chunks[:1] + self.shape[1:], dtype=self.dtype)
            # Every row inside the array is written before the chunk is; the rows past the
            # array's end (its last chunk) are stored as the fill value, as zarr pads them.
            rows[self._rows(chunk):] = self.fill_value
            opened = (rows, np.zeros(self.chunks[0], dtype=bool))
            self._open[chunk] = opened
            self._buffered += nbytes
            self.peak_buffered_bytes = max(self.peak_buffered_bytes, self._buffered + len(self._spare) * nbytes)
        return opened

    def _flush(self, chunk: int) -> None:
        rows, _ = self._open.pop(chunk)
        self._flushed.add(chunk)
        self._pending.append((chunk, rows, self._pool.submit(self._write_chunk, chunk, rows)))
        if len(self._pending) > self._max_pending:  # the encoders are behind: wait for the oldest
            self._raise_failed_writes(wait=True, keep=self._max_pending // 2)

    def _write_chunk(self, chunk: int, rows: np.ndarray) -> None:
        for inner in self._inner_coords():
            region = tuple(slice(i * c, (i + 1) * c) for i, c in zip(inner, self.chunks[1:]))
            tile = rows[(slice(None), *region)]
            if tile.shape != self.chunks:  # an edge chunk: padded to the full chunk, as zarr stores it
                full = np.full(self.chunks, self.fill_value, dtype=self.dtype)
                full[tuple(slice(0, n) for n in tile.shape)] = tile
                tile = full
            # Encoded and written natively without the GIL, straight from this buffer.
            self._array.write_chunk([chunk, *inner], np.ascontiguousarray(tile))

    def _raise_failed_writes(self, *, wait: bool, keep: int = 0) -> None:
        while self._pending and (self._pending[0][2].done() or (wait and len(self._pending) > keep)):
            chunk, rows, future = self._pending.pop(0)
            try:
                future.result()  # the core's errors name the array and the chunk
            finally:
                self._buffered -= self._chunk_nbytes()
            self._spare.append(rows)  # reused by the next chunk to open (counted in the budget while kept)
            self._complete.add(chunk)
            self.chunks_written += 1

    def close(self) -> None:
        """Waits for every chunk in flight and writes the metadata; a chunk still missing
        rows is an error (the chunks that were complete stay in the store)."""
        if self._closed:
            return
        try:
            self._raise_failed_writes(wait=True)
            if len(self._complete) < self.n_chunks:
                # Counted, not listed: an array may have more chunks than fit in memory.
                written = sum(self._rows(c) for c in self._complete)
                rows = self.shape[0] - written - sum(int(seen[: self._rows(c)].sum()) for c, (_, seen) in
                                                     self._open.items())
                missing = list(itertools.islice((c for c in range(self.n_chunks) if c not in self._complete), 9))
                raise FailedPreconditionError(
                    f"ZarrWriter for {self.name!r}: {rows} samples were never written (chunks"
                    f" {missing[:8]}{' ...' if len(missing) > 8 else ''}); the complete chunks are in the store,"
                    f" and a writer of this run ({self.run!r}) reopened over it writes only the rest")
            if self._consolidate:
                import zarr

                zarr.consolidate_metadata(self._zarr_store)
        finally:
            self._closed = True
            self._pool.shutdown(wait=True)
            self._spare.clear()

    def __enter__(self) -> "ZarrWriter":
        return self

    def __exit__(self, exc_type: Any, *exc: object) -> None:
        if exc_type is None:
            self.close()
            return
        self._closed = True  # an exception is on its way: finish what is in flight, report nothing more
        self._pool.shutdown(wait=True)
        self._spare.clear()

    def __repr__(self) -> str:
        return (f"ZarrWriter({self._native.describe(self.name)!r}, shape={self.shape}, chunks={self.chunks},"
                f" dtype={self.dtype}, {len(self._complete)}/{self.n_chunks} chunks complete)")


def _default_run(like: ArrayGeometry | None, shape: tuple[int, ...], chunks: tuple[int, ...],
                 dtype: np.dtype) -> str:
    """A run named by what makes it: the command line (the script, its arguments: a model's
    checkpoint, a seed), the source, and the output's layout. The same command over the
    same source resumes itself; another command does not."""
    command = [os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] else "", *sys.argv[1:]]
    source = None if like is None else repr(like)  # path, shape, chunks, dtype, sample axis
    what = json.dumps({"command": command, "source": source, "shape": shape, "chunks": chunks,
                       "dtype": np.dtype(dtype).str}, sort_keys=True, default=str)
    return "auto-" + hashlib.sha256(what.encode()).hexdigest()[:16]


def _run_record(run: str) -> dict[str, Any]:
    """What the array's attributes say of the run that writes it."""
    return {"run": run, "command": " ".join(sys.argv)[:500],
            "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def _describe_record(record: Any) -> str:
    if not isinstance(record, dict):
        return "no record"
    return f"command {str(record.get('command', '?'))[:200]!r}, started {record.get('started', '?')}"


def _chunk_key_parser(array: Any, ndim: int) -> Any:
    """key -> the chunk coordinates whose key it is, or None: the inverse of the array's own
    chunk_key (its prefix and separator read off two keys), checked by a round trip."""
    zeros, ones = array.chunk_key([0] * ndim), array.chunk_key([1] * ndim)
    start = next(i for i, (a, b) in enumerate(zip(zeros, ones)) if a != b)
    prefix = zeros[:start]
    separator = zeros[start + 1] if ndim > 1 else "/"

    def parse(key: str) -> tuple[int, ...] | None:
        if not key.startswith(prefix):
            return None
        parts = key[len(prefix):].split(separator)
        if len(parts) != ndim or not all(p.isdigit() for p in parts):
            return None
        coords = tuple(int(p) for p in parts)
        return coords if array.chunk_key(list(coords)) == key else None

    return parse


__all__ = ["RUN_ATTRIBUTE", "ZarrWriter"]
