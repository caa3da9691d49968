"""The original insitubatch's ``insitubatch.split``: the root's split objects."""

from .splits import SplitManifest, split_by_chunk, valid_anchor_range

__all__ = ["SplitManifest", "split_by_chunk", "valid_anchor_range"]
