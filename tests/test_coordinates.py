"""ib.select: coordinate value ranges as index ranges, read without xarray, checked against
xarray's own `.sel(...)` of the same CF store (written by xarray's `to_zarr`, zarr v2 and v3):
time ranges as strings / datetime64 / datetime, ascending and descending latitudes,
0..360 and -180..180 longitudes with boxes over the antimeridian, and every bad range."""

from __future__ import annotations

import datetime
import pickle
import re
import shutil

import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr

import insitubatch as ib
from servers import RangeServer

TIMES = pd.date_range("2019-12-30", "2021-01-02T18:00", freq="6h")  # 1480 steps


def _dataset(lat_order: str, lon_grid: str) -> xr.Dataset:
    lat = np.arange(-90.0, 90.1, 7.5) if lat_order == "ascending" else np.arange(90.0, -90.1, -7.5)
    lon = np.arange(0.0, 360.0, 10.0) if lon_grid == "0..360" else np.arange(-180.0, 180.0, 10.0)
    values = np.random.default_rng(0).standard_normal((len(TIMES), len(lat), len(lon))).astype("f4")
    return xr.Dataset({"t2m": (("time", "lat", "lon"), values)}, coords={"time": TIMES, "lat": lat, "lon": lon})


_STORES: dict[tuple, str] = {}


@pytest.fixture(params=[(2, "ascending", "0..360"), (3, "descending", "0..360"), (2, "descending", "-180..180"),
                        (3, "ascending", "-180..180")], ids=lambda p: f"v{p[0]}-{p[1]}-lat-{p[2]}")
def cf_store(request, tmp_path_factory):
    """(path, the dataset as xarray reads it back, lon grid) of a store written by to_zarr."""
    key = request.param
    if key not in _STORES:
        path = str(tmp_path_factory.mktemp("cf") / "era.zarr")
        _dataset(key[1], key[2]).to_zarr(path, zarr_format=key[0], mode="w", consolidated=key[0] == 2,
                                          encoding={"t2m": {"chunks": (200, 25, 36)}})
        _STORES[key] = path
    path = _STORES[key]
    with xr.open_zarr(path, consolidated=key[0] == 2) as ds:
        yield path, ds.load(), key[2]


def _lat_slice(ds: xr.Dataset, lo: float, hi: float) -> slice:
    """The slice xarray needs for lo <= lat <= hi on the store's latitude order."""
    return slice(lo, hi) if ds.lat.values[0] < ds.lat.values[-1] else slice(hi, lo)


def _lon_box(ds: xr.Dataset, a: float, b: float) -> xr.Dataset:
    """xarray's own selection of the eastward arc a -> b: the two pieces of a box over the
    grid's seam concatenated in axis order (start piece first)."""
    first, last = float(ds.lon[0]), float(ds.lon[-1])
    a_, b_ = ((a - first) % 360) + first, ((b - first) % 360) + first
    if a_ <= b_:
        return ds.sel(lon=slice(a_, b_))
    return xr.concat([ds.sel(lon=slice(a_, last)), ds.sel(lon=slice(first, b_))], dim="lon")


def _check(sel: ib.Selection, ds: xr.Dataset, expected: xr.Dataset) -> None:
    """The selection's index ranges give exactly xarray's values (through numpy and through
    xarray's isel) and coordinates."""
    np.testing.assert_array_equal(sel.apply(ds.t2m.values, ds.t2m.dims), expected.t2m.values)
    picked = ds.isel(**sel.isel())
    xr.testing.assert_identical(picked, expected)
    assert sel.sizes == dict(expected.sizes)


def test_a_box_equals_xarrays_sel_including_over_the_antimeridian(cf_store):
    path, ds, grid = cf_store
    for a, b in ((350, 20), (170, -170), (-10, 20), (20, 350), (0, 30), (-180, 170), (185, 175)):
        sel = ib.select(path, time=("2020-01-01", "2020-12-31"), lat=(30, 60), lon=(a, b))
        expected = _lon_box(ds.sel(time=slice("2020-01-01", "2020-12-31"), lat=_lat_slice(ds, 30, 60)), a, b)
        _check(sel, ds, expected)
        assert sel.sample_dim == "time" and sel.samples == (8, 8 + 366 * 4)  # every 6 h of 2020
        seam = 360.0 if grid == "0..360" else 180.0
        crosses = (a % 360 > b % 360) if grid == "0..360" else ((a + 180) % 360 > (b + 180) % 360)
        assert sel.wraps("lon") == crosses, (a, b, seam)
        assert set(sel.crop) == {"lat", "lon"}
        assert sel.axis_ranges(ds.t2m.dims) == (sel.samples, sel.crop["lat"], sel.crop["lon"])


def test_each_range_alone_and_the_order_of_latitude_ends(cf_store):
    path, ds, _ = cf_store
    for lat in ((30, 60), (60, 30)):  # either order, on either axis order
        _check(ib.select(path, lat=lat), ds, ds.sel(lat=_lat_slice(ds, 30, 60)))
    _check(ib.select(path, lat=(-100, 100)), ds, ds)  # beyond both ends: the whole axis
    _check(ib.select(path, lat=(None, 0)), ds, ds.sel(lat=_lat_slice(ds, -90, 0)))  # an open end
    _check(ib.select(path, lon=(0, 360)), ds, ds)  # the whole circle
    assert ib.select(path, {"lat": (30, 60)}) == ib.select(path, lat=(30, 60))  # names that are not identifiers
    with pytest.raises(ib.InvalidArgumentError, match="'lat' given both in ranges and as a keyword"):
        ib.select(path, {"lat": (30, 60)}, lat=(30, 60))
    whole = ib.select(path)
    assert whole.samples is None and whole.crop == {} and whole.sizes == dict(ds.t2m.sizes)
    assert whole.variables == ("t2m",) and whole.lengths == dict(ds.t2m.sizes)


def test_single_points(cf_store):
    path, ds, _ = cf_store
    sel = ib.select(path, time=("2020-03-01T12:00", "2020-03-01T12:00"), lat=(45, 45), lon=(20, 20))
    _check(sel, ds, ds.sel(time=slice("2020-03-01T12:00", "2020-03-01T12:00"), lat=slice(45, 45),
                           lon=slice(20, 20)))
    assert sel.sizes == {"time": 1, "lat": 1, "lon": 1}
    one = np.datetime64("2020-03-01T12:00")
    assert ib.select(path, time=(one, one)).samples == sel.samples


def test_time_ends_as_strings_datetime64_and_datetimes(cf_store):
    path, ds, _ = cf_store
    # A string end spans its period, as xarray (pandas) reads it: all of March, all of the day.
    for start, stop in (("2020-02", "2020-03"), ("2020", "2020"), ("2020-02-29", "2020-02-29"),
                        ("2020-06-30T13", "2020-07-01 05:00"), ("2020-06-30T06:00:00Z", "2020-07-01T00:00:00.000")):
        sel = ib.select(path, time=(start, stop))
        _check(sel, ds, ds.sel(time=slice(start.rstrip("Z"), stop)))
    # Exact instants: a datetime64, a datetime, a date, a pandas Timestamp (ns), a datetime in another zone.
    t0, t1 = np.datetime64("2020-06-30T06:00"), np.datetime64("2020-07-01T05:59:59.999999999")
    expected = ds.sel(time=slice(t0, t1))
    for a, b in ((t0, t1), (datetime.datetime(2020, 6, 30, 6), pd.Timestamp(t1)),
                 (datetime.datetime(2020, 6, 30, 8, tzinfo=datetime.timezone(datetime.timedelta(hours=2))), t1)):
        _check(ib.select(path, time=(a, b)), ds, expected)
    _check(ib.select(path, time=(datetime.date(2020, 6, 30), datetime.date(2020, 7, 1))), ds,
           ds.sel(time=slice(np.datetime64("2020-06-30"), np.datetime64("2020-07-01"))))
    _check(ib.select(path, time=("2020-12-31", "2020-01-01")), ds, ds.sel(time=slice("2020-01-01", "2020-12-31")))


def test_the_repr_reads(cf_store):
    path, _, grid = cf_store
    sel = ib.select(path, time=("2020-01-01", "2020-01-31"), lat=(30, 60), lon=(350, 20))
    text = repr(sel)
    assert text.startswith("<Selection of t2m along 'time'; time: samples 8:132 (124 of 1480, 2020-01-01T00 .. 2020-01-31T18")
    assert "lat: " in text and "(5 of 25," in text
    assert ("wraps" in text) == (grid == "0..360")
    assert "350.0 .. 20.0" in text or "-10.0 .. 20.0" in text
    assert pickle.loads(pickle.dumps(sel)) == sel  # a dataset's config travels to spawned workers
    assert hash(sel) == hash(ib.select(path, time=("2020-01-01", "2020-01-31"), lat=(30, 60), lon=(350, 20)))


def test_cf_units_in_hours_since_1900_and_stored_datetime64(tmp_path):
    ds = _dataset("ascending", "0..360").isel(time=slice(0, 400))
    path = str(tmp_path / "hours.zarr")
    ds.to_zarr(path, zarr_format=2, encoding={"time": {"units": "hours since 1900-01-01 00:00:00", "dtype": "int32"}})
    attrs = zarr.open_array(path + "/time").attrs
    assert attrs["units"].startswith("hours since 1900-01-01") and zarr.open_array(path + "/time").dtype == "int32"
    with xr.open_zarr(path) as back:
        expected = back.sel(time=slice("2020-01-03T05", "2020-02-01"))
        _check(ib.select(path, time=("2020-01-03T05", "2020-02-01")), back.load(), expected.load())
    # datetime64 stored as such (zarr-python: v2 "<M8[s]", v3 numpy.datetime64), with CF dimensions.
    for zarr_format in (2, 3):
        root = zarr.open_group(str(tmp_path / f"m8-{zarr_format}.zarr"), mode="w", zarr_format=zarr_format)
        kw = (lambda d: {"dimension_names": d}) if zarr_format == 3 else (lambda d: {"attributes": {"_ARRAY_DIMENSIONS": list(d)}})
        times = np.arange("2020-01-01T00", "2020-01-11T00", 6, dtype="M8[h]").astype("M8[s]")
        root.create_array("time", data=times, chunks=(7,), **kw(("time",)))
        root.create_array("v", data=np.arange(len(times) * 2.0).reshape(-1, 2), **kw(("time", "x")))
        sel = ib.select(str(tmp_path / f"m8-{zarr_format}.zarr"), time=("2020-01-02T06", np.datetime64("2020-01-04")))
        assert sel.samples == (5, 13) and sel.ends["time"] == ("2020-01-02T06:00:00", "2020-01-04T00:00:00")


def _store_with(tmp_path, name: str, coords: dict, attrs: dict | None = None, var_dims: tuple = ()) -> str:
    """A v3 store of coordinates (name -> (dims, values)) and one variable ``v`` over
    ``var_dims`` (default: the 1-D coordinates' dimensions), written by zarr-python."""
    path = str(tmp_path / name)
    root = zarr.open_group(path, mode="w", zarr_format=3)
    sizes = {}
    for name_, (dims, values) in coords.items():
        values = np.asarray(values)
        sizes.update(zip(dims, values.shape))
        root.create_array(name_, data=values, dimension_names=dims, attributes=(attrs or {}).get(name_, {}))
    var_dims = var_dims or tuple(d for d, (dims, _) in coords.items() if dims == (d,))
    root.create_array("v", data=np.zeros([sizes[d] for d in var_dims], "f4"), dimension_names=var_dims)
    return path


def test_bad_ranges_are_clear_errors(cf_store):
    path, _, grid = cf_store
    with pytest.raises(ib.InvalidArgumentError, match=r"lat=\(31, 32\) selects nothing.*nearest values are 30.0 and 37.5"):
        ib.select(path, lat=(31, 32))
    with pytest.raises(ib.InvalidArgumentError,
                       match=r"lon=\(341, 349\) selects nothing: no longitude of 'lon' lies on that arc"):
        ib.select(path, lon=(341, 349))
    with pytest.raises(ib.InvalidArgumentError, match=r"lat=\(91, 95\) lies outside coordinate 'lat', whose values run"):
        ib.select(path, lat=(91, 95))
    with pytest.raises(ib.InvalidArgumentError,
                       match=r"time=.*2030.* lies outside coordinate 'time'.*2019-12-30T00 \.\. 2021-01-02T18"):
        ib.select(path, time=("2030-01-01", "2030-02-01"))
    with pytest.raises(ib.InvalidArgumentError,
                       match=r"time=.*selects nothing.*nearest values are 2020-01-01T00 and 2020-01-01T06"):
        ib.select(path, time=("2020-01-01T01", "2020-01-01T05"))
    with pytest.raises(ib.InvalidTypeError,
                       match=r"lat=\('30', 60\): coordinate 'lat' holds numbers \(float64\).*not str '30'"):
        ib.select(path, lat=("30", 60))
    with pytest.raises(ib.InvalidTypeError, match=r"lat=.*holds numbers.*not datetime64"):
        ib.select(path, lat=(np.datetime64("2020-01-01"), 60))
    with pytest.raises(ib.InvalidTypeError, match=r"time=\(1, 2\): the coordinate holds dates.*not int 1"):
        ib.select(path, time=(1, 2))
    with pytest.raises(ib.InvalidArgumentError, match=r"time=\('2020-13-01'.*not an ISO 8601 date"):
        ib.select(path, time=("2020-13-01", "2021"))
    with pytest.raises(ib.InvalidArgumentError,
                       match=r"'level' is not a dimension of 't2m'; their dimensions are 'time', 'lat', 'lon'"):
        ib.select(path, level=(500, 850))
    with pytest.raises(ib.InvalidTypeError, match=r"lat=30: a range is a \(start, end\) pair"):
        ib.select(path, lat=30)
    with pytest.raises(ib.InvalidArgumentError, match=r"lon=\(None, 20\): a longitude range needs both ends"):
        ib.select(path, lon=(None, 20))
    seam = (350, 20) if grid == "0..360" else (170, -170)
    with pytest.raises(ib.UnsupportedError,
                       match=rf"lon={re.escape(str(seam))} wraps across the seam of 'lon', the sample axis"):
        ib.select(path, sample_dim="lon", lon=seam)
    with pytest.raises(ib.InvalidArgumentError, match=r"sample_dim 'level' is not a dimension of 't2m'"):
        ib.select(path, sample_dim="level")


def test_bad_coordinates_are_clear_errors(tmp_path):
    time = ("time",), np.arange(4)
    bumpy = _store_with(tmp_path, "bumpy.zarr", {"time": time, "lat": (("lat",), [0.0, 20.0, 10.0])})
    with pytest.raises(ib.InvalidArgumentError,
                       match=r"coordinate 'lat' is not monotonic \(it turns at index 2: 20.0 then 10.0\)"):
        ib.select(bumpy, lat=(0, 10))
    curvilinear = _store_with(tmp_path, "curvi.zarr", {"time": time, "lat": (("y", "x"), np.zeros((2, 3))),
                                                        "lon": (("y", "x"), np.zeros((2, 3)))},
                              var_dims=("time", "y", "x"))
    with pytest.raises(ib.UnsupportedError, match=r"'lat' is a 2-D coordinate \(dimensions \('y', 'x'\)\).*1-D"):
        ib.select(curvilinear, variables=["v"], lat=(0, 10))
    noleap = _store_with(tmp_path, "noleap.zarr", {"time": time},
                         {"time": {"units": "days since 2000-01-01", "calendar": "noleap"}})
    with pytest.raises(ib.UnsupportedError, match=r"coordinate 'time' uses the 'noleap' calendar"):
        ib.select(noleap, variables=["v"], time=("2000-01-01", "2000-01-02"))
    months = _store_with(tmp_path, "months.zarr", {"time": time}, {"time": {"units": "months since 2000-01-01"}})
    with pytest.raises(ib.UnsupportedError, match=r"'months' has no fixed length"):
        ib.select(months, variables=["v"], time=("2000-01-01", "2000-01-02"))
    julian = _store_with(tmp_path, "julian.zarr", {"time": time}, {"time": {"units": "days since 1500-01-01"}})
    with pytest.raises(ib.UnsupportedError, match=r"'standard' calendar with dates before 1582-10-15"):
        ib.select(julian, variables=["v"], time=("1500-01-01", "1500-01-02"))
    regional = _store_with(tmp_path, "regional.zarr", {"time": time, "lon": (("lon",), np.arange(100.0, 151.0, 5.0))})
    with pytest.raises(ib.InvalidArgumentError,
                       match=r"lon=\(200, 210\) lies outside the longitudes of 'lon', which run 100.0 .. 150.0"):
        ib.select(regional, lon=(200, 210))
    assert ib.select(regional, lon=(90, 120)).crop == {"lon": (0, 5)}  # the arc's part on the grid
    assert ib.select(regional, lon=(-220, -215)).crop == {"lon": (8, 10)}  # 140 .. 145, a turn away


def test_a_selection_over_http_equals_the_local_one(tmp_path):
    path = tmp_path / "era.zarr"
    _dataset("descending", "0..360").isel(time=slice(0, 300)).to_zarr(
        path, zarr_format=2, consolidated=True, encoding={"t2m": {"chunks": (50, 25, 36)}})
    shutil.copytree(path, tmp_path / "plain.zarr")
    (tmp_path / "plain.zarr" / ".zmetadata").unlink()  # unconsolidated: HTTP cannot list it
    box = dict(time=("2020-01-10", "2020-02-15T12"), lat=(30, 60), lon=(350, 20))
    local = ib.select(str(path), **box)
    with RangeServer(tmp_path) as server:
        remote = ib.select(server.url + "/era.zarr", **box)
        assert any(r["path"].startswith("/era.zarr/time/") for r in server.requests)  # read through the native HTTP store
        unlisted = ib.select(server.url + "/plain.zarr", variables=["t2m"], **box)  # arrays found by name
    assert remote == local == unlisted and remote.wraps("lon") and remote.samples == (44, 191)
    # The other forms a dataset takes: a native store, a zarr-python store (through the bridge).
    assert ib.select(ib.store(str(path)), **box) == local
    assert ib.select(zarr.storage.LocalStore(str(path), read_only=True), **box) == local


def test_variables_in_a_group_find_their_coordinates_beside_them(tmp_path):
    path = str(tmp_path / "grouped.zarr")
    _dataset("ascending", "-180..180").isel(time=slice(0, 40)).to_zarr(path, group="era/surface", zarr_format=3,
                                                                      consolidated=False)
    with xr.open_zarr(path, group="era/surface", consolidated=False) as ds:
        ds = ds.load()
        sel = ib.select(path, variables=["era/surface/t2m"], lat=(0, 30), lon=(170, -170))
        _check(sel, ds, _lon_box(ds.sel(lat=slice(0, 30)), 170, -170))
        assert sel.variables == ("era/surface/t2m",) and ib.select(path, lat=(0, 30)).variables == ("era/surface/t2m",)


def test_float32_integer_and_packed_coordinates_compare_as_xarray_does(tmp_path):
    # A float32 end is compared at float32 precision (30.1 selects the stored float32(30.1)),
    # an integer axis takes float ends inwards, and a packed (scale_factor) axis is unpacked.
    lat = np.array([20.0, 30.1, 40.2, 50.3], "f4")
    level = np.array([1000, 850, 500, 250], "i4")
    x = np.arange(6) * 0.5
    ds = xr.Dataset({"v": (("time", "level", "lat", "x"), np.arange(3 * 4 * 4 * 6, dtype="f4").reshape(3, 4, 4, 6))},
                    coords={"time": np.arange(3), "level": level, "lat": lat, "x": x})
    path = str(tmp_path / "types.zarr")
    ds.to_zarr(path, zarr_format=3, consolidated=False, encoding={"x": {"scale_factor": 0.5, "dtype": "i2", "_FillValue": -1}})
    assert zarr.open_array(path + "/x").dtype == "int16"
    with xr.open_zarr(path, consolidated=False) as back:
        back = back.load()
        for ranges, expected in (({"lat": (30.1, 40.2)}, back.sel(lat=slice(30.1, 40.2))),
                                 ({"level": (300.5, 900)}, back.sel(level=slice(900, 300.5))),
                                 ({"x": (0.5, 1.5), "time": (1, 1)}, back.sel(x=slice(0.5, 1.5), time=slice(1, 1)))):
            sel = ib.select(path, **ranges)
            np.testing.assert_array_equal(sel.apply(back.v.values, back.v.dims), expected.v.values)
            xr.testing.assert_identical(back.isel(**sel.isel()), expected)
