"""plan="stratified" / "balanced": class-aware batches inside the block window, checked
exactly against labels written by zarr-python (and given as arrays), with decode-once and
the epoch's determinism unchanged."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

from insitubatch import InSituDataset, InvalidArgumentError, local_store, open_geometries, split_by_chunk

N, SPC, BLOCK, BS = 1024, 16, 4, 16


def _chunk_labels() -> np.ndarray:
    """Imbalanced (10:3:2:1 in every chunk), shuffled inside each chunk."""
    rng = np.random.default_rng(5)
    per_chunk = np.array([0] * 10 + [1] * 3 + [2] * 2 + [3] * 1)
    return np.concatenate([rng.permutation(per_chunk) for _ in range(N // SPC)])


@pytest.fixture(scope="module")
def store_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("plans") / "s.zarr"
    root = zarr.storage.LocalStore(path)
    zarr.create_array(root, name="x", shape=(N, 3), chunks=(SPC, 3), dtype="int64")[:] = \
        np.repeat(np.arange(N)[:, None], 3, axis=1)
    rng = np.random.default_rng(0)
    zarr.create_array(root, name="y", shape=(N,), chunks=(100,), dtype="int32")[:] = \
        rng.choice(4, size=N, p=[0.6, 0.25, 0.1, 0.05])
    zarr.create_array(root, name="every", shape=(N,), chunks=(64,), dtype="int16")[:] = _chunk_labels()
    return path


def _dataset(path, **kw) -> InSituDataset:
    store = local_store(path)
    g = open_geometries(store, ["x"])
    return InSituDataset(store, split_by_chunk(g["x"], fractions=(1.0, 0.0, 0.0)), g, batch_size=BS,
                         block_chunks=BLOCK, seed=3, **kw)


def _epoch(ds, epoch):
    ds.set_epoch(epoch)
    batches = []
    for b in ds.train:
        np.testing.assert_array_equal(b.arrays["x"][:, 0], b.sample_indices)  # values exact
        batches.append(b.sample_indices.copy())
    return batches


def test_stratified_batches_follow_their_blocks_mix(store_path):
    labels = zarr.open_array(zarr.storage.LocalStore(store_path), path="y")[:]
    ds = _dataset(store_path, labels="y", plan="stratified")
    batches = _epoch(ds, 0)
    assert sorted(np.concatenate(batches).tolist()) == list(range(N))  # every sample once
    assert ds.last_pass.cache_misses == N // SPC  # decode once: the window is unchanged
    block_rows = BLOCK * SPC
    plain = _dataset(store_path)
    plain_batches = _epoch(plain, 0)

    def distances(bs):
        out = []
        for k, idx in enumerate(bs):
            block = np.concatenate(bs[(k // (block_rows // BS)) * (block_rows // BS):][: block_rows // BS])
            target = np.bincount(labels[block], minlength=4) / len(block)
            have = np.bincount(labels[idx], minlength=4)
            assert idx.size == BS
            out.append((have, target))
        return out

    for have, target in distances(batches):
        assert np.all(np.abs(have - BS * target) < 2), (have, BS * target)
    ours = np.mean([0.5 * np.abs(h / BS - t).sum() for h, t in distances(batches)])
    theirs = np.mean([0.5 * np.abs(h / BS - t).sum() for h, t in distances(plain_batches)])
    assert ours < 0.5 * theirs
    report = ds.describe()["plan"]
    assert report["kind"] == "stratified" and report["batches"] == len(batches)
    assert report["mean_distance"] == pytest.approx(ours)
    # Deterministic per (seed, epoch); another epoch differs.
    assert [b.tolist() for b in _epoch(_dataset(store_path, labels="y", plan="stratified"), 0)] == \
        [b.tolist() for b in batches]
    assert [b.tolist() for b in _epoch(ds, 1)] != [b.tolist() for b in batches]


def test_balanced_batches_hold_equal_classes(store_path):
    labels = _chunk_labels()
    ds = _dataset(store_path, labels=labels, plan="balanced")
    for epoch in range(2):
        batches = _epoch(ds, epoch)
        assert len(batches) == len(ds.train)
        for idx in batches:
            assert np.bincount(labels[idx], minlength=4).tolist() == [BS // 4] * 4
        # Batches come from their block's chunks only, and each chunk is read once a pass
        # (a hit: kept from the epoch before).
        p = ds.last_pass
        assert p.cache_misses + p.cache_hits == N // SPC and p.rereads == 0
        seen = np.concatenate(batches)
        assert set(np.unique(labels[seen])) == {0, 1, 2, 3}
        assert np.bincount(labels[seen]).tolist() == [len(seen) // 4] * 4  # minority oversampled
    report = ds.describe()["plan"]
    assert report["exact_batches"] == report["batches"] and report["max_distance"] == 0.0


def test_a_block_missing_a_class_shares_its_rows_and_says_so(store_path):
    ds = _dataset(store_path, labels="y", plan="balanced")  # 5% of class 3: some blocks lack it
    batches = _epoch(ds, 0)
    labels = zarr.open_array(zarr.storage.LocalStore(store_path), path="y")[:]
    counts = np.array([np.bincount(labels[idx], minlength=4) for idx in batches])
    assert (counts.sum(axis=1) == BS).all()
    report = ds.describe()["plan"]
    assert report["exact_batches"] == int((counts == BS // 4).all(axis=1).sum()) < len(batches)


@pytest.mark.parametrize("kw, match", [
    (dict(labels="every", plan="balanced", batch_size=18), "not divisible by the 4 classes"),
    (dict(labels=np.zeros(N - 1), plan="stratified"), f"{N - 1} values, but the sample axis has {N}"),
    (dict(plan="stratified"), "needs labels="),
    (dict(labels="every"), 'used by plan="stratified" or "balanced"'),
    (dict(labels="every", plan="clustered"), "plan must be one of"),
    (dict(labels="x", plan="stratified"), "must be 1-D along the sample axis"),
    (dict(labels=np.full(N, np.nan), plan="stratified"), "NaN"),
])
def test_bad_arguments_are_clear(store_path, kw, match):
    kw = {"batch_size": BS, **kw}
    store = local_store(store_path)
    g = open_geometries(store, ["x"])
    with pytest.raises(InvalidArgumentError, match=match):
        InSituDataset(store, split_by_chunk(g["x"], fractions=(1.0, 0.0, 0.0)), g, block_chunks=BLOCK, **kw)
