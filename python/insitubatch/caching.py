"""What a ``cache_dir`` needs from Python: per-array fingerprints of the chunk transforms,
and the construction-time checks of the directory itself.

A persisted entry carries its array's fingerprint; reopening compares it with the current
one, so a changed transform makes stale exactly the arrays it is scoped to (an array with
no entries is cold, not stale). A transform's token is, in order of strength: its
``cache_key`` attribute (``"key:<k>"``, bump it per fit), a hash of its cloudpickle
(``insitubatch[cache]``; sees closures, globals and array values), or a hash of its source
and a custom repr (best effort: numpy summarizes arrays over 1000 elements, so re-fitted
statistics can go unnoticed -- one WARNING says so).
"""

from __future__ import annotations

import hashlib
import inspect
import logging
import os
import re
import shutil
from typing import Any, Callable, Mapping, Sequence

from . import _ext
from .errors import InvalidArgumentError, NotFoundError
from .summary import format_bytes

logger = logging.getLogger("insitubatch")

_DEFAULT_REPR = re.compile(r" at 0x[0-9a-fA-F]+>$")


def _sha(text: bytes) -> str:
    return hashlib.sha256(text).hexdigest()


def _source_token(transform: Callable[..., Any]) -> str:
    target = transform if inspect.isfunction(transform) or inspect.ismethod(transform) else type(transform)
    parts = [getattr(target, "__module__", ""), getattr(target, "__qualname__", repr(target))]
    try:
        parts.append(inspect.getsource(target))
    except (OSError, TypeError):
        pass
    text = repr(transform)
    if not _DEFAULT_REPR.search(text):  # a custom repr says something about the parameters
        parts.append(text)
    return "src:" + _sha("\0".join(parts).encode())


def transform_token(transform: Callable[..., Any]) -> tuple[str, bool]:
    """``(token, best_effort)`` for one chunk transform (the scope of ``applies`` is not
    part of it: the unwrapped callable is)."""
    inner = getattr(transform, "transform", transform)
    key = getattr(inner, "cache_key", None)
    if key is not None:
        return f"key:{key}", False
    try:
        import cloudpickle
    except ImportError:
        return _source_token(inner), True
    try:
        return "pickle:" + _sha(cloudpickle.dumps(inner)), False
    except Exception:  # noqa: BLE001 - an unpicklable transform falls back to its source
        return _source_token(inner), True


def array_fingerprints(chains: Mapping[str, Sequence[Callable[..., Any]]]) -> tuple[dict[str, str], list[str]]:
    """Per array path: the fingerprint of its chunk-transform chain ("" without any), and
    the display names of transforms fingerprinted best-effort."""
    out: dict[str, str] = {}
    weak: list[str] = []
    for path, chain in chains.items():
        if not chain:
            out[path] = ""
            continue
        tokens = []
        for t in chain:
            token, best_effort = transform_token(t)
            tokens.append(token)
            if best_effort:
                weak.append(getattr(t, "__qualname__", type(t).__name__))
        out[path] = "v1:" + _sha("\n".join(tokens).encode())[:32]
    return out, weak


def check_directory(cache_dir: str, *, readonly: bool, disk_bytes: int) -> None:
    """Construction-time checks of the directory: an error when it is not a directory or
    its parent is missing (the cache creates its directory, not its parents); warnings when
    it is unarbitrated (a network filesystem, or no advisory locks) or too small for what
    the splits will write."""
    if os.path.lexists(cache_dir) and not os.path.isdir(cache_dir):
        raise InvalidArgumentError(f"cache_dir {cache_dir} is not a directory")
    if readonly and not os.path.isdir(cache_dir):
        return  # the engine refuses it when it opens the cache (a reader never creates one)
    parent = os.path.dirname(cache_dir) or "."
    if not os.path.isdir(cache_dir) and not os.path.isdir(parent):
        raise NotFoundError(f"cache_dir {cache_dir}: its parent directory {parent} does not exist (the cache"
                            " creates its own directory, not its parents)")
    probe = cache_dir if os.path.isdir(cache_dir) else os.path.dirname(cache_dir) or "."
    fs_type = _ext.cache_filesystem_type(probe)
    if _ext.cache_is_network_filesystem(fs_type):
        logger.warning(
            "cache_dir %s is on a network filesystem (%s): its locks do not arbitrate between"
            " hosts, so writers on two machines can corrupt each other. Use local disk, or a"
            " directory per host.", cache_dir, fs_type)
    elif os.path.isdir(cache_dir) and not _ext.cache_locks_work(cache_dir):  # False only where unsupported
        logger.warning(
            "cache_dir %s: this filesystem has no POSIX advisory locks, so the one-writer rule is"
            " not enforced: give each writer its own directory.", cache_dir)
    if not readonly and disk_bytes:
        free = shutil.disk_usage(probe).free
        if disk_bytes > free:
            logger.warning(
                "cache_dir %s: the splits take %s on disk but %s are free; the cache fills the disk"
                " and the pass that finds it full raises", cache_dir, format_bytes(disk_bytes),
                format_bytes(free))


def log_revalidation(counters: dict[str, Any], store: Any) -> None:
    """One line per array whose cached entries were checked against their source when the
    cache opened (``revalidate=``): the listing's cost and what changed, the fallback to
    first use where the store cannot list, and entries nothing can check."""
    for r in counters.get("revalidation", ()):
        path = r["path"] or "/"
        if r["fallback"]:
            logger.info("revalidate='open' cannot check the cached chunks of %r at open (%s): they are"
                        " revalidated at first use instead, by a conditional read each", path, r["fallback"])
        elif r["mode"] == "open" and r["checked"]:
            logger.info("revalidate='open': %d cached chunks of %r checked against their source (%d stored chunks)"
                        " in %.3f s: %d changed (read again)", r["entries"] - r["unversioned"] - r["unverified"],
                        path, r["checked"], r["seconds"], r["changed"])
        if r["unverified"] and r["mode"] != "never":
            logger.info("cache_dir: %d entries of %r were written by an older version without their source's"
                        " versions: read again once", r["unverified"], path)
        if r["unversioned"]:
            logger.warning("cache_dir: %d cached chunks of %r are served without revalidation: their store (%s)"
                           " reports no object versions, so a chunk rewritten at the source is not noticed",
                           r["unversioned"], path, type(store).__name__)


def warn_best_effort(weak: list[str]) -> None:
    logger.warning(
        "persist: the chunk transform(s) %s have no cache_key and cloudpickle is not installed, so"
        " the cache notices a change to them only through their source and repr (best effort: a"
        " re-fitted statistic can be served stale). Install insitubatch[cache] or give each a"
        " cache_key you bump per fit.", ", ".join(sorted(set(weak))))


def fingerprints_for(config: Any, chains: Mapping[str, Sequence[Callable[..., Any]]], crop: Any,
                     disk_bytes: int) -> dict[str, str]:
    """At construction, with a ``cache_dir``: per array path the fingerprint its entries
    carry (its chunk transforms', and a crop's: a cropped array's slots hold only the
    crop's tiles), after the directory's checks; empty without one."""
    if config.cache_dir is None:
        return {}
    fingerprints, weak = array_fingerprints(chains)
    if crop is not None:
        for path in crop.ranges:
            fingerprints[path] += crop.fingerprint(path)
    if weak and config.persist:
        warn_best_effort(weak)
    check_directory(config.cache_dir, readonly=config.readonly_cache, disk_bytes=disk_bytes)
    return fingerprints


class ReviveWatch:
    """One WARNING for a pass that found persisted entries but could serve none."""

    def __init__(self) -> None:
        self._failures_seen = 0

    def pass_ended(self, engine: Any, revived: int) -> None:
        counters = engine.cache_counters()
        failed = counters["revive_missing"] + counters["revive_mismatch"] + counters["revive_corrupt"]
        before, self._failures_seen = self._failures_seen, failed
        if revived == 0 and failed > before:
            logger.warning(
                "persist=True but 0 of %d persisted chunks were served this epoch (%d mismatches, %d"
                " missing, %d failed their checksum) -- stale cache_dir or changed data/transforms?", failed - before,
                counters["revive_mismatch"], counters["revive_missing"], counters["revive_corrupt"])


__all__ = ["ReviveWatch", "array_fingerprints", "check_directory", "fingerprints_for", "log_revalidation",
           "transform_token", "warn_best_effort"]
