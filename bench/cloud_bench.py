"""Over a cloud link: shuffled epochs and the first batch, side by side, against the link's limit.

The stores of bench/coldstart_bench.py (zarr v3, one float32 variable, zstd level 3,
consolidated metadata; 1, 4, 16 samples per chunk and sharded: 16 per shard, inner chunks of
1) served over HTTP by bench/cloud_server.py on 127.0.0.1, which answers every request
`--latencies` ms late, a new connection's first request `--connect-ms` later still (default:
one more latency, its handshake), optionally no faster than `--rate-mb-s`. With `--protocol
s3` every engine (and the floor and the link) reads through its S3 client instead: signed
GetObject requests, path-style, the stores' folder as the bucket, the same server. Each engine runs
in a fresh process, with the same reads in flight (`--inflight`), for `--epochs` shuffled
epochs (batch 32, `block_chunks` 16):

* ours        -- InSituDataset over store("http://..."), max_inflight = inflight;
* tensorstore -- a block loop over the zarr3 driver on the http kvstore
                 (http_request_concurrency = inflight): one read future per stored chunk
                 (shard), the block's samples shuffled into batches of 32, reads issued up to
                 `inflight` chunks ahead (the next blocks' while this one is served);
* zarr        -- the same loop through zarr-python 3 on obstore's HTTPStore (async reads
                 of the blocks ahead on zarr's loop, async.concurrency = inflight);
* zarrs       -- the same with zarr-python's codec pipeline set to zarrs;
* original    -- the PyPI insitubatch 0.2.0 in .venv-orig, max_inflight = inflight;
* before      -- ours as an earlier revision (`--before REV`) built it (bench/engine_ab.py's
                 build, installed apart), run exactly as ours: a change's A/B over the link;
* floor       -- first batch only: a fresh process fetches the chunks the first batch draws
                 from (our libcurl store at `inflight`, no decode, no metadata: one round
                 trip plus the transfer, on new connections) and decodes them from local
                 copies with `--threads` threads (zstd into fresh memory);
* link        -- the link's own limit: every chunk file fetched whole, no decode, at
                 `--link-concurrency` (best of the second and third pass of one process:
                 connections made, the server's files open);
* decode      -- the machine's own limit, no link: every stored frame read from local files
                 (the page cache) and zstd-decoded by `--threads` threads into a ring of two
                 blocks' chunks (coldstart_bench.py's epoch floor). On a machine whose cores
                 the decode fills, an epoch over any link runs below min(link, decode).

Per run: time to first batch (from just before the store is opened, imports excluded),
samples/s of each epoch (epoch 0 includes opening and the first batch; epoch 1 is the
second pass), the process's CPU, and what the server saw (its CPU, requests, connections,
requests in flight). Every timed epoch is checked sample by sample: each sample's 16 probe
values against zarr-python's reading of the local store, and every sample once; in the first
`--check-rounds` rounds each engine also runs one more epoch whose every sample is compared
whole (crc32) with zarr-python's. A peer's epoch that runs past `--peer-budget` seconds stops
there (marked * in the tables): its rate is what it delivered in that time, every sample it
delivered checked the same way, none twice.

    .venv/bin/python bench/cloud_bench.py [--samples 4096] [--latencies 5,20,50] [--rounds 3]

Writes bench/results/cloud.json (or --json) and prints markdown tables.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import platform
import signal
import statistics
import subprocess
import sys
import time
import zlib

import numpy as np
import numpy.random  # noqa: F401  (numpy loads it on first use: never inside a timed window)

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import coldstart_bench as cs  # noqa: E402  (its stores, block order and batching rules)
from cloud_server import CloudServer  # noqa: E402

RESULTS = HERE / "results"
VAR = cs.VAR
LAYOUTS = cs.LAYOUTS
ENGINES = ("ours", "tensorstore", "zarr", "zarrs", "original", "floor", "link", "decode", "before")
LIMITS = ("floor", "link", "decode")  # not loaders: the first batch's floor and the two ceilings
PEERS = ("tensorstore", "zarr", "zarrs", "original")
PROBES = 16
# --protocol s3: every engine reads the same files through its S3 client, path-style
# (bucket = the stores' folder), signing with these throwaway keys (the server checks none;
# the signing's CPU is the client's, as against a real bucket).
S3_ENV = {"AWS_ACCESS_KEY_ID": "cloudbench", "AWS_SECRET_ACCESS_KEY": "cloudbench-secret", "AWS_REGION": "us-east-1"}


def served_url(cfg: dict) -> str:
    """The served store's address: s3://bucket/store with --protocol s3 (the server at
    cfg["endpoint"]), else its plain-HTTP URL (the same path)."""
    if cfg["protocol"] == "s3":
        return f"s3://{cfg['bucket']}/{cfg['name']}"
    return f"{cfg['endpoint']}/{cfg['bucket']}/{cfg['name']}"


def our_store(cfg: dict):
    """Our store over the served store, by cfg's protocol."""
    from insitubatch import store

    if cfg["protocol"] == "s3":
        return store(served_url(cfg), endpoint=cfg["endpoint"], region=S3_ENV["AWS_REGION"])
    return store(served_url(cfg))


# -- references (parent only) -----------------------------------------------------------------
def probe_positions(field: tuple[int, int]) -> np.ndarray:
    """Flat positions of the values checked in every sample of every timed epoch."""
    n = field[0] * field[1]
    return np.unique(np.linspace(0, n - 1, PROBES).astype(np.int64))


def references(path: pathlib.Path, field: tuple[int, int]) -> tuple[pathlib.Path, pathlib.Path]:
    """(probes .npy, crc32 digests .json) of every sample as zarr-python reads the local store,
    computed once per store."""
    probes, digests = path / "cloud_probes.npy", path / "cloud_digests.json"
    if probes.exists() and digests.exists():
        return probes, digests
    import zarr

    arr = zarr.open_array(zarr.storage.LocalStore(path, read_only=True), path=VAR, mode="r")
    pos = probe_positions(field)
    out_p, out_d = [], []
    for start in range(0, arr.shape[0], 256):
        block = np.ascontiguousarray(arr[start:start + 256])
        flat = block.reshape(block.shape[0], -1)
        out_p.append(flat[:, pos])
        out_d += [zlib.crc32(row) for row in block]
    np.save(probes, np.concatenate(out_p))
    digests.write_text(json.dumps(out_d))
    return probes, digests


# -- one engine's run, in its own process ---------------------------------------------------------
class OverBudget(Exception):
    """A peer's epoch ran past --peer-budget: it ends there, its rate from what it delivered."""


class Epoch:
    """One epoch's bookkeeping: first batch, order, probe mismatches, and (checked) digests."""

    def __init__(self, cfg: dict, t0: float, cpu0: float, digests: bool) -> None:
        self.cfg, self.t0, self.cpu0 = cfg, t0, cpu0
        self.budget = cfg.get("budget_s") or 0
        self.partial = False
        self.n = cfg["samples"]
        self.pos = np.asarray(cfg["_pos"])
        self.ref = cfg["_probes"]
        self.first: float | None = None
        self.order: list[np.ndarray] = []
        self.bad = 0
        self.digests = [0] * self.n if digests else None

    def add(self, indices, batch) -> None:
        if self.first is None:
            self.first = time.perf_counter() - self.t0
        idx = np.array(indices, dtype=np.int64, copy=True).reshape(-1)
        self.order.append(idx)
        flat = np.asarray(batch).reshape(len(idx), -1)
        self.bad += int(np.count_nonzero((flat[:, self.pos] != self.ref[idx]).any(axis=1)))
        if self.digests is not None:
            for i, row in zip(idx, flat):
                self.digests[i] = zlib.crc32(np.ascontiguousarray(row))
        if self.budget and time.perf_counter() - self.t0 > self.budget and sum(map(len, self.order)) < self.n:
            self.partial = True
            raise OverBudget

    def result(self) -> dict:
        seconds, cpu = time.perf_counter() - self.t0, time.process_time() - self.cpu0
        order = np.concatenate(self.order) if self.order else np.empty(0, np.int64)
        out = {"ttfb_s": self.first, "epoch_s": seconds, "cpu_s": cpu, "samples": int(order.size),
               "permutation": bool(np.array_equal(np.sort(order), np.arange(self.n))), "probe_mismatches": self.bad,
               "partial": self.partial, "distinct": int(np.unique(order).size)}
        if self.digests is not None:
            delivered = set(order.tolist())
            out["digests"] = [d if i in delivered else None for i, d in enumerate(self.digests)]
        return out


def _epochs(cfg: dict, open_engine, run_epoch) -> dict:
    """Opens (timed from here) and runs cfg["epochs"] epochs, plus a checked one when asked."""
    out = {"epochs": []}
    t0, cpu0 = time.perf_counter(), time.process_time()
    state = open_engine()
    for epoch in range(cfg["epochs"] + int(cfg["check"])):
        checked = epoch == cfg["epochs"]
        e = Epoch(cfg, t0, cpu0, digests=checked)
        try:
            extra = run_epoch(state, epoch, e) or {}
        except OverBudget:
            extra = {}
        res = e.result() | extra
        if checked:
            out["digests"] = res.pop("digests")
            out["check_epoch"] = res
        else:
            out["epochs"].append(res)
        t0, cpu0 = time.perf_counter(), time.process_time()
    return out


def _insitubatch_dataset(cfg: dict, open_store):
    """An InSituDataset over the served store (open_store(cfg)), for ours and the original alike."""
    from insitubatch import InSituDataset, open_geometries, split_by_chunk

    s = open_store(cfg)
    geoms = open_geometries(s, [VAR])
    manifest = split_by_chunk(geoms[VAR], fractions=(1.0, 0.0, 0.0))
    return InSituDataset(s, manifest, geoms, batch_size=cfg["batch_size"], block_chunks=cfg["block_chunks"],
                         max_inflight=cfg["inflight"])


def run_ours(cfg: dict) -> dict:
    import insitubatch  # noqa: F401  (imported before the clock starts, as every engine is)

    def run_epoch(ds, epoch, e):
        ds.set_epoch(epoch)
        for batch in ds.train:
            e.add(batch.sample_indices, batch.arrays[VAR])
        p = ds.last_pass
        return {"inflight_peak": p.depths.inflight_peak, "limiting_stage": p.limiting_stage,
                "budget_bytes": p.depths.budget_bytes, "waited": p.waited.total_s}

    return _epochs(cfg, lambda: _insitubatch_dataset(cfg, our_store), run_epoch)


def run_original(cfg: dict) -> dict:
    from insitubatch import obstore_store

    def run_epoch(ds, epoch, e):
        ds.set_epoch(epoch)
        for batch in ds.train:
            e.add(batch.sample_indices, batch.arrays[VAR])

    def open_store(cfg):
        if cfg["protocol"] == "s3":
            return obstore_store(served_url(cfg), endpoint=cfg["endpoint"], region=S3_ENV["AWS_REGION"],
                                 client_options={"allow_http": True})
        return obstore_store(served_url(cfg), client_options={"allow_http": True})

    return _epochs(cfg, lambda: _insitubatch_dataset(cfg, open_store), run_epoch)


def _ahead_loop(cfg: dict, e: Epoch, epoch: int, start, finish) -> None:
    """The block loop of coldstart_bench (batches of 32, a block's short tail completed from
    the next), with reads started up to cfg["inflight"] stored chunks ahead: `start(chunks)`
    issues a block's reads and returns a handle, `finish(handle)` waits for them and returns
    the block's samples in chunk order."""
    blocks = cs.block_order(cfg["samples"], cfg["outer"], cfg["block_chunks"], seed=epoch)
    pending: list = []  # (block number, handle)
    started = outstanding = 0

    def top_up() -> None:
        nonlocal started, outstanding
        while started < len(blocks) and (not pending or outstanding + len(blocks[started][0]) <= cfg["inflight"]):
            chunks = blocks[started][0]
            pending.append((started, start(chunks)))
            outstanding += len(chunks)
            started += 1

    def read_block(_chunks):
        nonlocal outstanding
        top_up()
        b, handle = pending.pop(0)
        outstanding -= len(blocks[b][0])
        data = finish(handle)
        top_up()  # the next reads go out before this block is served
        return data

    # coldstart's loop draws blocks from block_order(seed=0): feed it this epoch's.
    saved = cs.block_order
    cs.block_order = lambda *a, **k: blocks
    try:
        cs._block_loop(cfg, e, read_block)
    finally:
        cs.block_order = saved


def run_tensorstore(cfg: dict) -> dict:
    import tensorstore as ts

    n, outer = cfg["samples"], cfg["outer"]

    def open_engine():
        if cfg["protocol"] == "s3":
            ctx = ts.Context({"s3_request_concurrency": {"limit": cfg["inflight"]}})
            kvstore = {"driver": "s3", "bucket": cfg["bucket"], "path": f"{cfg['name']}/{VAR}/",
                       "endpoint": cfg["endpoint"], "aws_region": S3_ENV["AWS_REGION"],
                       "aws_credentials": {"type": "environment"}}
        else:
            ctx = ts.Context({"http_request_concurrency": {"limit": cfg["inflight"]}})
            kvstore = {"driver": "http", "base_url": f"{served_url(cfg)}/{VAR}/"}
        return ts.open({"driver": "zarr3", "kvstore": kvstore}, read=True, context=ctx).result()

    def run_epoch(arr, epoch, e):
        def start(chunks):
            return [arr[c * outer:min(n, (c + 1) * outer)].read() for c in chunks]

        _ahead_loop(cfg, e, epoch, start, lambda fs: np.concatenate([f.result() for f in fs]))

    return _epochs(cfg, open_engine, run_epoch)


def run_zarr(cfg: dict, zarrs: bool = False) -> dict:
    import zarr
    from obstore.store import HTTPStore, S3Store
    from zarr.core.sync import _get_loop

    zarr.config.set({"async.concurrency": cfg["inflight"]})
    if zarrs:
        import zarrs  # noqa: F401  (registers the pipeline)

        # Its chunks fetched and decoded concurrently up to the same reads in flight: zarrs
        # fetches each chunk on a thread of its pool, so the pool gets that many threads.
        zarr.config.set({"codec_pipeline.path": "zarrs.ZarrsCodecPipeline", "codec_pipeline.strict": True,
                         "codec_pipeline.chunk_concurrent_minimum": cfg["inflight"],
                         "codec_pipeline.chunk_concurrent_maximum": cfg["inflight"],
                         "threading.max_workers": cfg["inflight"]})
    n, outer = cfg["samples"], cfg["outer"]

    def open_engine():
        if cfg["protocol"] == "s3":
            obj = S3Store(cfg["bucket"], prefix=cfg["name"], endpoint=cfg["endpoint"], region=S3_ENV["AWS_REGION"],
                          access_key_id=S3_ENV["AWS_ACCESS_KEY_ID"], secret_access_key=S3_ENV["AWS_SECRET_ACCESS_KEY"],
                          client_options={"allow_http": True})
        else:
            obj = HTTPStore.from_url(served_url(cfg), client_options={"allow_http": True})
        store = zarr.storage.ObjectStore(obj, read_only=True)
        return zarr.open_array(store, path=VAR, mode="r")

    def run_epoch(arr, epoch, e):
        loop = _get_loop()

        def start(chunks):
            rows = np.concatenate([np.arange(c * outer, min(n, (c + 1) * outer)) for c in chunks])
            return asyncio.run_coroutine_threadsafe(arr._async_array.get_orthogonal_selection((rows,)), loop)

        _ahead_loop(cfg, e, epoch, start, lambda fut: np.asarray(fut.result()))

    return _epochs(cfg, open_engine, run_epoch)


def run_floor(cfg: dict) -> dict:
    """The first batch's floor: its chunks fetched (fresh process, new connections, no
    metadata) and decoded (from local copies of the same bytes)."""
    from insitubatch import _ext

    frames = json.loads(pathlib.Path(cfg["frames"]).read_text())
    keys = json.loads(pathlib.Path(cfg["keys"]).read_text())
    first: list[int] = []
    held = 0
    for chunks, samples in cs.block_order(cfg["samples"], cfg["outer"], cfg["block_chunks"]):
        if held >= cfg["batch_size"]:
            break
        first += chunks
        held += len(samples)
    s = our_store(cfg)
    fetch, nbytes = _ext.read_throughput(s, [keys[c] for c in first], cfg["inflight"], 1)
    decode = _ext.zstd_decode_floor([f for c in first for f in frames[c]], cfg["frame_bytes"], cfg["threads"])
    return {"ttfb_s": fetch[0] + decode, "fetch_s": fetch[0], "decode_s": decode, "bytes": nbytes}


def run_link(cfg: dict) -> dict:
    from insitubatch import _ext

    keys = json.loads(pathlib.Path(cfg["keys"]).read_text())
    s = our_store(cfg)
    seconds, nbytes = _ext.read_throughput(s, keys, cfg["link_concurrency"], 3)
    return {"pass_s": seconds, "epoch_s": min(seconds[1:]), "bytes": nbytes, "samples": cfg["samples"]}


def run_decode(cfg: dict) -> dict:
    from insitubatch import _ext

    frames = json.loads(pathlib.Path(cfg["frames"]).read_text())
    everything = [f for per_chunk in frames for f in per_chunk]
    ring = 2 * cfg["block_chunks"] * max(len(f) for f in frames)
    cpu0 = time.process_time()
    seconds = _ext.zstd_decode_floor(everything, cfg["frame_bytes"], cfg["threads"], ring=ring)
    return {"epoch_s": seconds, "cpu_s": time.process_time() - cpu0, "samples": cfg["samples"]}


def child(cfg: dict) -> dict:
    if cfg["engine"] in LIMITS:
        return {"floor": run_floor, "link": run_link, "decode": run_decode}[cfg["engine"]](cfg)
    cfg["_pos"] = probe_positions(tuple(cfg["field"]))
    cfg["_probes"] = np.load(cfg["probes"])
    runners = {"ours": run_ours, "before": run_ours, "original": run_original, "tensorstore": run_tensorstore,
               "zarr": run_zarr, "zarrs": lambda c: run_zarr(c, zarrs=True)}
    out = runners[cfg["engine"]](cfg)
    out["ttfb_s"] = out["epochs"][0]["ttfb_s"]
    return out


# -- the parent -------------------------------------------------------------------------------
def available(engine: str) -> str:
    """'' when `engine` can run here, else why not."""
    probe = {"tensorstore": "tensorstore", "zarrs": "zarrs", "zarr": "obstore"}.get(engine)
    if probe:
        found = subprocess.run([sys.executable, "-c", f"import {probe}"], capture_output=True).returncode == 0
        return "" if found else f"skipped: {probe} is not installed"
    if engine == "original" and not cs.ORIG_PYTHON.exists():
        return "skipped: .venv-orig is missing (scripts/bench.sh --setup-only)"
    return ""


def run_child(cfg: dict, timeout: float) -> dict:
    python = str(cs.ORIG_PYTHON) if cfg["engine"] == "original" else sys.executable
    env = os.environ | (S3_ENV if cfg["protocol"] == "s3" else {})
    if cfg["engine"] == "before":  # the earlier build shadows the installed one
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [cfg["site"], env.get("PYTHONPATH", "")]))
    try:
        proc = subprocess.run([python, str(pathlib.Path(__file__).resolve()), "--child", json.dumps(cfg)],
                              capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env)
    except subprocess.TimeoutExpired:
        return {"failed": f"timed out after {timeout:.0f} s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = proc.stderr.strip().splitlines()
        return {"failed": f"exit {proc.returncode}: {tail[-1] if tail else 'no output'}"}
    return json.loads(lines[-1])


def check_run(res: dict, n: int, digests: list[int]) -> str:
    """'' when every epoch delivered every sample once with the right probe values, and the
    checked epoch (if any) every sample whole."""
    for k, ep in enumerate(res.get("epochs", [])):
        if ep.get("partial"):  # cut at --peer-budget: no sample twice
            if ep["distinct"] != ep["samples"]:
                return f"epoch {k}: a sample was delivered twice"
        elif ep["samples"] != n or not ep["permutation"]:
            return f"epoch {k}: {ep['samples']} samples delivered, not each of the {n} once"
        if ep["probe_mismatches"]:
            return f"epoch {k}: {ep['probe_mismatches']} samples differ from zarr-python's at the probes"
    if "digests" in res:
        bad = [i for i, (a, b) in enumerate(zip(res["digests"], digests)) if a is not None and a != b]
        if bad or len(res["digests"]) != n:
            return f"checked epoch: {len(bad)} samples differ from zarr-python's (first: {bad[:1]})"
    return ""


def server_view(st: dict) -> dict:
    return {k: st[k] for k in ("cpu_s", "requests", "signed", "connections", "bytes", "size_median", "inflight_peak",
                               "inflight_mean", "requests_per_connection_max")}


def summarize(rows: list[dict], latencies: list[float], layouts: list[str], engines: list[str], n: int) -> list[dict]:
    table = []
    for lat in latencies:
        for layout in layouts:
            cell = {}
            for engine in engines:
                runs = [r for r in rows if r["latency_ms"] == lat and r["layout"] == layout and r["engine"] == engine]
                good = [r for r in runs if "failed" not in r and "skipped" not in r and not r.get("check")]
                entry = {"latency_ms": lat, "layout": layout, "engine": engine, "runs": len(good)}
                if not good:
                    why = next((r.get("skipped") or r.get("failed") or r.get("check") for r in runs), "no run")
                    entry["status"] = why
                elif engine == "decode":
                    entry["samples_s"] = statistics.median(n / r["epoch_s"] for r in good)
                elif engine == "link":
                    entry["samples_s"] = statistics.median(n / r["epoch_s"] for r in good)
                    entry["mb_s"] = statistics.median(r["bytes"] / r["epoch_s"] / 1e6 for r in good)
                    entry["server_cpu_per_s"] = statistics.median(r["server"]["cpu_s"] / sum(r["pass_s"])
                                                                  for r in good)
                elif engine == "floor":
                    entry["ttfb_ms"] = statistics.median(r["ttfb_s"] for r in good) * 1e3
                    entry["fetch_ms"] = statistics.median(r["fetch_s"] for r in good) * 1e3
                    entry["decode_ms"] = statistics.median(r["decode_s"] for r in good) * 1e3
                else:
                    entry["ttfb_ms"] = statistics.median(r["ttfb_s"] for r in good) * 1e3
                    for k in range(len(good[0]["epochs"])):
                        entry[f"pass{k}_samples_s"] = statistics.median(r["epochs"][k]["samples"] / r["epochs"][k]["epoch_s"]
                                                                        for r in good)
                    if any(ep.get("partial") for r in good for ep in r["epochs"]):
                        entry["partial"] = True
                    entry["server_cpu_s"] = statistics.median(r["server"]["cpu_s"] for r in good)
                    entry["server_inflight_peak"] = statistics.median(r["server"]["inflight_peak"] for r in good)
                    entry["connections"] = statistics.median(r["server"]["connections"] for r in good)
                    entry["cpu_s"] = statistics.median(sum(ep["cpu_s"] for ep in r["epochs"]) for r in good)
                    if engine == "ours":
                        entry["inflight_peak"] = [max(ep.get("inflight_peak", 0) for ep in r["epochs"]) for r in good]
                        entry["limiting_stage"] = [ep.get("limiting_stage") for ep in good[0]["epochs"]]
                cell[engine] = entry
                table.append(entry)
            link = cell.get("link", {}).get("samples_s")
            decode = cell.get("decode", {}).get("samples_s")
            bound = min(x for x in (link, decode, float("inf")) if x)
            floor = cell.get("floor", {}).get("ttfb_ms")
            ours = cell.get("ours", {})
            for engine, entry in cell.items():
                if link and "pass0_samples_s" in entry:
                    entry["pass0_vs_link"] = entry["pass0_samples_s"] / link
                    if "pass1_samples_s" in entry:
                        entry["pass1_vs_link"] = entry["pass1_samples_s"] / link
                if bound < float("inf") and "pass0_samples_s" in entry:
                    for k in (0, 1):
                        if f"pass{k}_samples_s" in entry:
                            entry[f"pass{k}_vs_bound"] = entry[f"pass{k}_samples_s"] / bound
                if floor and "ttfb_ms" in entry:
                    entry["ttfb_vs_floor"] = entry["ttfb_ms"] / floor
                if engine in PEERS and "pass0_samples_s" in entry and "pass0_samples_s" in ours:
                    for k in (0, 1):  # a peer's second pass, where it ran none, is its first
                        if f"pass{k}_samples_s" in ours:
                            theirs = entry.get(f"pass{k}_samples_s", entry["pass0_samples_s"])
                            entry[f"ours_over_pass{k}"] = ours[f"pass{k}_samples_s"] / theirs
    return table


LABELS = {"c1": "1 sample per chunk", "c4": "4", "c16": "16", "shard16": "sharded (16 per shard, inner 1)"}


def markdown(table: list[dict], latencies: list[float], layouts: list[str], engines: list[str]) -> str:
    def get(lat, layout, engine):
        return next((t for t in table if t["latency_ms"] == lat and t["layout"] == layout and t["engine"] == engine),
                    None)

    runners = [e for e in engines if e not in LIMITS]
    out = []
    for lat in latencies:
        out.append(f"**+{lat:g} ms per request**")
        out.append("")
        out.append("| layout | " + " | ".join(f"{e} pass 0 / 1, samples/s" for e in runners)
                   + " | link limit | decode limit (no link) | ours / link (pass 0, 1) |"
                   " ours / min(link, decode) (pass 0, 1) | ours / best peer (pass 0, 1) |")
        out.append("|---|" + "---|" * (len(runners) + 5))
        for layout in layouts:
            cells = []
            for e in runners:
                t = get(lat, layout, e)
                if t is None or "pass0_samples_s" not in t:
                    cells.append((t or {}).get("status", "-").split(":")[0])
                    continue
                second = f"{t['pass1_samples_s']:.0f}" if "pass1_samples_s" in t else "-"
                cells.append(f"{t['pass0_samples_s']:.0f}{'*' if t.get('partial') else ''} / {second}")
            link = get(lat, layout, "link")
            ours = get(lat, layout, "ours") or {}
            dec = get(lat, layout, "decode")
            cells.append(f"{link['samples_s']:.0f}" if link and "samples_s" in link else "-")
            cells.append(f"{dec['samples_s']:.0f}" if dec and "samples_s" in dec else "-")
            cells.append(f"{ours.get('pass0_vs_link', float('nan')):.2f}, {ours.get('pass1_vs_link', float('nan')):.2f}")
            cells.append(f"{ours.get('pass0_vs_bound', float('nan')):.2f}, {ours.get('pass1_vs_bound', float('nan')):.2f}")
            best = []
            for k in (0, 1):  # a peer's second pass, where it ran none, is its first
                peers = [get(lat, layout, p) for p in PEERS]
                rates = [p.get(f"pass{k}_samples_s", p["pass0_samples_s"]) for p in peers if p and "pass0_samples_s" in p]
                best.append(ours.get(f"pass{k}_samples_s", float("nan")) / max(rates) if rates else float("nan"))
            cells.append(f"{best[0]:.2f}, {best[1]:.2f}")
            out.append(f"| {LABELS[layout]} | " + " | ".join(cells) + " |")
        out.append("")
        out.append("| layout | " + " | ".join(f"{e} first batch, ms" for e in runners)
                   + " | floor, ms (fetch + decode) | ours - floor, round trips |")
        out.append("|---|" + "---|" * (len(runners) + 2))
        for layout in layouts:
            cells = []
            for e in runners:
                t = get(lat, layout, e)
                cells.append(f"{t['ttfb_ms']:.0f}" if t and "ttfb_ms" in t else (t or {}).get("status", "-").split(":")[0])
            f = get(lat, layout, "floor")
            cells.append(f"{f['ttfb_ms']:.0f} ({f['fetch_ms']:.0f} + {f['decode_ms']:.0f})" if f and "ttfb_ms" in f
                         else "-")
            ours = get(lat, layout, "ours") or {}
            cells.append(f"{(ours['ttfb_ms'] - f['ttfb_ms']) / lat:.1f}" if f and "ttfb_ms" in f and "ttfb_ms" in ours
                         else "-")
            out.append(f"| {LABELS[layout]} | " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--samples", type=int, default=4096)
    p.add_argument("--field", default="181x360", help="HxW of one sample")
    p.add_argument("--layouts", default=",".join(LAYOUTS))
    p.add_argument("--engines", default=",".join(e for e in ENGINES if e != "before"))
    p.add_argument("--before", metavar="REV", help="the revision the 'before' engine is built from")
    p.add_argument("--latencies", default="5,20,50", help="ms added to every request")
    p.add_argument("--connect-ms", type=float, default=None,
                   help="ms added to a new connection's first request (default: one more latency)")
    p.add_argument("--protocol", choices=("http", "s3"), default="http",
                   help="how every engine reads: plain HTTP Range GETs, or S3 GetObject (path-style, signed)")
    p.add_argument("--rate-mb-s", type=float, default=0.0, help="the link's rate (0: unlimited)")
    p.add_argument("--inflight", type=int, default=64, help="reads in flight, for every engine")
    p.add_argument("--link-concurrency", type=int, default=None, help="the link limit's (default: 2 x inflight)")
    p.add_argument("--epochs", type=int, default=2, help="ours' timed epochs per process (0: first, 1: second pass)")
    p.add_argument("--peer-epochs", type=int, default=1,
                   help="the peers' (they keep no chunk between epochs: a second pass costs what the first does)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the tables give medians")
    p.add_argument("--peer-budget", type=float, default=30,
                   help="seconds after which a peer's epoch stops; its rate is then what it delivered (0: never)")
    p.add_argument("--check-rounds", type=int, default=1, help="rounds with an extra epoch checked whole")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--block-chunks", type=int, default=16)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="the floor's decode threads")
    p.add_argument("--timeout", type=float, default=900, help="seconds per engine process")
    p.add_argument("--data", default=str(HERE / "data" / "coldstart"), help="stores folder")
    p.add_argument("--json", default=None, help="default: bench/results/cloud.json (cloud_s3.json for s3)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        sys.stdout.write("\n" + json.dumps(child(json.loads(args.child))) + "\n")
        return {}
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # so `with` stops the server
    layouts, engines = args.layouts.split(","), args.engines.split(",")
    latencies = [float(v) for v in args.latencies.split(",")]
    unknown = [x for x in layouts if x not in LAYOUTS] + [x for x in engines if x not in ENGINES]
    if unknown or args.rounds < 1 or args.epochs < 1:
        p.error(f"unknown layout or engine {unknown}" if unknown else "--rounds and --epochs must be >= 1")
    if ("before" in engines) != (args.before is not None):
        p.error("the 'before' engine and --before REV go together")
    site = ""
    if args.before:
        import engine_ab  # noqa: PLC0415  (its build of an earlier revision: git and a compile)

        if subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{args.before}^{{commit}}"], cwd=ROOT,
                          capture_output=True).returncode != 0:
            p.error(f"--before {args.before}: no such revision in this checkout")
        site = str(engine_ab.build_revision(args.before))
    field = tuple(int(v) for v in args.field.split("x"))
    data = pathlib.Path(args.data).resolve()
    stores, refs, frames, keys = {}, {}, {}, {}
    for layout in layouts:
        t = time.perf_counter()
        path = cs.ensure_store(data, layout, args.samples, field)
        stores[layout] = path
        refs[layout] = references(path, field)
        stem = f"{layout}_{args.samples}_{field[0]}x{field[1]}"
        frames[layout] = data / f"{stem}.frames.json"
        frames[layout].write_text(json.dumps(cs.frame_files(path, layout, args.samples, field)))
        keys[layout] = data / f"{stem}.keys.json"
        keys[layout].write_text(json.dumps([str(f.relative_to(path)) for f in cs.chunk_files(path)]))
        print(f"[{layout}] {path.name} ready ({time.perf_counter() - t:.1f} s)", flush=True)
    skipped = {e: available(e) for e in engines}
    rows = []
    load = []
    for lat in latencies:
        connect = lat if args.connect_ms is None else args.connect_ms
        # Served from the stores' parent: the folder's name is the bucket (path-style S3), the
        # same path over plain HTTP.
        with CloudServer(data.parent, latency_ms=lat, connect_ms=connect, rate_mb_s=args.rate_mb_s) as server:
            for rnd in range(args.rounds):
                for layout in layouts:
                    spc, shard = cs.layout_chunks(layout)
                    cs.warm(stores[layout])
                    digests = json.loads(refs[layout][1].read_text())
                    for engine in engines:
                        row = {"latency_ms": lat, "round": rnd, "layout": layout, "engine": engine}
                        if skipped[engine]:
                            rows.append(row | {"skipped": skipped[engine]})
                            continue
                        cfg = {"engine": engine, "protocol": args.protocol, "endpoint": server.url,
                               "bucket": data.name, "name": stores[layout].name,
                               "samples": args.samples, "field": field, "outer": shard or spc,
                               "batch_size": args.batch_size, "block_chunks": args.block_chunks,
                               "inflight": args.inflight,
                               "link_concurrency": args.link_concurrency or 2 * args.inflight,
                               "threads": args.threads,
                               "epochs": args.epochs if engine in ("ours", "before") else args.peer_epochs,
                               "budget_s": 0 if engine in ("ours", "before") else args.peer_budget, "site": site,
                               "check": rnd < args.check_rounds and engine not in LIMITS,
                               "probes": str(refs[layout][0]), "frames": str(frames[layout]),
                               "keys": str(keys[layout]), "frame_bytes": spc * field[0] * field[1] * 4}
                        load.append(os.getloadavg()[0])
                        server.reset()
                        res = run_child(cfg, args.timeout)
                        res["server"] = server_view(server.stats())
                        if "failed" not in res:
                            res["check"] = check_run(res, args.samples, digests) if engine not in LIMITS else ""
                            res.pop("digests", None)
                        rows.append(row | res)
                        if "failed" in res:
                            what = res["failed"]
                        elif engine == "decode":
                            what = f"{args.samples / res['epoch_s']:.0f} samples/s, {res['cpu_s']:.2f} CPU s"
                        elif engine == "link":
                            what = f"{args.samples / res['epoch_s']:.0f} samples/s ({res['bytes'] / res['epoch_s'] / 1e6:.0f} MB/s)"
                        elif engine == "floor":
                            what = f"ttfb {res['ttfb_s'] * 1e3:.1f} ms (fetch {res['fetch_s'] * 1e3:.1f})"
                        else:
                            rates = ", ".join(f"{ep['samples'] / ep['epoch_s']:.0f}{' (cut)' if ep.get('partial') else ''}"
                                              for ep in res["epochs"])
                            what = f"ttfb {res['ttfb_s'] * 1e3:.1f} ms, samples/s {rates} {res['check'] or 'ok'}"
                        sv = res["server"]
                        print(f"  +{lat:g} ms round {rnd} {layout} {engine}: {what}; server cpu {sv['cpu_s']:.2f} s,"
                              f" {sv['requests']} requests on {sv['connections']} connections, in flight peak"
                              f" {sv['inflight_peak']} mean {sv['inflight_mean']:.1f}", flush=True)
    table = summarize(rows, latencies, layouts, engines, args.samples)
    text = markdown(table, latencies, layouts, engines)
    print()
    print(text)
    result = {"args": {k: v for k, v in vars(args).items() if k != "child"},
              "machine": {"cores": os.cpu_count(), "system": f"{platform.system()} {platform.release()}",
                          "load_average_median": statistics.median(load) if load else None,
                          "load_average_range": [min(load), max(load)] if load else None},
              "table": table, "rows": rows, "markdown": text}
    out = pathlib.Path(args.json or RESULTS / ("cloud_s3.json" if args.protocol == "s3" else "cloud.json"))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    bad = [r for r in rows if r.get("failed") or r.get("check")]
    for r in bad:
        print(f"FAILED: +{r['latency_ms']:g} ms round {r['round']} {r['layout']} {r['engine']}:"
              f" {r.get('failed') or r['check']}")
    if bad:
        sys.exit(1)
    return result


if __name__ == "__main__":
    main()
