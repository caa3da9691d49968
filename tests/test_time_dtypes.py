"""datetime64 / timedelta64 arrays as zarr-python writes them (v2 `<M8[ns]`, `<m8[10s]`; v3
`numpy.datetime64` with unit and scale): read into numpy datetime arrays with exact values,
NaT included, absent chunks NaT-filled; adapters take the int64 counts; a unit numpy does not
know is refused naming it."""

from __future__ import annotations

import json

import numpy as np
import pytest
import zarr

import insitubatch
from insitubatch import InSituDataset, open_geometries, read_chunk, split_by_chunk
from insitubatch.frameworks import model_arrays


def _write(path, fmt):
    g = zarr.open_group(str(path), mode="w", zarr_format=fmt)
    t = g.create_array("time", shape=(14,), chunks=(4,), dtype="M8[ns]")  # fill value: NaT
    values = np.arange("2020-01-01", "2020-01-11", dtype="M8[D]").astype("M8[ns]")
    values[3] = np.datetime64("NaT")
    t[:10] = values  # the last chunk is never written
    lag = g.create_array("lag", shape=(14,), chunks=(4,), dtype=">m8[10s]" if fmt == 2 else "m8[10s]")
    lag[:] = np.arange(14).astype("m8[10s]")
    return t[...], lag[...]


@pytest.mark.parametrize("fmt", [2, 3])
def test_times_stream_with_exact_values(tmp_path, fmt):
    time, lag = _write(tmp_path / "s.zarr", fmt)
    assert np.isnat(time[3]) and np.isnat(time[12])
    geoms = open_geometries(str(tmp_path / "s.zarr"), ["time", "lag"])
    assert geoms["time"].dtype == np.dtype("M8[ns]") and geoms["lag"].dtype.str.endswith("m8[10s]")
    ds = InSituDataset(str(tmp_path / "s.zarr"), split_by_chunk(geoms["time"], fractions=(1.0, 0.0, 0.0)),
                       geoms, batch_size=5, seed=1)
    for batch in ds.train:
        got = batch.arrays["time"]
        assert got.dtype == np.dtype("M8[ns]")
        np.testing.assert_array_equal(got, time[batch.sample_indices])  # NaT == NaT here
        np.testing.assert_array_equal(batch.arrays["lag"], lag[batch.sample_indices])
        arrays = model_arrays(batch)
        assert arrays["time"].dtype == np.int64
        np.testing.assert_array_equal(arrays["time"], time[batch.sample_indices].view(np.int64))
    np.testing.assert_array_equal(read_chunk(str(tmp_path / "s.zarr"), "time", [3])[:2], time[12:14])
    assert sorted(open_geometries(str(tmp_path / "s.zarr"))) == ["lag", "time"]  # readable: not skipped


def test_an_unknown_time_unit_is_refused_naming_it(tmp_path):
    path = tmp_path / "s.zarr"
    zarr.open_group(str(path), mode="w", zarr_format=2)
    (path / "t").mkdir()
    (path / "t" / ".zarray").write_text(json.dumps({
        "zarr_format": 2, "shape": [4], "chunks": [2], "dtype": "<M8[fortnight]", "fill_value": None,
        "order": "C", "filters": None, "compressor": None}))
    with pytest.raises(insitubatch.UnsupportedError, match=r"t/.zarray: v2 dtype \"<M8\[fortnight\]\" is not supported"):
        open_geometries(str(path), ["t"])
