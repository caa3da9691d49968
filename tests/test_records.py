"""Structured (record) dtypes as zarr-python writes them (v2 numpy descrs with per-field byte
orders, v3 `structured`): read as records, batched into numpy structured arrays with exact
values, absent chunks filled with the record fill value; adapters take one array per field
and refuse, by name, fields no framework can hold. Malformed record types are clear errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import zarr

import insitubatch
from insitubatch import InSituDataset, open_geometries, read_chunk, split_by_chunk
from insitubatch.frameworks import model_arrays

RECORD = np.dtype([("flux", "<f4"), ("flag", ">i2"), ("ivar", ">f8")])


def _records(n: int, dtype=RECORD) -> np.ndarray:
    x = np.zeros(n, dtype)
    x["flux"] = np.arange(n) * 0.5
    x["flag"] = -np.arange(n)
    if "ivar" in dtype.names:
        x["ivar"] = 1.0 / (1 + np.arange(n))
    return x


def _store(path, fmt: int, dtype=RECORD, n: int = 22, written: int | None = None, fill=None):
    arr = zarr.create_array(str(path), name="spec", shape=(n,), chunks=(4,), dtype=dtype, zarr_format=fmt,
                            fill_value=np.zeros((), dtype)[()] if fill is None else fill)
    values = _records(n, dtype)
    arr[: written or n] = values[: written or n]
    return zarr.open_array(str(path), path="spec", mode="r")[...]


@pytest.mark.parametrize("fmt", [2, 3])
def test_records_stream_with_exact_values(tmp_path, fmt):
    dtype = RECORD if fmt == 2 else np.dtype([("flux", "<f4"), ("flag", "<i2"), ("ivar", "<f8")])
    want = _store(tmp_path / "s.zarr", fmt, dtype)
    geoms = open_geometries(str(tmp_path / "s.zarr"))
    assert geoms["spec"].dtype == dtype  # the fields in their stored byte order
    ds = InSituDataset(str(tmp_path / "s.zarr"), split_by_chunk(geoms["spec"], fractions=(1.0, 0.0, 0.0)),
                       batch_size=5, seed=3)
    seen = []
    for batch in ds.train:
        got = batch.arrays["spec"]
        assert got.dtype == dtype and got.shape == (len(batch),)
        np.testing.assert_array_equal(got, want[batch.sample_indices], strict=True)
        seen.extend(batch.sample_indices.tolist())
    assert sorted(seen) == list(range(22))
    np.testing.assert_array_equal(read_chunk(str(tmp_path / "s.zarr"), "spec", [5])[:2], want[20:22])
    assert ds.describe()["variables"]["spec"]["stored_chunk_bytes"] == 4 * dtype.itemsize


def test_absent_chunks_read_as_the_record_fill_value(tmp_path):
    fill = np.array((9.5, 7, -1.0), RECORD)[()]
    want = _store(tmp_path / "s.zarr", 2, n=16, written=4, fill=fill)  # chunks 1..3 never written
    assert want[10] == fill
    geoms = open_geometries(str(tmp_path / "s.zarr"))
    ds = InSituDataset(str(tmp_path / "s.zarr"), split_by_chunk(geoms["spec"], fractions=(1.0, 0.0, 0.0)),
                       batch_size=16, shuffle=False)
    (batch,) = list(ds.train)
    np.testing.assert_array_equal(batch.arrays["spec"], want, strict=True)


def test_adapters_take_one_array_per_field(tmp_path):
    dtype = np.dtype([("flux", "<f4"), ("lines", ">i2", (3,))])
    x = np.zeros(8, dtype)
    x["flux"], x["lines"] = np.arange(8), np.arange(24).reshape(8, 3)
    batch = insitubatch.Batch({"spec": x, "img": np.ones((8, 2), "f4")})
    arrays = model_arrays(batch)
    assert sorted(arrays) == ["img", "spec.flux", "spec.lines"]
    np.testing.assert_array_equal(arrays["spec.lines"], x["lines"], strict=False)
    assert arrays["spec.lines"].shape == (8, 3) and arrays["spec.lines"].dtype == np.dtype("i2")
    assert arrays["spec.flux"].flags.c_contiguous
    raw = np.zeros(2, [("a", "<f4"), ("blob", "V3")])
    with pytest.raises(insitubatch.InvalidTypeError, match="field 'blob' of 'raw'.*not numeric"):
        model_arrays(insitubatch.Batch({"raw": raw}))


def _deep(levels: int) -> list:
    descr: list = [["x", "<f4"]]
    for _ in range(levels):
        descr = [["n", descr]]
    return descr


@pytest.mark.parametrize("descr, match", [
    ([["a", "<f4"], ["a", "<i2"]], "appears twice"),
    ([["a", 5]], "not supported"),
    (_deep(9), "nested over 8 deep"),
    ([["a", "bfloat16"]], "bfloat16.*not supported in a record"),
    ([["a", "|O"]], "O"),
    ([], "list of 1 to"),
    ("|V8", "raw void"),
])
def test_malformed_record_types_name_the_array(tmp_path, descr, match):
    path = tmp_path / "s.zarr"
    zarr.open_group(str(path), mode="w", zarr_format=2)
    (path / "bad").mkdir()
    (path / "bad" / ".zarray").write_text(json.dumps({
        "zarr_format": 2, "shape": [4], "chunks": [2], "dtype": descr, "fill_value": None, "order": "C",
        "filters": None, "compressor": None}))
    with pytest.raises(insitubatch.InSituError, match=match) as info:
        open_geometries(str(path), ["bad"])
    assert "bad/.zarray" in str(info.value)


@pytest.mark.parametrize("fmt", [2, 3])
@pytest.mark.parametrize("dtype", ["S5", "<U3"])
def test_fixed_width_text_reads_as_numpy_text(tmp_path, fmt, dtype):
    """Bytes and unicode coordinates / labels (as zarr-python writes them), read whole and
    batched; absent chunks are empty strings; adapters refuse them by name."""
    arr = zarr.create_array(str(tmp_path / "s.zarr"), name="names", shape=(10,), chunks=(4,), dtype=dtype,
                            zarr_format=fmt)
    arr[:6] = np.array(["ab", "cde", "f", "gh", "ij", "k"], dtype=dtype)  # chunk 2 never written
    want = zarr.open_array(str(tmp_path / "s.zarr"), path="names", mode="r")[...]
    geoms = open_geometries(str(tmp_path / "s.zarr"), ["names"])
    assert geoms["names"].dtype == np.dtype(dtype)
    ds = InSituDataset(str(tmp_path / "s.zarr"), split_by_chunk(geoms["names"], fractions=(1.0, 0.0, 0.0)),
                       geoms, batch_size=3, seed=2)
    for batch in ds.train:
        np.testing.assert_array_equal(batch.arrays["names"], want[batch.sample_indices], strict=True)
    np.testing.assert_array_equal(read_chunk(str(tmp_path / "s.zarr"), "names", [1]), want[4:8], strict=True)
    with pytest.raises(insitubatch.InvalidTypeError, match="'names' holds text"):
        model_arrays(batch)


def _filled(dtype: np.dtype, n: int) -> np.ndarray:
    """n records of `dtype` whose every leaf field holds distinct values (text as short words)."""
    x = np.zeros(n, dtype)

    def fill(view: np.ndarray, seed: int) -> None:
        if view.dtype.names:
            for k, name in enumerate(view.dtype.names):
                fill(view[name], seed * 7 + k + 1)
        elif view.dtype.kind in "SU":
            words = np.array(["", "a", "bc", "def"], dtype=view.dtype)
            view[...] = words[(np.arange(view.size).reshape(view.shape) + seed) % 4]
        elif view.dtype.kind == "M":
            view[...] = np.datetime64("2020-01-01", "s") + (np.arange(view.size).reshape(view.shape) * 3601 + seed)
        elif view.dtype.kind == "b":
            view[...] = (np.arange(view.size).reshape(view.shape) + seed) % 3 == 0
        else:
            view[...] = (np.arange(view.size).reshape(view.shape) * 3 + seed).astype(view.dtype)

    fill(x, 0)
    return x


def _stream(path: str, name: str, n: int) -> np.ndarray:
    """Every row of `name` through a dataset pass, in sample order."""
    geoms = open_geometries(path, [name])
    ds = InSituDataset(path, split_by_chunk(geoms[name], fractions=(1.0, 0.0, 0.0)), geoms, batch_size=3, seed=1)
    out = np.zeros(n, geoms[name].dtype)
    seen = []
    for batch in ds.train:
        out[batch.sample_indices] = batch.arrays[name]
        seen.extend(batch.sample_indices.tolist())
    assert sorted(seen) == list(range(n))
    return out


NESTED = np.dtype([("a", "<i4"), ("b", [("x", "<f8"), ("y", "u1"), ("s", "S3"), ("c", [("t", ">i2")])]), ("z", "<f4")])


def test_v2_nested_records_read_exactly_as_written(tmp_path):
    """A record field that is itself a record (zarr-python 3 writes its descr with
    zarr_format=2, though it cannot read it back): the nested dtype and every value as
    written, through read_chunk and a dataset; absent chunks are the fill record."""
    path = str(tmp_path / "s.zarr")
    values = _filled(NESTED, 11)
    arr = zarr.create_array(path, name="spec", shape=(11,), chunks=(4,), dtype=NESTED, zarr_format=2,
                            fill_value=values[3])
    arr[:8] = values[:8]  # chunk 2 never written
    meta = json.loads((tmp_path / "s.zarr" / "spec" / ".zarray").read_text())
    assert isinstance(meta["dtype"][1][1], list)  # the nested descr, as written
    want = values.copy()
    want[8:] = values[3]
    assert open_geometries(path, ["spec"])["spec"].dtype == NESTED
    chunk = read_chunk(path, "spec", [1])
    assert chunk.dtype == NESTED
    np.testing.assert_array_equal(chunk, want[4:8], strict=True)
    np.testing.assert_array_equal(read_chunk(path, "spec", [2])[:3], want[8:], strict=True)
    np.testing.assert_array_equal(_stream(path, "spec", 11), want, strict=True)


@pytest.mark.parametrize("dtype", [
    NESTED.newbyteorder("<"),  # zarr-python 3 marks every v3 field as the bytes codec's order
    np.dtype([("a", "<i4"), ("s", "S5"), ("u", "<U3")]),  # text fields
    np.dtype([("t", "<M8[s]"), ("ok", "?"), ("d", "<m8[ms]")]),  # times and bools
], ids=["nested", "text", "times"])
def test_v3_records_with_nested_text_and_time_fields(tmp_path, dtype):
    """zarr-python 3's v3 `structured` fields beyond numbers (a nested `structured`,
    `null_terminated_bytes`, `fixed_length_utf32`, `numpy.datetime64`, `bool`) read as
    zarr-python reads them, through read_chunk and a dataset."""
    path = str(tmp_path / "s.zarr")
    values = _filled(dtype, 10)
    arr = zarr.create_array(path, name="spec", shape=(10,), chunks=(4,), dtype=dtype, zarr_format=3)
    arr[:7] = values[:7]
    want = zarr.open_array(path, path="spec", mode="r")[...]
    np.testing.assert_array_equal(want[:7], values[:7], strict=True)
    assert open_geometries(path, ["spec"])["spec"].dtype == dtype
    for c in range(3):
        np.testing.assert_array_equal(read_chunk(path, "spec", [c])[: len(want[4 * c: 4 * c + 4])],
                                      want[4 * c: 4 * c + 4], strict=True)
    np.testing.assert_array_equal(_stream(path, "spec", 10), want, strict=True)


@pytest.mark.parametrize("fmt", [2, 3])
def test_subarray_fields_as_zarr_python_3_writes_them(tmp_path, fmt):
    """zarr-python 3.1 stores a sub-array field (`("c", "<f4", (3,))`) as raw bytes (v2 `|V12`,
    v3 `raw_bytes`), keeping the first element's value only; this reader hands back the bytes
    stored, exactly as zarr-python reads them. (zarr 2's `["c", "<f4", [3]]` form keeps the
    sub-array: test_adapters_take_one_array_per_field.)"""
    path = str(tmp_path / "s.zarr")
    dtype = np.dtype([("a", "<i4"), ("c", "<f4", (3,))])
    values = _filled(dtype, 6)
    arr = zarr.create_array(path, name="spec", shape=(6,), chunks=(4,), dtype=dtype, zarr_format=fmt,
                            fill_value=np.zeros((), dtype)[()])
    arr[...] = values
    want = zarr.open_array(path, path="spec", mode="r")[...]
    assert want.dtype == np.dtype([("a", "<i4"), ("c", "V12")])
    np.testing.assert_array_equal(want["c"].copy().view("<f4").reshape(6, 3)[:, 0], values["c"][:, 0])
    got = _stream(path, "spec", 6)
    np.testing.assert_array_equal(got, want, strict=True)
    np.testing.assert_array_equal(read_chunk(path, "spec", [1])[:2], want[4:], strict=True)
