"""``insitubatch speedtest``: cold and warm epochs over a Zarr store, measured against the
store's raw-GET and decode ceilings on the same chunks, with the limiting stage named.

The run: ``--var`` arrays of the store at ``URL``, split by chunk, the train split's first
``--samples`` samples; a cold epoch (empty pool) then a warm one (what the budget keeps),
each with time to first batch, samples/s and MB/s, and the engine's own verdict
(``last_pass.limiting_stage``, the share of wall time it rests on, and its advice). Then,
on the same chunks: the raw-GET ceiling (the native store reading the stored objects at
``max_inflight``, no decode) and the decode ceiling (the stored bytes already in memory,
decoded by ``decode_threads`` threads), both in samples/s; ``describe()``'s memory estimate beside the measured peak
RSS; and with ``--sweep max_inflight=1,4,16,64`` (or ``decode_threads=...``) a cold epoch per
value, the smallest value within 5% of the best one recommended.

Exit codes: 0 measured; 1 the store failed; 2 usage (a bad argument, URL or variable).
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import resource
import time
from typing import Any

import numpy as np

from . import _ext, bars
from .cli import UsageError, integer_at_least, report_main
from .dataset import InSituDataset
from .errors import InSituError, InvalidArgumentError, NotFoundError
from .geometry import _native, open_geometries, open_hierarchy
from .splits import split_by_chunk
from .stores import store as open_store

CEILING_CHUNKS = 256  # the ceilings read at most this many sample chunks per variable
SWEEPABLE = ("max_inflight", "decode_threads", "block_chunks", "gather_threads", "prefetch_depth")
FLAT = 0.95  # a sweep value within this of the best one is "flat enough"


_positive = integer_at_least(1)


def _sweep(text: str) -> tuple[str, list[int]]:
    name, sep, values = text.partition("=")
    if not sep or name not in SWEEPABLE:
        raise argparse.ArgumentTypeError(f"--sweep wants NAME=V1,V2,... with NAME one of {', '.join(SWEEPABLE)},"
                                         f" got {text!r}")
    try:
        parsed = [int(v) for v in values.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--sweep {name}: values must be integers, got {values!r}") from None
    if not parsed or min(parsed) < 0 or (min(parsed) < 1 and name != "decode_threads"):
        raise argparse.ArgumentTypeError(f"--sweep {name}: values must be positive integers, got {values!r}")
    return name, parsed


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="insitubatch speedtest", description=__doc__.splitlines()[0].strip("`"))
    p.add_argument("url", help="the store: a path, file://, http(s)://, s3://, gs:// or az:// URL")
    p.add_argument("--var", action="append", required=True, help="an array to read (repeat for several)")
    p.add_argument("--samples", type=_positive,
                   help="train samples to read (default: 8 blocks of chunks, at least 1024, at most all)")
    p.add_argument("--batch-size", type=_positive, default=32)
    p.add_argument("--block-chunks", type=_positive, default=16)
    p.add_argument("--max-inflight", type=_positive)
    p.add_argument("--decode-threads", type=int, default=0, help="0: the engine's default")
    p.add_argument("--gather-threads", type=int, default=0)
    p.add_argument("--budget", type=_positive, metavar="BYTES", help="cache_budget_bytes (default: automatic)")
    p.add_argument("--transform", action="append", default=[], metavar="TARGET",
                   help="a chunk transform to include, module.path:attr or file.py:attr (repeatable)")
    p.add_argument("--sweep", type=_sweep, metavar="NAME=V1,V2,...", help=f"one of {', '.join(SWEEPABLE)}")
    p.add_argument("--no-ceilings", action="store_true")
    p.add_argument("--json", metavar="PATH", help="write the whole report as JSON ('-' for stdout)")
    p.add_argument("--trace", metavar="PATH",
                   help="record the cold epoch and write its timeline (trace-event JSON: ui.perfetto.dev opens it)")
    g = p.add_argument_group("store options (as store() takes them)")
    g.add_argument("--skip-signature", action="store_true", help="anonymous requests (public buckets)")
    g.add_argument("--endpoint", help="an S3-compatible or GCS endpoint URL")
    g.add_argument("--region")
    g.add_argument("--request-payer", action="store_true")
    g.add_argument("--option", action="append", default=[], metavar="KEY=VALUE", help="any other store option")
    return p


def _store(args: argparse.Namespace) -> Any:
    options: dict[str, Any] = {}
    if args.skip_signature:
        options["skip_signature"] = True
    if args.request_payer:
        options["request_payer"] = True
    if args.endpoint:
        options["endpoint"] = args.endpoint
    if args.region:
        options["region"] = args.region
    for kv in args.option:
        key, sep, value = kv.partition("=")
        if not sep or not key:
            raise UsageError(f"--option wants KEY=VALUE, got {kv!r}")
        options[key] = value
    return open_store(args.url, **options)


def _dataset(args: argparse.Namespace, store: Any, geoms: Any, manifest: Any, **overrides: Any) -> InSituDataset:
    kwargs = dict(batch_size=args.batch_size, block_chunks=args.block_chunks, max_inflight=args.max_inflight,
                  decode_threads=args.decode_threads, gather_threads=args.gather_threads,
                  cache_budget_bytes=args.budget, chunk_transforms=args.transforms)
    if args.trace is not None and not overrides:  # the measured epochs, not a sweep's
        kwargs["trace"] = True
    kwargs.update(overrides)
    return InSituDataset(store, manifest, geoms, **kwargs)


def _epoch(ds: InSituDataset, epoch: int) -> dict[str, Any]:
    ds.set_epoch(epoch)
    t0 = time.perf_counter()
    ttfb, nbytes, samples = None, 0, 0
    for batch in ds.train:
        if ttfb is None:
            ttfb = time.perf_counter() - t0
        samples += len(batch.sample_indices)
        nbytes += sum(a.nbytes for a in batch.arrays.values())
    wall = time.perf_counter() - t0
    p = ds.last_pass
    assert p is not None  # set as the pass ended
    return {"epoch": epoch, "samples": samples, "wall_s": wall, "ttfb_s": ttfb or 0.0,
            "samples_per_s": samples / wall, "mb_per_s": nbytes / wall / 1e6,
            "stored_mb_read": p.bytes_read / 1e6, "cache_hits": p.cache_hits, "cache_misses": p.cache_misses,
            "limiting_stage": p.limiting_stage, "advice": p.advice, "shares": p.shares,
            "retries": p.retry.retries}


def _verdict(e: dict[str, Any]) -> str:
    """``decode (87% of wall)``: the stage and the share its verdict rests on."""
    stage = e["limiting_stage"]
    shares = e["shares"]
    if stage == "unknown":  # the two largest shares, which were too close to call
        top = sorted(shares.items(), key=lambda kv: kv[1], reverse=True)[:2]
        return "unknown (" + ", ".join(f"{s} {100 * v:.0f}%" for s, v in top) + ")"
    return f"{stage} ({100 * shares[stage]:.0f}% of wall)"


def _chunk_coords(geom: Any, chunk_ids: np.ndarray) -> list[list[int]]:
    """The stored chunks' coordinates holding sample chunks ``chunk_ids`` (every inner chunk)."""
    axis = geom.sample_axis
    counts = [math.ceil(s / c) for s, c in zip(geom.shape, geom.chunks)]
    inner = [range(n) for i, n in enumerate(counts) if i != axis]
    out = []
    for c in chunk_ids.tolist():
        for rest in itertools.product(*inner):
            coords = list(rest)
            coords.insert(axis, int(c))
            out.append(coords)
    return out


def _ceilings(args: argparse.Namespace, store: Any, geoms: Any, ds: InSituDataset) -> dict[str, Any]:
    native = _native(store)
    hierarchy = open_hierarchy(store)
    ids = ds._planner.chunk_ids("train")[:CEILING_CHUNKS]
    spc = ds.manifest.sample_chunk_size
    assert ds.last_pass is not None  # the epochs ran first
    depths = ds.last_pass.depths  # what the engine ran with
    inflight, threads = depths.max_inflight, depths.decode_threads
    per_var, get_s_per_sample, decode_s_per_sample = {}, 0.0, 0.0
    for label, geom in geoms.items():
        array = hierarchy.open_array(geom.path)
        coords = _chunk_coords(geom, ids)
        keys = [array.chunk_key(c) for c in coords]
        _ext.read_throughput(native, keys[: min(8, len(keys))], inflight, 1)  # connections warm
        get_s, stored = _ext.read_throughput(native, keys, inflight, 1)
        dec_s, decoded, _ = _ext.decode_throughput(array, native, coords, threads)
        samples = len(ids) * spc
        per_var[label] = {"chunks": len(coords), "stored_mb": stored / 1e6, "decoded_mb": decoded / 1e6,
                          "get_mb_per_s": stored / get_s[0] / 1e6, "get_samples_per_s": samples / get_s[0],
                          "decode_mb_per_s": decoded / dec_s / 1e6, "decode_samples_per_s": samples / dec_s}
        get_s_per_sample += get_s[0] / samples
        decode_s_per_sample += dec_s / samples
    return {"max_inflight": inflight, "decode_threads": threads, "variables": per_var,
            "get_samples_per_s": 1 / get_s_per_sample, "decode_samples_per_s": 1 / decode_s_per_sample}


def _sweep_run(args: argparse.Namespace, store: Any, geoms: Any, manifest: Any) -> dict[str, Any]:
    name, values = args.sweep
    rows = []
    for v in values:
        ds = _dataset(args, store, geoms, manifest, **{name: v})
        try:
            rows.append({name: v, **_epoch(ds, 0)})
        finally:
            ds.close()
    best = max(r["samples_per_s"] for r in rows)
    recommended = min((r for r in rows if r["samples_per_s"] >= FLAT * best), key=lambda r: r[name])[name]
    return {"parameter": name, "rows": rows, "recommended": recommended}


def run(args: argparse.Namespace) -> dict[str, Any]:
    from .check_transform import load_target

    args.transforms = [load_target(t) for t in args.transform]  # a bad target: UsageError
    try:
        store = _store(args)
        geoms = open_geometries(store, args.var)
    except (InvalidArgumentError, NotFoundError) as exc:
        raise UsageError(str(exc)) from None
    first = next(iter(geoms.values()))
    spc = first.sample_chunk_size
    n = args.samples or min(first.n_samples, max(1024, 8 * args.block_chunks * spc))
    manifest = split_by_chunk(first, fractions=(1.0, 0.0, 0.0), sample_range=(0, min(n, first.n_samples)))
    ds = _dataset(args, store, geoms, manifest)
    try:
        described = ds.describe()
        report: dict[str, Any] = {"url": args.url, "variables": list(geoms), "samples": manifest.n_samples,
                                  "config": {k: described["config"][k] for k in
                                             ("batch_size", "block_chunks", "max_inflight", "cache_budget_bytes")},
                                  "memory_estimate_bytes": described["memory"]["estimated_peak_bytes"]}
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        report["cold"] = _epoch(ds, 0)
        if args.trace is not None:
            assert ds.last_pass is not None
            ds.last_pass.save_trace(args.trace)
            report["trace"] = args.trace
        report["warm"] = _epoch(ds, 1)
        report["samples"] = report["cold"]["samples"]
        report["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        report["rss_before_bytes"] = rss0
        if not args.no_ceilings:
            report["ceilings"] = c = _ceilings(args, store, geoms, ds)
            cold = report["cold"]["samples_per_s"]
            report["cold_over_get"] = cold / c["get_samples_per_s"]
            report["cold_over_decode"] = cold / c["decode_samples_per_s"]
    finally:
        ds.close()
    if args.sweep:
        report["sweep"] = _sweep_run(args, store, geoms, manifest)
    return report


def render(r: dict[str, Any]) -> str:
    def epoch_line(name: str, e: dict[str, Any]) -> str:
        return (f"  {name:<5} {e['samples_per_s']:>10,.0f} samples/s  {e['mb_per_s']:>9,.1f} MB/s"
                f"  ttfb {e['ttfb_s'] * 1000:>7.1f} ms  hits {e['cache_hits']}/{e['cache_hits'] + e['cache_misses']}"
                f"  limited by {_verdict(e)}")

    lines = [f"insitubatch speedtest: {', '.join(r['variables'])} of {r['url']}, {r['samples']:,} train samples,"
             f" batch {r['config']['batch_size']}, block_chunks {r['config']['block_chunks']},"
             f" max_inflight {r['config']['max_inflight']}",
             epoch_line("cold", r["cold"]), epoch_line("warm", r["warm"]),
             f"  advice (cold): {r['cold']['advice']}",
             f"  memory: describe() estimates {r['memory_estimate_bytes'] / 2**20:,.1f} MiB; peak RSS"
             f" {r['peak_rss_bytes'] / 2**20:,.1f} MiB (process, {r['rss_before_bytes'] / 2**20:,.1f} MiB before"
             " the epochs)"]
    if "trace" in r:
        lines.append(f"  timeline of the cold epoch: {r['trace']} (trace-event JSON: open it in ui.perfetto.dev)")
    if "ceilings" in r:
        c = r["ceilings"]
        lines += [f"  ceilings on the same chunks: raw GET {c['get_samples_per_s']:,.0f} samples/s at"
                  f" {c['max_inflight']} in flight; decode {c['decode_samples_per_s']:,.0f} samples/s on"
                  f" {c['decode_threads']} threads",
                  f"  cold epoch / raw GET {r['cold_over_get']:.2f}; cold epoch / decode {r['cold_over_decode']:.2f}"]
    if "sweep" in r:
        s = r["sweep"]
        name = s["parameter"]
        lines.append(f"  sweep {name}:")
        for row in s["rows"]:
            mark = "  <- recommended" if row[name] == s["recommended"] else ""
            lines.append(f"    {name}={row[name]:<6} {row['samples_per_s']:>10,.0f} samples/s  ttfb"
                         f" {row['ttfb_s'] * 1000:>7.1f} ms  limited by {_verdict(row)}{mark}")
    cold = r["cold"]
    stage = cold["limiting_stage"]
    lines += ["", bars.stage_chart("share of wall time, cold epoch", cold["shares"], None if stage == "unknown" else stage,
                                   tty=bars.is_terminal(), unmarked="no single stage dominated")]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return report_main("insitubatch speedtest", parser(), run, render, argv, (InSituError, OSError))
