"""The engine's native stores as zarr-python Stores.

:func:`insitubatch.obstore_store` returns a :class:`ZarrStore`: one object that
``zarr.open_group``, ``xarray.open_zarr``, xbatcher or zarr's ``WrapperStore`` read through our
native IO (each read on a worker thread, the GIL released while it waits), and that the engine
reads directly (``as_native_store`` unwraps it: no bridge). A store opened with
``read_only=False`` is written through as well (``set``, ``set_if_not_exists``, ``delete``,
``delete_dir``), on the same native IO. Imported only when one is made,
because importing zarr costs a quarter of a second.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import os
import threading
from typing import Any, AsyncIterator, Callable, Iterable, TypeVar

from zarr.abc.store import ByteRequest, OffsetByteRequest, RangeByteRequest, Store, SuffixByteRequest
from zarr.core.buffer import Buffer, BufferPrototype

from .errors import InvalidArgumentError, UnsupportedError


def _read(native: Any, key: str, byte_range: ByteRequest | None) -> bytes | None:
    if byte_range is None:
        data: bytes | None = native.read(key)
        return data
    if isinstance(byte_range, RangeByteRequest):
        data = native.read(key, offset=byte_range.start, length=max(0, byte_range.end - byte_range.start))
        return data
    if isinstance(byte_range, SuffixByteRequest):
        data = native.read(key, suffix=byte_range.suffix)
        return data
    if isinstance(byte_range, OffsetByteRequest):  # rare (zarr's sharding asks for ranges and suffixes)
        data = native.read(key)
        return None if data is None else data[byte_range.offset:]
    raise InvalidArgumentError(f"unsupported byte range {byte_range!r}")


def _contiguous(value: Buffer) -> Any:
    """A zarr Buffer's bytes as a 1-D uint8 array the native write reads in place (no copy to
    bytes); anything else as bytes."""
    try:
        data = value.as_numpy_array()
    except Exception:  # noqa: BLE001 - a device buffer, or an exotic one: copy it out
        return value.to_bytes()
    return data if data.dtype == "uint8" and data.ndim == 1 and data.flags.c_contiguous else value.to_bytes()


_T = TypeVar("_T")
_write_pool: concurrent.futures.ThreadPoolExecutor | None = None
_write_pool_lock = threading.Lock()


def _forget_write_pool() -> None:  # a forked child has none of its parent's threads
    global _write_pool, _write_pool_lock
    _write_pool, _write_pool_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_write_pool)


async def _in_write_thread(call: Callable[..., _T], *args: Any, network: bool, **kwargs: Any) -> _T:
    """Runs a blocking native write off the event loop. zarr-python encodes chunks on the
    loop's default executor (a few threads: cores + 4); a write that waits there on the
    network (an S3 PUT) would hold a thread that encoding needs, so network writes wait on
    threads of their own (holding no GIL). A local write is CPU work like the encode, and
    more threads would only crowd the same cores: it shares the default executor."""
    if not network:
        return await asyncio.to_thread(call, *args, **kwargs)
    global _write_pool
    if _write_pool is None:
        with _write_pool_lock:
            if _write_pool is None:
                _write_pool = concurrent.futures.ThreadPoolExecutor(32, thread_name_prefix="insitu-zarr-write")
    return await asyncio.get_running_loop().run_in_executor(_write_pool, functools.partial(call, *args, **kwargs))


class ZarrStore(Store):
    """A native store (``.native``) behind zarr-python's ``Store`` interface: read-only unless
    the native store was opened writable. The native store's own methods (``read``,
    ``describe``, ``transport_stats``, ...) are available on it too; ``list`` is zarr's
    (async)."""

    supports_listing = True

    def __init__(self, native: Any, read_only: bool | None = None) -> None:
        writable = bool(getattr(native, "writable", False))
        if read_only is None:
            read_only = not writable
        if not read_only and not writable:
            raise InvalidArgumentError(f"{native.describe('')} was opened read-only: open it with"
                                       " read_only=False to write through it")
        super().__init__(read_only=read_only)
        self._native = native
        from . import _ext

        self._network_writes = not isinstance(native, (_ext.FileStore, _ext.MemoryStore))

    @property
    def native(self) -> Any:
        return self._native

    @property
    def supports_writes(self) -> bool:
        return bool(getattr(self._native, "writable", False))

    @property
    def supports_deletes(self) -> bool:
        return self.supports_writes

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "_native":  # unpickling, copy: no native yet
            raise AttributeError(name)
        return getattr(self._native, name)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ZarrStore):
            return False
        mine, theirs = getattr(self._native, "_recipe", None), getattr(other._native, "_recipe", None)
        return other._native is self._native or (mine is not None and mine == theirs)

    def __hash__(self) -> int:
        return id(self._native)

    def __repr__(self) -> str:
        return f"ZarrStore({self._native!r}{'' if self.read_only else ', writable'})"

    def __reduce__(self) -> tuple[type, tuple[Any, bool]]:
        return ZarrStore, (self._native, self.read_only)

    def _check_writable(self) -> None:
        # zarr's own words, as the ValueError zarr raises (InvalidArgumentError is one).
        if self.read_only:
            raise InvalidArgumentError(f"{self._native.describe('')}: store was opened in read-only mode and does"
                                       " not support writing (open it with read_only=False to write)")

    def with_read_only(self, read_only: bool = False) -> "ZarrStore":
        """The same native store with zarr's read_only flag set (writable only when the
        native store was opened writable)."""
        return self if read_only == self.read_only else ZarrStore(self._native, read_only=read_only)

    async def get(self, key: str, prototype: BufferPrototype,
                  byte_range: ByteRequest | None = None) -> Buffer | None:
        data = await asyncio.to_thread(_read, self._native, key, byte_range)
        return None if data is None else prototype.buffer.from_bytes(data)

    async def get_partial_values(self, prototype: BufferPrototype,
                                 key_ranges: Iterable[tuple[str, ByteRequest | None]]) -> list[Buffer | None]:
        return list(await asyncio.gather(*(self.get(k, prototype, r) for k, r in key_ranges)))

    async def exists(self, key: str) -> bool:
        return await asyncio.to_thread(self._native.read, key, offset=0, length=0) is not None

    async def getsize(self, key: str) -> int:
        data = await asyncio.to_thread(self._native.read, key)
        if data is None:
            raise FileNotFoundError(self._native.describe(key))
        return len(data)

    async def set(self, key: str, value: Buffer) -> None:
        self._check_writable()
        await _in_write_thread(self._native.write, key, _contiguous(value), network=self._network_writes)

    async def set_if_not_exists(self, key: str, value: Buffer) -> None:
        self._check_writable()  # atomic against other writers: a conditional create
        await _in_write_thread(self._native.write, key, _contiguous(value), if_absent=True,
                               network=self._network_writes)

    async def delete(self, key: str) -> None:
        self._check_writable()
        await _in_write_thread(self._native.delete, key, network=self._network_writes)

    async def delete_dir(self, prefix: str) -> None:
        self._check_writable()
        await _in_write_thread(self._native.delete_prefix, prefix, network=self._network_writes)

    async def _keys(self, prefix: str) -> list[str]:
        return [k for k in await asyncio.to_thread(self._native.list, prefix) if k.startswith(prefix)]

    async def list(self) -> AsyncIterator[str]:
        for key in await self._keys(""):
            yield key

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        for key in await self._keys(prefix):
            yield key

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        base = prefix.rstrip("/") + "/" if prefix.strip("/") else ""
        try:  # one directory level, where the store lists one: not every chunk key below it
            keys, dirs = await asyncio.to_thread(self._native.list_dir, base.rstrip("/"))
        except (UnsupportedError, InvalidArgumentError):  # lists whole prefixes only; or an odd prefix
            pass
        else:
            for name in sorted({path[len(base):] for path in (*keys, *dirs)}):
                yield name
            return
        seen: set[str] = set()
        for key in await self._keys(base):
            name = key[len(base):].split("/", 1)[0]
            if name and name not in seen:
                seen.add(name)
                yield name


__all__ = ["ZarrStore"]
