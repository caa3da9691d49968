"""The edges of the Zarr read path: metadata that is not UTF-8 or not JSON, a stored chunk
far larger than any encoding of it, and read_chunk's reuse of a store's parsed metadata.
Stores are written by zarr-python; only the byte that makes them bad is changed here."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import zarr
from zarr.codecs import ZstdCodec

import insitubatch as ib
from insitubatch import CorruptChunkError, InvalidArgumentError


def _write(root, zarr_format, **kwargs):
    """A 12 x 5 float64 array "v" in 3 x 5 chunks (120 bytes each) with a placeholder
    attribute whose bytes a test may replace."""
    store = root if isinstance(root, zarr.abc.store.Store) else zarr.storage.LocalStore(root)
    arr = zarr.create_array(store, name="v", shape=(12, 5), chunks=(3, 5), dtype="f8",
                            zarr_format=zarr_format, fill_value=0, **kwargs)
    arr[...] = np.arange(60, dtype="f8").reshape(12, 5)
    arr.attrs["note"] = "PLACEHOLDER"
    return arr


def _patch(path, old: bytes, new: bytes):
    data = path.read_bytes()
    assert data.count(old) == 1, path
    path.write_bytes(data.replace(old, new))


# -- metadata that is not UTF-8 ------------------------------------------------------------


@pytest.mark.parametrize("zarr_format,document", [(3, "zarr.json"), (2, ".zattrs")])
def test_metadata_that_is_not_utf8_is_a_metadata_error_naming_the_file(tmp_path, zarr_format, document):
    root = tmp_path / "s.zarr"
    _write(root, zarr_format)
    path = root / "v" / document
    _patch(path, b"PLACEHOLDER", b"PLACE\xffHOLDER")
    pattern = rf"{path}: not valid JSON: parse error at line \d+, column \d+: .*ill-formed UTF-8 byte.*PLACE\\xff"
    store = ib.local_store(root)
    calls = {
        "read_chunk": lambda: ib.read_chunk(store, "v", (0, 0)),
        "read_chunk(url)": lambda: ib.read_chunk(str(root), "v", (0, 0)),
        "open_geometries": lambda: ib.open_geometries(store, ["v"]),
        "open_geometries(all)": lambda: ib.open_geometries(store),
        "array_metadata": lambda: ib.geometry.open_hierarchy(store).array_metadata("v"),
    }
    for name, call in calls.items():
        with pytest.raises(InvalidArgumentError, match=pattern) as info:
            call()
        assert isinstance(info.value, ValueError), name  # never nanobind's bare RuntimeError


def test_a_non_utf8_byte_in_a_v2_array_document_is_named_too(tmp_path):
    root = tmp_path / "s.zarr"
    _write(root, 2)
    _patch(root / "v" / ".zarray", b'"zarr_format"', b'"zarr_format\xc3"')
    with pytest.raises(InvalidArgumentError, match=r"\.zarray: not valid JSON: .*zarr_format\\xc3"):
        ib.read_chunk(ib.local_store(root), "v", (0, 0))


def test_error_messages_quoting_bytes_that_are_not_utf8_stay_text(tmp_path):
    # A directory name is not JSON: the binding itself escapes what is not UTF-8.
    root = tmp_path / "s.zarr"
    _write(root, 3)
    zarr.create_array(zarr.storage.LocalStore(root), name="w", shape=(2,), dtype="i4")
    (root / "w" / "zarr.json").write_text("{")
    os.rename(os.fsencode(root / "w"), os.fsencode(root) + b"/w\xff")
    # Every array is walked to when every array is asked for (a named one reads only its own).
    with pytest.raises(InvalidArgumentError, match=r"/w\\xff/zarr\.json: not valid JSON"):
        ib.open_geometries(ib.local_store(root))
    assert ib.read_chunk(ib.local_store(root), "v", (0, 0)) is not None


# -- metadata that is not JSON -------------------------------------------------------------


@pytest.mark.parametrize("zarr_format,document", [(3, "zarr.json"), (2, ".zarray"), (2, ".zattrs")])
def test_a_syntax_error_in_metadata_is_a_metadata_error_with_its_position(tmp_path, zarr_format, document):
    root = tmp_path / "s.zarr"
    _write(root, zarr_format)
    path = root / "v" / document
    text = path.read_bytes()
    path.write_bytes(text[: text.rindex(b"}")])  # the closing brace lost: ends mid-object
    lines = text[: text.rindex(b"}")].count(b"\n") + 1
    with pytest.raises(InvalidArgumentError, match=rf"{path}: not valid JSON: parse error at line {lines}, column \d+") as info:
        ib.read_chunk(ib.local_store(root), "v", (0, 0))
    assert not isinstance(info.value, CorruptChunkError)
    with pytest.raises(InvalidArgumentError, match=rf"{path}: not valid JSON"):
        ib.open_geometries(ib.local_store(root), ["v"])


# -- a stored chunk larger than any encoding of it ----------------------------------------

_GIB8 = 8 << 30

# Runs in a child whose address space is capped well below the sparse chunk's 8 GiB: a
# reader that allocated the object's size first would fail with MemoryError instead.
_CAPPED = textwrap.dedent("""
    import resource, sys
    import insitubatch as ib
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
    try:
        ib.read_chunk(ib.local_store(sys.argv[1]), "v", (1, 0))
    except ib.CorruptChunkError as e:
        print("CorruptChunkError:", e)
    except BaseException as e:
        print(type(e).__name__ + ":", e)
""")


@pytest.mark.parametrize("compressors,bound", [(None, 120), ([ZstdCodec()], None)])
def test_an_oversized_stored_chunk_is_refused_by_its_size_unread(tmp_path, compressors, bound):
    root = tmp_path / "s.zarr"
    _write(root, 3, compressors=compressors)
    chunk = root / "v" / "c" / "1" / "0"
    os.truncate(chunk, _GIB8)  # sparse: costs no disk
    assert chunk.stat().st_size == _GIB8
    store = ib.local_store(root)
    limit = rf"\d+" if bound is None else str(bound)
    pattern = (rf"v \[1, 0\]: reading {chunk}: object is {_GIB8} bytes, more than the {limit} its reader"
               r" accepts \(refused unread\)")
    with pytest.raises(CorruptChunkError, match=pattern):
        ib.read_chunk(store, "v", (1, 0))
    out = subprocess.run([sys.executable, "-c", _CAPPED, str(root)], capture_output=True, text=True, timeout=60)
    assert out.stdout.startswith("CorruptChunkError: v [1, 0]: reading"), out.stdout + out.stderr
    assert f"object is {_GIB8} bytes" in out.stdout
    # Its neighbours still read, and the bound leaves any real encoding alone.
    np.testing.assert_array_equal(ib.read_chunk(store, "v", (0, 0)), np.arange(15, dtype="f8").reshape(3, 5))


def test_the_bound_leaves_encoders_that_expand_more_than_the_librarys_own_alone(tmp_path):
    """An LZMA1 stream (numcodecs' FORMAT_ALONE) of incompressible data grows by ~1.5%, past
    liblzma's .xz bound plus 64 KiB at this size: a valid chunk must still read."""
    import lzma

    import numcodecs
    values = np.frombuffer(np.random.default_rng(3).bytes(6_000_000), dtype="u1").reshape(2, 3_000_000)
    root = tmp_path / "s.zarr"
    arr = zarr.create_array(zarr.storage.LocalStore(root), name="v", shape=values.shape, chunks=values.shape,
                            dtype="u1", zarr_format=2, compressors=numcodecs.LZMA(format=lzma.FORMAT_ALONE, preset=0))
    arr[...] = values
    assert (root / "v" / "0.0").stat().st_size > values.nbytes + 80_000
    np.testing.assert_array_equal(ib.read_chunk(ib.local_store(root), "v", (0, 0)), values, strict=True)


def test_an_oversized_chunk_in_a_dataset_pass_follows_on_bad_chunk(tmp_path):
    root = tmp_path / "s.zarr"
    _write(root, 3, compressors=None)
    os.truncate(root / "v" / "c" / "1" / "0", _GIB8)
    store = ib.local_store(root)
    geoms = ib.open_geometries(store, ["v"])
    manifest = ib.split_by_chunk(geoms["v"], fractions=(1.0, 0.0, 0.0))
    ds = ib.InSituDataset(store, manifest, geoms, batch_size=3, shuffle=False)
    with pytest.raises(CorruptChunkError, match=rf"v \[1, 0\].*object is {_GIB8} bytes, more than the 120"):
        list(ds.train)
    ds = ib.InSituDataset(store, manifest, geoms, batch_size=3, shuffle=False, on_bad_chunk="nan")
    batches = list(ds.train)
    assert ds.bad_chunks == [ib.StoredChunkRead("v", 1, (0,))]
    values = np.concatenate([b.arrays["v"] for b in batches])
    order = np.concatenate([b.sample_indices for b in batches])
    full = np.arange(60, dtype="f8").reshape(12, 5)
    bad = (order >= 3) & (order < 6)
    assert np.isnan(values[bad]).all()
    np.testing.assert_array_equal(values[~bad], full[order[~bad]])
    assert ds.last_pass.bytes_read == 3 * 120  # the three good chunks; the bad one was never read


def test_a_python_served_oversized_chunk_is_refused_before_decoding(tmp_path):
    # A zarr-python store gives the reader no size first: the bytes arrive, then the array
    # refuses them by the same bound before any codec runs.
    arr = _write(zarr.storage.MemoryStore(), 3, compressors=None)
    store = arr.store
    import asyncio
    from zarr.core.buffer import default_buffer_prototype

    asyncio.run(store.set("v/c/1/0", default_buffer_prototype().buffer.from_bytes(b"\0" * 4096)))
    with pytest.raises(CorruptChunkError, match=r"v \[1, 0\].*stored object is 4096 bytes, more than the 120 any"
                       r" valid encoding of the chunk takes \(bytes\)"):
        ib.read_chunk(store, "v", (1, 0))


# -- read_chunk reuses the store's parsed metadata ----------------------------------------


class _CountingStore(zarr.storage.MemoryStore):
    """A zarr-python store that counts the reads of each key."""

    def __init__(self):
        super().__init__()
        self.gets: dict[str, int] = {}

    async def get(self, key, prototype, byte_range=None):
        self.gets[key] = self.gets.get(key, 0) + 1
        return await super().get(key, prototype, byte_range)


def test_read_chunk_parses_a_store_objects_metadata_once(tmp_path):
    store = _CountingStore()
    arr = zarr.create_array(store, name="v", shape=(12, 5), chunks=(3, 5), dtype="f8", fill_value=0)
    arr[...] = np.arange(60, dtype="f8").reshape(12, 5)
    arr.attrs["big"] = "x" * 100_000
    full = arr[...]
    store.gets.clear()
    for i in range(4):
        np.testing.assert_array_equal(ib.read_chunk(store, "v", (i, 0)), full[3 * i:3 * i + 3])
    assert store.gets.get("v/zarr.json") == 1
    assert [store.gets.get(f"v/c/{i}/0") for i in range(4)] == [1, 1, 1, 1]  # chunks are read every time
    # A native store object is remembered the same way; a new object parses afresh.
    counting = ib.as_native_store(store)
    assert ib.read_chunk(counting, "v", (0, 0)).shape == (3, 5)
    assert ib.read_chunk(counting, "v", (1, 0)).shape == (3, 5)
    assert store.gets["v/zarr.json"] == 2
    assert ib.read_chunk(store, "v", (0, 0)).shape == (3, 5)  # the last store read was `counting`
    assert store.gets["v/zarr.json"] == 3


def test_read_chunk_by_path_sees_metadata_rewritten_between_calls(tmp_path):
    root = tmp_path / "s.zarr"
    _write(root, 3)
    assert ib.read_chunk(str(root), "v", (0, 0)).dtype == np.float64
    zarr.create_array(zarr.storage.LocalStore(root), name="v", shape=(4,), chunks=(2,), dtype="i2", overwrite=True)[...] = 7
    np.testing.assert_array_equal(ib.read_chunk(str(root), "v", (1,)), np.array([7, 7], dtype="i2"))
