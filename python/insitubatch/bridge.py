"""Bridge to zarr-python stores: any v3 ``Store`` object becomes a native ``Store``.

The native engine reads through ``_ext.PythonStore``, which schedules each read here as a
coroutine on one private asyncio event loop running on a daemon thread
("insitubatch-bridge"). C++ holds the GIL only to schedule a read and, when it finishes,
to copy its bytes out; the engine's callback then runs with the GIL released.
"""

from __future__ import annotations

import atexit
import inspect
import os
import re
import threading
from typing import TYPE_CHECKING, Any

from . import _ext
from .errors import FailedPreconditionError, InvalidTypeError

if TYPE_CHECKING:
    import asyncio  # at run time only where a bridged store needs its event loop

_SHUTDOWN_TIMEOUT_S = 5.0
_CANCEL_POLL_S = 0.05

# Kinds of _ext ByteRange (ByteRange::Kind order).
_ALL, _RANGE, _SUFFIX = 0, 1, 2


class _Bridge:
    """The loop thread and the reads in flight on it (one per process)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        import asyncio  # here, not at import: only bridged Python stores need an event loop

        self.loop = asyncio.new_event_loop()
        self.tasks: set[asyncio.Task[Any]] = set()  # strong references: asyncio keeps weak ones
        self.reads: dict[asyncio.Task[Any], Any] = {}  # task -> its _ext._BridgeRead
        self.watcher: asyncio.Task[Any] | None = None
        self.closed = False
        ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(ready,), name="insitubatch-bridge",
                                       daemon=True)
        self.thread.start()
        ready.wait()

    def _run(self, ready: threading.Event) -> None:
        import asyncio

        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(ready.set)
        self.loop.run_forever()

    def _start(self, coro: Any, read: Any) -> None:  # on the loop
        task = self.loop.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        if read is not None:
            self.reads[task] = read
            task.add_done_callback(self._forget)
            if self.watcher is None or self.watcher.done():
                self.watcher = self.loop.create_task(self._watch())

    def _forget(self, task: asyncio.Task[Any]) -> None:
        self.reads.pop(task, None)

    async def _watch(self) -> None:
        """Cancels the coroutines of reads the engine gave up on (a closed pass), so a
        stalled store never holds a read the engine waits for at shutdown."""
        import asyncio

        while self.reads:
            await asyncio.sleep(_CANCEL_POLL_S)
            # No read is kept in a local across the sleep: a watcher still pending at exit
            # would hold it past the extension's teardown (a leaked _BridgeRead).
            for task in [t for t, read in self.reads.items() if not t.done() and read.cancelled()]:
                task.cancel()

    def submit(self, coro: Any, read: Any = None) -> None:
        if self.closed:
            coro.close()
            raise FailedPreconditionError("the Python store bridge is shut down")
        self.loop.call_soon_threadsafe(self._start, coro, read)

    def run(self, coro: Any) -> Any:
        """Runs ``coro`` on the loop and waits for it (never from the loop itself)."""
        if threading.current_thread() is self.thread:
            coro.close()
            raise FailedPreconditionError("a blocking bridge call was made from the bridge loop thread")
        if self.closed:
            coro.close()
            raise FailedPreconditionError("the Python store bridge is shut down")
        import asyncio

        # Future.result() waits with the GIL released.
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def shutdown(self) -> None:
        """Cancels every read in flight (each ends Cancelled in C++), then stops the loop."""
        if self.closed:
            return
        self.closed = True
        import asyncio

        async def drain() -> None:
            tasks = [*self.tasks, *([self.watcher] if self.watcher is not None else [])]
            for task in tasks:
                task.cancel()
            if tasks:
                await asyncio.wait(tasks, timeout=_SHUTDOWN_TIMEOUT_S)

        try:
            asyncio.run_coroutine_threadsafe(drain(), self.loop).result(_SHUTDOWN_TIMEOUT_S + 1)
        except Exception:  # best effort at exit
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(_SHUTDOWN_TIMEOUT_S)
        self.reads.clear()
        if not self.thread.is_alive():  # the loop has stopped: its queued callbacks (a read
            self.loop.close()           # submitted as it stopped, with its handle) go now


_bridge: _Bridge | None = None
_bridge_lock = threading.Lock()


def _get_bridge() -> _Bridge:
    global _bridge
    bridge = _bridge
    # A forked child inherits the object but not the thread: it starts its own loop.
    if bridge is not None and bridge.pid == os.getpid():
        return bridge
    with _bridge_lock:
        if _bridge is None or _bridge.pid != os.getpid():
            _bridge = _Bridge()
        return _bridge


@atexit.register
def _shutdown() -> None:
    _ext._close_python_store_bridge()
    bridge = _bridge
    if bridge is not None and bridge.pid == os.getpid():
        bridge.shutdown()


# -- what C++ calls ---------------------------------------------------------------------------

_prototype = None


def _buffer_prototype() -> Any:
    global _prototype
    if _prototype is None:
        from zarr.core.buffer import default_buffer_prototype

        _prototype = default_buffer_prototype()
    return _prototype


def _byte_request(kind: int, offset: int, length: int) -> Any:
    if kind == _ALL:
        return None
    from zarr.abc.store import RangeByteRequest, SuffixByteRequest

    if kind == _RANGE:
        return RangeByteRequest(offset, offset + length)
    return SuffixByteRequest(length)


def _bytes_like(buffer: Any) -> Any:
    """The bytes of a zarr ``Buffer`` without a copy where possible."""
    if isinstance(buffer, (bytes, bytearray, memoryview)):
        return buffer
    try:
        return memoryview(buffer.as_buffer_like())
    except Exception:  # a non-CPU buffer, or something buffer-like but not a zarr Buffer
        return buffer.to_bytes()


def _describe_error(exc: BaseException) -> str:
    text = str(exc)
    if len(text) > 500:
        text = text[:500] + "..."
    return f"{type(exc).__qualname__}: {text}" if text else type(exc).__qualname__


async def _read(store: Any, key: str, kind: int, offset: int, length: int, read: Any) -> None:
    # Exactly one of found / missing / fail / cancel reaches C++ (later ones are ignored).
    import asyncio

    try:
        result = store.get(key, _buffer_prototype(), byte_range=_byte_request(kind, offset, length))
        if inspect.isawaitable(result):
            result = await result
    except (KeyError, FileNotFoundError):
        read.missing()
    except asyncio.CancelledError:
        read.cancel("the read was cancelled (its pass closed, or the bridge shut down)")
    except Exception as exc:  # noqa: BLE001 - every store failure becomes a StoreError
        # The store may keep its exception (icechunk's Rust side does): without its
        # traceback it keeps no frame of ours, and so not the read.
        exc.__traceback__ = None
        read.fail(_describe_error(exc))
    else:
        if result is None:
            read.missing()
        else:
            try:
                data = _bytes_like(result)
            except Exception as exc:  # noqa: BLE001
                read.fail(f"the store returned a {type(result).__name__} that is not bytes: "
                          f"{_describe_error(exc)}")
            else:
                read.found(data)


def _submit(store: Any, key: str, kind: int, offset: int, length: int, read: Any) -> None:
    _get_bridge().submit(_read(store, key, kind, offset, length, read), read)


async def _list(store: Any, prefix: str) -> list[str]:
    listed = store.list_prefix(prefix)
    if inspect.isawaitable(listed):  # a coroutine returning an iterable
        listed = await listed
    if hasattr(listed, "__aiter__"):
        return [key async for key in listed]
    return list(listed)


def _list_keys(store: Any, prefix: str) -> list[str]:
    keys: list[str] = _get_bridge().run(_list(store, prefix))
    return keys


# -- wrapping ----------------------------------------------------------------------------------

_USERINFO = re.compile(r"(?<=://)[^/@]*@")


def _location(store: Any) -> str:
    """Type name plus path or URL: never credentials (no storage options, no userinfo/query)."""
    name = type(store).__name__
    where = None
    for attr in ("url", "root", "path"):
        value = getattr(store, attr, None)
        if isinstance(value, (str, os.PathLike)) and str(value):
            where = os.fspath(value)
            break
    if where is None:
        return name
    fs = getattr(store, "fs", None)
    protocol = getattr(fs, "protocol", None)
    if isinstance(protocol, (tuple, list)) and protocol:
        protocol = protocol[0]
    if isinstance(protocol, str) and protocol and "://" not in where:
        where = f"{protocol}://{where.lstrip('/') if protocol != 'file' else where}"
    where = _USERINFO.sub("", where.split("?", 1)[0].split("#", 1)[0])
    return f"{name}({where})"


def is_python_store(obj: Any) -> bool:
    """Whether ``obj`` looks like a zarr-python v3 Store (an async ``get`` and ``list_prefix``)."""
    return callable(getattr(obj, "get", None)) and callable(getattr(obj, "list_prefix", None))


def wrap_python_store(obj: Any) -> _ext.Store:
    """A native ``Store`` reading ``obj`` (a zarr-python v3 Store) through the bridge loop."""
    if isinstance(obj, _ext.Store):
        return obj
    if not is_python_store(obj):
        raise InvalidTypeError(f"{type(obj).__name__} is not a zarr-python Store (it needs async get()"
                        " and list_prefix())")
    _get_bridge()  # start the loop now, not on the engine's first read
    return _ext.open_python_store(obj, _location(obj), _submit, _list_keys)


__all__ = ["is_python_store", "wrap_python_store"]
