"""The native HTTPS store speaks HTTP/2 where the server offers it, and multiplexes.

nginx (Debian's nginx-light; scripts/setup.sh installs it) serves a zarr-python 3 store on
127.0.0.1 over TLS with a test CA: one port offers h2 by ALPN, a second only HTTP/1.1 (the
control); under /slow/ both trickle responses so reads overlap. nginx's access log records
the protocol and connection serial of every request."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr.codecs import ZstdCodec

import insitubatch
from insitubatch import InSituDataset, open_geometries, split_by_chunk

SHAPE, CHUNKS = (64, 8, 16), (4, 8, 16)
N_CHUNKS = SHAPE[0] // CHUNKS[0]

NGINX_CONF = """\
daemon off;
master_process on;
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
{user}
events {{ worker_connections 256; }}
http {{
    log_format probe '$connection $server_port $server_protocol $request_method $request_uri $status';
    access_log {tmp}/access.log probe;
    map $uri $chunk_rate {{ ~^/slow/.*/c/ 1k; default 0; }}  # 0: no limit (metadata)
    default_type application/octet-stream;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    ssl_certificate {tmp}/cert.pem;
    ssl_certificate_key {tmp}/key.pem;
    server {{
        listen 127.0.0.1:{h2_port} ssl http2;
        root {root};
        location /slow/ {{ alias {root}/; limit_rate $chunk_rate; }}
    }}
    server {{
        listen 127.0.0.1:{h1_port} ssl;
        root {root};
        location /slow/ {{ alias {root}/; limit_rate $chunk_rate; }}
    }}
}}
"""


def nginx_binary() -> str:
    found = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
    if found is None:
        pytest.skip("nginx is not installed (scripts/setup.sh installs nginx-light)")
    info = subprocess.run([found, "-V"], capture_output=True, text=True)
    if "--with-http_v2_module" not in info.stderr + info.stdout:
        pytest.skip(f"{found} was built without http_v2_module")
    if shutil.which("openssl") is None:
        pytest.skip("openssl CLI not available to make a test certificate")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(proc: subprocess.Popen, ports, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    for port in ports:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"nginx exited with {proc.returncode}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"nginx did not listen on 127.0.0.1:{port}") from None
                time.sleep(0.05)


def stop(proc: subprocess.Popen) -> None:
    """TERM (fast shutdown) to the master's process group, KILL if it lingers."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


class Nginx:
    def __init__(self, tmp: Path, proc: subprocess.Popen, h2_port: int, h1_port: int) -> None:
        self.tmp, self.proc = tmp, proc
        self.h2_url, self.h1_url = f"https://127.0.0.1:{h2_port}", f"https://127.0.0.1:{h1_port}"
        self.h2_port, self.h1_port = h2_port, h1_port
        self.cert = tmp / "cert.pem"

    def log_lines(self) -> list[str]:
        return (self.tmp / "access.log").read_text().splitlines()


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A consolidated v3 group x.zarr with one zstd float32 array t; returns (dir, values)."""
    root = tmp_path_factory.mktemp("h2data") / "x.zarr"
    store = zarr.storage.LocalStore(root)
    group = zarr.open_group(store, mode="w", zarr_format=3)
    t = group.create_array("t", shape=SHAPE, chunks=CHUNKS, dtype="float32",
                           compressors=[ZstdCodec(level=3)], fill_value=0.0)
    values = np.random.default_rng(3).normal(0, 50, size=SHAPE).astype("float32")
    t[...] = values
    with warnings.catch_warnings():  # "consolidated metadata is not in the v3 spec"
        warnings.simplefilter("ignore")
        zarr.consolidate_metadata(store)
    return root, values


@pytest.fixture(scope="module")
def nginx(source, tmp_path_factory):
    binary = nginx_binary()
    tmp = tmp_path_factory.mktemp("nginx")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(tmp / "key.pem"), "-out", str(tmp / "cert.pem")],
                   check=True, capture_output=True)
    # As root, workers would drop to nobody, who cannot enter pytest's 0700 temp dirs.
    user = "user root root;" if os.geteuid() == 0 else ""
    proc = None
    for _ in range(5):  # another process may take a free port before nginx binds it
        h2_port, h1_port = free_port(), free_port()
        (tmp / "nginx.conf").write_text(NGINX_CONF.format(
            tmp=tmp, user=user, h2_port=h2_port, h1_port=h1_port, root=source[0].parent))
        proc = subprocess.Popen([binary, "-p", str(tmp), "-c", str(tmp / "nginx.conf"),
                                 "-e", str(tmp / "error.log")],
                                start_new_session=True, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        try:
            wait_listening(proc, (h2_port, h1_port))
            break
        except RuntimeError:
            stop(proc)
            proc = None
    if proc is None:
        log = tmp / "error.log"
        pytest.fail("nginx did not start: " + (log.read_text()[-2000:] if log.exists() else "no log"))
    try:
        yield Nginx(tmp, proc, h2_port, h1_port)
    finally:
        stop(proc)
        assert proc.returncode is not None, "nginx is still running"


def parse(lines: list[str], port: int) -> list[dict]:
    rows = []
    for line in lines:
        conn, server_port, proto, method, uri, status = line.split(" ")
        if int(server_port) == port:
            rows.append(dict(conn=int(conn), proto=proto, method=method, uri=uri, status=int(status)))
    return rows


def run_epoch(url: str, cert: Path, values: np.ndarray, **options) -> None:
    """open_geometries + one train epoch over the whole array; every batch exact."""
    store = insitubatch.store(url + "/x.zarr", ca_file=str(cert), **options)
    geoms = open_geometries(store)
    assert geoms["t"].chunks == CHUNKS
    manifest = split_by_chunk(geoms["t"], fractions=(1, 0, 0))
    ds = InSituDataset(store, manifest, geometries=geoms, batch_size=8, block_chunks=N_CHUNKS)
    try:
        seen = []
        for batch in ds.train:
            np.testing.assert_array_equal(batch.arrays["t"], values[batch.sample_indices], strict=True)
            seen.extend(batch.sample_indices.tolist())
        assert sorted(seen) == list(range(SHAPE[0]))
    finally:
        ds.close()
    assert store.transport_stats()["retries"] == 0


def epoch_log(nginx: Nginx, url: str, port: int, values, **options) -> list[dict]:
    """The access-log rows one epoch (through ``url``) added."""
    before = len(nginx.log_lines())
    run_epoch(url, nginx.cert, values, **options)
    # nginx logs a request just after sending its last byte: give the last line a moment.
    deadline = time.monotonic() + 5
    while True:
        rows = parse(nginx.log_lines()[before:], port)
        if sum("/t/c/" in r["uri"] for r in rows) >= N_CHUNKS or time.monotonic() > deadline:
            return rows
        time.sleep(0.02)


@pytest.mark.timeout(120)
def test_epoch_is_exact_and_every_request_is_http2(source, nginx):
    rows = epoch_log(nginx, nginx.h2_url, nginx.h2_port, source[1])
    assert rows, "nginx logged no requests"
    assert {r["proto"] for r in rows} == {"HTTP/2.0"}, rows
    assert all(r["status"] in (200, 206) for r in rows), rows
    chunks = [r["uri"] for r in rows if r["uri"].startswith("/x.zarr/t/c/")]
    assert sorted(chunks) == sorted(f"/x.zarr/t/c/{i}/0/0" for i in range(N_CHUNKS))  # each once
    meta = [r["uri"] for r in rows if r["uri"] not in chunks]
    assert meta and all(u.endswith("zarr.json") for u in meta), meta


@pytest.mark.timeout(120)
def test_concurrent_reads_multiplex_on_one_connection_per_io_thread(source, nginx):
    # /slow/ trickles each chunk at 1 KiB/s (~1 s per ~2 KB chunk), so a block's chunk
    # reads are all in flight together. With no per-host connection cap, only HTTP/2
    # multiplexing (CURLPIPE_MULTIPLEX + PIPEWAIT) keeps them on one socket per IO thread.
    for io_threads in (1, 2):
        rows = epoch_log(nginx, nginx.h2_url + "/slow", nginx.h2_port, source[1], io_threads=io_threads)
        conns = Counter(r["conn"] for r in rows)
        assert {r["proto"] for r in rows} == {"HTTP/2.0"}
        assert len(conns) <= io_threads < len(rows), (io_threads, conns)
    # Control: the same epoch over HTTP/1.1 needs a socket per concurrent read, so the one
    # connection above carried concurrent streams (not keep-alive reuse of an idle socket).
    rows = epoch_log(nginx, nginx.h1_url + "/slow", nginx.h1_port, source[1], io_threads=1)
    conns = Counter(r["conn"] for r in rows)
    assert {r["proto"] for r in rows} == {"HTTP/1.1"}
    assert len(conns) >= N_CHUNKS // 2, conns
