"""Patch samples: many training samples from each decoded field.

``InSituDataset(..., patch={"y": 256, "x": 256})`` makes a sample an (anchor, patch) pair:
a batch row of a patched variable is a ``patch``-sized window of its field, cut by the
engine's gather from the decoded chunk in the pool, so a chunk is still read and decoded
once per epoch however many patches it yields. Grid mode visits every position of a
lattice (``patch_stride``, default the patch size: no overlap) once per epoch; random mode
draws ``patches_per_sample`` origins per anchor from ``(seed, epoch)``. Patches never leave
the field unless ``patch_edges="pad"``: then origins range over the whole axis and the part
of a patch past the field's end holds the array's fill value (written by the gather). Which
windows exist, their origins and the virtual order grid are the engine's
(``_ext.PatchGrid``); this module resolves the arguments against the variables.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from . import _ext, arguments
from .errors import InSituError, InvalidArgumentError, InvalidTypeError
from .geometry import ArrayGeometry


@dataclass(frozen=True)
class PatchArguments:
    """The patch options as given, checked for type: keys are dimension names or field
    axis numbers (counted without the sample axis)."""

    size: tuple[tuple[str | int, int], ...]
    stride: tuple[tuple[str | int, int], ...]  # empty: the size (grid mode)
    per_sample: int
    mode: str
    # "cover" (grid mode) adds a last position flush with each axis's end; "pad": origins
    # over the whole axis, the part of a patch past the end padded with the fill value
    edges: str = "inside"

    @classmethod
    def from_arguments(cls, patch: Any, patch_stride: Any, patches_per_sample: Any, patch_mode: Any,
                       patch_edges: Any = "inside") -> "PatchArguments | None":
        mode = arguments.choice("patch_mode", patch_mode)
        edges = arguments.choice("patch_edges", patch_edges)
        if patch is None:
            if patch_stride is not None or patches_per_sample is not None or edges != "inside":
                raise InvalidArgumentError("patch_stride, patches_per_sample and patch_edges need patch= (the"
                                           " patch size)")
            return None
        if edges == "cover" and mode != "grid":
            raise InvalidArgumentError('patch_edges="cover" applies to patch_mode="grid"')
        size = _sizes("patch", patch)
        stride: tuple[tuple[str | int, int], ...] = ()
        if patch_stride is not None:
            if mode != "grid":
                raise InvalidArgumentError('patch_stride applies to patch_mode="grid"')
            if isinstance(patch_stride, Mapping):
                stride = _sizes("patch_stride", patch_stride)
            else:
                step = arguments.integer("patch_stride", patch_stride, (1, None))
                stride = tuple((key, step) for key, _ in size)
            unknown = {k for k, _ in stride} - {k for k, _ in size}
            if unknown:
                raise InvalidArgumentError(f"patch_stride names {sorted(map(str, unknown))}, which patch= does not")
        if patches_per_sample is not None and mode != "random":
            raise InvalidArgumentError('patches_per_sample applies to patch_mode="random"')
        per_sample = 1 if patches_per_sample is None else arguments.integer("patches_per_sample",
                                                                              patches_per_sample, (1, 1 << 31))
        return cls(size, stride, per_sample, mode, edges)


def _sizes(name: str, value: Any) -> tuple[tuple[str | int, int], ...]:
    if not isinstance(value, Mapping) or not value:
        raise InvalidTypeError(f'{name} must be a non-empty mapping of dimension name (or field axis) to size,'
                               f' e.g. {{"y": 256, "x": 256}}; got {value!r}')
    out: list[tuple[str | int, int]] = []
    for key, n in value.items():
        if isinstance(key, (bool, np.bool_)) or not isinstance(key, (str, int, np.integer)):
            raise InvalidTypeError(f"{name}: {key!r} is neither a dimension name nor a field axis number")
        out.append((key if isinstance(key, str) else int(key), arguments.integer(f"{name}[{key!r}]", n, (1, None))))
    return tuple(out)


@dataclass(frozen=True, eq=False)
class Patching:
    """The resolved patches of a dataset: the patch axes (by name), the engine's grid and,
    per numeric label, which of its field axes are cut along which patch axis."""

    dims: tuple[str, ...]
    mode: str
    edges: str
    size: tuple[int, ...]
    stride: tuple[int, ...]
    extent: tuple[int, ...]
    grid: Any  # _ext.PatchGrid
    label_axes: dict[str, list[int]]  # per field axis: the patch axis, or -1 (kept whole)

    @property
    def per_sample(self) -> int:
        n: int = self.grid.per_sample
        return n

    def row_shape(self, label: str, inner_shape: tuple[int, ...]) -> tuple[int, ...]:
        axes = self.label_axes.get(label, [])
        return tuple(self.size[axes[i]] if axes and axes[i] >= 0 else n for i, n in enumerate(inner_shape))

    def origins(self, anchors: Any, patches: Any, epoch: int) -> np.ndarray:
        """Each (anchor, patch)'s origin in ``epoch`` along ``dims``: ``(N, len(dims))``."""
        return np.asarray(self.grid.origins(np.ascontiguousarray(anchors, dtype=np.int64),
                                            np.ascontiguousarray(patches, dtype=np.int64), int(epoch)))

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"mode": self.mode, "dims": list(self.dims), "size": list(self.size),
                               "extent": list(self.extent), "per_sample": self.per_sample}
        if self.mode == "grid":
            out["stride"] = list(self.stride)
            out["edges"] = self.edges
            if self.edges == "pad":  # the lattice positions whose patch runs past an axis's end
                inside = np.prod([int(np.count_nonzero(self.lattice(a) + z <= e))
                                  for a, (z, e) in enumerate(zip(self.size, self.extent))])
                out["padded_per_sample"] = self.per_sample - int(inside)
        elif self.edges == "pad":
            out["edges"] = "pad"
        return out

    def lattice(self, axis: int) -> np.ndarray:
        """Grid mode: the origins along patch axis ``axis``, in the order patches count them."""
        return np.asarray(self.grid.lattice(axis))

    def signature(self) -> str:
        """How patches are drawn (resume states carry it: a cursor counts patches)."""
        p = self.describe()
        return (f"patches {'x'.join(map(str, p['size']))} {p['mode']}"
                + (f" stride {'x'.join(map(str, p['stride']))} {p['edges']}" if p["mode"] == "grid"
                   else f" {p['per_sample']} per sample" + (" pad" if p.get("edges") == "pad" else "")))

    def pad_elements(self, geometries: Mapping[str, ArrayGeometry], hierarchy: Any,
                     batch_dtypes: Mapping[str, np.dtype]) -> dict[str, bytes]:
        """``patch_edges="pad"``: per patched label, the element its rows hold past the
        field's end (the array's fill value, in the label's batch dtype)."""
        if self.edges != "pad":
            return {}
        out = {}
        for label in self.label_axes:
            g = geometries[label]
            fill = bytes(hierarchy.array_metadata(g.path)["fill_value"])
            out[label] = pad_element(label, fill, g.dtype, batch_dtypes[label])
        return out


def resolve(args: PatchArguments | None, geometries: Mapping[str, ArrayGeometry],
            dimension_names: Mapping[str, tuple[str, ...]], field_shapes: Mapping[str, tuple[int, ...]],
            seed: int) -> Patching | None:
    """``args`` against the numeric labels: ``dimension_names`` per array path (may be
    empty), ``field_shapes`` per label (after chunk transforms)."""
    if args is None:
        return None
    keys = [k for k, _ in args.size]
    names = [k if isinstance(k, str) else f"axis {k}" for k in keys]
    extent: list[int | None] = [None] * len(keys)
    label_axes: dict[str, list[int]] = {}
    known: set[str] = set()
    for label, g in geometries.items():
        dims = tuple(dimension_names.get(g.path, ()))
        field_dims = [d for axis, d in enumerate(dims) if axis != g.sample_axis] if dims else []
        known.update(field_dims)
        inner = tuple(g.inner_shape)
        axes = [-1] * len(inner)
        for a, key in enumerate(keys):
            if isinstance(key, str):
                where = field_dims.index(key) if key in field_dims else -1
            else:
                where = key if 0 <= key < len(inner) else -1
            if where < 0:
                continue
            axes[where] = a
            if extent[a] is None:
                extent[a] = inner[where]
            elif extent[a] != inner[where]:
                raise InvalidArgumentError(
                    f"patch: {names[a]!r} has extent {extent[a]} in one variable and {inner[where]} in {label!r}:"
                    " a patch axis must have one extent")
        if any(a >= 0 for a in axes):
            if tuple(field_shapes.get(label, inner)) != inner:
                raise InvalidArgumentError(
                    f"patch: {label!r} has a chunk transform that reshapes its field {inner} to"
                    f" {tuple(field_shapes[label])}; patches are cut from the stored field")
            label_axes[label] = axes
    missing = [names[a] for a, e in enumerate(extent) if e is None]
    if missing:
        raise InvalidArgumentError(
            f"patch names {', '.join(map(repr, missing))}, which no variable has as a field axis (known"
            f" dimensions: {', '.join(sorted(known)) or 'none: the store names no dimensions; use field axis numbers'})")
    extents = tuple(int(e) for e in extent if e is not None)
    size = tuple(n for _, n in args.size)
    stride_of = dict(args.stride)
    stride = tuple(stride_of.get(k, n) for k, n in args.size)
    try:
        grid = _ext.PatchGrid(args.mode, list(extents), list(size), list(stride), args.per_sample, seed, args.edges)
    except InSituError as exc:
        raise InvalidArgumentError(f"patch over {', '.join(map(repr, names))} with extents {extents}: {exc}") from None
    return Patching(tuple(names), args.mode, args.edges, size, stride, extents, grid, label_axes)


def pad_element(label: str, fill: bytes, stored: np.dtype, out: np.dtype) -> bytes:
    """``patch_edges="pad"``: the element written past the field's end in ``label``'s batch
    rows, as the engine writes it: the array's fill value (``fill``, its bytes as the engine
    holds the stored dtype), cast to ``out`` where a chunk transform changes the dtype (the
    transform itself never sees the padding: it runs on stored chunks, before the cut)."""
    if out == stored:
        return fill
    native = stored.newbyteorder("=") if stored.kind in "biufc" else stored
    value = np.frombuffer(fill, dtype=native)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # NaN or an infinite fill into an integer type
            cast = value.astype(out.newbyteorder("=") if out.kind in "biufc" else out)
            if out.kind in "biu" and cast.astype(native)[0] != value[0]:  # integers wrap without a warning
                raise ValueError("out of range")
    except (TypeError, ValueError, RuntimeWarning) as exc:
        raise InvalidArgumentError(
            f'patch_edges="pad" pads {label!r} with its fill value {value[0].item()!r}, which its chunk'
            f" transform's output dtype {out} cannot hold ({exc})") from None
    return cast.tobytes()


__all__ = ["PatchArguments", "Patching", "pad_element", "resolve"]
