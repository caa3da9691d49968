"""SharedDiskCache: objects downloaded once to a local directory, shared by every worker
process (cpp/src/insitubatch/prefetch/object_cache.h has the mechanics).

Downloads run on insitubatch's native IO layer (libcurl: S3 with SigV4 and the whole AWS
credential chain, ``AWS_ENDPOINT_URL`` / ``AWS_ENDPOINT_URL_S3`` as botocore reads them;
gs://, http(s)://, file://), at most ``download_threads`` at once, retried as insitubatch's
stores retry (backoff with jitter within ``retry_timeout``, 3 min, and
``connect_retry_timeout``, 20 s, for a server that refuses connections), up to
``max_retries=20``; every store option can be passed to SharedDiskCache. With ``s3_client=`` (a boto3 client), or
the deprecated ``use_rust=False``, the bytes come through boto3 instead, on a thread pool; everything else
(paths, locks, pruning) is the same.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterable

from insitubatch import _compat, _ext, arguments, stores, urls
from insitubatch.errors import FailedPreconditionError, InvalidArgumentError, InvalidTypeError, MissingDependencyError

# The engine's retry windows (retry_timeout 3 min, connect_retry_timeout 20 s, backoff with
# full jitter from 100 ms to 15 s); more attempts than its 11, so the windows, not the count,
# end the retries: thousands of downloads in flight through a 10 s outage all survive it.
_RETRIES = {"max_retries": 20}

_INHERITED: list[Any] = []  # a forked child's copies of its parent's caches: never used


class _Boto3Store:
    """A zarr-style async store reading one bucket through a boto3 client on a thread pool
    (the seed's Python backend), bridged into the native cache."""

    supports_partial_writes = False

    def __init__(self, client: Any, bucket: str, pool: ThreadPoolExecutor) -> None:
        self.client, self.bucket, self.pool = client, bucket, pool

    def _get(self, key: str) -> bytes | None:
        try:
            data: bytes = self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
            return data
        except Exception as exc:  # noqa: BLE001
            code = getattr(exc, "response", {}).get("Error", {}).get("Code")
            if code in ("NoSuchKey", "404", "NotFound"):
                return None
            raise

    async def get(self, key: str, prototype: Any = None, byte_range: Any = None) -> bytes | None:
        import asyncio

        return await asyncio.get_running_loop().run_in_executor(self.pool, self._get, key)

    async def list_prefix(self, prefix: str) -> list[str]:  # never used by the cache
        return []

    def __repr__(self) -> str:
        return f"boto3:s3://{self.bucket}"


class SharedDiskCache:
    """Objects under ``cache_dir``, one file per URI, downloaded at most once however many
    DataLoader workers ask. ``max_bytes`` bounds ``pressure`` pruning; a file younger than
    ``min_age_seconds_before_delete`` is never pruned. Extra keyword options go to the
    stores (insitubatch.store's names: ``endpoint``, ``region``, ``skip_signature``, ...)."""

    def __init__(self, cache_dir: str | os.PathLike[str], max_bytes: int = 10 * 10**9,
                 download_threads: int = 64, s3_max_pool_connections: int = 256,
                 min_age_seconds_before_delete: float = 2.0, use_rust: bool | None = None,
                 s3_client: Any = None, lock_wait_seconds: float = 600.0, **store_options: Any) -> None:
        if not isinstance(cache_dir, (str, os.PathLike)):
            raise InvalidTypeError(f"cache_dir must be a directory path, got {cache_dir!r}")
        if not os.fspath(cache_dir):
            raise InvalidArgumentError(f"cache_dir must be a directory path, got {cache_dir!r}")
        self.cache_dir = os.path.abspath(os.fspath(cache_dir))
        self.max_bytes = arguments.integer("max_bytes", max_bytes, (1, 2**63 - 1))
        self.download_threads = arguments.integer("download_threads", download_threads, (1, 4096))
        self.s3_max_pool_connections = arguments.integer("s3_max_pool_connections", s3_max_pool_connections,
                                                         (1, 100_000))
        self.min_age_seconds_before_delete = arguments.number("min_age_seconds_before_delete",
                                                              min_age_seconds_before_delete, 0)
        self.lock_wait_seconds = arguments.number("lock_wait_seconds", lock_wait_seconds, 0, 86400, open_lo=True)
        if use_rust is not None:
            _compat.use_rust_argument(use_rust)
        self.use_rust = (use_rust is None or arguments.flag("use_rust", use_rust)) and s3_client is None
        self.s3_client = s3_client
        self.store_options = dict(store_options)
        self._lock = threading.Lock()
        self._open()

    def _open(self, parent_pid: int = 0) -> None:
        self._pid = os.getpid()
        self._native = _ext.ObjectCache.open(self.cache_dir, self.max_bytes, self.download_threads,
                                             self.min_age_seconds_before_delete, self.lock_wait_seconds, parent_pid)
        self._registered: set[str] = set()
        self._boto_pool: ThreadPoolExecutor | None = None

    # -- stores ----------------------------------------------------------------------------
    def _store_for(self, prefix: str) -> Any:
        scheme = urls.store_scheme(prefix)
        if scheme == "s3":
            if not self.use_rust:
                return self._boto3_store(prefix)
            options = {**_RETRIES, "max_connections_per_host": self.s3_max_pool_connections, **self.store_options}
            return stores.store(prefix, **options)
        if scheme == "file":
            return stores.store("file:///")
        if scheme in (None, "memory"):
            raise InvalidArgumentError(f"unsupported URI scheme in {prefix!r}: SharedDiskCache reads s3://, gs://,"
                                       " az://, http(s):// and file://")
        return stores.store(prefix, **{**_RETRIES, **self.store_options})

    def _boto3_store(self, prefix: str) -> Any:
        client = self.s3_client
        if client is None:
            try:
                import boto3
            except ImportError:
                raise MissingDependencyError("use_rust=False needs boto3 (pip install boto3)") from None
            client = boto3.client("s3")
        if self._boto_pool is None:
            self._boto_pool = ThreadPoolExecutor(self.download_threads, thread_name_prefix="planfetch-boto3")
        return _ext_python_store(_Boto3Store(client, prefix.split("://", 1)[1].rstrip("/"), self._boto_pool))

    def _cache(self) -> Any:
        """The native cache, re-opened in a forked child (the parent's threads are not there).
        The child's waits end once the process that forked it has exited: a DataLoader
        worker whose main process died stops instead of waiting on downloads nobody runs."""
        if self._pid != os.getpid():
            with self._lock:
                if self._pid != os.getpid():
                    _INHERITED.append(self._native)
                    self._open(parent_pid=_watched_parent(self._pid))
        return self._native

    def _register(self, uri: str) -> str:
        prefix = urls.bucket_prefix(uri)
        if prefix not in self._registered:
            with self._lock:
                if prefix not in self._registered:
                    self._native.register_store(prefix, self._store_for(prefix))
                    self._registered.add(prefix)
        return prefix

    def register_uris(self, uris: Iterable[str]) -> None:
        """Opens the stores for every bucket the URIs name (an S3KeyList: its one prefix)."""
        cache = self._cache()
        prefix = getattr(uris, "prefix", None)
        if prefix and prefix.count("/") >= 3:
            self._register(prefix + "x")
            return
        for uri in uris:
            self._register(uri)
        del cache

    # -- the seed's API --------------------------------------------------------------------
    def local_path(self, uri: str) -> str:
        """Where ``uri`` lives under cache_dir (whether or not it is there yet)."""
        return str(self._cache().local_path(uri))

    def ensure_local(self, uri: str) -> str:
        """The local path of ``uri``, downloaded first unless it is already there (or another
        worker is downloading it: then this waits for that)."""
        cache = self._cache()
        self._register(uri)
        return str(cache.ensure_local(uri))

    def prefetch(self, uris: Iterable[str]) -> None:
        """Starts the downloads of ``uris`` not on disk yet; returns at once."""
        uris = list(uris)
        cache = self._cache()
        for uri in uris:
            self._register(uri)
        cache.prefetch(uris)

    def prune(self, keep: Iterable[str] = (), mode: arguments.PruneMode = "window",
              backend: arguments.PruneBackend = "meta") -> dict[str, int]:
        """Deletes files: those not in ``keep`` (URIs) with ``mode="window"``, the least
        recently used while over max_bytes with ``"pressure"``; ``backend="scan"`` walks the
        directory (every process's files), ``"meta"`` only this process's."""
        mode = arguments.choice("prune_mode", mode)  # type: ignore[assignment]
        backend = arguments.choice("prune_backend", backend)  # type: ignore[assignment]
        cache = self._cache()
        return dict(cache.prune(mode, backend, [cache.local_path(u) for u in keep]))

    def stats(self) -> dict[str, int]:
        return dict(self._cache().stats())

    def close(self) -> None:
        """Cancels the queued and in-flight downloads and waits for them (their temp files
        go); later downloads raise CancelledError, files already there stay. Idempotent; a
        forked child's copy closes only its own."""
        self._cache().close()
        if self._boto_pool is not None:
            self._boto_pool.shutdown(wait=True)

    def __enter__(self) -> "SharedDiskCache":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- processes -------------------------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        if self.s3_client is not None:
            raise TypeError("a SharedDiskCache with an s3_client cannot be sent to a spawned worker"
                            " (boto3 clients do not pickle): use the native backend, or fork")
        return {"args": dict(cache_dir=self.cache_dir, max_bytes=self.max_bytes,
                             download_threads=self.download_threads,
                             s3_max_pool_connections=self.s3_max_pool_connections,
                             min_age_seconds_before_delete=self.min_age_seconds_before_delete,
                             lock_wait_seconds=self.lock_wait_seconds, **self.store_options),
                "use_rust": self.use_rust}

    def __setstate__(self, state: dict[str, Any]) -> None:
        SharedDiskCache.__init__(self, **state["args"])
        self.use_rust = state["use_rust"]  # set, not passed: use_rust= is deprecated

    def __repr__(self) -> str:
        return f"SharedDiskCache({self.cache_dir!r}, max_bytes={self.max_bytes})"


def _watched_parent(opener: int) -> int:
    """The process a forked child's waits watch: the one that opened the cache when it is
    the child's parent or has died already (then waits end at once), else the parent."""
    if os.getppid() == opener:
        return opener
    try:
        os.kill(opener, 0)
    except ProcessLookupError:
        return opener
    except PermissionError:
        pass
    return os.getppid()


def _ext_python_store(obj: Any) -> Any:
    from insitubatch.bridge import wrap_python_store

    return wrap_python_store(obj)


def run_dir(base: str | os.PathLike[str], run_id: str | int | None = None) -> str:
    """``<base>/run_<id>``, ``run_id`` defaulting to ``TORCHELASTIC_RUN_ID`` or "0"."""
    if run_id is None:
        run_id = os.environ.get("TORCHELASTIC_RUN_ID", "0")
    run = str(run_id)
    if not run or "/" in run or run in (".", ".."):
        raise InvalidArgumentError(f"run_id must be a plain name, got {run_id!r}")
    return os.path.join(os.fspath(base), f"run_{run}")


def rank_cache_dir(base: str | os.PathLike[str], run_id: str | int | None = None, rank: int | None = None) -> str:
    """``<base>/run_<id>/rank_<rank>``: the seed's rank-specific layout for DDP. ``rank``
    defaults to ``RANK`` (or ``LOCAL_RANK``), ``run_id`` to ``TORCHELASTIC_RUN_ID`` or "0"."""
    if rank is None:
        rank = int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0")))
    rank = arguments.integer("rank", rank, (0, 2**31 - 1))
    return os.path.join(run_dir(base, run_id), f"rank_{rank}")


def node_cache_dir(base: str | os.PathLike[str], run_id: str | int | None = None) -> str:
    """``<base>/run_<id>/node``: one directory for all the ranks of a host
    (``RankPlanProvider(..., shared_cache=True)``), so each object is downloaded once per
    host."""
    return os.path.join(run_dir(base, run_id), "node")


__all__ = ["SharedDiskCache", "node_cache_dir", "rank_cache_dir"]
