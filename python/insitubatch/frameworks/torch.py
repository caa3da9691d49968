"""PyTorch adapter.

On the CPU a batch becomes tensors through DLPack with no copy: each tensor's data pointer
is the engine's batch buffer, and torch keeps the numpy array (and so the buffer) alive
until the tensor is gone, so the engine recycles a buffer only after torch released it.

With a CUDA device the adapter owns the transfer: a non-blocking host-to-device copy, a
CUDA event recorded on the target device's current stream, and the batch's source arrays
held until that event has completed, so a recycled buffer is never overwritten mid-DMA.
``as_torch`` has the engine page-lock its recycled batch buffers (``cudaHostRegister``,
resolved from the CUDA runtime torch loaded), so the copy reads the batch where the engine
gathered it: no staging copy, and each buffer is locked once, not per batch.
"""

from __future__ import annotations

import collections
import ctypes
import functools
import logging
import os
import threading
from typing import Any, Iterable, Iterator

import numpy as np

from .. import arguments
from ..errors import FailedPreconditionError
from . import default_pin_budget_bytes, model_arrays, owned_copy, require

logger = logging.getLogger("insitubatch")


def _torch() -> Any:
    return require("torch")


def _host_tensor(torch: Any, arr: np.ndarray) -> Any:
    """A CPU tensor over ``arr``'s memory (DLPack), or over a copy when DLPack refuses it."""
    if arr.dtype.name == "bfloat16":  # ml_dtypes' bfloat16: numpy cannot export it; torch has it
        bits = arr.view(np.uint16)
        return _host_tensor(torch, bits).view(torch.bfloat16)
    try:
        return torch.from_dlpack(arr)
    except (BufferError, TypeError, RuntimeError, ValueError):
        # Read-only, byte-swapped or strided arrays (batch-transform output) cannot be
        # exported as they are.
        return torch.from_numpy(owned_copy(arr))


def _resolve_device(torch: Any, device: Any) -> Any:
    if device is None:
        return None
    device = torch.device(device)
    return None if device.type == "cpu" else device


class _InflightCopies:
    """Sources of device copies not yet known to be finished.

    Each entry is (event, sources, pinned_bytes); an entry is dropped — and with it the
    last reference to its batch buffers — only once ``event.query()`` reports the copy done.
    """

    def __init__(self) -> None:
        self._pending: collections.deque[Any] = collections.deque()
        self._lock = threading.Lock()
        self.pinned_bytes = 0

    def hold(self, event: Any, sources: list[Any], pinned_bytes: int = 0) -> None:
        with self._lock:
            self._pending.append((event, sources, pinned_bytes))
            self.pinned_bytes += pinned_bytes

    def release_finished(self) -> None:
        with self._lock:
            keep: collections.deque[Any] = collections.deque()
            for entry in self._pending:
                if entry[0].query():
                    self.pinned_bytes -= entry[2]
                else:
                    keep.append(entry)
            self._pending = keep

    def drain(self) -> None:
        """Waits for every pending copy, then releases its sources."""
        with self._lock:
            pending, self._pending = self._pending, collections.deque()
            self.pinned_bytes = 0
        for event, _, _ in pending:
            event.synchronize()

    def __len__(self) -> int:
        return len(self._pending)


_CUDART_UNSET = object()
_CUDART: Any = _CUDART_UNSET


def cudart_host_register(torch: Any) -> tuple[int, int] | None:
    """Addresses of ``cudaHostRegister`` and ``cudaHostUnregister`` in the CUDA runtime
    library torch has loaded, or None where none is found (the adapter then stages batches
    through torch's pinned allocator instead)."""
    global _CUDART
    if _CUDART is not _CUDART_UNSET:
        found: tuple[int, int] | None = _CUDART
        return found
    torch.cuda.init()  # loads libcudart if torch links it dynamically
    candidates = []
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split(None, 5)[-1].strip()
                if "libcudart" in os.path.basename(path) and path not in candidates:
                    candidates.append(path)
    except OSError:
        pass
    major = (torch.version.cuda or "").split(".")[0]
    candidates += [f"libcudart.so.{major}"] if major else []
    _CUDART = None
    for name in candidates:
        try:
            lib = ctypes.CDLL(name)  # already loaded: the same handle torch uses
            _CUDART = (ctypes.cast(lib.cudaHostRegister, ctypes.c_void_p).value,
                       ctypes.cast(lib.cudaHostUnregister, ctypes.c_void_p).value)
            break
        except (OSError, AttributeError):
            continue
    if _CUDART is None:
        logger.info("as_torch: no CUDA runtime library found in this process; batches are"
                    " staged through torch's pinned allocator instead of locked in place")
    result: tuple[int, int] | None = _CUDART
    return result


class _EnginePages:
    """A dataset's page-locked batch buffers (the engine locks them as it recycles them)."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    @classmethod
    def attach(cls, view: Any, budget_bytes: int, functions: tuple[int, int] | None) -> "_EnginePages | None":
        """Turns locking on for ``view``'s dataset; None for views of anything else."""
        dataset = getattr(view, "dataset", None)
        if functions is None or dataset is None or not hasattr(dataset, "_lock_batch_pages"):
            return None
        dataset._lock_batch_pages(functions[0], functions[1], budget_bytes)
        return cls(dataset)

    def locked(self, arr: np.ndarray) -> bool:
        return bool(self.dataset._batch_pages_locked(arr))

    def locked_bytes(self) -> int:
        try:
            return int(self.dataset.pool_state()["batch_locked_bytes"])
        except Exception:  # closed
            return 0


class _DeviceFeeder:
    """Copies batches to one accelerator device, holding sources until the copy is done.

    With ``pin=True`` the host side of each copy is page-locked: arrays in memory the engine
    locked (``pages``) or that torch reports pinned are used as they are; others are staged
    through torch's pinned host allocator while the engine's locked bytes plus the staged
    bytes in flight stay within ``pin_budget_bytes`` — past it, copies come from pageable
    memory and one WARNING says so.
    """

    def __init__(self, torch: Any, device: Any, *, pin: bool = False, pin_budget_bytes: int | None = None,
                 pages: _EnginePages | None = None) -> None:
        self.torch = torch
        self.device = device
        self.is_cuda = device.type == "cuda"
        self.pin = pin and self.is_cuda
        self.pin_budget_bytes = default_pin_budget_bytes() if pin_budget_bytes is None else pin_budget_bytes
        self.pages = pages
        self.inflight = _InflightCopies()
        self._warned = False

    # Device operations, separate so the bookkeeping can be exercised without a GPU.
    def _is_pinned(self, host: Any) -> bool:
        return bool(host.is_pinned())

    def _pin(self, host: Any) -> Any:
        return host.pin_memory()

    def _copy(self, host: Any) -> Any:
        return host.to(self.device, non_blocking=True)

    def _record_event(self) -> Any:
        torch = self.torch
        with torch.cuda.device(self.device):
            event = torch.cuda.Event()
            event.record(torch.cuda.current_stream(self.device))
        return event

    def _stage(self, arrays: dict[str, Any], hosts: dict[str, Any]) -> tuple[dict[str, Any], int]:
        """Page-locks the host tensors within the budget; returns them and the bytes staged."""
        pages = self.pages
        need = {k: t for k, t in hosts.items()
                if not (pages is not None and pages.locked(arrays[k])) and not self._is_pinned(t)}
        nbytes = sum(t.numel() * t.element_size() for t in need.values())
        if not nbytes:
            return hosts, 0
        pinned = self.inflight.pinned_bytes + (pages.locked_bytes() if pages is not None else 0)
        if pinned + nbytes > self.pin_budget_bytes:
            if not self._warned:
                self._warned = True
                logger.warning(
                    "as_torch: pinning this batch (%d bytes, %d already pinned) would exceed"
                    " pin_budget_bytes=%d; copying from pageable memory past the budget (slower"
                    " host-to-device copies). Raise pin_budget_bytes or lower batch_size.",
                    nbytes, pinned, self.pin_budget_bytes)
            return hosts, 0
        staged = dict(hosts)
        for k, t in need.items():
            staged[k] = self._pin(t)
        return staged, nbytes

    def convert(self, arrays: dict[str, np.ndarray]) -> dict[str, Any]:
        torch = self.torch
        hosts = {label: _host_tensor(torch, arr) for label, arr in arrays.items()}
        if not self.is_cuda:  # no event to gate on: a plain (blocking) copy
            return {label: t.to(self.device) for label, t in hosts.items()}
        self.inflight.release_finished()
        pinned_bytes = 0
        if self.pin:
            hosts, pinned_bytes = self._stage(arrays, hosts)
        out = {label: self._copy(t) for label, t in hosts.items()}
        # The numpy arrays own the engine buffers; the host tensors may be pinned stagings.
        self.inflight.hold(self._record_event(), [arrays, hosts], pinned_bytes)
        return out


# One feeder per device for bare to_torch(batch, device=...) calls.
_FEEDERS: dict[Any, _DeviceFeeder] = {}
_FEEDERS_LOCK = threading.Lock()


def _feeder_for(torch: Any, device: Any) -> _DeviceFeeder:
    with _FEEDERS_LOCK:
        feeder = _FEEDERS.get(device)
        if feeder is None:
            feeder = _FEEDERS[device] = _DeviceFeeder(torch, device)
        return feeder


def to_torch(batch: Any, device: Any = None) -> dict[str, Any]:
    """``{label: torch.Tensor}`` for a Batch's model-input arrays.

    On the CPU (``device`` None or ``"cpu"``) the tensors share the batch buffers (DLPack,
    no copy). With a CUDA ``device`` the copy is non-blocking and the batch's buffers are
    held until its CUDA event completes; other devices get a plain copy.
    """
    torch = _torch()
    arrays = model_arrays(batch)
    target = _resolve_device(torch, device)
    if target is None:
        return {label: _host_tensor(torch, arr) for label, arr in arrays.items()}
    return _feeder_for(torch, target).convert(arrays)


_DATASET_CLASS = None


def _dataset_class(torch: Any) -> Any:
    global _DATASET_CLASS
    if _DATASET_CLASS is None:

        class InSituTorchDataset(torch.utils.data.IterableDataset):  # torch: the module, imported at call
            """A split view as a torch IterableDataset: each ``iter()`` is one pass.

            Use ``DataLoader(ds, batch_size=None, num_workers=0)``: batches are already
            assembled, and the parallelism is in the engine, not in worker processes. With
            ``num_workers=N`` each worker iterates a disjoint share of whole chunks
            (``view.shard(worker id, N)``), so every sample still comes once per epoch and
            every chunk is read by one worker.
            """

            def __init__(self, view: Iterable[Any], device: Any, pin_budget_bytes: int | None) -> None:
                super().__init__()
                self.view = view
                self.device = _resolve_device(torch, device)
                self.pin_budget_bytes = pin_budget_bytes

            def __iter__(self) -> Iterator[dict[str, Any]]:
                view = self.view
                worker = torch.utils.data.get_worker_info()
                if worker is not None:
                    if self.device is not None:
                        raise FailedPreconditionError(
                            f"as_torch(device={str(self.device)!r}) copies to the device itself and"
                            " cannot run in DataLoader worker processes: use num_workers=0 (the"
                            " engine already reads in parallel), or drop device= and move batches"
                            " in the training loop")
                    shard = getattr(view, "shard", None)
                    if shard is None:
                        raise FailedPreconditionError(
                            "as_torch: this view cannot be split among DataLoader workers; use"
                            " num_workers=0 (the engine already reads in parallel)")
                    view = shard(worker.id, worker.num_workers)
                feeder = None
                if self.device is not None:
                    budget = (default_pin_budget_bytes() if self.pin_budget_bytes is None
                              else self.pin_budget_bytes)
                    pages = None
                    if self.device.type == "cuda":
                        pages = _EnginePages.attach(self.view, budget, cudart_host_register(torch))
                    feeder = _DeviceFeeder(torch, self.device, pin=True, pin_budget_bytes=budget,
                                           pages=pages)
                it = iter(view)
                try:
                    for batch in it:
                        arrays = model_arrays(batch)
                        if feeder is None:
                            yield {label: _host_tensor(torch, arr) for label, arr in arrays.items()}
                        else:
                            yield feeder.convert(arrays)
                finally:
                    close = getattr(it, "close", None)
                    if callable(close):
                        close()
                    if feeder is not None:
                        feeder.inflight.drain()

            def __len__(self) -> int:
                return len(self.view)  # type: ignore[arg-type]  # views are sized

            # torchdata's StatefulDataLoader saves and restores these (num_workers=0): the
            # view's cursor, so a restored loader yields exactly the rest of the epoch.
            def state_dict(self) -> dict[str, Any]:
                state: dict[str, Any] = self._stateful_view().state_dict()
                return state

            def load_state_dict(self, state: dict[str, Any]) -> None:
                self._stateful_view().load_state_dict(state)

            def _stateful_view(self) -> Any:
                if not callable(getattr(self.view, "state_dict", None)):
                    raise FailedPreconditionError(f"{self.view!r} keeps no resume state (a SplitView does)")
                return self.view

            def __reduce__(self) -> tuple[Any, tuple[Any]]:  # spawned workers: the class is made at first use
                device = None if self.device is None else str(self.device)
                return (functools.partial(as_torch, device=device, pin_budget_bytes=self.pin_budget_bytes),
                        (self.view,))

            def __repr__(self) -> str:
                where = "cpu" if self.device is None else str(self.device)
                return f"<as_torch {self.view!r} on {where}>"

        _DATASET_CLASS = InSituTorchDataset
    return _DATASET_CLASS


def as_torch(view: Any, *, device: Any = None, pin_budget_bytes: int | None = None) -> Any:
    """A torch ``IterableDataset`` yielding ``to_torch(batch, device)`` for each batch of
    ``view`` (e.g. ``ds.train``); iterate it with ``DataLoader(..., batch_size=None,
    num_workers=0)``.

    With a CUDA ``device`` the host side of each copy is page-locked: the engine locks its
    recycled batch buffers in place while the locked bytes (plus any batch-transform output
    staged through torch's pinned allocator) stay within ``pin_budget_bytes`` (default: 1/8
    of the machine's memory, a container's cgroup limit where lower than RAM); past it,
    copies come from pageable memory with one WARNING.
    """
    torch = _torch()
    if pin_budget_bytes is not None:
        pin_budget_bytes = arguments.integer("pin_budget_bytes", pin_budget_bytes, (0, None))
    return _dataset_class(torch)(view, device, pin_budget_bytes)


__all__ = ["as_torch", "to_torch"]
