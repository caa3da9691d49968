"""insitubatch: train in place on n-dimensional cloud tensors.

Importing the package imports no ML framework; each adapter imports its framework lazily.
"""

from __future__ import annotations

try:
    from importlib.metadata import PackageNotFoundError, version

    __version__ = version("insitubatch")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0+unknown"

from .errors import (
    CacheLockedError,
    CorruptChunkError,
    InSituError,
    InvalidArgumentError,
    NotFoundError,
    StoreError,
    UnsupportedError,
)
from .geometry import ArrayGeometry, open_geometries, read_chunk
from .stores import Store, local_store, memory_store, obstore_store, store

__all__ = [
    "ArrayGeometry",
    "CacheLockedError",
    "CorruptChunkError",
    "InSituError",
    "InvalidArgumentError",
    "NotFoundError",
    "Store",
    "StoreError",
    "UnsupportedError",
    "__version__",
    "local_store",
    "memory_store",
    "obstore_store",
    "open_geometries",
    "read_chunk",
    "store",
]
