"""HTTP: raw GET vs obstore, the loader over HTTP, and the latency curve (issue 4, item 7).

Against nginx (Debian's, a C server) on 127.0.0.1 serving a local 16-samples-per-chunk zstd
store, all in one run:

* raw GET   -- every stored chunk read once as a whole object, at the same concurrency, by our
               libcurl store (``_ext.read_throughput``, no decode) and by obstore (asyncio tasks
               under a semaphore of that size, bytes fully received); median of repeats, the two
               clients alternating so both see the same interference;
* loader    -- shuffled epochs of ``InSituDataset`` over ``store("http://...")`` with the pool
               cleared before each (every chunk fetched and decoded), against the raw-GET ceiling
               at the engine's ``max_inflight``, and the same loader over the local file store;
* latency   -- the loader through a relay that delays every request by ``--latency-ms``, for
               each ``max_inflight``: throughput should come back by raising it alone.

Also checks that the first epoch's batches over HTTP equal those over the file store.

    scripts/bench_http_setup.sh          # nginx from Debian, obstore into .venv (idempotent)
    .venv/bin/python bench/http_bench.py [--quick] [--runs 3]

Writes bench/results/http.json and prints markdown tables.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from engine_bench import (DATA, RESULTS, chunk_files, cold_pool_epoch, machine, make_store,  # noqa: E402
                          warm_page_cache)

ROOT = HERE.parent


# -- nginx ----------------------------------------------------------------------------------

def nginx_binary() -> str:
    found = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
    if found is None:
        subprocess.run([str(ROOT / "scripts" / "bench_http_setup.sh")], check=True)
        found = shutil.which("nginx") or "/usr/sbin/nginx"
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port: int, proc: subprocess.Popen, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on 127.0.0.1:{port} within {timeout} s")


def stop(proc: subprocess.Popen | None) -> None:
    """Ends a child we started (its own session): TERM, then KILL if it lingers."""
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=5)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=5)


NGINX_CONF = """\
daemon off;
master_process on;
worker_processes auto;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
{user}
events {{ worker_connections 4096; }}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    keepalive_timeout 60s;
    keepalive_requests 1000000;
    default_type application/octet-stream;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    server {{
        listen 127.0.0.1:{port} reuseport backlog=4096;
        root {root};
        location / {{ }}
    }}
}}
"""


class Nginx:
    """nginx serving ``root`` on 127.0.0.1:<free port>, with its config and temp dirs in a
    temp dir; stopped (and the dir removed) on close."""

    def __init__(self, root: pathlib.Path) -> None:
        self.binary = nginx_binary()
        self.tmp = tempfile.mkdtemp(prefix="insitu-nginx-")
        self.proc: subprocess.Popen | None = None
        # As root the workers drop to nobody; the data must then be world-readable (it is,
        # under the usual umask).
        user = "user nobody nogroup;" if os.geteuid() == 0 else ""
        for _ in range(5):  # another process may take the free port before nginx binds it
            self.port = free_port()
            conf = pathlib.Path(self.tmp) / "nginx.conf"
            conf.write_text(NGINX_CONF.format(tmp=self.tmp, user=user, port=self.port, root=root))
            self.proc = subprocess.Popen([self.binary, "-p", self.tmp, "-c", str(conf), "-e", f"{self.tmp}/error.log"],
                                         start_new_session=True, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL)
            try:
                wait_listening(self.port, self.proc, "nginx")
                break
            except RuntimeError:
                stop(self.proc)
                self.proc = None
        else:
            log = pathlib.Path(self.tmp, "error.log")
            self.close()
            raise RuntimeError("nginx did not start: " + (log.read_text()[-2000:] if log.exists() else "no log"))
        self.url = f"http://127.0.0.1:{self.port}"

    def version(self) -> str:
        out = subprocess.run([self.binary, "-v"], capture_output=True, text=True)
        return (out.stderr or out.stdout).strip().split("/")[-1]

    def close(self) -> None:
        stop(self.proc)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self) -> "Nginx":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# -- a latency relay (its own process, so it never takes the loader's GIL) -------------------

async def _relay(upstream: int, latency: float) -> None:
    async def pump(reader, writer, delay: float) -> None:
        try:
            while data := await reader.read(1 << 20):
                # A GET has no body, so each request ends its read with a blank line: delay the
                # request once, then pass it on. Responses flow back untouched.
                if delay and b"\r\n\r\n" in data:
                    await asyncio.sleep(delay)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def serve(c_reader, c_writer) -> None:
        try:
            u_reader, u_writer = await asyncio.open_connection("127.0.0.1", upstream, limit=1 << 20)
        except OSError:
            c_writer.close()
            return
        for w in (c_writer, u_writer):
            w.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await asyncio.gather(pump(c_reader, u_writer, latency), pump(u_reader, c_writer, 0.0))

    server = await asyncio.start_server(serve, "127.0.0.1", 0, backlog=1024, limit=1 << 20)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


class LatencyRelay:
    """A TCP relay on 127.0.0.1 in front of ``upstream_port`` adding ``latency`` s per request."""

    def __init__(self, upstream_port: int, latency: float) -> None:
        self.proc = subprocess.Popen([sys.executable, __file__, "--relay", str(upstream_port), str(latency)],
                                     stdout=subprocess.PIPE, text=True, start_new_session=True)
        try:
            self.port = int(self.proc.stdout.readline())
            wait_listening(self.port, self.proc, "relay")
        except BaseException:
            stop(self.proc)
            raise
        self.url = f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        stop(self.proc)

    def __enter__(self) -> "LatencyRelay":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# -- raw GET ---------------------------------------------------------------------------------

def ours_read(store, keys: list[str], concurrency: int) -> tuple[float, int]:
    from insitubatch import _ext

    seconds, nbytes = _ext.read_throughput(store, keys, concurrency, 1)
    return seconds[0], nbytes


async def _obstore_read(store, keys: list[str], concurrency: int) -> tuple[float, int]:
    import obstore

    sem = asyncio.Semaphore(concurrency)

    async def one(key: str) -> int:
        async with sem:
            result = await obstore.get_async(store, key)
            return len(await result.bytes_async())

    t0 = time.perf_counter()
    sizes = await asyncio.gather(*(one(k) for k in keys))
    return time.perf_counter() - t0, sum(sizes)


def raw_get(url: str, keys: list[str], concurrencies: list[int], repeats: int, expected: int) -> list[dict]:
    from obstore.store import HTTPStore

    from insitubatch import store

    ours = store(url)
    theirs = HTTPStore.from_url(url, client_options={"allow_http": True})
    loop = asyncio.new_event_loop()
    try:
        ours_read(ours, keys, max(concurrencies))  # connections and page cache warm for both
        loop.run_until_complete(_obstore_read(theirs, keys, max(concurrencies)))
        rows = []
        for c in concurrencies:
            t_ours, t_theirs = [], []
            for _ in range(repeats):  # alternate, so both clients see the same interference
                s, n = ours_read(ours, keys, c)
                assert n == expected, (n, expected)
                t_ours.append(s)
                s, n = loop.run_until_complete(_obstore_read(theirs, keys, c))
                assert n == expected, (n, expected)
                t_theirs.append(s)
            mo, mt = statistics.median(t_ours), statistics.median(t_theirs)
            # The ratio is the median of per-pair ratios: a pair shares the machine's load.
            rows.append({"concurrency": c, "ours_s": t_ours, "obstore_s": t_theirs,
                         "ours_mb_s": expected / mo / 1e6, "obstore_mb_s": expected / mt / 1e6,
                         "ours_over_obstore": statistics.median(b / a for a, b in zip(t_ours, t_theirs))})
            print(json.dumps({k: v for k, v in rows[-1].items() if not isinstance(v, list)}), flush=True)
        return rows
    finally:
        loop.close()


# -- the loader ------------------------------------------------------------------------------

def open_dataset(url_or_path: str, batch_size: int, block_chunks: int, max_inflight: int | None = None):
    from insitubatch import InSituDataset, open_geometries, split_by_chunk, store

    s = store(url_or_path)
    geoms = open_geometries(s, ["t2m"])
    manifest = split_by_chunk(geoms["t2m"], fractions=(1.0, 0.0, 0.0))
    return InSituDataset(s, manifest, geoms, batch_size=batch_size, block_chunks=block_chunks,
                         max_inflight=max_inflight)


def epochs(ds, runs: int, warmup: bool) -> dict:
    """Epochs with the pool cleared before each (every chunk fetched and decoded again)."""
    times, samples, stored = [], 0, 0
    for epoch in range(runs + int(warmup)):
        dt, n = cold_pool_epoch(ds, epoch)
        if warmup and epoch == 0:
            continue
        times.append(dt)
        samples, stored = n, ds.last_pass.bytes_read
        assert ds.last_pass.cache_misses == ds.manifest.n_chunks, "every chunk must be fetched"
    med = statistics.median(times)
    return {"epoch_s": times, "samples": samples, "stored_bytes": stored,
            "samples_s": samples / med, "stored_mb_s": stored / med / 1e6}


def verify(http_url: str, path: str, batch_size: int, block_chunks: int, n_batches: int) -> int:
    """The first epoch's first batches over HTTP equal those over the file store, exactly."""
    a = open_dataset(http_url, batch_size, block_chunks)
    b = open_dataset(path, batch_size, block_chunks)
    checked = 0
    try:
        for x, y in zip(a.train, b.train):
            assert np.array_equal(x.sample_indices, y.sample_indices), "sample order differs"
            assert x.arrays["t2m"].tobytes() == y.arrays["t2m"].tobytes(), "values differ"
            checked += 1
            if checked == n_batches:
                break
    finally:
        a.close()
        b.close()
    assert checked == n_batches, checked
    return checked


# -- main ------------------------------------------------------------------------------------

def consolidate(path: pathlib.Path) -> None:
    """Plain HTTP cannot list, so the root needs consolidated metadata (added in place once;
    the file readers of engine_bench.py are unaffected)."""
    import warnings

    import zarr

    if "consolidated_metadata" in json.loads((path / "zarr.json").read_text()):
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr warns that consolidated metadata is not in the v3 spec
        zarr.consolidate_metadata(zarr.storage.LocalStore(path))


def versions(nginx: Nginx) -> dict:
    import obstore

    m = machine()
    m.update(nginx=nginx.version(), obstore=obstore.__version__)
    return m


def tables(result: dict) -> str:
    out = []
    m = result["machine"]
    out.append(f"machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB; nginx {m['nginx']},"
               f" obstore {m['obstore']}, insitubatch {m['insitubatch']}")
    a = result["args"]
    out.append(f"store: {result['chunks']} chunks of {a['spc']} x {a['field']} float32 ({a.get('codec', 'zstd')}),"
               f" {result['stored_bytes'] / 1e6:.0f} MB stored; medians of {a['get_repeats']} raw GET passes"
               f" (ours / obstore: median of per-pair ratios) and of {a['runs']} epochs")
    out += ["", "| concurrency | ours MB/s | obstore MB/s | ours / obstore |", "|---:|---:|---:|---:|"]
    for r in result["raw_get"]:
        out.append(f"| {r['concurrency']} | {r['ours_mb_s']:.0f} | {r['obstore_mb_s']:.0f} |"
                   f" {r['ours_over_obstore']:.2f} |")
    lo = result["loader"]
    out += ["", f"| loader (batch {a['batch_size']}, block_chunks {a['block_chunks']}) | samples/s |"
                " stored MB/s | / raw GET ceiling | / file loader |", "|---|---:|---:|---:|---:|"]
    ceil = lo["raw_ceiling_mb_s"]
    for name in ("http", "file"):
        r = lo[name]
        out.append(f"| {lo['labels'][name]} | {r['samples_s']:.0f} | {r['stored_mb_s']:.0f} |"
                   f" {r['stored_mb_s'] / ceil:.2f} | {r['samples_s'] / lo['file']['samples_s']:.2f} |")
    out.append(f"| raw GET ceiling (ours, concurrency {lo['max_inflight']}) | | {ceil:.0f} | 1.00 | |")
    la = result.get("latency")
    if la is None:
        out += ["", f"values: first {result['verified_batches']} batches of epoch 0 over HTTP == over the file store: OK"]
        return "\n".join(out)
    out += ["", f"| through the relay, +{la['latency_ms']:g} ms per request | samples/s | stored MB/s |"
                " / no-latency relay |", "|---|---:|---:|---:|"]
    base = la["no_latency"]["samples_s"]
    for r in la["curve"]:
        out.append(f"| max_inflight {r['max_inflight']} | {r['samples_s']:.0f} | {r['stored_mb_s']:.0f} |"
                   f" {r['samples_s'] / base:.2f} |")
    out.append(f"| no latency (relay, max_inflight {la['no_latency']['max_inflight']}) | {base:.0f} |"
               f" {la['no_latency']['stored_mb_s']:.0f} | 1.00 |")
    out.append(f"| no latency (nginx direct, max_inflight {lo['max_inflight']}) | {lo['http']['samples_s']:.0f} |"
               f" {lo['http']['stored_mb_s']:.0f} | {lo['http']['samples_s'] / base:.2f} |")
    out += ["", f"values: first {result['verified_batches']} batches of epoch 0 over HTTP == over the file store: OK"]
    if m["cores"] <= 4:
        out.append(f"note: {m['cores']} cores -- nginx (and the relay) take CPU from decode in the loader"
                   " rows; raw GET does no decode.")
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=2048)
    p.add_argument("--field", default="181x360")
    p.add_argument("--spc", type=int, default=16)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--block-chunks", type=int, default=16)
    p.add_argument("--concurrency", default="1,4,8,16,32")
    p.add_argument("--inflight", default="1,2,4,8,16,32,64")
    p.add_argument("--latency-ms", type=float, default=20.0)
    p.add_argument("--runs", type=int, default=3, help="timed epochs per loader figure (median)")
    p.add_argument("--get-repeats", type=int, default=7, help="raw GET passes per client and concurrency")
    p.add_argument("--codec", choices=("zstd", "none"), default="zstd",
                   help="the store's compressor; 'none' takes decode out, so the loader's IO path alone"
                        " is compared with raw GET")
    p.add_argument("--no-latency", action="store_true", help="skip the latency curve")
    p.add_argument("--quick", action="store_true", help="a tiny run: 256 samples, 2 repeats")
    p.add_argument("--relay", nargs=2, help=argparse.SUPPRESS)  # internal: run the latency relay
    args = p.parse_args()
    if args.relay:
        asyncio.run(_relay(int(args.relay[0]), float(args.relay[1])))
        return
    if args.quick:
        args.samples, args.runs, args.get_repeats = 256, 2, 3
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # so `finally` stops the servers

    field = tuple(int(v) for v in args.field.split("x"))
    name = f"era5_c{args.spc}_{args.samples}_{args.field}{'' if args.codec == 'zstd' else '_raw'}.zarr"
    path = DATA / name
    make_store(path, args.samples, field, args.spc, args.codec)
    consolidate(path)
    files = chunk_files(path)
    warm_page_cache(files)
    keys = [str(pathlib.Path(f).relative_to(path)) for f in files]
    stored = sum(os.path.getsize(f) for f in files)
    concurrencies = [int(v) for v in args.concurrency.split(",")]
    inflights = [int(v) for v in args.inflight.split(",")]

    from insitubatch.dataset import DEFAULT_MAX_INFLIGHT

    with Nginx(DATA) as nginx:
        url = f"{nginx.url}/{name}"
        result = {"machine": versions(nginx), "args": vars(args), "chunks": len(files), "stored_bytes": stored}
        result["verified_batches"] = verify(url, str(path), args.batch_size, args.block_chunks, 4)
        print("values: HTTP batches == file batches: OK", flush=True)

        # The loader's ceiling is the raw GET at its max_inflight: measure that concurrency too.
        result["raw_get"] = raw_get(url, keys, sorted(set(concurrencies) | {DEFAULT_MAX_INFLIGHT}), args.get_repeats,
                                    stored)
        ceiling = next(r for r in result["raw_get"] if r["concurrency"] == DEFAULT_MAX_INFLIGHT)

        loader = {"max_inflight": DEFAULT_MAX_INFLIGHT, "raw_ceiling_mb_s": ceiling["ours_mb_s"],
                  "labels": {"http": "HTTP (nginx, loopback)", "file": "local file store"}}
        for key, target in (("http", url), ("file", str(path))):
            ds = open_dataset(target, args.batch_size, args.block_chunks)
            try:
                loader[key] = epochs(ds, args.runs, warmup=True)
            finally:
                ds.close()
            print(json.dumps({"loader": key, **{k: v for k, v in loader[key].items() if k != "epoch_s"}}), flush=True)
        result["loader"] = loader

        if not args.no_latency:
            result["latency"] = latency_curve(nginx, name, inflights, args)

    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "http.json").write_text(json.dumps(result, indent=2))
    print()
    print(tables(result))


def latency_curve(nginx: "Nginx", name: str, inflights: list[int], args) -> dict:
    """The loader through a relay adding latency to every request, for each max_inflight."""
    from insitubatch.dataset import DEFAULT_MAX_INFLIGHT

    latency = {"latency_ms": args.latency_ms, "curve": []}
    with LatencyRelay(nginx.port, 0.0) as relay:
        ds = open_dataset(f"{relay.url}/{name}", args.batch_size, args.block_chunks)
        try:
            latency["no_latency"] = {"max_inflight": DEFAULT_MAX_INFLIGHT, **epochs(ds, args.runs, warmup=True)}
        finally:
            ds.close()
    with LatencyRelay(nginx.port, args.latency_ms / 1000) as relay:
        for mi in inflights:
            ds = open_dataset(f"{relay.url}/{name}", args.batch_size, args.block_chunks, max_inflight=mi)
            try:  # no warm-up epoch: the median of the runs drops the connection set-up
                row = {"max_inflight": mi, **epochs(ds, args.runs, warmup=False)}
            finally:
                ds.close()
            latency["curve"].append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "epoch_s"}), flush=True)
    return latency


if __name__ == "__main__":
    main()
