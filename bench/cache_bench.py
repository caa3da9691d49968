"""The disk tier against the heap: cold epochs with and without cache_dir, and a new
process served from a fully persisted cache against a warm in-memory pool.

Each measurement runs in a fresh process (TTFB is from the dataset's construction to the
first batch; the store's files are in the page cache for every run, so "cold" means a cold
pool, not a cold disk). Rounds alternate the modes so drift hits them alike; medians.

    .venv/bin/python bench/cache_bench.py [--samples 2048] [--spc 16] [--rounds 3] [--against REV]

``--against REV`` builds that earlier revision (as bench/engine_ab.py does) and runs each
round's three kinds of run with it too, alternating, so a change's cost is read off one run.

Ratios reported: cold epoch cache_dir / heap (target >= 0.95), revived epoch / warm heap
epoch (target >= 0.9), revived TTFB / cold TTFB (target <= 0.5).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORKER = r"""
import json, sys, time
t_import = time.perf_counter()
import insitubatch
from insitubatch import InSituDataset, open_geometries, split_by_chunk
path, mode, cache = sys.argv[1], sys.argv[2], sys.argv[3]
t0 = time.perf_counter()
store = insitubatch.local_store(path)
geoms = open_geometries(store, ["t2m"])
manifest = split_by_chunk(geoms["t2m"], fractions=(1.0, 0.0, 0.0))
kwargs = dict(batch_size=32, block_chunks=16, cache_budget_bytes=1 << 34, shuffle=True)
if mode != "heap":
    kwargs.update(cache_dir=cache, persist=True)
ds = InSituDataset(store, manifest, geoms, **kwargs)
def epoch(e):
    ds.set_epoch(e)
    start = time.perf_counter()
    first = None
    n = 0
    for batch in ds.train:
        if first is None:
            first = time.perf_counter()
        n += len(batch.sample_indices)
    return n, time.perf_counter() - start, first
n, cold_s, first = epoch(0)
out = {"mode": mode, "samples": n, "ttfb_s": first - t0, "epoch1_s": cold_s,
       "revived": ds.last_pass.revived, "misses": ds.last_pass.cache_misses}
n, warm_s, _ = epoch(1)
out["epoch2_s"] = warm_s
print(json.dumps(out))
"""


def make_store(root: Path, samples: int, spc: int) -> Path:
    import numpy as np
    import zarr
    from zarr.codecs import ZstdCodec

    path = root / "bench.zarr"
    arr = zarr.create_array(zarr.storage.LocalStore(path), name="t2m", shape=(samples, 181, 360),
                            chunks=(spc, 181, 360), dtype="float32", compressors=[ZstdCodec(level=3)],
                            fill_value=0)
    rng = np.random.default_rng(0)
    for start in range(0, samples, 256):
        stop = min(samples, start + 256)
        arr[start:stop] = (280 + 10 * rng.standard_normal((stop - start, 181, 360))).astype("f4")
    return path


def run(path: Path, mode: str, cache: Path, site: Path | None = None) -> dict:
    env = dict(os.environ)
    if site is not None:  # an earlier revision's package shadows the installed one
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", WORKER, str(path), mode, str(cache)], capture_output=True,
                          text=True, timeout=900, check=True, env=env)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def rounds_of(path: Path, root: Path, rounds: int, site: Path | None) -> dict[str, list[dict]]:
    """One round: a heap run, a cache_dir run filling an empty directory, a new process over it."""
    rows: dict[str, list[dict]] = {"heap": [], "disk_cold": [], "revived": []}
    for _ in range(rounds):
        cache = root / "cache"
        shutil.rmtree(cache, ignore_errors=True)
        rows["heap"].append(run(path, "heap", cache, site))
        rows["disk_cold"].append(run(path, "disk", cache, site))  # fills the cache
        rows["revived"].append(run(path, "disk", cache, site))    # a new process over it
    return rows


def report(rows: dict[str, list[dict]], samples: int, spc: int, label: str) -> dict[str, float]:
    med = {m: {k: statistics.median(r[k] for r in rs) for k in ("ttfb_s", "epoch1_s", "epoch2_s")}
           for m, rs in rows.items()}
    ratios = {
        "cold_disk_over_heap": med["heap"]["epoch1_s"] / med["disk_cold"]["epoch1_s"],
        "revived_over_warm_heap": med["heap"]["epoch2_s"] / med["revived"]["epoch1_s"],
        "revived_ttfb_over_cold_ttfb": med["revived"]["ttfb_s"] / med["heap"]["ttfb_s"],
    }
    assert all(r["revived"] == r["samples"] // spc for r in rows["revived"]), rows["revived"]
    print(f"{label}:")
    print("| run | TTFB s | epoch 1 s | epoch 2 s |")
    print("|---|---|---|---|")
    for m, name in (("heap", "heap, cold pool"), ("disk_cold", "cache_dir persist, empty dir"),
                    ("revived", "new process, persisted cache")):
        print(f"| {name} | {med[m]['ttfb_s']:.3f} | {med[m]['epoch1_s']:.3f} | {med[m]['epoch2_s']:.3f} |")
    print()
    print(f"cold epoch, cache_dir / heap (samples/s): **{ratios['cold_disk_over_heap']:.2f}** (target >= 0.95)")
    print(f"revived epoch / warm heap epoch (samples/s): **{ratios['revived_over_warm_heap']:.2f}** (target >= 0.9)")
    print(f"revived TTFB / cold TTFB: **{ratios['revived_ttfb_over_cold_ttfb']:.2f}** (target <= 0.5)")
    print()
    return ratios


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=2048)
    p.add_argument("--spc", type=int, default=16)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--against", metavar="REV", help="an earlier revision to run alongside, alternating")
    p.add_argument("--json")
    args = p.parse_args()
    site = None
    if args.against:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from engine_ab import build_revision, resolve_commit

        commit = resolve_commit(args.against)
        if commit is None:
            p.error(f"--against {args.against!r} names no commit")
        site = build_revision(commit)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        path = make_store(root, args.samples, args.spc)
        run(path, "heap", root / "unused")  # warms the page cache for the store's files
        sides: dict[str, dict[str, list[dict]]] = {"this": {"heap": [], "disk_cold": [], "revived": []}}
        if site is not None:
            sides["old"] = {"heap": [], "disk_cold": [], "revived": []}
        for _ in range(args.rounds):  # the sides alternate round by round, so drift hits both
            for side, where in (("this", None), ("old", site)):
                if side in sides:
                    for mode, got in rounds_of(path, root, 1, where).items():
                        sides[side][mode] += got
    machine = {"cpu": platform.processor() or platform.machine(), "python": platform.python_version()}
    print(f"machine: {machine}; {args.samples} x 181 x 360 float32, {args.spc} samples per chunk, zstd;"
          f" {args.rounds} alternating rounds, medians")
    ratios = {side: report(rows, args.samples, args.spc, "this checkout" if side == "this" else args.against)
              for side, rows in sides.items()}
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine, "sides": sides, "ratios": ratios}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
