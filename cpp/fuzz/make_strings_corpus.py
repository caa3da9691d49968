"""Writes the seed corpus of strings_fuzz: for each layout (in the target's order), the first
byte selecting it and a numcodecs encoding of six items (the sharded one as zarr-python
writes the shard), plus a truncated one, and hostile headers: an item count or an item
length of 2^32 - 1, a zstd frame of 18 bytes declaring 1 GiB (and 2^40 bytes), a shard
whose index names 2^62 bytes for an inner chunk.

    .venv/bin/python cpp/fuzz/make_strings_corpus.py
"""

import struct
import warnings
from pathlib import Path

import numcodecs
import numpy as np
import zarr
from crc32c import crc32c

OUT = Path(__file__).resolve().parent / "corpus" / "strings"
values = np.array(["", "a", "Zürich", "東京", "x" * 40, "🙂"], dtype=object)
utf8 = numcodecs.VLenUTF8().encode(values)
OUT.mkdir(parents=True, exist_ok=True)
(OUT / "00_vlen_utf8").write_bytes(b"\x00" + utf8)
(OUT / "00_truncated").write_bytes(b"\x00" + utf8[:-2])
(OUT / "01_vlen_utf8_zstd").write_bytes(b"\x01" + numcodecs.Zstd().encode(utf8))
raw = np.array([b"", b"\x00", b"ab", b"c", b"d", b"e"], dtype=object)
(OUT / "02_vlen_bytes").write_bytes(b"\x02" + numcodecs.VLenBytes().encode(raw))
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # zarr-python: v3 strings are not yet in the spec
    store = zarr.storage.MemoryStore()
    arr = zarr.create_array(store, shape=(2, 3), chunks=(1, 3), shards=(2, 3), dtype=str, fill_value="",
                            compressors=None)
    arr[...] = values.reshape(2, 3)
    shard = store._store_dict["c/0/0"].to_bytes()
(OUT / "03_sharded").write_bytes(b"\x03" + shard)
(OUT / "04_transposed").write_bytes(b"\x04" + numcodecs.VLenUTF8().encode(values.reshape(2, 3).T.ravel()))
labels = numcodecs.Categorize(["cat", "\u00e9meu", ""], dtype=object, astype="<i2")
codes = numcodecs.Zstd(level=1).encode(labels.encode(np.array(["cat", "émeu", "", "bee", "cat", "cat"], dtype=object)))
(OUT / "05_categorize_zstd").write_bytes(b"\x05" + codes)
(OUT / "05_categorize_truncated").write_bytes(b"\x05" + codes[:-2])


def lying_zstd_frame(declared):
    """18 bytes declaring `declared` bytes, holding one RLE block of 10."""
    return b"\x28\xb5\x2f\xfd\xc0\x00" + struct.pack("<Q", declared) + ((10 << 3) | 3).to_bytes(3, "little") + b"x"


(OUT / "00_count_huge").write_bytes(b"\x00" + struct.pack("<II", 2**32 - 1, 0))
(OUT / "00_length_huge").write_bytes(b"\x00" + struct.pack("<II", 6, 2**32 - 1) + b"\x00" * 20)
(OUT / "01_zstd_declares_1gib").write_bytes(b"\x01" + lying_zstd_frame(1 << 30))
(OUT / "01_zstd_declares_2e40").write_bytes(b"\x01" + lying_zstd_frame(1 << 40))
entries = bytearray(shard[-36:-4])  # two inner chunks of [1, 3], then the index's crc32c
struct.pack_into("<QQ", entries, 16, 0, 1 << 62)
(OUT / "03_sharded_entry_huge").write_bytes(b"\x03" + shard[:-36] + bytes(entries) + struct.pack("<I", crc32c(bytes(entries))))
print(f"wrote 13 seeds to {OUT}")
