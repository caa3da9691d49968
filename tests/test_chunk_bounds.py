"""Every allocation a stored object can ask for is bounded: sharded arrays (a shard, and each
inner chunk its index names), variable-length strings (a chunk, its item count, its
compressed frames) and numcodecs filter chains get the bound plain chunks have, and are
refused with the message plain chunks get. Stores are written by zarr-python 3; only the
object that makes them hostile is replaced here. A hostile read runs in a child whose
address space is capped half a gigabyte above what it already uses, so a reader that
allocated what the object claims fails with MemoryError instead of the refusal."""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import zarr
from crc32c import crc32c
from zarr.codecs import BytesCodec, Crc32cCodec, ShardingCodec, ZstdCodec

import insitubatch as ib
from cloud_data import engine_read, read_whole
from insitubatch import CorruptChunkError

numcodecs = pytest.importorskip("numcodecs")

_GIB8 = 8 << 30
_RNG = np.random.default_rng(42)

_CAPPED = textwrap.dedent("""
    import json, resource, sys
    import insitubatch as ib
    root, path, bad, good = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
    store = ib.local_store(root)
    if good is not None:
        ib.read_chunk(store, path, good)  # metadata, threads and buffers in place first
    in_use = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmSize:")) << 10
    resource.setrlimit(resource.RLIMIT_AS, (in_use + (512 << 20),) * 2)
    try:
        ib.read_chunk(store, path, bad)
        print("read")
    except BaseException as e:
        print(type(e).__name__ + ":", e)
""")


def _capped_read(root, path, bad, good=None) -> str:
    """What reading chunk ``bad`` in a capped child ends with: "CorruptChunkError: ..."."""
    env = dict(os.environ, MALLOC_ARENA_MAX="2")  # glibc's per-thread arenas would eat the cap
    out = subprocess.run([sys.executable, "-c", _CAPPED, str(root), path, json.dumps(list(bad)),
                          json.dumps(None if good is None else list(good))],
                         capture_output=True, text=True, timeout=120, env=env)
    assert out.stdout, out.stderr
    return out.stdout.strip()


def _refused_unread(message: str, path, size: int, bound: int | None = None) -> None:
    limit = r"\d+" if bound is None else str(bound)
    assert message.startswith("CorruptChunkError: "), message
    assert f"reading {path}: object is {size} bytes, more than the " in message, message
    assert re.search(rf"more than the {limit} its reader accepts \(refused unread\)", message), message


def _incompressible(shape, dtype):
    return np.frombuffer(_RNG.bytes(int(np.prod(shape)) * np.dtype(dtype).itemsize), dtype=dtype).reshape(shape)


# -- sharded arrays -------------------------------------------------------------------------


def _write(root, values, **kwargs):
    arr = zarr.create_array(zarr.storage.LocalStore(root), name="v", shape=values.shape, dtype=values.dtype,
                            fill_value=0, **kwargs)
    arr[...] = values
    return arr


def _shard_cases():
    random = _incompressible((128, 128), "<f8")  # incompressible: every zstd frame is larger than its chunk
    holes = random.copy()
    holes[:64, 64:] = 0  # an inner chunk of fill: absent from its shard
    nested = ShardingCodec(chunk_shape=(64, 64), codecs=[ShardingCodec(chunk_shape=(32, 32),
                                                                       codecs=[BytesCodec(), ZstdCodec()])])
    return {
        "zstd-inner": (random, dict(chunks=(64, 64), shards=(128, 128))),
        "absent-inner": (holes, dict(chunks=(64, 64), shards=(128, 128))),
        "raw-inner-index-start": (random, dict(chunks=(32, 64), shards=(128, 128), compressors=None,
                                               serializer=ShardingCodec(chunk_shape=(32, 64),
                                                                        index_location="start"))),
        "nested": (random, dict(chunks=(128, 128), serializer=nested, compressors=None)),
        "zstd-outside-the-shard": (random, dict(chunks=(128, 128), compressors=[ZstdCodec()],
                                                serializer=ShardingCodec(chunk_shape=(64, 64),
                                                                         codecs=[BytesCodec(), ZstdCodec()]))),
    }


@pytest.mark.parametrize("case", list(_shard_cases()))
def test_valid_shards_read_exactly_under_their_bound(tmp_path, case):
    values, kwargs = _shard_cases()[case]
    root = tmp_path / "s.zarr"
    _write(root, values, **kwargs)
    store = ib.local_store(root)
    np.testing.assert_array_equal(read_whole(store, "v"), values, strict=True)
    np.testing.assert_array_equal(engine_read(store, "v", 128), values, strict=True)


def test_a_shard_replaced_by_a_huge_file_is_refused_unread_by_the_shards_bound(tmp_path):
    # Shards of 2 x 2 uncompressed inner chunks of 4 x 4 float64: the bound is exact, the
    # index (4 entries of 16 bytes and a crc32c) plus four 128-byte chunks.
    root = tmp_path / "s.zarr"
    _write(root, np.arange(128, dtype="f8").reshape(16, 8), chunks=(4, 4), shards=(8, 8), compressors=None)
    shard = root / "v" / "c" / "1" / "0"
    assert shard.stat().st_size == 68 + 4 * 128
    os.truncate(shard, _GIB8)  # sparse: costs no disk
    message = _capped_read(root, "v", (1, 0), good=(0, 0))
    _refused_unread(message, shard, _GIB8, 68 + 4 * 128)
    assert message.startswith("CorruptChunkError: v [1, 0]: reading"), message
    np.testing.assert_array_equal(ib.read_chunk(ib.local_store(root), "v", (0, 0)),
                                  np.arange(64, dtype="f8").reshape(8, 8))


def _set_entry(shard: bytearray, n_inner: int, i: int, offset: int, nbytes: int) -> None:
    """Entry ``i`` of a shard's index (at its end, with its crc32c) set to (offset, nbytes)."""
    start = len(shard) - (16 * n_inner + 4)
    struct.pack_into("<QQ", shard, start + 16 * i, offset, nbytes)
    struct.pack_into("<I", shard, len(shard) - 4, crc32c(bytes(shard[start:len(shard) - 4])))


def test_an_index_entry_past_its_inner_chunks_bound_is_refused_naming_the_bound(tmp_path):
    root = tmp_path / "s.zarr"
    values = _incompressible((128, 128), "<f8")
    _write(root, values, chunks=(64, 64), shards=(128, 128))
    path = root / "v" / "c" / "0" / "0"
    good = path.read_bytes()
    data_bytes = len(good) - (4 * 16 + 4)
    store = ib.local_store(root)
    # One entry names the whole data region (all four zstd frames), inside the shard and
    # inside the shard's bound, but past what any encoding of one 64 x 64 chunk takes; then
    # one naming 2^62 bytes.
    for nbytes in (data_bytes, 1 << 62):
        shard = bytearray(good)
        _set_entry(shard, 4, 1, 0, nbytes)
        path.write_bytes(bytes(shard))
        pattern = (rf"v \[0, 0\] \({path}\): sharding_indexed: inner chunk \[0, 1\] \(offset 0\): stored object is "
                   rf"{nbytes} bytes, more than the \d+ any valid encoding of the chunk takes \(bytes -> zstd\)")
        with pytest.raises(CorruptChunkError, match=pattern):
            ib.read_chunk(store, "v", (0, 0))
        with pytest.raises(CorruptChunkError, match=pattern):
            engine_read(store, "v", 128)
    # Two entries naming the same bytes are legal (each is bounded): chunk [0, 1] reads [0, 0]'s.
    shard = bytearray(good)
    first = struct.unpack_from("<QQ", good, len(good) - 68)
    _set_entry(shard, 4, 1, *first)
    path.write_bytes(bytes(shard))
    out = ib.read_chunk(store, "v", (0, 0))
    np.testing.assert_array_equal(out[:64, 64:], values[:64, :64])


def test_a_python_served_shard_past_its_bound_is_refused_before_decoding(tmp_path):
    store = zarr.storage.MemoryStore()
    arr = zarr.create_array(store, name="v", shape=(8, 8), dtype="f8", chunks=(4, 4), shards=(8, 8),
                            compressors=None, fill_value=0)
    arr[...] = np.arange(64, dtype="f8").reshape(8, 8)
    import asyncio

    from zarr.core.buffer import default_buffer_prototype
    asyncio.run(store.set("v/c/0/0", default_buffer_prototype().buffer.from_bytes(b"\0" * 4096)))
    with pytest.raises(CorruptChunkError, match=r"v \[0, 0\].*stored object is 4096 bytes, more than the 580 any"
                       r" valid encoding of the chunk takes \(sharding_indexed\)"):
        ib.read_chunk(store, "v", (0, 0))


# -- variable-length strings ----------------------------------------------------------------


def _long_strings(n):
    """Short, empty, non-ASCII and long incompressible strings, the longest a million characters."""
    texts = ["", "a", "Zürich", "東京", "🙂" * 7]
    alphabet = np.array(list("abcdefghijklmnopqrstuvwxyzéü東京0123456789"))
    texts.append("".join(_RNG.choice(alphabet, 1_000_000)))
    texts += ["".join(_RNG.choice(alphabet, int(k))) for k in _RNG.integers(0, 300, n - len(texts))]
    return np.array(texts, dtype=object)


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("layout", ["v3-zstd", "v3-sharded", "v2-blosc", "v3-bytes-raw"])
def test_valid_strings_read_exactly_under_their_bound(tmp_path, layout):
    root = tmp_path / "s.zarr"
    values = _long_strings(64)
    kwargs = dict(shape=values.shape, chunks=(16,), fill_value="")
    if layout == "v3-zstd":
        kwargs.update(dtype=str)
    elif layout == "v3-sharded":
        kwargs.update(dtype=str, shards=(64,), chunks=(8,))
    elif layout == "v2-blosc":
        kwargs.update(dtype=str, zarr_format=2, compressors=numcodecs.Blosc())
    else:
        values = np.array([_RNG.bytes(int(k)) for k in _RNG.integers(0, 100_000, 64)], dtype=object)
        kwargs.update(dtype=zarr.dtype.VariableLengthBytes(), compressors=None, fill_value=b"")
    arr = zarr.create_array(zarr.storage.LocalStore(root), name="v", **kwargs)
    arr[...] = values
    ours = read_whole(ib.local_store(root), "v")
    assert list(ours) == list(zarr.open_array(str(root / "v"), mode="r")[...]) == list(values)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_string_chunk_replaced_by_a_huge_file_is_refused_unread(tmp_path):
    root = tmp_path / "s.zarr"
    arr = zarr.create_array(zarr.storage.LocalStore(root), name="v", shape=(6,), chunks=(3,), dtype=str,
                            fill_value="")
    arr[...] = np.array(["a", "b", "c", "d", "e", "f"], dtype=object)
    chunk = root / "v" / "c" / "1"
    os.truncate(chunk, _GIB8)
    message = _capped_read(root, "v", (1,), good=(0,))
    _refused_unread(message, chunk, _GIB8)
    assert message.startswith("CorruptChunkError: v [1]: reading"), message
    assert list(ib.read_chunk(ib.local_store(root), "v", (0,))) == ["a", "b", "c"]


def _raw_strings(root, n, compressors=None):
    """An array of ``n`` strings in one chunk, of which no chunk is written."""
    zarr.create_array(zarr.storage.LocalStore(root), name="v", shape=(n,), chunks=(n,), dtype=str, fill_value="",
                      compressors=compressors)
    (root / "v" / "c").mkdir()
    return root / "v" / "c" / "0"


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_an_item_count_its_bytes_cannot_hold_is_refused_before_any_item_is_made(tmp_path):
    # 2^27 items claimed by 8 bytes: made first, their strings alone would take 4 GiB.
    root = tmp_path / "s.zarr"
    chunk = _raw_strings(root, 1 << 27)
    chunk.write_bytes(struct.pack("<II", 1 << 27, 0))
    message = _capped_read(root, "v", (0,))
    assert message == (f"CorruptChunkError: v [0] ({chunk}): the string chunk's 8 bytes cannot hold its 134217728"
                       " items (4 bytes each at least)"), message


def _lying_zstd_frame(declared: int, run: int = 10) -> bytes:
    """A zstd frame declaring ``declared`` bytes that holds one RLE block of ``run`` bytes."""
    block = (run << 3) | (1 << 1) | 1  # RLE, last block
    return b"\x28\xb5\x2f\xfd\xc0\x00" + struct.pack("<Q", declared) + block.to_bytes(3, "little") + b"x"


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_compressed_string_chunk_declaring_a_gigabyte_is_refused_without_allocating_it(tmp_path):
    root = tmp_path / "s.zarr"
    chunk = _raw_strings(root, 3, compressors=[ZstdCodec()])
    # 18 bytes declaring 1 GiB (the most a string chunk may hold): taken at its word, the
    # reader would allocate the gigabyte before finding 10 bytes.
    chunk.write_bytes(_lying_zstd_frame(1 << 30))
    message = _capped_read(root, "v", (0,))
    assert message.startswith(f"CorruptChunkError: v [0] ({chunk}): zstd: "), message
    store = ib.local_store(root)
    # Declaring more than the limit, or an item longer than the bytes that hold it: refused
    # by what they declare.
    chunk.write_bytes(_lying_zstd_frame(1 << 40))
    with pytest.raises(CorruptChunkError, match=r"v \[0\].*zstd: frame declares 1099511627776 bytes, more than the"
                       r" limit of 1073741824 bytes"):
        ib.read_chunk(store, "v", (0,))
    chunk.write_bytes(numcodecs.Zstd().encode(struct.pack("<II", 3, 2**32 - 1) + b"abcdefgh"))
    with pytest.raises(CorruptChunkError, match=r"v \[0\].*item 0 runs past the chunk's end"):
        ib.read_chunk(store, "v", (0,))


# -- numcodecs filter chains ----------------------------------------------------------------

_N = 1 << 20  # a chunk of a million items: past the old 2 x chunk + 1 MiB guess for a widening filter

_FILTER_CASES = {
    # (values, filters, compressor)
    "astype-u1-as-f8-zstd": (_incompressible((_N,), "u1"), [numcodecs.AsType(encode_dtype="<f8", decode_dtype="u1")],
                             numcodecs.Zstd()),
    "astype-u1-as-f8-raw": (_incompressible((_N,), "u1"), [numcodecs.AsType(encode_dtype="<f8", decode_dtype="u1")],
                            None),
    "delta-i2-as-i8-zstd": (_incompressible((_N,), "<i2"), [numcodecs.Delta("<i2", astype="<i8")], numcodecs.Zstd()),
    "fixedscaleoffset-f4-as-i8-zlib": (_RNG.uniform(-1e6, 1e6, _N).astype("<f4"),
                                       [numcodecs.FixedScaleOffset(offset=0, scale=100, dtype="<f4", astype="<i8")],
                                       numcodecs.Zlib(level=1)),
    "quantize-f8-zstd": (_RNG.normal(size=_N), [numcodecs.Quantize(digits=9, dtype="<f8")], numcodecs.Zstd()),
    "bitround-f4-blosc": (_RNG.normal(size=_N).astype("<f4"), [numcodecs.BitRound(keepbits=23)], numcodecs.Blosc()),
    "packbits-lz4": (_RNG.integers(0, 2, _N).astype(bool), [numcodecs.PackBits()], numcodecs.LZ4()),
    "categorize-as-u2-bz2": (np.array(["cat", "dog", "émeu", "bee"])[_RNG.integers(0, 4, 1 << 16)].astype("<U4"),
                             [numcodecs.Categorize(["cat", "dog", "émeu"], dtype="<U4", astype="<u2")],
                             numcodecs.BZ2()),
    "shuffle-delta-lzma": (_incompressible((_N // 8,), "<i8"),
                           [numcodecs.Delta("<i8"), numcodecs.Shuffle(elementsize=8)], numcodecs.LZMA(preset=0)),
}


@pytest.mark.parametrize("case", list(_FILTER_CASES))
def test_valid_filter_chains_read_exactly_under_their_bound(tmp_path, case):
    values, filters, compressor = _FILTER_CASES[case]
    root = tmp_path / "s.zarr"
    arr = zarr.create_array(zarr.storage.LocalStore(root), name="v", shape=values.shape, chunks=values.shape,
                            dtype=values.dtype, filters=filters, compressors=compressor, zarr_format=2,
                            fill_value="" if values.dtype.kind == "U" else 0)
    arr[...] = values
    expected = zarr.open_array(str(root / "v"), mode="r")[...]
    ours = ib.read_chunk(ib.local_store(root), "v", (0,))
    np.testing.assert_array_equal(ours, expected, strict=values.dtype.kind != "U")


def test_a_filter_chain_chunk_replaced_by_a_huge_file_is_refused_unread_by_the_filters_bound(tmp_path):
    # AsType stores each uint8 item as 8 bytes: the bound without a compressor is exact,
    # eight times the chunk, and a full chunk takes all of it.
    root = tmp_path / "s.zarr"
    values = np.arange(2000, dtype="u1")
    zarr.create_array(zarr.storage.LocalStore(root), name="v", shape=(2000,), chunks=(1000,), dtype="u1",
                      filters=[numcodecs.AsType(encode_dtype="<f8", decode_dtype="u1")], compressors=None,
                      zarr_format=2, fill_value=0)[...] = values
    chunk = root / "v" / "1"
    assert chunk.stat().st_size == 8000
    os.truncate(chunk, _GIB8)
    message = _capped_read(root, "v", (1,), good=(0,))
    _refused_unread(message, chunk, _GIB8, 8000)
    np.testing.assert_array_equal(ib.read_chunk(ib.local_store(root), "v", (0,)), values[:1000])
