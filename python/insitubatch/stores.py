"""Store constructors.

Every constructor returns a native ``Store`` handle that all other entry points accept.
``store(url)`` dispatches on the URL scheme; ``obstore_store`` is the same function under
the name the product description uses.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlparse

from . import _ext
from .errors import InvalidArgumentError, UnsupportedError

Store = _ext.Store

# Options every backend accepts (zarr's read_only flag: we only ever read).
_COMMON_OPTIONS = frozenset({"read_only"})


def _check_options(scheme: str, options: dict[str, Any], allowed: frozenset[str]) -> None:
    unknown = sorted(set(options) - allowed - _COMMON_OPTIONS)
    if unknown:
        raise InvalidArgumentError(
            f"option(s) {', '.join(map(repr, unknown))} do not apply to {scheme} stores"
            f" (accepted: {', '.join(sorted(allowed | _COMMON_OPTIONS))})"
        )
    if options.get("read_only", True) is not True:
        raise InvalidArgumentError("insitubatch stores are read-only: read_only must be True")


def local_store(path: str | os.PathLike[str]) -> Store:
    """A store over a local directory."""
    return _ext.open_file_store(os.fspath(path))


def memory_store() -> Store:
    """An empty in-memory store (``.set(key, bytes)`` fills it)."""
    return _ext.MemoryStore()


def store(url: str | os.PathLike[str], **options: Any) -> Store:
    """Opens the store at ``url``: a local path, ``file://``, or ``memory://``.

    Cloud schemes (``s3://``, ``gs://``, ``http(s)://``) are dispatched here too as their
    backends land; an unknown scheme raises ``UnsupportedError`` naming it.
    """
    if isinstance(url, os.PathLike):
        url = os.fspath(url)
    if not isinstance(url, str) or not url:
        raise InvalidArgumentError(f"store url must be a non-empty string, got {url!r}")
    scheme = urlparse(url).scheme if "://" in url else ""
    if scheme in ("", "file"):
        _check_options("file://", options, frozenset())
        return _ext.open_file_store(url)
    if scheme == "memory":
        _check_options("memory://", options, frozenset())
        return _ext.MemoryStore()
    raise UnsupportedError(f"store scheme {scheme!r} ({url}) is not supported by this build")


def obstore_store(url: str, **options: Any) -> Store:
    """The product description's name for :func:`store` (same URLs and options)."""
    return store(url, **options)


__all__ = ["Store", "local_store", "memory_store", "obstore_store", "store"]
