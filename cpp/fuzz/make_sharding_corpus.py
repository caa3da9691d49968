#!/usr/bin/env python3
"""Writes the seed corpus for sharding_fuzz.cc: shards written by zarr-python 3 for each
fixed configuration of the fuzz target, prefixed with the byte that selects it, plus a few
broken variants (truncated, bad index checksum, offsets past the end) and hostile indexes,
their checksums valid: an entry naming 2^62 bytes, one naming every inner chunk's bytes at
once (past an uncompressed inner chunk's bound), two entries naming the same bytes (legal).

Run:  /work/main/.venv/bin/python cpp/fuzz/make_sharding_corpus.py
"""

import pathlib
import shutil
import tempfile

import struct

import numpy as np
import zarr
from crc32c import crc32c
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


def with_entry(shard, config, i, offset, nbytes):
    """`shard` with index entry `i` set to (offset, nbytes), its checksum (if any) redone."""
    n = 4  # a [4, 4] shard of [2, 2] inner chunks
    crc = any(isinstance(c, Crc32cCodec) for c in config.index_codecs)
    size = 16 * n + (4 if crc else 0)
    out = bytearray(shard)
    start = len(out) - size if config.index_location.value == "end" else 0
    struct.pack_into("<QQ", out, start + 16 * i, offset, nbytes)
    if crc:
        struct.pack_into("<I", out, start + 16 * n, crc32c(bytes(out[start:start + 16 * n])))
    return bytes(out)


def hostile(config, shard):
    """Index entries an untrusted shard may hold, keyed by a seed name."""
    n = 4
    size = 16 * n + (4 if any(isinstance(c, Crc32cCodec) for c in config.index_codecs) else 0)
    start = len(shard) - size if config.index_location.value == "end" else 0
    first = struct.unpack_from("<QQ", shard, start)
    data_begin = 0 if config.index_location.value == "end" else size
    return {
        "entry_huge": with_entry(shard, config, 1, 0, 1 << 62),
        "entry_spans_all": with_entry(shard, config, 1, data_begin, len(shard) - size),
        "entries_overlap": with_entry(shard, config, 1, *first),
    }


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
            if j == 0:
                for name, bad in hostile(serializer, shard).items():
                    (OUT / f"config{selector}_shard{j}_{name}").write_bytes(prefix + bad)
    (OUT / "empty").write_bytes(b"")
    (OUT / "selector_only").write_bytes(b"\x01")


if __name__ == "__main__":
    main()
