"""Start-up at a million chunks: how long a shuffled epoch of one sample per stored chunk
takes to reach its first batch, where the per-chunk work of planning the epoch dominates.

The store is a zarr v3 array of ``--chunks`` x 4 float32 in chunks of one sample, all
missing (read as the fill value: no files, so what is timed is the planning, not the
reads). In a fresh process per run: opening the dataset, ``iter(ds.train)`` (the epoch's
order and the engine's plan), the first batch and the second. The next epoch's order, which
eviction by next use looks ahead with, is handed to the engine after the first batch, so it
lands in the second batch's time. Medians of ``--rounds`` runs.

    .venv/bin/python bench/million_chunk_bench.py [--chunks 1000000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import json, sys, time
import numpy.random  # noqa: F401  (numpy's lazily loaded module: not inside the timing)
from insitubatch import InSituDataset, open_geometries, split_by_chunk, store
t0 = time.perf_counter()
s = store(sys.argv[1])
geoms = open_geometries(s, ["x"])
ds = InSituDataset(s, split_by_chunk(geoms["x"], fractions=(1.0, 0.0, 0.0)), geoms, batch_size=32)
t1 = time.perf_counter()
it = iter(ds.train)
t2 = time.perf_counter()
first = next(it)
t3 = time.perf_counter()
second = next(it)
t4 = time.perf_counter()
assert (first.arrays["x"] == 1.0).all() and (second.arrays["x"] == 1.0).all()
print(json.dumps({"open_s": t1 - t0, "iter_s": t2 - t1, "first_batch_s": t3 - t0, "second_batch_s": t4 - t3}))
"""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--chunks", type=int, default=1_000_000)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    import zarr

    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "million.zarr"
        zarr.create_array(zarr.storage.LocalStore(path), name="x", shape=(args.chunks, 4), chunks=(1, 4),
                          dtype="float32", fill_value=1.0)
        runs = []
        for _ in range(args.rounds):
            out = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, check=True)
            runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    medians = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    print(f"{args.chunks} chunks, {args.rounds} runs (medians): opening {medians['open_s']:.3f} s, "
          f"iter(ds.train) {medians['iter_s']:.3f} s, first batch {medians['first_batch_s']:.3f} s from opening, "
          f"second batch {medians['second_batch_s']:.3f} s after it")
    print(json.dumps(medians))
    return 0


if __name__ == "__main__":
    sys.exit(main())
