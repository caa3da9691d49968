"""numcodecs filters, checksums and compressors decoded natively, checked value for value
against zarr-python + numcodecs reading what they wrote (lossy filters are lossy when
writing: the oracle is what zarr-python reads back)."""

from __future__ import annotations

import json
import lzma
import shutil
from pathlib import Path

import numpy as np
import pytest

import insitubatch as ib
from cloud_data import read_whole

numcodecs = pytest.importorskip("numcodecs")
zarr = pytest.importorskip("zarr")

rng = np.random.default_rng(11)
SMOOTH = np.cumsum(rng.normal(0, 1, (37, 9)), axis=0)

LABELS = ["cat", "dog", "émeu", "ostrich"]  # 'bee' is no label: it reads back as ''
INTS = np.cumsum(rng.integers(-5, 5, (37, 9)), axis=0).astype("<i4")
# FORMAT_RAW streams do not record their filter chain: the configuration does.
RAW_CHAINS = {
    "delta-lzma2": [{"id": lzma.FILTER_DELTA, "dist": 8}, {"id": lzma.FILTER_LZMA2, "preset": 1}],
    "lzma1": [{"id": lzma.FILTER_LZMA1, "preset": 6, "dict_size": 1 << 16, "lc": 0, "lp": 2, "pb": 2}],
    "x86-extreme": [{"id": lzma.FILTER_X86}, {"id": lzma.FILTER_LZMA2, "preset": 9 | lzma.PRESET_EXTREME}],
    "arm-offset": [{"id": lzma.FILTER_ARM, "start_offset": 16}, {"id": lzma.FILTER_LZMA2}],
    "sparc-delta-small-dict": [{"id": lzma.FILTER_SPARC}, {"id": lzma.FILTER_DELTA, "dist": 4},
                               {"id": lzma.FILTER_LZMA2, "dict_size": 4096, "mode": lzma.MODE_FAST,
                                "mf": lzma.MF_HC4, "nice_len": 32, "depth": 0}],
}
ANIMALS = np.array([["cat", "dog", "émeu", "ostrich", "bee"][i % 5] for i in range(37 * 9)]).reshape(37, 9)

# (name, values, filters, compressor)
V2_CASES = [
    ("delta-i4", np.cumsum(rng.integers(-5, 5, (37, 9)), axis=0).astype("<i4"), [numcodecs.Delta("<i4")], None),
    ("delta-i8-as-i2", np.cumsum(rng.integers(-5, 5, (37, 9)), axis=0).astype("<i8"),
     [numcodecs.Delta("<i8", astype="<i2")], numcodecs.Zstd()),
    ("delta-u1-wraps", rng.integers(0, 255, (37, 9)).astype("u1"), [numcodecs.Delta("u1")], None),
    ("delta-f8", SMOOTH.astype("<f8"), [numcodecs.Delta("<f8")], numcodecs.Zlib()),
    ("delta-big-endian", SMOOTH.astype(">f4"), [numcodecs.Delta(">f4")], None),
    ("fixedscaleoffset-f8-u1", (SMOOTH * 3 + 100).clip(0, 250).astype("<f8"),
     [numcodecs.FixedScaleOffset(offset=100, scale=1.0, dtype="<f8", astype="u1")], None),
    ("fixedscaleoffset-f4-i2", SMOOTH.astype("<f4"),
     [numcodecs.FixedScaleOffset(offset=0.5, scale=1000, dtype="<f4", astype="<i2")], numcodecs.Blosc()),
    ("quantize-f8", SMOOTH.astype("<f8"), [numcodecs.Quantize(digits=3, dtype="<f8")], numcodecs.Zstd()),
    ("quantize-f4", SMOOTH.astype("<f4"), [numcodecs.Quantize(digits=1, dtype="<f4")], None),
    ("bitround-f4", SMOOTH.astype("<f4"), [numcodecs.BitRound(keepbits=7)], numcodecs.Zstd()),
    ("astype-f8-from-f4", SMOOTH.astype("<f8"), [numcodecs.AsType(encode_dtype="<f4", decode_dtype="<f8")], None),
    ("astype-i8-from-i2", rng.integers(-300, 300, (37, 9)).astype("<i8"),
     [numcodecs.AsType(encode_dtype="<i2", decode_dtype="<i8")], None),
    ("packbits", rng.integers(0, 2, (37, 9)).astype(bool), [numcodecs.PackBits()], None),
    ("shuffle-zlib", SMOOTH.astype("<f8"), [numcodecs.Shuffle(elementsize=8)], numcodecs.Zlib(level=4)),
    ("crc32-start", SMOOTH.astype("<f4"), [numcodecs.CRC32()], numcodecs.Zstd()),
    ("crc32-end", SMOOTH.astype("<f4"), [numcodecs.CRC32(location="end")], None),
    ("adler32", SMOOTH.astype("<f4"), [numcodecs.Adler32()], numcodecs.Zlib()),
    ("fletcher32", SMOOTH.astype("<f4"), [numcodecs.Fletcher32()], None),
    ("fletcher32-odd-bytes", rng.integers(0, 255, (37, 3)).astype("u1"), [numcodecs.Fletcher32()], None),
    ("jenkins_lookup3", SMOOTH.astype("<f4"), [numcodecs.JenkinsLookup3()], None),
    ("jenkins_lookup3-initval-odd-bytes", rng.integers(0, 255, (37, 5)).astype("u1"),
     [numcodecs.JenkinsLookup3(initval=0xDEADBEEF)], numcodecs.Zstd()),
    ("delta-then-jenkins_lookup3", INTS, [numcodecs.Delta("<i4"), numcodecs.JenkinsLookup3(initval=7)], None),
    ("bz2", SMOOTH.astype("<f8"), None, numcodecs.BZ2(level=5)),
    ("lzma-xz", SMOOTH.astype("<f8"), None, numcodecs.LZMA()),
    ("lzma-alone", SMOOTH.astype("<i8"), None, numcodecs.LZMA(format=2)),
    *[(f"lzma-raw-{name}", SMOOTH.astype("<f8"), None, numcodecs.LZMA(format=lzma.FORMAT_RAW, filters=chain))
      for name, chain in RAW_CHAINS.items()],
    ("lzma-raw-ints-after-shuffle", INTS, [numcodecs.Shuffle(elementsize=4)],
     numcodecs.LZMA(format=lzma.FORMAT_RAW, filters=RAW_CHAINS["delta-lzma2"])),
    ("categorize-u1", ANIMALS.astype("<U7"), [numcodecs.Categorize(LABELS, dtype="<U7")], numcodecs.Zstd()),
    ("categorize-big-endian-u2", ANIMALS.astype(">U7"), [numcodecs.Categorize(LABELS, dtype=">U7", astype="<u2")], None),
    ("categorize-i4", ANIMALS.astype("<U8"), [numcodecs.Categorize(LABELS, dtype="<U8", astype="<i4")], None),
    ("delta-then-bz2", np.cumsum(rng.integers(0, 9, (37, 9)), axis=0).astype("<i4"), [numcodecs.Delta("<i4")],
     numcodecs.BZ2()),
    ("base64", SMOOTH.astype("<f4"), [numcodecs.Base64()], None),
    ("delta-base64-zstd", INTS, [numcodecs.Delta("<i4"), numcodecs.Base64()], numcodecs.Zstd()),
]


@pytest.mark.parametrize("name, values, filters, compressor", V2_CASES, ids=[c[0] for c in V2_CASES])
def test_v2_filters_and_compressors_match_zarr_python(tmp_path, name, values, filters, compressor):
    path = tmp_path / "s.zarr"
    arr = zarr.create_array(str(path), name="v", shape=values.shape, chunks=(8, 9), dtype=values.dtype,
                            filters=filters, compressors=compressor, zarr_format=2,
                            fill_value="" if values.dtype.kind == "U" else 0)
    arr[...] = values
    expected = zarr.open_array(str(path / "v"), mode="r")[...]
    ours = read_whole(ib.store(str(path)), "v")
    # Numbers are read into native byte order; text keeps its stored order (numpy reads either).
    assert ours.dtype == (expected.dtype if values.dtype.kind == "U" else expected.dtype.newbyteorder("="))
    np.testing.assert_array_equal(ours, expected)
    if name.startswith("categorize"):
        assert (ours == "").sum() == 9 * 37 // 5 and ours[0, 2] == expected[0, 2]


def test_categorize_to_objects_elsewhere_than_an_object_arrays_first_filter_is_named(tmp_path):
    path = tmp_path / "s.zarr"
    zarr.create_array(str(path), name="v", shape=(4,), chunks=(4,), dtype="<u1", zarr_format=2, fill_value=0)
    meta = path / "v" / ".zarray"
    meta.write_text(meta.read_text().replace('"filters": null', '"filters": [{"id": "categorize",'
                                             ' "labels": ["a"], "dtype": "|O", "astype": "|u1"}]'))
    with pytest.raises(ib.UnsupportedError, match='categorize to dtype "[|]O" is not supported here.*first filter'):
        ib.read_chunk(ib.store(str(path)), "v", (0,))


# String labels as integer codes, numcodecs' Categorize(dtype=object) as a v2 "|O" array's
# object codec: written by zarr-python 2 (zarr-python 3 neither writes nor reads them), so
# the store is a fixture (tests/data/make_zarr2_categorize.py) and the oracle is what
# zarr-python 2 read back from it.
ZARR2_CATEGORIZE = Path(__file__).resolve().parent / "data" / "zarr2_categorize.zarr"


def _zarr2_categorize_read():
    read = json.loads((ZARR2_CATEGORIZE.parent / "zarr2_categorize_read.json").read_text(encoding="utf-8"))
    return {name: np.array(rows, dtype=object) for name, rows in read.items()}


def test_zarr_python_2_categorized_string_labels_read_as_it_reads_them(tmp_path):
    expected = _zarr2_categorize_read()
    store = ib.store(str(ZARR2_CATEGORIZE))
    geoms = ib.open_geometries(store)
    assert sorted(geoms) == ["labels", "labels_i2", "x"]
    for name in ("labels", "labels_i2"):
        assert geoms[name].dtype == np.dtype(object)
        assert read_whole(store, name).tolist() == expected[name].tolist(), name
    # labels_i2's chunks past row 16 were never written: its fill value "cat".
    assert not (ZARR2_CATEGORIZE / "labels_i2" / "2.0").exists()
    assert set(expected["labels_i2"][16:].ravel()) == {"cat"}
    # The codes in a stored chunk, as the numcodecs in this venv decodes them.
    codec = numcodecs.get_codec(json.loads((ZARR2_CATEGORIZE / "labels" / ".zarray").read_text())["filters"][0])
    codes = numcodecs.Zstd().decode((ZARR2_CATEGORIZE / "labels" / "1.0").read_bytes())
    assert ib.read_chunk(store, "labels", (1, 0)).tolist() == codec.decode(codes).reshape(8, 3).tolist()

    # Corrupt codes (a chunk of the wrong size) name the chunk.
    broken = tmp_path / "s.zarr"
    shutil.copytree(ZARR2_CATEGORIZE, broken)
    (broken / "labels_i2" / "0.0").write_bytes(b"\x01\x00\x02")
    with pytest.raises(ib.CorruptChunkError, match=r"labels_i2 \[0, 0\].*categorize: chunk of 3 bytes does not hold"):
        ib.read_chunk(ib.store(str(broken)), "labels_i2", (0, 0))


def test_zarr_python_2_categorized_string_labels_stream_beside_a_dataset():
    expected = _zarr2_categorize_read()
    store = ib.store(str(ZARR2_CATEGORIZE))
    geoms = ib.open_geometries(store)
    x = np.arange(37 * 3, dtype="<f4").reshape(37, 3)
    manifest = ib.split_by_chunk(geoms["x"], fractions=(1.0, 0.0, 0.0))
    with ib.InSituDataset(store, manifest, geometries=geoms, batch_size=4, seed=3) as ds:
        seen = []
        for batch in ds.train:
            rows = batch.sample_indices
            np.testing.assert_array_equal(batch.arrays["x"], x[rows])
            for name in ("labels", "labels_i2"):
                assert batch.arrays[name].tolist() == expected[name][rows].tolist(), name
            seen.extend(rows.tolist())
    assert sorted(seen) == list(range(37))


@pytest.mark.parametrize("checksum", [numcodecs.Fletcher32(), numcodecs.JenkinsLookup3(initval=3)],
                         ids=["fletcher32", "jenkins_lookup3"])
def test_a_checksum_mismatch_is_a_corrupt_chunk(tmp_path, checksum):
    path = tmp_path / "s.zarr"
    arr = zarr.create_array(str(path), name="v", shape=(8,), chunks=(8,), dtype="<f4",
                            filters=[checksum], compressors=None, zarr_format=2, fill_value=0)
    arr[...] = np.arange(8, dtype="f4")
    chunk = path / "v" / "0"
    data = bytearray(chunk.read_bytes())
    data[3] ^= 0x40
    chunk.write_bytes(bytes(data))
    with pytest.raises(ib.CorruptChunkError, match=f"{checksum.codec_id}: checksum mismatch"):
        ib.read_chunk(ib.store(str(path)), "v", (0,))


def _edit_zarray(path, edit):
    meta = path / ".zarray"
    zarray = json.loads(meta.read_text())
    edit(zarray)
    meta.write_text(json.dumps(zarray))


def test_a_jenkins_lookup3_prefix_is_refused_by_name(tmp_path):
    # numcodecs can neither write a prefix to JSON nor read one back from it.
    path = tmp_path / "s.zarr"
    arr = zarr.create_array(str(path), name="v", shape=(4,), chunks=(4,), dtype="<f4",
                            filters=[numcodecs.JenkinsLookup3()], compressors=None, zarr_format=2, fill_value=0)
    arr[...] = 1
    _edit_zarray(path / "v", lambda z: z["filters"][0].update(prefix="FADB"))
    with pytest.raises(ib.UnsupportedError, match='jenkins_lookup3 with a "prefix" is not supported'):
        ib.read_chunk(ib.store(str(path)), "v", (0,))


def test_lzma_xz_with_its_own_filter_chain_reads_what_was_written(tmp_path):
    # The .xz container records its chain: read as written (numcodecs itself refuses to
    # decode it, passing "filters" to a FORMAT_XZ decompressor).
    path = tmp_path / "s.zarr"
    arr = zarr.create_array(str(path), name="v", shape=INTS.shape, chunks=(8, 9), dtype=INTS.dtype, zarr_format=2,
                            compressors=numcodecs.LZMA(format=lzma.FORMAT_XZ, filters=RAW_CHAINS["delta-lzma2"]),
                            fill_value=0)
    arr[...] = INTS
    np.testing.assert_array_equal(read_whole(ib.store(str(path)), "v"), INTS)


LZMA_RAW_REFUSALS = [
    (lambda c: c.pop("filters"), 'FORMAT_RAW \\(format 3\\) needs "filters"'),
    (lambda c: c.update(filters=[]), "a list of 1 to 4 filter specifiers"),
    (lambda c: c.update(filters=[{"id": lzma.FILTER_DELTA}] * 4 + [{"id": lzma.FILTER_LZMA2}]), "1 to 4"),
    (lambda c: c["filters"].insert(0, {"id": 10}), 'filter 0: "id" 10 is not a filter Python\'s lzma knows'),
    (lambda c: c["filters"].insert(0, {"dist": 2}), 'filter 0: needs an integer "id"'),
    (lambda c: c["filters"][0].update(dist=-1), 'filter 0: "dist" must be in \\[0, 4294967295\\]'),
    (lambda c: c["filters"][0].update(dist=300), "liblzma refuses their options"),
    (lambda c: c["filters"][0].update(start_offset=0), 'FILTER_DELTA takes no "start_offset"'),
    (lambda c: c["filters"][1].update(preset=10), 'filter 1: "preset" 10 is invalid'),
    (lambda c: c["filters"][1].update(dict_size=1 << 31), "need more than 512 MiB to decode"),
    (lambda c: c["filters"].reverse(), "must end with FILTER_LZMA1 or FILTER_LZMA2"),
]


@pytest.mark.parametrize("edit, message", LZMA_RAW_REFUSALS, ids=range(len(LZMA_RAW_REFUSALS)))
def test_a_bad_lzma_raw_filter_chain_is_refused_naming_it(tmp_path, edit, message):
    path = tmp_path / "s.zarr"
    arr = zarr.create_array(str(path), name="v", shape=(4,), chunks=(4,), dtype="<f4", zarr_format=2, fill_value=0,
                            compressors=numcodecs.LZMA(format=lzma.FORMAT_RAW, filters=RAW_CHAINS["delta-lzma2"]))
    arr[...] = 1
    _edit_zarray(path / "v", lambda z: edit(z["compressor"]))
    with pytest.raises(ib.InvalidArgumentError, match=message):
        ib.read_chunk(ib.store(str(path)), "v", (0,))


def test_checksummed_and_raw_lzma_arrays_stream_through_a_dataset(tmp_path):
    path = tmp_path / "s.zarr"
    specs = {
        "jenkins": (SMOOTH.astype("<f4"), [numcodecs.JenkinsLookup3(initval=11)], numcodecs.Zlib()),
        "raw": (INTS, None, numcodecs.LZMA(format=lzma.FORMAT_RAW, filters=RAW_CHAINS["sparc-delta-small-dict"])),
    }
    for name, (values, filters, compressor) in specs.items():
        arr = zarr.create_array(str(path), name=name, shape=values.shape, chunks=(8, 9), dtype=values.dtype,
                                filters=filters, compressors=compressor, zarr_format=2, fill_value=0)
        arr[...] = values
    expected = {name: zarr.open_array(str(path / name), mode="r")[...] for name in specs}
    store = ib.store(str(path))
    geoms = ib.open_geometries(store, list(specs))
    manifest = ib.split_by_chunk(geoms["jenkins"], fractions=(1.0, 0.0, 0.0))
    with ib.InSituDataset(store, manifest, geometries=geoms, batch_size=5, seed=2) as ds:
        seen = []
        for batch in ds.train:
            rows = batch.sample_indices
            for name in specs:
                np.testing.assert_array_equal(batch.arrays[name], expected[name][rows], err_msg=name)
            seen.extend(rows.tolist())
    assert sorted(seen) == list(range(37))


def test_codecs_without_their_library_are_named(tmp_path):
    (tmp_path / "s.zarr" / "v").mkdir(parents=True)
    (tmp_path / "s.zarr" / ".zgroup").write_text('{"zarr_format": 2}')
    (tmp_path / "s.zarr" / "v" / ".zarray").write_text(
        '{"zarr_format": 2, "shape": [4], "chunks": [4], "dtype": "<f8", "order": "C", "fill_value": 0,'
        ' "filters": null, "compressor": {"id": "zfpy", "mode": 4}}')
    with pytest.raises(ib.UnsupportedError, match=r'compressor "zfpy" needs a codec library.*numcodecs\[zfpy\]'):
        ib.read_chunk(ib.store(str(tmp_path / "s.zarr")), "v", (0,))


def _v3_cases():
    zn = pytest.importorskip("zarr.codecs.numcodecs")
    ints = np.cumsum(rng.integers(-5, 5, (37, 9)), axis=0).astype("<i4")
    return [
        ("delta", ints, [zn.Delta(dtype="<i4")], [zn.BZ2()]),
        ("delta-astype", ints.astype("<i8"), [zn.Delta(dtype="<i8", astype="<i2")], [zn.Zstd()]),
        ("fixedscaleoffset", SMOOTH.astype("<f8"),
         [zn.FixedScaleOffset(offset=0, scale=100, dtype="<f8", astype="<i4")], [zn.LZMA()]),
        ("quantize", SMOOTH.astype("<f4"), [zn.Quantize(digits=2, dtype="<f4")], [zn.Zlib()]),
        ("bitround", SMOOTH.astype("<f8"), [zn.BitRound(keepbits=12)], [zn.Zstd()]),
        ("astype", SMOOTH.astype("<f8"), [zn.AsType(encode_dtype="<f4", decode_dtype="<f8")], None),
        ("packbits", rng.integers(0, 2, (37, 9)).astype(bool), [zn.PackBits()], None),
        ("checksums", SMOOTH.astype("<f4"), None, [zn.Shuffle(elementsize=4), zn.Zlib(), zn.Adler32(), zn.CRC32()]),
        ("fletcher32", SMOOTH.astype("<f4"), None, [zn.Fletcher32()]),
        ("jenkins_lookup3", SMOOTH.astype("<f4"), None, [zn.Zstd(), zn.JenkinsLookup3(initval=7)]),
        ("lzma-raw", SMOOTH.astype("<f8"), None, [zn.LZMA(format=lzma.FORMAT_RAW, filters=RAW_CHAINS["delta-lzma2"])]),
        ("lzma-raw-lzma1", ints, None, [zn.LZMA(format=lzma.FORMAT_RAW, filters=RAW_CHAINS["lzma1"])]),
    ]


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("index", range(12))
def test_v3_numcodecs_as_zarr_python_3_writes_them(tmp_path, index):
    name, values, filters, compressors = _v3_cases()[index]
    path = tmp_path / "s.zarr"
    kwargs = {"filters": filters} if filters else {}
    arr = zarr.create_array(str(path), name="v", shape=values.shape, chunks=(8, 9), dtype=values.dtype,
                            compressors=compressors, zarr_format=3, fill_value=0, **kwargs)
    arr[...] = values
    expected = zarr.open_array(str(path / "v"), mode="r")[...]
    np.testing.assert_array_equal(read_whole(ib.store(str(path)), "v"), expected, err_msg=name)
