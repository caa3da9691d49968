"""Page-locked batch buffers: the engine locks its recycled batch buffers in place (for
non-blocking device copies), within a budget, and unlocks them before freeing them. The
CUDA runtime is replaced by a recording stand-in; the GPU test in tests/frameworks runs the
real one."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import zarr
from page_lock_fake import FakeCudart
from zarr.codecs import ZstdCodec

import insitubatch
from insitubatch import InSituDataset, open_geometries, split_by_chunk


@pytest.fixture
def dataset(tmp_path):
    values = np.random.default_rng(3).standard_normal((96, 5, 7)).astype("f4")
    path = tmp_path / "s.zarr"
    arr = zarr.create_array(zarr.storage.LocalStore(path), name="x", shape=values.shape, chunks=(8, 5, 7),
                            dtype="f4", compressors=[ZstdCodec(level=1)])
    arr[...] = values

    def open_dataset(**kwargs) -> InSituDataset:
        store = insitubatch.local_store(path)
        geoms = open_geometries(store, ["x"])
        kwargs.setdefault("batch_size", 8)
        kwargs.setdefault("block_chunks", 2)
        return InSituDataset(store, split_by_chunk(geoms["x"], fractions=(1.0, 0.0, 0.0)), geoms, **kwargs)

    return open_dataset, values


def test_batch_buffers_are_locked_in_place_and_unlocked_before_freeing(dataset):
    open_dataset, values = dataset
    cudart = FakeCudart()
    ds = open_dataset()
    ds._lock_batch_pages(*cudart.functions, 1 << 30)
    batches = list(ds.train)  # held: every batch its own buffer
    for batch in batches:
        arr = batch.arrays["x"]
        address = arr.ctypes.data
        assert ds._batch_pages_locked(arr)
        assert cudart.live[address] >= arr.nbytes  # the whole buffer, where the batch lies
        np.testing.assert_array_equal(arr, values[batch.sample_indices], strict=True)
    assert cudart.flags == {1}  # cudaHostRegisterPortable
    assert ds.pool_state()["batch_locked_bytes"] == cudart.locked_bytes()
    assert ds.pool_state()["batch_unlocked_takes"] == 0
    registered = cudart.registers

    del batches, batch, arr
    gc.collect()
    ds.set_epoch(1)
    for batch in ds.train:  # recycled buffers keep their lock: nothing is locked again
        assert ds._batch_pages_locked(batch.arrays["x"])
    del batch
    assert cudart.registers == registered

    ds.close()
    del ds
    gc.collect()
    assert cudart.live == {} and cudart.unregisters == cudart.registers
    assert cudart.errors == []


def test_locking_stays_within_the_budget(dataset):
    open_dataset, _ = dataset
    cudart = FakeCudart()
    ds = open_dataset()
    buffer_bytes = 8 * 5 * 7 * 4
    ds._lock_batch_pages(*cudart.functions, 3 * 4096)  # three of the smallest buffers
    batches = list(ds.train)
    locked = [ds._batch_pages_locked(b.arrays["x"]) for b in batches]
    assert sum(locked) == 3 and locked[:3] == [True] * 3  # the first three, then pageable
    assert cudart.locked_bytes() == 3 * 4096 >= 3 * buffer_bytes
    assert ds.pool_state()["batch_unlocked_takes"] == len(batches) - 3
    # Raising the budget applies to buffers taken from now on.
    ds._lock_batch_pages(*cudart.functions, 1 << 30)
    more = list(ds.train)
    assert all(ds._batch_pages_locked(b.arrays["x"]) for b in more)
    ds.close()
    del ds, batches, more
    gc.collect()
    assert cudart.live == {} and cudart.errors == []


def test_lock_arguments_and_a_closed_dataset(dataset):
    open_dataset, values = dataset
    ds = open_dataset()
    with pytest.raises(insitubatch.InvalidArgumentError, match="both function addresses"):
        ds._lock_batch_pages(0, 0, 1 << 20)
    batch = next(iter(ds.train))
    assert not ds._batch_pages_locked(batch.arrays["x"])  # locking never turned on
    ds.close()
    assert not ds._batch_pages_locked(batch.arrays["x"])
    with pytest.raises(insitubatch.FailedPreconditionError, match="closed"):
        ds._lock_batch_pages(*FakeCudart().functions, 1 << 20)
