"""Per-pass runtime statistics: PassStats, the limiting-stage rule, the per-epoch log line
."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

from .summary import format_bytes

ADVICE = {
    "consumer": "the loader kept up; the training step is the constraint (nothing to tune)",
    "store": "waited on the store; raise max_inflight, and check the region and backend",
    "decode": "codec and chunk transforms dominated; raise decode_threads, keep chunk transforms "
    "vectorized and GIL-releasing",
    "residency": "admission waited on the residency budget; raise cache_budget_bytes, or lower "
    "batch_size / block_chunks / concurrent iterations",
    "gather": "batch assembly dominated; raise gather_threads, check the gather run length (describe()) "
    "and batch transforms",
    "unknown": "no single stage dominated (or too few samples to say)",
}


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
    bad_chunks: int
    bytes_read: int
    finished: bool
    wall_s: float
    times: StageTimes = field(default_factory=StageTimes)
    depths: Depths = field(default_factory=Depths)
    retry: RetryStats = field(default_factory=RetryStats)
    revived: int = 0  # hits served from a persisted cache_dir (no fetch, no decode)

    @classmethod
    def from_native(cls, d: Mapping[str, Any]) -> "PassStats":
        return cls(
            split=d["split"], epoch=int(d["epoch"]), batches=int(d["batches"]),
            samples=int(d["samples"]), cache_hits=int(d["cache_hits"]),
            cache_misses=int(d["cache_misses"]), rereads=int(d["rereads"]),
            evictions=int(d["evictions"]), bad_chunks=len(d["bad_chunks"]),
            bytes_read=int(d["bytes_read"]), finished=bool(d["finished"]), wall_s=float(d["wall_s"]),
            times=StageTimes(**d["times"]), depths=Depths(**d["depths"]),
            retry=RetryStats(**d.get("retry", {})), revived=int(d.get("revived", 0)),
        )

    @property
    def reads(self) -> int:
        return self.cache_hits + self.cache_misses

    @property
    def hit_rate(self) -> float:
        return self.cache_hits / self.reads if self.reads else 0.0

    @property
    def limiting_stage(self) -> str:
        """One stage named by the rule below, or ``"unknown"`` rather than a guess.

        Candidates are summed per stage (decode = decode + assemble; gather = gather +
        batch transforms) before ranking.
        """
        d, t = self.depths, self.times
        if d.batch_queue_samples == 0:
            return "unknown"
        if d.fed_frac >= 0.5:
            return "consumer"
        if d.starved_frac < 0.2:
            return "unknown"
        total = t.producer_s
        if total <= 0:
            return "unknown"
        candidates = {
            "residency": t.admission_parked_s,
            "store": t.fetch_wait_s,
            "decode": t.decode_s + t.assemble_s,
            "gather": t.gather_s + t.batch_transform_s,
        }
        stage, value = max(candidates.items(), key=lambda kv: kv[1])
        return stage if value / total >= 0.4 else "unknown"

    @property
    def advice(self) -> str:
        return ADVICE[self.limiting_stage]

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
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
        if self.rereads or self.evictions:
            parts.append(f"re-reads {self.rereads}, evictions {self.evictions}")
        if self.bad_chunks:
            parts.append(f"bad chunks {self.bad_chunks}")
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
            f"waits: fetch {t.fetch_wait_s:.2f} s, parked {t.admission_parked_s:.2f} s; cpu: decode"
            f" {t.decode_s:.2f} s, gather {t.gather_s:.2f} s, batch transforms {t.batch_transform_s:.2f} s"
        )
        parts.append(f"limited by: {self.limiting_stage} -- {self.advice}")
        return "; ".join(parts)


def bottleneck(stats: PassStats) -> tuple[str, str]:
    """``(stage, advice)`` for a pass: the stage :attr:`PassStats.limiting_stage` names and
    what to change about it."""
    return stats.limiting_stage, stats.advice


__all__ = ["Depths", "PassStats", "RetryStats", "StageTimes", "bottleneck"]
