"""insitubatch-check-transform: run a chunk transform on one chunk of a real store before
training — geometry report, declared-vs-actual output_inner, and a GIL-release verdict.

Exit codes: 0 all checks passed; 1 a check failed; 2 usage or load error (stderr "error: ...").
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import os
import pathlib
import statistics
import sys
import sysconfig
import threading
import time
from typing import Any, Callable, Sequence

import numpy as np

from .cli import UsageError  # a bad argument or an unloadable target: exit code 2


def load_target(target: str) -> Callable[..., Any]:
    """``module.path:attr`` or ``path/to/file.py:attr``; a class is instantiated with no
    arguments."""
    if ":" not in target:
        raise UsageError(f"--transform {target!r} must look like module.path:attr or path/to/file.py:attr")
    where, attr = target.rsplit(":", 1)
    if not where or not attr:
        raise UsageError(f"--transform {target!r} must look like module.path:attr or path/to/file.py:attr")
    if where.endswith(".py") or os.sep in where:
        path = pathlib.Path(where)
        if not path.is_file():
            raise UsageError(f"transform file not found: {where}")
        spec = importlib.util.spec_from_file_location(f"_insitu_check_{path.stem}", path)
        if spec is None or spec.loader is None:
            raise UsageError(f"cannot load {where} as a module")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            raise UsageError(f"cannot load {where}: {type(exc).__name__}: {exc}") from exc
    else:
        try:
            module = importlib.import_module(where)
        except ImportError as exc:
            raise UsageError(f"cannot import module {where!r}: {exc}") from exc
    try:
        obj = getattr(module, attr)
    except AttributeError:
        raise UsageError(f"{where} has no attribute {attr!r}") from None
    if inspect.isclass(obj):
        try:
            obj = obj()
        except TypeError as exc:
            raise UsageError(f"{attr} is a class that needs arguments ({exc}); define a configured"
                             f" module-level instance and point --transform at it") from exc
    if not callable(obj):
        raise UsageError(f"{target} is not callable")
    fn: Callable[..., Any] = obj
    return fn


def read_outer_chunk(store: Any, geom: Any, chunk: int) -> np.ndarray:
    """Outer chunk ``chunk`` of ``geom``, sample-first and unpadded (all field tiles)."""
    from .geometry import read_chunk

    out = np.empty(geom.slot_shape(chunk), dtype=geom.dtype)
    for inner in geom.inner_coords():
        tile = read_chunk(store, geom.path, geom.physical_chunk_coord(chunk, inner))
        tile = np.moveaxis(tile, geom.sample_axis, 0)
        dst, src = geom.tile_placement(chunk, inner)
        out[dst] = tile[src]
    return out


def gil_probe(transform: Callable[..., Any], make_chunk: Callable[..., Any], pristine: np.ndarray, threads: int, repeats: int,
              min_seconds: float) -> dict[str, float]:
    """Serial vs parallel timing of the transform; speedup = threads x serial / parallel."""
    chunk = make_chunk(pristine.copy())
    t0 = time.perf_counter()
    transform(chunk)  # warm-up
    per_call = max(time.perf_counter() - t0, 1e-6)
    iters = max(1, int(np.ceil(min_seconds / per_call)))

    def work(buf: np.ndarray, n: int) -> None:
        for _ in range(n):
            np.copyto(buf, pristine)
            transform(make_chunk(buf))

    serial, parallel = [], []
    for _ in range(repeats):
        buf = pristine.copy()
        t0 = time.perf_counter()
        work(buf, iters)
        serial.append(time.perf_counter() - t0)
        bufs = [pristine.copy() for _ in range(threads)]
        workers = [threading.Thread(target=work, args=(b, iters)) for b in bufs]
        t0 = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        parallel.append(time.perf_counter() - t0)
    s, p = statistics.median(serial), statistics.median(parallel)
    mb = pristine.nbytes / 2**20
    return {"iters": iters, "serial_s": s, "parallel_s": p, "speedup": threads * s / p if p > 0 else 0.0,
            "per_call_ms": 1000 * s / iters, "mb_s": mb * iters / s if s > 0 else 0.0}


def _gil_disabled() -> bool:
    return bool(sysconfig.get_config_var("Py_GIL_DISABLED")) and not getattr(sys, "_is_gil_enabled", lambda: True)()


def _dims(shape: Sequence[int]) -> str:
    return "x".join(str(s) for s in shape) or "scalar"


def _load_transform(target: str) -> Callable[..., Any]:
    """:func:`load_target`, with every failure worded as the original CLI words it (scripts
    parse ``error: could not load --transform '...': ...``)."""
    try:
        return load_target(target)
    except UsageError as exc:
        raise UsageError(f"could not load --transform {target!r}: {exc}") from exc


def _verdict_line(ok: bool) -> str:
    return f"\n{'PASS' if ok else 'FAIL'}: chunk_transform checks {'all passed' if ok else 'found problems (see above)'}."


def run(args: argparse.Namespace, out: Any) -> int:
    """The report, line for line in the original CLI's words (scripts grep them)."""
    from . import obstore_store, open_geometries
    from .records import ChunkRead, DecodedChunk
    from .transforms import ScopedTransform, fold_output

    options = {}
    if args.skip_signature:
        options["skip_signature"] = True
    if args.request_payer:
        options["request_payer"] = True
    store = obstore_store(args.url, **options)
    transform = _load_transform(args.transform)
    geom = open_geometries(store, [args.var])[args.var]
    if not 0 <= args.chunk < geom.n_chunks:
        raise UsageError(f"--chunk {args.chunk} out of range [0, {geom.n_chunks})")

    slot = tuple(geom.slot_shape(args.chunk))
    print(f"dataset: {args.url}  var={args.var}", file=out)
    print(f"  sample axis : {geom.n_samples} samples, {geom.sample_chunk_size}/chunk, {geom.n_chunks} chunks",
          file=out)
    print(f"  inner shape : {tuple(geom.inner_shape)}  dtype={geom.dtype}"
          f"  inner tiles/chunk={geom.n_inner_chunks()}", file=out)
    decoded_mb = int(np.prod(slot)) * geom.dtype.itemsize / 1e6
    print(f"  chunk {args.chunk:<5}: {slot[0]} samples -> source shape {slot} = {decoded_mb:.1f} MB decoded",
          file=out)
    # A scoped transform that does not name this variable never runs on it in the engine:
    # checking it here would report on something training will not do.
    if isinstance(transform, ScopedTransform):
        scope = sorted(transform.arrays)
        if geom.path not in transform.arrays:
            print(f"\nFAIL: this transform is scoped with applies({scope}), which does not include"
                  f" {geom.path!r}. The engine would skip it for this variable entirely. Re-run with --var"
                  f" one of {scope}.", file=out)
            return 1
        print(f"  scope       : applies to {scope}", file=out)

    data = read_outer_chunk(store, geom, args.chunk)
    offset = args.chunk * geom.sample_chunk_size

    def make_chunk(buf: np.ndarray) -> DecodedChunk:
        return DecodedChunk(ChunkRead(geom.path, args.chunk), buf, offset)

    result = transform(make_chunk(data.copy()))
    result = result if result is not None else make_chunk(data)
    res = np.asarray(result.data)
    reshaped = res.shape[1:] != data.shape[1:]
    recast = res.dtype != data.dtype
    tags = [t for t, on in (("reshaped", reshaped), ("recast", recast)) if on]
    print("\ntransform output:", file=out)
    print(f"  {data.shape} {data.dtype}  ->  {res.shape} {res.dtype}", file=out)
    print(f"  {'  '.join(tags) if tags else 'shape- and dtype-preserving'}", file=out)
    if res.dtype.kind in "fc":
        bad = int(np.count_nonzero(~np.isfinite(res)))
        if bad:
            print(f"  WARNING: output has {bad} non-finite (NaN/inf) values", file=out)

    ok = True
    print("\ncacheability (declared output geometry):", file=out)
    if hasattr(transform, "output_inner"):
        shape, dtype = fold_output(geom.path, geom, [transform])
        shape, dtype = tuple(shape), np.dtype(dtype)
        match = tuple(res.shape[1:]) == shape and res.dtype == dtype
        ok = match
        print(f"  declares output_inner -> {shape} {dtype}  [{'OK' if match else 'MISMATCH'}]", file=out)
        if not match:  # the original ended "-- ChunkPool._persist would raise." (docs/limits.md)
            print(f"  FAIL: declared {shape}/{dtype} != actual {tuple(res.shape[1:])}/{res.dtype} -- the"
                  " engine would raise InvalidArgumentError on this chunk, with or without a cache.", file=out)
    elif reshaped or recast:
        ok = False
        print("  FAIL: this transform reshapes/recasts but does not declare output_inner. The cache cannot"
              " size its slot -> add output_inner(geom) -> (inner_shape, dtype)"
              " (see insitubatch.transforms.ReshapingChunkTransform).", file=out)
    else:
        print("  shape/dtype-preserving, no output_inner needed -> cacheable as-is.", file=out)

    if args.no_gil_probe:
        print("\nGIL-release probe: skipped (--no-gil-probe).", file=out)
        print(_verdict_line(ok), file=out)
        return 0 if ok else 1
    threads = args.threads or min(4, os.cpu_count() or 1)
    print(f"\nGIL-release probe (thread-scaling, {threads} threads):", file=out)
    p = gil_probe(transform, make_chunk, data, threads, args.repeats, args.min_seconds)
    print(f"  per-call {p['per_call_ms']:.2f} ms  (~{p['mb_s']:.0f} MB/s)  iters={int(p['iters'])}"
          f"  serial {p['serial_s']:.3f}s  parallel {p['parallel_s']:.3f}s", file=out)
    if _gil_disabled():
        print(f"  speedup {p['speedup']:.2f}x -- GIL-release: N/A on a free-threaded build (Python loops also"
              " scale; check per-call latency for vectorization).", file=out)
    else:
        need = 0.6 * min(threads, os.cpu_count() or 1)
        if p["speedup"] >= need:
            print(f"  speedup {p['speedup']:.2f}x (>= {need:.2f}) -> releases the GIL (vectorized).", file=out)
        else:
            ok = False
            print(f"  FAIL: speedup {p['speedup']:.2f}x (< {need:.2f}) -> appears to HOLD the GIL. A pure-Python"
                  " per-element transform serializes the decode pool and kills IO overlap; rewrite as"
                  " vectorized numpy.", file=out)
    print(_verdict_line(ok), file=out)
    return 0 if ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="insitubatch-check-transform", description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("--var", required=True)
    parser.add_argument("--transform", required=True, help="module.path:attr or path/to/file.py:attr")
    parser.add_argument("--chunk", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0, help="0 = min(4, cpus)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--min-seconds", type=float, default=0.3)
    parser.add_argument("--no-gil-probe", action="store_true")
    parser.add_argument("--skip-signature", action="store_true")
    parser.add_argument("--request-payer", action="store_true")
    args = parser.parse_args(argv)
    try:
        return run(args, sys.stdout)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (KeyError, FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
