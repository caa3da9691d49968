"""bfloat16 arrays as tensorstore writes them (zarr v3 "bfloat16", an extension data type, and
zarr v2 `"dtype": "bfloat16"`, tensorstore's v2 extension): read as ml_dtypes.bfloat16, bit for
bit, through read_chunk and a dataset, fill values too."""

from __future__ import annotations

import json

import numpy as np
import pytest

import insitubatch as ib

ml_dtypes = pytest.importorskip("ml_dtypes")
ts = pytest.importorskip("tensorstore")


def write(path, values, chunks, fill_value, written=None, driver="zarr3"):
    t = ts.open({"driver": driver, "kvstore": {"driver": "file", "path": str(path / "v")}}, create=True,
                dtype=ts.bfloat16, shape=list(values.shape), fill_value=fill_value,
                chunk_layout=ts.ChunkLayout(chunk_shape=list(chunks))).result()
    t[written or ...] = values[written or ...]
    if driver == "zarr3":
        (path / "zarr.json").write_text(json.dumps({"zarr_format": 3, "node_type": "group"}))
        return json.loads((path / "v" / "zarr.json").read_text())
    (path / ".zgroup").write_text(json.dumps({"zarr_format": 2}))
    return json.loads((path / "v" / ".zarray").read_text())


@pytest.mark.parametrize("driver", ["zarr3", "zarr"])
def test_bfloat16_reads_bit_for_bit_with_its_fill_value(tmp_path, driver):
    values = np.random.default_rng(0).normal(size=(12, 7)).astype(ml_dtypes.bfloat16)
    values[0, :3] = [np.inf, -np.inf, np.nan]  # special values keep their bits too
    meta = write(tmp_path, values, (4, 7), 1.5, written=np.s_[:8], driver=driver)  # chunk 2 never written
    assert meta["data_type" if driver == "zarr3" else "dtype"] == "bfloat16"
    store = ib.store(str(tmp_path))
    geoms = ib.open_geometries(store, variables=["v"])
    assert geoms["v"].dtype == np.dtype(ml_dtypes.bfloat16)
    first = ib.read_chunk(store, "v", (0, 0))
    assert first.dtype == np.dtype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(first.view(np.uint16), values[:4].view(np.uint16))
    np.testing.assert_array_equal(ib.read_chunk(store, "v", (2, 0)).astype("f4"), np.full((4, 7), 1.5, "f4"))

    manifest = ib.split_by_chunk(geoms["v"], fractions=(1.0, 0.0, 0.0))
    ds = ib.InSituDataset(store, manifest, geometries=geoms, batch_size=5)
    expected = np.concatenate([values[:8], np.full((4, 7), 1.5, "f4").astype(ml_dtypes.bfloat16)])
    seen = 0
    for batch in ds.train:
        assert batch.arrays["v"].dtype == np.dtype(ml_dtypes.bfloat16)
        np.testing.assert_array_equal(batch.arrays["v"].view(np.uint16), expected[batch.sample_indices].view(np.uint16))
        seen += len(batch)
    assert seen == 12
    # tensorstore's own read of the same store, bit for bit.
    theirs = ts.open({"driver": driver, "kvstore": {"driver": "file", "path": str(tmp_path / "v")}}).result().read().result()
    np.testing.assert_array_equal(np.asarray(theirs).view(np.uint16), expected.view(np.uint16))


def test_v2_bfloat16_without_a_fill_value_reads_zeros(tmp_path):
    """tensorstore writes `"fill_value": null` by default; absent chunks read as +0.0, as it reads them."""
    values = np.arange(12, dtype="f4").reshape(6, 2).astype(ml_dtypes.bfloat16)
    meta = write(tmp_path, values, (3, 2), None, written=np.s_[:3], driver="zarr")
    assert meta["fill_value"] is None
    theirs = np.asarray(ts.open({"driver": "zarr", "kvstore": {"driver": "file", "path": str(tmp_path / "v")}})
                        .result().read().result())
    ours = ib.read_chunk(str(tmp_path), "v", (1, 0))
    np.testing.assert_array_equal(ours.view(np.uint16), theirs[3:].view(np.uint16))
    np.testing.assert_array_equal(ours.view(np.uint16), np.zeros((3, 2), np.uint16))


def test_chunk_transforms_see_bfloat16_values_not_their_bits(tmp_path):
    from insitubatch.transforms import Cast, ScaleOffset

    values = np.random.default_rng(1).normal(size=(8, 3)).astype(ml_dtypes.bfloat16)
    write(tmp_path, values, (4, 3), 0.0)
    store = ib.store(str(tmp_path))
    geoms = ib.open_geometries(store, variables=["v"])
    manifest = ib.split_by_chunk(geoms["v"], fractions=(1.0, 0.0, 0.0))
    as_f4 = values.astype("f4")
    seen_dtypes = []

    def keep_bfloat16(chunk):  # a Python transform that keeps the dtype: bfloat16 in, bfloat16 out
        seen_dtypes.append(chunk.data.dtype)
        chunk.data = chunk.data * ml_dtypes.bfloat16(2)
        return chunk

    cases = [(Cast("f4"), as_f4, "f4"), (ScaleOffset({"v": 2.0}, {"v": 1.0}), as_f4 * 2 + 1, "f4"),
             (keep_bfloat16, (values * ml_dtypes.bfloat16(2)), ml_dtypes.bfloat16)]
    for transform, expected, dtype in cases:
        ds = ib.InSituDataset(store, manifest, geometries=geoms, batch_size=8, chunk_transforms=[transform])
        batch = next(iter(ds.train))
        assert batch.arrays["v"].dtype == np.dtype(dtype)
        np.testing.assert_array_equal(batch.arrays["v"].astype("f4"), np.asarray(expected)[batch.sample_indices].astype("f4"))
    assert seen_dtypes and all(d == np.dtype(ml_dtypes.bfloat16) for d in seen_dtypes)
