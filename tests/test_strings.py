"""Variable-length strings as zarr-python 3 and xarray write them (v3 "string" and
"variable_length_bytes", v2 "|O" with vlen-utf8 / vlen-bytes): read_chunk returns object
arrays equal to zarr-python's reads, and a dataset hands string labels beside its numeric
arrays, row for row."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import zarr

import insitubatch as ib
from cloud_data import read_whole

WORDS = np.array(["", "a", "Zürich", "東京", "with space", "x" * 300, "tab\tand\nnewline", "🙂"], dtype=object)


def _strings(shape, seed=0):
    rng = np.random.default_rng(seed)
    return WORDS[rng.integers(0, len(WORDS), size=shape)]


def _write(path, zarr_format, name, values, chunks, dtype, fill_value, written=None, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr-python warns that v3 strings are not yet in the spec
        arr = zarr.create_array(str(path), name=name, shape=values.shape, chunks=chunks, dtype=dtype,
                                zarr_format=zarr_format, fill_value=fill_value, **kwargs)
        arr[written or ...] = values[written or ...]
        return zarr.open_array(str(path / name), mode="r")[...]


CASES = [
    ("v3-string-zstd", 3, _strings((13, 5)), (4, 2), str, "fill"),
    ("v3-string-1d-partial", 3, _strings((11,), 1), (3,), str, ""),
    ("v2-vlen-utf8-blosc", 2, _strings((9, 4), 2), (4, 3), str, ""),
    ("v3-bytes", 3, np.array([b"", b"\x00\xff", b"abc", b"\x01" * 70] * 3, dtype=object), (5,),
     zarr.dtype.VariableLengthBytes(), b"-"),
]


@pytest.mark.parametrize("name, zarr_format, values, chunks, dtype, fill", CASES, ids=[c[0] for c in CASES])
def test_strings_read_as_zarr_python_reads_them(tmp_path, name, zarr_format, values, chunks, dtype, fill):
    written = np.s_[: values.shape[0] // 2] if "partial" in name else None  # the rest: fill value
    expected = _write(tmp_path / "s.zarr", zarr_format, "v", values, chunks, dtype, fill, written=written)
    ours = read_whole(ib.store(str(tmp_path / "s.zarr")), "v")
    assert ours.dtype == np.dtype(object)
    assert ours.tolist() == np.asarray(expected, dtype=object).tolist()
    if written is not None:
        assert ours[-1] == fill


def test_v2_vlen_bytes(tmp_path):
    import numcodecs

    values = np.array([b"one", b"", b"\x00three"], dtype=object)
    path = tmp_path / "s.zarr"
    zarr.open_group(str(path), mode="w", zarr_format=2)
    (path / "v").mkdir()
    codec = numcodecs.VLenBytes()
    (path / "v" / ".zarray").write_text(json.dumps({
        "zarr_format": 2, "shape": [3], "chunks": [3], "dtype": "|O", "order": "C", "fill_value": None,
        "filters": [codec.get_config()], "compressor": numcodecs.Zlib().get_config()}))
    (path / "v" / "0").write_bytes(numcodecs.Zlib().encode(codec.encode(values)))
    assert ib.read_chunk(ib.store(str(path)), "v", (0,)).tolist() == values.tolist()
    assert zarr.open_array(str(path / "v"), mode="r")[...].tolist() == values.tolist()


def test_corrupt_string_chunks_are_named(tmp_path):
    import numcodecs

    _write(tmp_path / "s.zarr", 3, "v", _strings((4,)), (4,), str, "", compressors=None)
    chunk = tmp_path / "s.zarr" / "v" / "c" / "0"
    good = numcodecs.VLenUTF8().encode(np.array(["ok", "fine", "x", "y"], dtype=object))
    store = ib.store(str(tmp_path / "s.zarr"))
    for bad, why in ((good[:-1], "runs past the chunk's end"), (good + b"!", "bytes follow the last item"),
                     (good.replace(b"fine", b"f\xffne"), "not valid UTF-8"), (b"\x07\x00\x00\x00", "holds 7 items"),
                     (good.replace(b"fine", b"\xed\xa0\x80e"), "not valid UTF-8")):  # a surrogate
        chunk.write_bytes(bad)
        with pytest.raises(ib.CorruptChunkError, match=why) as info:
            ib.read_chunk(store, "v", (0,))
        assert "v [0]" in str(info.value)
    with pytest.raises(ib.InvalidArgumentError, match="outside the chunk grid"):
        ib.read_chunk(store, "v", (1,))


def test_object_arrays_other_than_vlen_strings_are_named(tmp_path):
    path = tmp_path / "s.zarr"
    zarr.open_group(str(path), mode="w", zarr_format=2)
    (path / "v").mkdir()
    (path / "v" / ".zarray").write_text(json.dumps({
        "zarr_format": 2, "shape": [3], "chunks": [3], "dtype": "|O", "order": "C", "fill_value": None,
        "filters": [{"id": "pickle", "protocol": 5}], "compressor": None}))
    with pytest.raises(ib.UnsupportedError, match="pickle"):
        ib.open_geometries(ib.store(str(path)), ["v"])


def _xarray_store(path):
    xr = pytest.importorskip("xarray")
    rng = np.random.default_rng(3)
    n_time, stations = 20, np.array(["Zürich", "Bern", "Genève"], dtype=object)
    weather = _strings((n_time,), 4)
    ds = xr.Dataset(
        {"t2m": (("time", "station"), rng.normal(size=(n_time, 3)).astype("f4")),
         "weather": (("time",), weather),
         "spatial_ref": ((), np.int32(0))},
        coords={"time": np.arange("2026-01-01", n_time, dtype="datetime64[D]").astype("datetime64[ns]"),
                "station": stations})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.to_zarr(str(path), zarr_format=3, mode="w", consolidated=True,
                   encoding={"t2m": {"chunks": (6, 3)}, "weather": {"chunks": (7,)}})
    return ds


def test_an_xarray_store_with_time_strings_and_a_grid_mapping(tmp_path):
    path = tmp_path / "x.zarr"
    source = _xarray_store(path)
    store = ib.store(str(path))
    geoms = ib.open_geometries(store)  # time and station are coordinates, spatial_ref is 0-d
    assert sorted(geoms) == ["t2m", "weather"]
    assert geoms["weather"].dtype == np.dtype(object)
    named = ib.open_geometries(store, ["time", "station", "t2m"])
    stored_time = zarr.open_array(str(path / "time"), mode="r")  # CF-encoded by xarray
    assert read_whole(store, "time").tolist() == stored_time[...].tolist()
    assert "since" in stored_time.attrs["units"]
    assert read_whole(store, "station").tolist() == source["station"].values.tolist()
    assert named["t2m"].shape == (20, 3)

    geoms["weather_next"] = geoms["weather"].shift(1)  # a label one step ahead
    manifest = ib.split_by_chunk(geoms["t2m"], fractions=(0.7, 0.3, 0.0))
    with ib.InSituDataset(store, manifest, geometries=geoms, batch_size=4, seed=5) as ds:
        assert ds.variables == ["t2m", "weather", "weather_next"]
        assert ds.output_geometries()["weather"].dtype == np.dtype(object)
        seen = []
        for batch in ds.train:
            assert list(batch.arrays) == ["t2m", "weather", "weather_next"]
            rows = batch.sample_indices
            np.testing.assert_array_equal(batch.arrays["t2m"], source["t2m"].values[rows])
            assert batch.arrays["weather"].tolist() == source["weather"].values[rows].tolist()
            assert batch.arrays["weather_next"].tolist() == source["weather"].values[batch.read_indices("weather_next")].tolist()
            seen.extend(rows.tolist())
        assert len(seen) == len(set(seen))
        with pytest.raises(ib.InvalidTypeError, match="'weather' holds text"):
            from insitubatch.frameworks import model_arrays
            model_arrays(batch)


def test_a_multidimensional_string_array_chunked_across_its_inner_axis(tmp_path):
    values = _strings((10, 6), 9)
    _write(tmp_path / "s.zarr", 3, "names", values, (3, 4), str, "")
    _write(tmp_path / "s.zarr", 3, "x", np.arange(60, dtype="i4").reshape(10, 6), (3, 6), "i4", 0)
    store = ib.store(str(tmp_path / "s.zarr"))
    geoms = ib.open_geometries(store, ["x", "names"])
    manifest = ib.split_by_chunk(geoms["x"], fractions=(1.0, 0.0, 0.0))
    with ib.InSituDataset(store, manifest, geometries=geoms, batch_size=3) as ds:
        rows = 0
        for batch in ds.train:
            assert batch.arrays["names"].shape == (len(batch), 6)
            assert batch.arrays["names"].tolist() == values[batch.sample_indices].tolist()
            rows += len(batch)
        assert rows == 10


def test_strings_alone_cannot_be_batched(tmp_path):
    _write(tmp_path / "s.zarr", 3, "names", _strings((6,)), (3,), str, "")
    store = ib.store(str(tmp_path / "s.zarr"))
    geoms = ib.open_geometries(store, ["names"])
    with pytest.raises(ib.InvalidArgumentError, match="at least one numeric array"):
        ib.InSituDataset(store, ib.split_by_chunk(geoms["names"], fractions=(1.0, 0.0, 0.0)), geometries=geoms)


def test_describe_and_print_summary_name_the_string_variables(tmp_path, capsys):
    values = _strings((12,), 4)
    _write(tmp_path / "s.zarr", 3, "names", values, (3,), str, "")
    _write(tmp_path / "s.zarr", 3, "x", np.arange(12, dtype="f4"), (3,), "f4", 0)
    store = ib.store(str(tmp_path / "s.zarr"))
    geoms = ib.open_geometries(store, ["x", "names"])
    geoms["names_next"] = geoms["names"].shift(1)
    manifest = ib.split_by_chunk(geoms["x"], fractions=(1.0, 0.0, 0.0))
    with ib.InSituDataset(store, manifest, geometries=geoms, batch_size=3) as ds:
        report = ds.describe()
        assert list(report["variables"]) == ["x"]  # the pool holds the numeric arrays alone
        strings = report["string_variables"]
        assert list(strings) == ["names", "names_next"]
        assert strings["names"]["shape"] == (12,) and strings["names"]["n_chunks"] == 4
        assert strings["names_next"]["offset"] == 1
        ds.print_summary()
    text = capsys.readouterr().out
    section = text.split("string variables", 1)[1].split("\n\n", 1)[0]
    assert "names\n" in section and "names_next  window +1" in section
    assert "4 chunks of 3 sample(s)" in section


def test_describe_has_no_string_section_without_strings(tmp_path):
    _write(tmp_path / "s.zarr", 3, "x", np.arange(12, dtype="f4"), (3,), "f4", 0)
    store = ib.store(str(tmp_path / "s.zarr"))
    geoms = ib.open_geometries(store, ["x"])
    with ib.InSituDataset(store, ib.split_by_chunk(geoms["x"], fractions=(1.0, 0.0, 0.0)), geometries=geoms) as ds:
        assert "string_variables" not in ds.describe()


def _stream_beside(path, zarr_format, name, values, chunks):
    """Every row of string array `name` through a dataset pass, beside a numeric array of
    the same sample axis: compared with `values` row for row."""
    _write(path, zarr_format, "x", np.arange(values.shape[0], dtype="i4"), chunks[:1], "i4", 0)
    store = ib.store(str(path))
    geoms = ib.open_geometries(store, ["x", name])
    with ib.InSituDataset(store, ib.split_by_chunk(geoms["x"], fractions=(1.0, 0.0, 0.0)), geometries=geoms,
                          batch_size=3, seed=4) as ds:
        rows = []
        for batch in ds.train:
            assert batch.arrays[name].tolist() == values[batch.sample_indices].tolist()
            rows.extend(batch.sample_indices.tolist())
    assert sorted(rows) == list(range(values.shape[0]))


@pytest.mark.parametrize("dtype, fill", [(str, "-"), (zarr.dtype.VariableLengthBytes(), b"-")], ids=["string", "bytes"])
def test_v3_strings_inside_shards(tmp_path, dtype, fill):
    """zarr-python 3's sharding codec around vlen-utf8 / vlen-bytes: every shard read whole
    (inner chunks scattered to their places, absent ones the fill value), as zarr-python reads it."""
    values = _strings((11, 7), 5)
    if fill == b"-":
        values = np.array([s.encode() for s in values.ravel()], dtype=object).reshape(values.shape)
    path = tmp_path / "s.zarr"
    # Rows 6.. never written: whole inner chunks (and the last shard) stay absent.
    expected = _write(path, 3, "v", values, (2, 3), dtype, fill, written=np.s_[:6], shards=(4, 6))
    meta = json.loads((path / "v" / "zarr.json").read_text())
    assert meta["codecs"][0]["name"] == "sharding_indexed"
    ours = read_whole(ib.store(str(path)), "v")
    assert ours.tolist() == np.asarray(expected, dtype=object).tolist()
    # Rows 6-7 are an absent inner chunk of a stored shard, rows 8-10 an absent shard.
    assert (path / "v" / "c" / "1" / "0").exists() and not (path / "v" / "c" / "2" / "0").exists()
    assert ours[6, 0] == fill and ours[10, 0] == fill
    _stream_beside(path, 3, "v", np.asarray(expected, dtype=object), (2, 3))


@pytest.mark.parametrize("shape, chunks", [((5, 7), (3, 4)), ((4, 3, 5), (3, 2, 4))])
@pytest.mark.parametrize("dtype", [str, zarr.dtype.VariableLengthBytes()], ids=["utf8", "bytes"])
def test_v2_strings_in_order_f(tmp_path, shape, chunks, dtype):
    """v2 `|O` arrays in order F store each chunk's items in F order (numcodecs' vlen
    codecs serialize the transposed chunk): read back in place, as zarr-python reads them."""
    values = _strings(shape, 6)
    if dtype is not str:
        values = np.array([s.encode() for s in values.ravel()], dtype=object).reshape(shape)
    path = tmp_path / "s.zarr"
    expected = _write(path, 2, "v", values, chunks, dtype, "", order="F")
    assert json.loads((path / "v" / ".zarray").read_text())["order"] == "F"
    assert np.asarray(expected, dtype=object).tolist() == values.tolist()
    ours = read_whole(ib.store(str(path)), "v")
    assert ours.tolist() == values.tolist()
    _stream_beside(path, 2, "v", values, chunks)


def test_v2_string_fill_value_zero_reads_as_empty(tmp_path):
    """zarr 2 wrote `"fill_value": 0` for object arrays by default (and read absent items as
    the integer 0). This reader reads them as "" (b"" for vlen-bytes), the empty item;
    zarr-python 3.1 reads "0" there (docs/limits.md says so)."""
    path = tmp_path / "s.zarr"
    _write(path, 2, "v", np.array(["a", "b", "c", "d"], dtype=object), (2,), str, "", written=np.s_[:2])
    zarray = json.loads((path / "v" / ".zarray").read_text())
    zarray["fill_value"] = 0
    (path / "v" / ".zarray").write_text(json.dumps(zarray))
    assert zarr.open_array(str(path / "v"), mode="r")[...].tolist() == ["a", "b", "0", "0"]
    assert read_whole(ib.store(str(path)), "v").tolist() == ["a", "b", "", ""]


def test_a_corrupt_inner_chunk_of_a_string_shard_is_named(tmp_path):
    path = tmp_path / "s.zarr"
    _write(path, 3, "v", _strings((4, 4), 7), (2, 2), str, "", shards=(4, 4), compressors=None)
    shard = path / "v" / "c" / "0" / "0"
    data = bytearray(shard.read_bytes())
    assert data[:4] == b"\x04\x00\x00\x00"  # inner chunk [0, 0] first: its item count
    data[0] = 5
    shard.write_bytes(bytes(data))
    with pytest.raises(ib.CorruptChunkError, match=r"v \[0, 0\].*inner chunk \[0, 0\].*holds 5 items"):
        ib.read_chunk(ib.store(str(path)), "v", (0, 0))
    shard.write_bytes(bytes(data[:-10]))  # the index cut short
    with pytest.raises(ib.CorruptChunkError, match=r"v \[0, 0\].*shard index"):
        ib.read_chunk(ib.store(str(path)), "v", (0, 0))


def test_v3_strings_in_nested_shards_with_the_index_first(tmp_path):
    from zarr.codecs import ShardingCodec, ZstdCodec
    from zarr.codecs.vlen_utf8 import VLenUTF8Codec

    values = _strings((8, 6), 8)
    inner = ShardingCodec(chunk_shape=(2, 3), codecs=[VLenUTF8Codec(), ZstdCodec()])
    path = tmp_path / "s.zarr"
    expected = _write(path, 3, "v", values, (8, 6), str, "~", written=np.s_[:5], compressors=None,
                      serializer=ShardingCodec(chunk_shape=(4, 6), codecs=[inner], index_location="start"))
    assert read_whole(ib.store(str(path)), "v").tolist() == np.asarray(expected, dtype=object).tolist()
    assert expected[4, 0] == values[4, 0] and expected[6, 0] == "~"


def test_string_arrays_with_other_codecs_are_refused_by_name(tmp_path):
    """docs/limits.md: a string array whose codecs are not vlen-utf8 (after a transpose or
    inside shards) and bytes codecs is refused, naming the array and the codec found."""
    path = tmp_path / "s.zarr"
    zarr.open_group(str(path), mode="w", zarr_format=3)
    (path / "labels").mkdir()
    (path / "labels" / "zarr.json").write_text(json.dumps({
        "zarr_format": 3, "node_type": "array", "shape": [4], "data_type": "string",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}},
        "chunk_key_encoding": {"name": "default"}, "fill_value": "", "codecs": [{"name": "bytes"}]}))
    with pytest.raises(ib.UnsupportedError, match=r"array 'labels': data type \"string\" is read with codec "
                                                  r"\"vlen-utf8\" first .*found \"bytes\""):
        ib.open_geometries(ib.store(str(path)), ["labels"])
