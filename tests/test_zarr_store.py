"""obstore_store() returns one object that zarr-python, xarray and zarr's WrapperStore read
(through our native IO) and that the engine reads natively: its Store methods against
zarr's own LocalStore over the same directory, read-only errors, equality and pickling,
and a forked child that re-opens it."""

from __future__ import annotations

import asyncio
import os
import pickle

import numpy as np
import pytest
import xarray as xr
import zarr
from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest
from zarr.core.buffer import default_buffer_prototype

import insitubatch
from insitubatch import InSituDataset, _ext, obstore_store, open_geometries, split_by_chunk
from insitubatch.zarr_store import ZarrStore

PROTO = default_buffer_prototype()


@pytest.fixture
def cf(tmp_path):
    rng = np.random.default_rng(4)
    data = xr.Dataset(
        {"t2m": (("time", "lat", "lon"), rng.standard_normal((16, 3, 5)).astype("f4")),
         "tp": (("time", "lat", "lon"), rng.random((16, 3, 5)))},
        coords={"lat": [10.0, 20.0, 30.0], "lon": np.arange(5.0)},
    )
    data.to_zarr(tmp_path / "cf.zarr", mode="w", zarr_format=3, encoding={"t2m": {"chunks": (4, 3, 5)}})
    return tmp_path / "cf.zarr", data


def run(coro):
    return asyncio.run(coro)


async def collect(agen):
    return sorted([k async for k in agen])


def test_the_store_methods_agree_with_zarrs_local_store(cf):
    path, _ = cf
    ours, theirs = obstore_store(f"file://{path}"), zarr.storage.LocalStore(path, read_only=True)
    assert isinstance(ours, zarr.abc.store.Store) and ours.read_only
    assert run(collect(ours.list())) == run(collect(theirs.list()))
    for prefix in ("", "t2m", "t2m/", "t2m/c"):
        assert run(collect(ours.list_dir(prefix))) == run(collect(theirs.list_dir(prefix))), prefix
    assert run(collect(ours.list_prefix("t2m/"))) == run(collect(theirs.list_prefix("t2m/")))
    # A directory level is one listing of it, not of every key below (what zarr-python and
    # xarray walk a group without consolidated metadata with).
    counted = _ext.CountingStore(insitubatch.local_store(path))
    assert run(collect(ZarrStore(counted).list_dir("t2m"))) == run(collect(theirs.list_dir("t2m")))
    assert counted.lists() == {"t2m/": 1}
    # A store that lists whole prefixes only (references): the same names, from its listing.
    refs = insitubatch.reference_store({"version": 1, "refs": {"zarr.json": "{}", "g/a/zarr.json": "{}",
                                                               "g/b": "x", "g/a/c/0": "y"}})
    with pytest.raises(insitubatch.UnsupportedError):
        refs.list_dir("g")
    assert run(collect(ZarrStore(refs).list_dir("g"))) == ["a", "b"]
    key = "t2m/c/1/0/0"
    for byte_range in (None, RangeByteRequest(3, 11), OffsetByteRequest(5), SuffixByteRequest(7)):
        assert run(ours.get(key, PROTO, byte_range)).to_bytes() == run(theirs.get(key, PROTO, byte_range)).to_bytes()
    assert run(ours.get("absent", PROTO)) is None
    assert run(ours.exists(key)) and not run(ours.exists("absent"))
    assert run(ours.getsize(key)) == os.path.getsize(path / key)
    parts = run(ours.get_partial_values(PROTO, [(key, RangeByteRequest(0, 4)), ("absent", None)]))
    assert parts[0].to_bytes() == (path / key).read_bytes()[:4] and parts[1] is None
    with pytest.raises(insitubatch.InvalidArgumentError, match="read-only"):
        run(ours.set("x", PROTO.buffer.from_bytes(b"1")))
    with pytest.raises(insitubatch.InvalidArgumentError, match="read-only"):
        run(ours.delete(key))
    # The native store's own methods stay on it.
    assert ours.read(key) == (path / key).read_bytes() and ours.describe("a") == f"{path}/a"


def test_zarr_xarray_and_wrapper_stores_read_it_and_so_does_the_engine(cf):
    path, data = cf
    store = obstore_store(f"file://{path}")
    opened = xr.open_zarr(store)
    xr.testing.assert_identical(opened.load(), data)
    wrapped = zarr.open_group(zarr.storage.WrapperStore(store), mode="r")
    np.testing.assert_array_equal(wrapped["tp"][...], data.tp.values)
    with pytest.raises(ValueError, match="read-only"):
        zarr.open_group(store, mode="r+")
    geoms = open_geometries(store)
    assert sorted(geoms) == ["t2m", "tp"]
    ds = InSituDataset(store, split_by_chunk(geoms["t2m"], fractions=(1.0, 0.0, 0.0)), geoms, batch_size=16,
                       shuffle=False)
    assert insitubatch.as_native_store(store) is store.native  # no bridge in between
    (batch,) = list(ds.train)
    np.testing.assert_array_equal(batch.arrays["t2m"], data.t2m.values)


def test_equality_pickling_and_a_forked_child(cf):
    path, data = cf
    a, b = obstore_store(f"file://{path}"), obstore_store(f"file://{path}")
    assert a == b and a != obstore_store(f"file://{path}/t2m") and a != a.native
    again = pickle.loads(pickle.dumps(a))
    assert again == a and again.read("zarr.json") == a.read("zarr.json")
    geoms = open_geometries(a, ["t2m"])
    ds = InSituDataset(a, split_by_chunk(geoms["t2m"], fractions=(1.0, 0.0, 0.0)), geoms, batch_size=4,
                       shuffle=False)
    assert sum(len(x) for x in ds.train) == 16
    pid = os.fork()
    if pid == 0:  # the child re-opens the store and reads on its own
        ok = False
        try:
            ok = np.array_equal(np.concatenate([x.arrays["t2m"] for x in ds.train]), data.t2m.values)
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
