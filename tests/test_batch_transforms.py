"""Batch transforms run on a thread of their own, one batch ahead of the consumer: the next
batch is transformed while the caller works on this one; a transform's exception reaches
the caller as itself, naming the batch; an abandoned pass stops the thread; the time shows
in last_pass (and a slow transform is named as the limiting stage)."""

from __future__ import annotations

import gc
import itertools
import threading
import time

import numpy as np
import pytest
import zarr

from insitubatch import Batch, InSituDataset, open_geometries, split_by_chunk

THREAD = "insitubatch-batch-transforms"


@pytest.fixture
def dataset_of(tmp_path):
    values = np.arange(64 * 6, dtype="f4").reshape(64, 2, 3)
    zarr.create_array(zarr.storage.LocalStore(tmp_path / "s.zarr"), name="v", shape=values.shape,
                      chunks=(8, 2, 3), dtype="f4")[...] = values

    def make(*transforms, **kw):
        geoms = open_geometries(str(tmp_path / "s.zarr"))
        manifest = split_by_chunk(geoms["v"], fractions=(1.0, 0.0, 0.0))
        return InSituDataset(str(tmp_path / "s.zarr"), manifest, geoms, batch_size=8, shuffle=False,
                             batch_transforms=transforms, **kw)

    return make, values


def _transform_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == THREAD]


def test_the_next_batch_is_transformed_while_the_consumer_holds_this_one(dataset_of):
    make, values = dataset_of
    called = [threading.Event() for _ in range(8)]
    seen_on = set()

    def mark(batch):
        index = int(batch.sample_indices[0]) // 8
        seen_on.add(threading.current_thread().name)
        called[index].set()
        return Batch({"v": batch.arrays["v"] * 2})  # a new Batch, without provenance

    ds = make(mark)
    ahead = []
    for i, batch in enumerate(ds.train):
        np.testing.assert_array_equal(batch.arrays["v"], values[i * 8:(i + 1) * 8] * 2)
        assert len(batch) == 8
        if i + 1 < 8:  # still holding batch i: the transform of batch i + 1 runs meanwhile
            ahead.append(called[i + 1].wait(timeout=30))
    assert all(ahead) and len(ahead) == 7
    assert seen_on == {THREAD}
    assert ds.last_pass.batches == 8


def test_a_transforms_exception_reaches_the_caller_as_itself_naming_the_batch(dataset_of):
    make, _ = dataset_of

    class Boom(RuntimeError):
        pass

    def fail_on_third(batch):
        if int(batch.sample_indices[0]) == 16:
            raise Boom("bad augmentation")
        return batch

    ds = make(fail_on_third)
    got = []
    with pytest.raises(Boom, match="bad augmentation") as info:
        for batch in ds.train:
            got.append(int(batch.sample_indices[0]))
    assert got == [0, 8]
    assert any("fail_on_third on batch 2 of the train pass" in n for n in info.value.__notes__)
    assert ds.last_pass is not None and not ds.last_pass.finished
    # The dataset stays usable: a new pass delivers the batches before the failing one.
    assert [int(b.sample_indices[0]) for b in itertools.islice(ds.train, 2)] == [0, 8]


def test_an_abandoned_pass_stops_its_transform_thread(dataset_of):
    make, _ = dataset_of
    before = len(_transform_threads())
    ds = make(lambda b: b)
    for _ in ds.train:
        break  # the iterator is dropped here: collecting it cancels the pass
    gc.collect()
    deadline = time.monotonic() + 10
    while len(_transform_threads()) > before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(_transform_threads()) == before
    assert not ds.last_pass.finished
    assert sum(len(b) for b in ds.train) == 64  # the next pass is whole


def test_transform_time_is_reported_and_a_slow_transform_is_named(dataset_of):
    make, _ = dataset_of

    def burn(batch):  # CPU work, as an augmentation does
        t0 = time.thread_time()
        x = np.ones(1000)
        while time.thread_time() - t0 < 0.02:
            x = np.sqrt(x + 1.0)
        return batch

    ds = make(burn)
    assert sum(len(b) for b in ds.train) == 64
    stats = ds.last_pass
    assert stats.times.batch_transform_s >= 8 * 0.02 * 0.9
    assert stats.depths.batch_queue_samples == 9  # eight batches and the end, as the consumer took them
    assert stats.limiting_stage == "gather", stats.as_dict()
    assert "batch transforms" in stats.advice
    assert ds.describe()["memory"]["batch_transforms_ahead"] is True
