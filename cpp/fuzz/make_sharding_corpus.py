#!/usr/bin/env python3
"""Writes the seed corpus for sharding_fuzz.cc: shards written by zarr-python 3 for each
fixed configuration of the fuzz target, prefixed with the byte that selects it, plus a few
broken variants (truncated, bad index checksum, offsets past the end).

Run:  /work/main/.venv/bin/python cpp/fuzz/make_sharding_corpus.py
"""

import pathlib
import shutil
import tempfile

import numpy as np
import zarr
from zarr.codecs import BytesCodec, Crc32cCodec, ShardingCodec, ZstdCodec

OUT = pathlib.Path(__file__).resolve().parent / "corpus" / "sharding"

# Must match kConfigs in sharding_fuzz.cc, in order.
CONFIGS = [
    ShardingCodec(chunk_shape=(2, 2), codecs=[BytesCodec(), ZstdCodec()],
                  index_codecs=[BytesCodec(), Crc32cCodec()]),
    ShardingCodec(chunk_shape=(2, 2), codecs=[BytesCodec(), ZstdCodec()],
                  index_codecs=[BytesCodec()]),
    ShardingCodec(chunk_shape=(2, 2), codecs=[BytesCodec()],
                  index_codecs=[BytesCodec(), Crc32cCodec()], index_location="start"),
    ShardingCodec(chunk_shape=(2, 2),
                  codecs=[ShardingCodec(chunk_shape=(1, 1), codecs=[BytesCodec(), ZstdCodec()],
                                        index_codecs=[BytesCodec()])],
                  index_codecs=[BytesCodec()]),
]


def shards(serializer):
    """Shards of a (4, 8) uint16 array: one full, one with all-fill inner chunks."""
    data = np.arange(32, dtype="<u2").reshape(4, 8) * 11
    data[0:2, 4:6] = 0
    data[2:4, 6:8] = 0
    with tempfile.TemporaryDirectory() as tmp:
        arr = zarr.create_array(tmp, shape=(4, 8), dtype="uint16", chunks=(4, 4),
                                serializer=serializer, compressors=None, fill_value=0)
        arr[...] = data
        return [(pathlib.Path(tmp) / "c" / "0" / str(j)).read_bytes() for j in range(2)]


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    for selector, serializer in enumerate(CONFIGS):
        for j, shard in enumerate(shards(serializer)):
            prefix = bytes([selector])
            (OUT / f"config{selector}_shard{j}").write_bytes(prefix + shard)
            (OUT / f"config{selector}_shard{j}_truncated").write_bytes(prefix + shard[:-5])
            (OUT / f"config{selector}_shard{j}_headless").write_bytes(prefix + shard[7:])
            flipped = bytearray(shard)
            flipped[len(flipped) // 2] ^= 0x10
            (OUT / f"config{selector}_shard{j}_flipped").write_bytes(prefix + bytes(flipped))
    (OUT / "empty").write_bytes(b"")
    (OUT / "selector_only").write_bytes(b"\x01")


if __name__ == "__main__":
    main()
