"""Crops: a coordinate selection's region (``crop=``), cut before the pool.

``crop=`` keeps, per dimension name (or field axis number), an index range of every array
that has the dimension: the engine holds only the tiles the range covers, so a region of a
large field costs what the region costs. With an :func:`~insitubatch.select` Selection it
also carries the Selection's sample range. This module resolves the argument against the
dataset's arrays (the engine's ``crops``), and says what a crop changes in the reports.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from . import arguments
from .errors import InvalidArgumentError, InvalidTypeError
from .geometry import ArrayGeometry


@dataclass(frozen=True)
class CropArguments:
    """``crop=`` as given: per dimension name (or field axis number) an index range
    ``(start, stop)``, ``stop <= start`` wrapping across the axis's end; with a
    :class:`~insitubatch.Selection`, also its sample range."""

    ranges: tuple[tuple[str | int, int, int], ...]
    samples: tuple[int, int] | None = None

    @classmethod
    def from_arguments(cls, crop: Any) -> "CropArguments | None":
        if crop is None:
            return None
        samples = None
        if hasattr(crop, "crop") and hasattr(crop, "samples"):  # an ib.select(...) Selection
            samples = None if crop.samples is None else (int(crop.samples[0]), int(crop.samples[1]))
            crop = crop.crop
        if not isinstance(crop, Mapping):
            raise InvalidTypeError("crop must be an ib.select(...) Selection or a mapping of dimension name to an"
                                   f" index range (start, stop), got {type(crop).__name__}")
        ranges: list[tuple[str | int, int, int]] = []
        for key, bounds in crop.items():
            if isinstance(key, (bool, np.bool_)) or not isinstance(key, (str, int, np.integer)):
                raise InvalidTypeError(f"crop: {key!r} is neither a dimension name nor a field axis number")
            try:
                start, stop = bounds
            except (TypeError, ValueError):
                raise InvalidTypeError(f"crop[{key!r}] must be an index range (start, stop), got {bounds!r}") from None
            ranges.append((key if isinstance(key, str) else int(key),
                           arguments.integer(f"crop[{key!r}] start", start, (0, None)),
                           arguments.integer(f"crop[{key!r}] stop", stop, (0, None))))
        if not ranges and samples is None:
            return None
        return cls(tuple(ranges), samples)


@dataclass(frozen=True, eq=False)
class Crop:
    """A resolved crop: per array path, the kept range per field axis (the engine's
    ``crops`` argument) and the cropped field; the sample range of a Selection."""

    ranges: dict[str, tuple[list[int], list[int]]]  # path -> (starts, stops) per field axis
    samples: tuple[int, int] | None

    def view(self, g: ArrayGeometry) -> ArrayGeometry:
        """``g`` as the engine holds it: the cropped field axes at their cropped extents."""
        if g.path not in self.ranges:
            return g
        starts, stops = self.ranges[g.path]
        inner = iter(stop - start if stop > start else n - start + stop
                     for start, stop, n in zip(starts, stops, g.inner_shape))
        shape = tuple(n if axis == g.sample_axis else next(inner) for axis, n in enumerate(g.shape))
        return ArrayGeometry(g.path, shape, g.chunks, g.dtype, offset=g.offset, sample_axis=g.sample_axis)

    def clip(self, window: tuple[int, int]) -> tuple[int, int]:
        """An anchor range narrowed to a Selection's sample range."""
        if self.samples is None:
            return window
        return max(window[0], self.samples[0]), min(window[1], self.samples[1])

    def fingerprint(self, path: str) -> str:
        """What a cache_dir entry of ``path`` adds to its fingerprint: a cropped array's
        slots hold only the crop's tiles."""
        if path not in self.ranges:
            return ""
        starts, stops = self.ranges[path]
        return f"|crop:{starts}:{stops}"

    def describe(self) -> dict[str, Any]:
        return {"ranges": {p: {"start": s, "stop": e} for p, (s, e) in self.ranges.items()}, "samples": self.samples}

    def signature(self) -> str:
        """How the crop changes which samples are drawn (resume states carry it)."""
        return "" if self.samples is None else f"samples {self.samples[0]}..{self.samples[1]}"


def resolve(args: CropArguments | None, geometries: Mapping[str, ArrayGeometry],
            dimension_names: Mapping[str, tuple[str, ...]]) -> Crop | None:
    """``args`` against every array the dataset reads (by path)."""
    if args is None:
        return None
    ranges: dict[str, tuple[list[int], list[int]]] = {}
    found: set[str | int] = set()
    known: set[str] = set()
    sample_dims = set()
    for g in geometries.values():
        if g.path in ranges:
            continue
        dims = tuple(dimension_names.get(g.path, ()))
        if dims:
            sample_dims.add(dims[g.sample_axis])
        field_dims = [d for axis, d in enumerate(dims) if axis != g.sample_axis] if dims else []
        known.update(field_dims)
        inner = tuple(g.inner_shape)
        starts, stops, cropped = [0] * len(inner), list(inner), False
        for key, start, stop in args.ranges:
            where = (field_dims.index(key) if key in field_dims else -1) if isinstance(key, str) else (
                key if 0 <= key < len(inner) else -1)
            if where < 0:
                continue
            found.add(key)
            n = inner[where]
            if start > n or stop > n:
                raise InvalidArgumentError(f"crop[{key!r}] = ({start}, {stop}) is outside [0, {n}] (the"
                                           f" {key!r} extent of {g.path!r})")
            starts[where], stops[where], cropped = start, stop, True
        if cropped:
            ranges[g.path] = (starts, stops)
    for key, _, _ in args.ranges:
        if key in found:
            continue
        if key in sample_dims:
            raise InvalidArgumentError(f"crop names {key!r}, the sample dimension: take a sample range with"
                                       " split_by_chunk(..., sample_range=(start, stop)) or crop=ib.select(...)")
        raise InvalidArgumentError(f"crop names {key!r}, which no variable has as a field axis (known dimensions:"
                                   f" {', '.join(sorted(known)) or 'none: use field axis numbers'})")
    return Crop(ranges, args.samples)


__all__ = ["Crop", "CropArguments", "resolve"]
