"""The cost of class-aware batches: plan="stratified" and "balanced" against the plain
shuffle, one dataset each over the same store, epochs alternating so drift hits them alike.

Store: N samples of 181 x 360 float32 (zstd), 16 per chunk, and a 1-D int32 label array of
10 imbalanced classes (weights 1 / (k + 1)). Batch 40, block_chunks 16, a budget holding the
split (so the epochs after the first are warm: what is measured is the plan's and the
gather's cost, not the store's). Reported: median samples/s of epochs 1.. per plan, the
ratio to the shuffle, the time to build one epoch's order, and describe()'s class-mix
distance for each (the plain shuffle's measured the same way, against the block's mix).

    .venv/bin/python bench/class_plans_bench.py [--samples 4096] [--epochs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def make_store(path: Path, n: int) -> None:
    import zarr
    from zarr.codecs import ZstdCodec

    root = zarr.storage.LocalStore(path)
    arr = zarr.create_array(root, name="t2m", shape=(n, 181, 360), chunks=(16, 181, 360), dtype="float32",
                            compressors=[ZstdCodec(level=3)])
    rng = np.random.default_rng(0)
    for start in range(0, n, 256):
        stop = min(n, start + 256)
        arr[start:stop] = (280 + 10 * rng.standard_normal((stop - start, 181, 360))).astype("f4")
    weights = 1 / np.arange(1, 11)
    zarr.create_array(root, name="label", shape=(n,), chunks=(4096,), dtype="int32")[:] = \
        rng.choice(10, size=n, p=weights / weights.sum())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=4096)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--json")
    args = p.parse_args()
    from insitubatch import InSituDataset, class_plans, local_store, open_geometries, split_by_chunk

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "s.zarr"
        make_store(path, args.samples)
        store = local_store(path)
        g = open_geometries(store, ["t2m"])
        manifest = split_by_chunk(g["t2m"], fractions=(1.0, 0.0, 0.0))
        common = dict(batch_size=40, block_chunks=16, cache_budget_bytes=1 << 34)
        datasets = {"shuffle": InSituDataset(store, manifest, g, **common),
                    "stratified": InSituDataset(store, manifest, g, labels="label", plan="stratified", **common),
                    "balanced": InSituDataset(store, manifest, g, labels="label", plan="balanced", **common)}
        rates: dict[str, list[float]] = {k: [] for k in datasets}
        for epoch in range(args.epochs):
            for name, ds in datasets.items():
                ds.set_epoch(epoch)
                t0 = time.perf_counter()
                n = sum(len(b.sample_indices) for b in ds.train)
                if epoch:  # the first epoch fills the pool
                    rates[name].append(n / (time.perf_counter() - t0))
        result = {"machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()},
                  "samples": args.samples, "plans": {}}
        codes, _ = class_plans.load_labels("label", store, args.samples)
        for name, ds in datasets.items():
            t0 = time.perf_counter()
            rows, bounds = ds._planner.order("train", True, 0)
            order_s = time.perf_counter() - t0
            mix = class_plans.mix_report(rows, bounds, codes, 10, 16, 40,
                                         "stratified" if name == "shuffle" else name)
            result["plans"][name] = {"samples_per_s": statistics.median(rates[name]), "order_s": order_s,
                                     "mean_distance": mix["mean_distance"], "exact_batches": mix["exact_batches"],
                                     "batches": mix["batches"]}
        base = result["plans"]["shuffle"]["samples_per_s"]
        print("| plan | samples/s | / shuffle | order build s | class-mix distance (mean) | exact batches |")
        print("|---|---|---|---|---|---|")
        for name, r in result["plans"].items():
            r["over_shuffle"] = r["samples_per_s"] / base
            print(f"| {name} | {r['samples_per_s']:,.0f} | **{r['over_shuffle']:.2f}** | {r['order_s']:.4f} |"
                  f" {r['mean_distance']:.3f} | {r['exact_batches']} / {r['batches']} |")
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=2))
        for ds in datasets.values():
            ds.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
