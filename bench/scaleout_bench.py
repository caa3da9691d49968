"""Scale-out: data-parallel ranks on one machine, and the cost of an exact mid-epoch resume.

* N ranks (separate processes, ``rank`` / ``world_size`` given), each reading its share of
  one shuffled train epoch at once: aggregate samples/s (all rows over the slowest rank's
  wall time) and the chunks each rank decoded (the shares are disjoint, so they add up to
  the split).
* Resume: a new process's dataset loads a state saved halfway through the epoch; the time
  from ``load_state_dict`` to the first batch, against a cold start of the same epoch (a new
  dataset to its first batch), medians of ``--repeats``. And the state's size as JSON,
  before and after a world-size change.

    .venv/bin/python bench/scaleout_bench.py [--chunks 512] [--ranks 1,2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import zarr
from zarr.codecs import ZstdCodec

import insitubatch
from insitubatch import InSituDataset, local_store, open_geometries, split_by_chunk


def make_store(root: Path, chunks: int, spc: int, field: tuple[int, int]) -> Path:
    path = root / "scale.zarr"
    n = chunks * spc
    arr = zarr.create_array(zarr.storage.LocalStore(path), name="t2m", shape=(n, *field), chunks=(spc, *field),
                            dtype="float32", compressors=[ZstdCodec(level=1)], fill_value=0)
    rng = np.random.default_rng(0)
    for start in range(0, n, 512):
        stop = min(n, start + 512)
        arr[start:stop] = rng.standard_normal((stop - start, *field)).astype("f4")
    return path


def open_dataset(path: str, args, **kwargs) -> InSituDataset:
    store = local_store(path)
    geoms = open_geometries(store, ["t2m"])
    manifest = split_by_chunk(geoms["t2m"], fractions=(1.0, 0.0, 0.0))
    return InSituDataset(store, manifest, geoms, batch_size=args.batch_size, block_chunks=args.block_chunks,
                         seed=1, decode_threads=args.decode_threads, **kwargs)


def rank_worker(args) -> int:
    """One rank: its share of epoch 0, timed; prints a JSON line."""
    with open_dataset(args.store, args, rank=args.rank, world_size=args.world) as ds:
        t0 = time.perf_counter()
        rows = sum(len(b) for b in ds.train)
        wall = time.perf_counter() - t0
        print(json.dumps({"rank": args.rank, "rows": rows, "wall_s": wall, "decodes": ds.last_pass.cache_misses}))
    return 0


def ranks_run(path: Path, world: int, args) -> dict:
    cmd = [sys.executable, __file__, "--worker", "--store", str(path), "--world", str(world),
           "--batch-size", str(args.batch_size), "--block-chunks", str(args.block_chunks),
           "--decode-threads", str(args.decode_threads)]
    procs = [subprocess.Popen(cmd + ["--rank", str(r)], stdout=subprocess.PIPE, text=True) for r in range(world)]
    reports = [json.loads(p.communicate()[0]) for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit(f"a rank failed: {[p.returncode for p in procs]}")
    slowest = max(r["wall_s"] for r in reports)
    return {"world": world, "rows": sum(r["rows"] for r in reports), "slowest_s": slowest,
            "samples_per_s": sum(r["rows"] for r in reports) / slowest,
            "decodes_per_rank": [r["decodes"] for r in reports]}


def first_batch_s(make, prepare) -> float:
    ds = make()
    try:
        t0 = time.perf_counter()
        prepare(ds)
        it = iter(ds.train)
        next(it)
        elapsed = time.perf_counter() - t0
        it.close()
        return elapsed
    finally:
        ds.close()


def resume_costs(path: Path, args) -> dict:
    with open_dataset(str(path), args) as ds:
        it = iter(ds.train)
        steps = len(ds.train)
        for _ in range(steps // 2):
            next(it)
        state = ds.train.state_dict()
        it.close()
    cold, warm = [], []
    for _ in range(args.repeats):  # interleaved, so drift in the machine hits both alike
        cold.append(first_batch_s(lambda: open_dataset(str(path), args), lambda ds: ds.set_epoch(0)))
        warm.append(first_batch_s(lambda: open_dataset(str(path), args), lambda ds: ds.train.load_state_dict(state)))
    # A 4-rank job stopped halfway and resumed on 2: the state then carries its history.
    with open_dataset(str(path), args, rank=0, world_size=4) as ds:
        it = iter(ds.train)
        for _ in range(len(ds.train) // 2):
            next(it)
        four = ds.train.state_dict()
        it.close()
    with open_dataset(str(path), args, rank=0, world_size=2) as ds:
        ds.train.load_state_dict(four)
        it = iter(ds.train)
        next(it)
        changed = ds.train.state_dict()
        it.close()
    return {"cold_first_batch_s": statistics.median(cold), "resume_first_batch_s": statistics.median(warm),
            "ratio": statistics.median(warm) / statistics.median(cold), "cursor": state["cursor"],
            "state_bytes": len(json.dumps(state)), "state_bytes_after_world_change": len(json.dumps(changed))}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--chunks", type=int, default=512)
    p.add_argument("--spc", type=int, default=8)
    p.add_argument("--field", default="64x64")
    p.add_argument("--block-chunks", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--decode-threads", type=int, default=0)
    p.add_argument("--ranks", default="1,2")
    p.add_argument("--repeats", type=int, default=21)
    p.add_argument("--json")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--store", help=argparse.SUPPRESS)
    p.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--world", type=int, default=1, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return rank_worker(args)
    field = tuple(int(x) for x in args.field.split("x"))
    with tempfile.TemporaryDirectory() as tmp:
        path = make_store(Path(tmp), args.chunks, args.spc, field)
        runs = [ranks_run(path, int(w), args) for w in args.ranks.split(",")]
        resume = resume_costs(path, args)
    machine = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
               "python": platform.python_version(), "insitubatch": insitubatch.__version__}
    print(f"machine: {machine}; {args.chunks} chunks of {args.spc} x {args.field} float32 (zstd),"
          f" block_chunks {args.block_chunks}, batch {args.batch_size}")
    base = runs[0]["samples_per_s"]
    print("| ranks | samples/s (all ranks) | vs 1 rank | chunks decoded per rank | rows |")
    print("|---|---|---|---|---|")
    for r in runs:
        print(f"| {r['world']} | {r['samples_per_s']:.0f} | {r['samples_per_s'] / base:.2f}x |"
              f" {r['decodes_per_rank']} | {r['rows']} |")
    print(f"\nresume at cursor {resume['cursor']}: first batch {resume['resume_first_batch_s'] * 1e3:.1f} ms vs a cold"
          f" start's {resume['cold_first_batch_s'] * 1e3:.1f} ms (**{resume['ratio']:.2f}x**); state"
          f" {resume['state_bytes']} bytes, {resume['state_bytes_after_world_change']} after a 4 -> 2 change")
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine, "ranks": runs, "resume": resume}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
