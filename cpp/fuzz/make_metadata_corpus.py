#!/usr/bin/env python3
"""Writes the seed corpora for metadata_v3_fuzz.cc and metadata_v2_fuzz.cc from the
documents zarr-python 3 wrote under cpp/testdata/metadata/ (run its generate.py first),
plus a few hand-broken variants of each (truncated, wrong types, huge shapes).

Run:  /work/main/.venv/bin/python cpp/fuzz/make_metadata_corpus.py
"""

import json
import pathlib
import shutil

HERE = pathlib.Path(__file__).resolve().parent
TESTDATA = HERE.parent / "testdata" / "metadata"


def reset(name):
    out = HERE / "corpus" / name
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    return out


def broken_variants(doc):
    """A few structurally interesting mutations of a valid document."""
    text = json.dumps(doc)
    yield "truncated", text[: len(text) // 2]
    for key, value in [("shape", [-1, 2]), ("shape", "10"), ("shape", [2**64 - 1] * 3),
                       ("fill_value", [1, 2, 3]), ("fill_value", "0x7fc0")]:
        mutated = dict(doc)
        mutated[key] = value
        yield f"{key}_{len(json.dumps(value))}", json.dumps(mutated)


def v3_corpus():
    out = reset("metadata_v3")
    count = 0
    for path in sorted(TESTDATA.glob("v3/*/zarr.json")):
        text = path.read_text()
        (out / f"{path.parent.name}.json").write_text(text)
        count += 1
        if path.parent.name in ("int16", "sharded_end", "complex64_nan"):
            for tag, variant in broken_variants(json.loads(text)):
                (out / f"{path.parent.name}_{tag}.json").write_text(variant)
                count += 1
    # Groups and consolidated documents reach the "not an array" paths.
    for path in sorted(TESTDATA.glob("hierarchies/v3_*/zarr.json")):
        (out / f"{path.parent.name}_root.json").write_text(path.read_text())
        count += 1
    return count


def v2_corpus():
    out = reset("metadata_v2")
    count = 0
    for path in sorted(TESTDATA.glob("v2/*/.zarray")):
        zarray = json.loads(path.read_text())
        (out / f"{path.parent.name}.json").write_text(path.read_text())
        count += 1
        zattrs_path = path.parent / ".zattrs"
        zattrs = json.loads(zattrs_path.read_text()) if zattrs_path.exists() else {}
        if zattrs:
            wrapped = {".zarray": zarray, ".zattrs": zattrs}
            (out / f"{path.parent.name}_with_attrs.json").write_text(json.dumps(wrapped))
            count += 1
        if path.parent.name in ("int16_be", "order_f", "codec_blosc", "null_c8_le"):
            for tag, variant in broken_variants(zarray):
                (out / f"{path.parent.name}_{tag}.json").write_text(variant)
                count += 1
    filters = {"zarr_format": 2, "shape": [4], "chunks": [2], "dtype": "<i4",
               "compressor": None, "fill_value": 0, "order": "C",
               "filters": [{"id": "delta", "dtype": "<i4"}]}
    (out / "filters_delta.json").write_text(json.dumps(filters))
    return count + 1


if __name__ == "__main__":
    print(f"metadata_v3: {v3_corpus()} inputs, metadata_v2: {v2_corpus()} inputs")
