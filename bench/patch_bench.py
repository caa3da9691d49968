"""Patches side by side: 256 x 256 windows of 2048 x 2048 float32 zstd planes.

A zarr v3 store of `--planes` planes (time, y, x) of `--plane` squared float32, zstd level 3,
written by zarr-python with one stored chunk per plane (`--chunk` = `--plane`, the layout of
a plane store) or tiles (`--chunk 512`). Each engine runs one epoch in a fresh process
(files in the page cache), rounds interleaved, medians reported, every engine's patches
checked against numpy slicing of zarr-python's read in the first round:

* ours random    -- InSituDataset(patch={"y": P, "x": P}, patch_mode="random",
                    patches_per_sample=16): 16 random patches per plane per epoch;
* ours grid      -- the same with patch_mode="grid" (stride P: every patch of a plane);
* ours mask all  -- grid mode with sample_filter= a static mask and min_valid=0.5 that admits
                    every patch: the filter's own overhead;
* ours ocean     -- grid mode with a static ocean mask (a wavy coast, ~30 % land) and
                    min_valid=0.5: about a third of the patches rejected;
* ours predicate -- grid mode with sample_filter= a vectorized predicate over each decoded
                    chunk, `np.isfinite(v) & (v > -0.3)`, min_valid=0.5 (~28 % rejected;
                    evaluated at construction by one pass over the store);
* zarr loop      -- zarr-python reading each random patch by slicing (16 per plane), its
                    own random origins (uniform, like ours);
* xbatcher       -- BatchGenerator(input_dims={"time": 1, "y": P, "x": P}) over the store
                    opened by xarray, as xbatcher's torch MapDataset under a DataLoader
                    (batch 32) at each `--workers` count: the best is reported (grid patches).

A first, untimed round checks every engine's patches (a masked engine's: exactly the grid
patches its mask admits, each once); then `--rounds` timed rounds. Per engine: patches/s
(the whole epoch, construction included for ours) and bytes fetched from the store per
epoch against the store's bytes (ours: the pass stats' bytes read). The filters' cost, per
masked engine, against "ours grid":

* evaluation: construction with the filter minus construction without (the one-time
  evaluation: box sums of the static mask, or the predicate's pass), and as a share of one
  unmasked epoch;
* per epoch: a second epoch (pool cleared: every chunk read and decoded again) against the
  unmasked one's, as epoch time and as time per drawn patch, wall and CPU (every thread's
  process time: steadier than wall when other work shares the machine).

    .venv/bin/python bench/patch_bench.py [--planes 32] [--peer-planes 8] [--plane 2048] [--patch 256]
                                          [--chunk 2048] [--rounds 3]

Ours reads every plane (its start-up is paid once per epoch, as in training); the peers, whose
cost per patch does not depend on the plane count, read the first `--peer-planes` planes to
keep the run short.

Targets (issue 35): ours >= 5x the best peer in patches/s, bytes fetched <= 1.05x the
store's, masked sampling <= 10 % of an unmasked epoch's time.
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
MASKED = ("ours mask all", "ours ocean", "ours predicate")
OURS = ("ours random", "ours grid", *MASKED)

CHILD = r"""
import json, sys, time
import numpy as np
cfg = json.loads(sys.argv[1])
engine, path, S, P, B = cfg["engine"], cfg["path"], cfg["plane"], cfg["patch"], cfg["batch"]
check = cfg["check"]
truth = None
if check:
    import zarr
    truth = zarr.open_array(path + "/v", mode="r")[...]  # zarr-python's values, read once

def ocean(S):  # a wavy coast: land west of it, ~30 % of the plane
    yy, xx = np.mgrid[0:S, 0:S] / S
    return xx + 0.15 * np.sin(2 * np.pi * yy) >= 0.3

def wet(v):  # the predicate: a per-pixel mask over a decoded chunk, vectorized
    return np.isfinite(v) & (v > -0.3)

out = {"engine": engine}
static = {"ours mask all": np.ones((S, S), dtype=bool), "ours ocean": ocean(S)}.get(engine)  # the user's, untimed
t0 = time.perf_counter()
if engine.startswith("ours"):
    import insitubatch as ib
    s = ib.store(path)
    geoms = ib.open_geometries(s, ["v"])
    manifest = ib.split_by_chunk(geoms["v"], fractions=(1.0, 0.0, 0.0))
    kwargs = {"patch": {"y": P, "x": P}}
    if engine == "ours random":
        kwargs.update(patch_mode="random", patches_per_sample=16)
    if static is not None:
        kwargs.update(sample_filter=static, min_valid=0.5)
    if engine == "ours predicate":
        kwargs.update(sample_filter=wet, min_valid=0.5)
    tc = time.perf_counter()
    ds = ib.InSituDataset(s, manifest, geoms, batch_size=B, block_chunks=4, **kwargs)
    out["construct_s"] = time.perf_counter() - tc
    n, seen = 0, set()
    for b in ds.train:
        n += len(b)
        if check:
            for i, (t, (y, x)) in enumerate(zip(b.sample_indices.tolist(), b.patch_origins.tolist())):
                assert np.array_equal(b.arrays["v"][i], truth[t, y:y + P, x:x + P]), (engine, t, y, x)
                seen.add((t, y, x))
    if check and engine == "ours grid":
        static = np.ones((S, S), dtype=bool)
    if check and engine != "ours random":  # grid: every admitted patch once, no other
        grid = range(0, S - P + 1, P)
        want = {(t, y, x) for t in range(truth.shape[0]) for y in grid for x in grid
                if (wet(truth[t]) if static is None else static)[y:y + P, x:x + P].mean() >= 0.5}
        assert n == len(seen) and seen == want, (engine, n, len(want))
    out["bytes_read"] = ds.last_pass.bytes_read
    wall = time.perf_counter() - t0
    ds.set_epoch(1)
    ds.clear_cache()  # the next epoch reads and decodes every chunk again
    t1, c1 = time.perf_counter(), time.process_time()
    for b in ds.train:
        pass
    out["second_epoch_s"] = time.perf_counter() - t1
    out["second_epoch_cpu_s"] = time.process_time() - c1  # every thread's: steadier than wall on a loaded machine
    t0 = time.perf_counter() - wall  # the figure below: construction and the first epoch
elif engine == "zarr loop":
    import zarr
    a = zarr.open_array(path + "/v", mode="r")
    rng = np.random.default_rng(0)
    n = 0
    batch = np.empty((B, P, P), dtype="f4")
    for t in rng.permutation(min(a.shape[0], cfg["peer_planes"])):
        for y, x in rng.integers(0, S - P + 1, (16, 2)):
            batch[n % B] = a[t, y:y + P, x:x + P]
            if check:
                assert np.array_equal(batch[n % B], truth[t, y:y + P, x:x + P])
            n += 1
elif engine.startswith("xbatcher"):
    import torch, xarray as xr, xbatcher
    from xbatcher.loaders.torch import MapDataset
    ds = xr.open_zarr(path, consolidated=False, chunks=None).isel(time=slice(0, cfg["peer_planes"]))
    gen = xbatcher.BatchGenerator(ds["v"], input_dims={"time": 1, "y": P, "x": P}, preload_batch=False)
    loader = torch.utils.data.DataLoader(MapDataset(gen), batch_size=B, shuffle=True,
                                         num_workers=cfg["workers"], persistent_workers=False)
    n = 0
    for b in loader:
        n += b.shape[0]
    if check:
        assert n == min(truth.shape[0], cfg["peer_planes"]) * (S // P) ** 2, n
        assert np.array_equal(gen[0].values.reshape(P, P), truth[0, :P, :P])
out["wall_s"] = time.perf_counter() - t0
out["patches"] = n
print(json.dumps(out))
"""


def make_store(path: pathlib.Path, planes: int, plane: int, chunk: int) -> int:
    import numpy as np
    import zarr
    from zarr.codecs import ZstdCodec

    if not path.exists():
        root = zarr.open_group(str(path), mode="w", zarr_format=3)
        a = root.create_array("v", shape=(planes, plane, plane), chunks=(1, chunk, chunk), dtype="f4",
                              compressors=[ZstdCodec(level=3)], dimension_names=("time", "y", "x"))
        yy, xx = np.mgrid[0:plane, 0:plane].astype("f4") / plane
        rng = np.random.default_rng(1)
        for t in range(planes):  # smooth fields with noise: compresses like a real one
            a[t] = (np.sin(6 * yy + t) * np.cos(5 * xx - t) + 0.05 * rng.standard_normal((plane, plane))).astype("f4")
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and "/c/" in str(f))


def run(python: str, cfg: dict) -> dict:
    done = subprocess.run([python, "-c", CHILD, json.dumps(cfg)], capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"{cfg['engine']} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def filter_costs(results: dict[str, list[dict]]) -> dict[str, dict]:
    """Each masked engine against "ours grid": the one-time evaluation and the per-epoch cost."""
    def med(engine: str, key: str) -> float:
        return statistics.median(o[key] for o in results[engine])

    base_epoch, base_n, base_construct = med("ours grid", "second_epoch_s"), med("ours grid", "patches"), med(
        "ours grid", "construct_s")
    base_cpu = med("ours grid", "second_epoch_cpu_s")
    out = {}
    for e in MASKED:
        if not results.get(e):
            continue
        epoch, n = med(e, "second_epoch_s"), med(e, "patches")
        evaluation = med(e, "construct_s") - base_construct
        cpu = med(e, "second_epoch_cpu_s") / base_cpu
        out[e] = {"drawn": n, "of": base_n, "rejected_share": 1 - n / base_n, "evaluation_s": evaluation,
                  "evaluation_vs_epoch": evaluation / base_epoch, "epoch_s": epoch, "unmasked_epoch_s": base_epoch,
                  "epoch_vs_unmasked": epoch / base_epoch, "per_drawn_vs_unmasked": (epoch / n) / (base_epoch / base_n),
                  "epoch_cpu_vs_unmasked": cpu, "per_drawn_cpu_vs_unmasked": cpu * base_n / n}
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--planes", type=int, default=32)
    p.add_argument("--plane", type=int, default=2048, help="each plane's side (planes are square)")
    p.add_argument("--patch", type=int, default=256, help="each patch's side")
    p.add_argument("--chunk", type=int, default=None, help="stored chunks' side (default: the plane's)")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--peer-planes", type=int, default=8,
                   help="planes the peers read (a patch costs them the same on any plane; ours reads all)")
    p.add_argument("--workers", default="0,1,2", help="xbatcher's DataLoader worker counts to try")
    p.add_argument("--engines", default=None, help="comma-separated subset of the engines (default: all)")
    p.add_argument("--data", type=pathlib.Path, default=HERE / "data")
    p.add_argument("--json", type=pathlib.Path, default=HERE / "results" / "patches.json")
    p.add_argument("--python", default=sys.executable)
    args = p.parse_args()
    chunk = args.chunk or args.plane
    if not 0 < args.patch <= args.plane or not 0 < chunk <= args.plane:
        p.error(f"--patch {args.patch} and --chunk {chunk} must be in [1, --plane {args.plane}]")
    path = args.data / f"planes{args.planes}_p{args.plane}_c{chunk}.zarr"
    args.data.mkdir(parents=True, exist_ok=True)
    store_bytes = make_store(path, args.planes, args.plane, chunk)
    engines = [*OURS, "zarr loop"] + [f"xbatcher w{w}" for w in args.workers.split(",") if w != ""]
    if args.engines:
        wanted = [e.strip() for e in args.engines.split(",")]
        if unknown := [e for e in wanted if e not in engines]:
            p.error(f"unknown engines {unknown}: known are {engines}")
        engines = [e for e in engines if e in wanted]
    results: dict[str, list[dict]] = {e: [] for e in engines}
    for r in range(-1, args.rounds):  # round -1 checks every patch (untimed); the rest are timed
        for engine in engines:
            cfg = {"engine": engine, "path": str(path), "check": r < 0, "peer_planes": args.peer_planes,
                   "plane": args.plane, "patch": args.patch, "batch": args.batch,
                   "workers": int(engine[10:]) if engine.startswith("xbatcher") else 0}
            out = run(args.python, cfg)
            if r < 0:
                continue
            results[engine].append(out)
            print(f"round {r} {engine}: {out['patches'] / out['wall_s']:.0f} patches/s", file=sys.stderr)
    rate = {e: statistics.median(o["patches"] / o["wall_s"] for o in rows) for e, rows in results.items()}
    xbatcher = {e: v for e, v in rate.items() if e.startswith("xbatcher")}
    best_x = max(xbatcher, key=lambda e: xbatcher[e]) if xbatcher else None
    peers = {e: rate[e] for e in ("zarr loop", best_x) if e in rate}
    best_peer = max(peers.values()) if peers else None
    costs = filter_costs(results) if "ours grid" in results else {}
    summary = {
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.python_version()}",
        "planes": args.planes, "peer_planes": min(args.peer_planes, args.planes), "plane": args.plane,
        "patch": args.patch, "chunk": chunk, "store_bytes": store_bytes, "rounds": args.rounds,
        "patches_per_s": rate,
        "ours_random_vs_best_peer": rate["ours random"] / best_peer if best_peer and "ours random" in rate else None,
        "ours_grid_vs_xbatcher": rate["ours grid"] / rate[best_x] if best_x and "ours grid" in rate else None,
        "bytes_read_vs_store": {e: statistics.median(o["bytes_read"] for o in results[e]) / store_bytes
                                for e in OURS if results.get(e)},
        "construct_s": {e: statistics.median(o["construct_s"] for o in results[e]) for e in OURS if results.get(e)},
        "filters": costs,
        "runs": results,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(summary, indent=1))
    print("| engine | patches/s | vs best peer |\n|---|---|---|")
    for e, v in rate.items():
        print(f"| {e} | {v:.0f} | {f'{v / best_peer:.2f}x' if best_peer else '-'} |")
    ratios = [f"{what}: {summary[key]:.2f}x" for what, key in (("ours random / best peer", "ours_random_vs_best_peer"),
              ("ours grid / best xbatcher", "ours_grid_vs_xbatcher")) if summary[key] is not None]
    print("\n" + "; ".join(ratios + ["bytes read / store bytes: " + ", ".join(
        f"{e} {v:.3f}" for e, v in summary["bytes_read_vs_store"].items())]))
    if costs:
        print("\n| filter | drawn / all | evaluation (once) | its share of an unmasked epoch | epoch vs unmasked:"
              " wall (CPU) | per drawn patch: wall (CPU) |\n|---|---|---|---|---|---|")
        for e, c in costs.items():
            print(f"| {e} | {c['drawn']:.0f} / {c['of']:.0f} ({c['rejected_share']:.0%} rejected) |"
                  f" {c['evaluation_s'] * 1000:.1f} ms | {c['evaluation_vs_epoch']:.1%} |"
                  f" {c['epoch_vs_unmasked']:.2f}x ({c['epoch_cpu_vs_unmasked']:.2f}x) |"
                  f" {c['per_drawn_vs_unmasked']:.2f}x ({c['per_drawn_cpu_vs_unmasked']:.2f}x) |")
        print(f"\n(unmasked epoch, pool cleared: {costs[next(iter(costs))]['unmasked_epoch_s']:.3f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
