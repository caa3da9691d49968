"""crop=: a coordinate selection's region cut natively before the pool. A CF store written
by xarray, cropped with ib.select (a box over the antimeridian too): every batch equals
xarray's .sel values, only the tiles the box touches are read and resident, patches cut
inside the crop, and bad crops are clear errors."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import insitubatch as ib
from insitubatch import _ext
from insitubatch.errors import InvalidArgumentError

TIMES = pd.date_range("2020-01-01", periods=40, freq="D")


@pytest.fixture(scope="module")
def cf(tmp_path_factory):
    lat = np.arange(90.0, -90.1, -7.5)  # descending, 25 rows
    lon = np.arange(0.0, 360.0, 10.0)  # 36 columns
    values = np.random.default_rng(3).standard_normal((len(TIMES), len(lat), len(lon))).astype("f4")
    ds = xr.Dataset({"t2m": (("time", "lat", "lon"), values)}, coords={"time": TIMES, "lat": lat, "lon": lon})
    path = str(tmp_path_factory.mktemp("crop") / "era.zarr")
    ds.to_zarr(path, zarr_format=3, mode="w", consolidated=False, encoding={"t2m": {"chunks": (8, 10, 12)}})
    return path, ds


def open_ds(path, store=None, **kwargs):
    store = store if store is not None else ib.store(path)
    geoms = ib.open_geometries(store, ["t2m"])
    manifest = ib.split_by_chunk(geoms["t2m"], fractions=(1.0, 0.0, 0.0))
    return ib.InSituDataset(store, manifest, geometries=geoms, batch_size=6, block_chunks=2, **kwargs)


@pytest.mark.parametrize("lon", [(350, 20), (100, 150), (0, 355)])
def test_batches_equal_xarrays_sel_and_only_the_boxs_tiles_are_read(cf, lon):
    path, ds = cf
    sel = ib.select(path, time=("2020-01-05", "2020-01-30"), lat=(30, 60), lon=lon)
    a, b = lon
    box = ds.sel(time=slice("2020-01-05", "2020-01-30"), lat=slice(60, 30))
    expected = (box.sel(lon=slice(a, b)) if a <= b else
                xr.concat([box.sel(lon=slice(a, 360)), box.sel(lon=slice(0, b))], dim="lon")).t2m.values
    counting = _ext.CountingStore(ib.store(path))
    with open_ds(path, store=counting, crop=sel) as ds_:
        assert ds_.output_geometries()["t2m"].inner_shape == expected.shape[1:]
        counting.reset()
        seen = {}
        for batch in ds_.train:
            for i, s in enumerate(batch.sample_indices):
                seen[int(s)] = batch.arrays["t2m"][i]
        assert sorted(seen) == list(range(*sel.samples))
        for k, s in enumerate(range(*sel.samples)):
            np.testing.assert_array_equal(seen[s], expected[k])
        lat_range, lon_range = sel.crop["lat"], sel.crop["lon"]
        lat_tiles = set(range(lat_range[0] // 10, (lat_range[1] - 1) // 10 + 1))
        lo, hi = lon_range
        columns = range(lo, hi) if hi > lo else [*range(lo, 36), *range(0, hi)]
        lon_tiles = {c // 12 for c in columns}
        read = {tuple(int(x) for x in key.rsplit("/c/", 1)[1].split("/")) for key in counting.reads() if "/c/" in key}
        assert {(y, x) for _, y, x in read} == {(y, x) for y in lat_tiles for x in lon_tiles}
        report = ds_.describe()
        assert report["crop"]["ranges"]["t2m"] == {"start": [lat_range[0], lo], "stop": [lat_range[1], hi]}
        assert report["variables"]["t2m"]["slot_bytes"] == 8 * len(lat_tiles) * 10 * len(lon_tiles) * 12 * 4


def test_patches_are_cut_inside_the_crop(cf):
    path, ds = cf
    sel = ib.select(path, lat=(-45, 45), lon=(300, 60))  # 13 rows, 13 columns over the seam
    region = np.concatenate([ds.t2m.values[:, sel.crop["lat"][0]:sel.crop["lat"][1], sel.crop["lon"][0]:],
                             ds.t2m.values[:, sel.crop["lat"][0]:sel.crop["lat"][1], :sel.crop["lon"][1]]], axis=2)
    assert region.shape[1:] == (13, 13)
    with open_ds(path, crop=sel, patch={"lat": 5, "lon": 4}, patch_stride={"lat": 4, "lon": 3}) as ds_:
        n = 0
        for batch in ds_.train:
            for i, (s, (y, x)) in enumerate(zip(batch.sample_indices, batch.patch_origins)):
                np.testing.assert_array_equal(batch.arrays["t2m"][i], region[s, y:y + 5, x:x + 4])
                n += 1
        assert n == len(TIMES) * 3 * 4


def test_an_index_crop_and_its_errors(cf):
    path, ds = cf
    with open_ds(path, crop={"lon": (30, 3)}) as ds_:  # wraps: columns 30..35 then 0..2
        batch = next(iter(ds_.all))
        np.testing.assert_array_equal(batch.arrays["t2m"],
                                      np.concatenate([ds.t2m.values[:6, :, 30:], ds.t2m.values[:6, :, :3]], axis=2))
    with pytest.raises(InvalidArgumentError, match=r"'depth'.*known dimensions: lat, lon"):
        open_ds(path, crop={"depth": (0, 3)})
    with pytest.raises(InvalidArgumentError, match="the sample dimension"):
        open_ds(path, crop={"time": (0, 3)})
    with pytest.raises(InvalidArgumentError, match=r"crop\['lat'\] = \(0, 26\) is outside \[0, 25\]"):
        open_ds(path, crop={"lat": (0, 26)})
