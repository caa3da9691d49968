"""One conformance suite over every store: file, memory, HTTP (loopback Range server), S3
(moto), GCS and Azure (loopback mimics). Each serves the same store written by zarr-python 3 and
must return the same bytes, the same missing keys and the same errors. The quickstart's
code runs unchanged against each URL (configuration comes from the environment)."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

import insitubatch
from insitubatch import InSituDataset, _ext, obstore_store, open_geometries, split_by_chunk
from cloud_data import ARRAYS, check_dataset_streams_exact, check_every_chunk, oracle
from cloud_fixtures import AZURE_ACCOUNT, AZURE_KEY, BUCKET, GCS_TOKEN

BACKENDS = ["file", "memory", "http", "s3", "gs", "az"]


@pytest.fixture(params=BACKENDS)
def backend(request, demo_dirs, monkeypatch):
    """(name, url, local root): the URL opens with obstore_store(url) and no options."""
    name, root = request.param, demo_dirs[0]
    if name == "file":
        return name, f"file://{root}", root
    if name == "memory":
        return name, None, root
    if name == "http":
        return name, request.getfixturevalue("http_server").url + "/demo.zarr", root
    if name == "s3":
        m = request.getfixturevalue("moto")
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", m.endpoint)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", m.access_key_id)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", m.secret_access_key)
        return name, f"s3://{BUCKET}/stores/demo.zarr", root
    if name == "az":
        monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_NAME", AZURE_ACCOUNT)
        monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", AZURE_KEY)
        monkeypatch.setenv("AZURE_STORAGE_ENDPOINT", request.getfixturevalue("azure_blob").url)
        return name, "az://data/stores/demo.zarr", root
    private, _ = request.getfixturevalue("gcs")
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", private.url)
    monkeypatch.setenv("GOOGLE_OAUTH_ACCESS_TOKEN", GCS_TOKEN)
    return name, f"gs://{BUCKET}/stores/demo.zarr", root


def open_backend(backend):
    name, url, root = backend
    if name == "memory":
        store = insitubatch.memory_store()
        for p in root.rglob("*"):
            if p.is_file():
                store.set(p.relative_to(root).as_posix(), p.read_bytes())
        return store
    return insitubatch.store(url)


def test_reads(backend):
    store, root = open_backend(backend), backend[2]
    data = (root / "sh" / "c" / "1" / "0").read_bytes()  # a shard: index at its end
    assert store.read("sh/c/1/0") == data
    assert store.read("sh/c/1/0", offset=7, length=13) == data[7:20]
    assert store.read("sh/c/1/0", suffix=16 * 4 + 4) == data[-68:]
    assert store.read("sh/c/1/0", offset=len(data), length=0) == b""
    assert store.read("sh/c/1/0", suffix=0) == b""
    assert store.read("sh/c/9/0") is None
    assert store.read("labels/masks/c/7/0") is None  # never written: fill value
    with pytest.raises(insitubatch.CorruptChunkError, match=f"object is {len(data)} bytes"):
        store.read("sh/c/1/0", offset=len(data) - 3, length=4)
    with pytest.raises(insitubatch.CorruptChunkError):
        store.read("sh/c/1/0", suffix=len(data) + 1)
    for bad in ("../x", "/abs", "a//b", "a/./b"):
        with pytest.raises(insitubatch.InvalidArgumentError):
            store.read(bad)


def test_list(backend):
    store, root = open_backend(backend), backend[2]
    local = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    if backend[0] == "http":
        with pytest.raises(insitubatch.UnsupportedError, match="consolidated"):
            store.list()
        return
    assert store.list() == local
    assert store.list("labels/") == [k for k in local if k.startswith("labels/")]
    assert store.list("nothing-here/") == []


def test_every_chunk_matches_zarr_python(backend):
    assert check_every_chunk(open_backend(backend), backend[2]) == 26


def test_dataset_decodes_once_with_exact_values(backend):
    store = open_backend(backend)
    check_dataset_streams_exact(store, backend[2], _ext.CountingStore(store))


def test_zarr_python_reads_through_obstore_store(backend):
    """obstore_store() is also a zarr-python Store: zarr reads every array through our native
    IO with the values zarr reads from the local copy; the engine reads the same object."""
    name, url, root = backend
    if name == "memory":
        pytest.skip("obstore_store('memory://') is the native memory store")
    store = obstore_store(url)
    assert isinstance(store, zarr.abc.store.Store) and insitubatch.as_native_store(store) is store.native
    for path in ARRAYS:
        np.testing.assert_array_equal(zarr.open_array(store, path=path, mode="r")[...], oracle(root, path)[...],
                                      strict=True, err_msg=path)
    check_dataset_streams_exact(store, root, _ext.CountingStore(store.native))


def test_describe_names_the_location(backend):
    name, url, _ = backend
    store = open_backend(backend)
    described = store.describe("t2m/zarr.json")
    expected = {"memory": "memory://t2m/zarr.json", "file": f"{backend[2]}/t2m/zarr.json"}
    assert described == expected.get(name, f"{url}/t2m/zarr.json")


def test_quickstart_runs_unchanged(backend, capsys):
    """The README quickstart, with the demo store's sizes: only the URL differs."""
    name, url, root = backend
    if name == "memory":
        pytest.skip("the quickstart opens a URL")
    n = 40
    store = obstore_store(url)
    geoms = open_geometries(store, variables=["t2m"])
    manifest = split_by_chunk(geoms["t2m"], fractions=(0.8, 0.1, 0.1), sample_range=(0, n))
    ds = InSituDataset(store, manifest, geometries=geoms, batch_size=4, block_chunks=2)
    ds.print_summary()
    ref = oracle(root, "t2m")
    for epoch in range(2):
        ds.set_epoch(epoch)
        train, val = [], []
        for i, batch in enumerate(ds.train):
            train.extend(batch.sample_indices.tolist())
            if i == 0:  # the quickstart's spot check against zarr-python
                idx = batch.sample_indices
                assert np.array_equal(batch.arrays["t2m"], ref.get_orthogonal_selection((idx,)))
        for batch in ds.val:
            val.extend(batch.sample_indices.tolist())
            np.testing.assert_array_equal(batch.arrays["t2m"], ref.get_orthogonal_selection((batch.sample_indices,)))
        assert len(train) == len(set(train)) >= 24 and not set(train) & set(val)
    ds.close()
    assert "t2m" in capsys.readouterr().out
