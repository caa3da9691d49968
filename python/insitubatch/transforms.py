"""Chunk and batch transforms: scoping with applies(), output declarations, and the
StandardScaler, ScaleOffset and Cast (run natively in C++ without the GIL when the engine
can).

A chunk transform ``(DecodedChunk) -> DecodedChunk`` runs once per decoded outer chunk of
one array, on a decode thread, before the cache boundary: its output is what the pool
holds. A batch transform ``(Batch) -> Batch`` runs per assembled batch, uncached.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np

from . import _ext
from .errors import InvalidArgumentError, InvalidTypeError, NotFoundError
from .geometry import ArrayGeometry, as_stored, engine_form, engine_typestr
from .records import Batch, ChunkRead, DecodedChunk


@runtime_checkable
class ChunkTransform(Protocol):
    """``(DecodedChunk) -> DecodedChunk``: once per decoded outer chunk of one array, before
    the cache boundary. Deterministic, per-array, vectorized; may edit ``chunk.data`` in place."""

    def __call__(self, chunk: DecodedChunk, /) -> DecodedChunk: ...


@runtime_checkable
class ReshapingChunkTransform(ChunkTransform, Protocol):
    """A chunk transform that changes the field shape or dtype declares its output, so the
    engine sizes cache slots, batches and adapter signatures from it (the sample axis stays)."""

    def output_inner(self, geom: ArrayGeometry, /) -> tuple[tuple[int, ...], np.dtype]: ...


@runtime_checkable
class BatchTransform(Protocol):
    """``(Batch) -> Batch``: per assembled batch, all variables aligned, never cached; the
    home of cross-variable fields and per-sample randomness."""

    def __call__(self, batch: Batch, /) -> Batch: ...


class ScopedTransform:
    """A chunk transform restricted to named array paths (see :func:`applies`)."""

    def __init__(self, arrays: tuple[str, ...], transform: Callable[..., Any]) -> None:
        self.arrays = arrays
        self.transform = transform
        self.__name__ = display_name(transform)

    def __call__(self, chunk: DecodedChunk) -> DecodedChunk:
        out: DecodedChunk = self.transform(chunk)
        return out

    def __repr__(self) -> str:
        return f"applies({list(self.arrays)!r}, {self.transform!r})"


class _ScopedReshapingTransform(ScopedTransform):
    def output_inner(self, geom: ArrayGeometry) -> tuple[tuple[int, ...], np.dtype]:
        inner: tuple[tuple[int, ...], np.dtype] = self.transform.output_inner(geom)  # type: ignore[attr-defined]  # checked at construction
        return inner


def applies(arrays: Sequence[str], transform: Callable[..., Any]) -> ScopedTransform:
    """Restricts ``transform`` to the named array paths; other arrays pass untouched, keep
    their geometry, and never call it. A name matching no array in the dataset raises when
    the dataset is built."""
    if isinstance(arrays, (str, bytes)):
        raise InvalidTypeError(f"applies() takes a sequence of array paths, not the string {arrays!r}"
                        f" (did you mean [{arrays!r}]?)")
    names = tuple(str(a).strip("/") for a in arrays)
    if not names:
        raise InvalidArgumentError("applies() needs at least one array path")
    if not callable(transform):
        raise InvalidTypeError(f"applies(): {transform!r} is not callable")
    validate = getattr(transform, "validate_scope", None)
    if callable(validate):
        validate(names)
    cls = _ScopedReshapingTransform if hasattr(transform, "output_inner") else ScopedTransform
    return cls(names, transform)


def display_name(fn: Any) -> str:
    inner = getattr(fn, "transform", None)
    if isinstance(fn, ScopedTransform):
        return f"{display_name(inner)}[{','.join(fn.arrays)}]"
    return getattr(fn, "__name__", None) or type(fn).__name__


def _require_arrays(what: str, known: Mapping[str, Any], arrays: Sequence[str]) -> None:
    """Scoping check of a per-array transform: every scoped array must be one it knows."""
    missing = [a for a in arrays if a not in known]
    if missing:
        raise InvalidArgumentError(f"{what} for {missing} (it has {sorted(known)})")


class StandardScaler:
    """``data = (data - mean[array]) / (std[array] + eps)``, per array path.

    Statistics broadcast over one sample's field (a surface ``(1, 1)``, per level
    ``(L, 1, 1)``). ``cache_key`` is an explicit fingerprint token: bump it per re-fit.
    """

    def __init__(self, mean: Mapping[str, Any], std: Mapping[str, Any], eps: float = 1e-8,
                 cache_key: str | None = None) -> None:
        if set(mean) != set(std):
            raise InvalidArgumentError("StandardScaler: mean and std must name the same arrays")
        self.mean = {k: np.asarray(v, dtype=np.float64) for k, v in mean.items()}
        self.std = {k: np.asarray(v, dtype=np.float64) for k, v in std.items()}
        self.eps = float(eps)
        self.cache_key = cache_key

    def __call__(self, chunk: DecodedChunk) -> DecodedChunk:
        name = chunk.read.array
        if name not in self.mean:
            raise NotFoundError(f"StandardScaler has no statistics for array {name!r}")
        dtype = chunk.data.dtype if chunk.data.dtype.kind == "f" else np.dtype(np.float32)
        chunk.data = ((chunk.data - self.mean[name]) / (self.std[name] + self.eps)).astype(dtype, copy=False)
        return chunk

    def output_inner(self, geom: ArrayGeometry) -> tuple[tuple[int, ...], np.dtype]:
        dtype = geom.dtype if geom.dtype.kind == "f" else np.dtype(np.float32)
        return geom.inner_shape, dtype

    def validate_scope(self, arrays: Sequence[str]) -> None:
        _require_arrays("StandardScaler has no statistics", self.mean, arrays)

    def native_spec(self, path: str, field: tuple[int, ...], dtype: np.dtype) -> Any:
        """The engine's native form for one array (no GIL), or None if it cannot run it."""
        if path not in self.mean or np.dtype(dtype) not in (np.dtype("f4"), np.dtype("f8")):
            return None
        if self.mean[path].ndim == 0 and self.std[path].ndim == 0:  # one number per array
            return _ext.standard_scaler([float(self.mean[path])], [1.0 / (float(self.std[path]) + self.eps)],
                                        list(field), np.dtype(dtype).str)
        try:
            mean = np.broadcast_to(self.mean[path], field).astype(np.float64).ravel()
            scale = (1.0 / (np.broadcast_to(self.std[path], field).astype(np.float64) + self.eps)).ravel()
        except ValueError:
            return None
        return _ext.standard_scaler(mean.tolist(), scale.tolist(), list(field), np.dtype(dtype).str)

    def save(self, path: str | os.PathLike[str]) -> None:
        arrays: dict[str, Any] = {}
        for k in self.mean:
            arrays[f"{k}.mean"] = self.mean[k]
            arrays[f"{k}.std"] = self.std[k]
        np.savez(path, **arrays)

    @classmethod
    def load(cls, path: str | os.PathLike[str], eps: float = 1e-8, cache_key: str | None = None) -> "StandardScaler":
        with np.load(path) as data:
            names = {k.rsplit(".", 1)[0] for k in data.files}
            return cls({n: data[f"{n}.mean"] for n in names}, {n: data[f"{n}.std"] for n in names},
                       eps=eps, cache_key=cache_key)

    def __repr__(self) -> str:
        key = f", cache_key={self.cache_key!r}" if self.cache_key is not None else ""
        return f"StandardScaler(arrays={sorted(self.mean)}{key})"


class BatchTransformsAhead:
    """Runs the batch transforms on a thread of their own, one batch ahead of the consumer,
    so an augmentation overlaps the training step instead of adding to it.

    ``pull()`` returns the next gathered :class:`Batch` or ``None`` at the end. Holds at most
    two transformed batches beyond the engine's queue (one queued, one being handed over).
    A transform's exception is re-raised in the consumer as itself, noted with the batch;
    anything ``pull()`` raises is re-raised as it is.
    """

    _END = object()

    def __init__(self, pull: Callable[[], Any], transforms: Sequence[Callable[..., Any]], split: str) -> None:
        self._pull, self._transforms, self._split = pull, tuple(transforms), split
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=1)
        self._stop = threading.Event()
        self.cpu_s = 0.0   # thread CPU inside the transforms
        self.gets = 0      # the consumer's takes, and those that found nothing ready
        self.empty_gets = 0
        self._clock = _AheadClock()
        self._thread = threading.Thread(target=self._run, name="insitubatch-batch-transforms", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        index = 0
        try:
            while not self._stop.is_set():
                self._clock.enter("pull")
                batch = self._pull()
                if batch is None:
                    self._clock.enter("put")
                    self._put(self._END)
                    return
                self._clock.enter("transform")
                t0 = time.thread_time()
                for transform in self._transforms:
                    try:
                        batch = transform(batch)
                    except BaseException as exc:
                        exc.add_note(f"raised by batch transform {display_name(transform)} on batch"
                                     f" {index} of the {self._split} pass")
                        raise
                self.cpu_s += time.thread_time() - t0
                self._clock.enter("put")
                if not self._put(batch):
                    return
                index += 1
        except BaseException as exc:  # handed to the consumer, which re-raises it
            self._put(_Raised(exc))

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def next(self) -> Any:
        """The next transformed batch, ``None`` at the end; re-raises what the thread raised."""
        self.gets += 1
        empty = self._queue.empty()
        self.empty_gets += empty
        if empty:
            self._clock.consumer_waiting(True)
        try:
            item = self._queue.get()
        finally:
            if empty:
                self._clock.consumer_waiting(False)
        if item is self._END:
            return None
        if isinstance(item, _Raised):
            raise item.exc
        return item

    def waited(self, engine_waited: Mapping[str, float]) -> dict[str, float]:
        """The consumer's waits (``PassStats.waited``), charged to what this thread did
        meanwhile; ``engine_waited``: the engine's own charges for this thread's pulls."""
        return self._clock.charged(engine_waited)

    def close(self) -> None:
        """Stops the thread after its current batch (the caller has cancelled ``pull``)."""
        self._stop.set()
        try:
            while True:
                self._queue.get_nowait()
        except queue.Empty:
            pass


class _AheadClock:
    """What the batch-transform thread does over time ("pull": in the engine's next(),
    "transform", "put": waiting for the consumer to take a batch), and the consumer's waits
    charged to it. As in the engine (stage_clock.h), a transform is charged only on the
    critical path: transforms followed by a pull that blocked on the engine were overlapped
    by the engine's work (the batch would not have come sooner had they taken no time), so
    they are charged as the engine's waits are; the rest are ``gather``."""

    BLOCKED_PULL_S = 0.002  # a pull longer than this waited on the engine (a ready batch takes microseconds)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state = "pull"
        self._since = self._pull_started = time.perf_counter()
        self._consumer_waits = False
        self._pull_s = 0.0         # all of the thread's pulls
        self._waited_pull_s = 0.0  # the consumer's waits while the thread pulled
        self._gather_s = 0.0       # ... while it transformed, on the critical path
        self._overlapped_s = 0.0   # ... while it transformed before a pull that blocked
        self._pending_s = 0.0      # ... while it transformed since its last pull

    def _close(self, now: float) -> None:  # under the lock
        dt, self._since = now - self._since, now
        if self._state == "pull":
            self._pull_s += dt
        if self._consumer_waits and self._state == "pull":
            self._waited_pull_s += dt
        elif self._consumer_waits and self._state == "transform":
            self._pending_s += dt

    def enter(self, state: str) -> None:
        with self._lock:
            now = time.perf_counter()
            self._close(now)
            if self._state == "pull":  # a pull ended: the transforms before it are placed
                if now - self._pull_started > self.BLOCKED_PULL_S:
                    self._overlapped_s += self._pending_s
                else:
                    self._gather_s += self._pending_s
                self._pending_s = 0.0
            if state == "pull":
                self._pull_started = now
            self._state = state

    def consumer_waiting(self, waiting: bool) -> None:
        with self._lock:
            self._close(time.perf_counter())
            self._consumer_waits = waiting

    def charged(self, engine_waited: Mapping[str, float]) -> dict[str, float]:
        """The consumer's waits per stage: waits during pulls split as the engine's waits took
        the thread's pulls (the rest, handing a batch over, is gather), overlapped transforms
        as the engine's waits are, the other transforms gather."""
        with self._lock:
            self._close(time.perf_counter())
            pulls, waited_pulls = self._pull_s, self._waited_pull_s
            gather, overlapped = self._gather_s + self._pending_s, self._overlapped_s
        engine_total = sum(engine_waited.values())
        out = {name: 0.0 for name in engine_waited}
        out.setdefault("gather_s", 0.0)
        for name, seconds in engine_waited.items():
            if pulls > 0:
                out[name] += waited_pulls * seconds / max(pulls, engine_total)
            if engine_total > 0:
                out[name] += overlapped * seconds / engine_total
        out["gather_s"] += gather + (overlapped if engine_total <= 0 else 0.0)
        out["gather_s"] += max(0.0, waited_pulls + overlapped + gather - sum(out.values()))
        return out


class _Raised:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


_NATIVE_NUMERIC = frozenset(np.dtype(c) for c in ("i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "f4", "f8"))


def _native_dtype_str(dtype: np.dtype) -> str:
    return np.dtype(dtype).newbyteorder("=").str  # the engine hands transforms native-endian data


def _exact_native_cast(src: np.dtype, dst: np.dtype) -> bool:
    """A conversion the engine runs natively: defined for every value (to float, or an
    integer widening), so C++ and numpy agree element for element."""
    src, dst = np.dtype(src).newbyteorder("="), np.dtype(dst).newbyteorder("=")
    if src not in _NATIVE_NUMERIC or dst not in _NATIVE_NUMERIC:
        return False
    return dst.kind == "f" or (src.kind in "iu" and np.can_cast(src, dst, casting="safe"))


class Cast:
    """``data = data.astype(dtype)`` for every array it applies to (scope it with
    :func:`applies`). Native (no GIL) for numeric conversions defined on every value: to
    float32/float64, or integer widening; numpy otherwise."""

    def __init__(self, dtype: Any) -> None:
        self.dtype = np.dtype(dtype).newbyteorder("=")

    def __call__(self, chunk: DecodedChunk) -> DecodedChunk:
        chunk.data = chunk.data.astype(self.dtype)
        return chunk

    def output_inner(self, geom: ArrayGeometry) -> tuple[tuple[int, ...], np.dtype]:
        return geom.inner_shape, self.dtype

    def native_spec(self, path: str, field: tuple[int, ...], dtype: np.dtype) -> Any:
        if not _exact_native_cast(dtype, self.dtype):
            return None
        return _ext.cast_transform(_native_dtype_str(dtype), _native_dtype_str(self.dtype), list(field))

    def __repr__(self) -> str:
        return f"Cast({self.dtype.name})"


class ScaleOffset:
    """``data = data.astype(dtype) * scale[array] + offset[array]``, per array path: unpacks
    CF-style packed data (int16 with ``scale_factor`` / ``add_offset``) or converts units.
    ``dtype`` defaults to the input's float type, float32 for integer input. Native (no GIL,
    fused into decode when the type does not change) for one number per array; the product
    and the sum round separately in ``dtype``, exactly as this numpy code does."""

    def __init__(self, scale: Mapping[str, float], offset: Mapping[str, float], dtype: Any = None) -> None:
        if set(scale) != set(offset):
            raise InvalidArgumentError("ScaleOffset: scale and offset must name the same arrays")
        self.scale = {k: float(v) for k, v in scale.items()}
        self.offset = {k: float(v) for k, v in offset.items()}
        self.dtype = None if dtype is None else np.dtype(dtype)
        if self.dtype is not None and self.dtype.kind != "f":
            raise InvalidArgumentError(f"ScaleOffset: dtype must be a float type, not {self.dtype}")

    def _out(self, dtype: np.dtype) -> np.dtype:
        if self.dtype is not None:
            native: np.dtype = self.dtype.newbyteorder("=")
            return native
        dtype = np.dtype(dtype).newbyteorder("=")
        return dtype if dtype.kind == "f" else np.dtype(np.float32)

    def __call__(self, chunk: DecodedChunk) -> DecodedChunk:
        name = chunk.read.array
        if name not in self.scale:
            raise NotFoundError(f"ScaleOffset has no scale/offset for array {name!r}")
        out = self._out(chunk.data.dtype)
        chunk.data = chunk.data.astype(out) * out.type(self.scale[name]) + out.type(self.offset[name])
        return chunk

    def output_inner(self, geom: ArrayGeometry) -> tuple[tuple[int, ...], np.dtype]:
        return geom.inner_shape, self._out(geom.dtype)

    def validate_scope(self, arrays: Sequence[str]) -> None:
        _require_arrays("ScaleOffset has no scale/offset", self.scale, arrays)

    def native_spec(self, path: str, field: tuple[int, ...], dtype: np.dtype) -> Any:
        out = self._out(dtype)
        if path not in self.scale or not _exact_native_cast(dtype, out):
            return None
        return _ext.scale_offset_transform(_native_dtype_str(dtype), _native_dtype_str(out), self.scale[path],
                                           self.offset[path], list(field))

    def __repr__(self) -> str:
        return f"ScaleOffset(arrays={sorted(self.scale)})"


def fold_output(path: str, geom: ArrayGeometry, chain: Sequence[Callable[..., Any]]) -> tuple[tuple[int, ...], np.dtype]:
    """The field shape and dtype after ``chain``, from the transforms' ``output_inner``
    declarations (a transform without one preserves shape and dtype)."""
    shape, dtype = tuple(geom.inner_shape), np.dtype(geom.dtype)
    for t in chain:
        declare = getattr(t, "output_inner", None)
        if declare is None:
            continue
        current = ArrayGeometry(path, (geom.n_samples, *shape), (geom.sample_chunk_size, *shape), dtype)
        out_shape, out_dtype = declare(current)
        shape, dtype = tuple(int(s) for s in out_shape), np.dtype(out_dtype)
    return shape, dtype


def python_callback(path: str, chain: Sequence[Callable[..., Any]], in_dtype: np.dtype, out_shape: tuple[int, ...],
                    out_dtype: np.dtype) -> Callable[..., Any]:
    """The callable the engine runs (GIL held) for one array's Python transform chain. The
    chain sees the array's own dtype (datetime64, bfloat16, text), not the engine's view.
    What it raises reaches the consumer as that very exception (the engine carries the
    object beside its error, bind_transforms.cc)."""
    names = ", ".join(display_name(t) for t in chain)

    def run(chunk_index: int, sample_offset: int, data: np.ndarray) -> np.ndarray:
        data = as_stored(data, in_dtype)
        chunk = DecodedChunk(ChunkRead(path, int(chunk_index)), data, int(sample_offset))
        for t in chain:
            result = t(chunk)
            chunk = result if result is not None else chunk
        out = np.ascontiguousarray(chunk.data)
        want = (data.shape[0], *out_shape)
        if out.shape != want or out.dtype != out_dtype:
            raise InvalidArgumentError(
                f"chunk_transform produced shape {out.shape} {out.dtype} for array {path!r} but the"
                f" cache slot is sized {want} {out_dtype} ({names}); output_inner must agree with"
                " what the transform returns")
        return engine_form(out)

    return run


@dataclass(frozen=True, eq=False)
class ChunkChains:
    """Per array path: the chunk transforms scoped to it, in order, and the field shape and
    dtype they make of its (cropped) field."""

    chains: dict[str, list[Callable[..., Any]]]
    outputs: dict[str, tuple[tuple[int, ...], np.dtype]]

    @classmethod
    def resolve(cls, transforms: Sequence[Callable[..., Any]], geometries: Mapping[str, ArrayGeometry],
                cropped: Callable[[ArrayGeometry], ArrayGeometry]) -> "ChunkChains":
        """``transforms`` against the numeric labels' arrays (``cropped``: a geometry as the
        engine holds it); an ``applies()`` scope naming no array of the dataset is refused."""
        paths = {g.path for g in geometries.values()}
        for t in transforms:
            if isinstance(t, ScopedTransform):
                unknown = [a for a in t.arrays if a not in paths]
                if unknown:
                    raise InvalidArgumentError(
                        f"applies() names {unknown} for {display_name(t)}, but this dataset's"
                        f" arrays are {sorted(paths)}")
        chains, outputs = {}, {}
        for g in geometries.values():
            if g.path in chains:
                continue
            chain = [t for t in transforms if not isinstance(t, ScopedTransform) or g.path in t.arrays]
            chains[g.path] = chain
            outputs[g.path] = fold_output(g.path, cropped(g), chain)
        return cls(chains, outputs)

    def engine_spec(self, path: str, g: ArrayGeometry) -> Any:
        """The engine's transform for the array at ``path`` (``g``: its cropped geometry): an
        ``_ext.NativeTransform``, or None without a chain."""
        chain = self.chains[path]
        if not chain:
            return None
        out_shape, out_dtype = self.outputs[path]
        if len(chain) == 1:  # one native transform (StandardScaler, ScaleOffset, Cast) runs in C++
            native = getattr(getattr(chain[0], "transform", chain[0]), "native_spec", None)
            if native is not None:
                spec = native(path, tuple(g.inner_shape), g.dtype)
                if spec is not None:
                    return spec
        callback = python_callback(path, chain, g.dtype, out_shape, out_dtype)
        return _ext.python_transform(callback, list(out_shape), engine_typestr(out_dtype))


__all__ = ["BatchTransform", "ChunkTransform", "ReshapingChunkTransform", "StandardScaler", "applies"]
