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


def run(args: argparse.Namespace, out: Any) -> int:
    from . import obstore_store, open_geometries
    from .records import ChunkRead, DecodedChunk
    from .transforms import fold_output

    transform = load_target(args.transform)
    options = {}
    if args.skip_signature:
        options["skip_signature"] = True
    if args.request_payer:
        options["request_payer"] = True
    store = obstore_store(args.url, **options)
    geom = open_geometries(store, [args.var])[args.var]
    if not 0 <= args.chunk < geom.n_chunks:
        raise UsageError(f"--chunk {args.chunk} is out of range [0, {geom.n_chunks}) for {args.var!r}")

    print(f"dataset      {args.url}  var {args.var}", file=out)
    print(f"sample axis  {geom.sample_axis}: {geom.n_samples} samples, {geom.sample_chunk_size}/chunk,"
          f" {geom.n_chunks} chunks", file=out)
    print(f"field        {_dims(geom.inner_shape)} {geom.dtype}, {geom.n_inner_chunks()} stored chunk(s) per"
          f" chunk", file=out)
    data = read_outer_chunk(store, geom, args.chunk)
    offset = args.chunk * geom.sample_chunk_size
    print(f"probed chunk {args.chunk}: {data.shape[0]} samples, source shape {data.shape},"
          f" {data.nbytes / 1e6:.1f} MB decoded", file=out)

    def make_chunk(buf: np.ndarray) -> DecodedChunk:
        return DecodedChunk(ChunkRead(geom.path, args.chunk), buf, offset)

    result = transform(make_chunk(data.copy()))
    result = result if result is not None else make_chunk(data)
    res = np.asarray(result.data)
    reshaped = res.shape[1:] != data.shape[1:]
    recast = res.dtype != data.dtype
    tags = [t for t, on in (("reshaped", reshaped), ("recast", recast)) if on]
    print(f"transform    {data.shape} {data.dtype} -> {res.shape} {res.dtype}"
          f"  ({', '.join(tags) if tags else 'shape- and dtype-preserving'})", file=out)
    if res.dtype.kind in "fc":
        bad = int(np.count_nonzero(~np.isfinite(res)))
        if bad:
            print(f"WARNING      {bad} non-finite output value(s)", file=out)

    failures = []
    if hasattr(transform, "output_inner"):
        shape, dtype = fold_output(geom.path, geom, [transform])
        if tuple(res.shape[1:]) == tuple(shape) and res.dtype == dtype:
            print(f"cacheable    declared output_inner {shape} {dtype} [OK]", file=out)
        else:
            print(f"cacheable    declared output_inner {shape} {dtype} vs actual {res.shape[1:]} {res.dtype}"
                  " [MISMATCH]", file=out)
            failures.append("output_inner disagrees with the transform's real output")
    elif reshaped or recast:
        failures.append("the transform reshapes or recasts but does not declare output_inner")
        print("cacheable    FAIL: the transform changes shape or dtype but does not declare output_inner",
              file=out)
    else:
        print("cacheable    cacheable as-is", file=out)

    if not args.no_gil_probe:
        threads = args.threads or min(4, os.cpu_count() or 1)
        if _gil_disabled():
            print("GIL probe    N/A (free-threaded build with the GIL off)", file=out)
        else:
            p = gil_probe(transform, make_chunk, data, threads, args.repeats, args.min_seconds)
            need = 0.6 * min(threads, os.cpu_count() or 1)
            verdict = "releases the GIL" if p["speedup"] >= need else "HOLDS the GIL"
            print(f"GIL probe    {threads} threads: speedup {p['speedup']:.2f}x (need >= {need:.2f}),"
                  f" {p['per_call_ms']:.2f} ms/call, {p['mb_s']:.0f} MB/s serial -- {verdict}", file=out)
            if p["speedup"] < need:
                failures.append("the transform holds the GIL (a per-element Python loop serializes decode)")
    if failures:
        print("FAIL: " + "; ".join(failures), file=out)
        return 1
    print("PASS: the transform is ready for chunk_transforms", file=out)
    return 0


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
