"""planfetch under a real torch DataLoader, against moto S3 (signatures checked) behind a
proxy that counts requests: every decoded image equals its source, each object is
downloaded once, with num_workers 0 and 4 under fork and spawn; and the seed's two
snippets (plain PyTorch, your own Dataset) run as written."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the cloud fixtures live in tests/

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader, Dataset  # noqa: E402

from planfetch_data import IMAGE_BUCKET, N_CLASSES, N_IMAGES, decoded  # noqa: E402

import planfetch as pf  # noqa: E402


def gets(proxy) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in proxy.requests:
        if r["method"] == "GET" and f"/{IMAGE_BUCKET}/train/" in r["path"]:
            out[r["path"]] = out.get(r["path"], 0) + 1
    return out


def to_array(image):
    return torch.from_numpy(np.asarray(image).copy())


def pad_collate(batch):
    """Images differ in height: a list of tensors and a label tensor."""
    return [b[0] for b in batch], torch.tensor([b[1] for b in batch])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("workers, method", [(0, None), (4, "fork"), (4, "spawn")])
def test_a_prefetching_dataloader_gives_exact_images_downloading_each_once(images, tmp_path, moto_auth,
                                                                           workers, method):
    index, proxy = images
    uris, labels = pf.load_index_csv(index, s3_uri_col="s3_path", class_col="class_id", pack_uris=True)
    cache = pf.SharedDiskCache(tmp_path / "cache", download_threads=8, min_age_seconds_before_delete=0)
    ds = pf.S3PathDataset(uris, labels, cache=cache, transform=to_array)
    provider = pf.StreamingStratifiedBatchPlanProvider(np.asarray(labels), batch_size=8, epoch_samples=N_IMAGES,
                                                       seed=123)
    loader, controller = pf.build_prefetching_dataloader(
        dataset=ds, s3_uris=uris, plan_provider=provider, cache=cache, num_workers=workers,
        batches_ahead=12, batches_back=1, prune_every=2, prune_mode="window", prune_backend="scan",
        collate_fn=pad_collate, **({"multiprocessing_context": method} if method else {}))
    for epoch in range(2):
        plan = controller.set_epoch(epoch)
        seen = []
        for k, (images_, ys) in enumerate(loader):
            idx = plan.batch(k)
            assert ys.tolist() == [int(labels[i]) for i in idx]
            for i, image in zip(idx, images_):
                np.testing.assert_array_equal(image.numpy(), decoded(int(i)))
            seen.extend(idx.tolist())
        assert sorted(seen) == list(range(N_IMAGES))
        if epoch == 0:
            assert all(n == 1 for n in gets(proxy).values()) and len(gets(proxy)) == N_IMAGES
    # The window was pruned behind the loop: few files stay.
    files = [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]
    assert len(files) <= 14 * 8


def test_the_seeds_own_dataset_snippet(images, tmp_path):
    index, proxy = images
    train_uris, train_labels = pf.load_index_csv(index, s3_uri_col="s3_path", class_col="class_id")
    nvme_bytes = 10**9
    num_epochs = 2

    cache = pf.SharedDiskCache(str(tmp_path / "s3cache_train"), max_bytes=int(0.8 * nvme_bytes), download_threads=64)

    class MyDataset(Dataset):
        def __init__(self, s3_uris, labels, cache):
            self.s3_uris = s3_uris
            self.labels = labels
            self.cache = cache

        def __len__(self):
            return len(self.s3_uris)

        def __getitem__(self, idx):
            local_path = self.cache.ensure_local(self.s3_uris[idx])
            image = pf.loading.default_image_loader(local_path)
            return torch.from_numpy(np.asarray(image)[:24].copy()), int(self.labels[idx])

    plan_provider = pf.ShuffleOncePerEpochPlanProvider(n=len(train_uris), batch_size=16)
    batch_sampler = pf.PlanBatchSampler(plan_provider.make_epoch_plan(0))
    prefetch = pf.PrefetchCoordinator(cache=cache, s3_uris=train_uris, batches_ahead=200, batches_back=10,
                                      prune_every=5)
    dataloader = DataLoader(MyDataset(train_uris, train_labels, cache), batch_sampler=batch_sampler,
                            num_workers=2, pin_memory=False, persistent_workers=True)
    for epoch in range(num_epochs):
        plan = plan_provider.make_epoch_plan(epoch)
        batch_sampler.set_plan(plan)
        prefetch.set_plan(plan)
        prefetch.prime()
        for batch_idx, (images_, labels_batch) in enumerate(dataloader):
            assert labels_batch.tolist() == [int(train_labels[i]) for i in plan.batch(batch_idx)]
            prefetch.on_batch_yielded(batch_idx)
    assert all(n == 1 for n in gets(proxy).values())


def test_the_seeds_val_pattern_and_pressure_pruning_keeps_val_warm(images, tmp_path):
    index, proxy = images
    val_uris, val_labels = pf.load_index_csv(index, s3_uri_col="s3_path", class_col="class_id")
    val_cache = pf.SharedDiskCache(tmp_path / "s3cache_val", max_bytes=10**8, download_threads=32)
    val_ds = pf.S3PathDataset(val_uris, val_labels, cache=val_cache, transform=to_array)
    val_provider = pf.SequentialPlanProvider(n=len(val_ds), batch_size=16)
    val_loader, val_controller = pf.build_prefetching_dataloader(
        dataset=val_ds, s3_uris=val_uris, plan_provider=val_provider, cache=val_cache, num_workers=2,
        batches_ahead=50, batches_back=2, prune_every=2, prune_mode="pressure", prune_backend="scan",
        collate_fn=pad_collate)
    for epoch in range(2):
        val_controller.set_epoch(epoch)
        got = [y for _, ys in val_loader for y in ys.tolist()]
        assert got == [i % N_CLASSES for i in range(N_IMAGES)]
    assert all(n == 1 for n in gets(proxy).values())  # under max_bytes: nothing evicted, epoch 2 warm


@pytest.mark.timeout(300)
def test_a_resumed_epoch_yields_the_rest_of_its_plan_and_primes_there(images, tmp_path):
    index, _ = images
    uris, labels = pf.load_index_csv(index, s3_uri_col="s3_path", class_col="class_id", pack_uris=True)

    def build(cache_dir):
        cache = pf.SharedDiskCache(cache_dir, download_threads=4, min_age_seconds_before_delete=0)
        ds = pf.S3PathDataset(uris, labels, cache=cache, transform=to_array)
        provider = pf.StreamingStratifiedBatchPlanProvider(np.asarray(labels), batch_size=8,
                                                           epoch_samples=N_IMAGES, seed=5)
        return pf.build_prefetching_dataloader(dataset=ds, s3_uris=uris, plan_provider=provider, cache=cache,
                                               batches_ahead=4, batches_back=1, collate_fn=pad_collate)

    loader, controller = build(tmp_path / "a")
    plan = controller.set_epoch(3)
    full = [ys.tolist() for _, ys in loader]
    state = None
    for k, (_, ys) in enumerate(loader):  # an interrupted run of the same epoch
        if k == 2:
            state = controller.state_dict()
            break
    assert state == {"format": 1, "epoch": 3, "batch": 3}
    loader, controller = build(tmp_path / "b")  # a new process would start here, its cache empty
    resumed = controller.load_state_dict(state)
    assert np.array_equal(resumed.matrix, plan.matrix)
    rest = [ys.tolist() for _, ys in loader]
    assert rest == full[3:]
    with pytest.raises(ValueError, match="state_dict"):
        controller.load_state_dict({"epoch": 1})


DDP_SCRIPT = r'''
import json, sys
import numpy as np
import torch
import torch.distributed as dist
import planfetch as pf
sys.path.insert(0, sys.argv[3])
from planfetch_data import decoded

index, out = sys.argv[1], sys.argv[2]
dist.init_process_group("gloo")
uris, labels = pf.load_index_csv(index, s3_uri_col="s3_path", class_col="class_id", pack_uris=True)
cache = pf.SharedDiskCache(pf.node_cache_dir(sys.argv[4], run_id="t"), download_threads=4,
                           min_age_seconds_before_delete=0)
provider = pf.RankPlanProvider(pf.ShuffleOncePerEpochPlanProvider(len(uris), batch_size=5, seed=2),
                               shared_cache=True)


def collate(batch):
    return [torch.from_numpy(np.asarray(b[0]).copy()) for b in batch], torch.tensor([b[1] for b in batch])


ds = pf.S3PathDataset(uris, labels, cache=cache)
loader, controller = pf.build_prefetching_dataloader(
    dataset=ds, s3_uris=uris, plan_provider=provider, cache=cache, num_workers=2, batches_ahead=6,
    batches_back=1, prune_every=1, prune_mode="window", prune_backend="scan", collate_fn=collate,
    multiprocessing_context="fork")
seen, steps = [], []
for epoch in range(2):
    plan = controller.set_epoch(epoch)
    n = 0
    for k, (images, ys) in enumerate(loader):
        idx = plan.batch(k)
        for i, image in zip(idx, images):
            assert np.array_equal(image.numpy(), decoded(int(i))), i
        total = torch.tensor([1.0])
        dist.all_reduce(total)  # a rank short of a step would hang here
        assert total.item() == dist.get_world_size()
        seen.append([epoch, idx.tolist()])
        n += 1
    steps.append(n)
report = {"rank": dist.get_rank(), "steps": steps, "seen": seen}
gathered = [None] * dist.get_world_size()
dist.all_gather_object(gathered, report)
if dist.get_rank() == 0:
    json.dump(gathered, open(out, "w"))
dist.destroy_process_group()
'''


@pytest.mark.timeout(300)
def test_torchrun_ranks_share_one_node_cache_with_equal_steps(images, tmp_path):
    """Three ranks under torchrun (gloo), one cache directory for the host, window pruning
    by directory scan: equal steps (an all-reduce per step), exact images, the epoch's
    samples once across the ranks, and each object fetched at most once per epoch."""
    import json

    from fwtest_util import run_torchrun

    index, proxy = images
    script = tmp_path / "ddp.py"
    script.write_text(DDP_SCRIPT)
    out = tmp_path / "report.json"
    run_torchrun(script, index, out, Path(__file__).resolve().parents[1], tmp_path / "nvme")
    reports = json.loads(out.read_text())
    # 96 images in batches of 5: 20 batches (the last short), 6 steps per rank, 2 dropped.
    assert [r["steps"] for r in reports] == [[6, 6]] * 3
    for epoch in range(2):
        samples = [s for r in reports for e, b in r["seen"] if e == epoch for s in b]
        assert len(samples) == len(set(samples)) == 18 * 5
    got = gets(proxy)
    assert max(got.values()) <= 2 and sum(got.values()) <= 2 * 18 * 5
