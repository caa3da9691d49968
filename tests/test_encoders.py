"""The encode side of the codecs: zarr-python creates an array with a codec chain, the
engine's encoders write every chunk (ZarrWriter over the existing array), and zarr-python
reads back exactly what was written. (The other direction, zarr-python's encoders and the
engine's decoders, is what every read test checks.)"""

from __future__ import annotations

import numcodecs
import numpy as np
import pytest
import zarr
import zarr.codecs as zc

import insitubatch
from insitubatch import ZarrWriter

SHAPE, CHUNKS = (20, 6, 10), (8, 3, 10)  # an edge chunk on the sample axis and none inside

V3_CHAINS = {
    "zstd": dict(compressors=zc.ZstdCodec(level=3)),
    "zstd_checksum": dict(compressors=zc.ZstdCodec(level=1, checksum=True)),
    "blosc_lz4_shuffle": dict(compressors=zc.BloscCodec(cname="lz4", clevel=5, shuffle="shuffle", typesize=4)),
    "blosc_zstd_bitshuffle": dict(compressors=zc.BloscCodec(cname="zstd", clevel=3, shuffle="bitshuffle",
                                                            typesize=4)),
    "gzip": dict(compressors=zc.GzipCodec(level=5)),
    "crc32c": dict(compressors=[zc.ZstdCodec(), zc.Crc32cCodec()]),
    "big_endian": dict(serializer=zc.BytesCodec(endian="big"), compressors=None),
    "transpose": dict(filters=[zc.TransposeCodec(order=(2, 0, 1))], compressors=zc.ZstdCodec()),
    "sharded_index_end": dict(serializer=zc.ShardingCodec(chunk_shape=(4, 3, 5), codecs=[
        zc.BytesCodec(), zc.ZstdCodec()], index_location="end"), compressors=None),
    "sharded_index_start": dict(serializer=zc.ShardingCodec(chunk_shape=(2, 3, 10), codecs=[
        zc.BytesCodec(), zc.GzipCodec()], index_codecs=[zc.BytesCodec(), zc.Crc32cCodec()],
        index_location="start"), compressors=None),
}

V2_CHAINS = {
    "zlib": dict(compressors=numcodecs.Zlib(level=4)),
    "gzip": dict(compressors=numcodecs.GZip(level=6)),
    "lz4": dict(compressors=numcodecs.LZ4(acceleration=1)),
    "blosc": dict(compressors=numcodecs.Blosc(cname="zstd", clevel=3, shuffle=numcodecs.Blosc.SHUFFLE)),
    "zstd": dict(compressors=numcodecs.Zstd(level=2)),
    "order_F": dict(compressors=numcodecs.Zstd(level=1), order="F"),
}


def write_through_engine(tmp_path, zarr_format, chain, dtype="f4"):
    data = (np.random.default_rng(1).standard_normal(SHAPE) * 100).astype(dtype)
    path = tmp_path / "enc.zarr"
    kwargs = dict(chain)
    order = kwargs.pop("order", None)
    config = {"order": order} if order else None
    zarr.create_array(zarr.storage.LocalStore(path), name="a", shape=SHAPE, chunks=CHUNKS, dtype=dtype,
                      zarr_format=zarr_format, config=config, **kwargs)
    with ZarrWriter(insitubatch.store(str(path), read_only=False), "a", shape=SHAPE, chunks=CHUNKS,
                    dtype=dtype) as writer:
        assert writer.chunks_skipped == 0
        writer.write(np.arange(SHAPE[0])[::-1], data[::-1])
    return path, data


@pytest.mark.parametrize("name", sorted(V3_CHAINS))
def test_v3_encoders_round_trip_through_zarr_python(tmp_path, name):
    path, data = write_through_engine(tmp_path, 3, V3_CHAINS[name])
    back = zarr.open_array(zarr.storage.LocalStore(path, read_only=True), path="a", mode="r")
    np.testing.assert_array_equal(back[...], data)


@pytest.mark.parametrize("name", sorted(V2_CHAINS))
def test_v2_encoders_round_trip_through_zarr_python(tmp_path, name):
    path, data = write_through_engine(tmp_path, 2, V2_CHAINS[name])
    back = zarr.open_array(zarr.storage.LocalStore(path, read_only=True), path="a", mode="r")
    np.testing.assert_array_equal(back[...], data)


@pytest.mark.parametrize("dtype", ["i2", "u8", "f8", "c8", "bool"])
def test_dtypes_round_trip(tmp_path, dtype):
    path, data = write_through_engine(tmp_path, 3, V3_CHAINS["zstd"], dtype=dtype)
    back = zarr.open_array(zarr.storage.LocalStore(path, read_only=True), path="a", mode="r")
    np.testing.assert_array_equal(back[...], data)
