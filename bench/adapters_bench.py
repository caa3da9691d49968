"""Adapter overhead: a torch DataLoader over as_torch(ds.train) against raw ds.train, in
batches per second on the CPU, over a local store of 16 samples per chunk (zarr-python).

    .venv/bin/python bench/adapters_bench.py [--samples 512 --field 361x720 --batch-size 32]

The default field is the benchmark page's era5_c16 (361x720 float32, ~1 MB a sample, 33 MB
a batch). Passes alternate (raw, torch, raw, torch, ...) over one dataset at a fixed epoch
after a warm-up pass, so both read the same order from the warm pool; the headline is the
median over pass pairs of (torch / raw), which holds up on a shared, noisy machine.
Target: torch >= 0.95 x raw. The consumer thread's CPU time per batch is printed too: the
DataLoader itself costs a fixed ~15-30 us a batch, so tiny batches served from memory in
~200 us (e.g. --field 64x128) fall short of the target on a 2-core machine.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import zarr
from zarr.codecs import ZstdCodec

import insitubatch
from insitubatch import InSituDataset, open_geometries, split_by_chunk


def make_store(path: Path, samples: int, field: tuple[int, int], spc: int) -> None:
    rng = np.random.default_rng(0)
    arr = zarr.create_array(zarr.storage.LocalStore(path), name="t2m", shape=(samples, *field),
                            chunks=(spc, *field), dtype="f4", compressors=[ZstdCodec(level=1)])
    for start in range(0, samples, 64):
        stop = min(start + 64, samples)
        arr[start:stop] = rng.standard_normal((stop - start, *field)).astype("f4")


def timed_pass(iterable, cpu: list | None = None) -> tuple[float, int]:
    n = 0
    c0 = time.thread_time()
    t0 = time.perf_counter()
    for _ in iterable:
        n += 1
    t = time.perf_counter() - t0
    if cpu is not None:
        cpu.append((time.thread_time() - c0) / n)
    return t, n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=512)
    parser.add_argument("--field", default="361x720", help="HxW of one float32 sample")
    parser.add_argument("--spc", type=int, default=16, help="samples per chunk")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=21, help="pass pairs")
    parser.add_argument("--store", type=Path, help="existing or new store path (default: a temp dir)")
    args = parser.parse_args()

    import torch
    from torch.utils.data import DataLoader

    field = tuple(int(v) for v in args.field.lower().split("x"))
    with tempfile.TemporaryDirectory() as tmp:
        path = args.store or Path(tmp) / "bench.zarr"
        if not path.exists():
            make_store(path, args.samples, field, args.spc)
        store = insitubatch.local_store(path)
        geoms = open_geometries(store, variables=["t2m"])
        manifest = split_by_chunk(geoms["t2m"], fractions=(1.0, 0.0, 0.0))
        n_chunks = manifest.n_chunks
        ds = InSituDataset(store, manifest, geometries=geoms, batch_size=args.batch_size, block_chunks=16,
                           cache_budget_bytes=2 * n_chunks * geoms["t2m"].chunk_bytes)
        loader = DataLoader(insitubatch.as_torch(ds.train), batch_size=None, num_workers=0)
        timed_pass(ds.train)  # warm-up: decode every chunk into the pool once
        timed_pass(loader)
        raw, adapted, raw_cpu, adapted_cpu = [], [], [], []
        for i in range(args.repeats):  # pairs, alternating which goes first to cancel drift
            pair = [(raw, raw_cpu, ds.train), (adapted, adapted_cpu, loader)]
            for out, cpu, source in pair if i % 2 == 0 else pair[::-1]:
                t, n = timed_pass(source, cpu)
                out.append(n / t)
        ratios = [a / r for a, r in zip(adapted, raw)]
        batch_mib = args.batch_size * int(np.prod(field)) * 4 / 2**20
        print(f"store: {args.samples} x {field[0]}x{field[1]} float32, {args.spc} samples/chunk; "
              f"batch {args.batch_size} ({batch_mib:.2f} MiB); torch {torch.__version__}; "
              f"{len(ds.train)} batches/pass, {args.repeats} pass pairs")
        rows = (("raw ds.train", raw, raw_cpu), ("DataLoader(as_torch())", adapted, adapted_cpu))
        for name, rates, cpu in rows:
            print(f"{name:23s} best {max(rates):9.1f} batches/s   median {statistics.median(rates):9.1f}"
                  f"   consumer CPU {statistics.median(cpu) * 1e6:7.1f} us/batch")
        ratio = statistics.median(ratios)
        print(f"ratio: median of pairs {ratio:.3f}   best/best {max(adapted) / max(raw):.3f}"
              f"   target >= 0.95: {'met' if ratio >= 0.95 else 'NOT met'}")

if __name__ == "__main__":
    main()
