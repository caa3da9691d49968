"""Writing through insitubatch's stores: zarr-python 3 and xarray write v2 and v3 arrays
(sharded too) through ``obstore_store(url, read_only=False)`` on local disk and in memory,
and zarr-python's own LocalStore and the engine read them back exactly; the refusals
(read-only, HTTP); conditional creates racing across
processes; a writer killed mid-write; a full disk."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import xarray as xr
import zarr
from zarr.core.buffer import default_buffer_prototype

import insitubatch
from insitubatch import obstore_store
from cloud_data import engine_read

PROTO = default_buffer_prototype()


@pytest.fixture(params=["file", "memory"])
def target(request, tmp_path):
    """(writable store, a function opening a read-only reader of what was written)."""
    if request.param == "file":
        path = tmp_path / "nested" / "out.zarr"  # does not exist yet: the store creates it
        return obstore_store(f"file://{path}", read_only=False), lambda: zarr.storage.LocalStore(path, read_only=True)
    store = obstore_store("memory://", read_only=False)
    return store, lambda: store.with_read_only(True)


@pytest.mark.filterwarnings("ignore:Consolidated metadata is currently not part:UserWarning")
@pytest.mark.parametrize("zarr_format, sharded", [(2, False), (3, False), (3, True)])
def test_zarr_writes_arrays_that_zarr_and_the_engine_read_back(target, zarr_format, sharded):
    store, reader = target
    assert not store.read_only and store.supports_writes and store.supports_deletes
    rng = np.random.default_rng(zarr_format)
    data = rng.standard_normal((24, 6, 10)).astype("f4")
    labels = rng.integers(-500, 500, 24).astype("i2")
    group = zarr.open_group(store, mode="w", zarr_format=zarr_format)
    layout = dict(chunks=(4, 3, 5), shards=(8, 6, 10)) if sharded else dict(chunks=(4, 3, 5))
    group.create_array("t2m", shape=data.shape, dtype="f4", **layout)[...] = data
    group.create_array("label", shape=labels.shape, chunks=(8,), dtype="i2")[...] = labels
    zarr.consolidate_metadata(store)

    back = zarr.open_group(reader(), mode="r")
    np.testing.assert_array_equal(back["t2m"][...], data)
    np.testing.assert_array_equal(back["label"][...], labels)
    np.testing.assert_array_equal(engine_read(store, "t2m", 24), data)

    # Overwrite in place, then mode="w" again clears the group.
    group["t2m"][:4] = -data[:4]
    np.testing.assert_array_equal(zarr.open_group(reader(), mode="r")["t2m"][:4], -data[:4])
    zarr.open_group(store, mode="w", zarr_format=zarr_format)
    assert sorted(zarr.open_group(reader(), mode="r").array_keys()) == []


@pytest.mark.filterwarnings("ignore:Consolidated metadata is currently not part:UserWarning")
def test_xarray_writes_and_appends_through_it(target):
    store, reader = target
    rng = np.random.default_rng(7)
    data = xr.Dataset({"t2m": (("time", "lat", "lon"), rng.standard_normal((8, 3, 4)).astype("f4"))},
                      coords={"time": np.arange(8), "lat": [10.0, 20.0, 30.0], "lon": np.arange(4.0)})
    data.to_zarr(store, mode="w", zarr_format=3, encoding={"t2m": {"chunks": (4, 3, 4)}})
    more = data.assign_coords(time=np.arange(8, 16))
    more.to_zarr(store, append_dim="time")
    both = xr.concat([data, more], dim="time")
    xr.testing.assert_identical(xr.open_zarr(reader()).load(), both)
    np.testing.assert_array_equal(engine_read(store, "t2m", 16), both.t2m.values)


def test_read_only_stores_refuse_writes_with_the_error_zarr_expects(tmp_path):
    path = tmp_path / "ro.zarr"
    zarr.open_group(zarr.storage.LocalStore(path), mode="w").create_array("a", shape=(4,), dtype="i4")[...] = 1
    store = obstore_store(f"file://{path}")
    assert store.read_only and not store.supports_writes
    with pytest.raises(ValueError, match="read-only"):
        zarr.open_group(store, mode="w")
    with pytest.raises(insitubatch.InvalidArgumentError, match="read_only=False"):
        store.with_read_only(False)
    with pytest.raises(insitubatch.FailedPreconditionError, match=f"{path}/a/zarr.json.*read-only"):
        store.native.write("a/zarr.json", b"{}")
    np.testing.assert_array_equal(zarr.open_array(store, path="a")[...], 1)  # untouched
    # A writable store handed out read-only refuses too, and the native store keeps it so.
    writable = obstore_store(f"file://{path}", read_only=False)
    with pytest.raises(ValueError, match="read-only"):
        asyncio.run(writable.with_read_only(True).set("a/x", PROTO.buffer.from_bytes(b"1")))


def test_backends_that_cannot_write_say_so():
    with pytest.raises(insitubatch.InvalidArgumentError, match="HTTP has no write verb"):
        insitubatch.store("http://127.0.0.1:9/x.zarr", read_only=False)
    with pytest.raises(insitubatch.FailedPreconditionError, match="HTTP has no write verb"):
        insitubatch.store("http://127.0.0.1:9/x.zarr").write("k", b"v")
    with pytest.raises(insitubatch.InvalidTypeError, match="read_only"):
        insitubatch.store("memory://", read_only="no")


RACER = """
import json, os, sys, time
import insitubatch
store = insitubatch.store(sys.argv[1], read_only=False)
while not os.path.exists(sys.argv[2]):
    time.sleep(0.001)
won = [k for k in (f"c/{i}" for i in range(300)) if store.write(k, sys.argv[3].encode(), if_absent=True)]
print(json.dumps(won))
"""


def test_conditional_creates_racing_from_two_processes_have_one_winner_each(tmp_path):
    root, go = tmp_path / "race.zarr", tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", RACER, str(root), str(go), name], stdout=subprocess.PIPE,
                              text=True) for name in ("first", "second")]
    time.sleep(0.5)  # both importing and waiting on the go file
    go.touch()
    won = [set(json.loads(p.communicate(timeout=60)[0])) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert not won[0] & won[1] and won[0] | won[1] == {f"c/{i}" for i in range(300)}
    for name, keys in zip(("first", "second"), won):
        assert all((root / key).read_text() == name for key in keys)
    assert sorted(os.listdir(root / "c")) == sorted(str(i) for i in range(300))  # no temporaries left


KILLED_WRITER = """
import sys
import insitubatch
store = insitubatch.store(sys.argv[1], read_only=False)
size = int(sys.argv[2])
for n in range(1_000_000):
    store.write("big", bytes([n % 251]) * size)
    print(n, flush=True)
"""


def test_a_writer_killed_mid_write_leaves_whole_objects_only(tmp_path):
    root, size = tmp_path / "killed.zarr", 32 << 20
    for delay in (0.0, 0.05, 0.13):
        proc = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(root), str(size)], stdout=subprocess.PIPE,
                                text=True)
        proc.stdout.readline()  # the first object is complete
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        data = insitubatch.store(str(root)).read("big")
        assert len(data) == size and data.count(data[:1]) == size, delay
        assert insitubatch.store(str(root)).list() == ["big"]


def test_a_full_disk_is_a_clear_error_and_leaves_nothing(small_disk):
    store = insitubatch.store(str(small_disk / "out.zarr"), read_only=False)
    store.write("t2m/zarr.json", b"{}")
    with pytest.raises(insitubatch.ResourceExhaustedError, match=f"{small_disk}/out.zarr/t2m/c/0.*No space left"):
        store.write("t2m/c/0", b"x" * (2 << 20))
    files = [os.path.relpath(os.path.join(d, f), small_disk) for d, _, names in os.walk(small_disk) for f in names]
    assert files == ["out.zarr/t2m/zarr.json"]  # no partial object, no temporary
    assert store.read("t2m/c/0") is None


@pytest.mark.parametrize("how", ["create_array", "open_group"])
def test_overwriting_through_a_linked_directory_is_refused_and_serves_no_old_chunk(tmp_path, how):
    """zarr deletes an array's directory before it writes the new one: through a symlink the
    file store refuses (zarr's LocalStore does too), so no new metadata lands over old chunks."""
    elsewhere = tmp_path / "elsewhere"
    old = zarr.open_group(zarr.storage.LocalStore(elsewhere), mode="w")
    old.create_array("a", shape=(8,), chunks=(4,), dtype="i4")[...] = 7
    root = tmp_path / "store.zarr"
    zarr.open_group(zarr.storage.LocalStore(root), mode="w")
    (root / "a").symlink_to(elsewhere / "a")
    store = obstore_store(f"file://{root}", read_only=False)
    with pytest.raises(OSError, match=rf"{root / 'a'}: it is a symbolic link \(to {elsewhere / 'a'}\)"):
        if how == "create_array":
            zarr.create_array(store, name="a", shape=(8,), chunks=(4,), dtype="i4", fill_value=0, overwrite=True)
        else:
            zarr.open_group(store, path="a", mode="w")
    # Nothing was half-done: the linked array is as it was, metadata and chunks.
    np.testing.assert_array_equal(zarr.open_array(store, path="a", mode="r")[...], np.full(8, 7, "i4"))
    # Without the link, the overwrite happens and the new array reads its fill value.
    (root / "a").unlink()
    new = zarr.create_array(store, name="a", shape=(8,), chunks=(4,), dtype="i4", fill_value=0, overwrite=True)
    np.testing.assert_array_equal(new[...], np.zeros(8, "i4"))
    np.testing.assert_array_equal(zarr.open_array(zarr.storage.LocalStore(elsewhere), path="a", mode="r")[...],
                                  np.full(8, 7, "i4"))
