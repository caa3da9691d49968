"""Outages and the words for them: a server restarted mid-epoch costs time, not the epoch;
bytes cut on the way are read again before a chunk is called corrupt; retries are counted;
and every kind of network failure says what happened and after how long."""

from __future__ import annotations

import logging
import socket
import time

import numpy as np
import pytest
from cloud_data import make_demo_store, oracle
from servers import BlackHole, FaultProxy, RangeServer

import insitubatch
from insitubatch import InSituDataset, _ext, open_geometries, split_by_chunk


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return make_demo_store(tmp_path_factory.mktemp("outages") / "demo.zarr")


def _dataset(demo, url, **kwargs):
    geoms = open_geometries(insitubatch.local_store(demo), ["t2m"])
    manifest = split_by_chunk(geoms["t2m"], fractions=(1.0, 0.0, 0.0))
    kwargs.setdefault("batch_size", 4)
    return InSituDataset(insitubatch.store(url + "/demo.zarr"), manifest, geoms, **kwargs)


def _exact(ds, demo) -> int:
    source = oracle(demo, "t2m")[...]
    n = 0
    for batch in ds.train:
        np.testing.assert_array_equal(batch.arrays["t2m"], source[batch.read_indices("t2m")])
        n += len(batch.sample_indices)
    return n


def test_retry_defaults_are_sized_like_obstores():
    t = _ext.TransportOptions()
    assert t.max_attempts == 11                  # obstore: max_retries=10
    assert (t.retry_base_delay_ms, t.retry_max_delay_ms) == (100, 15_000)
    assert t.retry_deadline_ms == 180_000        # obstore: retry_timeout=3 min
    assert t.connect_timeout_ms == 5_000         # obstore: connect_timeout=5 s
    assert t.connect_retry_deadline_ms == 20_000  # a dead endpoint fails in well under a minute


@pytest.mark.timeout(120)
@pytest.mark.parametrize("down_s", [0.5, 1.0, 3.0])
def test_a_server_restart_mid_epoch_costs_time_not_the_epoch(demo, down_s, caplog):
    with RangeServer(demo.parent) as server:
        # One chunk read at a time, and a consumer slow enough that reads are still to come
        # when the server goes down.
        ds = _dataset(demo, server.url, batch_size=2, block_chunks=1, max_inflight=1, prefetch_depth=1)
        source = oracle(demo, "t2m")[...]
        seen = 0
        with caplog.at_level(logging.INFO, logger="insitubatch"):
            for i, batch in enumerate(ds.train):
                if i == 1:
                    bounce = server.restart(down_s)
                time.sleep(0.1)
                np.testing.assert_array_equal(batch.arrays["t2m"], source[batch.read_indices("t2m")])
                seen += len(batch.sample_indices)
        bounce.join()
        assert seen == 40
        retry = ds.last_pass.retry
        assert retry.retries >= 1 and retry.backoff_s > 0
        assert "connection refused" in retry.last_error
        line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("epoch"))
        assert f"retries {retry.retries}" in line


def test_a_cut_body_with_a_consistent_length_is_read_again_not_called_corrupt(demo):
    with RangeServer(demo.parent) as server, FaultProxy(server.url) as proxy:
        ds = _dataset(demo, proxy.url)
        proxy.plan.per_path("short200")  # every chunk's first reply is half its bytes
        assert _exact(ds, demo) == 40
        assert ds.last_pass.retry.corrupt_rereads == 5  # t2m has 5 chunks
        assert proxy.plan.injected["short200"] == 5
        # A chunk that stays corrupt is reported after its second read.
        proxy.plan.always("short200")
        ds.clear_cache()
        with pytest.raises(insitubatch.CorruptChunkError, match="t2m"):
            _exact(ds, demo)


def test_under_nan_only_a_chunk_that_does_not_decode_is_filled_in(demo):
    """on_bad_chunk="nan" means a bad chunk: a server that keeps failing after its retries
    is raised, never filled with NaN; bytes that stay corrupt are filled and listed with
    their reason."""
    with RangeServer(demo.parent) as server, FaultProxy(server.url) as proxy:
        geoms = open_geometries(insitubatch.local_store(demo), ["t2m"])
        ds = InSituDataset(insitubatch.store(proxy.url + "/demo.zarr", max_retries=1, retry_base_delay="10ms"),
                           split_by_chunk(geoms["t2m"], fractions=(1.0, 0.0, 0.0)), geoms, batch_size=4,
                           on_bad_chunk="nan")
        proxy.plan.always("503")
        with pytest.raises(insitubatch.StoreError, match=r"HTTP 503 .*gave up after 2 attempts"):
            _exact(ds, demo)
        assert ds.bad_chunks == []
        proxy.plan.always("short200")  # every reply half its bytes: the chunks do not decode
        ds.clear_cache()
        n = 0
        for batch in ds.train:
            assert np.isnan(batch.arrays["t2m"]).all() and batch.filled["t2m"].all()
            n += len(batch)
        assert n == 40 and len(ds.last_pass.bad_chunks) == 5  # t2m has 5 chunks
        assert all("zstd" in b.reason or "truncated" in b.reason or "bytes" in b.reason
                   for b in ds.last_pass.bad_chunks), ds.last_pass.bad_chunks


def test_failures_say_what_happened_and_after_how_long(demo):
    quick = dict(connect_timeout="0.5s", connect_retry_timeout="1s", max_retries=2, retry_base_delay="10ms")
    with BlackHole() as hole:
        t0 = time.monotonic()
        with pytest.raises(insitubatch.StoreError, match=r"connect timed out after 0\.5\d s: nothing accepted"):
            insitubatch.store(hole.url + "/x.zarr", **quick).read("zarr.json")
        assert time.monotonic() - t0 < 5
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    closed_port = sock.getsockname()[1]
    sock.close()
    with pytest.raises(insitubatch.StoreError, match="connection refused after .* s: nothing listens"):
        insitubatch.store(f"http://127.0.0.1:{closed_port}/x", **quick).read("zarr.json")
    with pytest.raises(insitubatch.StoreError, match="DNS lookup failed after"):
        insitubatch.store("http://no-such-host.invalid/x", **quick).read("zarr.json")
    with RangeServer(demo.parent) as server, FaultProxy(server.url, hang_seconds=30) as proxy:
        proxy.plan.always("hang")
        with pytest.raises(insitubatch.StoreError,
                           match=r"read timed out after 1\.\d\d s: the reply did not complete within timeout=1\.00 s"):
            insitubatch.store(proxy.url + "/demo.zarr", timeout="1s", max_retries=0).read("zarr.json")
        proxy.plan.always("reset")
        with pytest.raises(insitubatch.StoreError, match="connection reset by the server|body ended early"):
            insitubatch.store(proxy.url + "/demo.zarr", max_retries=0).read("t2m/c/0/0/0")
        proxy.plan.always("503")
        with pytest.raises(insitubatch.StoreError, match=r"HTTP 503 .*gave up after 3 attempts in"):
            insitubatch.store(proxy.url + "/demo.zarr", max_retries=2, retry_base_delay="10ms").read("zarr.json")


def test_concurrent_reads_name_their_own_timeout(demo):
    """Reads queued behind one another each report the time their own attempt took."""
    with RangeServer(demo.parent) as server, FaultProxy(server.url, hang_seconds=30) as proxy:
        proxy.plan.always("hang")
        store = insitubatch.store(proxy.url + "/demo.zarr", timeout="1s", max_retries=0)
        import concurrent.futures as cf

        def read(key):
            try:
                store.read(key)
            except insitubatch.StoreError as exc:
                return str(exc)

        with cf.ThreadPoolExecutor(4) as pool:
            messages = list(pool.map(read, [f"t2m/c/{i}/0/0" for i in range(4)]))
        assert all("timed out after 1.0" in m for m in messages), messages
        assert all("within timeout=1.00 s" in m or "timeout=1.00 s covers the whole request" in m
                   for m in messages), messages
