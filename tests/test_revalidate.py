"""revalidate=: a cached chunk whose source was rewritten in place (same metadata, new
bytes) is a miss in the next dataset, never stale data -- on a store zarr-python wrote to
local files (a chunk rewritten at the same size, in the same inode) and on moto's S3 (an
object overwritten: a new ETag), checked at open by one listing or at first use by
conditional reads; "never" serves the cached bytes (the documented trade-off)."""

from __future__ import annotations

import logging
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import zarr

import insitubatch
from insitubatch import InSituDataset, NotFoundError, _ext, open_geometries, split_by_chunk
from cloud_fixtures import BUCKET

N = 32
SPC = 4


def _write_local(path: Path) -> np.ndarray:
    values = np.random.default_rng(3).standard_normal((N, 6, 5)).astype("f4")
    # Uncompressed: every chunk has the same size, so a rewrite keeps it.
    arr = zarr.create_array(zarr.storage.LocalStore(path), name="t2m", shape=values.shape, chunks=(SPC, 6, 5),
                            dtype="f4", compressors=None, fill_value=0)
    arr[...] = values
    return values


def _rewrite_chunk(path: Path, values: np.ndarray, chunk: int) -> np.ndarray:
    """zarr-python rewrites one chunk in place (same size, new values); returns the array
    as it now is."""
    chunk_file = path / "t2m" / "c" / str(chunk) / "0" / "0"
    before = chunk_file.stat()
    time.sleep(0.03)  # past a timestamp tick (a rewrite within one is not seen: docs/caching.md)
    new = values.copy()
    new[chunk * SPC:(chunk + 1) * SPC] += 1000
    zarr.open_array(zarr.storage.LocalStore(path), path="t2m", mode="r+")[chunk * SPC:(chunk + 1) * SPC] = \
        new[chunk * SPC:(chunk + 1) * SPC]
    after = chunk_file.stat()
    assert after.st_size == before.st_size
    return new


def _dataset(store, cache, **kwargs) -> InSituDataset:
    geoms = open_geometries(store, ["t2m"])
    manifest = split_by_chunk(geoms["t2m"], fractions=(1.0, 0.0, 0.0))
    return InSituDataset(store, manifest, geoms, cache_dir=cache, batch_size=8, block_chunks=2, shuffle=False,
                         **kwargs)


def _epoch(ds: InSituDataset, values: np.ndarray) -> int:
    """Samples served; every one compared with the source as it is now."""
    n = 0
    for batch in ds.train:
        np.testing.assert_array_equal(batch.arrays["t2m"], values[batch.sample_indices])
        n += len(batch.sample_indices)
    return n


def _warm(store, cache, values) -> None:
    with _dataset(store, cache, persist=True) as ds:
        assert _epoch(ds, values) == N
        assert ds.last_pass.cache_misses == N // SPC


@pytest.mark.parametrize("mode", ["open", "first_use"])
def test_a_local_chunk_rewritten_at_the_same_size_is_a_miss(tmp_path, mode, caplog):
    path, cache = tmp_path / "era.zarr", tmp_path / "cache"
    values = _write_local(path)
    _warm(insitubatch.local_store(path), cache, values)
    values = _rewrite_chunk(path, values, 3)
    store = _ext.CountingStore(insitubatch.local_store(path))
    with caplog.at_level(logging.INFO, logger="insitubatch"), _dataset(store, cache, persist=True,
                                                                       revalidate=mode) as ds:
        assert ds.revalidate == mode
        assert _epoch(ds, values) == N  # 0 stale samples
        p = ds.last_pass
        assert (p.source_changed, p.revive_rejected, p.revived) == (1, 1, N // SPC - 1)
        counters = ds._engine.cache_counters()
        assert counters["revive_source_changed"] == 1
        chunk_reads = {k: n for k, n in store.reads().items() if "/c/" in k}
        if mode == "open":  # a stat per chunk file at open, then only the changed chunk is read
            assert chunk_reads == {"t2m/c/3/0/0": 1}
            assert f"{N // SPC} cached chunks of 't2m' checked against their source" in caplog.text
            assert "1 changed" in caplog.text
        else:  # a conditional read per chunk: a stat for the unchanged ones
            assert len(chunk_reads) == N // SPC and counters["revalidated"] == N // SPC - 1
    with _dataset(insitubatch.local_store(path), cache, persist=True, revalidate=mode) as ds:
        assert _epoch(ds, values) == N
        assert (ds.last_pass.revived, ds.last_pass.source_changed) == (N // SPC, 0)


def test_never_serves_the_cached_bytes_and_a_reader_raises_on_a_change(tmp_path):
    path, cache = tmp_path / "era.zarr", tmp_path / "cache"
    values = _write_local(path)
    _warm(insitubatch.local_store(path), cache, values)
    _rewrite_chunk(path, values, 1)
    store = _ext.CountingStore(insitubatch.local_store(path))
    with _dataset(store, cache, persist=True, revalidate="never") as ds:
        assert _epoch(ds, values) == N  # the values as cached: the source's old ones
        assert ds.last_pass.revived == N // SPC and not [k for k in store.reads() if "/c/" in k]
    for mode in ("open", "first_use"):
        with _dataset(insitubatch.local_store(path), cache, readonly_cache=True, revalidate=mode) as ds:
            with pytest.raises(NotFoundError, match="chunk 1 of array 't2m' changed at its source"):
                _epoch(ds, values)


def test_a_store_without_versions_is_served_as_cached_and_says_so(tmp_path, caplog):
    """A zarr-python store object (bridged into the engine) reports no generations: its
    entries are served as they are under every mode, and a WARNING says the source's
    changes go unnoticed."""
    path, cache = tmp_path / "era.zarr", tmp_path / "cache"
    values = _write_local(path)
    zstore = zarr.storage.LocalStore(path)
    assert isinstance(insitubatch.as_native_store(zstore), _ext.PythonStore)
    _warm(zstore, cache, values)
    for mode in ("open", "first_use"):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="insitubatch"), _dataset(zstore, cache, persist=True,
                                                                           revalidate=mode) as ds:
            assert _epoch(ds, values) == N
            assert (ds.last_pass.revived, ds.last_pass.cache_misses) == (N // SPC, 0)
        assert f"cache_dir: {N // SPC} cached chunks of 't2m' are served without revalidation" in caplog.text


def test_revalidate_is_checked_by_the_engine(tmp_path):
    path = tmp_path / "era.zarr"
    _write_local(path)
    with pytest.raises(insitubatch.InvalidArgumentError,
                       match="revalidate must be \"open\", \"first_use\" or \"never\", got 'sometimes'"):
        _dataset(insitubatch.local_store(path), tmp_path / "cache", revalidate="sometimes")
    assert _ext.EngineConfig().revalidate == "open"


# -- moto S3: an overwritten object has a new ETag --------------------------------------------------


def _s3_client(moto):
    boto3 = pytest.importorskip("boto3")
    return boto3.client("s3", endpoint_url=moto.endpoint, region_name="us-east-1", aws_access_key_id="admin",
                        aws_secret_access_key="admin")


@pytest.mark.parametrize("mode", ["open", "first_use"])
def test_an_s3_object_overwritten_is_a_miss(moto, tmp_path, mode):
    local, cache = tmp_path / "era.zarr", tmp_path / "cache"
    values = _write_local(local)
    client = _s3_client(moto)
    prefix = f"revalidate/{mode}.zarr"
    for f in local.rglob("*"):
        if f.is_file():
            client.put_object(Bucket=BUCKET, Key=f"{prefix}/{f.relative_to(local).as_posix()}", Body=f.read_bytes())

    def s3():
        return insitubatch.store(f"s3://{BUCKET}/{prefix}", endpoint=moto.endpoint,
                                 access_key_id=moto.access_key_id, secret_access_key=moto.secret_access_key)

    _warm(s3(), cache, values)
    new = values.copy()
    new[2 * SPC:3 * SPC] = -new[2 * SPC:3 * SPC]
    chunk = new[2 * SPC:3 * SPC].tobytes()
    old_etag = client.head_object(Bucket=BUCKET, Key=f"{prefix}/t2m/c/2/0/0")["ETag"]
    client.put_object(Bucket=BUCKET, Key=f"{prefix}/t2m/c/2/0/0", Body=chunk)
    assert client.head_object(Bucket=BUCKET, Key=f"{prefix}/t2m/c/2/0/0")["ETag"] != old_etag
    counting = _ext.CountingStore(s3())
    with _dataset(counting, cache, persist=True, revalidate=mode) as ds:
        assert _epoch(ds, new) == N  # 0 stale samples
        p = ds.last_pass
        assert (p.source_changed, p.revived) == (1, N // SPC - 1)
        # Only the changed chunk's bytes came back: at open it alone is read; at first use
        # the others' conditional GETs were answered 304, without a body.
        assert p.bytes_read == len(chunk)
        chunk_reads = sum(n for k, n in counting.reads().items() if "/c/" in k)
        assert chunk_reads == (1 if mode == "open" else N // SPC)
    with _dataset(s3(), cache, persist=True, revalidate=mode) as ds:
        assert _epoch(ds, new) == N
        assert (ds.last_pass.revived, ds.last_pass.source_changed, ds.last_pass.bytes_read) == (N // SPC, 0, 0)


# -- nginx over plain HTTP: no listing, so revalidation happens at first use --------------------

NGINX_CONF = """\
daemon off;
master_process on;
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
{user}
events {{ worker_connections 64; }}
http {{
    log_format probe '$request_uri $status';
    access_log {tmp}/access.log probe;
    default_type application/octet-stream;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    server {{
        listen 127.0.0.1:{port};
        root {root};
    }}
}}
"""


@pytest.fixture
def nginx_http(tmp_path):
    """nginx serving tmp_path/www over plain HTTP: (url, access log path)."""
    import os
    import subprocess

    from test_http2_nginx import free_port, nginx_binary, stop, wait_listening

    binary = nginx_binary()
    conf_dir, root = tmp_path / "nginx", tmp_path / "www"
    conf_dir.mkdir()
    root.mkdir()
    user = "user root root;" if os.geteuid() == 0 else ""
    for _ in range(5):  # another process may take a free port before nginx binds it
        port = free_port()
        (conf_dir / "nginx.conf").write_text(NGINX_CONF.format(tmp=conf_dir, user=user, port=port, root=root))
        proc = subprocess.Popen([binary, "-p", str(conf_dir), "-c", str(conf_dir / "nginx.conf"), "-e",
                                 str(conf_dir / "error.log")], start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_listening(proc, (port,))
            break
        except RuntimeError:
            stop(proc)
    else:
        pytest.fail("nginx did not start")
    try:
        yield f"http://127.0.0.1:{port}", conf_dir / "access.log"
    finally:
        stop(proc)


def test_over_http_a_chunk_rewritten_is_a_miss_found_by_conditional_reads(nginx_http, tmp_path, caplog):
    """Plain HTTP cannot list, so "open" falls back to first use (said in a log line): each
    cached chunk's read carries If-None-Match with the ETag nginx gave it, nginx answers 304
    for the unchanged ones and 200 with the new bytes for the rewritten one."""
    url, access_log = nginx_http
    path, cache = tmp_path / "www" / "era.zarr", tmp_path / "cache"
    values = _write_local(path)
    with warnings.catch_warnings():  # "consolidated metadata is not in the v3 spec"
        warnings.simplefilter("ignore")
        zarr.consolidate_metadata(zarr.storage.LocalStore(path))
    _warm(insitubatch.store(f"{url}/era.zarr"), cache, values)
    time.sleep(1.1)  # nginx's ETag is the mtime in seconds and the size: a rewrite a second later
    values = _rewrite_chunk(path, values, 5)
    lines_before = len(access_log.read_text().splitlines())
    with caplog.at_level(logging.INFO, logger="insitubatch"), _dataset(insitubatch.store(f"{url}/era.zarr"), cache,
                                                                       persist=True) as ds:
        assert _epoch(ds, values) == N  # 0 stale samples
        assert (ds.last_pass.source_changed, ds.last_pass.revived) == (1, N // SPC - 1)
    assert "revalidated at first use instead" in caplog.text
    chunk_replies = [line.split() for line in access_log.read_text().splitlines()[lines_before:] if "/c/" in line]
    assert sorted(status for _, status in chunk_replies) == ["200"] + ["304"] * (N // SPC - 1)
    assert [uri for uri, status in chunk_replies if status == "200"] == ["/era.zarr/t2m/c/5/0/0"]
