"""The memory model is the engine's, in one bound call (``_ext.memory_model``): describe()'s
figures are that call's, term by term, for the configurations that exercise each term, and
the disk term is what a cache_dir really holds once every split is read."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr.codecs import ZstdCodec

import insitubatch
from insitubatch import InSituDataset, _ext, applies, open_geometries, split_by_chunk
from insitubatch import summary as S
from insitubatch.geometry import ArrayGeometry

_MEMORY_TERMS = ("residency_bytes", "inflight_bytes", "queue_bytes", "scratch_bytes", "accounted_bytes",
                 "estimated_peak_bytes", "budget_is_automatic", "working_set_bytes", "disk_bytes")
_LABEL_TERMS = ("stored_chunk_bytes", "slot_bytes", "logical_chunk_bytes", "gather_run_bytes")


def _cfg(**kw):
    base = dict(batch_size=32, block_chunks=4, block_chunks_requested=4, max_inflight=8, prefetch_depth=2,
                shuffle=True, seed=0, cache_budget_bytes=None, samples_per_chunk=4,
                split_chunks={"train": 20, "val": 3, "test": 2})
    base.update(kw)
    return S.SummaryConfig(**base)


def _bound(labels, config, *, iterations=1, reread_spill=False):
    """The bound call with every argument spelled out here, not through summary's helpers."""
    return _ext.memory_model(
        labels, batch_size=config.batch_size, block_chunks=config.block_chunks, ref_spc=config.samples_per_chunk,
        max_inflight=config.max_inflight, prefetch_depth=config.prefetch_depth, shuffle=config.shuffle,
        reread_spill=reread_spill, batch_transforms=bool(config.batch_transforms),
        n_train_chunks=config.split_chunks.get("train", 0), split_chunks=sum(config.split_chunks.values()),
        budget=config.cache_budget_bytes, iterations=iterations, cache_dir=config.cache_dir is not None)


_T2M = ArrayGeometry("t2m", (100, 64, 64), (4, 32, 32), np.float32)
_U10 = ArrayGeometry("u10", (100, 8), (2, 8), np.float64)

# The labels are built per test (lambdas): native objects held by a module global outlive
# the extension's teardown at exit, which nanobind reports as leaks.
CASES = {
    "plain": ({"t2m": _T2M, "u10": _U10}, None, _cfg(), lambda: [
        _ext.SizedLabel("t2m", [100, 64, 64], [4, 32, 32], 0, "<f4"),
        _ext.SizedLabel("u10", [100, 8], [2, 8], 0, "<f8")], {}),
    "windowed, cache_dir, two iterations": (
        {"x": _T2M, "y": _T2M.shift(3), "u10": _U10}, None, _cfg(cache_dir="/c", persist=True), lambda: [
            _ext.SizedLabel("t2m", [100, 64, 64], [4, 32, 32], 0, "<f4"),
            _ext.SizedLabel("t2m", [100, 64, 64], [4, 32, 32], 0, "<f4", offset=3),
            _ext.SizedLabel("u10", [100, 8], [2, 8], 0, "<f8")], {"iterations": 2, "reread_spill": True}),
    "chunk and batch transforms, explicit budget": (
        {"t2m": _T2M, "u10": _U10}, {"t2m": S.OutputField((128, 128), np.float16)},
        _cfg(chunk_transforms=("regrid[t2m]",), batch_transforms=("wind",), cache_budget_bytes=1 << 30,
             cache_dir="/c"), lambda: [
            _ext.SizedLabel("t2m", [100, 64, 64], [4, 32, 32], 0, "<f4", out_field=[128, 128], out_dtype="<f2",
                            transformed=True),
            _ext.SizedLabel("u10", [100, 8], [2, 8], 0, "<f8")], {}),
}


@pytest.mark.parametrize("case", CASES)
def test_describe_prints_the_bound_calls_figures(case):
    geoms, outputs, config, labels, kwargs = CASES[case]
    report = S.describe(geoms, outputs, config, **kwargs)
    terms = _bound(labels(), config, **kwargs)
    for key in _MEMORY_TERMS:
        assert report["memory"][key] == getattr(terms, key), key
    assert report["config"]["cache_budget_bytes"] == terms.budget_bytes
    assert report["config"]["samples_per_chunk"] == terms.ref_spc
    for variable, label in zip(report["variables"].values(), terms.labels):
        for key in _LABEL_TERMS:
            assert variable[key] == getattr(label, key), (variable["label"], key)
        assert variable["stored_chunks_per_chunk"] == label.stored_chunks
    assert S.ALLOCATOR_RETENTION == _ext.ALLOCATOR_RETENTION
    # summary.memory_terms is the same call, made from the report's inputs
    mine = S.memory_terms(geoms, outputs, config, **kwargs)
    assert [getattr(mine, k) for k in (*_MEMORY_TERMS, "floor_ram_bytes", "machine_bytes")] == \
        [getattr(terms, k) for k in (*_MEMORY_TERMS, "floor_ram_bytes", "machine_bytes")]
    assert terms.machine_bytes == _ext.machine_memory_bytes()


def test_the_construction_check_is_the_bound_calls_ram_figure():
    """floor_ram_bytes: the accounted sum at the floor, less the residency a cache_dir holds."""
    geoms = {"t2m": _T2M}
    labels = [_ext.SizedLabel("t2m", [100, 64, 64], [4, 32, 32], 0, "<f4")]
    heap = _bound(labels, _cfg(cache_budget_bytes=1 << 30))
    assert heap.floor_ram_bytes == heap.working_set_bytes + heap.inflight_bytes + heap.queue_bytes
    disk = _bound(labels, _cfg(cache_dir="/c"))
    assert disk.floor_ram_bytes == disk.inflight_bytes + disk.queue_bytes
    assert S.memory_terms(geoms, None, _cfg(cache_dir="/c")).floor_ram_bytes == disk.floor_ram_bytes


def test_the_default_pin_budget_is_the_engines_fraction():
    from insitubatch.frameworks import default_pin_budget_bytes

    assert default_pin_budget_bytes() == _ext.pin_budget_bytes() == _ext.machine_memory_bytes() // 8


class _ToFloat64:
    """A chunk transform that doubles the slot: the cache files hold its output."""

    cache_key = "to-float64"

    def __call__(self, chunk):
        chunk.data = chunk.data.astype(np.float64)
        return chunk

    def output_inner(self, geom):
        return geom.inner_shape, np.float64


def test_the_disk_term_is_what_the_cache_dir_holds(tmp_path):
    path = tmp_path / "era.zarr"
    rng = np.random.default_rng(3)
    for name, shape, chunks, dtype in (("t2m", (48, 6, 5), (4, 3, 5), "f4"), ("u10", (48, 4), (2, 4), "f8")):
        arr = zarr.create_array(zarr.storage.LocalStore(path), name=name, shape=shape, chunks=chunks, dtype=dtype,
                                compressors=[ZstdCodec(level=1)], fill_value=0)
        arr[...] = rng.standard_normal(shape).astype(dtype)
    store = insitubatch.local_store(path)
    geoms = {**open_geometries(store, ["t2m", "u10"])}
    geoms["u10_next"] = geoms["u10"].shift(1)
    manifest = split_by_chunk(geoms["t2m"], fractions=(0.5, 0.25, 0.25))
    cache = tmp_path / "cache"
    ds = InSituDataset(store, manifest, geoms, batch_size=4, block_chunks=2, cache_dir=str(cache), persist=True,
                       chunk_transforms=[applies(["t2m"], _ToFloat64())])
    disk = ds.describe()["memory"]["disk_bytes"]
    labels = [_ext.SizedLabel("t2m", [48, 6, 5], [4, 3, 5], 0, "<f4", out_field=[6, 5], out_dtype="<f8",
                              transformed=True),
              _ext.SizedLabel("u10", [48, 4], [2, 4], 0, "<f8"),
              _ext.SizedLabel("u10", [48, 4], [2, 4], 0, "<f8", offset=1)]
    config = _cfg(batch_size=4, block_chunks=2, samples_per_chunk=4, cache_dir=str(cache), persist=True,
                  split_chunks={s: len(manifest.chunks.get(s, [])) for s in ("train", "val", "test")})
    assert _bound(labels, config, reread_spill=True).disk_bytes == disk
    for view in (ds.train, ds.val, ds.test):
        for _ in view:
            pass
    ds.close()
    files = [p for p in Path(cache).iterdir() if p.name.endswith(".npy")]
    # 12 anchor chunks: t2m's 12 files of 4 x 6 x 5 float64, u10's 24 of 2 x 4 float64
    assert len(files) == 12 + 24
    assert disk == sum(p.stat().st_size for p in files) == 12 * (4096 + 960) + 24 * (4096 + 64)
