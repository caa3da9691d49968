"""Opening a dataset: its store and hierarchy, its variables (checked against the manifest
and each other), the arrays it reads and the native engine over them.

:class:`~insitubatch.InSituDataset` calls these at construction, and again in a forked
child, whose first pass re-opens the store and the engine (:mod:`insitubatch.lifecycle`).
A URL or path opens once; so does the hierarchy, shared by the geometries, the engine and
the string labels' passes.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from . import _ext, strings
from .errors import InvalidArgumentError
from .geometry import ArrayGeometry, geometries_of
from .splits import SplitManifest, valid_anchor_range
from .stores import as_native_store, connection_limit, reopen_store

logger = logging.getLogger("insitubatch")


@dataclass(frozen=True, eq=False)
class Variables:
    """A dataset's variables: the numeric ones the engine batches (in their order), the
    variable-length string ones read beside it, the numeric arrays' paths (the engine's
    array order) and their dimension names."""

    names: list[str]  # every label, in the order given
    numeric: dict[str, ArrayGeometry]
    strings: dict[str, ArrayGeometry]
    paths: list[str]
    dimension_names: dict[str, tuple[str, ...]]
    n_samples: int

    @property
    def every(self) -> dict[str, ArrayGeometry]:
        return {**self.numeric, **self.strings}


def open_store(store: Any, geometries: Mapping[str, ArrayGeometry] | None, max_inflight: int) -> tuple[Any, Any]:
    """``(store, hierarchy)``: a URL or path opened as a native store (any other store as
    given), and its hierarchy, read once (the one ``geometries`` were read from, when
    open_geometries read them all from this store); a ``max_inflight`` the store's
    connections cannot carry is said."""
    store = as_native_store(store) if isinstance(store, (str, os.PathLike)) else store
    native = as_native_store(store)
    hierarchy = _opened_hierarchy(geometries, native)
    _warn_if_connections_cap_reads(native, max_inflight)
    return store, hierarchy


def _warn_if_connections_cap_reads(store: Any, max_inflight: int) -> None:
    """max_inflight above what the store's own connection limit lets through is not raised
    behind the user's back (they set that limit): it is said, once, at construction."""
    limit = connection_limit(store)
    if limit is not None and limit[0] * limit[1] < max_inflight:
        logger.warning(
            "max_inflight=%d, but the store was opened with max_connections_per_host=%d on %d IO"
            " threads: over HTTP/1.1 at most %d reads are in flight (the rest wait in the transport;"
            " HTTP/2 multiplexes them). Raise max_connections_per_host (0: no limit) to use them all.",
            max_inflight, limit[0], limit[1], limit[0] * limit[1])


def _opened_hierarchy(geometries: Mapping[str, ArrayGeometry] | None, store: Any) -> Any:
    """The hierarchy of ``store``: the one open_geometries read the geometries from when every
    geometry came from that same store object (no second read of its metadata), else opened."""
    pairs = [g._opened for g in (geometries or {}).values()]
    opened = [p for p in pairs if p is not None and p[0] is store]
    if pairs and len(opened) == len(pairs) and all(p[1] is opened[0][1] for p in opened):
        return opened[0][1]
    return _ext.open_hierarchy(store)


def reopen(store: Any) -> tuple[Any, Any]:
    """:func:`open_store` again in a forked child (the parent's connections are not its own)."""
    store = reopen_store(store)
    return store, _ext.open_hierarchy(as_native_store(store))


def variables(hierarchy: Any, store: Any, manifest: SplitManifest,
              geometries: Mapping[str, ArrayGeometry] | None) -> Variables:
    """The dataset's variables: ``geometries`` as given, or every array of the hierarchy."""
    if geometries is None:
        geometries = geometries_of(hierarchy, as_native_store(store))
    if not geometries:
        raise InvalidArgumentError("no variables: geometries is empty")
    every = dict(geometries)
    n_samples = check_geometries(every, manifest)
    # Variable-length strings have no fixed size: they are read beside the engine.
    texts = {label: g for label, g in every.items() if strings.is_string(g.dtype)}
    numeric = {label: g for label, g in every.items() if label not in texts}
    if not numeric:
        raise InvalidArgumentError(
            f"{', '.join(map(repr, texts))} hold variable-length strings, which are"
            " read beside numeric arrays: a dataset needs at least one numeric array to batch")
    paths = list(dict.fromkeys(g.path for g in numeric.values()))
    dimension_names = {g.path: tuple(hierarchy.array_metadata(g.path)["dimension_names"]) for g in numeric.values()}
    return Variables(list(every), numeric, texts, paths, dimension_names, n_samples)


def check_geometries(geometries: Mapping[str, ArrayGeometry], manifest: SplitManifest) -> int:
    """The variables' common sample-axis length, checked against the manifest and their
    windows (string variables too)."""
    n = {label: g.n_samples for label, g in geometries.items()}
    _ext.check_sample_lengths(list(n.items()))  # the engine's rule
    n_samples = next(iter(n.values()))
    if manifest.n_samples != n_samples:
        raise InvalidArgumentError(
            f"manifest sample-axis length {manifest.n_samples} does not match the variables'"
            f" n_samples={n_samples}")
    if n_samples == 0:
        raise InvalidArgumentError(
            f"the sample axis of {', '.join(map(repr, n))} is empty (0 samples): nothing to iterate")
    offsets = {label: g.offset for label, g in geometries.items()}
    lo, hi = valid_anchor_range(list(offsets.values()), n_samples)
    if lo >= hi:
        raise InvalidArgumentError(
            f"the window (offsets {offsets}) spans {max(offsets.values()) - min(offsets.values()) + 1}"
            f" samples but the sample axis has {n_samples}: no anchor fits it")
    return n_samples


def open_arrays(hierarchy: Any, found: Variables) -> dict[str, Any]:
    """Every array the dataset reads, opened once from its hierarchy (checked against
    its geometry)."""
    arrays = {}
    for label, g in found.every.items():
        if g.path not in arrays:
            arrays[g.path] = hierarchy.open_array(g.path)
        meta = arrays[g.path].metadata
        if tuple(meta["shape"]) != g.shape or tuple(meta["chunks"]) != g.chunks:
            raise InvalidArgumentError(
                f"geometry of {label!r} ({g.shape}, chunks {g.chunks}) does not match the store's"
                f" array {g.path!r} ({tuple(meta['shape'])}, chunks {tuple(meta['chunks'])})")
    return arrays


def start_engine(hierarchy: Any, found: Variables, config: Any, transforms: Sequence[Any],
                 fingerprints: Mapping[str, str], crops: Sequence[Any]) -> tuple[Any, dict[str, Any]]:
    """``(engine, arrays)``: the arrays opened and the native engine started over the
    numeric ones. Per array path, in ``found.paths`` order: ``transforms``, its engine
    transform or None; ``crops``, its kept ranges (empty: no crop at all). ``config``: the
    ``_ext.EngineConfig``; ``fingerprints``: what each array's cache_dir entries carry."""
    axes: dict[str, int] = {}
    for g in found.numeric.values():
        if axes.setdefault(g.path, g.sample_axis) != g.sample_axis:
            raise InvalidArgumentError(f"array {g.path!r} is used with two different sample axes")
    arrays = open_arrays(hierarchy, found)
    paths = found.paths
    engine = _ext.Engine([arrays[p] for p in paths], [axes[p] for p in paths], config, list(transforms),
                         [fingerprints.get(p, "") for p in paths], list(crops))
    return engine, arrays


__all__ = ["Variables", "check_geometries", "open_arrays", "open_store", "reopen", "start_engine", "variables"]
