"""moto's S3 server in its own process on 127.0.0.1 (its GIL is then not the clients'), for
the benchmarks that write to or read from S3 over loopback."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from typing import Iterator


@contextlib.contextmanager
def moto_server(buckets: tuple[str, ...] = ()) -> Iterator[str]:
    """Yields the endpoint URL once the server answers, with ``buckets`` created (keys
    admin/admin); stops the server on exit."""
    import boto3

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        endpoint = f"http://127.0.0.1:{port}"
        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="admin",
                          aws_secret_access_key="admin")
        for bucket in buckets:
            s3.create_bucket(Bucket=bucket)
        yield endpoint
    finally:
        server.terminate()
        server.wait()
