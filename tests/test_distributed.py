"""Ranks of a data-parallel job, simulated in one process (torchrun runs the real thing in
tests/frameworks/test_torch.py): every rank takes the same number of steps, the ranks'
samples are disjoint (drop) or cover the split (pad), and each chunk is read by one rank."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

import insitubatch as ib
from insitubatch import _ext

N, SPC = 101, 6  # 17 chunks, the last one short: no world size here divides it


@pytest.fixture(scope="module")
def store_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("ddp") / "s.zarr"
    root = zarr.open_group(str(path), mode="w", zarr_format=3)
    root.create_array("x", shape=(N, 2), chunks=(SPC, 2), dtype="i8")[...] = np.arange(2 * N).reshape(N, 2)
    return str(path)


def open_rank(store_path, rank, world_size, **kwargs):
    counting = _ext.CountingStore(ib.store(store_path))
    geoms = ib.open_geometries(counting, ["x"])
    manifest = ib.split_by_chunk(geoms["x"], fractions=(1.0, 0.0, 0.0))
    ds = ib.InSituDataset(counting, manifest, geometries=geoms, batch_size=4, block_chunks=2, seed=3,
                          rank=rank, world_size=world_size, **kwargs)
    return ds, counting


@pytest.mark.parametrize("world_size", [2, 3, 4])
@pytest.mark.parametrize("remainder", ["drop", "pad"])
def test_equal_steps_disjoint_chunks_and_the_remainder_policy(store_path, world_size, remainder):
    for epoch in (0, 1):
        steps, samples, chunks_read = [], [], []
        for rank in range(world_size):
            ds, counting = open_rank(store_path, rank, world_size, remainder=remainder)
            ds.set_epoch(epoch)
            batches = list(ds.train)
            assert len(batches) == len(ds.train)
            assert all(len(b) == 4 for b in batches)  # full batches on every rank
            for b in batches:
                np.testing.assert_array_equal(b.arrays["x"][:, 0], 2 * b.sample_indices)
            steps.append(len(batches))
            samples.append(np.concatenate([b.sample_indices for b in batches]).tolist() if batches else [])
            chunks_read.append({k for k, n in counting.reads().items() if k.startswith("x/c/")})
            ds.close()
        assert len(set(steps)) == 1, steps  # a collective per step never waits on a missing rank
        for a in range(world_size):
            for b in range(a + 1, world_size):
                assert not chunks_read[a] & chunks_read[b]  # no chunk fetched by two ranks
        seen = [i for s in samples for i in s]
        if remainder == "drop":
            assert len(seen) == len(set(seen)) and set(seen) <= set(range(N))
            assert len(seen) >= N - world_size * (SPC + 4)
        else:
            assert set(seen) == set(range(N))  # every sample, a few twice


def test_a_rank_resumes_its_own_share(store_path):
    ds, _ = open_rank(store_path, 1, 3)
    full = [b.sample_indices.tolist() for b in ds.train]
    it = iter(ds.train)
    head = [next(it).sample_indices.tolist() for _ in range(2)]
    state = ds.state_dict()
    it.close()
    ds.close()
    assert state["views"][0]["share"] == [1, 3] and state["views"][0]["world_size"] == 3
    ds, _ = open_rank(store_path, 1, 3)
    ds.load_state_dict(state)
    assert head + [b.sample_indices.tolist() for b in ds.train] == full
    ds.close()
    ds, _ = open_rank(store_path, 1, 3)
    with pytest.raises(ib.InvalidArgumentError, match="belongs to view 'train'"):
        ds.val.load_state_dict(state["views"][0])
    ds.close()


def test_rank_and_world_size_come_from_the_environment(store_path, monkeypatch):
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "3")
    ds, _ = open_rank(store_path, None, None)
    assert (ds.rank, ds.world_size) == (2, 3)
    assert repr(ds.train) == "<SplitView train (shuffled, share 2 of 3)>"
    ds.close()
    for rank, world_size, match in ((3, 3, "rank must be in"), (0, 0, "rank must be in"), (1, None, "together"),
                                    (True, 2, "integers")):
        with pytest.raises(ib.InvalidArgumentError, match=match):
            open_rank(store_path, rank, world_size)
    with pytest.raises(ib.InvalidArgumentError, match="remainder"):
        open_rank(store_path, 0, 2, remainder="wrap")


def run_ranks(store_path, world_size, states=None, steps=None, epoch=1):
    """Each rank's samples and chunks read (and its state after ``steps`` batches)."""
    out = []
    for rank in range(world_size):
        ds, counting = open_rank(store_path, rank, world_size)
        if states is None:
            ds.set_epoch(epoch)
        else:
            ds.load_state_dict(states[rank % len(states)])
        it = iter(ds.train)
        samples = [b.sample_indices.tolist() for _, b in zip(range(steps if steps is not None else 10**9), it)]
        state = ds.state_dict()
        it.close()
        out.append((samples, {k for k in counting.reads() if k.startswith("x/c/")}, state))
        ds.close()
    return out


@pytest.mark.parametrize("sizes", [(4, 2), (2, 3), (4, 2, 3), (1, 3)])
def test_resuming_under_another_world_size_sees_no_sample_twice(store_path, sizes):
    seen, states = [], None
    for i, world_size in enumerate(sizes):
        last = i == len(sizes) - 1
        ranks = run_ranks(store_path, world_size, states, steps=None if last else 2)
        assert len({len(samples) for samples, _, _ in ranks}) == 1  # equal steps in every segment
        for a in range(world_size):
            for b in range(a + 1, world_size):
                assert not ranks[a][1] & ranks[b][1]  # each chunk to one rank
        seen += [i for samples, _, _ in ranks for batch in samples for i in batch]
        states = [state for _, _, state in ranks]
    assert len(seen) == len(set(seen))  # no sample twice in the epoch, across the changes
    assert states[0]["views"][0]["history"] == [[w, 8] for w in sizes[:-1]]  # 2 steps of 4 rows each
    assert len(seen) >= N - (len(sizes) + 1) * 3 * (SPC + 4)  # only each segment's remainder is dropped
