"""planfetch and insitubatch under a real PyTorch Lightning Trainer (CPU, a tiny model, two
epochs with validation): the seed's DataModule + S3PrefetchLightningCallback pattern against
moto S3 (signatures checked), and InSituDataModule over a zarr-python store. Each checks
what the loop saw, batch by batch: every epoch follows its own plan, validation is
sequential, and the step counts are what the plans imply."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the cloud fixtures live in tests/

torch = pytest.importorskip("torch")
pl = pytest.importorskip("pytorch_lightning")

from planfetch_data import N_CLASSES, N_IMAGES, decoded  # noqa: E402

import planfetch as pf  # noqa: E402

EPOCHS = 2


def _trainer(callbacks=()) -> "pl.Trainer":
    return pl.Trainer(accelerator="cpu", max_epochs=EPOCHS, callbacks=list(callbacks), logger=False,
                      enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)


class Recorder(pl.LightningModule):
    """A linear classifier that records the labels (or sample indices) of every batch."""

    def __init__(self, in_features: int, key=None) -> None:
        super().__init__()
        self.key = key
        self.net = torch.nn.Linear(in_features, N_CLASSES)
        self.train_seen: list[list[list[int]]] = []
        self.val_seen: list[list[int]] = []

    def _split(self, batch):
        if self.key is None:  # planfetch: (images, labels)
            x, y = batch
            return x.float().flatten(1), y, y
        x = batch[self.key].float().flatten(1)
        idx = (x[:, 0] // x.shape[1]).long()  # the store holds arange: a row's first value names it
        return x, idx % N_CLASSES, idx

    def on_train_epoch_start(self) -> None:
        self.train_seen.append([])

    def training_step(self, batch, batch_idx):
        x, y, seen = self._split(batch)
        self.train_seen[-1].append(seen.tolist())
        return torch.nn.functional.cross_entropy(self.net(x), y.long())

    def validation_step(self, batch, batch_idx):
        x, y, seen = self._split(batch)
        self.val_seen.append(seen.tolist())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def crop(image: np.ndarray) -> "torch.Tensor":
    return torch.from_numpy(np.ascontiguousarray(image[:24]))  # the images are 24-28 rows tall


def image_loader(path: str) -> np.ndarray:
    from PIL import Image

    with Image.open(path) as im:
        return np.array(im.convert("RGB"))


class MyDataModule(pl.LightningDataModule):
    """The seed's DataModule, with a loopback index and cache directories under tmp."""

    def __init__(self, train_csv: str, cache_root: Path, val_count: int) -> None:
        super().__init__()
        self.train_csv, self.cache_root, self.val_count = train_csv, cache_root, val_count

    def setup(self, stage=None):
        if hasattr(self, "train_loader"):
            return
        uris, labels = pf.load_index_csv(self.train_csv, s3_uri_col="s3_path", class_col="class_id")
        self.train_uris, self.train_labels = uris, labels
        self.val_uris, self.val_labels = uris[-self.val_count:], labels[-self.val_count:]
        self.train_cache = pf.SharedDiskCache(str(self.cache_root / "s3cache_train"), download_threads=16)
        self.val_cache = pf.SharedDiskCache(str(self.cache_root / "s3cache_val"), download_threads=8)
        self.train_ds = pf.S3PathDataset(self.train_uris, self.train_labels, cache=self.train_cache,
                                         image_loader=image_loader, transform=crop)
        self.val_ds = pf.S3PathDataset(self.val_uris, self.val_labels, cache=self.val_cache,
                                       image_loader=image_loader, transform=crop)
        self.train_provider = pf.StreamingStratifiedBatchPlanProvider(
            np.asarray(self.train_labels), batch_size=8, epoch_samples=48, seed=123)
        self.val_provider = pf.SequentialPlanProvider(n=len(self.val_ds), batch_size=4)
        self.train_loader, self.train_controller = pf.build_prefetching_dataloader(
            dataset=self.train_ds, s3_uris=self.train_uris, plan_provider=self.train_provider,
            cache=self.train_cache, num_workers=2, batches_ahead=8, batches_back=2, prune_every=2,
            prune_mode="window", prune_backend="scan")
        self.val_loader, self.val_controller = pf.build_prefetching_dataloader(
            dataset=self.val_ds, s3_uris=self.val_uris, plan_provider=self.val_provider, cache=self.val_cache,
            num_workers=0, batches_ahead=8, batches_back=2, prune_every=20, prune_mode="window",
            prune_backend="scan")

    def train_dataloader(self):
        return self.train_loader

    def val_dataloader(self):
        return self.val_loader


@pytest.mark.timeout(300)
def test_the_seeds_datamodule_and_callback_under_a_trainer(images, tmp_path):
    index, _ = images
    datamodule = MyDataModule(str(index), tmp_path, val_count=16)
    datamodule.setup("fit")  # the seed builds the callback from the controllers setup() makes
    callback = pf.S3PrefetchLightningCallback(train_controller=datamodule.train_controller,
                                              val_controller=datamodule.val_controller)
    assert isinstance(callback, pl.Callback)
    model = Recorder(24 * 32 * 3)
    trainer = _trainer([callback])
    trainer.fit(model, datamodule=datamodule)

    assert callback.epochs_set == list(range(EPOCHS))
    plans = [datamodule.train_provider.make_epoch_plan(e) for e in range(EPOCHS)]
    labels = np.asarray(datamodule.train_labels)
    for epoch, plan in enumerate(plans):  # each epoch followed its own plan, batch for batch
        assert model.train_seen[epoch] == [labels[plan.batch(k)].tolist() for k in range(len(plan))]
    assert plans[0].matrix.tolist() != plans[1].matrix.tolist()
    assert trainer.global_step == EPOCHS * 6  # 48 samples a epoch in batches of 8
    # Validation: the sanity check's 2 batches, then every epoch's full pass, all in order.
    val_labels = np.asarray(datamodule.val_labels).tolist()
    passes = [val_labels[:8]] + [val_labels] * EPOCHS
    assert [y for batch in model.val_seen for y in batch] == [y for p in passes for y in p]


@pytest.mark.timeout(300)
def test_insitu_datamodule_under_a_trainer(tmp_path):
    import zarr

    from insitubatch import InSituDataset, local_store, open_geometries, split_by_chunk
    from insitubatch.frameworks.lightning import InSituDataModule

    n, field = 96, (4, 5)
    values = np.arange(n * field[0] * field[1], dtype="float32").reshape(n, *field)
    zarr.create_array(zarr.storage.LocalStore(tmp_path / "s.zarr"), name="x", shape=values.shape,
                      chunks=(8, *field), dtype="float32")[:] = values
    store = local_store(tmp_path / "s.zarr")
    geoms = open_geometries(store, ["x"])
    manifest = split_by_chunk(geoms["x"], fractions=(0.75, 0.25, 0.0))
    ds = InSituDataset(store, manifest, geoms, batch_size=8, block_chunks=2, seed=7)
    dm = InSituDataModule(ds)
    model = Recorder(field[0] * field[1], key="x")
    trainer = _trainer()
    trainer.fit(model, datamodule=dm)

    expected = []
    for epoch in range(EPOCHS):  # what ds.train yields for each epoch, straight from the engine
        ds.set_epoch(epoch)
        expected.append([b.sample_indices.tolist() for b in ds.train])
    assert model.train_seen == expected and expected[0] != expected[1]
    assert trainer.global_step == sum(len(e) for e in expected)
    val = [b.sample_indices.tolist() for b in ds.val]
    assert val == sorted(val) and model.val_seen[-len(val):] == val  # sequential, the same each pass
