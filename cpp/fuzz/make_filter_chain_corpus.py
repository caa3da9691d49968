"""Writes the seed corpus of filter_chain_fuzz: for each array (in the target's order), the
first byte selecting it and its chunk as numcodecs encodes it (the filters in order, then
the compressor), a truncated one, and hostile ones: a chunk one byte past the exact bound of
a chain without a compressor, a zstd frame of 18 bytes declaring 1 GiB.

    .venv/bin/python cpp/fuzz/make_filter_chain_corpus.py
"""

import struct
from pathlib import Path

import numcodecs
import numpy as np

OUT = Path(__file__).resolve().parent / "corpus" / "filter_chain"
rng = np.random.default_rng(0)
LABELS = ["cat", "dog", "\u00e9meu"]
arrays = [
    (rng.integers(0, 256, 4096).astype("u1"), [numcodecs.AsType(encode_dtype="<f8", decode_dtype="u1")],
     numcodecs.Zstd(level=1)),
    (rng.integers(0, 256, 4096).astype("u1"), [numcodecs.AsType(encode_dtype="<f8", decode_dtype="u1"),
                                               numcodecs.CRC32()], None),
    (rng.integers(-9, 9, 2048).astype("<i2"), [numcodecs.Delta("<i2", astype="<i8")], numcodecs.Zlib(level=1)),
    (rng.integers(0, 2, 4096).astype(bool), [numcodecs.PackBits()], numcodecs.LZ4()),
    (np.array(LABELS + ["bee"])[rng.integers(0, 4, 256)].astype("<U4"),
     [numcodecs.Categorize(LABELS, dtype="<U4", astype="<u2")], numcodecs.BZ2(level=1)),
    (rng.uniform(-1e3, 1e3, 512).astype("<f4"),
     [numcodecs.FixedScaleOffset(offset=0, scale=100, dtype="<f4", astype="<i8"), numcodecs.Shuffle(elementsize=8)],
     numcodecs.Blosc(cname="lz4", clevel=5, shuffle=0)),
    (rng.normal(size=512), [numcodecs.Quantize(digits=3, dtype="<f8")], None),
]


def encode(values, filters, compressor):
    buf = values
    for f in filters:
        buf = f.encode(buf)
    buf = np.ascontiguousarray(buf).tobytes() if isinstance(buf, np.ndarray) else bytes(buf)
    return bytes(compressor.encode(buf)) if compressor else buf


OUT.mkdir(parents=True, exist_ok=True)
count = 0
for i, (values, filters, compressor) in enumerate(arrays):
    chunk = encode(values, filters, compressor)
    (OUT / f"{i:02d}_valid").write_bytes(bytes([i]) + chunk)
    (OUT / f"{i:02d}_truncated").write_bytes(bytes([i]) + chunk[:-3])
    count += 2
    if compressor is None:  # the bound is exact: the chunk's own size
        (OUT / f"{i:02d}_past_the_bound").write_bytes(bytes([i]) + chunk + b"\0")
        count += 1
block = (10 << 3) | 3  # one RLE block of 10 bytes, the last
lie = b"\x28\xb5\x2f\xfd\xc0\x00" + struct.pack("<Q", 1 << 30) + block.to_bytes(3, "little") + b"x"
(OUT / "00_zstd_declares_1gib").write_bytes(b"\x00" + lie)
print(f"wrote {count + 1} seeds to {OUT}")
