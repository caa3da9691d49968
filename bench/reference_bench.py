"""Virtual references: an epoch of insitubatch over `reference_store` vs zarr-python over
fsspec's ReferenceFileSystem (how kerchunk references are read today), both reading every
chunk of an HDF5 file in place, locally and over HTTP (nginx). h5py reading the file
directly is the local ceiling.

The file is netCDF4-like: float32 (steps x 181 x 360), chunked 4 steps per chunk, with the
shuffle filter and gzip. References come from kerchunk's SingleHdf5ToZarr. Ours: one
shuffled pass of `InSituDataset(batch_size=32, block_chunks=16)`, and one in order
(`shuffle=False`, as a validation pass reads), where a block's chunks lie end to end in
the file and are fetched with one request. Peer: `zarr.open_array(fsspec refs)[...]` (zarr-
python's own concurrency and numcodecs decode). Rounds alternate; medians, per-round ratio.

    .venv/bin/python bench/reference_bench.py [--steps 1024] [--rounds 5]
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from http_bench import Nginx  # noqa: E402


def make_file(path: Path, steps: int) -> None:
    import h5py

    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        d = f.create_dataset("t2m", shape=(steps, 181, 360), chunks=(4, 181, 360), dtype="f4",
                             compression="gzip", compression_opts=1, shuffle=True)
        for start in range(0, steps, 64):
            d[start:start + 64] = np.round(280 + rng.standard_normal((min(64, steps - start), 181, 360)), 1)


def ours_epoch(refs: dict, epoch: int, shuffle: bool = True) -> tuple[float, int]:
    import insitubatch as ib

    store = ib.reference_store(refs)
    geoms = ib.open_geometries(store, variables=["t2m"])
    manifest = ib.split_by_chunk(geoms["t2m"], fractions=(1.0, 0.0, 0.0))
    ds = ib.InSituDataset(store, manifest, geometries=geoms, batch_size=32, block_chunks=16, shuffle=shuffle)
    ds.set_epoch(epoch)
    t0 = time.perf_counter()
    samples = sum(len(b) for b in ds.train)
    elapsed = time.perf_counter() - t0
    ds.close()
    return elapsed, store.target_reads if samples else 0


def peer_read(refs: dict, remote_protocol: str) -> float:
    import fsspec
    import zarr

    remote_options = {"asynchronous": True} if remote_protocol == "http" else {}
    fs = fsspec.filesystem("reference", fo=refs, remote_protocol=remote_protocol, remote_options=remote_options,
                           asynchronous=True)
    t0 = time.perf_counter()
    data = zarr.open_array(zarr.storage.FsspecStore(fs, read_only=True, path="t2m"), mode="r", zarr_format=2)[...]
    elapsed = time.perf_counter() - t0
    assert data.shape[1:] == (181, 360)
    return elapsed


def h5py_read(path: Path) -> float:
    import h5py

    t0 = time.perf_counter()
    with h5py.File(path, "r") as f:
        f["t2m"][...]
    return time.perf_counter() - t0


def main() -> None:
    import warnings

    import fsspec
    import kerchunk
    import zarr
    from kerchunk.hdf import SingleHdf5ToZarr

    warnings.filterwarnings("ignore")
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=1024)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--json")
    args = p.parse_args()
    out: dict = {"machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                             "python": platform.python_version(), "zarr": zarr.__version__,
                             "fsspec": fsspec.__version__, "kerchunk": kerchunk.__version__}}
    decoded = args.steps * 181 * 360 * 4
    chunks = args.steps // 4
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o755)  # nginx's workers run as nobody when we are root
        root = Path(tmp) / "www"
        root.mkdir()
        os.chmod(root, 0o755)
        path = root / "t2m.h5"
        make_file(path, args.steps)
        os.chmod(path, 0o644)
        local = SingleHdf5ToZarr(str(path), inline_threshold=0).translate()
        out["file_mb"], out["decoded_mb"], out["chunks"] = path.stat().st_size / 1e6, decoded / 1e6, chunks
        with Nginx(root) as nginx:
            remote = json.loads(json.dumps(local).replace(str(path), f"{nginx.url}/t2m.h5"))
            cases = {"local": (local, "file"), "http (nginx)": (remote, "http")}
            for name, (refs, protocol) in cases.items():
                ours_epoch(refs, 0), peer_read(refs, protocol)  # warm caches and connections
                times: dict[str, list[float]] = {"ours": [], "ours, in order": [], "fsspec + zarr-python": []}
                requests = ordered_requests = 0
                for r in range(args.rounds):
                    seconds, requests = ours_epoch(refs, r + 1)
                    times["ours"].append(seconds)
                    seconds, ordered_requests = ours_epoch(refs, r + 1, shuffle=False)
                    times["ours, in order"].append(seconds)
                    times["fsspec + zarr-python"].append(peer_read(refs, protocol))
                if name == "local":
                    times["h5py (direct)"] = [h5py_read(path) for _ in range(args.rounds)]
                med = {k: statistics.median(v) for k, v in times.items()}
                out[name] = {"seconds": med, "decoded_mb_s": {k: decoded / 1e6 / v for k, v in med.items()},
                             "ours_over_fsspec": statistics.median(
                                 o / s for s, o in zip(times["ours"], times["fsspec + zarr-python"])),
                             "our_requests": requests, "our_requests_in_order": ordered_requests}
    print(f"{chunks} chunks ({out['file_mb']:.0f} MB file, {out['decoded_mb']:.0f} MB decoded)")
    print("| targets | ours MB/s (decoded), shuffled / in order | fsspec + zarr-python MB/s | h5py MB/s |"
          " ours (shuffled) / fsspec | our requests, shuffled / in order |")
    print("|---|---|---|---|---|---|")
    for name in ("local", "http (nginx)"):
        r = out[name]
        mb = r["decoded_mb_s"]
        h5 = mb.get("h5py (direct)")
        print(f"| {name} | {mb['ours']:.0f} / {mb['ours, in order']:.0f} | {mb['fsspec + zarr-python']:.0f} |"
              f" {f'{h5:.0f}' if h5 else '—'} | **{r['ours_over_fsspec']:.2f}** |"
              f" {r['our_requests']} / {r['our_requests_in_order']} |")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
