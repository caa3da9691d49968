"""The insitubatch exception hierarchy.

Every error the native core reports maps onto exactly one of these classes (the C++
``Status`` code decides which). Each also derives from the built-in exception a Python
user would naturally catch: a bad argument is a ``ValueError``, a failing store an
``OSError``, and so on.
"""

from __future__ import annotations


class InSituError(Exception):
    """Base class of every insitubatch error."""


class InvalidArgumentError(InSituError, ValueError):
    """An argument, a metadata document or a key is malformed."""


class InvalidTypeError(InvalidArgumentError, TypeError):
    """An argument of the wrong type (a string where a list of paths is meant, an object
    that is not a store): also a ``TypeError``."""


class NotFoundError(InSituError, FileNotFoundError, KeyError):
    """A store root, group or array does not exist (a missing *chunk* is fill value)."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return Exception.__str__(self)


class StoreError(InSituError, OSError):
    """A store read failed. ``detail`` holds the HTTP status or errno when known."""

    detail: int = 0


class CorruptChunkError(InSituError):
    """Stored data is corrupt or truncated (bad checksum, size mismatch, bad frame)."""


class UnsupportedError(InSituError, NotImplementedError):
    """A codec, data type or layout this build does not support."""


class ResourceExhaustedError(InSituError, MemoryError):
    """A memory budget or allocation limit was exceeded."""


class CancelledError(InSituError):
    """The operation was cancelled (a pass closed early)."""


class FailedPreconditionError(InSituError, RuntimeError):
    """The object is in the wrong state for the call (e.g. used after close())."""


class MissingDependencyError(InSituError, ImportError):
    """An optional dependency (a framework, icechunk, ...) is not installed: the message
    names the extra to install."""


class CacheLockedError(InSituError, RuntimeError):
    """Another process holds the cache directory's writer lock."""


__all__ = [
    "CacheLockedError",
    "CancelledError",
    "CorruptChunkError",
    "FailedPreconditionError",
    "InSituError",
    "InvalidArgumentError",
    "InvalidTypeError",
    "MissingDependencyError",
    "NotFoundError",
    "ResourceExhaustedError",
    "StoreError",
    "UnsupportedError",
]
