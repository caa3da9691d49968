"""planfetch's downloads against the peers, and a prefetching DataLoader epoch against the
same epoch over local files. One run, this machine, everything on loopback:

* HTTP (nginx): N objects of ~200 KB downloaded into an empty directory -- SharedDiskCache
  (native, ``download_threads``) vs obstore's HTTPStore (a Rust async client: the class of
  the seed's Rust backend) with the same concurrency, both writing each object to a file;
* S3: SharedDiskCache over s3:// vs boto3 ``get_object`` on a 64-thread ThreadPoolExecutor
  (the seed's Python backend), both signing SigV4 path-style requests, against two servers:
  nginx serving the same files under a bucket path (a server fast enough that the clients
  are what is measured; it ignores the signatures, which the tests check against moto) and
  moto itself in its own process (slow Python, so fewer objects: the server bounds both);
* a DataLoader epoch (4 workers, a simulated training step per batch) over S3PathDataset
  with prefetch from nginx into a cold cache, vs the same epoch over the files already on
  local disk, at two step lengths: one whose appetite (bytes per second) is below the
  download throughput measured above, and one above it, where no prefetch can keep up.

    .venv/bin/python bench/planfetch_bench.py [--objects 10000] [--s3-objects 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from http_bench import Nginx  # noqa: E402

import planfetch as pf  # noqa: E402


def make_objects(root: Path, n: int, size: int) -> list[str]:
    rng = np.random.default_rng(0)
    keys = []
    for i in range(n):
        key = f"objs/c{i % 100:02d}/img_{i:06d}.bin"
        path = root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(rng.integers(0, 256, size + (i % 97) * 64, dtype=np.uint8).tobytes())
        keys.append(key)
    return keys


def wait_idle(cache: pf.SharedDiskCache) -> None:
    while True:
        s = cache.stats()
        if s["in_flight"] == 0 and s["queued"] == 0:
            return
        time.sleep(0.002)


def ours(uris: list[str], cache_dir: Path, threads: int, **options) -> float:
    shutil.rmtree(cache_dir, ignore_errors=True)
    cache = pf.SharedDiskCache(cache_dir, download_threads=threads, **options)
    cache.register_uris(uris[:1])
    t0 = time.perf_counter()
    cache.prefetch(uris)
    wait_idle(cache)
    assert cache.stats()["failures"] == 0 and cache.stats()["downloads"] == len(uris), cache.stats()
    for u in uris[:: max(1, len(uris) // 50)]:  # they are really there
        assert os.path.getsize(cache.local_path(u)) > 0
    return time.perf_counter() - t0


def write_atomically(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def obstore_http(url: str, keys: list[str], out: Path, concurrency: int) -> float:
    import obstore as obs
    from obstore.store import HTTPStore

    shutil.rmtree(out, ignore_errors=True)
    store = HTTPStore.from_url(url, client_options={"allow_http": True})

    async def run() -> None:
        sem = asyncio.Semaphore(concurrency)

        async def one(key: str) -> None:
            async with sem:
                data = await (await obs.get_async(store, key)).bytes_async()
                write_atomically(out / key, bytes(data))

        await asyncio.gather(*(one(k) for k in keys))

    t0 = time.perf_counter()
    asyncio.run(run())
    return time.perf_counter() - t0


def boto3_s3(endpoint: str, bucket: str, keys: list[str], out: Path, threads: int = 64) -> float:
    """The seed's Python backend: one client, get_object on a thread pool, temp file + rename."""
    import boto3
    from botocore.config import Config

    shutil.rmtree(out, ignore_errors=True)
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="admin",
                          aws_secret_access_key="admin", config=Config(max_pool_connections=threads))
    t0 = time.perf_counter()

    def one(key: str) -> None:
        write_atomically(out / key, client.get_object(Bucket=bucket, Key=key)["Body"].read())

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, keys))
    return time.perf_counter() - t0


def read_all(path: str) -> int:
    with open(path, "rb") as f:
        return len(f.read())


def loader_epoch(uris, cache_dir: Path, step_s: float, batch_size: int, workers: int, prefetch: bool) -> float:
    import torch  # noqa: F401 - the DataLoader

    cache = pf.SharedDiskCache(cache_dir, download_threads=64, min_age_seconds_before_delete=0)
    ds = pf.S3PathDataset(uris, np.zeros(len(uris), dtype=np.int64), cache=cache, image_loader=read_all)
    provider = pf.ShuffleOncePerEpochPlanProvider(len(uris), batch_size, seed=1)
    loader, controller = pf.build_prefetching_dataloader(
        dataset=ds, s3_uris=uris, plan_provider=provider, cache=cache, num_workers=workers,
        batches_ahead=200 if prefetch else 0, batches_back=4, prune_every=0, persistent_workers=False)
    controller.set_epoch(0)
    t0 = time.perf_counter()
    for _ in loader:
        time.sleep(step_s)  # the training step the prefetch hides the downloads behind
    return time.perf_counter() - t0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--objects", type=int, default=10000)
    p.add_argument("--s3-objects", type=int, default=1000)
    p.add_argument("--size", type=int, default=200_000)
    p.add_argument("--threads", type=int, default=64)
    p.add_argument("--step-ms", type=float, nargs="+", default=[80.0, 40.0])
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json")
    args = p.parse_args()
    result: dict = {"machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                                "python": platform.python_version()}}
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o755)  # nginx's workers run as nobody when we are root
        root = Path(tmp) / "www"
        keys = make_objects(root, args.objects, args.size)
        total_mb = sum((root / k).stat().st_size for k in keys) / 1e6
        with Nginx(root) as nginx:
            uris = [f"{nginx.url}/{k}" for k in keys]
            rows = []
            for _ in range(args.rounds):
                rows.append({"ours": ours(uris, Path(tmp) / "c-ours", args.threads),
                             "obstore": obstore_http(nginx.url, keys, Path(tmp) / "c-obstore", args.threads)})
            med = {k: float(np.median([r[k] for r in rows])) for k in ("ours", "obstore")}
            result["http"] = {"objects": args.objects, "mb": total_mb, "seconds": med,
                              "mb_s": {k: total_mb / v for k, v in med.items()},
                              "ours_over_obstore": med["obstore"] / med["ours"]}
            result["s3_nginx"] = s3_nginx_round(nginx.url, keys, Path(tmp), args)
            # A DataLoader epoch: prefetching from nginx into a cold cache, vs files on disk.
            n_epoch = min(args.objects, 4000)
            local_uris = [f"file://{root / k}" for k in keys[:n_epoch]]
            epoch_mb = sum((root / k).stat().st_size for k in keys[:n_epoch]) / 1e6
            result["epoch"] = []
            for step_ms in args.step_ms:
                shutil.rmtree(Path(tmp) / "c-epoch", ignore_errors=True)
                cold = loader_epoch(uris[:n_epoch], Path(tmp) / "c-epoch", step_ms / 1000, args.batch_size, 4, True)
                local = loader_epoch(local_uris, Path(tmp) / "c-local", step_ms / 1000, args.batch_size, 4, False)
                appetite = args.batch_size * epoch_mb / n_epoch / (step_ms / 1000)
                result["epoch"].append({"objects": n_epoch, "step_ms": step_ms, "appetite_mb_s": appetite,
                                        "prefetch_s": cold, "local_s": local, "prefetch_over_local": local / cold})
        result["s3"] = s3_round(root, keys[: args.s3_objects], Path(tmp), args)
    print(json.dumps(result, indent=2))
    h, n, s = result["http"], result["s3_nginx"], result["s3"]
    print("\n| what | ours | peer | ours / peer |\n|---|---|---|---|")
    print(f"| {h['objects']} objects over HTTP (nginx), MB/s | {h['mb_s']['ours']:.0f} | obstore {h['mb_s']['obstore']:.0f}"
          f" | **{h['ours_over_obstore']:.2f}** |")
    print(f"| {n['objects']} objects over S3 (nginx, path-style), MB/s | {n['mb_s']['ours']:.0f} | boto3 x64"
          f" {n['mb_s']['boto3']:.0f} | **{n['ours_over_boto3']:.2f}** |")
    print(f"| {s['objects']} objects over S3 (moto), MB/s | {s['mb_s']['ours']:.0f} | boto3 x64 {s['mb_s']['boto3']:.0f}"
          f" | **{s['ours_over_boto3']:.2f}** |")
    for e in result["epoch"]:
        print(f"| DataLoader epoch, {e['objects']} objects, {e['step_ms']:.0f} ms step ({e['appetite_mb_s']:.0f} MB/s), s"
              f" | {e['prefetch_s']:.2f} (prefetch, cold) | {e['local_s']:.2f} (local files) |"
              f" **{e['prefetch_over_local']:.2f}** |")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


S3_ENV = {"AWS_ACCESS_KEY_ID": "admin", "AWS_SECRET_ACCESS_KEY": "admin", "AWS_REGION": "us-east-1"}


def s3_compare(endpoint: str, bucket: str, keys: list[str], mb: float, tmp: Path, args) -> dict:
    os.environ.update(S3_ENV, AWS_ENDPOINT_URL_S3=endpoint)
    uris = [f"s3://{bucket}/{k}" for k in keys]
    t_ours = float(np.median([ours(uris, tmp / "s3-ours", args.threads) for _ in range(args.rounds)]))
    t_boto = float(np.median([boto3_s3(endpoint, bucket, keys, tmp / "s3-boto3") for _ in range(args.rounds)]))
    return {"objects": len(keys), "mb": mb, "seconds": {"ours": t_ours, "boto3": t_boto},
            "mb_s": {"ours": mb / t_ours, "boto3": mb / t_boto}, "ours_over_boto3": t_boto / t_ours}


def s3_nginx_round(url: str, keys: list[str], tmp: Path, args) -> dict:
    """Path-style GETs land on /<bucket>/<key>: a bucket directory that links back to the root."""
    root = tmp / "www"
    (root / "bench").symlink_to(root)
    mb = sum((root / k).stat().st_size for k in keys) / 1e6
    return s3_compare(url, "bench", keys, mb, tmp, args)


def s3_round(root: Path, keys: list[str], tmp: Path, args) -> dict:
    """moto in its own process, so its GIL is not the clients'."""
    import boto3

    from moto_server import moto_server

    with moto_server(("moto",)) as endpoint:
        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="admin",
                          aws_secret_access_key="admin")
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda k: s3.put_object(Bucket="moto", Key=k, Body=(root / k).read_bytes()), keys))
        mb = sum((root / k).stat().st_size for k in keys) / 1e6
        return s3_compare(endpoint, "moto", keys, mb, tmp, args)


if __name__ == "__main__":
    sys.exit(main())
