"""The limiting stage, each verdict from a real pass: every stage is the share of wall time it
kept the consumer waiting (or, for the consumer, its own loop body), so a decode-bound pass on
a local store is named decode at any max_inflight, a slow server the store, a slow batch
transform gather, a slow training step the consumer, and reads held back by the residency
floor residency. Magnitudes (50 ms sleeps and delays) keep each verdict clear on a loaded
machine."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time

import numcodecs
import numpy as np
import pytest
import zarr
from servers import FaultProxy, RangeServer
from zarr.codecs import ZstdCodec

import insitubatch
from insitubatch import InSituDataset, obstore_store, open_geometries, split_by_chunk
from insitubatch.runtime import Depths, PassStats, StageTimes, Waited

DELAY = 0.05  # seconds: every HTTP response, every batch transform, every training step


def _dataset(store, fractions=(1.0, 0.0, 0.0), **kwargs) -> InSituDataset:
    geoms = open_geometries(store, ["t2m"])
    return InSituDataset(store, split_by_chunk(geoms["t2m"], fractions=fractions), geoms, **kwargs)


def _epoch(ds: InSituDataset, step_s: float = 0.0) -> PassStats:
    for _ in ds.train:
        if step_s:
            time.sleep(step_s)
    assert ds.last_pass is not None and ds.last_pass.finished
    return ds.last_pass


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory):
    """The README demo's store (examples/quickstart_local.py) with fewer samples: float32
    361 x 720 fields, 16 samples per chunk, zstd 1, written by zarr-python."""
    path = tmp_path_factory.mktemp("demo") / "era5_c16.zarr"
    # 512 samples: an epoch long enough (~1 s) that one stall cannot tie the verdict (at 256,
    # gather was charged 0.26 s of a 0.52 s epoch in 1 full-suite run of 4, against ~0.08 s
    # in isolation).
    n, shape = 512, (361, 720)
    rng = np.random.default_rng(0)
    y, x = np.meshgrid(np.linspace(0, np.pi, shape[0]), np.linspace(0, 2 * np.pi, shape[1]), indexing="ij")
    base = (250 + 40 * np.sin(y) * np.cos(x)).astype("f4")
    arr = zarr.create_array(zarr.storage.LocalStore(path), name="t2m", shape=(n, *shape), chunks=(16, *shape),
                            dtype="float32", compressors=[ZstdCodec(level=1)], fill_value=0.0)
    for start in range(0, n, 16):
        arr[start:start + 16] = np.round(base + rng.normal(0, 2, size=(16, *shape)).astype("f4"), 1)
    return path


@pytest.fixture(scope="module")
def small_store(tmp_path_factory):
    """160 samples of 6 x 5, 8 per chunk: nothing in it is slow to read or decode."""
    path = tmp_path_factory.mktemp("small") / "s.zarr"
    arr = zarr.create_array(zarr.storage.LocalStore(path), name="t2m", shape=(160, 6, 5), chunks=(8, 6, 5),
                            dtype="float32", compressors=[ZstdCodec(level=1)], fill_value=0)
    arr[...] = np.random.default_rng(1).standard_normal((160, 6, 5)).astype("f4")
    zarr.consolidate_metadata(zarr.storage.LocalStore(path))  # plain HTTP cannot list
    return path


@pytest.fixture(scope="module")
def slow_server(small_store):
    """small_store over HTTP, every response delayed by DELAY."""
    with RangeServer(small_store.parent) as server, FaultProxy(server.url) as proxy:
        proxy.plan.latency = DELAY
        yield f"{proxy.url}/{small_store.name}"


# The README demo's epochs run in a child process without the suite's poisoned buffers: the
# poison fills every fresh slot and batch buffer on the thread that takes it, moving page
# faults and a memset from decode into gather, so a pass that is decode-bound for users came
# within 1.25x of gather (verdict "unknown") in a third of the suite's runs.
_DEMO_EPOCHS = """
import json, sys
from insitubatch import InSituDataset, obstore_store, open_geometries, split_by_chunk
store = obstore_store("file://" + sys.argv[1])
out = {}
for max_inflight in (32, 4):  # 32: the default, whose summed fetch wait used to name the store
    geoms = open_geometries(store, ["t2m"])
    ds = InSituDataset(store, split_by_chunk(geoms["t2m"], fractions=(0.8, 0.1, 0.1)), geoms, batch_size=32,
                       block_chunks=16, max_inflight=max_inflight, decode_threads=1)
    for _ in ds.train:
        pass
    s = ds.last_pass
    ds.close()
    out[max_inflight] = {"stage": s.limiting_stage, "kind": s.store_kind, "decode_s": s.waited.decode_s,
                         "decode_share": s.shares["decode"], "wall_s": s.wall_s, "line": s.log_line()}
print(json.dumps(out))
"""


def test_the_readme_demo_is_decode_bound_at_any_max_inflight(demo_store):
    # One decode thread: with two on this 2-core machine, decode and gather share the wait
    # almost evenly on this small store (both shares are printed), and the verdict is a
    # near tie either way; what matters here is that the store is never blamed.
    env = {k: v for k, v in os.environ.items() if k != "INSITU_POISON_BUFFERS"}
    child = subprocess.run([sys.executable, "-c", _DEMO_EPOCHS, str(demo_store)], env=env, capture_output=True,
                           text=True, timeout=300)
    assert child.returncode == 0, child.stderr
    verdicts = json.loads(child.stdout.strip().splitlines()[-1])
    for max_inflight, v in verdicts.items():
        assert v["kind"] == "file"
        assert v["decode_s"] > 0 and v["decode_share"] == pytest.approx(v["decode_s"] / v["wall_s"])
        assert v["stage"] == "decode", (max_inflight, v["line"])
    assert verdicts["32"]["stage"] == verdicts["4"]["stage"]


def test_an_expensive_codec_is_decode(tmp_path):
    path = tmp_path / "lzma.zarr"
    values = np.round(np.random.default_rng(2).normal(280, 5, (96, 128, 128)), 2).astype("f4")
    arr = zarr.create_array(str(path), name="t2m", shape=values.shape, chunks=(8, 128, 128), dtype="f4",
                            compressors=numcodecs.LZMA(preset=1), zarr_format=2, fill_value=0)
    arr[...] = values
    ds = _dataset(insitubatch.local_store(path), batch_size=8, block_chunks=4)
    stats = _epoch(ds)
    assert stats.limiting_stage == "decode", stats.log_line()
    assert "decode_threads" in stats.advice


def test_a_slow_server_is_the_store(slow_server):
    ds = _dataset(insitubatch.store(slow_server), batch_size=8, block_chunks=4, max_inflight=2)
    stats = _epoch(ds)
    assert stats.store_kind == "http"
    assert stats.limiting_stage == "store", stats.log_line()
    assert stats.depths.inflight_peak == 2
    assert "raise max_inflight" in stats.advice and "region" in stats.advice


def test_a_slow_batch_transform_is_gather(small_store):
    def slow(batch):  # vectorized, but slow: as a heavy augmentation is
        time.sleep(DELAY)
        batch.arrays["t2m"] = np.sqrt(np.abs(batch.arrays["t2m"]))
        return batch

    ds = _dataset(insitubatch.local_store(small_store), batch_size=8, batch_transforms=[slow])
    stats = _epoch(ds)
    assert stats.limiting_stage == "gather", stats.log_line()
    assert stats.waited.gather_s >= 0.5 * 20 * DELAY  # 20 batches, most of each transform waited on


def test_a_transform_a_slower_store_overlaps_is_not_gather(slow_server):
    """Each batch's chunk takes DELAY to arrive, one read at a time; its transform, shorter,
    runs while the next chunk is on its way: the store is the limit."""
    def transform(batch):
        time.sleep(0.6 * DELAY)
        return batch

    ds = _dataset(insitubatch.store(slow_server), batch_size=8, block_chunks=1, max_inflight=1,
                  batch_transforms=[transform])
    stats = _epoch(ds)
    assert stats.limiting_stage == "store", stats.log_line()


def test_a_slow_training_step_is_the_consumer(small_store):
    ds = _dataset(insitubatch.local_store(small_store), batch_size=8)
    stats = _epoch(ds, step_s=DELAY)
    assert stats.limiting_stage == "consumer", stats.log_line()
    assert stats.shares["consumer"] > 0.8


def test_reads_held_back_by_the_floor_are_residency(slow_server, caplog):
    """Two views at once, each pinning at most its floor of two one-chunk blocks: two reads of
    a slow server in flight per view while 32 tokens are free. (Ten chunks each: the first
    read of a pass is the store's whatever the budget.)"""
    probe = _dataset(insitubatch.store(slow_server), fractions=(0.5, 0.5, 0.0), batch_size=4, block_chunks=1)
    floor = probe.working_set_bytes
    probe.close()
    ds = _dataset(insitubatch.store(slow_server), fractions=(0.5, 0.5, 0.0), batch_size=4, block_chunks=1,
                  cache_budget_bytes=2 * floor)
    with caplog.at_level(logging.INFO, logger="insitubatch"):
        threads = [threading.Thread(target=lambda v=view: [None for _ in v]) for view in (ds.train, ds.val)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("epoch ")]
    assert len(lines) == 2, lines
    for line in lines:
        assert "limited by: residency -- " in line and "raise block_chunks" in line, line


def _stats(waited: Waited, consumer_s: float = 0.0, store_kind: str = "", peak: int = 32) -> PassStats:
    return PassStats(split="train", epoch=0, batches=10, samples=80, cache_hits=0, cache_misses=10, rereads=0,
                     evictions=0, bad_chunks=0, bytes_read=1, finished=True, wall_s=1.0,
                     times=StageTimes(consumer_s=consumer_s), waited=waited, store_kind=store_kind,
                     depths=Depths(batch_queue_samples=11, inflight_peak=peak, max_inflight=32))


def test_two_close_stages_are_unknown():
    assert _stats(Waited(store_s=0.40, decode_s=0.35)).limiting_stage == "unknown"
    assert _stats(Waited(decode_s=0.5), consumer_s=0.45).limiting_stage == "unknown"
    assert _stats(Waited(store_s=0.2, decode_s=0.1, gather_s=0.1), consumer_s=0.1).limiting_stage == "unknown"
    clear = _stats(Waited(store_s=0.60, decode_s=0.30))
    assert clear.limiting_stage == "store"
    assert clear.as_dict()["shares"] == {"consumer": 0.0, "store": 0.6, "decode": 0.3, "residency": 0.0, "gather": 0.0}
    assert "consumer 0%, store 60%, decode 30%, residency 0%, gather 0%; limited by: store -- " in clear.log_line()


def test_the_store_advice_fits_the_backend():
    waited = Waited(store_s=0.9)
    local = _stats(waited, store_kind="file").advice
    assert "region" not in local and "file system" in local
    assert "region" in _stats(waited, store_kind="s3").advice
    assert "raise max_inflight" in _stats(waited, store_kind="s3").advice
    spare = _stats(waited, store_kind="gcs", peak=5).advice  # every read slow, tokens unused
    assert "to spare" in spare and "raise max_inflight" not in spare
    assert "insitubatch.store()" in _stats(waited, store_kind="python").advice
