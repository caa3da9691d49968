"""insitubatch: train in place on n-dimensional cloud tensors.

Importing the package imports no ML framework; each adapter imports its framework lazily.
"""

from __future__ import annotations

from .dataset import InSituDataset, SplitView
from .coordinates import Selection, select
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
from .timeline import tracing
from .transforms import (
    BatchTransform,
    Cast,
    ChunkTransform,
    ReshapingChunkTransform,
    ScaleOffset,
    StandardScaler,
    applies,
)
# The original insitubatch's module paths (`from insitubatch.source import InSituDataset`),
# whose public names are the root's objects. Imported before `store` is bound below: later
# imports find insitubatch.store in sys.modules, and the package's `store` stays the function.
from . import plan, pool, scheduler, source, split, store as _original_store_module, types
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
from .writer import ZarrWriter
from ._tls import register_certifi_bundle as _register_certifi_bundle

_register_certifi_bundle()  # the TLS CA bundle of last resort (_tls.py)

from . import _compat

# The framework adapters load on first use (PEP 562), so `import insitubatch` imports no
# framework; the original's engine names and `insitubatch.ray` are shims (_compat).
_compat.install_moved_modules()


def __getattr__(name: str) -> object:
    return _compat.package_getattr(name, globals())


def __dir__() -> list[str]:
    return sorted({*globals(), *_compat.lazy_names()})


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
    "select",
    "Selection",
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
    "tracing",
    "ZarrWriter",
    "UnsupportedError",
    "valid_anchor_range",
    "__version__",
]
