"""One pass over a view: the iterator a ``SplitView`` returns. It takes the engine's batches
(and gathers string labels beside them), runs batch transforms ahead on their own thread,
counts the rows it delivers (for resume) and cancels its pass when closed, broken off or
collected."""

from __future__ import annotations

import functools
import time
from dataclasses import asdict, dataclass, replace
from typing import Any, Callable, Mapping

import numpy as np

from . import _ext, lifecycle, resume, strings
from . import transforms as _transforms
from .errors import CancelledError
from .geometry import ArrayGeometry, as_stored
from .records import Batch
from .runtime import PassStats, Waited
from .timeline import Timeline


@dataclass(frozen=True, eq=False)
class PassContext:
    """What a pass needs from its dataset, and nothing else: the labels the engine gathers
    (in its order), each label's window offset, the labels to view as their numpy dtype,
    the string arrays read beside the engine (opened), the batch transforms, and where it
    reports the rows it delivered and its end."""

    labels: tuple[str, ...]
    offsets: Mapping[str, int]  # every label, string labels too
    records: Mapping[str, np.dtype]  # labels the engine hands in another form (records, times)
    string_arrays: Mapping[str, tuple[Any, ArrayGeometry]]  # label -> (opened native array, geometry)
    batch_transforms: tuple[Callable[..., Any], ...]
    store_kind: str  # the backend (PassStats.store_kind): the verdict's advice depends on it
    patch_dims: tuple[str, ...]  # the patch axes' names (empty without patches)
    delivered: Callable[[resume.ViewKey, int, int], None]  # (view, epoch, rows of the epoch so far)
    finished: Callable[[PassStats], None]  # the pass's stats (its bad_chunks among them)


def native_spec(split: str, epoch: int, ref_spc: int, batch_size: int, prefetch_depth: int,
                labels: list[tuple[str, int, int]], order: tuple[np.ndarray, np.ndarray], *,
                next_order_later: bool, set_patches: Callable[[Any, list[str]], None],
                trace_events: bool | int = False) -> Any:
    """The engine's ``PassSpec`` for one pass: its view, epoch and order, ``labels`` as
    ``(name, array index, window offset)`` in gather order; ``set_patches(spec, names)``
    adds patch samples once the labels are set; ``trace_events``: record its timeline."""
    spec = _ext.PassSpec()
    spec.split, spec.epoch, spec.ref_spc, spec.trace_events = split, epoch, ref_spc, trace_events
    spec.batch_size, spec.prefetch_depth, spec.labels = batch_size, prefetch_depth, labels
    set_patches(spec, [label for label, _, _ in labels])
    spec.set_order(*order)
    spec.next_order_later = next_order_later
    return spec


def _gathered(native: Any, labels: tuple[str, ...], offsets: Mapping[str, int],
              records: Mapping[str, np.dtype], string_columns: Mapping[str, strings.StringColumn],
              patch_dims: tuple[str, ...] = ()) -> Batch | None:
    """The engine's next batch as a :class:`Batch`, ``None`` at the end of the pass;
    ``records``: the labels the engine hands in another form (records, times), viewed as
    their numpy dtype; ``string_columns``: string arrays, gathered here for the same rows."""
    item = native.next()
    if item is None:
        return None
    arrays, indices, origins, filled = item
    out = dict(zip(labels, arrays))
    for label, dtype in records.items():
        out[label] = as_stored(out[label], dtype)
    for label, column in string_columns.items():
        out[label] = column.take(indices + offsets[label])
    bad = {} if filled is None else {label: rows for label, rows in zip(labels, filled) if rows.any()}
    return Batch(out, indices, dict(offsets), origins, patch_dims if origins is not None else (), bad)


def _ended() -> None:
    return None


def _release_pass_frames(tb: Any) -> None:
    """Clears the locals of the finished gather frames in an exception's traceback. They
    hold the native pass, which holds the engine and its chunk transforms: a transform that
    keeps the exception (a closure, an object with a log of failures) would close a cycle
    through C++ that no collector can see, keeping engine and pool alive until exit. The
    caller's own frames are left as they are."""
    while tb is not None:
        if tb.tb_frame.f_code is _gathered.__code__:
            try:
                tb.tb_frame.clear()
            except RuntimeError:  # still executing (not expected here): keep it
                pass
        tb = tb.tb_next


class PassIterator:
    """One pass. Early ``break``, ``close()`` or garbage collection cancel it cleanly."""

    def __init__(self, context: PassContext, native: Any, split: str, epoch: int,
                 key: resume.ViewKey = ("", False, (0, 1)), start: int = 0,
                 next_order: Callable[[], tuple[np.ndarray, np.ndarray]] | None = None) -> None:
        self._context = context
        self._native = native
        # The view's order next epoch, given to the engine once the first batch is out.
        self._next_order = next_order
        self._first_out = False
        self.split = split
        self.epoch = epoch
        self._key = key
        self._delivered = start  # rows of the epoch handed to the caller (a resume starts later)
        context.delivered(key, epoch, start)
        # Batch transforms run on a thread of their own, ahead of the consumer. The thread
        # must not hold this iterator: collecting an abandoned one is what cancels its pass.
        columns = {label: strings.StringColumn(array, g) for label, (array, g) in context.string_arrays.items()}
        self._store_kind = context.store_kind
        self._gather: Callable[[], Batch | None] = functools.partial(
            _gathered, native, context.labels, context.offsets, context.records, columns, context.patch_dims)
        self._ahead = (_transforms.BatchTransformsAhead(self._gather, context.batch_transforms, split)
                       if context.batch_transforms else None)
        self._done = False
        self._closed_because: str | None = None  # closed by someone else: why
        self._consumer_s = 0.0  # wall time the caller spent between batches (its loop body)
        self._returned_at: float | None = None

    def __iter__(self) -> "PassIterator":
        return self

    def __next__(self) -> Batch:
        if self._returned_at is not None:
            self._consumer_s += time.perf_counter() - self._returned_at
            self._returned_at = None
        native = self._native  # another thread may close the pass meanwhile
        if self._done or native is None:
            if self._closed_because is not None:
                raise CancelledError(self._closed_because)
            raise StopIteration
        if self._first_out and self._next_order is not None:
            make, self._next_order = self._next_order, None
            native.set_next_order(*make())  # the engine keeps loading meanwhile (GIL released)
        try:
            if self._ahead is not None:
                batch = self._ahead.next()
            else:
                batch = self._gather()
        except BaseException as exc:  # a chunk transform's exception arrives as itself
            native = None
            self.close()
            _release_pass_frames(exc.__traceback__)
            raise
        if batch is None:
            self.close()
            raise StopIteration
        self._delivered += len(batch)
        self._first_out = True
        self._context.delivered(self._key, self.epoch, self._delivered)
        self._returned_at = time.perf_counter()
        out: Batch = batch
        return out

    def close(self, reason: str | None = None) -> None:
        """Ends the pass. ``reason``: it is closed from outside the loop (the dataset was
        closed), so a ``next()`` in progress or to come raises ``CancelledError(reason)``."""
        if self._done:
            return
        self._done = True
        self._closed_because = reason
        native = self._native
        native.close(reason or "the pass was closed")
        native_stats = native.stats()
        recorded = native.trace()
        trace = None if recorded is None else Timeline.from_native(recorded, f"{self.split} epoch {self.epoch}")
        stats = PassStats.from_native(native_stats, consumer_s=self._consumer_s, store_kind=self._store_kind,
                                      trace=trace)
        if self._ahead is not None:
            self._ahead.close()
            ahead = self._ahead
            # The consumer waits on the transformed batches, not on the engine's queue.
            stats = replace(
                stats, times=replace(stats.times, batch_transform_s=ahead.cpu_s),
                waited=Waited(**ahead.waited(asdict(stats.waited))),
                depths=replace(stats.depths, batch_queue_samples=ahead.gets, batch_queue_empty=ahead.empty_gets,
                               batch_queue_full_enough=ahead.gets - ahead.empty_gets))
        self._native = None
        self._gather = _ended
        self._context.finished(stats)

    def _retire(self, reason: str) -> None:
        """In a forked child: the native pass is the parent's; it is kept, unused."""
        if self._done:
            return
        lifecycle.INHERITED.append(self._native)
        self._native = None
        self._done = True
        self._closed_because = reason

    def __enter__(self) -> "PassIterator":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # pragma: no cover - interpreter teardown
            pass


__all__ = ["PassContext", "PassIterator"]
