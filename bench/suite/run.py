"""Benchmark suite: insitubatch against its peers and the ceilings, all in one run.

For each dataset (datasets.py) every engine (engines.py) runs in its own fresh process,
swept peers once per DataLoader worker count; this process samples the peak RSS of each
engine's whole process tree, computes the ratios and the targets, and writes the results
(report.py).

    scripts/bench.sh                    # set up, then the full suite (docs/benchmarks.md)
    .venv/bin/python bench/suite/run.py [--samples 2048] [--field 181x360] [--datasets ...]
    .venv/bin/python bench/suite/run.py --smoke --out /tmp/suite   # tiny, under a minute

Full runs write bench/results/suite.json, docs/img/suite_*.png and the section of
docs/benchmarks.md between the suite markers; --smoke writes only under --out.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import pathlib
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

import datasets  # noqa: E402
import report  # noqa: E402

SWEPT = ("xbatcher", "mapstyle")
ALL_ENGINES = ("ours", "ours+torch", "original", "xbatcher", "mapstyle", "naive", "inmem", "decode")
ORIG_VENV = ROOT / ".venv-orig"
PAGE = os.sysconf("SC_PAGE_SIZE")


# -- the process tree's memory ---------------------------------------------------------------
def _tree(pid: int) -> list[int]:
    """pid and all its descendants (via /proc/<pid>/task/*/children: no scan of /proc)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        for children in glob.glob(f"/proc/{p}/task/*/children"):
            try:
                todo.extend(int(c) for c in open(children).read().split())
            except OSError:
                pass
    return out


def _rss(pids: list[int]) -> int:
    total = 0
    for p in pids:
        try:
            total += int(open(f"/proc/{p}/statm").read().split()[1]) * PAGE
        except (OSError, IndexError, ValueError):
            pass  # exited between the listing and the read
    return total


def run_child(python: str, cfg: dict, timeout: float, period: float = 0.02) -> dict:
    """Runs one engine process; returns its JSON, the tree's sampled peak RSS and the TTFB."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.monotonic()
        proc = subprocess.Popen([python, str(HERE / "engines.py"), json.dumps(cfg)], stdout=out, stderr=err,
                                cwd=ROOT, start_new_session=True)
        peak = 0
        stop = threading.Event()

        def sample() -> None:
            nonlocal peak
            while not stop.is_set():
                peak = max(peak, _rss(_tree(proc.pid)))
                stop.wait(period)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the engine and the workers it started
            proc.wait()
            rc = "timeout"
        stop.set()
        sampler.join()
        try:  # workers a crashed engine left behind
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out.seek(0)
        err.seek(0)
        lines = [ln for ln in out.read().splitlines() if ln.startswith("{")]
        if rc != 0 or not lines:
            tail = err.read()[-2000:]
            return {"failed": f"exit {rc}: {tail.strip().splitlines()[-1] if tail.strip() else 'no output'}",
                    "stderr_tail": tail}
        res = json.loads(lines[-1])
    res["peak_rss"] = max(peak, res.get("vm_hwm", 0))
    res["wall_s"] = time.monotonic() - t0
    res["ttfb_s"] = res["first_batch_t"] - t0 if res.get("first_batch_t") else None
    return res


# -- rows -----------------------------------------------------------------------------------
def _rate(epochs: list[dict]) -> tuple[float, float]:
    """(samples/s of the median-time timed epoch, its seconds); epoch 0 (warm-up) dropped."""
    timed = [e for e in epochs if e["epoch"] > 0] or epochs
    rates = sorted(e["samples"] / e["s"] for e in timed if e["s"] > 0)
    return statistics.median(rates), statistics.median(e["s"] for e in timed)


def make_row(spec: datasets.Spec, engine: str, workers: int | None, res: dict) -> dict:
    row = {"dataset": spec.name, "engine": engine, "workers": workers}
    if "skipped" in res or "failed" in res:
        row.update({k: res[k] for k in ("skipped", "failed", "stderr_tail") if k in res})
        return row
    rate, secs = _rate(res["epochs"])
    row.update({
        "samples_s": rate, "mb_s": rate * spec.sample_bytes / 1e6, "epoch_s": secs,
        "epochs": res["epochs"], "ttfb_s": res["ttfb_s"], "peak_rss_mib": res["peak_rss"] / 2**20,
        "wall_s": res["wall_s"],
        "check": "; ".join(res["errors"]) or "ok",
        "full_epochs": all(e.get("complete", True) for e in res["epochs"]),
    })
    timed = [e for e in res["epochs"] if e["epoch"] > 0 and "hits" in e]
    if timed:
        hits = sum(e["hits"] for e in timed)
        row["hit_rate"] = hits / max(1, hits + sum(e["misses"] for e in timed))
    if "epochs_cleared" in res:
        row["samples_s_cleared"], _ = _rate(res["epochs_cleared"])
    for k in ("decode_threads", "max_inflight", "version", "frames", "threads"):
        if k in res:
            row[k] = res[k]
    return row


def orig_python() -> tuple[str | None, str]:
    """.venv-orig's python, or None and why the original cannot run."""
    py = ORIG_VENV / "bin" / "python"
    if py.exists():
        return str(py), ""
    if find_python312() is None:
        return None, "skipped: no Python 3.12 found (the PyPI insitubatch 0.2.0 needs Python >= 3.12)"
    return None, "skipped: .venv-orig is missing (run scripts/bench.sh --setup-only)"


def find_python312() -> str | None:
    """Mirrors scripts/bench.sh: $ORIG_PYTHON, pyenv's 3.12.*, then python3.12 on PATH."""
    cands = [os.environ.get("ORIG_PYTHON", "")]
    cands += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.12*/bin/python3.12")), reverse=True)
    cands.append(shutil.which("python3.12") or "")
    for c in cands:
        if c and subprocess.run([c, "-c", "import sys; assert sys.version_info[:2] == (3, 12)"],
                                capture_output=True).returncode == 0:
            return c
    return None


def versions(orig: str | None) -> dict:
    from importlib import metadata

    v = {"python": platform.python_version()}
    for pkg in ("insitubatch", "zarr", "numpy", "torch", "xarray", "xbatcher", "dask", "matplotlib"):
        try:
            v[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            v[pkg] = None
    v["original_insitubatch"] = None
    if orig:
        out = subprocess.run([orig, "-c", "import platform, importlib.metadata as m; "
                              "print(m.version('insitubatch'), m.version('zarr'), platform.python_version())"],
                             capture_output=True, text=True)
        if out.returncode == 0:
            ver, zarr_v, py = out.stdout.split()
            v.update(original_insitubatch=ver, original_zarr=zarr_v, original_python=py)
    return v


def machine() -> dict:
    cpu = "unknown"
    try:
        cpu = next(ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    from insitubatch import _ext  # the engine's figure: a container's limit where lower than RAM

    mem = _ext.machine_memory_bytes()
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(mem / 2**30, 1),
            "system": f"{platform.system()} {platform.release()}"}


# -- the run --------------------------------------------------------------------------------
def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=None, help="samples per dataset (2048; smoke 64)")
    p.add_argument("--field", default=None, help="HxW of a sample (181x360; smoke 16x32); fat_c16 uses (2H-1)x2W")
    p.add_argument("--datasets", default=None, help="comma list (all; smoke era5_c4,shard16)")
    p.add_argument("--engines", default=",".join(ALL_ENGINES))
    p.add_argument("--workers", default=None, help="DataLoader worker counts for the swept peers (0,1,2,4; smoke 0,1)")
    p.add_argument("--epochs", type=int, default=None, help="timed epochs after the warm-up one, median (3; smoke 1)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--block-chunks", type=int, default=16)
    p.add_argument("--max-inflight", type=int, default=None, help="default: ours' default, for ours and original")
    p.add_argument("--naive-budget", type=float, default=None,
                   help="seconds per naive epoch, rate over what it did (10; smoke 2)")
    p.add_argument("--peer-budget", type=float, default=0.0,
                   help="seconds per epoch of the DataLoader peers, rate over what they did (default 0: whole epochs)")
    p.add_argument("--mp-context", default=None, choices=("fork", "forkserver", "spawn"),
                   help="DataLoader worker start method (default: the platform's)")
    p.add_argument("--decode-repeats", type=int, default=None, help="raw decode ceiling: best of (5; smoke 1)")
    p.add_argument("--timeout", type=float, default=None, help="seconds per engine process (1800; smoke 120)")
    p.add_argument("--out", default=None, help="results folder (default bench/results)")
    p.add_argument("--data", default=None, help="stores folder (default bench/data/suite; --smoke: OUT/data)")
    p.add_argument("--no-docs", action="store_true",
                   help="plots into OUT/img, docs/benchmarks.md left alone (implied by --smoke)")
    p.add_argument("--smoke", action="store_true",
                   help="tiny sizes, writes only under --out (default: a new temp folder)")
    args = p.parse_args(argv)
    full = {"samples": 2048, "field": "181x360", "datasets": ",".join(datasets.all_specs(1, (2, 2))),
            "workers": "0,1,2,4", "epochs": 3, "naive_budget": 10.0, "decode_repeats": 5, "timeout": 1800}
    smoke = {"samples": 64, "field": "16x32", "datasets": "era5_c4,shard16", "workers": "0,1", "epochs": 1,
             "naive_budget": 2.0, "decode_repeats": 1, "timeout": 120}
    for k, v in (smoke if args.smoke else full).items():  # what the command line left unset
        if getattr(args, k) is None:
            setattr(args, k, v)
    if args.smoke:
        args.no_docs = True
        args.out = args.out or tempfile.mkdtemp(prefix="suite-smoke-")
    return args


def main(argv=None) -> int:
    args = parse(argv)
    from insitubatch.dataset import DEFAULT_MAX_INFLIGHT

    out = pathlib.Path(args.out) if args.out else ROOT / "bench" / "results"
    data = pathlib.Path(args.data) if args.data else (out / "data" if args.smoke else datasets.DATA)
    out.mkdir(parents=True, exist_ok=True)
    field = tuple(int(v) for v in args.field.split("x"))
    specs = datasets.all_specs(args.samples, field)
    names = args.datasets.split(",")
    unknown = [n for n in names if n not in specs] + [e for e in args.engines.split(",") if e not in ALL_ENGINES]
    if unknown:
        raise SystemExit(f"unknown dataset or engine: {unknown}")
    engines = [e for e in ALL_ENGINES if e in args.engines.split(",")]
    workers = [int(w) for w in args.workers.split(",")]
    max_inflight = args.max_inflight or DEFAULT_MAX_INFLIGHT
    threads = os.cpu_count() or 1
    orig, orig_why = orig_python()
    base = {"samples": args.samples, "batch_size": args.batch_size, "block_chunks": args.block_chunks,
            "max_inflight": max_inflight, "epochs": args.epochs, "naive_budget_s": args.naive_budget,
            "decode_repeats": args.decode_repeats, "threads": threads, "mp_context": args.mp_context,
            "peer_budget_s": args.peer_budget}

    rows = []
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="suite-frames-"))
    try:
        for name in names:
            spec = specs[name]
            t = time.perf_counter()
            path = datasets.ensure(spec, data)
            print(f"[{name}] {spec.layout}, {args.samples} samples of {spec.field[0]}x{spec.field[1]}"
                  f" ({time.perf_counter() - t:.1f} s to ensure)", flush=True)
            for engine in engines:
                for w in (workers if engine in SWEPT else [None]):
                    cfg = dict(base, engine=engine, path=str(path), workers=w or 0)
                    python = sys.executable
                    if engine == "original":
                        if orig is None:
                            rows.append(make_row(spec, engine, w, {"skipped": orig_why}))
                            print(f"  {engine}: {orig_why}", flush=True)
                            continue
                        python = orig
                    if engine == "decode":
                        files, cfg["decoded"] = datasets.ceiling_frames(spec, path, tmp / name)
                        cfg["frames"] = str(tmp / f"{name}.frames")
                        pathlib.Path(cfg["frames"]).write_text("\n".join(files))
                    datasets.warm_page_cache(path)
                    row = make_row(spec, engine, w, run_child(python, cfg, args.timeout))
                    row["stored_mib"] = datasets.stored_bytes(path) / 2**20
                    rows.append(row)
                    print("  " + report.row_line(row), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    result = {
        "machine": machine(), "versions": versions(orig), "threads": threads,
        "command": ("scripts/bench.sh " + " ".join(argv if argv is not None else sys.argv[1:])).strip(),
        "args": vars(args) | {"max_inflight": max_inflight},
        "datasets": {n: {"layout": specs[n].layout, "shape": specs[n].shape, "sample_bytes": specs[n].sample_bytes}
                     for n in names},
        "rows": rows,
    }
    result["summary"] = report.summarize(result)
    (out / "suite.json").write_text(json.dumps(result, indent=2))
    img = out / "img" if args.no_docs else ROOT / "docs" / "img"
    pngs = report.plots(result, img)
    section = report.markdown(result, [os.path.relpath(p, ROOT / "docs") for p in pngs])
    (out / "suite.md").write_text(section)
    if not args.no_docs:
        report.update_doc(ROOT / "docs" / "benchmarks.md", section)
    print(f"\nwrote {out / 'suite.json'}, {out / 'suite.md'} and {len(pngs)} plots in {img}"
          + ("" if args.no_docs else "; updated docs/benchmarks.md"))
    bad = [r for r in rows if r.get("failed") or r.get("check", "ok") != "ok"]
    for r in bad:
        print(f"FAILED: {r['dataset']} {r['engine']} workers={r['workers']}: {r.get('failed') or r['check']}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
