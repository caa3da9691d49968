"""The zarr store the cloud-store tests serve, written by zarr-python 3 (the oracle), and
the checks that compare what a store yields with zarr-python's own reads."""

from __future__ import annotations

import itertools
import math
import shutil
import warnings
from pathlib import Path

import numpy as np
import zarr
from zarr.codecs import ZstdCodec

import insitubatch
from insitubatch import InSituDataset, open_geometries, split_by_chunk

N_SAMPLES = 40
ARRAYS = ("t2m", "labels/masks", "sh")


def make_demo_store(root: Path, consolidated: bool = True) -> Path:
    """A v3 group: zstd float32 t2m, a nested int16 array with absent (fill) chunks, and a
    sharded uint16 array; all share the 40-sample leading axis."""
    if root.exists():
        shutil.rmtree(root)
    rng = np.random.default_rng(7)
    store = zarr.storage.LocalStore(root)
    group = zarr.open_group(store, mode="w", zarr_format=3)
    t2m = group.create_array("t2m", shape=(N_SAMPLES, 12, 10), chunks=(8, 12, 10), dtype="float32",
                             compressors=[ZstdCodec(level=3)], fill_value=0.0)
    t2m[...] = np.round(rng.normal(280, 10, size=t2m.shape), 2).astype("float32")
    labels = group.create_group("labels")
    masks = labels.create_array("masks", shape=(N_SAMPLES, 6), chunks=(5, 3), dtype="int16", fill_value=-1)
    masks[:20] = rng.integers(-300, 300, size=(20, 6), dtype="int16")  # chunks 4..7 stay absent
    sh = group.create_array("sh", shape=(N_SAMPLES, 8), chunks=(4, 8), shards=(8, 8), dtype="uint16",
                            fill_value=0)
    sh[...] = rng.integers(0, 60000, size=sh.shape, dtype="uint16")
    if consolidated:
        with warnings.catch_warnings():  # "consolidated metadata is not in the v3 spec" (it is ours)
            warnings.simplefilter("ignore")
            zarr.consolidate_metadata(store)
    return root


def oracle(root: Path, path: str) -> zarr.Array:
    return zarr.open_array(zarr.storage.LocalStore(root, read_only=True), path=path, mode="r")


def check_every_chunk(store, root: Path, arrays=ARRAYS) -> int:
    """read_chunk on every stored chunk of every array equals zarr-python's read of the local
    copy (edge padding and absent chunks included); returns the chunk count."""
    geoms = open_geometries(store, list(arrays))
    count = 0
    for path in arrays:
        ref = oracle(root, path)
        chunks = geoms[path].chunks
        grid = [range(math.ceil(s / c)) for s, c in zip(ref.shape, chunks)]
        for coords in itertools.product(*grid):
            got = insitubatch.read_chunk(store, path, coords)
            assert got.shape == tuple(chunks) and got.dtype == ref.dtype
            region = tuple(slice(i * c, min((i + 1) * c, s)) for i, c, s in zip(coords, chunks, ref.shape))
            want = ref[region]
            np.testing.assert_array_equal(got[tuple(slice(0, w) for w in want.shape)], want,
                                          err_msg=f"{path} chunk {coords}", strict=True)
            count += 1
    return count


def read_whole(store, path: str) -> np.ndarray:
    """The whole array at ``path``, assembled from read_chunk of every stored chunk (edge
    chunks trimmed): what the native reader makes of it, to compare with an oracle."""
    geometry = open_geometries(store, variables=[path])[path]
    out = np.empty(geometry.shape, geometry.dtype)
    grid = [range(math.ceil(n / c)) for n, c in zip(geometry.shape, geometry.chunks)]
    for coords in itertools.product(*grid):
        chunk = insitubatch.read_chunk(store, path, coords)
        region = tuple(slice(i * c, min((i + 1) * c, n)) for i, c, n in zip(coords, geometry.chunks, geometry.shape))
        out[region] = chunk[tuple(slice(0, r.stop - r.start) for r in region)]
    return out


def engine_read(store, path: str, n: int) -> np.ndarray:
    """The first ``n`` samples of ``path`` as one unshuffled batch of a dataset pass: what the
    engine (not read_chunk) makes of an array someone else wrote."""
    geoms = open_geometries(store, [path])
    ds = InSituDataset(store, split_by_chunk(geoms[path], fractions=(1.0, 0.0, 0.0)), geoms, batch_size=n,
                       shuffle=False)
    (batch,) = list(ds.train)
    ds.close()
    return batch.arrays[path]


def check_dataset_streams_exact(store, root: Path, counting) -> None:
    """open_geometries + InSituDataset over ``store`` stream exact values; each stored chunk
    is read once per epoch (``counting`` is the CountingStore wrapping the store)."""
    geoms = open_geometries(counting, list(ARRAYS))
    manifest = split_by_chunk(geoms["t2m"], fractions=(0.75, 0.25, 0.0))
    refs = {p: oracle(root, p)[...] for p in ARRAYS}
    ds = InSituDataset(counting, manifest, geometries=geoms, batch_size=4, block_chunks=2)
    try:
        for epoch in range(2):
            ds.set_epoch(epoch)
            counting.reset()
            seen = []
            for batch in ds.train:
                for label, values in batch.arrays.items():
                    np.testing.assert_array_equal(values, refs[label][batch.read_indices(label)],
                                                  err_msg=label, strict=True)
                seen.extend(batch.sample_indices.tolist())
            assert sorted(seen) == list(range(len(seen)))
            reads = counting.reads()
            assert max(reads.values(), default=1) == 1, reads  # decode once: never a second read
            if epoch == 0:
                assert len(reads) > 0
    finally:
        ds.close()


__all__ = ["ARRAYS", "N_SAMPLES", "check_dataset_streams_exact", "check_every_chunk", "make_demo_store",
           "oracle"]
