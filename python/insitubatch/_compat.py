"""Compatibility shims, all in one place: names and arguments kept for scripts written
against the original insitubatch and planfetch. Each working shim warns with a
``DeprecationWarning`` that names its replacement and the version that removes it
(``REMOVED_IN``); a name that is gone raises an ``AttributeError`` naming its replacement,
with no warning first (``hasattr`` answers False even under ``-W error``).

Also the package's lazily loaded attributes (``insitubatch.__getattr__``): the framework
adapters, whose one list is ``insitubatch.frameworks._ADAPTERS``, and ``__version__``.
"""

from __future__ import annotations

import importlib
import sys
import types
import warnings
from typing import Any, Callable

from .errors import MissingDependencyError

#: The release that removes every working shim below: the next release after this package's
#: own version (pyproject.toml) that may break an API, the next minor one below 1.0.
REMOVED_IN = "0.4.0"


def deprecated(old: str, replacement: str, *, stacklevel: int = 3) -> None:
    """Warns that ``old`` goes in :data:`REMOVED_IN`; ``replacement`` says what to use."""
    warnings.warn(f"{old} is deprecated and will be removed in insitubatch {REMOVED_IN}: {replacement}",
                  DeprecationWarning, stacklevel=stacklevel)


# -- insitubatch: the original's Python engine, its module paths, and insitubatch.ray -------

#: The original package's Python engine: the names it exported (from the root, or from
#: insitubatch.plan, .pool, .scheduler and .source) that have no counterpart here, since the
#: engine is native; each is reached through the public API instead.
ENGINE_INTERNALS = {
    "ChunkPool": "the pool is inside the engine: size it with cache_budget_bytes / cache_dir,"
                 " read it with ds.describe(), ds.last_pass and ds.pool_state()",
    "Scheduler": "passes are scheduled by the engine: iterate ds.train / ds.val / ds.test",
    "SchedulerConfig": "pass max_inflight=, decode_threads=, on_bad_chunk= to InSituDataset",
    "build_stored_chunk_reads": "the engine plans its reads; ds.describe()['variables'] shows"
                                " the stored chunks per chunk",
    "ChunkReadPlan": "the engine plans its reads; ds.describe()['variables'] shows the stored"
                     " chunks per chunk",
    "PassCounters": "a pass's counts are ds.last_pass (cache_hits, cache_misses, rereads,"
                    " evictions, revived)",
    "SlotState": "the pool's slots are inside the engine: ds.pool_state() counts them",
    "output_geometry": "ds.output_geometries() gives each array's geometry after its chunk transforms",
    "slot_charge_bytes": "ds.describe()['memory'] and ds.working_set_bytes size the pool",
    "transforms_for": "scope a transform with insitubatch.applies(...); the engine picks each"
                      " array's chain",
    "validate_scopes": "InSituDataset checks the transforms' scopes when it is built",
    "read_ahead_bound": "the engine bounds read-ahead by max_inflight= and the pool's budget"
                        " (cache_budget_bytes=): ds.describe()['memory'] shows inflight_bytes and"
                        " residency_bytes",
    "decode_pool": "decoding runs on the engine's threads: decode_threads= on InSituDataset",
    "decode_pool_workers": "decoding runs on the engine's threads: read ds.decode_threads",
    "reset_decode_pool": "decoding runs on the engine's threads, one set per dataset: nothing to reset",
}


def engine_internal(where: str, name: str) -> AttributeError:
    """The AttributeError for one of the original's engine names read from module ``where``:
    said once, with no warning first, so ``hasattr`` answers False under ``-W error``."""
    return AttributeError(f"{where}.{name} was part of the original's Python engine and is not public here:"
                          f" {ENGINE_INTERNALS[name]}")


def module_getattr(where: str) -> Callable[[str], Any]:
    """``__getattr__`` of one of the original's module paths (insitubatch.source, .pool,
    ...): an engine name raises its explanation, any other a plain AttributeError."""

    def __getattr__(name: str) -> Any:
        if name in ENGINE_INTERNALS:
            raise engine_internal(where, name)
        raise AttributeError(f"module {where!r} has no attribute {name!r}")

    return __getattr__


class _MovedModule(types.ModuleType):
    """A module whose names moved to ``target``: each attribute read warns, then forwards."""

    def __init__(self, name: str, target: str, replacement: str) -> None:
        super().__init__(name, f"Deprecated: {replacement}.")
        self._target, self._replacement = target, replacement

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        deprecated(f"{self.__name__}.{attr}", self._replacement)
        return getattr(importlib.import_module(self._target), attr)

    def __dir__(self) -> list[str]:
        return sorted(getattr(importlib.import_module(self._target), "__all__", []))


def install_moved_modules() -> None:
    """``import insitubatch.ray`` keeps working, through a module that warns on use (the
    adapter lives in insitubatch.frameworks.ray; importing neither imports Ray)."""
    if "insitubatch.ray" not in sys.modules:
        sys.modules["insitubatch.ray"] = _MovedModule(
            "insitubatch.ray", "insitubatch.frameworks.ray",
            "use insitubatch.read_insitu, or import from insitubatch.frameworks.ray")


def package_getattr(name: str, namespace: dict[str, Any]) -> Any:
    """``insitubatch.__getattr__``: the lazily loaded names, cached in ``namespace``."""
    if name in ENGINE_INTERNALS:
        raise engine_internal("insitubatch", name)
    if name == "__version__":  # on first use: importlib.metadata costs ~40 ms of the import
        from importlib.metadata import PackageNotFoundError, version

        try:
            value = version("insitubatch")
        except PackageNotFoundError:  # pragma: no cover - running from a source tree
            value = "0.0.0+unknown"
        namespace["__version__"] = value
        return value
    if name == "ray":
        return sys.modules["insitubatch.ray"]
    frameworks = _frameworks()
    if name in frameworks._ADAPTERS:
        value = getattr(frameworks, name)
        namespace[name] = value
        return value
    raise AttributeError(f"module 'insitubatch' has no attribute {name!r}")


def lazy_names() -> list[str]:
    """The names ``package_getattr`` loads, for ``dir(insitubatch)``."""
    return [*_frameworks()._ADAPTERS, "__version__"]


def _frameworks() -> Any:
    """insitubatch.frameworks (no framework in it), imported by name: ``from . import``
    would ask the package's ``__getattr__`` first, which is what calls this."""
    return importlib.import_module("insitubatch.frameworks")


# -- DrawOrder read as its rows ------------------------------------------------------------


def rows_attribute(rows: Any, name: str) -> Any:
    """``order.shape`` / ``order.tolist()`` ...: an ndarray attribute of a DrawOrder's rows,
    as the original's draw order (a bare array) had it."""
    deprecated(f"DrawOrder.{name}", f"read order.rows.{name} (np.asarray(order) and order[...] stay)",
               stacklevel=4)
    return getattr(rows, name)


# -- planfetch: the seed's Rust-backend probes and use_rust= --------------------------------


def _native_backend() -> bool:
    from . import _ext

    return hasattr(_ext, "ObjectCache")


def has_rust_backend() -> bool:
    """Whether the native download backend is available (the seed's name; it is C++ here
    and always built in)."""
    deprecated("planfetch.has_rust_backend()", "the native backend is always built in: drop the check")
    return _native_backend()


def assert_rust_backend() -> None:
    """Raises unless the native download backend is available."""
    deprecated("planfetch.assert_rust_backend()", "the native backend is always built in: drop the check")
    if not _native_backend():
        raise MissingDependencyError("planfetch's native backend is missing: reinstall insitubatch")


def has_native_backend() -> bool:
    """Whether the native download backend is available (always, in this build)."""
    deprecated("planfetch.has_native_backend()", "the native backend is always built in: drop the check")
    return _native_backend()


def assert_native_backend() -> None:
    """Raises unless the native download backend is available."""
    deprecated("planfetch.assert_native_backend()", "the native backend is always built in: drop the check")
    if not _native_backend():
        raise MissingDependencyError("planfetch's native backend is missing: reinstall insitubatch")


def use_rust_argument(use_rust: Any) -> None:
    """``SharedDiskCache(use_rust=...)``: the native backend is the default; boto3 is asked
    for by passing a client."""
    deprecated("SharedDiskCache(use_rust=...)",
               "the native backend is the default; for boto3 pass s3_client=boto3.client('s3')", stacklevel=4)


__all__ = [
    "ENGINE_INTERNALS", "REMOVED_IN", "assert_native_backend", "assert_rust_backend", "deprecated",
    "engine_internal", "has_native_backend", "has_rust_backend", "install_moved_modules", "lazy_names",
    "module_getattr", "package_getattr", "rows_attribute", "use_rust_argument",
]
