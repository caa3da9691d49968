"""planfetch's walkthrough, end to end, against an S3 server on loopback.

Starts moto (an S3 implementation, signature checks on) on 127.0.0.1, uploads (to it, each
run) a few thousand small JPEG and PNG images written by Pillow with a CSV index naming
them, then follows the product description's steps: load the index packed, configure a
SharedDiskCache, an S3PathDataset, a stratified plan, build the prefetching DataLoader and
run two epochs with a short simulated training step. Every image a batch holds is checked
against the one uploaded; the cache's counters show each object downloaded once per
residency and the window pruned behind the loop. The server stops when the demo ends.

    .venv/bin/python examples/planfetch_s3_demo.py [--images 1500] [--workers 2]
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

import planfetch as pf

CLASSES = 10
BUCKET = "demo-images"


def picture(i: int) -> tuple[bytes, np.ndarray]:
    """Image i encoded (PNG for even i, JPEG for odd) and what PIL decodes it to."""
    from PIL import Image

    rng = np.random.default_rng(i)
    pixels = rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG" if i % 2 == 0 else "JPEG", quality=90)
    data = out.getvalue()
    with Image.open(io.BytesIO(data)) as im:
        return data, np.asarray(im.convert("RGB"))


def start_moto() -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return server, f"http://127.0.0.1:{port}"
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                raise RuntimeError("moto's S3 server did not start") from None
            time.sleep(0.1)


def upload(endpoint: str, n: int, index: Path) -> dict[str, bytes]:
    import boto3

    s3 = boto3.client("s3", endpoint_url=endpoint)
    s3.create_bucket(Bucket=BUCKET)
    keys = [f"train/class_{i % CLASSES}/img_{i:06d}.{'png' if i % 2 == 0 else 'jpg'}" for i in range(n)]
    digests: dict[str, bytes] = {}

    def one(i: int) -> None:
        data, pixels = picture(i)
        s3.put_object(Bucket=BUCKET, Key=keys[i], Body=data)
        digests[f"s3://{BUCKET}/{keys[i]}"] = pixels.tobytes()

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(one, range(n)))
    with open(index, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["s3_path", "class_id"])
        for i, key in enumerate(keys):
            w.writerow([f"s3://{BUCKET}/{key}", i % CLASSES])
    return digests


def image_loader(path: str) -> np.ndarray:
    from PIL import Image

    with Image.open(path) as im:
        return np.array(im.convert("RGB"))  # a writable copy: torch wraps it


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--images", type=int, default=1500)
    p.add_argument("--batch-size", type=int, default=50)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--step-ms", type=float, default=5.0, help="the simulated training step")
    args = p.parse_args()

    # Credentials and endpoint as a botocore user sets them; both planfetch and boto3 read them.
    os.environ.update(AWS_ACCESS_KEY_ID="demo", AWS_SECRET_ACCESS_KEY="demo-secret", AWS_REGION="us-east-1")
    server, endpoint = start_moto()
    os.environ["AWS_ENDPOINT_URL_S3"] = endpoint
    try:
        with tempfile.TemporaryDirectory(prefix="planfetch-demo-") as tmp:
            index = Path(tmp) / "train.csv"
            print(f"S3 (moto) on {endpoint}: uploading {args.images} images ...")
            expected = upload(endpoint, args.images, index)

            # 1) the index, packed: the bucket prefix once, the suffixes in native memory
            uris, labels = pf.load_index_csv(str(index), s3_uri_col="s3_path", class_col="class_id", pack_uris=True)
            # 2) the cache (here a temporary directory; on a training node, the NVMe)
            cache = pf.SharedDiskCache(Path(tmp) / "s3cache", max_bytes=1 << 30, download_threads=32,
                                       min_age_seconds_before_delete=0.0)
            try:
                run(args, uris, labels, cache, expected)
            finally:
                cache.close()  # before the directory goes: no download is left writing into it
    finally:
        server.terminate()
        server.wait()
    print("done: the S3 server is stopped")
    return 0


def run(args, uris, labels, cache, expected: dict[str, bytes]) -> None:
    """The product description's steps 3 to 6."""
    # 3) the dataset decodes; the cache fetches
    ds = pf.S3PathDataset(uris, labels, cache=cache, image_loader=image_loader)
    # 4) a stratified plan: every batch draws the classes evenly
    plan = pf.StreamingStratifiedBatchPlanProvider(np.asarray(labels), batch_size=args.batch_size,
                                                   epoch_samples=args.images, seed=123)
    # 5) the prefetching DataLoader
    loader, controller = pf.build_prefetching_dataloader(
        dataset=ds, s3_uris=uris, plan_provider=plan, cache=cache, num_workers=args.workers,
        batches_ahead=20, batches_back=4, prune_every=5, prune_mode="window",
        prune_backend="scan" if args.workers else "meta")
    print(f"{len(uris)} URIs packed in {uris.memory_bytes} bytes; {len(loader)} batches of {args.batch_size}"
          f" per epoch, {args.workers} DataLoader workers")
    # 6) the training loop
    for epoch in range(args.epochs):
        controller.set_epoch(epoch)
        t0, seen = time.perf_counter(), 0
        for images, y in loader:
            batch = controller.sampler.plan[seen // args.batch_size]
            for row, i in enumerate(batch):
                if images[row].numpy().tobytes() != expected[uris[int(i)]]:
                    raise SystemExit(f"epoch {epoch}: image {uris[int(i)]} differs from the one uploaded")
            seen += len(y)
            time.sleep(args.step_ms / 1000)
        s, w = cache.stats(), controller.coordinator.stats()
        print(f"epoch {epoch}: {seen} images exact in {time.perf_counter() - t0:.2f} s; prefetch:"
              f" {s['downloads']} downloads so far ({s['bytes_downloaded'] / 1e6:.1f} MB),"
              f" {s['failures']} failures, {w['pruned_files']} files pruned behind the window")


if __name__ == "__main__":
    sys.exit(main())
