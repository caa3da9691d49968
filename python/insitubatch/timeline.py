"""A pass's timeline: asking for one, and writing it in the trace-event JSON format that
Perfetto (ui.perfetto.dev) and Chrome's trace viewer (chrome://tracing) open.

The engine records (``engine/pass_trace.h``, in C++: one lock-free ring of events per
pass, bounded, nothing at all unless asked); this module only turns what it recorded into
the file. Ask per dataset or for a stretch of code::

    ds = InSituDataset(..., trace=True)           # every pass of ds records
    with insitubatch.tracing():                   # or: the passes started in here
        for batch in ds.train:
            ...
    ds.last_pass.save_trace("epoch.json")         # then open it in ui.perfetto.dev

What the file holds (one process, "insitubatch <split> epoch <n>"):

* a thread per engine thread: the consumer's waits for batches, the producer's gathers
  (with the waits for chunks inside them, and for admission or a full queue between them),
  the scheduler's admissions (hit, admitted, revived from cache_dir, joined a read in
  flight) and evictions, each decode thread's decodes (shard parts, chunk transforms);
  retries, re-reads and bad chunks as instants on the thread that saw them;
* "reads" lanes: each stored chunk's read from queued to in hand, split into "queued" (not
  yet issued: waiting for a max_inflight token, held back while the decoders are behind, or
  for a local file, waiting for the decode thread that reads it) and "at store", with its
  bytes; as many lanes as reads overlapped;
* "batches queued" lanes: each batch from the queue to the consumer's hand;
* counters: reads in flight, resident pool bytes, batches queued.

The ring keeps the latest events; how many it recorded, kept and dropped is in the file's
``otherData`` and in the process's name.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import tempfile
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np

from . import _ext

_REQUESTED: contextvars.ContextVar[int] = contextvars.ContextVar("insitubatch_tracing", default=0)


@contextlib.contextmanager
def tracing(events: bool | int = True) -> Iterator[None]:
    """Records every pass started inside the block (on this thread or task): ``True`` in
    the default ring (the latest 262,144 events, 16 MiB), or a number of events. Read a
    pass's timeline with ``last_pass.save_trace(path)``."""
    token = _REQUESTED.set(_ext.trace_events(events))  # the engine's rule, checked now
    try:
        yield
    finally:
        _REQUESTED.reset(token)


def requested(trace: Any) -> int:
    """The ring (in events, 0: none) a run started now records into: its own ``trace=``
    (True, False or a number of events: checked by the engine's rule), else the innermost
    :func:`tracing` block's."""
    events: int = _ext.trace_events(trace)
    return events if events else int(_REQUESTED.get())


# How each kind the engine records is drawn: (what it is drawn as, its name, its category).
# "span": on the thread that recorded it; "read" / "queued": on lanes of their own;
# "instant": a mark on its thread; "counter": a counter track.
_DRAWN = {
    "read": ("read", "read", "io"),
    "decode": ("span", "decode", "decode"),
    "decode_part": ("span", "decode part", "decode"),
    "transform": ("span", "chunk transform", "decode"),
    "admit": ("span", "admit", "residency"),
    "evict": ("instant", "evict", "residency"),
    "retry": ("instant", "retry", "io"),
    "reread": ("instant", "re-read: the bytes did not decode", "io"),
    "bad_chunk": ("instant", "bad chunk: served as NaN", "io"),
    "wait_chunk": ("span", "wait for chunk", "wait"),
    "wait_admission": ("span", "wait for admission", "wait"),
    "wait_consumer": ("span", "wait for the consumer (queue full)", "wait"),
    "gather": ("span", "gather", "gather"),
    "hand_off": ("queued", "batch", "batch"),
    "consumer_wait": ("span", "wait for batch", "wait"),
    "reads_in_flight": ("counter", "reads in flight", "io"),
    "pool_bytes": ("counter", "resident pool", "residency"),
    "queue_depth": ("counter", "batch queue", "batch"),
    "pass": ("pass", "pass", "pass"),
    # planfetch's prefetcher (prefetch/prefetch_trace.h)
    "download": ("download", "download", "io"),
    "local_wait": ("span", "wait for object", "wait"),
    "hit": ("instant", "on disk", "io"),
    "schedule": ("instant", "window", "window"),
    "batch_done": ("instant", "batch done", "window"),
    "prune": ("span", "prune", "window"),
    "downloads_in_flight": ("counter", "downloads in flight", "io"),
    "downloads_queued": ("counter", "downloads queued", "io"),
}
_ADMITTED = ("hit", "joined a read in flight", "admitted", "revived from cache_dir")
_ROLES = {"consumer": 0, "producer": 1, "scheduler": 2}
_PID = 1
# Lanes' thread ids, clear of real ones; per lane kind, its name.
_LANES = {"pass": 1_000_000, "read": 2_000_000, "queued": 3_000_000, "download": 4_000_000}
_LANE_NAMES = {"read": "reads", "queued": "batches queued", "download": "downloads"}


@dataclass(frozen=True, eq=False)
class Timeline:
    """What a recorded pass recorded (the engine's events, as ``Pass.trace()`` hands
    them over), with :meth:`save` to write it."""

    title: str
    events: np.ndarray  # int64 (N, 9): kind, source, thread, start, end, mid, id, a, b (ns)
    kinds: tuple[str, ...]
    sources: tuple[str, ...]
    threads: dict[int, str]
    recorded: int
    dropped: int
    capacity: int
    labels: tuple[str, ...] = ()  # what an event's id names, where the recorder labels them (URIs)

    @classmethod
    def from_native(cls, native: Any, title: str) -> "Timeline":
        return cls(title, np.asarray(native["events"]).reshape(-1, 9), tuple(native["kinds"]),
                   tuple(native["sources"]), {int(t): str(n) for t, n in native["threads"]}, int(native["recorded"]),
                   int(native["dropped"]), int(native["capacity"]), tuple(native.get("labels", ())))

    def count(self, kind: str) -> int:
        """Events of one kind kept (``"read"``, ``"decode"``, ``"gather"``, ...)."""
        return int(np.count_nonzero(self.events[:, 0] == self.kinds.index(kind))) if len(self.events) else 0

    def save(self, path: str | os.PathLike[str]) -> None:
        """Writes the timeline to ``path`` (whole or not at all) as trace-event JSON."""
        path = os.fspath(path)
        folder = os.path.dirname(os.path.abspath(path))
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".trace-", suffix=".json")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(self.to_trace_events(), f, separators=(",", ":"))
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def to_trace_events(self) -> dict[str, Any]:
        """The trace-event JSON object: ``{"traceEvents": [...], "displayTimeUnit", "otherData"}``."""
        out: list[dict[str, Any]] = []
        lanes: dict[str, list[int]] = {kind: [] for kind in _LANE_NAMES}  # per lane: when its last span ends
        origin = int(self.events[:, 3].min()) if len(self.events) else 0
        for kind, source, thread, start, end, mid, ident, a, b in \
                self.events[np.argsort(self.events[:, 3], kind="stable")].tolist():
            drawn, name, cat = _DRAWN.get(self.kinds[kind], ("instant", self.kinds[kind], "other"))
            args = self._args(self.kinds[kind], source, ident, a, b)
            ts, dur = _us(start - origin), _us(end - start)
            if drawn == "span":
                if self.kinds[kind] == "admit":
                    name = _ADMITTED[a] if a < len(_ADMITTED) else name
                elif self.kinds[kind] in ("gather", "consumer_wait"):
                    name = f"{name} {ident}"
                out.append(_event("X", name, cat, ts, thread, dur=dur, args=args))
            elif drawn == "instant":
                out.append(_event("i", name, cat, ts, thread, args=args, s="t"))
            elif drawn == "counter":
                series = {"pool_bytes": "MiB"}.get(self.kinds[kind], "count")
                value = a / 2**20 if series == "MiB" else a
                out.append(_event("C", name, cat, ts, 0, args={series: value}))
            elif drawn == "pass":
                out.append(_event("X", self.title, cat, ts, _LANES["pass"], dur=dur, args=args))
            else:  # a read or a queued batch, on the first lane free when it starts
                lane = _lane(lanes[drawn], start, end)
                tid = _LANES[drawn] + lane
                if drawn == "queued":
                    out.append(_event("X", f"batch {ident}", cat, ts, tid, dur=dur, args=args))
                    continue
                if drawn == "read":
                    tile = b & 0xFFFFFFFF
                    label = f"read {self._source(source)} chunk {ident}" + (f" tile {tile}" if tile else "")
                else:
                    label = f"download {self._label(ident)}"
                out.append(_event("X", label, cat, ts, tid, dur=dur, args=args))
                if mid > start:
                    out.append(_event("X", "queued", cat, ts, tid, dur=_us(mid - start)))
                out.append(_event("X", "at store" if drawn == "read" else "downloading", cat, _us(mid - origin), tid,
                                  dur=_us(end - mid)))
        return {"traceEvents": self._metadata(lanes) + out, "displayTimeUnit": "ms",
                "otherData": {"title": self.title, "events_recorded": self.recorded, "events_kept": len(self.events),
                              "events_dropped": self.dropped, "ring_capacity": self.capacity,
                              "clock": "steady_clock, microseconds since the first event kept"}}

    def _source(self, source: int) -> str:
        return self.sources[source] if 0 <= source < len(self.sources) else str(source)

    def _label(self, ident: int) -> str:
        return self.labels[ident] if 0 <= ident < len(self.labels) else f"object {ident}"

    def _args(self, kind: str, source: int, ident: int, a: int, b: int) -> dict[str, Any]:
        chunk = {"array": self._source(source), "chunk": ident}
        if kind == "read":
            return {**chunk, "tile": b & 0xFFFFFFFF, "bytes": a, "attempt": (b >> 32) & 0xFF,
                    "failed": bool((b >> 40) & 1)}
        if kind == "decode":
            return {**chunk, "tile": b, "stored_bytes": a}
        if kind == "decode_part":
            return {**chunk, "tile": b, "part": a}
        if kind == "admit":
            return {**chunk, "resident_bytes": b}
        if kind == "retry":
            return {**chunk, "retries": a, "backoff_ms": b / 1e6}
        if kind in ("reread", "bad_chunk"):
            return {**chunk, "tile": b}
        if kind in ("transform", "evict", "wait_chunk"):
            return chunk
        if kind == "gather":
            return {"batch": ident, "rows": a, "bytes": b}
        if kind in ("hand_off", "consumer_wait", "wait_admission", "wait_consumer"):
            return {"batch": ident}
        if kind == "pass":
            return {"batches": a, "finished": bool(b), "events_dropped": self.dropped}
        if kind == "download":
            return {"uri": self._label(ident), "bytes": a, "failed": bool(b & 1), "another_process": bool(b & 2),
                    "retries": b >> 8}
        if kind in ("local_wait", "hit"):
            return {"uri": self._label(ident)}
        if kind == "schedule":
            return {"window_to_batch": ident, "objects": a}
        if kind == "batch_done":
            return {"batch": ident}
        if kind == "prune":
            return {"files_removed": a, "bytes_removed": b}
        return {}

    def _metadata(self, lanes: dict[str, list[int]]) -> list[dict[str, Any]]:
        title = f"insitubatch {self.title}" + (f" ({self.dropped} events dropped)" if self.dropped else "")
        out = [_meta("process_name", 0, name=title)]
        names: dict[int, tuple[str, int]] = {}
        if "pass" in self.kinds and self.count("pass"):
            names[_LANES["pass"]] = ("pass", -1)
        for thread, name in self.threads.items():
            names[thread] = (f"{name} #{thread}", _ROLES.get(name, 10 if name.startswith("insitu-decode") else 20))
        ranks = {"read": 30, "queued": 3, "download": 30}
        for kind, ends in lanes.items():
            names.update({_LANES[kind] + i: (f"{_LANE_NAMES[kind]} {i + 1}", ranks[kind]) for i in range(len(ends))})
        for tid, (name, rank) in names.items():
            out.append(_meta("thread_name", tid, name=name))
            out.append(_meta("thread_sort_index", tid, sort_index=rank * 10_000 + tid % 10_000))
        return out


def _us(ns: int) -> float:
    """Nanoseconds as the format's microseconds (to the nanosecond)."""
    return round(ns / 1000, 3)


def _lane(ends: list[int], start: int, end: int) -> int:
    """The first lane free at ``start`` (a new one if none is), taken until ``end``."""
    for i, last in enumerate(ends):
        if last <= start:
            ends[i] = end
            return i
    ends.append(end)
    return len(ends) - 1


def _event(ph: str, name: str, cat: str, ts: float, tid: int, *, dur: float | None = None,
           args: dict[str, Any] | None = None, s: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"ph": ph, "name": name, "cat": cat, "ts": ts, "pid": _PID, "tid": tid}
    if dur is not None:
        out["dur"] = dur
    if s is not None:
        out["s"] = s
    if args:
        out["args"] = args
    return out


def _meta(kind: str, tid: int, **args: Any) -> dict[str, Any]:
    return {"ph": "M", "name": kind, "pid": _PID, "tid": tid, "args": args}


__all__ = ["Timeline", "requested", "tracing"]
