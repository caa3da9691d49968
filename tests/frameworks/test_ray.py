"""Ray Data: read_insitu on a local Ray cluster (ray.init(num_cpus=2)) over an archive served
by a loopback HTTP Range server that logs every request: exact values, every sample of the
split once, each chunk fetched once (it belongs to one read task), iter_torch_batches,
streaming_split for Ray Train, limits, and the epoch's order."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # servers.py lives in tests/

ray = pytest.importorskip("ray")

import insitubatch as ib  # noqa: E402
from insitubatch.frameworks.ray import PATCH_ORIGIN, SAMPLE_INDEX, read_insitu, task_chunks  # noqa: E402
from servers import RangeServer  # noqa: E402

N, SPC = 203, 8  # 26 chunks, the last short


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=200 << 20,
             configure_logging=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    import zarr

    root_dir = tmp_path_factory.mktemp("ray") / "s.zarr"
    root = zarr.open_group(str(root_dir), mode="w", zarr_format=3)
    x = np.arange(N * 3, dtype="f4").reshape(N, 3) / 7
    root.create_array("x", shape=x.shape, chunks=(SPC, 3), dtype="f4")[...] = x
    root.create_array("y", shape=(N,), chunks=(SPC,), dtype="i8")[...] = np.arange(N) * 10
    zarr.consolidate_metadata(str(root_dir))
    with RangeServer(root_dir) as server:
        yield server, x


def chunk_gets(server) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in server.requests:
        if r["method"] == "GET" and "/c/" in r["path"]:
            out[r["path"]] = out.get(r["path"], 0) + 1
    return out


def dataset(served, **kwargs):
    server, _ = served
    geoms = ib.open_geometries(server.url, ["x", "y"])
    manifest = ib.split_by_chunk(geoms["x"], fractions=(0.8, 0.2, 0.0), seed=3)
    return manifest, read_insitu(server.url, manifest, geoms, **{"batch_size": 16, "block_chunks": 4, **kwargs})


def test_every_sample_once_with_exact_values_and_each_chunk_fetched_once(cluster, served):
    server, x = served
    server.clear_log()
    manifest, ds = dataset(served, override_num_blocks=3)
    rows = ds.take_all()
    train = manifest.sample_indices("train")
    got = np.array([r[SAMPLE_INDEX] for r in rows])
    assert sorted(got.tolist()) == train.tolist()
    for r in rows:
        np.testing.assert_array_equal(r["x"], x[r[SAMPLE_INDEX]])
        assert r["y"] == 10 * r[SAMPLE_INDEX]
    gets = chunk_gets(server)
    # Two arrays, each train chunk of each fetched exactly once across the three tasks.
    assert len(gets) == 2 * len(manifest.chunk_ids("train")) and set(gets.values()) == {1}
    assert ds.count() == len(train)


def test_read_tasks_are_contiguous_runs_of_the_epochs_plan_blocks(served):
    _, x = served
    geoms = ib.open_geometries(served[0].url, ["x"])
    manifest = ib.split_by_chunk(geoms["x"], fractions=(1.0, 0.0, 0.0), seed=0)
    tasks = task_chunks(manifest, "train", shuffle=True, seed=5, epoch=2, block_chunks=4, tasks=3)
    flat = [c for t in tasks for c in t]
    order = np.asarray(manifest.chunk_ids("train"))[ib.chunk_permutation(manifest.chunk_ids("train"), seed=5,
                                                                          epoch=2)]
    assert flat == order.tolist() and len(tasks) == 3
    assert all(len(t) % 4 == 0 for t in tasks[:-1])  # whole plan blocks
    assert task_chunks(manifest, "train", shuffle=True, seed=5, epoch=3, block_chunks=4, tasks=3) != tasks
    assert len(task_chunks(manifest, "train", shuffle=False, seed=5, epoch=0, block_chunks=4, tasks=100)) == 7


def test_iter_torch_batches(cluster, served):
    torch = pytest.importorskip("torch")
    _, x = served
    manifest, ds = dataset(served, split="val")
    seen = []
    for batch in ds.iter_torch_batches(batch_size=10):
        assert batch["x"].dtype == torch.float32 and batch["x"].shape[1:] == (3,)
        idx = batch[SAMPLE_INDEX].numpy()
        np.testing.assert_array_equal(batch["x"].numpy(), x[idx])
        seen.extend(idx.tolist())
    assert seen == manifest.sample_indices("val").tolist()  # val: not shuffled, in order


def test_streaming_split_feeds_two_trainers_disjoint_equal_shares(cluster, served):
    manifest, ds = dataset(served)
    shards = ds.streaming_split(2, equal=True)
    seen: list[list[int]] = [[], []]

    def consume(k: int) -> None:
        for batch in shards[k].iter_batches(batch_size=8, batch_format="numpy"):
            seen[k].extend(batch[SAMPLE_INDEX].tolist())

    threads = [threading.Thread(target=consume, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert len(seen[0]) == len(seen[1]) > 0
    assert not set(seen[0]) & set(seen[1])
    assert set(seen[0]) | set(seen[1]) <= set(manifest.sample_indices("train").tolist())


def test_limits_epochs_and_bad_arguments(cluster, served):
    _, ds = dataset(served)
    assert len(ds.limit(5).take_all()) == 5
    _, e0 = dataset(served, epoch=0, override_num_blocks=2)
    _, e1 = dataset(served, epoch=1, override_num_blocks=2)
    first = [r[SAMPLE_INDEX] for r in e0.take_all()]
    assert sorted(first) == sorted(r[SAMPLE_INDEX] for r in e1.take_all())
    with pytest.raises(ib.InvalidArgumentError, match="streaming_split"):
        dataset(served, rank=0, world_size=2)
    with pytest.raises(ib.InvalidArgumentError, match="batch_size"):
        dataset(served, batch_size=0)
    with pytest.raises(ib.InvalidArgumentError, match="override_num_blocks"):
        dataset(served, override_num_blocks=0)
    with pytest.raises(ib.InvalidArgumentError, match="epoch"):
        dataset(served, epoch=-1)


def test_patches_and_sample_filters_read_through_ray(cluster, served):
    server, x = served
    keep = np.arange(N) % 5 != 0
    manifest, ds = dataset(served, override_num_blocks=3, patch={0: 2}, patch_stride=1, sample_filter=keep)
    train = [s for s in manifest.sample_indices("train").tolist() if keep[s]]
    assert ds.count() == 2 * len(train)
    rows = ds.take_all()
    got = sorted((int(r[SAMPLE_INDEX]), int(r[PATCH_ORIGIN][0])) for r in rows)
    assert got == sorted((s, o) for s in train for o in (0, 1))
    for r in rows:
        s, o = int(r[SAMPLE_INDEX]), int(r[PATCH_ORIGIN][0])
        np.testing.assert_array_equal(r["x"], x[s, o:o + 2])
        assert r["y"] == 10 * s
