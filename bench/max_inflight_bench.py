"""The first epoch of a local store at the default max_inflight against a small one.

On a local, page-cached store 32 concurrent reads used to finish late together and starve
the decode threads, so the default made the first epoch slower than max_inflight=4. This
writes a zarr v3 store (``--samples`` x 361 x 720 float32, zstd level 1, 16 samples per
chunk), then times one first epoch of the train split (shuffled, batch 32) in a fresh
process per run at each ``--max-inflight`` value, rounds interleaved, and prints the median
seconds, the limiting stage each run named, and each value's time over the best's.

    .venv/bin/python bench/max_inflight_bench.py [--samples 640] [--rounds 3] [--max-inflight 32,4]

Target (issue 32): the default within 1.1x of the best.
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
from insitubatch import InSituDataset, open_geometries, split_by_chunk, store
path, max_inflight = sys.argv[1], int(sys.argv[2])
t0 = time.perf_counter()
s = store(path)
geoms = open_geometries(s, ["t2m"])
ds = InSituDataset(s, split_by_chunk(geoms["t2m"]), geoms, batch_size=32, max_inflight=max_inflight)
n = sum(len(b) for b in ds.train)
wall = time.perf_counter() - t0
print(json.dumps({"wall_s": wall, "samples": n, "stage": ds.last_pass.limiting_stage}))
"""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=640)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--max-inflight", default="32,4")
    p.add_argument("--json", type=pathlib.Path)
    args = p.parse_args()
    values = [int(v) for v in args.max_inflight.split(",")]
    import numpy as np
    import zarr

    with tempfile.TemporaryDirectory(prefix="max-inflight-bench-") as tmp:
        path = pathlib.Path(tmp) / "store.zarr"
        data = (np.random.default_rng(0).standard_normal((args.samples, 361, 720)) * 10 + 280).astype("f4")
        zarr.create_array(zarr.storage.LocalStore(path), name="t2m", shape=data.shape, chunks=(16, 361, 720),
                          dtype="f4", compressors=zarr.codecs.ZstdCodec(level=1))[...] = data
        del data
        runs: dict[int, list[dict]] = {v: [] for v in values}
        for r in range(args.rounds):
            for v in (values if r % 2 == 0 else values[::-1]):
                out = subprocess.run([sys.executable, "-c", CHILD, str(path), str(v)], capture_output=True,
                                     text=True, check=True)
                runs[v].append(json.loads(out.stdout.strip().splitlines()[-1]))
    medians = {v: statistics.median(x["wall_s"] for x in rs) for v, rs in runs.items()}
    best = min(medians.values())
    print(f"first epoch of {args.samples} x 361 x 720 float32 (zstd 1, 16 per chunk), train split, fresh process:")
    for v in values:
        stages = ", ".join(x["stage"] for x in runs[v])
        print(f"  max_inflight={v:<4d} {medians[v]:.2f} s  ({medians[v] / best:.2f}x the best)  limited by: {stages}")
    if args.json:
        args.json.write_text(json.dumps({"runs": {str(k): v for k, v in runs.items()},
                                         "median_s": {str(k): v for k, v in medians.items()}}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
