"""Objects the planfetch tests read: real JPEG and PNG images written by Pillow, uploaded to
a bucket of the session's moto S3 server, and the CSV index naming them."""

from __future__ import annotations

import csv
import io
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

IMAGE_BUCKET = "images"
N_IMAGES = 96
N_CLASSES = 4


def image_bytes(i: int) -> tuple[bytes, str]:
    """Image i: a small RGB picture, PNG (lossless) for even i, JPEG for odd i."""
    from PIL import Image

    rng = np.random.default_rng(i)
    pixels = rng.integers(0, 256, (24 + i % 5, 32, 3), dtype=np.uint8)
    out = io.BytesIO()
    fmt = "PNG" if i % 2 == 0 else "JPEG"
    Image.fromarray(pixels).save(out, format=fmt, quality=90)
    return out.getvalue(), fmt.lower()


def key_of(i: int) -> str:
    return f"train/class_{i % N_CLASSES}/img_{i:05d}.{'png' if i % 2 == 0 else 'jpeg'}"


def upload_images(moto, tmp: Path) -> Path:
    """Uploads the images (once per session) and writes the index; returns its path."""
    import boto3

    s3 = boto3.client("s3", endpoint_url=moto.endpoint, region_name="us-east-1", aws_access_key_id="admin",
                      aws_secret_access_key="admin")
    existing = {b["Name"] for b in s3.list_buckets()["Buckets"]}
    if IMAGE_BUCKET not in existing:
        s3.create_bucket(Bucket=IMAGE_BUCKET)
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda i: s3.put_object(Bucket=IMAGE_BUCKET, Key=key_of(i), Body=image_bytes(i)[0]),
                          range(N_IMAGES)))
    index = tmp / "train.csv"
    with open(index, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "s3_path", "class_id"])
        for i in range(N_IMAGES):
            w.writerow([i, f"s3://{IMAGE_BUCKET}/{key_of(i)}", i % N_CLASSES])
    return index


def decoded(i: int) -> np.ndarray:
    """What PIL decodes image i to (RGB)."""
    from PIL import Image

    data, _ = image_bytes(i)
    with Image.open(io.BytesIO(data)) as im:
        return np.asarray(im.convert("RGB"))


def moto_env(monkeypatch, moto) -> None:
    """Credentials and the endpoint the way a user's environment would carry them."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", moto.access_key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", moto.secret_access_key)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", moto.endpoint)


@pytest.fixture
def images(moto, tmp_path, monkeypatch):
    """(index path, FaultProxy): the images in moto behind a fault proxy that counts requests,
    with the environment pointing S3 clients at the proxy."""
    from servers import FaultProxy

    index = upload_images(moto, tmp_path)
    with FaultProxy(moto.endpoint) as proxy:
        moto_env(monkeypatch, moto)
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", proxy.url)
        yield index, proxy
