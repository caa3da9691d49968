"""What revalidate="open" costs a new process: a persisted cache of --chunks stored chunks
(one per cached entry) is opened with revalidate="never" and with "open", side by side, on
a local store (one stat per chunk file) and on moto's S3 on loopback (ListObjectsV2 pages of
1000 ETags); and, as a peer in each round, the same listing made by boto3's paginator alone.

Each open is a fresh process; the time is the dataset's construction (the cache's log read,
its entries checked, the engine started), rounds alternate the modes, medians. The engine's
own figure for the listing and comparison (cache_counters()["revalidation"]) is reported too.

    .venv/bin/python bench/revalidate_bench.py [--chunks 100000] [--rounds 3] [--no-s3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

BUCKET = "revalidate"
FIELD = 8  # float32 values per chunk: the cost measured is per chunk, not per byte

WORKER = r"""
import json, sys, time
import insitubatch
from insitubatch import InSituDataset, open_geometries, split_by_chunk
url, cache, mode, action, endpoint = sys.argv[1:6]
options = {} if not endpoint else dict(endpoint=endpoint, access_key_id="admin", secret_access_key="admin")
store = insitubatch.store(url, **options) if endpoint else insitubatch.local_store(url)
geoms = open_geometries(store, ["v"])
manifest = split_by_chunk(geoms["v"], fractions=(1.0, 0.0, 0.0))
t0 = time.perf_counter()
ds = InSituDataset(store, manifest, geoms, batch_size=1000, block_chunks=1000, shuffle=False, max_inflight=64,
                   cache_dir=cache, persist=True, revalidate=mode)
open_s = time.perf_counter() - t0
out = {"mode": mode, "open_s": open_s}
report = ds._engine.cache_counters().get("revalidation", [])
if report:
    out.update(checked=report[0]["checked"], checked_s=report[0]["seconds"], changed=report[0]["changed"],
               entries=report[0]["entries"])
if action == "epoch":
    t0 = time.perf_counter()
    n = sum(len(b.sample_indices) for b in ds.train)
    out.update(samples=n, epoch_s=time.perf_counter() - t0, revived=ds.last_pass.revived,
               misses=ds.last_pass.cache_misses)
ds.close()
print(json.dumps(out))
"""


def make_local(root: Path, chunks: int) -> Path:
    """An uncompressed zarr v3 array of `chunks` one-sample chunks, with consolidated
    metadata; zarr-python writes the metadata, the chunk files are written directly
    (zarr-python's own writes would take minutes for 10^5 of them)."""
    import numpy as np
    import zarr

    path = root / "store.zarr"
    zarr.create_array(zarr.storage.LocalStore(path), name="v", shape=(chunks, FIELD), chunks=(1, FIELD),
                      dtype="<f4", compressors=None, fill_value=0)
    # Consolidated: the dataset's open reads one metadata document instead of listing the
    # store (which an unconsolidated store costs with or without revalidation).
    zarr.consolidate_metadata(zarr.storage.LocalStore(path))
    values = np.arange(chunks * FIELD, dtype="<f4").reshape(chunks, FIELD)
    for i in range(chunks):
        d = path / "v" / "c" / str(i)
        d.mkdir(parents=True, exist_ok=True)
        (d / "0").write_bytes(values[i].tobytes())
    return path


def upload(endpoint: str, local: Path, prefix: str) -> None:
    import boto3

    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="admin",
                      aws_secret_access_key="admin")
    files = [p for p in local.rglob("*") if p.is_file()]
    with ThreadPoolExecutor(32) as pool:
        list(pool.map(lambda p: s3.put_object(Bucket=BUCKET, Key=f"{prefix}/{p.relative_to(local).as_posix()}",
                                              Body=p.read_bytes()), files))


def boto3_listing_s(endpoint: str, prefix: str) -> tuple[float, int]:
    import boto3

    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="admin",
                      aws_secret_access_key="admin")
    t0 = time.perf_counter()
    n = 0
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=f"{prefix}/v/"):
        n += sum(1 for o in page.get("Contents", ()) if o["ETag"])
    return time.perf_counter() - t0, n


def run(url: str, cache: Path, mode: str, action: str, endpoint: str = "") -> dict:
    proc = subprocess.run([sys.executable, "-c", WORKER, url, str(cache), mode, action, endpoint],
                          capture_output=True, text=True, timeout=3600, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure(label: str, url: str, cache: Path, rounds: int, chunks: int, endpoint: str = "") -> dict:
    warm = run(url, cache, "never", "epoch", endpoint)  # persists every chunk
    assert warm["misses"] == chunks, warm
    rows: dict[str, list[dict]] = {"never": [], "open": []}
    peer: list[float] = []
    for _ in range(rounds):  # alternating, so drift hits every mode alike
        for mode in rows:
            rows[mode].append(run(url, cache, mode, "open", endpoint))
        if endpoint:
            seconds, n = boto3_listing_s(endpoint, "store.zarr")
            assert n == chunks + 1  # + v/zarr.json
            peer.append(seconds)
    assert all(r["changed"] == 0 and r["checked"] == chunks for r in rows["open"]), rows["open"]
    med = {m: statistics.median(r["open_s"] for r in rs) for m, rs in rows.items()}
    checked = statistics.median(r["checked_s"] for r in rows["open"])
    print(f"{label}: open, revalidate='never' {med['never']:.3f} s; 'open' {med['open']:.3f} s"
          f" (+{med['open'] - med['never']:.3f} s); the engine's check {checked:.3f} s"
          f" = {1e6 * checked / chunks:.1f} us per chunk")
    out = {"label": label, "never_s": med["never"], "open_s": med["open"], "checked_s": checked, "rows": rows}
    if peer:
        out["boto3_listing_s"] = statistics.median(peer)
        print(f"  peer: boto3's list_objects_v2 paginator over the same prefix {out['boto3_listing_s']:.3f} s"
              f" ({chunks // 1000} pages); engine / boto3 = {checked / out['boto3_listing_s']:.2f}")
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--chunks", type=int, default=100_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--no-s3", action="store_true")
    p.add_argument("--json")
    args = p.parse_args()
    machine = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
               "python": platform.python_version()}
    print(f"machine: {machine}; {args.chunks} chunks of {FIELD} float32, one cached entry each;"
          f" {args.rounds} alternating rounds, medians")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        local = make_local(root, args.chunks)
        results.append(measure("local store", str(local), root / "cache-local", args.rounds, args.chunks))
        if not args.no_s3:
            from moto_server import moto_server

            with moto_server((BUCKET,)) as endpoint:
                upload(endpoint, local, "store.zarr")
                url = f"s3://{BUCKET}/store.zarr"
                results.append(measure("moto S3 (loopback)", url, root / "cache-s3", args.rounds, args.chunks,
                                       endpoint))
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine, "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
