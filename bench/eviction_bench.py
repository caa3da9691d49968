"""Eviction by next use against LRU, and Belady's optimum from the same plan.

A shuffled train split is read for several epochs with a residency budget of 25%, 50% and
75% of the split. For each budget and policy: chunk decodes per epoch (misses) and epoch
time; beside them the decodes Belady's rule (evict what is needed farthest ahead, knowing
every epoch's order) would need, simulated offline over the same block order with the
same number of slots. Decodes are counted by the engine (``last_pass.cache_misses``).

    .venv/bin/python bench/eviction_bench.py [--chunks 256] [--epochs 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import zarr
from zarr.codecs import ZstdCodec

import insitubatch
from insitubatch import InSituDataset, open_geometries, split_by_chunk


def make_store(root: Path, chunks: int, spc: int, field: tuple[int, int]) -> Path:
    path = root / "evict.zarr"
    n = chunks * spc
    arr = zarr.create_array(zarr.storage.LocalStore(path), name="t2m", shape=(n, *field),
                            chunks=(spc, *field), dtype="float32", compressors=[ZstdCodec(level=1)],
                            fill_value=0)
    rng = np.random.default_rng(0)
    for start in range(0, n, 256):
        stop = min(n, start + 256)
        arr[start:stop] = rng.standard_normal((stop - start, *field)).astype("f4")
    return path


def block_chunk_lists(ds: InSituDataset, epoch: int) -> list[list[int]]:
    """The chunks each block of the train pass reads, in the order the engine admits them."""
    rows, block_start = ds._planner.order("train", True, epoch)
    return [sorted(set(rows[block_start[b]:block_start[b + 1], 0].tolist())) for b in range(len(block_start) - 1)]


def belady_misses(epochs: list[list[list[int]]], capacity: int) -> list[int]:
    """Misses per epoch of Belady's rule with `capacity` slots over the blocks' reads."""
    seq = [c for blocks in epochs for block in blocks for c in block]
    epoch_of = [e for e, blocks in enumerate(epochs) for block in blocks for _ in block]
    nxt = [0] * len(seq)
    last: dict[int, int] = {}
    for i in range(len(seq) - 1, -1, -1):
        nxt[i] = last.get(seq[i], len(seq))
        last[seq[i]] = i
    resident: dict[int, int] = {}  # chunk -> index of its next use
    misses = [0] * len(epochs)
    for i, c in enumerate(seq):
        if c not in resident:
            misses[epoch_of[i]] += 1
            if len(resident) >= capacity:
                victim = max(resident, key=resident.get)
                del resident[victim]
        resident[c] = nxt[i]
    return misses


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--chunks", type=int, default=256)
    p.add_argument("--spc", type=int, default=4)
    p.add_argument("--field", default="64x64")
    p.add_argument("--block-chunks", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--json")
    args = p.parse_args()
    field = tuple(int(x) for x in args.field.split("x"))
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        path = make_store(Path(tmp), args.chunks, args.spc, field)
        store = insitubatch.local_store(path)
        geoms = open_geometries(store, ["t2m"])
        manifest = split_by_chunk(geoms["t2m"], fractions=(1.0, 0.0, 0.0))
        slot = geoms["t2m"].chunk_bytes
        for share in (0.25, 0.50, 0.75):
            budget = int(share * args.chunks) * slot
            row = {"budget_share": share, "budget_slots": budget // slot}
            for policy in ("lru", "next_use"):
                ds = InSituDataset(store, manifest, geoms, batch_size=args.batch_size,
                                   block_chunks=args.block_chunks, cache_budget_bytes=budget, eviction=policy)
                decodes, seconds = [], []
                for epoch in range(args.epochs):
                    ds.set_epoch(epoch)
                    t0 = time.perf_counter()
                    for _ in ds.train:
                        pass
                    seconds.append(time.perf_counter() - t0)
                    decodes.append(ds.last_pass.cache_misses)
                row[policy] = {"decodes": decodes, "epoch_s": seconds}
                if policy == "lru":
                    plans = [block_chunk_lists(ds, e) for e in range(args.epochs)]
                ds.close()
            row["belady"] = {"decodes": belady_misses(plans, row["budget_slots"])}
            results.append(row)
    machine = {"cpu": platform.processor() or platform.machine(), "python": platform.python_version(),
               "insitubatch": insitubatch.__version__}
    print(f"machine: {machine}; {args.chunks} chunks of {args.spc} x {args.field} float32,"
          f" block_chunks {args.block_chunks}, {args.epochs} epochs")
    print("| budget (of the split) | LRU decodes per epoch | next-use decodes per epoch | Belady decodes per epoch"
          " | next-use / Belady (epochs 2+) | LRU epoch s | next-use epoch s |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        lru, nu, opt = r["lru"], r["next_use"], r["belady"]["decodes"]
        later = sum(nu["decodes"][1:]) / max(1, sum(opt[1:]))
        print(f"| {r['budget_share']:.0%} ({r['budget_slots']} slots) | {lru['decodes']} | {nu['decodes']} | {opt}"
              f" | **{later:.3f}** | {np.median(lru['epoch_s']):.3f} | {np.median(nu['epoch_s']):.3f} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine, "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
