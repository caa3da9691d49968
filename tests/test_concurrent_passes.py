"""Concurrent iterations over one dataset either always work or fail at once, and a chunk
served as NaN under on_bad_chunk="nan" is never served from the cache as if it were data."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import zarr
from zarr.codecs import ZstdCodec

import insitubatch
from insitubatch import InSituDataset, ResourceExhaustedError, _ext, open_geometries, split_by_chunk

N = 80


@pytest.fixture(scope="module")
def era(tmp_path_factory):
    path = tmp_path_factory.mktemp("concurrent") / "s.zarr"
    values = np.random.default_rng(3).standard_normal((N, 6, 5)).astype("float32")
    arr = zarr.create_array(zarr.storage.LocalStore(path), name="t2m", shape=values.shape, chunks=(8, 6, 5),
                            dtype="float32", compressors=[ZstdCodec(level=1)], fill_value=0)
    arr[...] = values
    return path, values


def _dataset(path, **kwargs):
    store = insitubatch.local_store(path)
    geoms = open_geometries(store, ["t2m"])
    kwargs.setdefault("batch_size", 4)
    kwargs.setdefault("block_chunks", 2)
    return InSituDataset(store, split_by_chunk(geoms["t2m"], fractions=(0.6, 0.2, 0.2)), geoms, **kwargs)


def _check(batch, values):
    np.testing.assert_array_equal(batch.arrays["t2m"], values[batch.read_indices("t2m")])


@pytest.mark.timeout(300)
def test_zip_train_val_always_works_on_the_automatic_budget(era, caplog):
    path, values = era
    ds = _dataset(path)
    floor = ds.cache_budget_bytes
    with caplog.at_level(logging.WARNING, logger="insitubatch"):
        for epoch in range(50):
            ds.set_epoch(epoch)
            with iter(ds.train) as train, iter(ds.val) as val:
                for a, b in zip(train, val):
                    _check(a, values)
                    _check(b, values)
    assert ds.cache_budget_bytes == 2 * floor
    grew = [r.getMessage() for r in caplog.records if "budget grew" in r.getMessage()]
    assert len(grew) == 1 and "describe(iterations=N)" in grew[0]


@pytest.mark.timeout(300)
def test_eight_round_robin_passes_always_work(era):
    path, values = era
    ds = _dataset(path)
    for epoch in range(50):
        ds.set_epoch(epoch)
        views = [ds.train, ds.val, ds.test, ds.all, ds.train, ds.all, ds.val, ds.train]
        iterators = [iter(v) for v in views]
        seen = [0] * len(views)
        live = list(range(len(views)))
        while live:
            for i in list(live):
                try:
                    batch = next(iterators[i])
                except StopIteration:
                    live.remove(i)
                    continue
                _check(batch, values)
                seen[i] += len(batch.sample_indices)
        assert seen == [48, 16, 16, 80, 48, 80, 16, 48]
    assert ds.cache_budget_bytes == 8 * ds.working_set_bytes


def test_an_explicit_budget_too_small_for_two_iterations_fails_when_the_second_starts(era):
    path, _ = era
    ds = _dataset(path)
    exact = _dataset(path, cache_budget_bytes=ds.working_set_bytes)
    first = iter(exact.train)
    next(first)
    with pytest.raises(ResourceExhaustedError, match=r"2 concurrent iterations .*describe\(iterations=2\)"):
        iter(exact.val)
    first.close()
    assert sum(len(b.sample_indices) for b in exact.val) == 16  # alone, it works
    roomy = _dataset(path, cache_budget_bytes=2 * ds.working_set_bytes)
    with iter(roomy.train) as a, iter(roomy.val) as b:
        assert len(list(zip(a, b))) == 4


def test_nan_stand_ins_are_re_read_and_reported_every_pass(tmp_path):
    path = tmp_path / "bad.zarr"
    values = np.arange(N * 3, dtype="float32").reshape(N, 3)
    arr = zarr.create_array(zarr.storage.LocalStore(path), name="v", shape=values.shape, chunks=(8, 3),
                            dtype="float32", compressors=[ZstdCodec(level=1)], fill_value=0)
    arr[...] = values
    chunk = path / "v" / "c" / "2" / "0"
    good = chunk.read_bytes()
    chunk.write_bytes(good[:-4])  # truncated: the zstd frame does not decode
    store = _ext.CountingStore(insitubatch.local_store(path))
    geoms = open_geometries(store, ["v"])
    manifest = split_by_chunk(geoms["v"], fractions=(1.0, 0.0, 0.0))
    ds = InSituDataset(store, manifest, geoms, batch_size=8, on_bad_chunk="nan", shuffle=False,
                       cache_budget_bytes=1 << 20)  # room for every chunk: nothing is evicted

    def epoch():
        store.reset()
        out = np.concatenate([b.arrays["v"] for b in ds.train])
        return out, store.reads().get("v/c/2/0", 0), list(ds.bad_chunks)

    for _ in range(2):
        out, reads, bad = epoch()
        assert np.isnan(out[16:24]).all() and np.array_equal(out[:16], values[:16])
        assert reads >= 1, "a NaN stand-in must be read again, not served from the cache"
        assert bad == [insitubatch.StoredChunkRead("v", 2, (0,))]
    chunk.write_bytes(good)  # repaired
    out, reads, bad = epoch()
    np.testing.assert_array_equal(out, values)
    assert reads == 1 and bad == []
    out, reads, bad = epoch()  # now it is data: served from the cache
    np.testing.assert_array_equal(out, values)
    assert reads == 0 and bad == []
