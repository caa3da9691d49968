#!/usr/bin/env python3
"""Writes the seed corpora cpp/fuzz/corpus/<name>/ for the codec fuzzers with numcodecs.

Every seed of a bytes-to-bytes fuzzer decodes to fuzz::kOutputSize (4096) bytes, so the
fuzzers start from inputs that reach the end of the decoder. Rerun after changing it:

    .venv/bin/python cpp/fuzz/make_codec_corpus.py
"""

import pathlib
import shutil
import struct

import numcodecs
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent / "corpus"
N = 4096  # fuzz::kOutputSize


def payloads():
    rng = np.random.default_rng(7)
    x = np.linspace(0, 20, N // 4)
    return {
        "zeros": bytes(N),
        "field": (np.sin(x) * 50 + rng.normal(0, 1, x.size)).astype("<f4").tobytes(),
        "random": rng.integers(0, 256, N, dtype=np.uint8).tobytes(),
        "text": (b"insitubatch zarr chunk " * 200)[:N],
    }


def write(name, seeds):
    d = ROOT / name
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    for seed_name, blob in seeds.items():
        (d / seed_name).write_bytes(bytes(blob))


def main():
    p = payloads()
    write("zstd", {f"{k}_l{lvl}": numcodecs.Zstd(level=lvl).encode(v)
                   for k, v in p.items() for lvl in (1, 9)}
          | {"field_checksum": numcodecs.Zstd(level=3, checksum=True).encode(p["field"])})
    blosc = {}
    for cname in ["lz4", "lz4hc", "zstd", "zlib", "blosclz"]:
        for shuffle in (0, 1, 2):
            blosc[f"field_{cname}_s{shuffle}"] = numcodecs.Blosc(
                cname=cname, clevel=5, shuffle=shuffle, blocksize=1024).encode(
                np.frombuffer(p["field"], dtype="<f4"))
    blosc["text_memcpy"] = numcodecs.Blosc(cname="lz4", clevel=0).encode(p["text"])
    write("blosc", blosc)
    write("gzip", {f"{k}": numcodecs.GZip(level=1).encode(v) for k, v in p.items()}
          | {"two_members": numcodecs.GZip().encode(p["field"][:1000])
             + numcodecs.GZip().encode(p["field"][1000:]) + b"\0\0"})
    write("zlib", {f"{k}_l{lvl}": numcodecs.Zlib(level=lvl).encode(v)
                   for k, v in p.items() for lvl in (1, 9)})
    write("lz4", {f"{k}": numcodecs.LZ4().encode(v) for k, v in p.items()})
    write("crc32c", {f"{k}": numcodecs.CRC32C().encode(np.frombuffer(v, dtype="u1")).tobytes()
                     for k, v in p.items()})
    # transpose_bytes: ndim-1, extents, permutation index, dtype|endian bit, data.
    tb = {}
    for i, (hdr, body) in enumerate([
            (bytes([1, 3, 4, 1, 2]), p["field"][:96]),
            (bytes([2, 2, 5, 7, 3, 0x83]), p["random"][:700]),
            (bytes([3, 1, 2, 3, 4, 9, 0x84]), p["text"][:1500]),
            (bytes([0, 11, 0, 0x81]), p["field"][:24])]):
        tb[f"seed{i}"] = hdr + body
    write("transpose_bytes", tb)
    print("wrote", sum(1 for _ in ROOT.rglob("*") if _.is_file()), "seeds under", ROOT)


if __name__ == "__main__":
    main()
