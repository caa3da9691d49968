"""A pass's timeline: recorded only when asked (trace=True or insitubatch.tracing()), written
as trace-event JSON that the format's rules accept (tests/trace_format.py), with as many
reads, decodes and batches as the pass's own stats count, and a stalled store read showing
as one long read; the prefetcher's timeline too."""

from __future__ import annotations

import asyncio
import json
import time

import numpy as np
import pytest
import trace_format
import zarr
from zarr.codecs import ZstdCodec

import insitubatch as ib
from insitubatch import InSituDataset, open_geometries, split_by_chunk
from insitubatch.errors import FailedPreconditionError, InvalidArgumentError, InvalidTypeError

N, SPC = 256, 8  # 32 chunks of 8 samples of 12 x 10


@pytest.fixture(scope="module")
def store_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("timeline") / "t.zarr"
    arr = zarr.create_array(zarr.storage.LocalStore(path), name="t2m", shape=(N, 12, 10), chunks=(SPC, 12, 10),
                            dtype="float32", compressors=[ZstdCodec(level=1)], fill_value=0)
    arr[...] = np.random.default_rng(0).standard_normal((N, 12, 10)).astype("f4")
    return path


def _dataset(store, **kwargs) -> InSituDataset:
    geoms = open_geometries(store, ["t2m"])
    return InSituDataset(store, split_by_chunk(geoms["t2m"], fractions=(1.0, 0.0, 0.0)), geoms, **kwargs)


def _saved(stats, tmp_path) -> dict:
    path = tmp_path / "pass.json"
    stats.save_trace(path)
    doc = json.loads(path.read_text())
    trace_format.check(doc)
    return doc


def _spans(doc: dict, cat: str, prefix: str) -> list[dict]:
    return [e for e in doc["traceEvents"] if e["ph"] == "X" and e.get("cat") == cat and e["name"].startswith(prefix)]


def test_a_recorded_pass_is_valid_trace_event_json_that_counts_what_its_stats_count(store_path, tmp_path):
    with _dataset(ib.local_store(store_path), batch_size=20, block_chunks=4, trace=True) as ds:
        for _ in ds.train:
            time.sleep(0.001)  # a training step: the consumer's own time between its waits
        stats = ds.last_pass
    assert stats is not None and stats.finished
    doc = _saved(stats, tmp_path)
    reads = _spans(doc, "io", "read ")
    assert len(reads) == stats.cache_misses == N // SPC  # one whole-field stored chunk per read
    assert sum(e["args"]["bytes"] for e in reads) == stats.bytes_read
    assert sorted(e["args"]["chunk"] for e in reads) == list(range(N // SPC))
    assert len(_spans(doc, "decode", "decode")) == stats.cache_misses
    gathers = _spans(doc, "gather", "gather ")
    assert len(gathers) == stats.batches == -(-N // 20)
    assert sum(e["args"]["rows"] for e in gathers) == stats.samples == N
    assert len(_spans(doc, "batch", "batch ")) == stats.batches  # each hand-off, queued to taken
    assert len(_spans(doc, "residency", "admitted")) == stats.cache_misses
    assert len(_spans(doc, "pass", "train epoch 0")) == 1
    assert len(_spans(doc, "wait", "wait for batch")) <= stats.batches
    counters = {e["name"] for e in doc["traceEvents"] if e["ph"] == "C"}
    assert counters == {"reads in flight", "resident pool", "batch queue"}
    threads = {e["args"]["name"].split(" #")[0] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert {"consumer", "producer", "scheduler", "pass", "reads 1", "batches queued 1"} <= threads
    other = doc["otherData"]
    assert other["events_dropped"] == 0 and other["events_kept"] == other["events_recorded"] > 0
    assert stats.trace is not None and stats.trace.count("read") == len(reads)


def test_nothing_is_recorded_unless_asked_and_tracing_records_what_starts_inside(store_path, tmp_path):
    with _dataset(ib.local_store(store_path), batch_size=32) as ds:
        for _ in ds.train:
            pass
        assert ds.last_pass is not None and ds.last_pass.trace is None
        with pytest.raises(FailedPreconditionError, match="not recorded: pass trace=True"):
            ds.last_pass.save_trace(tmp_path / "x.json")
        assert not (tmp_path / "x.json").exists()
        with ib.tracing():
            it = iter(ds.train)
        for _ in it:  # started inside the block: recorded, though taken after it
            pass
        assert ds.last_pass.trace is not None
        doc = _saved(ds.last_pass, tmp_path)
        assert len(_spans(doc, "gather", "gather ")) == ds.last_pass.batches
        for _ in ds.train:  # started after it: not recorded
            pass
        assert ds.last_pass.trace is None
        assert "trace" not in ds.last_pass.as_dict()


@pytest.mark.parametrize("value, error, match", [
    ("yes", InvalidTypeError, "trace must be True, False or a number of events, got 'yes'"),
    (5, InvalidArgumentError, r"trace must be True, False or a number of events in \[1024, 67108864\], got 5"),
    (-1, InvalidArgumentError, "trace must be True, False or a number of events, got -1"),
])
def test_a_bad_trace_argument_is_refused_naming_it(store_path, value, error, match):
    with pytest.raises(error, match=match):
        _dataset(ib.local_store(store_path), trace=value)
    with pytest.raises(error, match=match):
        with ib.tracing(value):
            pass


def test_a_ring_too_small_for_the_pass_keeps_the_latest_and_says_how_many_it_dropped(tmp_path):
    path = tmp_path / "many.zarr"  # 512 chunks of one sample: a few thousand events
    zarr.create_array(zarr.storage.LocalStore(path), name="t2m", shape=(512, 2, 2), chunks=(1, 2, 2),
                      dtype="float32", fill_value=0)[...] = np.ones((512, 2, 2), dtype="f4")
    with _dataset(ib.local_store(path), batch_size=8, block_chunks=16, trace=1024) as ds:
        for _ in ds.train:
            pass
        doc = _saved(ds.last_pass, tmp_path)
    other = doc["otherData"]
    assert other["ring_capacity"] == 1024 and other["events_kept"] <= 1024
    assert other["events_dropped"] > 0 and other["events_dropped"] + other["events_kept"] == other["events_recorded"]
    process = next(e for e in doc["traceEvents"] if e["name"] == "process_name")["args"]["name"]
    assert f"({other['events_dropped']} events dropped)" in process


class _StalledKeyStore:
    """A zarr-python store that answers every read but one key's at once: that one waits."""

    def __init__(self, inner, key: str, stall_s: float) -> None:
        self.inner, self.key, self.stall_s = inner, key, stall_s

    async def get(self, key, prototype, byte_range=None):
        if key == self.key:
            await asyncio.sleep(self.stall_s)
        return await self.inner.get(key, prototype, byte_range)

    def list_prefix(self, prefix):
        return self.inner.list_prefix(prefix)


def test_a_stalled_store_read_is_one_long_read_span(store_path, tmp_path):
    stalled = 13
    store = _StalledKeyStore(zarr.storage.LocalStore(store_path), f"t2m/c/{stalled}/0/0", 0.6)
    with _dataset(store, batch_size=16, block_chunks=4, shuffle=False, trace=True) as ds:
        for _ in ds.train:
            pass
        doc = _saved(ds.last_pass, tmp_path)
    reads = {e["args"]["chunk"]: e for e in _spans(doc, "io", "read ")}
    assert len(reads) == N // SPC
    long = [c for c, e in reads.items() if e["dur"] >= 600_000 * 0.95]  # microseconds
    assert long == [stalled], {c: e["dur"] for c, e in reads.items()}
    slow = reads[stalled]
    inner = [e for e in _spans(doc, "io", "at store") if e["tid"] == slow["tid"]
             and slow["ts"] <= e["ts"] <= slow["ts"] + slow["dur"]]
    assert inner and max(e["dur"] for e in inner) >= 600_000 * 0.95  # the time is at the store, not queued
    waits = _spans(doc, "wait", "wait for batch")
    assert max(e["dur"] for e in waits) >= 300_000  # the consumer waited on it


def test_a_recorded_prefetch_coordinator_writes_its_downloads_and_waits(images, tmp_path):
    import planfetch as pf
    from planfetch_data import N_IMAGES, image_bytes

    index, _ = images
    uris, _ = pf.load_index_csv(index, s3_uri_col="s3_path", class_col="class_id", pack_uris=True)
    cache = pf.SharedDiskCache(tmp_path / "cache", min_age_seconds_before_delete=0)
    plan = pf.ShuffleOncePerEpochPlanProvider(N_IMAGES, 8, seed=4).make_epoch_plan(0)
    unrecorded = pf.PrefetchCoordinator(cache, uris)
    unrecorded.set_plan(plan)
    with pytest.raises(FailedPreconditionError, match="not recorded"):
        unrecorded.save_trace(tmp_path / "x.json")
    coordinator = pf.PrefetchCoordinator(cache, uris, batches_ahead=3, batches_back=1, prune_every=2, trace=True)
    coordinator.set_plan(plan)
    coordinator.prime()
    for i, batch in enumerate(plan):
        for s in batch:
            cache.ensure_local(uris[int(s)])
        coordinator.on_batch_yielded(i)
    while cache.stats()["in_flight"] or cache.stats()["queued"]:
        time.sleep(0.005)
    path = tmp_path / "prefetch.json"
    coordinator.save_trace(path)
    doc = json.loads(path.read_text())
    trace_format.check(doc)
    downloads = _spans(doc, "io", "download ")
    assert len(downloads) == cache.stats()["downloads"] == N_IMAGES
    assert sum(e["args"]["bytes"] for e in downloads) == sum(len(image_bytes(i)[0]) for i in range(N_IMAGES))
    assert {e["args"]["uri"] for e in downloads} == {uris[i] for i in range(N_IMAGES)}
    marks = [e for e in doc["traceEvents"] if e["ph"] == "i" and e["name"] == "batch done"]
    assert len(marks) == len(plan)
    assert len(_spans(doc, "window", "prune")) == coordinator.stats()["prunes"] > 0
