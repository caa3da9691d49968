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
from .runtime import PassStats
from .shuffle import block_shuffled_order, chunk_permutation, sequential_order, shuffle_quality
from .splits import SplitManifest, SplitName, split_by_chunk, valid_anchor_range
from .transforms import Cast, ScaleOffset, StandardScaler, applies
from .stores import (
    Store,
    arraylake_store,
    as_native_store,
    close_store,
    fsspec_store,
    icechunk_store,
    local_store,
    memory_store,
    obstore_store,
    store,
)

# Framework adapters load on first use (PEP 562) so `import insitubatch` imports no framework;
# each adapter imports its framework only when called.
_LAZY_ADAPTERS = ("as_tf_dataset", "as_torch", "to_jax", "to_tf", "to_torch")


def __getattr__(name: str):
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
    "ArrayGeometry",
    "Batch",
    "Cast",
    "CacheLockedError",
    "CancelledError",
    "ChunkRead",
    "CorruptChunkError",
    "DecodedChunk",
    "FailedPreconditionError",
    "InSituDataset",
    "InSituError",
    "InvalidArgumentError",
    "InvalidTypeError",
    "MissingDependencyError",
    "NotFoundError",
    "PassStats",
    "ResourceExhaustedError",
    "SplitManifest",
    "SplitName",
    "SplitView",
    "ScaleOffset",
    "StandardScaler",
    "Store",
    "StoreError",
    "StoredChunkRead",
    "UnsupportedError",
    "__version__",
    "applies",
    "arraylake_store",
    "as_native_store",
    "as_tf_dataset",
    "as_torch",
    "block_shuffled_order",
    "chunk_permutation",
    "close_store",
    "debug_info",
    "fsspec_store",
    "icechunk_store",
    "local_store",
    "memory_store",
    "obstore_store",
    "open_geometries",
    "print_debug_info",
    "read_chunk",
    "sequential_order",
    "shuffle_quality",
    "split_by_chunk",
    "store",
    "to_jax",
    "to_tf",
    "to_torch",
    "valid_anchor_range",
]
