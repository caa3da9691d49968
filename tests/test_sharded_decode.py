"""A shard's inner chunks decoded in parallel by the engine's decode threads, through the
public API over stores zarr-python 3 writes: 16 samples per shard, inner chunks of one
sample, the index at the end and at the start, absent inner chunks (fill value), a corrupt
inner chunk (named by shard key and inner index, or NaN under on_bad_chunk="nan")."""

from __future__ import annotations

import struct

import numpy as np
import pytest
import zarr
from zarr.codecs import BytesCodec, Crc32cCodec, ShardingCodec, ZstdCodec

import insitubatch
from insitubatch import InSituDataset, open_geometries, split_by_chunk

N, FIELD, SPS = 64, (12, 10), 16  # samples, field, samples per shard
FILL = -2.5


def write_sharded(tmp_path, index_location="end"):
    """(path, values): float32 (N, *FIELD) in shards of 16 samples, inner chunks of one;
    samples 5 and 40 hold only the fill value, so zarr-python leaves them out of the index."""
    values = np.random.default_rng(7).standard_normal((N, *FIELD)).astype("f4")
    values[[5, 40]] = FILL
    path = tmp_path / "s.zarr"
    serializer = ShardingCodec(chunk_shape=(1, *FIELD), codecs=[BytesCodec(), ZstdCodec(level=1)],
                               index_codecs=[BytesCodec(), Crc32cCodec()], index_location=index_location)
    arr = zarr.create_array(zarr.storage.LocalStore(path), name="t2m", shape=values.shape,
                            chunks=(SPS, *FIELD), serializer=serializer, compressors=None,
                            dtype="float32", fill_value=FILL, zarr_format=3)
    arr[...] = values
    return path, values


def dataset(path, **kwargs):
    store = insitubatch.local_store(path)
    geoms = open_geometries(store, ["t2m"])
    manifest = split_by_chunk(geoms["t2m"], fractions=(1.0, 0.0, 0.0))
    return InSituDataset(store, manifest, geoms, batch_size=8, block_chunks=2, decode_threads=2, **kwargs)


def inner_entry(shard: bytes, inner: int, index_location: str) -> tuple[int, int]:
    """(offset, nbytes) of inner chunk `inner` in a shard whose index has a crc32c."""
    index_size = SPS * 16 + 4
    index = shard[-index_size:] if index_location == "end" else shard[:index_size]
    return struct.unpack_from("<QQ", index, 16 * inner)


@pytest.mark.parametrize("index_location", ["end", "start"])
def test_sharded_epoch_exact_against_zarr_python(tmp_path, index_location):
    path, values = write_sharded(tmp_path, index_location)
    reference = zarr.open_array(zarr.storage.LocalStore(path, read_only=True), path="t2m", mode="r")
    np.testing.assert_array_equal(reference[...], values)
    shard = (path / "t2m" / "c" / "0" / "0" / "0").read_bytes()
    assert inner_entry(shard, 5, index_location) == (2**64 - 1, 2**64 - 1)  # absent: fill value
    ds = dataset(path, seed=3)
    seen = []
    for batch in ds.train:
        rows = batch.sample_indices
        np.testing.assert_array_equal(batch.arrays["t2m"], reference[...][rows], strict=True)
        seen.extend(rows.tolist())
    assert sorted(seen) == list(range(N))
    depths = ds.last_pass.depths
    assert depths.decode_threads == 2
    assert 1 <= depths.chunk_decoders_peak <= 2
    assert ds.last_pass.cache_misses == N // SPS  # a shard is still one stored chunk


def corrupt_inner_chunk(path, inner=3, index_location="end"):
    """Damages the zstd frame of inner chunk `inner` of shard c/1/0/0."""
    shard_path = path / "t2m" / "c" / "1" / "0" / "0"
    shard = bytearray(shard_path.read_bytes())
    offset, _ = inner_entry(bytes(shard), inner, index_location)
    shard[offset:offset + 4] = b"oops"
    shard_path.write_bytes(bytes(shard))


@pytest.mark.parametrize("index_location", ["end", "start"])
def test_corrupt_inner_chunk_names_shard_key_and_inner_index(tmp_path, index_location):
    path, _ = write_sharded(tmp_path, index_location)
    corrupt_inner_chunk(path, 3, index_location)
    ds = dataset(path, shuffle=False)
    with pytest.raises(insitubatch.CorruptChunkError) as raised:
        list(ds.train)
    message = str(raised.value)
    assert "t2m/c/1/0/0" in message
    assert "inner chunk [3, 0, 0]" in message


def test_corrupt_inner_chunk_served_as_nan(tmp_path):
    path, values = write_sharded(tmp_path)
    corrupt_inner_chunk(path, 3)
    ds = dataset(path, shuffle=False, on_bad_chunk="nan")
    seen = 0
    for batch in ds.train:
        rows = batch.sample_indices
        bad = (rows >= SPS) & (rows < 2 * SPS)  # the whole shard: one stored chunk
        assert np.isnan(batch.arrays["t2m"][bad]).all()
        np.testing.assert_array_equal(batch.arrays["t2m"][~bad], values[rows[~bad]], strict=True)
        seen += len(rows)
    assert seen == N
    assert ds.bad_chunks == [insitubatch.StoredChunkRead("t2m", 1, (0, 0))]
