"""Engine vs the raw decode ceiling (issue: the engine's speed target).

For local zstd stores with 1, 4, 16 and 32 samples per chunk (same values, only the chunking
differs), measured in one run on this machine:

* ceiling  -- every stored chunk, already in memory, zstd-decoded by the same number of
              threads the engine decodes with (no loader, no pool, no gather);
* ours     -- a full shuffled epoch through InSituDataset with a cold pool and a warm OS page
              cache (so the engine decodes every chunk once, like the ceiling);
* TTFB     -- time to first batch from a cold process start (import included);
* peak RSS -- of a process that runs one epoch, against describe()'s ESTIMATED;
* decode CPU / gather CPU -- from the pass statistics: how many decode threads one gather
              thread keeps up with (what sizes the default gather_threads; read it where
              the engine gathers alone, i.e. below five decode threads: with helpers
              gather_s also counts the producer's wait for them).

Ceiling and ours alternate in `--runs` paired rounds (the VM's speed drifts by tens of percent
within a minute, so only a ratio taken seconds apart means anything); the row reports the
median paired ratio and its range. With `--trace-ab` each round also times recorded epochs
(inside `insitubatch.tracing()`: the pass's timeline kept in its ring) beside unrecorded ones
of the same dataset, in alternating order, and the row reports what recording costs: the
median of recorded / unrecorded, less one, in wall time and in the process's CPU time, and
the time `save_trace()` takes to write a recorded epoch's file. Each row is measured for
every `--threads` decode-thread count: all cores (the loader's read and gather copies then
take CPU from the decoders) and all cores but one (they run beside the decoders, as on any
machine with cores to spare).

    .venv/bin/python bench/engine_bench.py [--samples 1024] [--field 181x360] [--runs 5] [--threads 2,1] [--trace-ab]

Writes bench/results/engine.json and prints a markdown table.
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
import textwrap
import time

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
DATA = HERE / "data"
RESULTS = HERE / "results"


def make_store(path: pathlib.Path, n: int, field: tuple[int, int], spc: int, codec: str = "zstd") -> None:
    """`codec`: "zstd" (level 1) or "none" (stored uncompressed)."""
    import zarr
    from zarr.codecs import ZstdCodec

    if (path / "t2m" / "zarr.json").exists():
        return
    rng = np.random.default_rng(0)
    y, x = np.meshgrid(np.linspace(0, np.pi, field[0]), np.linspace(0, 2 * np.pi, field[1]), indexing="ij")
    base = (250 + 40 * np.sin(y) * np.cos(x)).astype("f4")
    arr = zarr.create_array(zarr.storage.LocalStore(path), name="t2m", shape=(n, *field), chunks=(spc, *field),
                            dtype="float32", compressors=[ZstdCodec(level=1)] if codec == "zstd" else None,
                            fill_value=0.0)
    step = max(spc, 64)
    for start in range(0, n, step):
        stop = min(n, start + step)
        noise = rng.normal(0, 2, size=(stop - start, *field)).astype("f4")
        arr[start:stop] = np.round(base + noise, 1)


def chunk_files(path: pathlib.Path) -> list[str]:
    root = path / "t2m" / "c"
    return sorted(str(p) for p in root.rglob("*") if p.is_file())


def warm_page_cache(files: list[str]) -> None:
    for f in files:
        with open(f, "rb") as fh:
            while fh.read(1 << 20):
                pass


def cold_pool_epoch(ds, epoch: int) -> tuple[float, int]:
    """(seconds, samples) of one `ds.train` epoch whose pool is emptied first, so every chunk
    is fetched and decoded again (the OS page cache stays warm)."""
    ds.set_epoch(epoch)
    ds.clear_cache()
    t0 = time.perf_counter()
    n = 0
    for batch in ds.train:
        n += len(batch)
    return time.perf_counter() - t0, n


def paired_rounds(path: pathlib.Path, files: list[str], decoded: int, threads: int, args) -> dict:
    """`args.runs` rounds of (ceiling, ours) on one warm dataset (engine threads, recycled
    buffers, OS page cache) whose pool is cleared before each timed epoch, so every chunk is
    fetched and decoded again. Each side takes the best of two tries per round."""
    from insitubatch import InSituDataset, _ext, open_geometries, split_by_chunk, store

    s = store(str(path))
    geoms = open_geometries(s, ["t2m"])
    manifest = split_by_chunk(geoms["t2m"], fractions=(1.0, 0.0, 0.0))
    ds = InSituDataset(s, manifest, geoms, batch_size=args.batch_size, block_chunks=args.block_chunks,
                       decode_threads=threads)
    cold_pool_epoch(ds, 0)  # warm-up: threads, buffers, first-touch of the pool's memory
    ceilings, ours, decode_per_gather, epoch = [], [], [], 1
    for _ in range(args.runs):
        ceilings.append(_ext.zstd_decode_ceiling(files, decoded, threads, 2))
        best = float("inf")
        for _ in range(2):
            dt, n = cold_pool_epoch(ds, epoch)
            epoch += 1
            assert ds.last_pass.cache_misses == len(files), "every chunk must be decoded"
            best = min(best, dt)
            t = ds.last_pass.times
            decode_per_gather.append(t.decode_s / t.gather_s)
        ours.append(best)
    ds.close()
    ratios = [c / o for c, o in zip(ceilings, ours)]
    # Decode CPU per gather CPU: how many decode threads one gather thread keeps up with.
    out = {"threads": threads, "samples": n, "ceiling_samples_s": n / statistics.median(ceilings),
           "ours_samples_s": n / statistics.median(ours), "ratio": statistics.median(ratios),
           "ratio_min": min(ratios), "ratio_max": max(ratios),
           "decode_per_gather_cpu": statistics.median(decode_per_gather)}
    if args.trace_ab:
        out.update(trace_rounds(path, files, threads, args))
    return out


def trace_rounds(path: pathlib.Path, files: list[str], threads: int, args) -> dict:
    """`args.runs` rounds of (unrecorded, recorded) cold-pool epochs of one warm dataset,
    alternating which goes first (a recorded epoch runs inside `tracing()`); each side the
    best of two tries per round, in wall time and in the process's CPU time. Returns what
    recording costs: recorded / unrecorded, less one (median and range over the rounds),
    and the seconds `save_trace()` took to write a recorded epoch."""
    import contextlib
    import tempfile

    from insitubatch import InSituDataset, open_geometries, split_by_chunk, store, tracing

    s = store(str(path))
    geoms = open_geometries(s, ["t2m"])
    manifest = split_by_chunk(geoms["t2m"], fractions=(1.0, 0.0, 0.0))
    ds = InSituDataset(s, manifest, geoms, batch_size=args.batch_size, block_chunks=args.block_chunks,
                       decode_threads=threads)
    cold_pool_epoch(ds, 0)  # warm-up
    costs, cpu_costs, save_s, events, epoch, kept = [], [], [], 0, 1, None
    for k in range(args.runs):
        best, cpu = {}, {}
        for recorded in ((False, True) if k % 2 == 0 else (True, False)):
            times, cpus = [], []
            for _ in range(2):
                cpu0 = time.process_time()  # every thread of the process: what recording adds to the CPU
                with tracing() if recorded else contextlib.nullcontext():
                    dt, _ = cold_pool_epoch(ds, epoch)
                cpus.append(time.process_time() - cpu0)
                epoch += 1
                assert ds.last_pass.cache_misses == len(files), "every chunk must be decoded"
                assert (ds.last_pass.trace is not None) == recorded
                kept = ds.last_pass if recorded else kept
                times.append(dt)
            best[recorded], cpu[recorded] = min(times), min(cpus)
        costs.append(best[True] / best[False] - 1)
        cpu_costs.append(cpu[True] / cpu[False] - 1)
        events = len(kept.trace.events)
        with tempfile.TemporaryDirectory() as tmp:  # writing the file is after the pass: timed apart
            t0 = time.perf_counter()
            kept.save_trace(pathlib.Path(tmp) / "epoch.json")
            save_s.append(time.perf_counter() - t0)
    ds.close()
    return {"trace_cost": statistics.median(costs), "trace_cost_min": min(costs), "trace_cost_max": max(costs),
            "trace_cpu_cost": statistics.median(cpu_costs), "trace_cpu_cost_min": min(cpu_costs),
            "trace_cpu_cost_max": max(cpu_costs), "trace_events": events, "trace_save_s": statistics.median(save_s)}


CHILD = textwrap.dedent("""
    import json, sys, time
    t0 = time.perf_counter()

    def status(field):  # this process's own counters (ru_maxrss would include the parent's
        for line in open("/proc/self/status"):  # pre-exec peak on Linux)
            if line.startswith(field):
                return int(line.split()[1]) * 1024

    from insitubatch import InSituDataset, open_geometries, split_by_chunk, store
    baseline = status("VmRSS:")
    s = store(sys.argv[1])
    geoms = open_geometries(s, ["t2m"])
    ds = InSituDataset(s, split_by_chunk(geoms["t2m"], fractions=(1.0, 0.0, 0.0)), geoms,
                       batch_size=int(sys.argv[2]), block_chunks=int(sys.argv[3]))
    it = iter(ds.train)
    next(it)
    ttfb = time.perf_counter() - t0
    for _ in it:
        pass
    print(json.dumps({"ttfb_s": ttfb, "peak_rss": status("VmHWM:"), "baseline_rss": baseline,
                      "estimated": ds.describe()["memory"]["estimated_peak_bytes"]}))
""")


def cold_process(path: pathlib.Path, batch_size: int, block_chunks: int) -> dict:
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", CHILD, str(path), str(batch_size), str(block_chunks)],
                         check=True, capture_output=True, text=True).stdout
    d = json.loads(out)
    d["process_s"] = time.perf_counter() - t0
    return d


def machine() -> dict:
    cpu = "unknown"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import insitubatch
    import zarr
    from insitubatch import _ext

    mem = _ext.machine_memory_bytes()  # the engine's figure: a container's limit where lower than RAM

    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(mem / 2**30, 1),
            "python": platform.python_version(), "insitubatch": insitubatch.__version__,
            "zarr": zarr.__version__, "numpy": np.__version__}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=1024)
    p.add_argument("--field", default="181x360")
    p.add_argument("--spc", default="1,4,16,32")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--block-chunks", type=int, default=16)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--trace-ab", action="store_true",
                   help="also time recorded (trace=True) against unrecorded epochs, alternating")
    cores = os.cpu_count() or 1
    p.add_argument("--threads", default=",".join(str(t) for t in sorted({cores, max(1, cores - 1)}, reverse=True)),
                   help="decode-thread counts to measure, comma-separated (default: all cores, all but one)")
    args = p.parse_args()

    field = tuple(int(v) for v in args.field.split("x"))
    rows = []
    for spc in [int(v) for v in args.spc.split(",")]:
        path = DATA / f"era5_c{spc}_{args.samples}_{args.field}.zarr"
        make_store(path, args.samples, field, spc)
        files = chunk_files(path)
        warm_page_cache(files)
        decoded = spc * field[0] * field[1] * 4
        cold = cold_process(path, args.batch_size, args.block_chunks)
        for threads in [int(v) for v in args.threads.split(",")]:
            m = paired_rounds(path, files, decoded, threads, args)
            row = {
                "samples_per_chunk": spc, "chunks": len(files),
                "stored_mib": round(sum(os.path.getsize(f) for f in files) / 2**20, 1), **m,
                "ours_mib_s": m["ours_samples_s"] * decoded / spc / 2**20,
                "ttfb_s": cold["ttfb_s"], "peak_rss_mib": cold["peak_rss"] / 2**20,
                "baseline_rss_mib": cold["baseline_rss"] / 2**20,
                "loader_rss_mib": (cold["peak_rss"] - cold["baseline_rss"]) / 2**20,
                "estimated_mib": cold["estimated"] / 2**20,
                "rss_within_estimate": cold["peak_rss"] - cold["baseline_rss"] <= cold["estimated"],
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    RESULTS.mkdir(exist_ok=True)
    result = {"machine": machine(), "args": vars(args), "rows": rows}
    (RESULTS / "engine.json").write_text(json.dumps(result, indent=2))
    print()
    print(f"machine: {result['machine']}")
    print("| samples/chunk | decode threads | ceiling samples/s | ours samples/s | ours / ceiling (range) | ours MiB/s |"
          " TTFB (cold process) | peak RSS (process) | peak RSS above imports | describe() ESTIMATED |"
          " decode CPU / gather CPU |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['samples_per_chunk']} | {r['threads']} | {r['ceiling_samples_s']:.0f} | {r['ours_samples_s']:.0f} |"
              f" **{r['ratio']:.2f}** ({r['ratio_min']:.2f}-{r['ratio_max']:.2f}) | {r['ours_mib_s']:.0f} |"
              f" {r['ttfb_s']:.2f} s | {r['peak_rss_mib']:.0f} MiB | {r['loader_rss_mib']:.0f} MiB |"
              f" {r['estimated_mib']:.0f} MiB | {r['decode_per_gather_cpu']:.1f} |")
    if args.trace_ab:
        print()
        print("| samples/chunk | decode threads | recorded / unrecorded epoch - 1, wall (range) | the same, process CPU"
              " (range) | events per epoch | save_trace() |")
        print("|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['samples_per_chunk']} | {r['threads']} | **{100 * r['trace_cost']:+.1f}%**"
                  f" ({100 * r['trace_cost_min']:+.1f}% to {100 * r['trace_cost_max']:+.1f}%) |"
                  f" **{100 * r['trace_cpu_cost']:+.1f}%** ({100 * r['trace_cpu_cost_min']:+.1f}% to"
                  f" {100 * r['trace_cpu_cost_max']:+.1f}%) | {r['trace_events']:,} | {r['trace_save_s'] * 1000:.0f} ms |")


if __name__ == "__main__":
    main()
