"""Per-pass runtime statistics: PassStats, the limiting-stage rule, the per-epoch log line
."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from . import _ext
from .errors import FailedPreconditionError
from .records import StoredChunkRead
from .summary import format_bytes
from .timeline import Timeline

ADVICE = {
    "consumer": "the loader kept up; the training step is the constraint (nothing to tune)",
    "store": "waited on the store; raise max_inflight, and check the region and backend",
    "decode": "codec and chunk transforms dominated; raise decode_threads, keep chunk transforms "
    "vectorized and GIL-releasing",
    "residency": "admission waited on the residency budget while the store had room for more reads: each "
    "iteration pins at most its working-set floor of blocks, so raise block_chunks (the automatic budget "
    "grows with it; an explicit cache_budget_bytes must too)",
    "gather": "batch assembly dominated; raise gather_threads, check the gather run length (describe()) "
    "and batch transforms",
    "unknown": "no single stage dominated (or too few samples to say)",
}

# The store advice by backend (PassStats.store_kind): a local file store has no region, and a
# read waiting on a remote store is worth more concurrency only if every token was taken.
_STORE_ADVICE = {
    "file": "waited on the file system: chunks not in the page cache come at the disk's speed; on a network"
    " file system, raise max_inflight",
    "memory": "waited on the memory store (its reads are copies of whole chunks)",
    "python": "waited on a zarr-python store read through the bridge; open the URL with insitubatch.store()"
    " to read it natively, or raise max_inflight",
}
_REMOTE_STORES = frozenset({"http", "s3", "gcs", "azure", "references"})

# The stages a verdict chooses among, and the rule: the stage with the largest share of the
# pass's wall time wins if it holds at least DOMINANT of it and CLOSE times the runner-up;
# otherwise "unknown" (two stages close together, or none that matters).
STAGES = ("consumer", "store", "decode", "residency", "gather")
DOMINANT = 0.3
CLOSE = 1.25


@dataclass(frozen=True)
class StageTimes:
    fetch_wait_s: float = 0.0
    admission_parked_s: float = 0.0
    decode_s: float = 0.0
    assemble_s: float = 0.0
    gather_s: float = 0.0
    batch_transform_s: float = 0.0
    consumer_s: float = 0.0  # wall time in the caller's loop body: not a stage to tune

    @property
    def producer_s(self) -> float:
        return (self.fetch_wait_s + self.admission_parked_s + self.decode_s + self.assemble_s
                + self.gather_s + self.batch_transform_s)


@dataclass(frozen=True)
class Waited:
    """What the consumer's waits for batches were spent on, in wall seconds that add up to the
    time it was blocked on the loader. While the consumer waits, the engine's producer is
    gathering or blocked on one dependency of the next batch, and the wait is charged to it:
    ``store`` / ``decode``: a chunk not yet ready, split by who held the ``max_inflight``
    read tokens meanwhile (reads at the store, or bytes in hand waiting for decode and chunk
    transforms); ``residency``: admission parked on the residency budget (or store time with
    tokens to spare while it was); ``gather``: batch assembly on the critical path (gathers
    that end in a wait on a chunk were overlapped by it and are charged as that wait is) and
    batch transforms."""

    store_s: float = 0.0
    decode_s: float = 0.0
    residency_s: float = 0.0
    gather_s: float = 0.0

    @property
    def total_s(self) -> float:
        return self.store_s + self.decode_s + self.residency_s + self.gather_s


@dataclass(frozen=True)
class Depths:
    batch_queue_capacity: int = 0
    batch_queue_peak: int = 0
    batch_queue_samples: int = 0
    batch_queue_empty: int = 0
    batch_queue_full_enough: int = 0
    inflight_peak: int = 0
    max_inflight: int = 0
    decode_queue_peak: int = 0
    decode_threads: int = 0
    chunk_decoders_peak: int = 0  # the most decode threads busy on one stored chunk (a shard) at once
    gather_threads: int = 0
    resident_peak: int = 0
    resident_peak_bytes: int = 0
    budget_bytes: int | None = None

    @property
    def starved_frac(self) -> float:
        return self.batch_queue_empty / self.batch_queue_samples if self.batch_queue_samples else 0.0

    @property
    def fed_frac(self) -> float:
        return self.batch_queue_full_enough / self.batch_queue_samples if self.batch_queue_samples else 0.0


@dataclass(frozen=True)
class RetryStats:
    """Transient store failures retried on the way to a pass's bytes."""

    retries: int = 0
    backoff_s: float = 0.0   # wall time waiting between attempts
    last_error: str = ""     # the last failure that was retried
    corrupt_rereads: int = 0  # chunks read again because their bytes did not decode


@dataclass(frozen=True)
class PassStats:
    """What one pass did. Set even for abandoned passes (closed early)."""

    split: str
    epoch: int
    batches: int
    samples: int
    cache_hits: int
    cache_misses: int
    rereads: int
    evictions: int
    # The stored chunks on_bad_chunk="nan" served as fill in this pass, each with its reason.
    bad_chunks: tuple[StoredChunkRead, ...]
    bytes_read: int
    finished: bool
    wall_s: float
    times: StageTimes = field(default_factory=StageTimes)
    depths: Depths = field(default_factory=Depths)
    retry: RetryStats = field(default_factory=RetryStats)
    revived: int = 0  # hits served from a persisted cache_dir (no fetch, no decode)
    # Persisted entries found but not served (their bytes failed the checksum, or their
    # source changed since they were written): read again.
    revive_rejected: int = 0
    # Of those, the entries whose source changed (revalidate=): read again.
    source_changed: int = 0
    waited: Waited = field(default_factory=Waited)
    # The backend the chunks came from (file, memory, http, s3, gcs, azure, references,
    # python; "" if unknown): the store advice depends on it.
    store_kind: str = ""
    # What the pass recorded, when it was recorded (trace=True, or insitubatch.tracing()).
    trace: Timeline | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_native(cls, native: Any, *, consumer_s: float, store_kind: str,
                    trace: Timeline | None = None) -> "PassStats":
        """The engine's stats (``_ext.PassStats``) with what only Python knows: the time spent
        in the consumer's loop body and the store's backend; ``trace``: its timeline."""
        return cls(
            **_copied(cls, native, ("bad_chunks", "times", "depths", "retry", "waited", "store_kind", "trace")),
            bad_chunks=tuple(StoredChunkRead(b.array, b.chunk_index, tuple(b.inner_coord), b.reason)
                             for b in native.bad_chunks), times=_copied_as(StageTimes, native.times, consumer_s=consumer_s),
            depths=_copied_as(Depths, native.depths), retry=_copied_as(RetryStats, native.retry),
            waited=_copied_as(Waited, native.waited), store_kind=store_kind, trace=trace,
        )

    def save_trace(self, path: str | os.PathLike[str]) -> None:
        """Writes the pass's timeline to ``path`` in the trace-event JSON format (open it in
        ui.perfetto.dev or chrome://tracing; docs/tuning.md says how to read it). The pass
        must have been recorded: ``InSituDataset(..., trace=True)``, or started inside
        ``insitubatch.tracing()``."""
        if self.trace is None:
            raise FailedPreconditionError(
                "this pass was not recorded: pass trace=True to the dataset, or start the pass inside"
                " `with insitubatch.tracing():`")
        self.trace.save(path)

    @property
    def reads(self) -> int:
        return self.cache_hits + self.cache_misses

    @property
    def hit_rate(self) -> float:
        return self.cache_hits / self.reads if self.reads else 0.0

    @property
    def shares(self) -> dict[str, float]:
        """Each stage's share of the pass's wall time, all in one currency: for the loader's
        stages the time the consumer waited on them (:class:`Waited`), for ``consumer`` its
        own loop body (``times.consumer_s``). Summed stage times (fetch wait over concurrent
        reads, decode CPU over threads) are not comparable with wall time and play no part."""
        wall = self.wall_s
        if wall <= 0:
            return {stage: 0.0 for stage in STAGES}
        w = self.waited
        seconds = {"consumer": self.times.consumer_s, "store": w.store_s, "decode": w.decode_s,
                   "residency": w.residency_s, "gather": w.gather_s}
        return {stage: min(1.0, seconds[stage] / wall) for stage in STAGES}

    @property
    def limiting_stage(self) -> str:
        """The stage with the largest :attr:`shares` entry, if it holds at least ``DOMINANT``
        of the wall time and ``CLOSE`` times the runner-up; ``"unknown"`` rather than a guess
        (two stages close, none that matters, or a pass nobody took a batch from)."""
        if self.depths.batch_queue_samples == 0:
            return "unknown"
        ranked = sorted(self.shares.items(), key=lambda kv: kv[1], reverse=True)
        (stage, top), (_, second) = ranked[0], ranked[1]
        if top < DOMINANT or top < CLOSE * second:
            return "unknown"
        return stage

    @property
    def advice(self) -> str:
        stage = self.limiting_stage
        if stage != "store":
            return ADVICE[stage]
        kind, d = self.store_kind, self.depths
        if kind in _STORE_ADVICE:
            return _STORE_ADVICE[kind]
        if kind in _REMOTE_STORES and d.inflight_peak < d.max_inflight:
            return (f"waited on the store with read tokens to spare (in flight peak {d.inflight_peak} of"
                    f" max_inflight={d.max_inflight}): each read is slow; check the region and backend"
                    " (latency, throttling), or store larger chunks")
        return ADVICE["store"]

    def as_dict(self) -> dict[str, Any]:
        out = asdict(replace(self, trace=None))
        del out["trace"]
        out["shares"] = self.shares
        out["limiting_stage"] = self.limiting_stage
        out["advice"] = self.advice
        return out

    def log_line(self) -> str:
        """The per-epoch INFO line; it always ends with ``limited by: <stage> -- <advice>``."""
        d, t = self.depths, self.times
        parts = [
            f"epoch {self.epoch} ({self.split}): {self.batches} batches, {self.samples} samples"
            f" in {self.wall_s:.2f} s",
            f"chunk hits {self.cache_hits}/{self.reads} ({100 * self.hit_rate:.1f}%)",
            f"peak resident {d.resident_peak} chunks ({format_bytes(d.resident_peak_bytes)})",
        ]
        if self.revived:
            parts.append(f"revived {self.revived} from cache_dir")
        if self.revive_rejected:
            changed = f", {self.source_changed} because their source changed" if self.source_changed else ""
            parts.append(f"{self.revive_rejected} cache_dir entries failed their check (read again{changed})")
        if self.rereads or self.evictions:
            parts.append(f"re-reads {self.rereads}, evictions {self.evictions}")
        if self.bad_chunks:
            parts.append(f"bad chunks {len(self.bad_chunks)} (first: {self.bad_chunks[0].reason[:200]})")
        r = self.retry
        if r.retries or r.corrupt_rereads:
            text = f"retries {r.retries} ({r.backoff_s:.2f} s backing off)"
            if r.corrupt_rereads:
                text += f", chunks re-read after a failed decode {r.corrupt_rereads}"
            if r.last_error:
                text += f", last: {r.last_error[:200]}"
            parts.append(text)
        if not self.finished:
            parts.append("abandoned early")
        budget = "unbounded" if d.budget_bytes is None else format_bytes(d.budget_bytes)
        parts.append(
            f"queue peak {d.batch_queue_peak}/{d.batch_queue_capacity} (empty {100 * d.starved_frac:.0f}%"
            f" of gets), in flight peak {d.inflight_peak}/{d.max_inflight}, decode queue peak"
            f" {d.decode_queue_peak} on {d.decode_threads} threads, gather on {d.gather_threads},"
            f" budget {budget}"
        )
        parts.append(
            f"summed over threads: fetch wait {t.fetch_wait_s:.2f} s, parked {t.admission_parked_s:.2f} s;"
            f" cpu: decode {t.decode_s:.2f} s, gather {t.gather_s:.2f} s, batch transforms"
            f" {t.batch_transform_s:.2f} s"
        )
        shares = ", ".join(f"{stage} {100 * share:.0f}%" for stage, share in self.shares.items())
        parts.append(f"share of wall (waited {self.waited.total_s:.2f} s on the loader): {shares}")
        parts.append(f"limited by: {self.limiting_stage} -- {self.advice}")
        return "; ".join(parts)


_STORE_KINDS = ((_ext.FileStore, "file"), (_ext.MemoryStore, "memory"), (_ext.HttpStore, "http"),
                (_ext.S3Store, "s3"), (_ext.GcsStore, "gcs"), (_ext.AzureStore, "azure"),
                (_ext.ReferenceStore, "references"), (_ext.PythonStore, "python"))


def _copied(cls: Any, native: Any, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """The fields of dataclass ``cls`` read from the bound engine object of the same name
    (engine/stats.h): a field the engine lacks is an AttributeError, not a silent default."""
    return {f.name: getattr(native, f.name) for f in fields(cls) if f.name not in skip}


def _copied_as(cls: Any, native: Any, **own: Any) -> Any:
    return cls(**_copied(cls, native, tuple(own)), **own)


def store_kind(native: Any) -> str:
    """The backend of a native store, as :attr:`PassStats.store_kind` names it ("" if unknown)."""
    return next((kind for cls, kind in _STORE_KINDS if isinstance(native, cls)), "")


def bottleneck(stats: PassStats) -> tuple[str, str]:
    """``(stage, advice)`` for a pass: the stage :attr:`PassStats.limiting_stage` names and
    what to change about it."""
    return stats.limiting_stage, stats.advice


__all__ = ["Depths", "PassStats", "RetryStats", "StageTimes", "Waited", "bottleneck"]
