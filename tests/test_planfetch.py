"""planfetch without a framework: index loading, packed URI lists, plans, and the shared
disk cache against moto's S3 server with signature checks on (behind a fault proxy that
counts requests), across threads and processes."""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from planfetch_data import IMAGE_BUCKET, N_CLASSES, N_IMAGES, image_bytes, key_of

import planfetch as pf
from insitubatch import InvalidArgumentError, NotFoundError

TESTS = Path(__file__).resolve().parent


# -- index loading -----------------------------------------------------------------------------
def test_load_index_csv_plain_packed_and_from_a_dataframe(tmp_path):
    index = tmp_path / "train.csv"
    index.write_text("id,s3_path,class_id\n" + "".join(
        f'{i},"s3://bkt/train/c{i % 3}/img_{i:04d}.jpg",{i % 3}\n' for i in range(50)))
    uris, labels = pf.load_index_csv(index, s3_uri_col="s3_path", class_col="class_id")
    assert isinstance(uris, list) and uris[7] == "s3://bkt/train/c1/img_0007.jpg"
    assert labels.dtype == np.int64 and labels.tolist() == [i % 3 for i in range(50)]
    packed, labels2 = pf.load_index_csv(index, s3_uri_col="s3_path", class_col="class_id", pack_uris=True)
    assert isinstance(packed, pf.S3KeyList) and packed.prefix == "s3://bkt/"
    assert packed == uris and list(packed) == uris and len(packed) == 50
    assert packed[-1] == uris[-1] and packed[3:6] == uris[3:6] and isinstance(packed[3:6], pf.S3KeyList)
    assert pickle.loads(pickle.dumps(packed)) == uris
    np.testing.assert_array_equal(labels, labels2)
    deep, _ = pf.load_index_csv(index, s3_uri_col="s3_path", class_col="class_id", pack_uris=True,
                                compact_prefix="s3://bkt/train/")
    assert deep.prefix == "s3://bkt/train/" and deep == uris
    import pandas as pd

    df = pd.read_csv(index)
    from_df, df_labels = pf.load_index_dataframe(df, s3_uri_col="s3_path", class_col="class_id", pack_uris=True)
    assert from_df == uris and df_labels.tolist() == labels.tolist()


@pytest.mark.parametrize("text, kwargs, match", [
    ("", {}, "is empty"),
    ("s3_path,class_id\n", {}, "no rows"),
    ("uri,label\ns3://b/a,1\n", {}, 'no column "s3_path"'),
    ("s3_path,class_id\ns3://b/x/a,1\ns3://b/y/b,2\n", {"pack_uris": True, "compact_prefix": "s3://b/x/"},
     "row 1"),
    ("s3_path,class_id\ns3://a/k,1\ns3://b/k,2\n", {"pack_uris": True}, "one bucket"),
])
def test_bad_indexes_name_what_and_where(tmp_path, text, kwargs, match):
    index = tmp_path / "bad.csv"
    index.write_text(text)
    with pytest.raises(InvalidArgumentError, match=match):
        pf.load_index_csv(index, s3_uri_col="s3_path", class_col="class_id", **kwargs)
    with pytest.raises(NotFoundError):
        pf.load_index_csv(tmp_path / "missing.csv")


def test_two_million_uris_pack_small(tmp_path):
    uris = pf.S3KeyList((f"s3://my-bucket/train/class_{i % 1000:03d}/img_{i:07d}.jpg" for i in range(200_000)))
    per_uri = uris.memory_bytes / len(uris)
    assert per_uri * 2_000_000 <= 48e6, per_uri  # the target: half the seed's 96 MB
    assert uris[123_456] == "s3://my-bucket/train/class_456/img_0123456.jpg"


# -- plans -------------------------------------------------------------------------------------
def test_plans_are_pure_functions_of_seed_and_epoch():
    n, bs = 1000, 64
    shuffle = pf.ShuffleOncePerEpochPlanProvider(n, bs, seed=3)
    a, b = shuffle.make_epoch_plan(0), shuffle.make_epoch_plan(0)
    assert np.array_equal(a.matrix, b.matrix) and not np.array_equal(a.matrix, shuffle.make_epoch_plan(1).matrix)
    assert a.matrix.shape == (16, 64) and sorted(a.range_flat(0, 16).tolist()) == list(range(n))
    assert (a.matrix[-1] == -1).sum() == 16 * 64 - n  # the last batch is padded
    assert [len(x) for x in a][-1] == n - 15 * 64
    seq = pf.SequentialPlanProvider(n, bs).make_epoch_plan(5)
    assert seq.range_flat(2, 4).tolist() == list(range(128, 256))
    ranks = [a.shard(r, 3) for r in range(3)]
    assert {len(r) for r in ranks} == {5}  # equal steps on every rank
    assert len(np.intersect1d(ranks[0].range_flat(0, 5), ranks[1].range_flat(0, 5))) == 0


def test_stratified_batches_follow_the_class_mix():
    labels = np.repeat(np.arange(4), [400, 300, 200, 100])
    provider = pf.StreamingStratifiedBatchPlanProvider(labels, batch_size=50, epoch_samples=1000, seed=1)
    plan = provider.make_epoch_plan(0)
    for row in plan:
        counts = np.bincount(labels[row], minlength=4)
        assert np.all(np.abs(counts - [20, 15, 10, 5]) <= 1), counts
    assert sorted(plan.range_flat(0, 20).tolist()) == list(range(1000))  # each sample once
    assert not np.array_equal(plan.matrix, provider.make_epoch_plan(1).matrix)


def test_balanced_batches_hold_exactly_equal_classes():
    labels = np.repeat(np.arange(4), [400, 300, 200, 10])
    provider = pf.BalancedSubsamplingPlanProvider.from_batch_size(labels, batch_size=32, epoch_samples=640, seed=2)
    plan = provider.make_epoch_plan(3)
    assert plan.matrix.shape == (20, 32)
    for row in plan:
        assert np.bincount(labels[row], minlength=4).tolist() == [8, 8, 8, 8]
    with pytest.raises(InvalidArgumentError, match="not divisible by the 4 classes"):
        pf.BalancedSubsamplingPlanProvider.from_batch_size(labels, batch_size=30, epoch_samples=640)


def test_big_plans_are_fast_and_thrifty():
    import tracemalloc

    labels = np.random.default_rng(0).integers(0, 1000, 2_000_000)
    provider = pf.StreamingStratifiedBatchPlanProvider(labels, batch_size=256, epoch_samples=2_000_000, seed=123)
    tracemalloc.start()
    plan = provider.make_epoch_plan(0)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak - plan.matrix.nbytes <= 20e6  # the target: 20 MB beyond the matrix (time: bench)
    assert plan.matrix.shape == (7813, 256)


# -- the shared disk cache against moto --------------------------------------------------------
def _object_gets(proxy) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in proxy.requests:
        if r["method"] == "GET" and f"/{IMAGE_BUCKET}/train/" in r["path"]:
            out[r["path"]] = out.get(r["path"], 0) + 1
    return out


def test_ensure_local_downloads_each_object_once_with_signatures_checked(images, tmp_path, moto_auth):
    index, proxy = images
    uris, labels = pf.load_index_csv(index, s3_uri_col="s3_path", class_col="class_id", pack_uris=True)
    cache = pf.SharedDiskCache(tmp_path / "cache", download_threads=8)
    cache.prefetch(uris[:40])
    paths: list[str] = [""] * N_IMAGES

    def worker(k: int) -> None:
        for i in range(k, N_IMAGES, 4):
            paths[i] = cache.ensure_local(uris[i])

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(N_IMAGES):
        assert Path(paths[i]).read_bytes() == image_bytes(i)[0]
        assert paths[i].startswith(str(tmp_path / "cache")) and paths[i].endswith(key_of(i))
    assert all(n == 1 for n in _object_gets(proxy).values()) and len(_object_gets(proxy)) == N_IMAGES
    assert cache.stats()["downloads"] == N_IMAGES
    assert not list((tmp_path / "cache").rglob("*.insitu-dl"))


def test_faults_are_retried_to_exact_bytes(images, tmp_path):
    index, proxy = images
    uris, _ = pf.load_index_csv(index, s3_uri_col="s3_path", class_col="class_id")
    proxy.plan.per_path(["503", "reset", "truncate"])
    cache = pf.SharedDiskCache(tmp_path / "cache", download_threads=4)
    for i in range(12):
        assert Path(cache.ensure_local(uris[i])).read_bytes() == image_bytes(i)[0]
    assert cache.stats()["retries"] >= 36


def _child(body: str, env: dict) -> subprocess.Popen:
    code = "import sys\nsys.path.insert(0, %r)\n" % str(TESTS) + textwrap.dedent(body)
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, **env})


def test_processes_share_downloads_and_a_killed_downloader_leaves_nothing_partial(images, tmp_path):
    index, proxy = images
    cache_dir = tmp_path / "cache"
    uris, _ = pf.load_index_csv(index, s3_uri_col="s3_path", class_col="class_id")
    body = f"""
        import planfetch as pf
        cache = pf.SharedDiskCache({str(cache_dir)!r}, download_threads=4)
        uris, _ = pf.load_index_csv({str(index)!r}, s3_uri_col="s3_path", class_col="class_id")
        for u in uris[:30]:
            cache.ensure_local(u)
        print("done", cache.stats()["downloads"], cache.stats()["waited_elsewhere"])
    """
    proxy.plan.latency = 0.05  # slow enough that the two processes overlap
    procs = [_child(body, {}) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    downloads = sum(int(o[0].split()[1]) for o in outs)
    assert downloads == 30 and all(n == 1 for n in _object_gets(proxy).values())
    # A downloader killed mid-download: the object is not there, and the next one takes over.
    proxy.plan.latency = 0.0
    proxy.plan.always("hang")
    victim = _child(f"""
        import planfetch as pf
        cache = pf.SharedDiskCache({str(cache_dir)!r})
        print("started", flush=True)
        cache.ensure_local({uris[40]!r})
    """, {})
    assert victim.stdout.readline().strip() == "started"
    cache = pf.SharedDiskCache(cache_dir)
    temp = Path(cache.local_path(uris[40]) + ".insitu-dl")
    deadline = time.monotonic() + 10
    while not temp.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=30)
    assert not Path(cache.local_path(uris[40])).exists()  # nothing partial under the name
    proxy.plan.clear()
    assert Path(cache.ensure_local(uris[40])).read_bytes() == image_bytes(40)[0]
    assert not temp.exists()


def test_the_coordinator_keeps_exactly_the_window(images, tmp_path):
    index, proxy = images
    uris, _ = pf.load_index_csv(index, s3_uri_col="s3_path", class_col="class_id", pack_uris=True)
    cache = pf.SharedDiskCache(tmp_path / "cache", min_age_seconds_before_delete=0)
    plan = pf.ShuffleOncePerEpochPlanProvider(N_IMAGES, 8, seed=4).make_epoch_plan(0)
    coordinator = pf.PrefetchCoordinator(cache, uris, batches_ahead=3, batches_back=1, prune_every=1)
    coordinator.set_plan(plan)
    coordinator.prime()
    for i, batch in enumerate(plan):
        for s in batch:
            cache.ensure_local(uris[int(s)])
        coordinator.on_batch_yielded(i)
        while cache.stats()["in_flight"] or cache.stats()["queued"]:
            time.sleep(0.005)
        on_disk = {str(p) for p in (tmp_path / "cache").rglob("*") if p.is_file()}
        window = {cache.local_path(uris[int(s)]) for s in plan.range_flat(i, i + 4)}
        assert on_disk == window, i
    assert all(n == 1 for n in _object_gets(proxy).values())


def test_the_boto3_backend_serves_the_same_files(images, tmp_path, moto):
    import boto3

    index, proxy = images
    uris, _ = pf.load_index_csv(index, s3_uri_col="s3_path", class_col="class_id")
    client = boto3.client("s3", endpoint_url=proxy.url, region_name="us-east-1",
                          aws_access_key_id=moto.access_key_id, aws_secret_access_key=moto.secret_access_key)
    cache = pf.SharedDiskCache(tmp_path / "cache", s3_client=client, download_threads=4)
    assert not cache.use_rust
    for i in range(6):
        assert Path(cache.ensure_local(uris[i])).read_bytes() == image_bytes(i)[0]
    assert Path(cache.ensure_local(uris[0])).read_bytes() == image_bytes(0)[0]
    with pytest.raises(NotFoundError, match="no such object"):
        cache.ensure_local(f"s3://{IMAGE_BUCKET}/train/missing.jpg")


def test_bad_input_gets_clear_errors(images, tmp_path, moto_auth, monkeypatch):
    index, proxy = images
    cache = pf.SharedDiskCache(tmp_path / "cache")
    with pytest.raises(InvalidArgumentError, match="unsupported URI scheme"):
        cache.ensure_local("ftp://host/x.jpg")
    with pytest.raises(NotFoundError, match="no such object"):
        cache.ensure_local(f"s3://{IMAGE_BUCKET}/nope.jpg")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    wrong = pf.SharedDiskCache(tmp_path / "cache2")
    with pytest.raises(Exception, match="403|SignatureDoesNotMatch"):
        wrong.ensure_local(f"s3://{IMAGE_BUCKET}/{key_of(0)}")
    for kwargs, match in [(dict(batches_back=-1), "batches_back"), (dict(prune_mode="lru"), "prune_mode"),
                          (dict(prune_backend="x"), "prune_backend")]:
        with pytest.raises(InvalidArgumentError, match=match):
            pf.PrefetchCoordinator(cache, [f"s3://{IMAGE_BUCKET}/a"], **kwargs)
    with pytest.raises(InvalidArgumentError, match="download_threads"):
        pf.SharedDiskCache(tmp_path / "c3", download_threads=0)
    unreachable = pf.SharedDiskCache(tmp_path / "c4", endpoint="http://127.0.0.1:1", connect_retry_timeout="1s")
    with pytest.raises(Exception, match="connection refused"):
        unreachable.ensure_local(f"s3://{IMAGE_BUCKET}/{key_of(0)}")
    assert not [p for p in (tmp_path / "c4").rglob("*") if p.is_file()]  # nothing half-written


# -- races, closing and a full disk (local objects: fast enough to race hard) ------------------
def _local_objects(root: Path, n: int) -> list[str]:
    root.mkdir()
    for i in range(n):
        (root / f"o{i:04d}.bin").write_bytes(bytes([i % 251]) * (1000 + i))
    return [f"file://{root}/o{i:04d}.bin" for i in range(n)]


def test_downloads_racing_prunes_across_processes_stay_exact(tmp_path):
    """Processes fetch the same objects while this one prunes everything it can, again and
    again: a download lock whose temp file was renamed and pruned under it must never be
    taken for the current one (the rename would fail, or bytes land in a deleted file)."""
    uris = _local_objects(tmp_path / "src", 200)
    cache_dir = tmp_path / "cache"
    body = f"""
        import random
        import planfetch as pf
        cache = pf.SharedDiskCache({str(cache_dir)!r}, download_threads=8, min_age_seconds_before_delete=0)
        uris = {uris!r}
        rng = random.Random()
        for _ in range(4):
            rng.shuffle(uris)
            cache.prefetch(uris[:50])
            for u in uris:
                i = int(u[-8:-4])
                for attempt in range(1000):  # a file may be pruned between the return and the open
                    try:
                        with open(cache.ensure_local(u), "rb") as f:
                            data = f.read()
                        break
                    except FileNotFoundError:
                        pass
                assert data == bytes([i % 251]) * (1000 + i), u
        print("ok")
    """
    procs = [_child(body, {}) for _ in range(3)]
    pruner = pf.SharedDiskCache(cache_dir, min_age_seconds_before_delete=0)
    prunes = 0
    while any(p.poll() is None for p in procs):
        prunes += pruner.prune(mode="window", backend="scan")["removed_files"]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 and o[0].strip() == "ok" for p, o in zip(procs, outs)), outs
    assert prunes > 100  # it did race
    assert not list(cache_dir.rglob("*.insitu-dl"))


def test_close_cancels_downloads_and_keeps_files(tmp_path):
    uris = _local_objects(tmp_path / "src", 10)
    with pf.SharedDiskCache(tmp_path / "cache") as cache:
        kept = cache.ensure_local(uris[0])
    cache.close()  # idempotent
    assert cache.ensure_local(uris[0]) == kept  # what is there stays readable
    from insitubatch import CancelledError

    with pytest.raises(CancelledError, match="closed"):
        cache.ensure_local(uris[1])
    assert not list((tmp_path / "cache").rglob("*.insitu-dl"))


def test_plan_views_index_like_sequences():
    plan = pf.SequentialPlanProvider(10, 4).make_epoch_plan(0)
    assert plan[0].tolist() == [0, 1, 2, 3] and plan[-1].tolist() == [8, 9]
    with pytest.raises(IndexError, match="batch 3 of a plan of 3"):
        plan[3]


def test_a_full_disk_is_a_clear_error_and_leaves_nothing_partial(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "big.bin").write_bytes(b"x" * 200_000)
    (src / "small.bin").write_bytes(b"y" * 1000)
    cache_dir = tmp_path / "tiny"
    cache_dir.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(cache_dir)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        from insitubatch import ResourceExhaustedError

        cache = pf.SharedDiskCache(cache_dir)
        with pytest.raises(ResourceExhaustedError, match=r"big\.bin.*the disk holding the cache directory is full"):
            cache.ensure_local(f"file://{src}/big.bin")
        assert not [p for p in cache_dir.rglob("*") if p.is_file()]  # nothing half-written
        assert Path(cache.ensure_local(f"file://{src}/small.bin")).read_bytes() == b"y" * 1000  # still usable
    finally:
        subprocess.run(["umount", "-l", str(cache_dir)], capture_output=True)


# -- ranks ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("world, remainder", [(1, "drop"), (3, "drop"), (5, "drop"), (5, "pad"), (20, "pad")])
def test_rank_plans_take_equal_steps_and_cover_the_epoch(world, remainder):
    base = pf.ShuffleOncePerEpochPlanProvider(100, batch_size=7, seed=4)  # 15 batches, the last short
    full = base.make_epoch_plan(3)
    plans = [pf.RankPlanProvider(base, rank=r, world_size=world, remainder=remainder).make_epoch_plan(3)
             for r in range(world)]
    steps = {p.num_batches for p in plans}
    assert steps == {15 // world if remainder == "drop" else -(-15 // world)}
    rows = [tuple(p.batch(i)) for p in plans for i in range(p.num_batches)]
    batches = {tuple(b) for b in full}
    assert set(rows) <= batches
    if remainder == "drop":
        assert len(rows) == len(set(rows)) == 15 // world * world  # disjoint; the last batches left out
        assert set(rows) == {tuple(full.batch(i)) for i in range(15 // world * world)}
    else:
        assert set(rows) == batches  # every batch, a few twice
    assert all(p.keep is None for p in plans)


def test_a_shared_cache_plan_keeps_every_local_ranks_batches(monkeypatch):
    base = pf.ShuffleOncePerEpochPlanProvider(64, batch_size=4, seed=1)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    plans = {r: pf.RankPlanProvider(base, rank=r, world_size=4, shared_cache=True).make_epoch_plan(0)
             for r in range(4)}
    for r, plan in plans.items():  # ranks 0, 1 on one host; 2, 3 on the other
        mates = (0, 1) if r < 2 else (2, 3)
        assert plan.keep.shape == (4, 8)
        assert np.array_equal(plan.keep, np.concatenate([plans[m].matrix for m in mates], axis=1))
    with pytest.raises(InvalidArgumentError, match="does not fit"):
        pf.RankPlanProvider(base, rank=1, world_size=4, shared_cache=True, local_rank=0, local_world_size=4)
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    with pytest.raises(InvalidArgumentError, match="local_world_size"):
        pf.RankPlanProvider(base, rank=0, world_size=2, shared_cache=True)
    with pytest.raises(InvalidArgumentError, match="remainder"):
        pf.RankPlanProvider(base, rank=0, world_size=2, remainder="wrap")
    with pytest.raises(InvalidArgumentError, match="together"):
        pf.RankPlanProvider(base, rank=0)
    with pytest.raises(InvalidArgumentError, match="PlanProvider"):
        pf.RankPlanProvider("shuffle", rank=0, world_size=2)
    with pytest.raises(InvalidArgumentError, match="rank must be in"):
        pf.RankPlanProvider(base, rank=2, world_size=2)
    with pytest.raises(InvalidArgumentError, match="remainder"):
        base.make_epoch_plan(0).shard(0, 2, remainder="wrap")
    with pytest.raises(InvalidArgumentError, match="keep plan"):
        pf.PlanView(np.zeros((4, 2), np.int64), keep=np.zeros((3, 2), np.int64))
    with pytest.raises(InvalidArgumentError, match="run_id"):
        pf.node_cache_dir("/nvme", run_id="../x")
    assert pf.node_cache_dir("/nvme", run_id=7) == "/nvme/run_7/node"
    assert pf.rank_cache_dir("/nvme", run_id=7, rank=3) == "/nvme/run_7/rank_3"


RANK_BODY = """
    import json
    import planfetch as pf
    from planfetch_data import image_bytes
    uris, _ = pf.load_index_csv({index!r}, s3_uri_col="s3_path", class_col="class_id", pack_uris=True)
    provider = pf.RankPlanProvider(pf.ShuffleOncePerEpochPlanProvider(len(uris), batch_size=7, seed=5),
                                   shared_cache={shared})
    cache = pf.SharedDiskCache({cache_dir!r}, download_threads=4, min_age_seconds_before_delete=0)
    sampler = pf.PlanBatchSampler(provider.make_epoch_plan(0))
    coordinator = pf.PrefetchCoordinator(cache, uris, batches_ahead=3, batches_back=1, prune_every=2,
                                         prune_mode="pressure", prune_backend="scan")
    controller = pf.PrefetchController(provider, sampler, coordinator)
    seen = []
    for epoch in range(2):
        controller.set_epoch(epoch)
        for i, batch in enumerate(sampler):
            for s in batch:
                with open(cache.ensure_local(uris[s]), "rb") as f:
                    assert f.read() == image_bytes(s)[0], s
            seen.append([epoch, batch])
            coordinator.on_batch_yielded(i)
    print(json.dumps({{"seen": seen, "downloads": cache.stats()["downloads"]}}))
"""


@pytest.mark.parametrize("shared", [True, False])
def test_ranks_sharing_a_node_cache_download_each_object_once_per_host(images, tmp_path, shared):
    import json

    index, proxy = images
    base = tmp_path / "nvme"
    procs = []
    for rank in range(2):
        cache_dir = pf.node_cache_dir(base, run_id="r") if shared else pf.rank_cache_dir(base, "r", rank)
        env = {"RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": "2"}
        procs.append(_child(RANK_BODY.format(index=str(index), shared=shared, cache_dir=cache_dir), env))
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    reports = [json.loads(o[0]) for o in outs]
    for epoch in range(2):  # 14 batches (the last short), 7 steps each: the epoch exactly once
        steps = [[b for e, b in r["seen"] if e == epoch] for r in reports]
        assert [len(s) for s in steps] == [7, 7]
        samples = [s for rank in steps for b in rank for s in b]
        assert sorted(samples) == list(range(N_IMAGES))
    got = _object_gets(proxy)
    if shared:  # epoch 1 finds what either rank fetched in epoch 0
        assert sum(r["downloads"] for r in reports) == N_IMAGES == len(got) and set(got.values()) == {1}
    else:  # each rank fetches again what the other had
        assert sum(got.values()) > N_IMAGES
