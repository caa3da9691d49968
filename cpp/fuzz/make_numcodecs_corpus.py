"""Writes the seed corpus of numcodecs_fuzz: for each codec (in the target's order), the first
byte selecting it and a numcodecs encoding that decodes to 4096 bytes.

    .venv/bin/python cpp/fuzz/make_numcodecs_corpus.py
"""

import lzma
from pathlib import Path

import numcodecs
import numpy as np

OUT = Path(__file__).resolve().parent / "corpus" / "numcodecs"
rng = np.random.default_rng(0)
codecs = [
    (numcodecs.Delta("<i4"), np.cumsum(rng.integers(-3, 3, 1024)).astype("<i4")),
    (numcodecs.Delta("<f8", astype="<i2"), np.cumsum(rng.integers(-3, 3, 512)).astype("<f8")),
    (numcodecs.FixedScaleOffset(offset=3.5, scale=10, dtype="<f4", astype="u1"), rng.uniform(3.5, 20, 1024).astype("<f4")),
    (numcodecs.AsType(encode_dtype=">i2", decode_dtype="<f8"), rng.integers(-99, 99, 512).astype("<f8")),
    (numcodecs.Quantize(digits=2, dtype="<f4"), rng.normal(size=1024).astype("<f4")),
    (numcodecs.PackBits(), rng.integers(0, 2, 4096).astype(bool)),
    (numcodecs.CRC32(), rng.integers(0, 255, 4096).astype("u1")),
    (numcodecs.Adler32(location="end"), rng.integers(0, 255, 4096).astype("u1")),
    (numcodecs.Fletcher32(), rng.integers(0, 255, 4096).astype("u1")),
    (numcodecs.BZ2(), np.repeat(rng.integers(0, 9, 256), 16).astype("u1")),
    (numcodecs.LZMA(), np.repeat(rng.integers(0, 9, 256), 16).astype("u1")),
    (numcodecs.Shuffle(elementsize=8), rng.normal(size=512).astype("<f8")),
    (numcodecs.Categorize(["cat", "dog", "\u00e9meu"], dtype="<U4"),
     np.array(["cat", "dog", "\u00e9meu", "bee"] * 64, dtype="<U4")),
    (numcodecs.JenkinsLookup3(initval=7), rng.integers(0, 255, 4096).astype("u1")),
    (numcodecs.LZMA(format=lzma.FORMAT_RAW, filters=[{"id": lzma.FILTER_DELTA, "dist": 4},
                                                     {"id": lzma.FILTER_LZMA2, "preset": 1}]),
     np.cumsum(rng.integers(-3, 3, 1024)).astype("<i4")),
    (numcodecs.LZMA(format=lzma.FORMAT_RAW, filters=[{"id": lzma.FILTER_LZMA1, "lc": 1, "lp": 0, "pb": 0}]),
     np.repeat(rng.integers(0, 9, 256), 16).astype("u1")),
]
OUT.mkdir(parents=True, exist_ok=True)
for i, (codec, values) in enumerate(codecs):
    assert values.nbytes == 4096, (codec, values.nbytes)
    (OUT / f"{i:02d}_{codec.codec_id}").write_bytes(bytes([i]) + bytes(codec.encode(values)))
    (OUT / f"{i:02d}_{codec.codec_id}_truncated").write_bytes(bytes([i]) + bytes(codec.encode(values))[:-3])
print(f"wrote {2 * len(codecs)} seeds to {OUT}")
