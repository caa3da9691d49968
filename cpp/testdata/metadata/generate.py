#!/usr/bin/env python3
"""Writes the zarr metadata fixtures under cpp/testdata/metadata/ with zarr-python 3.

zarr-python is the oracle: every document here is written by it, and expected.json records
what it reports about each array (shape, chunk shape, dtype, the fill value it reads back
from a missing chunk, the store key it uses for one chunk). The C++ metadata tests parse the
documents and compare against expected.json field by field.

Run from anywhere:  /work/main/.venv/bin/python cpp/testdata/metadata/generate.py
(pinned by the project venv: zarr 3.1.x, numcodecs 0.16.x, numpy 2.x).

Layout:
  v3/<case>/zarr.json            one array per case (format 3)
  v2/<case>/.zarray [.zattrs]    one array per case (format 2)
  hierarchies/<name>/...         metadata-only stores for the Hierarchy tests
  expected.json                  {"arrays": [...], "hierarchies": {...}}
"""

import json
import os
import shutil
import sys
import warnings

import numcodecs
import numpy as np
import zarr
import zarr.codecs.numcodecs as znc
from zarr.codecs import (BloscCodec, BytesCodec, Crc32cCodec, GzipCodec, ShardingCodec,
                         ShardingCodecIndexLocation, ZstdCodec)
from zarr.metadata.migrate_v3 import _convert_array_metadata

warnings.simplefilter("ignore")  # consolidated-metadata-in-v3 warning

HERE = os.path.dirname(os.path.abspath(__file__))
assert sys.byteorder == "little", "fixtures record little-endian fill bytes"

V3_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
             "uint64", "float16", "float32", "float64", "complex64", "complex128"]
V2_KINDS = {"bool": "b1", "int8": "i1", "int16": "i2", "int32": "i4", "int64": "i8",
            "uint8": "u1", "uint16": "u2", "uint32": "u4", "uint64": "u8", "float16": "f2",
            "float32": "f4", "float64": "f8", "complex64": "c8", "complex128": "c16"}

# A non-default fill value per dtype that exercises its range.
FILLS = {"bool": True, "int8": -128, "int16": -2, "int32": 2**31 - 1, "int64": -2**63,
         "uint8": 255, "uint16": 7, "uint32": 2**32 - 1, "uint64": 2**64 - 1,
         "float16": 0.1, "float32": -1.5, "float64": 1e300,
         "complex64": complex(1.5, -2.0), "complex128": complex(float("nan"), float("inf"))}


def grid(shape, chunks):
    return [-(-s // c) for s, c in zip(shape, chunks)]


def case_record(arr, directory, fmt):
    """What zarr-python reports about `arr`; the C++ test must parse the same."""
    # One chunk off the origin (or the origin on 1-chunk axes) exercises the key encoding.
    coords = tuple(min(1, g - 1) for g in grid(arr.shape, arr.metadata.chunks
                                                 if fmt == 2 else
                                                 arr.metadata.chunk_grid.chunk_shape))
    md = arr.metadata
    native = arr.dtype.newbyteorder("=")
    # Nothing was written, so this reads a missing chunk: the fill value zarr-python uses
    # (for a v2 fill_value of null included).
    fill = np.asarray(arr[(0,) * arr.ndim], dtype=native)
    if fmt == 3:
        chunk_shape = list(md.chunk_grid.chunk_shape)
        key_enc = md.chunk_key_encoding.to_dict()
    else:
        chunk_shape = list(md.chunks)
        key_enc = {"name": "v2", "configuration": {"separator": md.dimension_separator}}
    return {
        "dir": directory,
        "zarr_format": fmt,
        "shape": list(arr.shape),
        "chunk_shape": chunk_shape,
        "dtype": native.name,
        "fill_hex": fill.tobytes().hex(),
        "chunk_key_encoding": key_enc,
        "chunk_coords": list(coords),
        "chunk_key": md.encode_chunk_key(coords),
        "attributes": dict(arr.attrs),
    }


def write_v3(name, shape, chunks, dtype, records, **kwargs):
    path = os.path.join(HERE, "v3", name)
    arr = zarr.create_array(path, shape=shape, chunks=chunks, dtype=dtype, zarr_format=3,
                            **kwargs)
    rec = case_record(arr, f"v3/{name}", 3)
    rec["codecs"] = arr.metadata.to_dict()["codecs"]
    records.append(rec)


# The v2 -> v3 codec mapping the C++ loader implements (metadata.h). transpose / bytes /
# zstd / gzip / zlib / lz4 entries are cross-checked against zarr-python's own migrate_v3
# converter below; blosc keeps the numcodecs configuration (shuffle as an int), crc32c
# maps onto the v3 crc32c codec (numcodecs CRC32C stores its checksum at the end, as v3).
def expected_v2_codecs(zarray):
    dt = np.dtype(zarray["dtype"])
    ndim = len(zarray["shape"])
    codecs = []
    if zarray["order"] == "F" and ndim > 1:
        codecs.append({"name": "transpose",
                       "configuration": {"order": list(range(ndim - 1, -1, -1))}})
    if dt.itemsize == 1:
        codecs.append({"name": "bytes", "configuration": {}})
    else:
        endian = "big" if zarray["dtype"][0] == ">" else "little"
        codecs.append({"name": "bytes", "configuration": {"endian": endian}})
    comp = zarray["compressor"]
    if comp is not None:
        cid = comp["id"]
        if cid == "zstd":
            codecs.append({"name": "zstd", "configuration": {
                "level": comp.get("level", 1), "checksum": comp.get("checksum", False)}})
        elif cid == "blosc":
            codecs.append({"name": "blosc", "configuration": {
                "cname": comp["cname"], "clevel": comp["clevel"], "shuffle": comp["shuffle"],
                "blocksize": comp["blocksize"]}})
        elif cid == "gzip":
            codecs.append({"name": "gzip", "configuration": {"level": comp["level"]}})
        elif cid == "zlib":
            codecs.append({"name": "numcodecs.zlib", "configuration": {"level": comp["level"]}})
        elif cid == "lz4":
            codecs.append({"name": "numcodecs.lz4",
                           "configuration": {"acceleration": comp["acceleration"]}})
        elif cid == "crc32c":
            codecs.append({"name": "crc32c", "configuration": {}})
        else:
            raise ValueError(cid)
    return codecs


def check_against_migrate(arr, codecs):
    """zarr-python's v2->v3 migration must agree on everything but blosc/crc32c naming."""
    migrated = json.loads(json.dumps(_convert_array_metadata(arr.metadata).to_dict()["codecs"]))
    # An identity transpose (order F on a 1-d array) is a no-op; the loader omits it.
    migrated = [c for c in migrated if not (c["name"] == "transpose" and
                                            c["configuration"]["order"] == [0])]
    assert len(migrated) == len(codecs), (migrated, codecs)
    for ours, theirs in zip(codecs, migrated):
        if ours["name"] in ("blosc", "crc32c"):
            continue
        if ours["name"] == "bytes" and not ours["configuration"]:
            assert theirs.get("configuration", {}).get("endian") is None, theirs
            continue
        assert ours == theirs, (ours, theirs)


def write_v2(name, shape, chunks, dtype, records, order="C", compressor=None, fill_value=0,
             separator=".", attributes=None):
    path = os.path.join(HERE, "v2", name)
    arr = zarr.create_array(path, shape=shape, chunks=chunks, dtype=dtype, zarr_format=2,
                            order=order, compressors=compressor, fill_value=fill_value,
                            chunk_key_encoding={"name": "v2", "separator": separator},
                            attributes=attributes)
    with open(os.path.join(path, ".zarray")) as f:
        zarray = json.load(f)
    codecs = expected_v2_codecs(zarray)
    if fill_value is not None:  # migrate_v3 cannot convert a null fill value
        check_against_migrate(arr, codecs)
    rec = case_record(arr, f"v2/{name}", 2)
    rec["codecs"] = codecs
    records.append(rec)


def generate_arrays():
    records = []
    # v3: every dtype, little endian, default codecs (bytes + zstd), a non-default fill.
    for dt in V3_DTYPES:
        write_v3(f"{dt}", (10, 7), (4, 3), dt, records, fill_value=FILLS[dt],
                 attributes={"dtype": dt})
    # v3 big endian.
    for dt in V3_DTYPES:
        if np.dtype(dt).itemsize == 1:
            continue
        write_v3(f"{dt}_be", (9,), (4,), dt, records, fill_value=FILLS[dt],
                 serializer=BytesCodec(endian="big"), compressors=None)
    # v3 float specials.
    for dt in ["float16", "float32", "float64"]:
        for tag, fv in [("nan", float("nan")), ("inf", float("inf")),
                        ("neginf", float("-inf"))]:
            write_v3(f"{dt}_{tag}", (5, 5), (2, 2), dt, records, fill_value=fv)
    write_v3("complex64_nan", (3,), (2,), "complex64", records,
             fill_value=complex(float("-inf"), float("nan")))
    # v3 compressors.
    compressors = {"zstd": ZstdCodec(level=5, checksum=True),
                   "blosc": BloscCodec(cname="lz4", clevel=3, shuffle="bitshuffle"),
                   "gzip": GzipCodec(level=6), "crc32c": Crc32cCodec(),
                   "zlib": znc.Zlib(level=4), "lz4": znc.LZ4(acceleration=3),
                   "zstd_crc32c": [ZstdCodec(level=1), Crc32cCodec()]}
    for tag, comp in compressors.items():
        write_v3(f"codec_{tag}", (6, 4), (3, 2), "float32", records, compressors=comp,
                 fill_value=0.0)
    # v3 sharded (the chunk grid is the shard grid), index at start and end.
    for loc in ["start", "end"]:
        path = os.path.join(HERE, "v3", f"sharded_{loc}")
        sharding = ShardingCodec(chunk_shape=(5, 4), codecs=[BytesCodec(endian="big"),
                                                              ZstdCodec(level=2)],
                                 index_location=ShardingCodecIndexLocation(loc))
        arr = zarr.create_array(path, shape=(20, 12), chunks=(10, 8), dtype="uint16",
                                zarr_format=3, serializer=sharding, compressors=None,
                                fill_value=9)
        rec = case_record(arr, f"v3/sharded_{loc}", 3)
        rec["codecs"] = arr.metadata.to_dict()["codecs"]
        records.append(rec)
    # v3 chunk key encodings, 0-d and 3-d arrays.
    write_v3("key_default_dot", (8, 8), (3, 3), "int32", records,
             chunk_key_encoding={"name": "default", "separator": "."})
    write_v3("key_v2_dot", (8, 8), (3, 3), "int32", records,
             chunk_key_encoding={"name": "v2", "separator": "."})
    write_v3("key_v2_slash", (8, 8), (3, 3), "int32", records,
             chunk_key_encoding={"name": "v2", "separator": "/"})
    write_v3("scalar", (), (), "float64", records, fill_value=2.5)
    write_v3("rank3", (4, 5, 6), (4, 1, 5), "int8", records, fill_value=-1,
             dimension_names=["t", "y", "x"])

    # v2: every dtype in both byte orders, C order, no compressor, a non-default fill.
    for dt in V3_DTYPES:
        kind = V2_KINDS[dt]
        orders = ["|"] if np.dtype(dt).itemsize == 1 else ["<", ">"]
        for bo in orders:
            tag = {"|": "", "<": "_le", ">": "_be"}[bo]
            write_v2(f"{dt}{tag}", (10, 7), (4, 3), bo + kind, records,
                     fill_value=FILLS[dt])
    # v2 fill_value null (zarr-python reads missing chunks as 0 / False).
    for dt in ["bool", "<i4", ">u2", "<f4", ">f8", "<c8"]:
        write_v2(f"null_{V2_KINDS[np.dtype(dt).name]}_{'be' if dt[0] == '>' else 'le'}",
                 (5,), (2,), dt, records, fill_value=None)
    for tag, fv in [("nan", float("nan")), ("inf", float("inf")), ("neginf", float("-inf"))]:
        write_v2(f"float32_{tag}", (5,), (2,), "<f4", records, fill_value=fv)
        write_v2(f"float16_{tag}_be", (5,), (2,), ">f2", records, fill_value=fv)
    # v2 order F (transpose prepended) and C, 1-d F (no transpose), separators.
    write_v2("order_f", (6, 5, 4), (3, 2, 2), "<f8", records, order="F")
    write_v2("order_f_1d", (6,), (3,), "<i2", records, order="F")
    write_v2("order_f_be_slash", (6, 5), (4, 4), ">i8", records, order="F", separator="/")
    write_v2("scalar", (), (), "<i4", records, fill_value=7)
    # v2 compressors.
    comps = {"zstd": numcodecs.Zstd(level=4), "blosc": numcodecs.Blosc(cname="zstd", clevel=2,
                                                                         shuffle=2),
             "blosc_noshuffle": numcodecs.Blosc(cname="lz4", clevel=9, shuffle=0,
                                                blocksize=256),
             "gzip": numcodecs.GZip(level=7), "zlib": numcodecs.Zlib(level=2),
             "lz4": numcodecs.LZ4(acceleration=5), "crc32c": numcodecs.CRC32C()}
    for tag, comp in comps.items():
        write_v2(f"codec_{tag}", (6, 4), (3, 2), ">i4", records, compressor=comp,
                 attributes={"codec": tag, "nested": {"a": [1, 2]}})
    return records


def store_keys(path):
    out = []
    for root, _, files in os.walk(path):
        for f in files:
            out.append(os.path.relpath(os.path.join(root, f), path).replace(os.sep, "/"))
    return sorted(out)


def generate_hierarchies():
    base = os.path.join(HERE, "hierarchies")
    result = {}

    def nested(fmt, consolidated):
        name = f"v{fmt}_{'consolidated' if consolidated else 'plain'}"
        path = os.path.join(base, name)
        root = zarr.open_group(path, mode="w", zarr_format=fmt, attributes={"title": name})
        root.create_array("temp", shape=(10, 4), chunks=(5, 2), dtype="f4", fill_value=1.0)
        a = root.create_group("a")
        a.create_array("x", shape=(3,), chunks=(2,), dtype="i8", fill_value=-5)
        b = a.create_group("b")
        b.create_array("y", shape=(2, 2), chunks=(1, 2), dtype="u1")
        root.create_group("empty")
        if consolidated:
            zarr.consolidate_metadata(path)
        result[name] = {
            "zarr_format": fmt, "consolidated": consolidated,
            "arrays": ["a/b/y", "a/x", "temp"], "groups": ["", "a", "a/b", "empty"],
            "keys": store_keys(path)}

    for fmt in (2, 3):
        for consolidated in (False, True):
            nested(fmt, consolidated)
    for fmt in (2, 3):
        name = f"v{fmt}_root_array"
        path = os.path.join(base, name)
        zarr.create_array(path, shape=(4,), chunks=(2,), dtype="i2", zarr_format=fmt,
                          fill_value=3)
        result[name] = {"zarr_format": fmt, "consolidated": False, "arrays": [""],
                        "groups": [], "keys": store_keys(path)}
    return result


def main():
    for sub in ("v2", "v3", "hierarchies"):
        shutil.rmtree(os.path.join(HERE, sub), ignore_errors=True)
    expected = {"generator": f"zarr {zarr.__version__}, numcodecs {numcodecs.__version__}",
                "arrays": generate_arrays(), "hierarchies": generate_hierarchies()}
    with open(os.path.join(HERE, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"wrote {len(expected['arrays'])} array cases, "
          f"{len(expected['hierarchies'])} hierarchies")


if __name__ == "__main__":
    main()
