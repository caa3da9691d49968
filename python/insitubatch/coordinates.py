"""Coordinate value ranges as index ranges, without xarray: :func:`select` and :class:`Selection`.

A dimension's coordinate is the 1-D array named after it (CF: ``_ARRAY_DIMENSIONS`` in
zarr v2 attributes, ``dimension_names`` in v3), read through the package's own reader.
A range ``(a, b)`` selects, like xarray's ``.sel(dim=slice(a, b))``, every position whose
coordinate value ``v`` has ``a <= v <= b`` (both ends inclusive), as one index range:

* on a coordinate that is not a longitude the ends are the interval's bounds *in either
  order*: ``lat=(30, 60)`` and ``lat=(60, 30)`` select the same rows, whether the axis
  ascends or descends — the rows of ``sel(lat=slice(30, 60))`` on an ascending axis and of
  ``sel(lat=slice(60, 30))`` on a descending one;
* on a longitude the range runs *eastward* from ``a`` to ``b``, both taken modulo 360:
  ``lon=(350, 20)`` on a 0..360 grid is ``[350, 360) ∪ [0, 20]``, ``lon=(170, -170)`` on a
  -180..180 grid is ``[170, 180) ∪ [-180, -170]``, and ``lon=(-10, 20)`` on a 0..360 grid
  wraps too. Such a range that crosses the grid's seam is an index range that wraps: the
  positions ``[start, n)`` then ``[0, stop)``. A range of 360 degrees or more is the whole
  circle. A coordinate is a longitude when it is named ``lon`` or ``longitude`` (any case),
  or its attributes say ``standard_name: longitude`` or ``units: degrees_east``.

Datetime coordinates (CF ``"<unit> since <date>"`` numbers, or stored datetime64) take
ISO strings, numpy datetime64 and Python datetimes as ends: see :mod:`insitubatch.cf_time`.
"""

from __future__ import annotations

import json
import numbers
import posixpath
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from . import _ext, cf_time
from .errors import InvalidArgumentError, InvalidTypeError, NotFoundError, UnsupportedError
from .geometry import _batchable_paths, geometries_of, read_vector
from .stores import as_native_store

_LONGITUDE_NAMES = ("lon", "longitude")
_LONGITUDE_UNITS = ("degrees_east", "degree_east", "degrees_e", "degree_e", "degreese", "degreee")

Range = tuple[int, int]


@dataclass(frozen=True)
class Selection:
    """Index ranges for coordinate value ranges: what :func:`select` returns.

    * ``sample_dim``: the sample axis' dimension (the variables' first dimension, or the
      ``sample_dim=`` given);
    * ``samples``: the half-open ``(start, stop)`` range of samples selected, or None where
      the sample dimension was not restricted;
    * ``crop``: per other restricted dimension, a half-open ``(start, stop)`` index range;
      ``stop <= start`` means the range wraps: positions ``[start, n)`` then ``[0, stop)``
      (``n``: ``lengths[dim]``);
    * ``sizes``: every dimension of the variables, its length after the selection;
    * ``lengths``: every dimension's full length;
    * ``variables``: the arrays whose dimensions these are;
    * ``ends``: per restricted dimension, its first and last selected coordinate values, as text.
    """

    sample_dim: str
    samples: Range | None
    crop: dict[str, Range]
    sizes: dict[str, int]
    lengths: dict[str, int]
    variables: tuple[str, ...]
    ends: dict[str, tuple[str, str]]

    def __hash__(self) -> int:  # the dicts are never mutated: hash their items
        return hash((self.sample_dim, self.samples, tuple(self.crop.items()), self.variables))

    def wraps(self, dim: str) -> bool:
        """Whether ``dim``'s range wraps past the end of its axis back to its start."""
        return dim in self.crop and self.crop[dim][1] <= self.crop[dim][0]

    def isel(self) -> dict[str, slice | np.ndarray]:
        """Per restricted dimension, what selects it positionally: a ``slice``, or for a range
        that wraps an index array (``[start, n)`` then ``[0, stop)``) — as
        ``xarray.Dataset.isel(**sel.isel())`` takes it."""
        out: dict[str, slice | np.ndarray] = {}
        if self.samples is not None:
            out[self.sample_dim] = slice(*self.samples)
        for dim, (start, stop) in self.crop.items():
            if stop <= start:
                out[dim] = np.concatenate([np.arange(start, self.lengths[dim]), np.arange(0, stop)])
            else:
                out[dim] = slice(start, stop)
        return out

    def axis_ranges(self, dims: Sequence[str]) -> tuple[Range | None, ...]:
        """Per axis of an array whose dimensions are ``dims``: its ``(start, stop)`` range
        (a wrap as in ``crop``), or None where the axis is taken whole."""
        ranges = dict(self.crop)
        if self.samples is not None:
            ranges[self.sample_dim] = self.samples
        return tuple(ranges.get(d) for d in dims)

    def apply(self, array: np.ndarray, dims: Sequence[str]) -> np.ndarray:
        """``array`` (whose axes are ``dims``) restricted to the selection, axis by axis."""
        if np.ndim(array) != len(dims):
            raise InvalidArgumentError(f"an array of {np.ndim(array)} axes with dims {tuple(dims)}")
        out = np.asarray(array)
        for axis, index in enumerate(self.isel().get(d) for d in dims):
            if isinstance(index, slice):
                out = out[(slice(None),) * axis + (index,)]
            elif index is not None:
                out = np.take(out, index, axis=axis)
        return out

    def __repr__(self) -> str:
        parts = []
        for dim, size in self.sizes.items():
            bounds = self.samples if dim == self.sample_dim else self.crop.get(dim)
            if bounds is None:
                parts.append(f"{dim}: all {size}")
                continue
            role = "samples " if dim == self.sample_dim else ""
            wrap = ", wraps" if self.wraps(dim) else ""
            first, last = self.ends[dim]
            parts.append(f"{dim}: {role}{bounds[0]}:{bounds[1]}{wrap} ({size} of {self.lengths[dim]},"
                         f" {first} .. {last})")
        return f"<Selection of {', '.join(self.variables)} along {self.sample_dim!r}; {'; '.join(parts)}>"


@dataclass(frozen=True)
class _Coordinate:
    """A 1-D coordinate ready to search: ``values`` as stored order, in the searched domain
    (numbers as stored; times as int64 ticks of ``tick_ns``)."""

    dim: str
    path: str
    values: np.ndarray
    descending: bool
    longitude: bool
    tick_ns: int = 0  # > 0: a time coordinate

    def label(self, index: int) -> str:
        v = self.values[index]
        return cf_time.format_tick(int(v), self.tick_ns) if self.tick_ns else repr(v.item())


def select(store: Any, ranges: Mapping[str, Any] | None = None, /, *, variables: Sequence[str] | None = None,
           sample_dim: str | None = None, **dims: Any) -> Selection:
    """The index ranges that coordinate value ranges select in ``store``.

    ``sel = select(store, time=("2020-01-01", "2020-12-31"), lat=(30, 60), lon=(350, 20))``:
    per dimension a ``(start, end)`` pair of coordinate values, both ends included (see the
    module doc for the order of the ends, longitudes that wrap and dates); ``ranges`` takes
    the same as a mapping, for dimension names that are not identifiers. An end of None is
    open (not on a longitude). ``store`` is anything :class:`InSituDataset` takes (a URL or
    path, a native or zarr-python store). ``variables`` are the arrays whose dimensions are
    meant (default: the arrays a dataset would take); ``sample_dim`` overrides their first
    dimension as the sample axis. Reads each named coordinate once; no chunk of data.
    """
    requested = dict(ranges) if ranges is not None else {}
    twice = sorted(set(requested) & set(dims))
    if twice:
        raise InvalidArgumentError(f"{', '.join(map(repr, twice))} given both in ranges and as a keyword")
    requested.update(dims)
    if isinstance(variables, str):
        raise InvalidTypeError(f"variables must be a list of array paths, not the string {variables!r}"
                               f" (did you mean [{variables!r}]?)")
    native = as_native_store(store)
    hierarchy = _ext.open_hierarchy(native)
    paths = list(geometries_of(hierarchy, native, variables)) if variables is not None else \
        _batchable_paths(hierarchy, native, 0)
    dims_of = {p: _dimension_names(hierarchy, p) for p in paths}
    lengths: dict[str, int] = {}
    for p, names in dims_of.items():
        for name, n in zip(names, hierarchy.array_metadata(p)["shape"]):
            if lengths.setdefault(name, int(n)) != int(n):
                raise InvalidArgumentError(
                    f"dimension {name!r} has length {lengths[name]} in one variable and {n} in {p!r}")
    sample = _sample_dim(dims_of, sample_dim)
    crop: dict[str, Range] = {}
    samples: Range | None = None
    ends: dict[str, tuple[str, str]] = {}
    for dim, bounds in requested.items():
        if dim not in lengths:
            _unknown_dimension(hierarchy, dim, lengths, paths)
        where = f"{dim}={bounds!r}"
        coord = _read_coordinate(hierarchy, dim, paths, dims_of, lengths[dim])
        lo, hi = _pair(bounds, where, coord.longitude)
        start, stop = _index_range(coord, lo, hi, where)
        last = (stop - 1) % lengths[dim]
        ends[dim] = (coord.label(start), coord.label(last))
        if dim == sample:
            if stop <= start:
                raise UnsupportedError(f"{where} wraps across the seam of {dim!r}, the sample axis: a"
                                       " sample range must be one run of samples")
            samples = (start, stop)
        else:
            crop[dim] = (start, stop)
    sizes = {d: n for d, n in lengths.items()}
    for dim, (start, stop) in ([(sample, samples)] if samples else []) + list(crop.items()):
        sizes[dim] = stop - start if stop > start else lengths[dim] - start + stop
    return Selection(sample_dim=sample, samples=samples, crop=crop, sizes=sizes, lengths=lengths,
                     variables=tuple(paths), ends=ends)


# -- the store's dimensions ---------------------------------------------------------------


def _dimension_names(hierarchy: Any, path: str) -> tuple[str, ...]:
    meta = hierarchy.array_metadata(path)
    names = tuple(meta["dimension_names"])
    if len(names) != len(meta["shape"]) or not all(names):
        raise InvalidArgumentError(
            f"array {path!r} does not name its dimensions (no _ARRAY_DIMENSIONS attribute in zarr v2, no"
            " dimension_names in v3): select finds coordinates by dimension name")
    return names


def _sample_dim(dims_of: Mapping[str, tuple[str, ...]], sample_dim: str | None) -> str:
    if sample_dim is not None:
        if not isinstance(sample_dim, str):
            raise InvalidTypeError(f"sample_dim must be a dimension name, got {sample_dim!r}")
        lacking = [p for p, names in dims_of.items() if sample_dim not in names]
        if lacking:
            raise InvalidArgumentError(f"sample_dim {sample_dim!r} is not a dimension of {', '.join(map(repr, lacking))}"
                                       f" (dimensions: {dict(dims_of)})")
        return sample_dim
    firsts = {names[0] for names in dims_of.values()}
    if len(firsts) > 1:
        raise InvalidArgumentError(
            f"the variables' first dimensions differ ({dict(dims_of)}): name the sample axis with sample_dim=")
    return firsts.pop()


def _unknown_dimension(hierarchy: Any, dim: str, lengths: Mapping[str, int], paths: Sequence[str]) -> None:
    if _is_array(hierarchy, dim):
        names = _dimension_names_or_none(hierarchy, dim)
        if names is not None and len(names) > 1:
            raise UnsupportedError(
                f"{dim!r} is a {len(names)}-D coordinate (dimensions {names}): select reads 1-D coordinates"
                f" named after their dimension; select along {', '.join(map(repr, names))} by their own coordinates")
    raise InvalidArgumentError(f"{dim!r} is not a dimension of {', '.join(map(repr, paths))}; their dimensions"
                               f" are {', '.join(map(repr, lengths))}")


def _is_array(hierarchy: Any, path: str) -> bool:
    """Whether ``path`` is an array (asked by name: a store that cannot list answers too)."""
    try:
        return bool(hierarchy.kind(path) == "array")
    except NotFoundError:
        return False


def _dimension_names_or_none(hierarchy: Any, path: str) -> tuple[str, ...] | None:
    names = tuple(hierarchy.array_metadata(path)["dimension_names"])
    return names if all(names) else None


def _read_coordinate(hierarchy: Any, dim: str, paths: Sequence[str], dims_of: Mapping[str, tuple[str, ...]],
                     length: int) -> _Coordinate:
    """``dim``'s coordinate: the array named ``dim`` beside the first variable with that
    dimension (in its group), else at the store's root."""
    holder = next(p for p in paths if dim in dims_of[p])
    candidates = list(dict.fromkeys([posixpath.join(posixpath.dirname(holder), dim).lstrip("/"), dim]))
    path = next((c for c in candidates if _is_array(hierarchy, c)), None)
    if path is None:
        raise NotFoundError(f"dimension {dim!r} has no coordinate: no array named {dim!r} (looked for"
                            f" {', '.join(map(repr, candidates))}); select needs one to read values from")
    meta = hierarchy.array_metadata(path)
    where = f"coordinate {path!r}"
    if len(meta["shape"]) != 1:
        raise UnsupportedError(f"{where} is {len(meta['shape'])}-D (shape {tuple(meta['shape'])}): select reads 1-D"
                               f" coordinates named after their dimension")
    if int(meta["shape"][0]) != length:
        raise InvalidArgumentError(f"{where} holds {meta['shape'][0]} values but dimension {dim!r} has length {length}")
    if length == 0:
        raise InvalidArgumentError(f"{where} is empty: there is nothing to select")
    attrs = json.loads(meta.get("attributes_json") or "{}")
    array = hierarchy.open_array(path)
    values = read_vector(array, array.metadata)
    tick_ns = 0
    if values.dtype.kind == "M" or cf_time.is_cf_time(attrs):
        values, tick_ns = cf_time.decode(values, attrs, where)
    elif values.dtype.kind not in "iuf":
        raise UnsupportedError(f"{where} holds {values.dtype} values: select reads numeric and time coordinates")
    elif values.dtype.kind == "f" and np.isnan(values).any():
        raise InvalidArgumentError(f"{where} holds NaN at index {int(np.flatnonzero(np.isnan(values))[0])}:"
                                   " a coordinate must hold a value everywhere")
    elif "scale_factor" in attrs or "add_offset" in attrs:  # CF packing, as xarray decodes it
        values = values * np.float64(attrs.get("scale_factor", 1.0)) + np.float64(attrs.get("add_offset", 0.0))
    steps = np.diff(values)
    descending = bool(len(steps)) and bool((steps < 0).any())
    if (steps > 0).any() and descending:
        at = int(np.flatnonzero(steps > 0)[0] if steps[0] < 0 else np.flatnonzero(steps < 0)[0])
        raise InvalidArgumentError(
            f"{where} is not monotonic (it turns at index {at + 1}: {values[at].item()!r} then"
            f" {values[at + 1].item()!r}):"
            " select needs an ascending or a descending coordinate")
    longitude = tick_ns == 0 and (
        dim.lower() in _LONGITUDE_NAMES or str(attrs.get("standard_name", "")).lower() == "longitude"
        or str(attrs.get("units", "")).lower().replace(" ", "") in _LONGITUDE_UNITS)
    return _Coordinate(dim, path, values, descending, longitude, tick_ns)


# -- value ranges to index ranges ----------------------------------------------------------


def _pair(bounds: Any, where: str, longitude: bool) -> tuple[Any, Any]:
    if isinstance(bounds, slice):
        if bounds.step is not None:
            raise InvalidArgumentError(f"{where}: a range has no step")
        bounds = (bounds.start, bounds.stop)
    if isinstance(bounds, (str, bytes)) or not isinstance(bounds, (tuple, list)) or len(bounds) != 2:
        raise InvalidTypeError(f"{where}: a range is a (start, end) pair of coordinate values (for one value v, (v, v))")
    if longitude and (bounds[0] is None or bounds[1] is None):
        raise InvalidArgumentError(f"{where}: a longitude range needs both ends (it runs eastward from one to the other)")
    return bounds[0], bounds[1]


def _index_range(coord: _Coordinate, lo: Any, hi: Any, where: str) -> Range:
    """The ``(start, stop)`` positions of ``coord`` in ``[lo, hi]`` (wrapping on a longitude)."""
    values = coord.values
    n = len(values)
    ascending = values[::-1] if coord.descending else values
    if coord.longitude:
        first, last = _longitude_run(coord, ascending, _number(coord, lo, where), _number(coord, hi, where), where)
    else:
        if lo is not None and hi is not None and _bound(coord, lo, False, where) > _bound(coord, hi, False, where):
            lo, hi = hi, lo  # the ends in either order
        low, high = _bound(coord, lo, False, where), _bound(coord, hi, True, where)
        first = 0 if low is None else _search(ascending, low, "left")
        last = n if high is None else _search(ascending, high, "right")
        if first >= last:
            _empty(coord, ascending, low, high, where)
    if coord.descending:  # positions [a, b) of the reversed axis are [n - b, n - a) as stored
        first, last = n - last, n - first
    return int(first), int(last)


def _longitude_run(coord: _Coordinate, ascending: np.ndarray, a: Any, b: Any, where: str) -> Range:
    """The eastward arc from ``a`` to ``b`` on an ascending longitude axis; ``stop <= start``
    where it wraps past the axis' last value to its first."""
    n = len(ascending)
    c0, cn = ascending[0].item(), ascending[-1].item()
    if cn - c0 > 360:
        raise UnsupportedError(f"{where}: the longitudes of {coord.path!r} span {c0} .. {cn}, more than 360 degrees")
    if b - a >= 360:  # the whole circle
        return 0, n
    # An end stays as given where it lies on the axis, else moves by whole turns into [c0, c0 + 360).
    start_at = a if c0 <= a <= cn else a - 360 * np.floor((a - c0) / 360)
    end_at = b if c0 <= b <= cn else b - 360 * np.floor((b - c0) / 360)
    first = _search(ascending, _cast(ascending, start_at, False), "left")
    last = _search(ascending, _cast(ascending, end_at, True), "right")
    if start_at <= end_at and first < last:
        return first, last
    if start_at > end_at and (first < n or last > 0):  # across the seam: [first, n) then [0, last)
        return (first % n, last) if last > 0 else (first, n)
    on_arc = (c0 - a) % 360 <= (b - a) % 360 or (a - c0) % 360 <= cn - c0
    if on_arc:
        raise InvalidArgumentError(f"{where} selects nothing: no longitude of {coord.path!r} lies on that arc"
                                   f"{_neighbours(coord, ascending, _cast(ascending, start_at, False))}")
    raise InvalidArgumentError(f"{where} lies outside the longitudes of {coord.path!r}, which run {c0} .. {cn}")


def _number(coord: _Coordinate, value: Any, where: str) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise InvalidTypeError(f"{where}: coordinate {coord.path!r} holds numbers ({coord.values.dtype}),"
                               f" so a range end is a number, not {type(value).__name__} {value!r}")
    if np.isnan(float(value)):
        raise InvalidArgumentError(f"{where}: a range end is NaN")
    if coord.longitude and not np.isfinite(float(value)):
        raise InvalidArgumentError(f"{where}: a longitude range end is a finite number of degrees")
    return value  # type: ignore[return-value]


def _bound(coord: _Coordinate, value: Any, upper: bool, where: str) -> Any:
    """A range end in the searched domain (None: open)."""
    if value is None:
        return None
    if coord.tick_ns:
        return cf_time.bound_ticks(value, coord.tick_ns, upper, where)
    return _cast(coord.values, _number(coord, value, where), upper)


def _cast(values: np.ndarray, value: Any, upper: bool) -> Any:
    """A number compared as the coordinate's own type: a float end rounded to a float32
    coordinate's precision (as pandas compares it); on an integer coordinate, inwards."""
    if values.dtype.kind == "f":
        return np.asarray(value).astype(values.dtype)[()]
    value = float(value) if not isinstance(value, (int, np.integer)) else int(value)
    if isinstance(value, float) and np.isfinite(value):
        value = int(np.floor(value) if upper else np.ceil(value))
    return value


def _search(ascending: np.ndarray, value: Any, side: str) -> int:
    """``searchsorted``, exact for an end beyond an integer axis' own type."""
    if ascending.dtype.kind in "iu":
        if value < ascending[0].item():
            return 0
        if value > ascending[-1].item():
            return len(ascending)
        value = np.asarray(value, dtype=ascending.dtype)
    return int(np.searchsorted(ascending, value, side))  # type: ignore[call-overload]


def _empty(coord: _Coordinate, ascending: np.ndarray, low: Any, high: Any, where: str) -> None:
    first, last = coord.label(0), coord.label(len(ascending) - 1)
    if (high is not None and high < ascending[0]) or (low is not None and low > ascending[-1]):
        raise InvalidArgumentError(f"{where} lies outside coordinate {coord.path!r}, whose values run {first} .. {last}")
    raise InvalidArgumentError(f"{where} selects nothing: no value of coordinate {coord.path!r} lies in that range"
                               f"{_neighbours(coord, ascending, low if low is not None else high)}")


def _neighbours(coord: _Coordinate, ascending: np.ndarray, value: Any) -> str:
    """``"; the nearest values are x and y"``: the axis' values either side of ``value``."""
    i = _search(ascending, value, "left")
    near = ascending[max(0, i - 1): i + 1]
    labels = [cf_time.format_tick(int(v), coord.tick_ns) if coord.tick_ns else repr(v.item()) for v in near]
    return f"; the nearest values are {' and '.join(labels)}"


__all__ = ["Selection", "select"]
