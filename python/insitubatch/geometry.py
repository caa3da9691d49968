"""ArrayGeometry and open_geometries: what the engine needs to know about an array.

A geometry is built from metadata alone (no chunk data is read). The *sample axis* is a
role, not a fixed dimension: it is the one physical axis the engine splits, shuffles and
batches along; every other axis is a field axis carried whole per sample. The *stored
chunk* is what one store read returns — on a sharded array, the shard.
"""

from __future__ import annotations

import atexit
import collections
import itertools
import json
import logging
import math
import os
import threading
from dataclasses import dataclass, field, replace
from typing import Any, Iterator, Sequence

import numpy as np

from . import _ext
from .errors import InSituError, InvalidArgumentError, InvalidTypeError, MissingDependencyError, NotFoundError

logger = logging.getLogger("insitubatch")


def _as_int_tuple(name: str, values: Sequence[int]) -> tuple[int, ...]:
    try:
        out = tuple(int(v) for v in values)
    except TypeError as exc:
        raise InvalidArgumentError(f"{name} must be a sequence of integers, got {values!r}") from exc
    return out


@dataclass(frozen=True)
class ArrayGeometry:
    """Shape, chunking and sample axis of one array (or one windowed view of it).

    ``shape`` and ``chunks`` are in physical (stored) axis order; ``chunks`` is the stored
    chunk (the shard on a sharded array). ``offset`` shifts the sample axis for windowed
    views (see :meth:`shift`).
    """

    path: str
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    dtype: np.dtype
    offset: int = 0
    sample_axis: int = 0
    _inner_read_chunks: tuple[int, ...] | None = field(default=None, repr=False, compare=False)
    # (native store, hierarchy) it was read from by open_geometries: a dataset built over
    # that same store object opens nothing again (over a network, a round trip saved).
    # Never pickled: a process it is sent to opens the store itself.
    _opened: tuple[Any, Any] | None = field(default=None, repr=False, compare=False)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_opened": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            object.__setattr__(self, name, value)

    def __post_init__(self) -> None:
        shape = _as_int_tuple("shape", self.shape)
        chunks = _as_int_tuple("chunks", self.chunks)
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "chunks", chunks)
        object.__setattr__(self, "dtype", np.dtype(self.dtype))
        object.__setattr__(self, "offset", int(self.offset))
        ndim = len(shape)
        if len(chunks) != ndim:
            raise InvalidArgumentError(
                f"chunks {chunks} and shape {shape} of {self.path!r} differ in rank"
            )
        if ndim == 0:
            raise InvalidArgumentError(f"{self.path!r} is 0-d: there is no axis to sample along")
        if not 0 <= int(self.sample_axis) < ndim:
            raise InvalidArgumentError(
                f"sample_axis {self.sample_axis} out of range for {ndim}-D array {self.path!r}"
            )
        object.__setattr__(self, "sample_axis", int(self.sample_axis))
        if any(c < 1 for c in chunks) or any(s < 0 for s in shape):
            raise InvalidArgumentError(f"invalid shape {shape} / chunks {chunks} for {self.path!r}")

    # -- windowing -------------------------------------------------------------------
    def shift(self, k: int) -> "ArrayGeometry":
        """A copy whose sample-axis reads are offset by ``k`` more (composes)."""
        return replace(self, offset=self.offset + int(k))

    # -- sample axis -----------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def n_samples(self) -> int:
        return self.shape[self.sample_axis]

    @property
    def sample_chunk_size(self) -> int:
        return self.chunks[self.sample_axis]

    @property
    def n_chunks(self) -> int:
        return math.ceil(self.n_samples / self.sample_chunk_size)

    def chunk_of(self, i: int) -> int:
        return int(i) // self.sample_chunk_size

    def samples_in_chunk(self, c: int) -> range:
        spc = self.sample_chunk_size
        return range(c * spc, min((c + 1) * spc, self.n_samples))

    # -- field axes ------------------------------------------------------------------
    @property
    def inner_shape(self) -> tuple[int, ...]:
        return tuple(s for a, s in enumerate(self.shape) if a != self.sample_axis)

    @property
    def inner_chunks(self) -> tuple[int, ...]:
        return tuple(c for a, c in enumerate(self.chunks) if a != self.sample_axis)

    def inner_grid(self) -> tuple[range, ...]:
        return tuple(range(math.ceil(s / c)) for s, c in zip(self.inner_shape, self.inner_chunks))

    def inner_coords(self) -> Iterator[tuple[int, ...]]:
        return itertools.product(*self.inner_grid())

    def n_inner_chunks(self, c: int = 0) -> int:
        return math.prod(len(r) for r in self.inner_grid())

    def inner_index(self, coord: Sequence[int]) -> int:
        """Row-major linear index of a field tile."""
        index = 0
        for r, k in zip(self.inner_grid(), coord):
            index = index * len(r) + int(k)
        return index

    # -- slots and tiles -------------------------------------------------------------
    def slot_shape(self, c: int) -> tuple[int, ...]:
        """Logical, sample-first shape of outer chunk ``c`` (short at the tail)."""
        return (len(self.samples_in_chunk(c)), *self.inner_shape)

    def tile_shape(self) -> tuple[int, ...]:
        """Full decoded stored-chunk shape, sample-first."""
        return (self.sample_chunk_size, *self.inner_chunks)

    def physical_chunk_coord(self, c: int, inner_coord: Sequence[int]) -> tuple[int, ...]:
        coord = list(inner_coord)
        coord.insert(self.sample_axis, int(c))
        return tuple(coord)

    def tile_placement(self, c: int, inner_coord: Sequence[int]) -> tuple[tuple[slice, ...], tuple[slice, ...]]:
        """``(dst, src)`` slices placing a full decoded tile into the logical slot."""
        n = len(self.samples_in_chunk(c))
        dst = [slice(0, n)]
        src = [slice(0, n)]
        for k, extent, chunk in zip(inner_coord, self.inner_shape, self.inner_chunks):
            start = int(k) * chunk
            stop = min(start + chunk, extent)
            dst.append(slice(start, stop))
            src.append(slice(0, stop - start))
        return tuple(dst), tuple(src)

    @property
    def chunk_bytes(self) -> int:
        """Bytes one outer chunk really costs resident: every stored chunk counted whole
        (edge tiles padded), constant even for the short final outer chunk."""
        return self.n_inner_chunks() * math.prod(self.tile_shape()) * self.dtype.itemsize

    @property
    def read_chunks(self) -> tuple[int, ...]:
        """zarr's inner read chunk on a sharded array; ``chunks`` otherwise."""
        return self._inner_read_chunks or self.chunks


def _native(store: Any) -> Any:
    """A native Store for ``store`` (zarr-python stores go through the bridge)."""
    from .stores import as_native_store  # lazy: geometry also loads without the store layer

    return as_native_store(store)


def open_hierarchy(store: Any) -> Any:
    """The native hierarchy (metadata only) of ``store``."""
    return _ext.open_hierarchy(_native(store))


def open_geometries(store: Any, variables: Sequence[str] | None = None, *, sample_axis: int = 0) -> dict[str, ArrayGeometry]:
    """One :class:`ArrayGeometry` per array, from metadata alone (no chunk data is read).

    ``variables`` *selects* arrays by path (nested paths allowed). ``None`` takes every
    array that is data on the sample grid and skips, with a log line naming each and why,
    what a CF/xarray store keeps beside its variables: 0-d arrays (a grid mapping such as
    ``spatial_ref``), 1-D coordinates named after their own dimension (``latitude``),
    arrays without the sample dimension the others share, and arrays this reader cannot
    decode. Naming an array in ``variables`` overrides the inference either way.
    ``sample_axis`` applies to every returned geometry. ``store`` may be a URL or path.
    """
    if isinstance(variables, str):
        raise InvalidTypeError(
            f"variables must be a list of array paths, not the string {variables!r}"
            f" (did you mean [{variables!r}]?)"
        )
    store = _native(store)
    from .stores import warm_connections  # lazy, as in _native

    warm_connections(store)  # a dataset's first block follows: its connections open meanwhile
    hierarchy = _ext.open_hierarchy(store)
    return {path: replace(g, _opened=(store, hierarchy))
            for path, g in geometries_of(hierarchy, store, variables, sample_axis=sample_axis).items()}


def geometries_of(hierarchy: Any, store: Any, variables: Sequence[str] | None = None, *,
                  sample_axis: int = 0) -> dict[str, ArrayGeometry]:
    """:func:`open_geometries` over a hierarchy already opened from the native ``store``
    (a dataset opens its hierarchy once and shares it)."""
    if variables is None:
        paths = _batchable_paths(hierarchy, store, int(sample_axis))
    else:
        paths = [str(v).strip("/") for v in variables]
    out: dict[str, ArrayGeometry] = {}
    for path in paths:
        try:
            kind = hierarchy.kind(path)
        except NotFoundError:
            raise NotFoundError(f"no array {path!r} in {store.describe('')}") from None
        if kind == "group":
            raise InvalidTypeError(
                f"{path!r} is a Group, not an array; open_geometries handles arrays"
                " (variables), not subgroups"
            )
        meta = hierarchy.array_metadata(path)
        hierarchy.open_array(path)  # an unsupported codec is named here, not at the first read
        read_chunks = tuple(meta["read_chunks"])
        out[path] = ArrayGeometry(
            path=path,
            shape=tuple(meta["shape"]),
            chunks=tuple(meta["chunks"]),
            dtype=_numpy_dtype(meta),
            sample_axis=sample_axis,
            _inner_read_chunks=read_chunks if read_chunks != tuple(meta["chunks"]) else None,
        )
    return out


def _numpy_dtype(meta: dict[str, Any]) -> np.dtype:
    """The array's numpy dtype; a record type's fields as stored (their own byte orders)."""
    if meta["dtype"] == "bfloat16":  # no numpy dtype of its own: ml_dtypes provides it
        try:
            import ml_dtypes
        except ImportError:
            raise MissingDependencyError("bfloat16 arrays are read as ml_dtypes.bfloat16: pip install ml_dtypes") from None
        bfloat16: np.dtype = np.dtype(ml_dtypes.bfloat16)
        return bfloat16
    if "string_kind" in meta:  # variable-length strings (or bytes): numpy objects
        return np.dtype(object)
    if "record_fields" not in meta:
        stored: np.dtype = np.dtype(meta["dtype"])
        return stored
    fields = json.loads(meta["record_fields"])
    if isinstance(fields, str):  # fixed-width bytes or unicode: "|S10", "<U5"
        return np.dtype(fields)
    return np.dtype(_descr(fields))


def _descr(fields: list[Any]) -> list[tuple[Any, ...]]:
    """A numpy descr from its JSON form: a field's type is a typestring or, for a record
    inside the record, a descr itself; a third entry is a sub-array shape."""
    out: list[tuple[Any, ...]] = []
    for f in fields:
        kind = _descr(f[1]) if isinstance(f[1], list) else f[1]
        out.append((f[0], kind, tuple(f[2])) if len(f) == 3 else (f[0], kind))
    return out


def needs_view(dtype: np.dtype) -> bool:
    """Whether the engine hands ``dtype``'s data in another form (see :func:`as_stored`)."""
    return dtype.names is not None or dtype.kind in "MmSU" or dtype.name == "bfloat16"


def as_stored(data: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The same memory as ``dtype``: the engine hands records and fixed-width text as bytes
    with one more axis (the item), datetime64 / timedelta64 as their int64 counts, and
    bfloat16 as its uint16 bits."""
    if data.dtype == dtype or not needs_view(dtype):
        return data
    if dtype.kind in "Mm" or dtype.name == "bfloat16":
        return data.view(dtype)
    return data.view(dtype)[..., 0]


def engine_form(data: np.ndarray) -> np.ndarray:
    """The inverse of :func:`as_stored`: ``data`` in the form the engine takes it back
    (datetime64 / timedelta64 as int64 counts, bfloat16 as uint16 bits, records and
    fixed-width text as their bytes with one more axis)."""
    dtype = data.dtype
    if not needs_view(dtype):
        return data
    data = np.ascontiguousarray(data)
    if dtype.kind in "Mm":
        return data.view(np.int64)
    if dtype.name == "bfloat16":
        return data.view(np.uint16)
    return data.view(np.uint8).reshape(*data.shape, dtype.itemsize)


def engine_typestr(dtype: np.dtype) -> str:
    """How the engine names ``dtype``: its numpy typestring, or "bfloat16" (which numpy
    spells as an opaque "<V2")."""
    dtype = np.dtype(dtype)
    return "bfloat16" if dtype.name == "bfloat16" else dtype.str


def _batchable_paths(hierarchy: Any, store: Any, sample_axis: int) -> list[str]:
    """The arrays of ``hierarchy`` that are data on the sample grid; logs the others."""
    kept: dict[str, tuple[str, ...]] = {}
    skipped: dict[str, str] = {}
    for path in hierarchy.array_paths():
        try:
            meta = hierarchy.array_metadata(path)
            hierarchy.open_array(path)  # its codecs too: an array this build cannot decode is skipped
        except InSituError as e:  # reported if asked for by name; not a reason to stop here
            skipped[path] = f"cannot be read here ({e})"
            continue
        shape, dims = tuple(meta["shape"]), tuple(meta["dimension_names"])
        if not shape:
            skipped[path] = "0-d (a grid mapping or scalar: no sample axis)"
        elif len(shape) <= sample_axis:
            skipped[path] = f"{len(shape)}-d: no axis {sample_axis} to sample along"
        elif len(dims) == 1 and dims[0] == path.rsplit("/", 1)[-1]:
            skipped[path] = "a coordinate (1-D, named after its own dimension)"
        else:
            kept[path] = dims
    # The sample dimension the variables share (by name, where the store names dimensions).
    names = collections.Counter(d[sample_axis] for d in kept.values() if d and d[sample_axis])
    if names:
        sample_dim = names.most_common(1)[0][0]
        for path, dims in list(kept.items()):
            if dims and sample_dim not in dims:
                skipped[path] = f"has no {sample_dim!r} dimension (the other arrays' sample dimension)"
                del kept[path]
    for path, why in sorted(skipped.items()):
        logger.info("open_geometries: skipped %r: %s; name it in variables= to take it", path, why)
    if not kept:
        found = "; ".join(f"{p!r}: {w}" for p, w in sorted(skipped.items())) or "no arrays at all"
        raise InvalidArgumentError(
            f"no batchable arrays in {store.describe('')}: {found}. If one of these is the data"
            ' you mean to batch, name it: open_geometries(store, variables=["<name>"])')
    return list(kept)


# What read_chunk parsed for the last store *object* it read (not for a URL or path, which
# makes a new store per call): that object, its hierarchy, and per array path the opened
# array with its metadata dict. One entry, so at most one store and its metadata are kept
# alive by it (the hierarchy holds the store).
_read_cache: tuple[Any, Any, dict[str, tuple[Any, dict[str, Any]]]] | None = None
_read_cache_lock = threading.Lock()


@atexit.register
def _forget_reads() -> None:
    """Lets the cached native objects go before the interpreter finalizes: a module global
    still holding them when the extension's types are torn down is reported as a leak."""
    global _read_cache
    with _read_cache_lock:
        _read_cache = None


def _array_for_reads(store: Any, path: str) -> tuple[Any, dict[str, Any]]:
    """The opened array at ``path`` and its metadata dict, parsed once per store object
    while it is the last one read (a metadata dict holds the attributes: not remade per call)."""
    global _read_cache
    cached = None
    if not isinstance(store, (str, os.PathLike)):
        with _read_cache_lock:
            cached = _read_cache if _read_cache is not None and _read_cache[0] is store else None
    if cached is None:
        cached = (store, _ext.open_hierarchy(_native(store)), {})
        if not isinstance(store, (str, os.PathLike)):
            with _read_cache_lock:
                _read_cache = cached
    arrays = cached[2]
    if path not in arrays:
        array = cached[1].open_array(path)
        arrays[path] = (array, array.metadata)
    return arrays[path]


def read_string_chunk(array: Any, coords: Sequence[int], chunks: tuple[int, ...] | None = None) -> np.ndarray:
    """One stored chunk of a native string array as an object array of the chunk shape
    (``chunks``, when the caller has it, spares remaking the metadata dict)."""
    items = array.read_string_chunk(list(coords))
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out.reshape(chunks if chunks is not None else tuple(array.metadata["chunks"]))


def read_chunk(store: Any, array_path: str, chunk_coords: Sequence[int]) -> np.ndarray:
    """The decoded stored chunk at ``chunk_coords`` (full chunk shape, fill value if absent);
    for a variable-length string array, an object array of ``str`` (or ``bytes``).

    A low-level tool for tests and diagnostics; the engine never goes through Python.
    Repeated calls on the same store object reuse its metadata, read and parsed at the
    first of them (only the last store object read is remembered): metadata rewritten since
    is seen through a new store object, or by passing the URL or path, which opens the store
    afresh on every call. Chunk data is read anew every time.
    """
    from . import arguments  # lazy: geometry also loads on its own (its sizing tests do)

    if isinstance(chunk_coords, (str, bytes)) or not hasattr(chunk_coords, "__iter__"):
        raise InvalidTypeError(f"chunk_coords must be a sequence of ints, got {chunk_coords!r}")
    coords = [arguments.integer(f"chunk_coords[{i}]", c, (0, 2**63 - 1)) for i, c in enumerate(chunk_coords)]
    array, meta = _array_for_reads(store, str(array_path).strip("/"))
    return read_opened_chunk(array, meta, coords)


def read_vector(array: Any, meta: dict[str, Any]) -> np.ndarray:
    """Every value of an opened array that is 1-D (or whose other axes have length 1),
    along its first axis: its chunks read at once (the native read releases the GIL)."""
    shape, chunks = tuple(meta["shape"]), tuple(meta["chunks"])
    n_chunks = math.ceil(shape[0] / chunks[0]) if shape and shape[0] else 0
    rest = [0] * (len(shape) - 1)

    def one(c: int) -> np.ndarray:
        return read_opened_chunk(array, meta, [c, *rest]).reshape(-1)[: chunks[0]]

    if n_chunks <= 1:
        parts = [one(c) for c in range(n_chunks)]
    else:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(16, n_chunks)) as pool:
            parts = list(pool.map(one, range(n_chunks)))
    if not parts:
        return np.zeros(0, dtype=_numpy_dtype(meta))
    return np.concatenate(parts)[: shape[0]]


def read_opened_chunk(array: Any, meta: dict[str, Any], coords: Sequence[int]) -> np.ndarray:
    """:func:`read_chunk` of an array already opened (``meta``: its metadata dict)."""
    if "string_kind" in meta:  # variable-length strings: an object array
        return read_string_chunk(array, coords, tuple(meta["chunks"]))
    data = np.asarray(array.read_chunk(list(coords)))
    return as_stored(data, _numpy_dtype(meta))


__all__ = ["ArrayGeometry", "open_geometries", "open_hierarchy", "read_chunk"]
