"""insitubatch: train in place on n-dimensional cloud tensors.

Importing the package imports no ML framework; each adapter imports its framework lazily.
"""

from __future__ import annotations

from .dataset import InSituDataset, SplitView
from .debug import debug_info, print_debug_info
from .errors import (
    CacheLockedError,
    CancelledError,
    CorruptChunkError,
    FailedPreconditionError,
    InSituError,
    InvalidArgumentError,
    InvalidTypeError,
    MissingDependencyError,
    NotFoundError,
    ResourceExhaustedError,
    StoreError,
    UnsupportedError,
)
from .geometry import ArrayGeometry, open_geometries, read_chunk
from .records import Batch, ChunkRead, DecodedChunk, StoredChunkRead
from .runtime import Depths, PassStats, StageTimes, bottleneck
from .shuffle import DrawOrder, block_shuffled_order, chunk_permutation, sequential_order, shuffle_quality
from .splits import SplitManifest, SplitName, split_by_chunk, valid_anchor_range
from .summary import DatasetReport
from .transforms import (
    BatchTransform,
    Cast,
    ChunkTransform,
    ReshapingChunkTransform,
    ScaleOffset,
    StandardScaler,
    applies,
)
from .stores import (
    Store,
    arraylake_store,
    as_native_store,
    close_store,
    ensure_local_dir,
    fsspec_store,
    icechunk_store,
    local_store,
    memory_store,
    obstore_store,
    store,
)
from .references import reference_store
from ._tls import register_certifi_bundle as _register_certifi_bundle

_register_certifi_bundle()  # the TLS CA bundle of last resort (_tls.py)

# Framework adapters load on first use (PEP 562) so `import insitubatch` imports no framework;
# each adapter imports its framework only when called.
_LAZY_ADAPTERS = ("as_tf_dataset", "as_torch", "read_insitu", "to_global_jax", "to_jax", "to_tf", "to_torch")


# The original package exported its Python engine's parts; here the engine is native and
# these are reached through the public API instead.
_ENGINE_INTERNALS = {
    "ChunkPool": "the pool is inside the engine: size it with cache_budget_bytes / cache_dir,"
                 " read it with ds.describe(), ds.last_pass and ds.pool_state()",
    "Scheduler": "passes are scheduled by the engine: iterate ds.train / ds.val / ds.test",
    "SchedulerConfig": "pass max_inflight=, decode_threads=, on_bad_chunk= to InSituDataset",
    "build_stored_chunk_reads": "the engine plans its reads; ds.describe()['variables'] shows"
                                " the stored chunks per chunk",
}


def __getattr__(name: str) -> object:
    if name in _ENGINE_INTERNALS:
        raise AttributeError(
            f"insitubatch.{name} was part of the original's Python engine and is not public here:"
            f" {_ENGINE_INTERNALS[name]}")
    if name == "__version__":  # on first use: importlib.metadata costs ~40 ms of the import
        from importlib.metadata import PackageNotFoundError, version

        try:
            value = version("insitubatch")
        except PackageNotFoundError:  # pragma: no cover - running from a source tree
            value = "0.0.0+unknown"
        globals()["__version__"] = value
        return value
    if name in _LAZY_ADAPTERS:
        from . import frameworks

        value = getattr(frameworks, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY_ADAPTERS, "__version__"})


__all__ = [
    "applies",
    "ArrayGeometry",
    "arraylake_store",
    "as_native_store",
    "as_tf_dataset",
    "as_torch",
    "Batch",
    "BatchTransform",
    "block_shuffled_order",
    "bottleneck",
    "CacheLockedError",
    "CancelledError",
    "Cast",
    "chunk_permutation",
    "ChunkRead",
    "ChunkTransform",
    "close_store",
    "CorruptChunkError",
    "DatasetReport",
    "debug_info",
    "DecodedChunk",
    "Depths",
    "DrawOrder",
    "ensure_local_dir",
    "FailedPreconditionError",
    "fsspec_store",
    "icechunk_store",
    "InSituDataset",
    "InSituError",
    "InvalidArgumentError",
    "InvalidTypeError",
    "local_store",
    "memory_store",
    "MissingDependencyError",
    "NotFoundError",
    "obstore_store",
    "open_geometries",
    "PassStats",
    "print_debug_info",
    "read_chunk",
    "read_insitu",
    "reference_store",
    "ReshapingChunkTransform",
    "ResourceExhaustedError",
    "ScaleOffset",
    "sequential_order",
    "shuffle_quality",
    "split_by_chunk",
    "SplitManifest",
    "SplitName",
    "SplitView",
    "StageTimes",
    "StandardScaler",
    "store",
    "Store",
    "StoredChunkRead",
    "StoreError",
    "to_global_jax",
    "to_jax",
    "to_tf",
    "to_torch",
    "UnsupportedError",
    "valid_anchor_range",
    "__version__",
]
