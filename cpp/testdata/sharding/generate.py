#!/usr/bin/env python3
"""Writes the sharded zarr v3 stores the C++ sharding/Array tests decode.

zarr-python 3 is the oracle: each case is a real store written by zarr.create_array, plus the
expected decoded bytes of every shard (full shard shape, C order, little-endian, edge shards
padded with the fill value) and a manifest the tests read. Shards that hold only fill value
are not written by zarr-python; the manifest marks them absent.

Run from anywhere:  /work/main/.venv/bin/python cpp/testdata/sharding/generate.py
(written with zarr 3.1.x / numcodecs 0.16.x; the output is committed).
"""

import json
import pathlib
import shutil

import numpy as np
import zarr
from zarr.codecs import BytesCodec, Crc32cCodec, ShardingCodec, ZstdCodec

HERE = pathlib.Path(__file__).resolve().parent


def u16_end(path):
    # Inner chunks (2, 4) in shards (4, 8) on a (10, 12) array: ragged edge shards, an
    # all-fill inner chunk (absent in the index) and an all-fill shard (no object at all).
    data = np.arange(120, dtype="<u2").reshape(10, 12) * 3 + 1
    data[0:2, 0:4] = 7
    data[4:8, 8:12] = 7
    arr = zarr.create_array(path, shape=data.shape, dtype="uint16", chunks=(2, 4),
                            shards=(4, 8), compressors=ZstdCodec(level=1), fill_value=7)
    arr[...] = data
    return arr, data


def f32_start(path):
    # Index at the start, big-endian inner chunks, one shard covering the array.
    data = (np.arange(36, dtype="<f4").reshape(6, 6) - 10.5) / 4
    data[3:6, 4:6] = 0.5
    serializer = ShardingCodec(chunk_shape=(3, 2),
                               codecs=[BytesCodec(endian="big"), ZstdCodec(level=3)],
                               index_codecs=[BytesCodec(), Crc32cCodec()],
                               index_location="start")
    arr = zarr.create_array(path, shape=data.shape, dtype="float32", chunks=(6, 6),
                            serializer=serializer, compressors=None, fill_value=0.5)
    arr[...] = data
    return arr, data


def i32_nested(path):
    # Shards of (8, 8) holding (4, 4) chunks that are themselves shards of (2, 2) chunks.
    data = (np.arange(128, dtype="<i4").reshape(8, 16) - 64) * 1000
    data[0:2, 2:4] = -1      # an absent chunk inside a nested shard
    data[4:8, 8:12] = -1     # an absent nested shard
    inner = ShardingCodec(chunk_shape=(2, 2), codecs=[BytesCodec(), ZstdCodec(level=1)])
    serializer = ShardingCodec(chunk_shape=(4, 4), codecs=[inner],
                               index_codecs=[BytesCodec(), Crc32cCodec()])
    arr = zarr.create_array(path, shape=data.shape, dtype="int32", chunks=(8, 8),
                            serializer=serializer, compressors=None, fill_value=-1)
    arr[...] = data
    return arr, data


def u8_nocrc(path):
    # 3-d, no compressor, index without a checksum; each inner chunk (1, 3, 5) is one
    # contiguous run of its (2, 6, 5) shard.
    data = (np.arange(120, dtype="u1").reshape(4, 6, 5) * 7) % 251
    serializer = ShardingCodec(chunk_shape=(1, 3, 5), codecs=[BytesCodec()],
                               index_codecs=[BytesCodec()])
    arr = zarr.create_array(path, shape=data.shape, dtype="uint8", chunks=(2, 6, 5),
                            serializer=serializer, compressors=None, fill_value=0)
    arr[...] = data
    return arr, data


CASES = [u16_end, f32_start, i32_nested, u8_nocrc]


def main():
    manifest = []
    for make in CASES:
        name = make.__name__
        store_dir = HERE / name
        expected_dir = HERE / "expected" / name
        for d in (store_dir, expected_dir):
            shutil.rmtree(d, ignore_errors=True)
        expected_dir.mkdir(parents=True)
        arr, data = make(str(store_dir))
        meta = json.loads((store_dir / "zarr.json").read_text())
        shard_shape = meta["chunk_grid"]["configuration"]["chunk_shape"]
        grid = [-(-s // c) for s, c in zip(data.shape, shard_shape)]
        dtype = data.dtype.newbyteorder("<")
        fill = np.array([arr.fill_value], dtype=dtype)
        shards = []
        for coords in np.ndindex(*grid):
            key = "c/" + "/".join(str(c) for c in coords)
            padded = np.full(shard_shape, fill[0], dtype=dtype)
            region = tuple(slice(c * s, min((c + 1) * s, n))
                           for c, s, n in zip(coords, shard_shape, data.shape))
            part = data[region]
            padded[tuple(slice(0, n) for n in part.shape)] = part
            expected = ".".join(str(c) for c in coords) + ".bin"
            (expected_dir / expected).write_bytes(padded.astype(dtype).tobytes())
            shards.append({"coords": list(coords), "key": key,
                           "present": (store_dir / key).exists(),
                           "expected": f"expected/{name}/{expected}"})
        manifest.append({"name": name, "dtype": meta["data_type"], "shape": list(data.shape),
                         "shard_shape": shard_shape, "fill_hex": fill.tobytes().hex(),
                         "codecs": meta["codecs"], "shards": shards})
    (HERE / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main()
