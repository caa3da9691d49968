"""Writing: zarr-python through our writable stores against zarr's ObjectStore over obstore,
and the ZarrWriter against the read pass it follows.

1. **zarr-python writes** ``--size-mb`` of float32 (1 MiB chunks, zarr's default zstd)
   through ``obstore_store(url, read_only=False)`` and through
   ``zarr.storage.ObjectStore(obstore.store.LocalStore / S3Store)``, on a local directory and
   on S3 served by moto over loopback (its own process). Rounds alternate the two; the
   median MB/s of each and ours / theirs.
2. **The writer**: a shuffled pass over a local store (``--samples`` of 181x360 float32,
   16 samples per chunk, zstd) read alone, then read -> identity -> ``ZarrWriter(like=)``
   into a new array; samples/s of each and the ratio (target >= 0.8 on 2 cores).
3. **Encode**: the writer's native encode of those chunks (one thread, into a memory store)
   against numcodecs' zstd compress of the same bytes at the same level; MB/s each and the
   ratio (target >= 0.95).

    .venv/bin/python bench/write_bench.py [--size-mb 1024] [--rounds 3] [--samples 1024] [--skip-s3]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shutil
import statistics
import sys
import tempfile
import time
import uuid

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))


def zarr_write(store, data, chunk_samples):
    import zarr

    group = zarr.open_group(store, mode="w", zarr_format=3)
    array = group.create_array("t", shape=data.shape, chunks=(chunk_samples, *data.shape[1:]), dtype=data.dtype)
    t0 = time.perf_counter()
    array[...] = data
    return time.perf_counter() - t0


def store_pairs(kind, root, endpoint):
    """(ours, theirs) zarr Stores over one fresh location."""
    import obstore.store as obs
    import zarr

    import insitubatch

    name = uuid.uuid4().hex
    if kind == "file":
        path = pathlib.Path(root) / name
        path.mkdir()
        ours = insitubatch.obstore_store(str(path / "ours"), read_only=False)
        (path / "theirs").mkdir()
        theirs = zarr.storage.ObjectStore(obs.LocalStore(str(path / "theirs")))
        return ours, theirs
    creds = dict(access_key_id="admin", secret_access_key="admin")
    ours = insitubatch.obstore_store(f"s3://bench/{name}/ours", endpoint=endpoint, read_only=False, **creds)
    theirs = zarr.storage.ObjectStore(obs.S3Store("bench", prefix=f"{name}/theirs", endpoint=endpoint,
                                                  region="us-east-1", client_options={"allow_http": True},
                                                  aws_access_key_id="admin", aws_secret_access_key="admin"))
    return ours, theirs


def compare_stores(kind, data, rounds, root, endpoint=None):
    mb = data.nbytes / 1e6
    times = {"ours": [], "theirs": []}
    for r in range(rounds):
        ours, theirs = store_pairs(kind, root, endpoint)
        order = [("ours", ours), ("theirs", theirs)] if r % 2 == 0 else [("theirs", theirs), ("ours", ours)]
        for name, st in order:
            times[name].append(zarr_write(st, data, 1))
        if kind == "file":
            shutil.rmtree(root)
            pathlib.Path(root).mkdir()
    rate = {k: mb / statistics.median(v) for k, v in times.items()}
    return {"mb": mb, "mb_s": rate, "ratio": rate["ours"] / rate["theirs"]}


def writer_pass(src, out, with_writer, seed):
    from insitubatch import InSituDataset, ZarrWriter, open_geometries, split_by_chunk, store

    geoms = open_geometries(store(src), ["t2m"])
    ds = InSituDataset(src, split_by_chunk(geoms["t2m"], fractions=(1.0, 0.0, 0.0)), geoms, batch_size=32,
                       shuffle=True, seed=seed, block_chunks=8)
    writer = ZarrWriter(store(out, read_only=False), "pred", like=geoms["t2m"]) if with_writer else None
    t0, n = time.perf_counter(), 0
    for batch in ds.train:
        if writer is not None:
            writer.write(batch.sample_indices, batch.arrays["t2m"])
        n += len(batch)
    if writer is not None:
        writer.close()
    wall = time.perf_counter() - t0
    ds.close()
    return n / wall


def compare_writer(samples, rounds, root):
    import zarr

    src = pathlib.Path(root) / "src.zarr"
    rng = np.random.default_rng(0)
    data = (rng.standard_normal((samples, 181, 360)) * 10 + 280).astype("f4")
    zarr.create_array(zarr.storage.LocalStore(src), name="t2m", shape=data.shape, chunks=(16, 181, 360),
                      dtype="f4")[...] = data
    rates = {"read": [], "read_write": []}
    for r in range(rounds):
        out = pathlib.Path(root) / f"out{r}.zarr"
        for name in (("read", "read_write") if r % 2 == 0 else ("read_write", "read")):
            rates[name].append(writer_pass(str(src), str(out), name == "read_write", seed=r))
        back = zarr.open_array(zarr.storage.LocalStore(out), path="pred", mode="r")[...]
        assert np.array_equal(back, data), "the written array differs from its source"
        shutil.rmtree(out)
    med = {k: statistics.median(v) for k, v in rates.items()}
    return {"samples_s": med, "ratio": med["read_write"] / med["read"]}, data


def compare_encode(data, rounds):
    import numcodecs
    import zarr

    import insitubatch
    from insitubatch import _ext
    from insitubatch.zarr_store import ZarrStore

    chunks = [np.ascontiguousarray(data[i:i + 16]) for i in range(0, len(data) - 15, 16)]
    mb = sum(c.nbytes for c in chunks) / 1e6
    native = insitubatch.store("memory://", read_only=False)
    zarr.create_array(ZarrStore(native), name="e", shape=data.shape, chunks=(16, *data.shape[1:]), dtype="f4",
                      compressors=zarr.codecs.ZstdCodec(level=0))
    array = _ext.open_hierarchy(native).open_array("e")
    codec = numcodecs.Zstd(level=0)
    times = {"ours": [], "numcodecs": []}
    for _ in range(rounds):
        t0 = time.perf_counter()
        for i, c in enumerate(chunks):
            array.write_chunk([i, 0, 0], c)
        times["ours"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        for c in chunks:
            codec.encode(c)
        times["numcodecs"].append(time.perf_counter() - t0)
    rate = {k: mb / statistics.median(v) for k, v in times.items()}
    return {"mb_s": rate, "ratio": rate["ours"] / rate["numcodecs"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--samples", type=int, default=1024)
    parser.add_argument("--skip-s3", action="store_true")
    parser.add_argument("--json", type=pathlib.Path)
    args = parser.parse_args()
    n = max(1, args.size_mb * (1 << 20) // (512 * 512 * 4))
    data = np.random.default_rng(1).standard_normal((n, 512, 512)).astype("f4")
    report = {}
    with tempfile.TemporaryDirectory(prefix="write-bench-") as tmp:
        root = pathlib.Path(tmp) / "stores"
        root.mkdir()
        report["file"] = compare_stores("file", data, args.rounds, str(root))
        if not args.skip_s3:
            from moto_server import moto_server

            with moto_server(("bench",)) as endpoint:
                report["s3"] = compare_stores("s3", data, args.rounds, str(root), endpoint)
        report["writer"], source = compare_writer(args.samples, args.rounds, tmp)
        report["encode"] = compare_encode(source, args.rounds)
    for kind in ("file", "s3"):
        if kind in report:
            r = report[kind]
            print(f"zarr-python writes {r['mb']:.0f} MB to {kind}: ours {r['mb_s']['ours']:.0f} MB/s,"
                  f" ObjectStore(obstore) {r['mb_s']['theirs']:.0f} MB/s, ours/theirs {r['ratio']:.2f}")
    w = report["writer"]
    print(f"shuffled pass, {args.samples} samples of 181x360 f4: read {w['samples_s']['read']:.0f} samples/s,"
          f" read+ZarrWriter {w['samples_s']['read_write']:.0f} samples/s, ratio {w['ratio']:.2f}")
    e = report["encode"]
    print(f"zstd encode, one thread: ours {e['mb_s']['ours']:.0f} MB/s, numcodecs {e['mb_s']['numcodecs']:.0f} MB/s,"
          f" ratio {e['ratio']:.2f}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
