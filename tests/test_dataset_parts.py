"""InSituDataset in parts: a frozen config (what pickling sends), a pure epoch planner, a
sizing step, passes that see a small context rather than the dataset, no import circles,
and one hierarchy per dataset."""

from __future__ import annotations

import ast
import dataclasses
import pickle
import warnings
from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr.codecs import ZstdCodec

import insitubatch
from insitubatch import InSituDataset, _ext, open_geometries, split_by_chunk
from insitubatch.dataset_config import DatasetConfig
from insitubatch.epochs import EpochPlanner
from insitubatch.passes import PassContext

PACKAGE = Path(insitubatch.__file__).parent


@pytest.fixture
def labelled(tmp_path):
    """A numeric array and a string label on the same sample axis (zarr-python 3)."""
    path = tmp_path / "l.zarr"
    values = np.arange(48 * 3, dtype="float32").reshape(48, 3)
    zarr.create_array(zarr.storage.LocalStore(path), name="t2m", shape=values.shape, chunks=(8, 3),
                      dtype="float32", compressors=[ZstdCodec(level=1)], fill_value=0)[...] = values
    names = np.array([f"station-{i}" for i in range(48)], dtype=object)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr-python warns that v3 strings are not yet in the spec
        zarr.create_array(zarr.storage.LocalStore(path), name="name", shape=(48,), chunks=(8,), dtype=str,
                          fill_value="")[...] = names
    return path, values, names


def test_the_hierarchy_is_read_once_per_dataset(labelled):
    path, values, names = labelled
    manifest = split_by_chunk(open_geometries(insitubatch.local_store(path), ["t2m"])["t2m"])
    counting = _ext.CountingStore(insitubatch.local_store(path))
    ds = InSituDataset(counting, manifest, batch_size=8, shuffle=False)  # the dataset opens the geometries
    for _ in range(2):  # two passes, each gathering the string label
        for batch in ds.all:
            np.testing.assert_array_equal(batch.arrays["t2m"], values[batch.sample_indices])
            assert batch.arrays["name"].tolist() == names[batch.sample_indices].tolist()
    metadata = {key: n for key, n in counting.reads().items() if key.endswith("zarr.json")}
    assert metadata and max(metadata.values()) == 1, metadata
    ds.close()


def test_pickling_sends_the_checked_config(labelled):
    path, values, _ = labelled
    store = insitubatch.local_store(path)
    geoms = open_geometries(store, ["t2m"])
    ds = InSituDataset(str(path), split_by_chunk(geoms["t2m"]), geoms, batch_size=8, seed=3, eviction="lru",
                       rank=1, world_size=2)
    ds.set_epoch(4)
    config = ds.__getstate__()["config"]
    assert isinstance(config, DatasetConfig)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.batch_size = 1  # type: ignore[misc]
    # The engine's defaults are resolved into it (a worker does not resolve them again).
    assert (config.max_inflight, config.eviction, config.rank, config.world_size) == (32, "lru", 1, 2)
    copy = pickle.loads(pickle.dumps(ds))
    assert (copy.epoch, copy.seed, copy.eviction, copy.rank, copy.world_size) == (4, 3, "lru", 1, 2)
    assert [b.sample_indices.tolist() for b in copy.train] == [b.sample_indices.tolist() for b in ds.train]
    copy.close()
    ds.close()


def test_the_planner_is_a_pure_function_of_config_and_epoch(labelled):
    path, _, _ = labelled
    geoms = open_geometries(insitubatch.local_store(path), ["t2m"])
    manifest = split_by_chunk(geoms["t2m"], fractions=(1.0, 0.0, 0.0))

    def planner(rank, world_size):
        return EpochPlanner(manifest=manifest, block_chunks=2, batch_size=4, seed=7, plan="shuffle", rank=rank,
                            world_size=world_size, remainder="drop", window=(2, 48), numeric_window=(0, 48),
                            class_codes=np.zeros(0, np.int32), n_classes=0)

    one = planner(0, 1)
    rows, bounds = one.pass_order("train", True, (0, 1), 5, [])
    again, again_bounds = planner(0, 1).pass_order("train", True, (0, 1), 5, [])
    np.testing.assert_array_equal(rows, again)
    np.testing.assert_array_equal(bounds, again_bounds)
    anchors = rows[:, 0] * 8 + rows[:, 1]
    assert sorted(anchors.tolist()) == list(range(2, 48))  # the window's edge anchors are gone
    assert not np.array_equal(rows, one.pass_order("train", True, (0, 1), 6, [])[0])  # another epoch
    shares = [planner(r, 2).pass_order("train", True, (r, 2), 5, []) for r in range(2)]
    assert len(shares[0][0]) == len(shares[1][0]) == planner(0, 2).rank_rows("train")  # equal steps
    both = np.concatenate([s[0][:, 0] * 8 + s[0][:, 1] for s in shares])
    assert len(set(both.tolist())) == len(both)  # disjoint


def test_a_pass_sees_a_context_not_the_dataset():
    fields = {f.name for f in dataclasses.fields(PassContext)}
    assert fields == {"labels", "offsets", "records", "string_arrays", "batch_transforms", "store_kind", "patch_dims",
                      "delivered", "finished"}
    source = (PACKAGE / "passes.py").read_text()
    assert "dataset" not in {n.id for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Name)}


def _imports(module: str) -> set[str]:
    """Every insitubatch module ``module`` imports, at any depth of its code (lazy imports
    and TYPE_CHECKING ones too)."""
    tree = ast.parse((PACKAGE / f"{module}.py").read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                out.add(node.module.split(".")[0])
            else:
                out.update(alias.name for alias in node.names)
    return {m for m in out if (PACKAGE / f"{m}.py").exists()}


@pytest.mark.parametrize("a, b", [("dataset", "passes"), ("geometry", "strings"), ("dataset", "epochs"),
                                  ("dataset", "dataset_sizing"), ("dataset", "dataset_config")])
def test_no_import_circle(a, b):
    assert not (b in _imports(a) and a in _imports(b)), f"{a} and {b} import each other"
    assert "dataset" not in _imports("passes") | _imports("epochs") | _imports("dataset_config")


def test_the_dataset_holds_the_api_and_each_sampling_feature_wires_itself_in_its_own_module():
    """InSituDataset delegates: opening, crops, patches, filters and chunk transforms are
    built in the modules named for them and composed by sampling.py, so a new feature adds a
    module rather than methods (the class stays a holder, well under its old ~600 lines)."""
    tree = ast.parse((PACKAGE / "dataset.py").read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "InSituDataset")
    assert cls.end_lineno - cls.lineno < 350
    assert not {"patching", "crops", "sample_filters", "transforms"} & _imports("dataset")
    assert {"opening", "sampling"} <= _imports("dataset")
    for feature in ("crops", "patching", "sample_filters", "transforms", "opening"):
        assert "sampling" not in _imports(feature) and "dataset" not in _imports(feature), feature


def test_the_next_epochs_order_is_made_after_the_first_batch_and_still_guides_eviction(tmp_path, monkeypatch):
    """Eviction by next use looks one epoch ahead; that order (and its plan in the engine)
    took ~1 s before the first read at a million chunks, so a pass gets it only once its
    first batch is out. Across epochs it still reads fewer chunks than LRU."""
    path = tmp_path / "e.zarr"
    values = np.random.default_rng(0).standard_normal((256, 16, 16)).astype("f4")
    zarr.create_array(zarr.storage.LocalStore(path), name="x", shape=values.shape, chunks=(4, 16, 16),
                      dtype="float32", compressors=None, fill_value=0)[...] = values
    geoms = open_geometries(insitubatch.local_store(path), ["x"])
    manifest = split_by_chunk(geoms["x"], fractions=(1.0, 0.0, 0.0))
    asked: list[int] = []
    original = EpochPlanner.order

    def recording(self, split, shuffled, epoch, share=(0, 1)):
        asked.append(epoch)
        return original(self, split, shuffled, epoch, share)

    monkeypatch.setattr(EpochPlanner, "order", recording)
    misses = {}
    for eviction in ("next_use", "lru"):
        ds = InSituDataset(str(path), manifest, geoms, batch_size=8, block_chunks=2, eviction=eviction,
                           cache_budget_bytes=24 * 4 * 16 * 16 * 4)  # 24 of 64 chunks
        misses[eviction] = 0
        for epoch in range(3):
            ds.set_epoch(epoch)
            asked.clear()
            it = iter(ds.train)
            first = next(it)
            assert epoch + 1 not in asked  # not before the first batch
            rest = list(it)
            assert (epoch + 1 in asked) == (eviction == "next_use")
            seen = np.concatenate([first.sample_indices] + [b.sample_indices for b in rest])
            assert sorted(seen.tolist()) == list(range(256))
            for b in [first, *rest]:
                np.testing.assert_array_equal(b.arrays["x"], values[b.sample_indices])
            if epoch:
                misses[eviction] += ds.last_pass.cache_misses
        ds.close()
    assert misses["next_use"] < misses["lru"], misses
