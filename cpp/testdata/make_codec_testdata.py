#!/usr/bin/env python3
"""Writes cpp/testdata/codecs/: chunks encoded by zarr-python / numcodecs (the oracle) and
their decoded values, for the C++ codec tests (codec/reference_data_test.cc).

Each case in manifest.json names a codec chain (as zarr.json lists it), the chunk's dtype
and shape, the stored chunk file (<name>.bin) and the expected decoded bytes (<name>.raw,
C order, little-endian). Rerun after changing the cases:

    .venv/bin/python cpp/testdata/make_codec_testdata.py
"""

import json
import pathlib
import shutil
import tempfile
import warnings

import numcodecs
import numpy as np
import zarr
from zarr.codecs import BloscCodec, BytesCodec, Crc32cCodec, GzipCodec, TransposeCodec, ZstdCodec

warnings.filterwarnings("ignore")  # numcodecs.zarr3 deprecation / "not in the v3 spec"

OUT = pathlib.Path(__file__).resolve().parent / "codecs"
RNG = np.random.default_rng(20240611)


def field(shape, dtype):
    """Smooth data plus noise, so compressors see something like real fields."""
    n = int(np.prod(shape))
    x = np.sin(np.linspace(0, 12 * np.pi, n)) * 100 + RNG.normal(0, 3, n)
    dt = np.dtype(dtype)
    if dt.kind == "b":
        x = x > 0
    elif dt.kind == "c":
        x = x + 1j * np.cos(np.linspace(0, 5, n))
    return x.astype(dt).reshape(shape)


def native_bytes(a):
    return np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<")).tobytes()


cases = []


def add(name, dtype, shape, codecs, encoded, decoded):
    (OUT / f"{name}.bin").write_bytes(encoded)
    (OUT / f"{name}.raw").write_bytes(decoded)
    cases.append({"name": name, "dtype": dtype, "shape": list(shape), "codecs": codecs})


def from_zarr_v3(name, dtype, shape, **kwargs):
    """Writes a one-chunk v3 array with zarr-python and records its chunk and codecs."""
    a = field(shape, dtype)
    with tempfile.TemporaryDirectory() as tmp:
        arr = zarr.create_array(tmp, shape=shape, chunks=shape, dtype=dtype, fill_value=0,
                                **kwargs)
        arr[...] = a
        meta = json.loads((pathlib.Path(tmp) / "zarr.json").read_text())
        key = "c/" + "/".join("0" for _ in shape) if shape else "c"
        encoded = (pathlib.Path(tmp) / key).read_bytes()
    add(name, meta["data_type"], shape, meta["codecs"], encoded, native_bytes(a))


V2_NAMES = {"blosc": "blosc", "zstd": "zstd", "gzip": "gzip", "zlib": "numcodecs.zlib",
            "lz4": "numcodecs.lz4"}


def from_zarr_v2(name, dtype, shape, compressor, order="C"):
    """A v2 array, its .zarray compressor mapped onto v3 names with the numcodecs config
    (what the metadata normalizer produces)."""
    a = field(shape, dtype)
    with tempfile.TemporaryDirectory() as tmp:
        arr = zarr.create_array(tmp, shape=shape, chunks=shape, dtype=dtype, fill_value=0,
                                zarr_format=2, compressors=compressor, order=order)
        arr[...] = a
        zarray = json.loads((pathlib.Path(tmp) / ".zarray").read_text())
        encoded = (pathlib.Path(tmp) / ".".join("0" for _ in shape)).read_bytes()
    comp = zarray["compressor"]
    typestr = zarray["dtype"]
    codecs = []
    if zarray["order"] == "F":
        codecs.append({"name": "transpose",
                       "configuration": {"order": list(range(len(shape)))[::-1]}})
    codecs.append({"name": "bytes",
                   "configuration": {"endian": "big" if typestr[0] == ">" else "little"}})
    codecs.append({"name": V2_NAMES[comp["id"]], "configuration": comp})  # keeps "id"
    add(name, np.dtype(dtype).name, shape, codecs, encoded, native_bytes(a))


def from_numcodecs(name, dtype, shape, codec_name, config, encode):
    """A chunk encoded by numcodecs directly (layouts zarr-python never writes itself)."""
    a = field(shape, dtype)
    raw = native_bytes(a)
    codecs = [{"name": "bytes", "configuration": {"endian": "little"}},
              {"name": codec_name, "configuration": config}]
    add(name, np.dtype(dtype).name, shape, codecs, bytes(encode(raw)), raw)


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)

    # v3 core codecs as zarr-python writes them.
    from_zarr_v3("zstd_f4", "float32", (24, 20), compressors=ZstdCodec(level=3))
    from_zarr_v3("zstd_checksum_i8", "int64", (100,), compressors=ZstdCodec(level=1, checksum=True))
    for cname in ["lz4", "lz4hc", "zstd", "zlib", "blosclz"]:
        for shuffle in ["noshuffle", "shuffle", "bitshuffle"]:
            from_zarr_v3(f"blosc_{cname}_{shuffle}_f4", "float32", (16, 24),
                         compressors=BloscCodec(cname=cname, shuffle=shuffle, clevel=5))
    from_zarr_v3("blosc_small_blocks_i2", "int16", (40, 50),
                 compressors=BloscCodec(cname="lz4", shuffle="shuffle", blocksize=256))
    from_zarr_v3("blosc_memcpy_f8", "float64", (7, 9),
                 compressors=BloscCodec(cname="lz4", clevel=0))
    from_zarr_v3("gzip_f8", "float64", (10, 12), compressors=GzipCodec(level=5))
    from_zarr_v3("crc32c_u2", "uint16", (33,), compressors=Crc32cCodec())
    from_zarr_v3("zstd_crc32c_f4", "float32", (8, 8, 4),
                 compressors=[ZstdCodec(level=2), Crc32cCodec()])
    from_zarr_v3("transpose_big_gzip_f8", "float64", (3, 4, 5),
                 filters=[TransposeCodec(order=[2, 0, 1])],
                 serializer=BytesCodec(endian="big"), compressors=GzipCodec(level=1))
    from_zarr_v3("transpose_u1", "uint8", (5, 6, 7), filters=[TransposeCodec(order=[1, 2, 0])],
                 compressors=None)
    from_zarr_v3("big_i4", "int32", (6, 7), serializer=BytesCodec(endian="big"),
                 compressors=None)
    from_zarr_v3("big_c8", "complex64", (5, 3), serializer=BytesCodec(endian="big"),
                 compressors=ZstdCodec(level=1))
    from_zarr_v3("big_c16", "complex128", (4,), serializer=BytesCodec(endian="big"),
                 compressors=None)
    from_zarr_v3("little_f2", "float16", (9, 2), compressors=None)
    from_zarr_v3("bool", "bool", (17,), compressors=None)

    # numcodecs codecs through zarr-python 3 ("numcodecs.<id>" names).
    from zarr.codecs import numcodecs as nc
    from_zarr_v3("nc_zlib_f4", "float32", (20, 20), compressors=nc.Zlib(level=6))
    from_zarr_v3("nc_lz4_f4", "float32", (20, 20), compressors=nc.LZ4())
    from_zarr_v3("nc_lz4_accel_i4", "int32", (300,), compressors=nc.LZ4(acceleration=8))
    from_zarr_v3("nc_gzip_u4", "uint32", (50,), compressors=nc.GZip(level=9))
    from_zarr_v3("nc_zstd_f8", "float64", (30,), compressors=nc.Zstd(level=5))
    from_zarr_v3("nc_blosc_default_f4", "float32", (20, 20), compressors=nc.Blosc())
    from_zarr_v3("nc_blosc_zstd_bit_f4", "float32", (20, 20),
                 compressors=nc.Blosc(cname="zstd", clevel=3, shuffle=2))
    from_zarr_v3("nc_crc32c_f4", "float32", (11,), compressors=nc.CRC32C())
    from_zarr_v3("nc_crc32c_start_f4", "float32", (11,), compressors=nc.CRC32C(location="start"))

    # v2 arrays, compressor configs in numcodecs spelling.
    from_zarr_v2("v2_blosc_f4", "<f4", (16, 16),
                 numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE))
    from_zarr_v2("v2_blosc_auto_u1", "|u1", (64,),
                 numcodecs.Blosc(cname="zstd", clevel=1, shuffle=numcodecs.Blosc.AUTOSHUFFLE))
    from_zarr_v2("v2_zstd_big_i8", ">i8", (10, 3), numcodecs.Zstd(level=1))
    from_zarr_v2("v2_gzip_f8_order_f", "<f8", (4, 6), numcodecs.GZip(level=1), order="F")
    from_zarr_v2("v2_zlib_i2", "<i2", (40,), numcodecs.Zlib(level=1))
    from_zarr_v2("v2_lz4_f4", "<f4", (30,), numcodecs.LZ4())

    # Legal layouts outside what zarr-python writes itself.
    gz = numcodecs.GZip(level=1)
    from_numcodecs("gzip_two_members_f4", "float32", (64,), "gzip", {"level": 1},
                   lambda raw: gz.encode(raw[:100]) + gz.encode(raw[100:]) + b"\0\0\0\0")
    zs = numcodecs.Zstd(level=1)
    from_numcodecs("zstd_two_frames_f4", "float32", (64,), "zstd", {"level": 1},
                   lambda raw: zs.encode(raw[:64]) + zs.encode(raw[64:]))
    from_numcodecs("zstd_empty_frame_then_data_u1", "uint8", (50,), "zstd", {"level": 1},
                   lambda raw: zs.encode(b"") + zs.encode(raw))
    from_numcodecs("blosc_typesize1_f4", "float32", (64,), "blosc", {"cname": "blosclz"},
                   lambda raw: numcodecs.Blosc(cname="blosclz", shuffle=1).encode(
                       np.frombuffer(raw, dtype="u1")))

    (OUT / "manifest.json").write_text(json.dumps({"cases": cases}, indent=1) + "\n")
    total = sum(p.stat().st_size for p in OUT.iterdir())
    print(f"wrote {len(cases)} cases, {total} bytes, to {OUT}")


if __name__ == "__main__":
    main()
