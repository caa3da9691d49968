"""``planfetch speedtest``: one epoch of plan-driven prefetch over a CSV index, measured, and
the stage that limits it named with what to change.

The run: the index's rows (``--limit``, ``--offset``, ``--sample-frac``) in the ``--strategy``
plan, a SharedDiskCache and a PrefetchCoordinator with the given knobs, and a consumer that
takes the batches in order (``--workers`` threads make each batch's files local and read
them, or decode them with ``--decode`` / ``--image-loader``). Then, on the same objects:

* the raw-GET ceiling: the native store reading the objects into memory at the same
  concurrency (and at twice it, to tell a bandwidth wall from too few requests in flight);
* the disk ceiling: writing the same bytes as files into the cache directory;
* the consumer ceiling: the consumer over files already local.

The limiting stage is the slowest ceiling when the run comes within 70% of it, else the
prefetch window (no stage is saturated: the loop waits on downloads that start too late).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

import numpy as np

from insitubatch import InSituError, _ext, bars, urls
from insitubatch.cli import UsageError, integer_at_least, report_main

from .cache import SharedDiskCache
from .index import load_index_csv
from .loading import PrefetchCoordinator
from .plans import (PlanView, SequentialPlanProvider, ShuffleOncePerEpochPlanProvider,
                    StreamingStratifiedBatchPlanProvider)

CEILING_OBJECTS = 2000  # the ceilings are measured on at most this many of the run's objects
SATURATED = 0.7  # a run this close to a stage's ceiling is limited by that stage


def _size(text: str) -> int:
    units = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
             "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}
    t = text.strip().upper()
    num = t.rstrip("KMGTIB")
    try:
        value = float(num) * units[t[len(num):]]
    except (KeyError, ValueError):
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 10GB, 500MiB, 1000000)") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"a size must be positive, got {text!r}")
    return int(value)


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"--sample-frac must be in (0, 1], got {text}")
    return value


_positive, _non_negative = integer_at_least(1), integer_at_least(0)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="planfetch speedtest", description=__doc__.splitlines()[0].strip("`"))
    p.add_argument("csv_path", help="the index: a CSV with a header row")
    p.add_argument("-n", "--limit", type=_positive, help="process only the first N rows (default: all)")
    p.add_argument("--offset", type=_non_negative, default=0, help="skip the first N rows")
    p.add_argument("--sample-frac", type=_fraction, help="a random fraction of the rows, in (0, 1]")
    p.add_argument("--s3-uri-col", default="s3_uri", help="the column of object URIs")
    p.add_argument("--class-col", default="label", help="the column of class labels")
    p.add_argument("--batch-size", type=_positive, default=64)
    p.add_argument("--cache-dir", help="the local cache directory (default: a temporary one, removed after)")
    p.add_argument("--max-bytes", type=_size, default=10**10, help="the cache's size limit (default 10GB)")
    p.add_argument("--download-threads", type=_positive, default=64)
    p.add_argument("--s3-pool-connections", type=_positive, default=256)
    p.add_argument("--batches-ahead", type=_non_negative, default=200)
    p.add_argument("--batches-back", type=_non_negative, default=4)
    p.add_argument("--prune-every", type=_non_negative, default=5)
    p.add_argument("--prune-mode", choices=["window", "pressure"], default="window")
    p.add_argument("--prune-backend", choices=["meta", "scan"], default="meta")
    p.add_argument("--strategy", choices=["shuffle", "sequential", "stratified"], default="shuffle")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=_positive, default=8,
                   help="consumer threads making a batch's files local and reading them (as DataLoader workers would)")
    p.add_argument("--decode", action="store_true", help="decode each image with PIL (RGB) as the consumer")
    p.add_argument("--image-loader", metavar="FILE.py:FUNCTION",
                   help="the consumer's per-file function (path -> anything), instead of reading the bytes")
    p.add_argument("--no-ceilings", action="store_true", help="skip the ceiling measurements")
    p.add_argument("--json", metavar="PATH", help="write the whole report as JSON ('-' for stdout)")
    p.add_argument("--trace", metavar="PATH",
                   help="record the run and write its timeline (trace-event JSON: ui.perfetto.dev opens it)")
    p.add_argument("-v", "--verbose", action="store_true")
    return p


# -- the consumer -------------------------------------------------------------------------------
def _read_bytes(path: str) -> int:
    with open(path, "rb") as f:
        return len(f.read())


def _pil_decode(path: str) -> Any:
    from PIL import Image

    with Image.open(path) as im:
        return im.convert("RGB")


def _load_function(spec: str) -> Callable[[str], Any]:
    file, sep, name = spec.rpartition(":")
    if not sep or not file or not name:
        raise UsageError(f"--image-loader wants FILE.py:FUNCTION, got {spec!r}")
    if not os.path.isfile(file):
        raise UsageError(f"--image-loader: {file} does not exist")
    module_spec = importlib.util.spec_from_file_location("planfetch_speedtest_loader", file)
    if module_spec is None or module_spec.loader is None:
        raise UsageError(f"--image-loader: cannot load {file} as a module")
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    fn = getattr(module, name, None)
    if not callable(fn):
        raise UsageError(f"--image-loader: {file} has no function {name!r}")
    loader: Callable[[str], Any] = fn
    return loader


# -- selecting the rows and the plan ----------------------------------------------------------
def _select(args: argparse.Namespace, n_rows: int) -> np.ndarray:
    rows = np.arange(min(args.offset, n_rows), n_rows, dtype=np.int64)
    if args.sample_frac is not None:
        rng = np.random.default_rng(args.seed)
        keep = max(1, round(len(rows) * args.sample_frac)) if len(rows) else 0
        rows = np.sort(rng.choice(rows, size=keep, replace=False))
    if args.limit is not None:
        rows = rows[: args.limit]
    if len(rows) == 0:
        raise UsageError(f"no rows left to test: the index has {n_rows}, --offset {args.offset}")
    return rows


def _plan(args: argparse.Namespace, labels: np.ndarray | None, n: int) -> PlanView:
    if args.strategy == "sequential":
        return SequentialPlanProvider(n, args.batch_size).make_epoch_plan(0)
    if args.strategy == "shuffle":
        return ShuffleOncePerEpochPlanProvider(n, args.batch_size, seed=args.seed).make_epoch_plan(0)
    if labels is None:
        raise UsageError("--strategy stratified needs class labels (--class-col)")
    classes = np.unique(labels, return_inverse=True)[1].astype(np.int64)
    return StreamingStratifiedBatchPlanProvider(classes, args.batch_size, epoch_samples=n,
                                                seed=args.seed).make_epoch_plan(0)


# -- progress -----------------------------------------------------------------------------------
class _Progress:
    """A rich progress bar when rich is installed and stderr is a terminal or -v asks; else
    a line every couple of seconds with -v, nothing without."""

    def __init__(self, total: int, verbose: bool) -> None:
        self.total, self.verbose, self.done, self.bytes = total, verbose, 0, 0
        self._bar = None
        self._last = time.monotonic()
        if sys.stderr.isatty() or verbose:
            try:
                from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                           TimeRemainingColumn)

                self._bar = Progress(TextColumn("speedtest"), BarColumn(), MofNCompleteColumn(),
                                     TextColumn("{task.fields[rate]}"), TimeRemainingColumn(),
                                     transient=not verbose)
                self._task = self._bar.add_task("batches", total=total, rate="")
                self._bar.start()
            except ImportError:
                self._bar = None

    def advance(self, samples_s: float, mb_s: float) -> None:
        self.done += 1
        rate = f"{samples_s:,.0f} samples/s  {mb_s:,.1f} MB/s"
        if self._bar is not None:
            self._bar.update(self._task, advance=1, rate=rate)
        elif self.verbose and time.monotonic() - self._last > 2:
            self._last = time.monotonic()
            print(f"speedtest: batch {self.done}/{self.total}  {rate}", file=sys.stderr)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()


# -- the measurements ---------------------------------------------------------------------------
def _run_epoch(args: argparse.Namespace, cache: SharedDiskCache, uris: list[str], plan: PlanView,
               consume: Callable[[str], Any]) -> dict[str, Any]:
    coordinator = PrefetchCoordinator(cache, uris, args.batches_ahead, args.batches_back, args.prune_every,
                                      args.prune_mode, args.prune_backend, trace=args.trace is not None)
    coordinator.set_plan(plan)
    latencies, samples, consumed_bytes = [], 0, 0
    progress = _Progress(len(plan), args.verbose)
    lock = threading.Lock()
    sizes: dict[int, int] = {}

    def one(i: int) -> None:
        path = cache.ensure_local(uris[i])
        size = os.path.getsize(path)
        consume(path)
        with lock:
            sizes[i] = size

    t0 = time.perf_counter()
    try:
        coordinator.prime()
        with ThreadPoolExecutor(args.workers, thread_name_prefix="speedtest") as pool:
            for b, batch in enumerate(plan):
                t = time.perf_counter()
                list(pool.map(one, batch.tolist()))
                latencies.append(time.perf_counter() - t)
                samples += len(batch)
                coordinator.on_batch_yielded(b)
                elapsed = time.perf_counter() - t0
                consumed_bytes = sum(sizes.values())
                progress.advance(samples / elapsed, consumed_bytes / elapsed / 1e6)
    finally:
        progress.close()
    total = time.perf_counter() - t0
    if args.trace is not None:
        coordinator.save_trace(args.trace)
    stats = cache.stats()
    lat = np.asarray(latencies) * 1000
    return {
        "total_s": total, "batches": len(plan), "samples": samples, "distinct_objects": len(sizes),
        "batches_per_s": len(plan) / total, "samples_per_s": samples / total,
        "mb_per_s": sum(sizes.values()) / total / 1e6,
        "batch_latency_ms": {"avg": float(lat.mean()), "p50": float(np.percentile(lat, 50)),
                             "p95": float(np.percentile(lat, 95)), "p99": float(np.percentile(lat, 99)),
                             "max": float(lat.max())},
        "bytes_downloaded": int(stats["bytes_downloaded"]) + 0,
        "downloads": int(stats["downloads"]), "retries": int(stats["retries"]), "failures": int(stats["failures"]),
        "object_bytes": int(sum(sizes.values())), "prefetch": coordinator.stats(),
    }


def _network_ceiling(cache: SharedDiskCache, uris: list[str], concurrency: int) -> dict[str, Any]:
    prefix = urls.bucket_prefix(uris[0])
    same = [u for u in uris if u.startswith(prefix)]
    store = cache._store_for(prefix)
    keys = [u[len(prefix):] for u in same]
    out = {}
    for label, c in (("at_threads", concurrency), ("at_twice", 2 * concurrency)):
        seconds, nbytes = _ext.read_throughput(store, keys, c, 1)
        out[label] = {"concurrency": c, "objects": len(keys), "seconds": seconds[0], "mb_per_s": nbytes / seconds[0] / 1e6,
                      "objects_per_s": len(keys) / seconds[0]}
    return out


def _disk_ceiling(cache_dir: Path, paths: list[str]) -> dict[str, Any]:
    data = [Path(p).read_bytes() for p in paths]
    scratch = cache_dir / ".speedtest-disk"
    scratch.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    try:
        for i, d in enumerate(data):  # as the cache writes: a temp file, then a rename
            tmp = scratch / f"{i}.tmp"
            tmp.write_bytes(d)
            os.replace(tmp, scratch / f"{i}.bin")
        seconds = time.perf_counter() - t0
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    nbytes = sum(len(d) for d in data)
    return {"objects": len(data), "seconds": seconds, "mb_per_s": nbytes / seconds / 1e6}


def _consumer_ceiling(paths: list[str], consume: Callable[[str], Any], workers: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(consume, paths))
    seconds = time.perf_counter() - t0
    return {"objects": len(paths), "seconds": seconds, "samples_per_s": len(paths) / seconds}


def _stage_ceilings(args: argparse.Namespace, run: dict[str, Any], ceilings: dict[str, Any]) -> dict[str, float]:
    """Each stage's ceiling in samples/s (network at the run's concurrency, disk, consumer)."""
    mean_object = run["object_bytes"] / max(1, run["distinct_objects"])
    return {
        "network": ceilings["network"]["at_threads"]["mb_per_s"] * 1e6 / mean_object,
        "disk": ceilings["disk"]["mb_per_s"] * 1e6 / mean_object,
        "decode" if (args.decode or args.image_loader) else "consumer": ceilings["consumer"]["samples_per_s"],
    }


def _verdict(args: argparse.Namespace, run: dict[str, Any], ceilings: dict[str, Any]) -> tuple[str, str]:
    candidates = _stage_ceilings(args, run, ceilings)
    net = candidates["network"]
    twice = net * ceilings["network"]["at_twice"]["mb_per_s"] / ceilings["network"]["at_threads"]["mb_per_s"]
    stage = min(candidates, key=lambda k: candidates[k])
    achieved = run["samples_per_s"]
    if achieved < SATURATED * candidates[stage]:
        return "prefetch window", (
            f"{achieved:,.0f} samples/s is below every stage's ceiling (slowest: {stage}, {candidates[stage]:,.0f}"
            f" samples/s): the loop waits on downloads that start too late. Raise --batches-ahead (now"
            f" {args.batches_ahead}) or --download-threads (now {args.download_threads}).")
    if stage == "network":
        if twice > 1.2 * net:
            return stage, (f"raw GETs run {twice / net:.1f}x faster at {2 * args.download_threads} in flight than at"
                           f" {args.download_threads}: raise --download-threads to {2 * args.download_threads}.")
        return stage, ("the endpoint's bandwidth is the wall (raw GETs do not speed up with twice the requests in"
                       " flight): a closer or faster endpoint, or smaller objects.")
    if stage == "disk":
        return stage, (f"the cache directory's disk writes {ceilings['disk']['mb_per_s']:,.0f} MB/s: put --cache-dir"
                       " on a faster disk (local NVMe, or tmpfs for a test).")
    what = "decoding" if stage == "decode" else "reading the files"
    return stage, (f"the consumer ({what}, {args.workers} threads) is the wall: more DataLoader workers, or a"
                   " cheaper transform.")


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.decode and args.image_loader:
        raise UsageError("--decode and --image-loader are exclusive")
    consume = _load_function(args.image_loader) if args.image_loader else _pil_decode if args.decode else _read_bytes
    try:
        all_uris, all_labels = load_index_csv(args.csv_path, s3_uri_col=args.s3_uri_col,
                                              class_col=args.class_col or None)
    except InSituError as exc:
        if "column" in str(exc) or "does not exist" in str(exc) or "empty" in str(exc):
            raise UsageError(str(exc)) from None
        raise
    rows = _select(args, len(all_uris))
    uris = [all_uris[int(r)] for r in rows]
    labels = None if all_labels is None else np.asarray(all_labels)[rows]
    plan = _plan(args, labels, len(uris))
    temp = args.cache_dir is None
    cache_dir = Path(tempfile.mkdtemp(prefix="planfetch-speedtest-") if temp else args.cache_dir)
    report: dict[str, Any] = {"index": str(args.csv_path), "rows": len(rows), "strategy": args.strategy,
                              "config": {k: v for k, v in vars(args).items() if k not in ("json", "verbose", "trace")}}
    if args.trace is not None:
        report["trace"] = args.trace
    try:
        with SharedDiskCache(cache_dir, max_bytes=args.max_bytes, download_threads=args.download_threads,
                             s3_max_pool_connections=args.s3_pool_connections,
                             min_age_seconds_before_delete=0.0) as cache:
            report["run"] = run_ = _run_epoch(args, cache, uris, plan, consume)
            if run_["failures"]:
                report["error"] = f"{run_['failures']} downloads failed"
            if not args.no_ceilings:
                sample = uris[: CEILING_OBJECTS]
                local = [p for p in (cache.local_path(u) for u in sample) if os.path.exists(p)]
                if not local:  # pruned behind the window: fetch a few back for the disk and consumer ceilings
                    local = [cache.ensure_local(u) for u in sample[: min(len(sample), 200)]]
                report["ceilings"] = {"network": _network_ceiling(cache, sample, args.download_threads),
                                      "disk": _disk_ceiling(cache_dir, local),
                                      "consumer": _consumer_ceiling(local, consume, args.workers)}
                report["limiting_stage"], report["advice"] = _verdict(args, run_, report["ceilings"])
                # At its ceiling, a stage alone would take this share of the run's wall time.
                report["ceiling_shares"] = {stage: run_["samples_per_s"] / rate for stage, rate in
                                            _stage_ceilings(args, run_, report["ceilings"]).items()}
    finally:
        if temp:
            shutil.rmtree(cache_dir, ignore_errors=True)
    return report


def render(report: dict[str, Any]) -> str:
    r = report["run"]
    lat = r["batch_latency_ms"]
    lines = [
        f"planfetch speedtest: {report['rows']:,} objects of {report['index']}, {report['strategy']} plan,"
        f" {r['batches']:,} batches",
        f"  total time        {r['total_s']:.2f} s",
        f"  batches/s         {r['batches_per_s']:,.1f}",
        f"  samples/s         {r['samples_per_s']:,.0f}   ({r['mb_per_s']:,.1f} MB/s)",
        f"  batch latency ms  avg {lat['avg']:.1f}  p50 {lat['p50']:.1f}  p95 {lat['p95']:.1f}  p99 {lat['p99']:.1f}",
        f"  downloaded        {r['bytes_downloaded'] / 1e6:,.1f} MB in {r['downloads']:,} objects"
        f" ({r['retries']} retries, {r['failures']} failures)",
    ]
    if "ceilings" in report:
        c = report["ceilings"]
        net, twice = c["network"]["at_threads"], c["network"]["at_twice"]
        lines += [
            "  ceilings (same objects):",
            f"    network  raw GET {net['mb_per_s']:,.1f} MB/s at {net['concurrency']} in flight,"
            f" {twice['mb_per_s']:,.1f} MB/s at {twice['concurrency']}",
            f"    disk     {c['disk']['mb_per_s']:,.1f} MB/s writing files",
            f"    consumer {c['consumer']['samples_per_s']:,.0f} samples/s over local files",
            f"  limiting stage    {report['limiting_stage']}: {report['advice']}",
            "",
            bars.stage_chart("share of wall time each stage needs at its ceiling", report["ceiling_shares"],
                             report["limiting_stage"] if report["limiting_stage"] in report["ceiling_shares"] else None,
                             tty=bars.is_terminal(),
                             unmarked="every stage has room: the prefetch window limits the run"),
        ]
    if "trace" in report:
        lines.append(f"  timeline          {report['trace']} (trace-event JSON: open it in ui.perfetto.dev)")
    if "error" in report:
        lines.append(f"  ERROR             {report['error']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return report_main("planfetch speedtest", parser(), run, render, argv, (InSituError, OSError),
                       failed=lambda report: "error" in report)
