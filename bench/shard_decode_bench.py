"""A sharded store against the same data unsharded: epoch samples/s and CPU seconds.

The suite's ``shard16`` store (shards of 16 samples, inner chunks of one sample) and its
``era5_c1`` store (chunks of one sample: the inner chunk's shape) hold identical values
(bench/suite/datasets.py). Each runs in a fresh process: one warm-up epoch, then --epochs
epochs with the pool cleared before each (so every stored chunk is read and decoded every
epoch), on --decode-threads threads. Per store it prints the median epoch samples/s, the
process CPU seconds per epoch (all threads), the decode CPU the pass stats count, and the
most decode threads seen on one stored chunk at once; then sharded / unsharded ratios.

    .venv/bin/python bench/shard_decode_bench.py [--samples 1024] [--field 181x360] [--epochs 3]
    .venv/bin/python bench/shard_decode_bench.py --python OTHER/.venv/bin/python  # another build

Target (issue 32): sharded samples/s >= 0.9x unsharded.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "suite"))

import datasets  # noqa: E402

CHILD = r"""
import json, resource, sys, time
from insitubatch import InSituDataset, open_geometries, split_by_chunk, store

cfg = json.loads(sys.argv[1])
s = store(cfg["path"])
geoms = open_geometries(s, ["t2m"])
manifest = split_by_chunk(geoms["t2m"], fractions=(1.0, 0.0, 0.0))
ds = InSituDataset(s, manifest, geoms, batch_size=32, block_chunks=16, decode_threads=cfg["threads"])

def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime

rows = []
for epoch in range(cfg["epochs"] + 1):
    ds.set_epoch(epoch)
    ds.clear_cache()
    c0, t0, n = cpu(), time.perf_counter(), 0
    for batch in ds.train:
        n += len(batch)
    wall, used = time.perf_counter() - t0, cpu() - c0
    stats = ds.last_pass
    if epoch:  # the first is a warm-up
        rows.append({"samples": n, "wall_s": wall, "cpu_s": used, "decode_s": stats.times.decode_s,
                     "decoders_peak": getattr(stats.depths, "chunk_decoders_peak", None)})
ds.close()
print(json.dumps(rows))
"""


def run(python: str, path: pathlib.Path, threads: int, epochs: int) -> dict:
    cfg = json.dumps({"path": str(path), "threads": threads, "epochs": epochs})
    out = subprocess.run([python, "-c", CHILD, cfg], check=True, capture_output=True, text=True).stdout
    rows = json.loads(out.strip().splitlines()[-1])
    return {
        "samples_per_s": statistics.median(r["samples"] / r["wall_s"] for r in rows),
        "cpu_s_per_epoch": statistics.median(r["cpu_s"] for r in rows),
        "decode_s_per_epoch": statistics.median(r["decode_s"] for r in rows),
        "decoders_peak": max((r["decoders_peak"] or 0) for r in rows),
        "samples": rows[0]["samples"],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--samples", type=int, default=1024)
    p.add_argument("--field", default="181x360")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--decode-threads", type=int, default=2)
    p.add_argument("--python", default=sys.executable, help="the interpreter whose insitubatch runs the epochs")
    args = p.parse_args()
    h, w = (int(v) for v in args.field.split("x"))
    specs = datasets.all_specs(args.samples, (h, w))
    results = {}
    for name in ("era5_c1", "shard16"):
        path = datasets.ensure(specs[name])
        results[name] = run(args.python, path, args.decode_threads, args.epochs)
        r = results[name]
        print(f"{name:8} ({specs[name].layout}): {r['samples_per_s']:8.0f} samples/s, "
              f"{r['cpu_s_per_epoch']:.2f} CPU s/epoch ({r['decode_s_per_epoch']:.2f} s decode), "
              f"{r['samples']} samples, decode threads on one chunk at most {r['decoders_peak']}")
    flat, sharded = results["era5_c1"], results["shard16"]
    print(f"sharded / unsharded: samples/s {sharded['samples_per_s'] / flat['samples_per_s']:.2f}x (target >= 0.9), "
          f"CPU s {sharded['cpu_s_per_epoch'] / flat['cpu_s_per_epoch']:.2f}x")


if __name__ == "__main__":
    main()
