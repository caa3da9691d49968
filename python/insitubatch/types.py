"""The original insitubatch's ``insitubatch.types``: the root's record types."""

from .records import Batch, ChunkRead, DecodedChunk, StoredChunkRead
from .geometry import ArrayGeometry
from .splits import SplitName

__all__ = ["ArrayGeometry", "Batch", "ChunkRead", "DecodedChunk", "SplitName", "StoredChunkRead"]
