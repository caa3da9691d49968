"""Masks and predicates: which samples (or patches) an epoch draws, decided once, before
the first epoch, so every epoch's count is known and batches stay full and equal on every
rank.

``sample_filter=`` takes

* a boolean array along the sample axis (a store path or an ndarray): the anchors to draw;
* a per-pixel mask (a store path or an ndarray) over the patch dimensions, static
  ``(*extents)`` or per sample ``(n_samples, *extents)``: a patch is drawn when its valid
  fraction reaches ``min_valid`` (without patches, the whole field's fraction); with
  ``crop=``, a mask over the uncropped field is cut to the region;
* a vectorized predicate, called once per stored chunk of the dataset's first variable
  with its ``(n, *field)`` values as batches hold them: it returns ``(n,)`` booleans or an
  ``(n, *extents)`` per-pixel mask. Its table is persisted in ``cache_dir`` (keyed by the
  predicate, the array and the lattice), so a new process reads it instead of decoding the
  archive again.

The result is one boolean per virtual sample (``anchor x per_sample + patch``), which the
epoch planner applies to every order.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
import tempfile
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from . import _ext, arguments, caching
from .errors import InvalidArgumentError, InvalidTypeError
from .geometry import ArrayGeometry, as_stored, geometries_of, read_opened_chunk
from .patching import Patching
from .transforms import display_name

logger = logging.getLogger("insitubatch")


@dataclass(frozen=True, eq=False)
class FilterArguments:
    source: Any  # a store path, an ndarray or a callable
    min_valid: float | None  # per-pixel masks: the valid fraction a patch needs; None: any valid pixel

    @classmethod
    def from_arguments(cls, sample_filter: Any, min_valid: Any) -> "FilterArguments | None":
        if sample_filter is None:
            if min_valid is not None:
                raise InvalidArgumentError("min_valid needs sample_filter= (a per-pixel mask or a predicate)")
            return None
        if not (isinstance(sample_filter, str) or callable(sample_filter) or hasattr(sample_filter, "__array__")):
            raise InvalidTypeError("sample_filter must be a boolean array (or its path in the store) or a"
                                   f" predicate over a decoded chunk, got {type(sample_filter).__name__}")
        if min_valid is not None:
            min_valid = arguments.number("min_valid", min_valid, 0.0, 1.0)
        return cls(sample_filter, min_valid)

    def describe(self, drawn: Mapping[str, int], of: Mapping[str, int]) -> dict[str, Any]:
        """``describe()``'s entry: the source, and per split the samples drawn of those there are."""
        source = self.source
        kind = (f"array {source!r}" if isinstance(source, str) else
                f"predicate {display_name(source)}" if callable(source) else "ndarray")
        return {"source": kind, "min_valid": self.min_valid, "drawn": dict(drawn), "of": dict(of)}

    @staticmethod
    def signature(drawn: Mapping[str, int]) -> str:
        """How the filter changes which samples are drawn (resume states carry it)."""
        return "filtered to " + ", ".join(f"{s} {n}" for s, n in drawn.items())


@dataclass(frozen=True)
class MaskCrop:
    """``crop=`` over a per-pixel mask's axes: per axis (its uncropped extent, start, stop),
    a stop at or below the start wrapping across the end. A mask over the whole field is cut
    to the region, so the same mask serves any crop."""

    axes: tuple[tuple[int, int, int], ...]

    @property
    def full(self) -> tuple[int, ...]:
        return tuple(n for n, _, _ in self.axes)

    def cut(self, values: np.ndarray, lead: int) -> np.ndarray:
        """``values`` (``lead`` leading axes, then the uncropped extents) cut to the region."""
        for i, (n, start, stop) in enumerate(self.axes):
            extent = stop - start if stop > start else n - start + stop
            if extent != n:
                values = np.take(values, (start + np.arange(extent)) % n, axis=lead + i)
        return values


def predicate_runner(start_pass: Callable[[Any], Any], label: str, array_index: int, g: ArrayGeometry,
                     view: np.dtype | None) -> Callable[[Callable[[np.ndarray], Any]], list[Any]]:
    """``run_predicate`` for :func:`evaluate`: one sequential pass (``start_pass(spec)`` starts
    it in the engine) over ``label``, a batch per stored chunk along the sample axis, as
    batches hold it (chunk transforms applied, no patches; ``view``: the dtype to view it as)."""

    def run(fn: Callable[[np.ndarray], Any]) -> list[Any]:
        ids = np.arange(g.n_chunks, dtype=np.int64)
        rows, bounds = _ext.sequential_order(ids, g.sample_chunk_size, g.n_samples, 1)
        spec = _ext.PassSpec()
        spec.split, spec.ref_spc, spec.batch_size = "sample_filter", g.sample_chunk_size, g.sample_chunk_size
        spec.labels = [(label, array_index, 0)]
        spec.set_order(np.asarray(rows), np.asarray(bounds))
        native = start_pass(spec)
        out = []
        try:
            while (item := native.next()) is not None:
                values = item[0][0]
                out.append(fn(as_stored(values, view) if view is not None else values))
        finally:
            native.close("sample_filter evaluated")
        return out

    return run


def read_rows(array: Any, g: ArrayGeometry, c: int) -> np.ndarray:
    """Outer chunk ``c`` of an opened array, sample-first ``(n, *inner)``, assembled from
    its stored chunks."""
    meta = array.metadata
    out = np.empty(g.slot_shape(c), dtype=g.dtype)
    for inner in g.inner_coords():
        tile = np.moveaxis(read_opened_chunk(array, meta, g.physical_chunk_coord(c, inner)), g.sample_axis, 0)
        dst, src = g.tile_placement(c, inner)
        out[dst] = tile[src]
    return out


def _sorted_unique(values: np.ndarray) -> np.ndarray:
    """``np.unique`` without its first call's import of ``numpy.ma`` (~60 ms a process)."""
    values = np.sort(values)
    out: np.ndarray = values[np.concatenate([[True], values[1:] != values[:-1]])]
    return out


def _prefix_at(values: np.ndarray, axis: int, coords: np.ndarray, dtype: Any) -> np.ndarray:
    """Prefix sums of ``values`` along ``axis`` (in ``dtype``) sampled at ``coords`` (sorted,
    each in ``[0, extent]``): entry ``i`` sums the ``coords[i]`` leading entries. Sparse
    coordinates: block sums between them (``add.reduceat`` along a contiguous last axis), then
    a cumulative sum over the few blocks; dense ones: a cumulative sum along that last axis.
    Never numpy's cumulative sum along a leading axis, its slow path."""
    extent = values.shape[axis]
    moved = np.ascontiguousarray(np.moveaxis(values, axis, -1))
    if 4 * len(coords) > extent:
        at, blocks = coords, moved
    else:
        edges = _sorted_unique(np.concatenate([[0], coords[coords < extent]]))
        # A mask's block sums along one axis fit uint16 below 2^16 pixels: numpy's uint8 ->
        # uint16 loop is 2-3x its bool -> int32 one; the prefix below widens them.
        narrow = moved.dtype == bool and extent < 2**16
        blocks = np.add.reduceat(moved.view(np.uint8) if narrow else moved, edges, -1,
                                 dtype=np.uint16 if narrow else dtype)
        at = np.searchsorted(np.append(edges, extent), coords)
    prefix = np.zeros((*blocks.shape[:-1], blocks.shape[-1] + 1), dtype=dtype)
    np.cumsum(blocks, axis=-1, dtype=dtype, out=prefix[..., 1:])
    return np.moveaxis(prefix[..., at], -1, axis)


def _fractions(mask: np.ndarray, patching: Patching) -> np.ndarray:
    """``(rows, per_sample)``: each patch's valid fraction, lattice order (the engine's),
    for a ``(rows, *extents)`` boolean mask: box sums by inclusion-exclusion over the
    integral image, sampled only at the patches' corner coordinates, one row at a time. A
    window past an axis's end (``patch_edges="pad"``) counts the pixels outside as invalid:
    the fraction is over the whole patch."""
    k = len(patching.extent)
    size = float(np.prod(patching.size))
    coords, where = [], []  # per axis: the corner coordinates, and each origin's low/high corner in them
    for axis in range(k):
        origins = patching.lattice(axis).astype(np.int64)
        ends = np.clip(np.concatenate([origins, origins + patching.size[axis]]), 0, patching.extent[axis])
        unique = _sorted_unique(ends)
        coords.append(unique)
        where.append(np.searchsorted(unique, ends).reshape(2, -1))
    corners = []
    for corner in itertools.product((0, 1), repeat=k):
        corners.append((-1 if (k - sum(corner)) % 2 else 1, np.ix_(*(w[c] for w, c in zip(where, corner)))))
    # Counts fit int32 below 2^31 pixels: half the memory traffic of int64.
    dtype = np.int32 if int(np.prod(patching.extent)) < 2**31 else np.int64
    out = np.empty((mask.shape[0], patching.per_sample))
    for row in range(mask.shape[0]):
        sampled = mask[row]
        for axis in reversed(range(k)):  # the contiguous last axis first: it shrinks the array cheaply
            sampled = _prefix_at(sampled, axis, coords[axis], dtype)
        sampled = sampled.astype(np.int64)
        total = sum(sign * sampled[index] for sign, index in corners)
        out[row] = np.asarray(total).reshape(-1) / size
    return out


def _valid_rows(values: np.ndarray, n_rows: int, extents: tuple[int, ...], patching: Patching | None,
                min_valid: float | None, what: str) -> np.ndarray:
    """``(n_rows, per_sample)`` booleans from a filter's ``values`` for ``n_rows`` samples:
    one per sample, or a per-pixel mask over ``extents``."""
    values = np.asarray(values)
    if values.dtype.kind not in "biu":
        raise InvalidArgumentError(f"{what} must be boolean (or integer: nonzero is valid), got {values.dtype}")
    per_sample = 1 if patching is None else patching.per_sample
    if values.shape == (n_rows,):
        if min_valid is not None:
            raise InvalidArgumentError(f"min_valid applies to per-pixel masks; {what} has one value per sample")
        return np.repeat(values.astype(bool)[:, None], per_sample, axis=1)
    if values.shape != (n_rows, *extents):
        raise InvalidArgumentError(
            f"{what} has shape {values.shape}: expected ({n_rows},) (one per sample) or {(n_rows, *extents)}"
            f" (per pixel over {'the patch dimensions' if patching else 'the field'})")
    valid = values.astype(bool, copy=False)
    if patching is None:
        fraction = valid.reshape(n_rows, -1).mean(axis=1)[:, None] if valid[0].size else np.ones((n_rows, 1))
    else:
        if patching.mode != "grid":
            raise InvalidArgumentError('a per-pixel sample_filter needs patch_mode="grid" (random origins are'
                                       " drawn per epoch; a mask along the sample axis works with either)")
        fraction = _fractions(valid, patching)
    return fraction >= min_valid if min_valid is not None else fraction > 0


def evaluate(args: FilterArguments, *, hierarchy: Any, store: Any, n_samples: int, patching: Patching | None,
             field_extents: tuple[int, ...], run_predicate: Callable[[Callable[[np.ndarray], Any]], Any],
             cache_dir: str | None, cache_key: Mapping[str, Any], readonly: bool = False,
             mask_crop: MaskCrop | None = None) -> np.ndarray:
    """The valid virtual samples: ``(n_samples x per_sample,)`` booleans. ``field_extents``:
    the per-pixel mask's extents (the patch dimensions', or the first variable's field);
    ``run_predicate(fn)`` calls ``fn(values)`` once per stored chunk of the first variable
    in order and returns the results; ``cache_key`` identifies that variable's data;
    ``readonly``: a persisted table is read but none is written (``readonly_cache``);
    ``mask_crop``: the dataset's crop over the mask's axes (a predicate sees cropped values
    already; a mask over the uncropped field is cut to the region)."""
    extents = tuple(patching.extent) if patching is not None else field_extents
    source, min_valid = args.source, args.min_valid
    if callable(source) and not isinstance(source, str):
        return _predicate_table(source, min_valid, n_samples, patching, extents, run_predicate, cache_dir, cache_key,
                                readonly)
    crop = mask_crop if mask_crop is not None and mask_crop.full != extents else None
    full = crop.full if crop is not None else None

    def region(values: np.ndarray, lead: int) -> np.ndarray:  # a mask over the uncropped field, cut
        return crop.cut(values, lead) if crop is not None and values.shape[lead:] == crop.full else values

    shapes = f"{(n_samples,)}, {(n_samples, *extents)} or {extents}" + (
        f" (or {(n_samples, *full)} or {full} over the uncropped field)" if full else "")
    if isinstance(source, str):
        g = geometries_of(hierarchy, store, [source])[source.strip("/")]
        array = hierarchy.open_array(g.path)
        if g.shape in (extents, full):  # one mask for every sample: read whole (axis 0 as the outer axis)
            g = ArrayGeometry(g.path, g.shape, g.chunks, g.dtype, sample_axis=0)
            mask = np.concatenate([read_rows(array, g, c) for c in range(g.n_chunks)]) if g.n_chunks else None
            return _tile_static(None if mask is None else region(mask, 0), n_samples, patching, min_valid,
                                f"sample_filter array {source!r}")
        if g.n_samples != n_samples:
            raise InvalidArgumentError(f"sample_filter array {source!r} has shape {g.shape}: expected {shapes}")
        parts = [_valid_rows(region(read_rows(array, g, c), 1), len(g.samples_in_chunk(c)), extents, patching,
                             min_valid, f"sample_filter array {source!r}") for c in range(g.n_chunks)]
        return np.concatenate(parts).reshape(-1) if parts else np.zeros(0, dtype=bool)
    values = np.asarray(source)
    if full is not None and values.shape not in ((n_samples,), extents, full, (n_samples, *extents),
                                                 (n_samples, *full)):
        raise InvalidArgumentError(f"sample_filter has shape {values.shape}: expected {shapes}")
    if values.shape in (extents, full) and values.shape != (n_samples,):
        return _tile_static(region(values, 0), n_samples, patching, min_valid, "sample_filter")
    return _valid_rows(region(values, 1), n_samples, extents, patching, min_valid, "sample_filter").reshape(-1)


def _tile_static(mask: Any, n_samples: int, patching: Patching | None, min_valid: float | None,
                 what: str) -> np.ndarray:
    """A static per-pixel mask's verdict, the same for every sample."""
    mask = np.asarray(mask)
    one = _valid_rows(mask[None], 1, mask.shape, patching, min_valid, what)
    return np.tile(one, (n_samples, 1)).reshape(-1)


def _predicate_table(predicate: Callable[..., Any], min_valid: float | None, n_samples: int,
                     patching: Patching | None, extents: tuple[int, ...],
                     run_predicate: Callable[[Callable[[np.ndarray], Any]], Any], cache_dir: str | None,
                     cache_key: Mapping[str, Any], readonly: bool) -> np.ndarray:
    token, best_effort = caching.transform_token(predicate)
    key = hashlib.sha256(json.dumps({
        "predicate": token, "min_valid": min_valid, "n_samples": n_samples, **cache_key,
        "patches": None if patching is None else patching.describe(),
    }, sort_keys=True, default=str).encode()).hexdigest()[:32]
    folder = None if cache_dir is None else os.path.join(cache_dir, "sample-filters")
    path = None if folder is None else os.path.join(folder, f"{key}.npy")
    if path is not None:
        table = _read_table(path, n_samples * (patching.per_sample if patching else 1))
        if table is not None:
            return table

    def per_chunk(values: np.ndarray) -> np.ndarray:
        out = predicate(values)
        return _valid_rows(out, values.shape[0], extents, patching, min_valid, "the sample_filter predicate's result")

    table = np.concatenate(list(run_predicate(per_chunk)) or [np.zeros((0, 1), dtype=bool)]).reshape(-1)
    if folder is not None and path is not None and not best_effort and not readonly:
        _write_table(folder, path, table)
    return table


def _read_table(path: str, rows: int) -> np.ndarray | None:
    """A persisted table of ``rows`` booleans, or None (absent, unreadable, another shape).
    A link in its place is not followed: the cache reads only names it wrote."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as exc:
        logger.warning("sample_filter: not reading %s (%s); evaluating again", path, exc)
        return None
    try:
        with os.fdopen(fd, "rb") as f:
            table: np.ndarray = np.asarray(np.load(f, allow_pickle=False))
    except (OSError, ValueError) as exc:
        logger.warning("sample_filter: ignoring the unreadable table %s (%s); evaluating again", path, exc)
        return None
    return table if table.dtype == bool and table.shape == (rows,) else None


def _write_table(folder: str, path: str, table: np.ndarray) -> None:
    """Writes ``table`` whole or not at all (temp file + rename); a failure (a full disk, a
    link where the folder should be) is a warning: the table is only a saving."""
    tmp = None
    try:
        os.makedirs(folder, exist_ok=True)
        if os.path.islink(folder):
            raise OSError(f"{folder} is a link, not a folder this cache made")
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".table-", suffix=".npy")
        with os.fdopen(fd, "wb") as f:
            np.save(f, table, allow_pickle=False)
        os.replace(tmp, path)  # a reader sees the whole table or none
        tmp = None
    except OSError as exc:
        logger.warning("sample_filter: the table was not persisted in %s (%s)", folder, exc)
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


__all__ = ["FilterArguments", "evaluate", "read_rows"]
