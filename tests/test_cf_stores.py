"""Stores as xarray and CF write them: without `variables=`, only data on the sample grid is
taken (coordinates, grid mappings, arrays off the sample dimension and arrays this reader
cannot decode are skipped, each logged with its reason); one unreadable array never blocks
the others, and is reported when it is asked for by name."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
import zarr

import insitubatch
from insitubatch import InSituDataset, open_geometries, split_by_chunk


def _cf_store(path, zarr_format: int):
    root = zarr.open_group(zarr.storage.LocalStore(path), mode="w", zarr_format=zarr_format)
    rng = np.random.default_rng(1)

    def put(name, dims, data):
        kw = {"dimension_names": dims} if zarr_format == 3 else {"attributes": {"_ARRAY_DIMENSIONS": list(dims)}}
        a = root.create_array(name, shape=data.shape, chunks=data.shape if data.ndim < 3 else (4, *data.shape[1:]),
                              dtype=data.dtype, **kw)
        a[...] = data
        return data

    t2m = put("t2m", ("time", "lat", "lon"), rng.standard_normal((12, 3, 4)).astype("f4"))
    put("lat", ("lat",), np.linspace(50, 40, 3))
    put("lon", ("lon",), np.linspace(0, 3, 4))
    put("time", ("time",), np.arange(12, dtype="i8"))
    put("spatial_ref", (), np.array(0, dtype="i4"))
    put("elevation", ("lat", "lon"), rng.standard_normal((3, 4)).astype("f4"))  # static: no time
    station = put("station", ("time",), rng.standard_normal(12).astype("f4"))  # 1-D data over time
    return t2m, station


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_coordinates_and_grid_mappings_are_skipped_with_their_reasons(tmp_path, caplog, zarr_format):
    t2m, station = _cf_store(tmp_path / "cf.zarr", zarr_format)
    with caplog.at_level(logging.INFO, logger="insitubatch"):
        geoms = open_geometries(str(tmp_path / "cf.zarr"))
    assert sorted(geoms) == ["station", "t2m"]
    for name, why in (("lat", "a coordinate"), ("time", "a coordinate"), ("spatial_ref", "0-d"),
                      ("elevation", "has no 'time' dimension")):
        assert f"skipped {name!r}: {why}" in caplog.text, name
    # Naming an array overrides the inference either way.
    assert list(open_geometries(str(tmp_path / "cf.zarr"), ["time"])) == ["time"]
    ds = InSituDataset(str(tmp_path / "cf.zarr"), split_by_chunk(geoms["t2m"], fractions=(1.0, 0.0, 0.0)),
                       batch_size=12, shuffle=False)
    assert ds.variables == ["station", "t2m"]
    (batch,) = list(ds.train)
    np.testing.assert_array_equal(batch.arrays["t2m"], t2m)
    np.testing.assert_array_equal(batch.arrays["station"], station)


def test_a_store_of_coordinates_only_names_variables_in_its_error(tmp_path):
    root = zarr.open_group(zarr.storage.LocalStore(tmp_path / "c.zarr"), mode="w")
    root.create_array("lat", shape=(3,), chunks=(3,), dtype="f8", dimension_names=("lat",))
    root.create_array("crs", shape=(), dtype="i4")
    with pytest.raises(insitubatch.InvalidArgumentError, match=r"no batchable arrays.*'crs': 0-d.*variables="):
        open_geometries(str(tmp_path / "c.zarr"))
    assert list(open_geometries(str(tmp_path / "c.zarr"), ["lat"])) == ["lat"]


def test_an_array_this_reader_cannot_decode_blocks_nothing_else(tmp_path, caplog):
    path = tmp_path / "s.zarr"
    root = zarr.open_group(zarr.storage.LocalStore(path), mode="w")
    root.create_array("t2m", shape=(8, 2), chunks=(4, 2), dtype="f4")[:] = np.ones((8, 2), "f4")
    # An array of a kind the reader does not take: a zfpy-compressed one (no zfp library here).
    root.create_array("names", shape=(8,), chunks=(4,), dtype="f8")[:] = np.arange(8.0)
    zarr.consolidate_metadata(str(path))  # the consolidated document holds it too
    zfpy = [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "numcodecs.zfpy", "configuration": {"mode": 4}}]
    for doc, where in ((path / "names" / "zarr.json", None), (path / "zarr.json", "names")):
        meta = json.loads(doc.read_text())
        (meta["consolidated_metadata"]["metadata"][where] if where else meta)["codecs"] = zfpy
        doc.write_text(json.dumps(meta))
    with caplog.at_level(logging.INFO, logger="insitubatch"):
        assert list(open_geometries(str(path))) == ["t2m"]
    assert "skipped 'names': cannot be read here" in caplog.text
    assert list(open_geometries(str(path), ["t2m"])) == ["t2m"]
    with pytest.raises(insitubatch.InSituError, match=r"array 'names'.*zfpy"):
        open_geometries(str(path), ["names"])
