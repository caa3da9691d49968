"""Patches side by side: 256 x 256 windows of 2048 x 2048 float32 zstd planes.

A zarr v3 store of `--planes` planes (time, y, x), float32, zstd level 3, written by
zarr-python with one stored chunk per plane (`--chunk 2048`, the layout of a plane store) or
tiles (`--chunk 512`). Each engine runs one epoch in a fresh process (files in the page cache),
rounds interleaved, medians reported, every engine's patches checked against numpy slicing of
zarr-python's read in the first round:

* ours random  -- InSituDataset(patch={"y": 256, "x": 256}, patch_mode="random",
                  patches_per_sample=16): 16 random patches per plane per epoch;
* ours grid    -- the same with patch_mode="grid" (stride 256: the 64 patches of a plane);
* ours masked  -- grid mode with sample_filter= a static mask and min_valid=0.5 that admits
                  every patch (its cost: the mask's evaluation at construction plus the
                  filtered order, against "ours grid");
* zarr loop    -- zarr-python reading each random patch by slicing (16 per plane), its
                  own random origins (uniform, like ours);
* xbatcher     -- BatchGenerator(input_dims={"time": 1, "y": 256, "x": 256}) over the store
                  opened by xarray, as xbatcher's torch MapDataset under a DataLoader
                  (batch 32) at 0, 1 and 2 workers: the best is reported (grid patches).

A first, untimed round checks every engine's patches; then `--rounds` timed rounds.
Per engine: patches/s (the whole epoch, construction included for ours), and bytes fetched
from the store per epoch against the store's bytes (ours: the pass stats' bytes read). The
masked figure compares a second epoch (pool cleared: every chunk read and decoded again)
with the unmasked one's, and reports the construction times beside it (the mask is
evaluated once, at construction).

    .venv/bin/python bench/patch_bench.py [--planes 32] [--peer-planes 8] [--chunk 2048] [--rounds 3]

Ours reads every plane (its start-up is paid once per epoch, as in training); the peers, whose
cost per patch does not depend on the plane count, read the first `--peer-planes` planes to
keep the run short.

Targets (issue 35): ours >= 5x the best peer in patches/s, bytes fetched <= 1.05x the
store's, masked sampling <= 1.10x the unmasked epoch's time.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent

CHILD = r"""
import json, sys, time
import numpy as np
cfg = json.loads(sys.argv[1])
engine, path, P = cfg["engine"], cfg["path"], 256
check = cfg["check"]
truth = None
if check:
    import zarr
    truth = zarr.open_array(path + "/v", mode="r")[...]  # zarr-python's values, read once
out = {"engine": engine}
t0 = time.perf_counter()
if engine.startswith("ours"):
    import insitubatch as ib
    s = ib.store(path)
    geoms = ib.open_geometries(s, ["v"])
    manifest = ib.split_by_chunk(geoms["v"], fractions=(1.0, 0.0, 0.0))
    kwargs = {"patch": {"y": P, "x": P}}
    if engine == "ours random":
        kwargs.update(patch_mode="random", patches_per_sample=16)
    if engine == "ours masked":
        kwargs.update(sample_filter=np.ones((2048, 2048), dtype=bool), min_valid=0.5)
    ds = ib.InSituDataset(s, manifest, geoms, batch_size=32, block_chunks=4, **kwargs)
    out["construct_s"] = time.perf_counter() - t0
    n = 0
    for b in ds.train:
        n += len(b)
        if check:
            for i, (t, (y, x)) in enumerate(zip(b.sample_indices, b.patch_origins)):
                assert np.array_equal(b.arrays["v"][i], truth[t, y:y + P, x:x + P]), (engine, t, y, x)
    out["bytes_read"] = ds.last_pass.bytes_read
    wall = time.perf_counter() - t0
    ds.set_epoch(1)
    ds.clear_cache()  # the next epoch reads and decodes every chunk again
    t1 = time.perf_counter()
    for b in ds.train:
        pass
    out["second_epoch_s"] = time.perf_counter() - t1
    t0 = time.perf_counter() - wall  # the figure below: construction and the first epoch
elif engine == "zarr loop":
    import zarr
    a = zarr.open_array(path + "/v", mode="r")
    rng = np.random.default_rng(0)
    n = 0
    batch = np.empty((32, P, P), dtype="f4")
    for t in rng.permutation(min(a.shape[0], cfg["peer_planes"])):
        for y, x in rng.integers(0, 2048 - P + 1, (16, 2)):
            batch[n % 32] = a[t, y:y + P, x:x + P]
            if check:
                assert np.array_equal(batch[n % 32], truth[t, y:y + P, x:x + P])
            n += 1
elif engine.startswith("xbatcher"):
    import torch, xarray as xr, xbatcher
    from xbatcher.loaders.torch import MapDataset
    ds = xr.open_zarr(path, consolidated=False, chunks=None).isel(time=slice(0, cfg["peer_planes"]))
    gen = xbatcher.BatchGenerator(ds["v"], input_dims={"time": 1, "y": P, "x": P}, preload_batch=False)
    loader = torch.utils.data.DataLoader(MapDataset(gen), batch_size=32, shuffle=True,
                                         num_workers=cfg["workers"], persistent_workers=False)
    n = 0
    for b in loader:
        n += b.shape[0]
    if check:
        first = gen[0]
        t, y, x = (int(first[d].values.ravel()[0]) if d == "time" else 0 for d in ("time", "y", "x"))
        assert np.array_equal(first.values.reshape(P, P), truth[0, :P, :P])
out["wall_s"] = time.perf_counter() - t0
out["patches"] = n
print(json.dumps(out))
"""


def make_store(path: pathlib.Path, planes: int, chunk: int) -> int:
    import numpy as np
    import zarr
    from zarr.codecs import ZstdCodec

    if not path.exists():
        root = zarr.open_group(str(path), mode="w", zarr_format=3)
        a = root.create_array("v", shape=(planes, 2048, 2048), chunks=(1, chunk, chunk), dtype="f4",
                              compressors=[ZstdCodec(level=3)], dimension_names=("time", "y", "x"))
        yy, xx = np.mgrid[0:2048, 0:2048].astype("f4") / 2048
        rng = np.random.default_rng(1)
        for t in range(planes):  # smooth fields with noise: compresses like a real one
            a[t] = (np.sin(6 * yy + t) * np.cos(5 * xx - t) + 0.05 * rng.standard_normal((2048, 2048))).astype("f4")
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and "/c/" in str(f))


def run(python: str, cfg: dict) -> dict:
    done = subprocess.run([python, "-c", CHILD, json.dumps(cfg)], capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"{cfg['engine']} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--planes", type=int, default=32)
    p.add_argument("--chunk", type=int, default=2048)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--peer-planes", type=int, default=8,
                   help="planes the peers read (a patch costs them the same on any plane; ours reads all)")
    p.add_argument("--workers", default="0,1,2", help="xbatcher's DataLoader worker counts to try")
    p.add_argument("--data", type=pathlib.Path, default=HERE / "data")
    p.add_argument("--json", type=pathlib.Path, default=HERE / "results" / "patches.json")
    p.add_argument("--python", default=sys.executable)
    args = p.parse_args()
    path = args.data / f"planes{args.planes}_c{args.chunk}.zarr"
    args.data.mkdir(parents=True, exist_ok=True)
    store_bytes = make_store(path, args.planes, args.chunk)
    engines = ["ours random", "ours grid", "ours masked", "zarr loop"] + [
        f"xbatcher w{w}" for w in args.workers.split(",") if w != ""]
    results: dict[str, list[dict]] = {e: [] for e in engines}
    for r in range(-1, args.rounds):  # round -1 checks every patch (untimed); the rest are timed
        for engine in engines:
            cfg = {"engine": engine, "path": str(path), "check": r < 0, "peer_planes": args.peer_planes,
                   "workers": int(engine[10:]) if engine.startswith("xbatcher") else 0}
            out = run(args.python, cfg)
            if r < 0:
                continue
            results[engine].append(out)
            print(f"round {r} {engine}: {out['patches'] / out['wall_s']:.0f} patches/s", file=sys.stderr)
    rate = {e: statistics.median(o["patches"] / o["wall_s"] for o in rows) for e, rows in results.items()}
    xbatcher = {e: v for e, v in rate.items() if e.startswith("xbatcher")}
    best_x = max(xbatcher, key=xbatcher.get) if xbatcher else None
    peers = {"zarr loop": rate["zarr loop"], **({best_x: rate[best_x]} if best_x else {})}
    best_peer = max(peers.values())
    grid_time = statistics.median(o["second_epoch_s"] for o in results["ours grid"])
    masked_time = statistics.median(o["second_epoch_s"] for o in results["ours masked"])
    construct = {e: statistics.median(o["construct_s"] for o in results[e]) for e in ("ours grid", "ours masked")}
    summary = {
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.python_version()}",
        "planes": args.planes, "peer_planes": min(args.peer_planes, args.planes), "chunk": args.chunk, "store_bytes": store_bytes, "rounds": args.rounds,
        "patches_per_s": rate,
        "ours_random_vs_best_peer": rate["ours random"] / best_peer,
        "ours_grid_vs_xbatcher": rate["ours grid"] / rate[best_x] if best_x else None,
        "bytes_read_vs_store": statistics.median(o["bytes_read"] for o in results["ours random"]) / store_bytes,
        "masked_vs_unmasked_time": masked_time / grid_time,
        "construct_s": construct,
        "runs": results,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(summary, indent=1))
    print(f"| engine | patches/s | vs best peer |\n|---|---|---|")
    for e, v in rate.items():
        print(f"| {e} | {v:.0f} | {v / best_peer:.2f}x |")
    print(f"\nours random / best peer: {summary['ours_random_vs_best_peer']:.2f}x; ours grid / best xbatcher:"
          f" {summary['ours_grid_vs_xbatcher'] or 0:.2f}x; bytes read / store bytes:"
          f" {summary['bytes_read_vs_store']:.3f}; masked / unmasked epoch time: {summary['masked_vs_unmasked_time']:.2f}"
          f" (construction {construct['ours masked']:.3f} s masked, {construct['ours grid']:.3f} s unmasked)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
