"""Cold start side by side: time to the first batch of a shuffled epoch, from opening the store.

For zarr v3 stores of one float32 variable (`--samples` x `--field`, zstd level 3,
consolidated metadata, written by zarr-python) at 1, 4 and 16 samples per chunk and sharded
(16 samples per shard, inner chunks of 1 sample), each engine runs one shuffled epoch in a
fresh process (files in the page cache; batch 32, `block_chunks` 16):

* ours        -- InSituDataset at its defaults (max_inflight, decode threads);
* tensorstore -- a block loop a user writes by hand: per block of 16 stored chunks (shards),
                 one read future per chunk, then the block's samples shuffled into batches
                 of 32 (a block's last rows short of a batch completed from the next block);
* zarr        -- the same loop through zarr-python (`oindex` of the block's samples);
* zarrs       -- the same with zarr-python's codec pipeline set to zarrs (when installed);
* original    -- the PyPI insitubatch 0.2.0 in .venv-orig (scripts/bench.sh --setup-only);
* floor       -- read and decode only: the stored frames of the first block (of the first
                 blocks, where one holds fewer samples than a batch), each read from the page
                 cache and zstd-decoded by one of `--threads` threads into its own place in
                 one fresh buffer, as a cold process must at least do (its "epoch", the decode
                 ceiling, reads and decodes every frame the same way into a ring of two
                 blocks' chunks, reused as it wraps: what a block-shuffled epoch holds).

Per run: time to first batch (from just before the store is opened: imports excluded, numpy's
lazily imported random module included, which the block loops' shuffles would otherwise load
inside the timed window), epoch
samples/s (the whole cold epoch, first batch included) and process CPU seconds per decoded
GB (every thread of the process; the floor's: its epoch, reads included). Ours and the
original then run a second pass in the same process (epoch 1: a training run's steady
state), timed and charged the same way. The floor's epoch is the machine's own limit (every
frame read from the page cache and decoded natively by the same threads, no Python, no
batch): each rate and CPU figure is also given as a ratio to it.
Rounds interleave stores and engines, the table gives medians. In the first
`--check-rounds` rounds every engine then runs the same epoch once more, cold, copying each
sample out, and the copies are compared sample by sample with zarr-python's values (kept
out of the timed epoch: a copy of every sample costs a tenth of an epoch).

    .venv/bin/python bench/coldstart_bench.py [--samples 1024] [--field 181x360] [--rounds 3]

Writes bench/results/coldstart.json (or --json) and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import time
import zlib

import numpy as np
import numpy.random  # noqa: F401  (numpy loads it on first use: never inside a timed window)

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
VAR = "t2m"
LAYOUTS = ("c1", "c4", "c16", "shard16")
ENGINES = ("ours", "tensorstore", "zarr", "zarrs", "original", "floor")
ORIG_PYTHON = ROOT / ".venv-orig" / "bin" / "python"
FORMAT = 1  # bump when the stores' parameters change


# -- stores (parent only) --------------------------------------------------------------------
def layout_chunks(layout: str) -> tuple[int, int | None]:
    """(samples per stored chunk, samples per shard or None)."""
    return (1, 16) if layout == "shard16" else (int(layout[1:]), None)


def ensure_store(root: pathlib.Path, layout: str, samples: int, field: tuple[int, int]) -> pathlib.Path:
    """The store, written by zarr-python unless one with the same parameters exists."""
    import zarr
    from zarr.codecs import ZstdCodec

    sys.path.insert(0, str(HERE / "suite"))
    import datasets  # the suite's values: identical whatever the chunking

    spc, shard = layout_chunks(layout)
    path = root / f"{layout}_{samples}_{field[0]}x{field[1]}.zarr"
    stamp = {"format": FORMAT, "layout": layout, "samples": samples, "field": list(field)}
    if (path / "coldstart.json").exists() and json.loads((path / "coldstart.json").read_text()) == stamp:
        return path
    if path.exists():
        import shutil

        shutil.rmtree(path)
    store = zarr.storage.LocalStore(path)
    group = zarr.open_group(store, mode="w", zarr_format=3)
    arr = group.create_array(VAR, shape=(samples, *field), chunks=(spc, *field),
                             shards=(shard, *field) if shard else None, dtype="float32",
                             compressors=[ZstdCodec(level=3)], fill_value=0.0, dimension_names=["time", "lat", "lon"])
    step = datasets.BLOCK * max(1, (shard or spc) // datasets.BLOCK)
    for start in range(0, samples, step):
        arr[start:start + step] = datasets.values(field, start, min(samples, start + step))
    zarr.consolidate_metadata(store)
    (path / "coldstart.json").write_text(json.dumps(stamp))
    return path


def reference_digests(path: pathlib.Path) -> list[int]:
    """crc32 of every sample as zarr-python reads it: what each engine's samples must match."""
    import zarr

    values = zarr.open_array(zarr.storage.LocalStore(path, read_only=True), path=VAR, mode="r")[:]
    return [zlib.crc32(np.ascontiguousarray(row)) for row in values]


def chunk_files(path: pathlib.Path) -> list[pathlib.Path]:
    """The stored chunk (shard) files, by chunk index along the sample axis."""
    root = path / VAR / "c"
    return sorted((p for p in root.rglob("*") if p.is_file()), key=lambda p: int(p.relative_to(root).parts[0]))


def frame_files(path: pathlib.Path, layout: str, samples: int, field: tuple[int, int]) -> list[list[str]]:
    """Per stored chunk (shard), by chunk index, the files holding its zstd frames: the
    chunk file itself, or the shard's inner frames cut out by its index."""
    files = chunk_files(path)
    spc, shard = layout_chunks(layout)
    if shard is None:
        return [[str(f)] for f in files]
    sys.path.insert(0, str(HERE / "suite"))
    import datasets

    out = path / "frames"
    if not out.exists():
        datasets.ceiling_frames(datasets.Spec(layout, samples, field, (spc, *field), (shard, *field)), path, out)
    # ceiling_frames names frame i of the k-th shard of datasets.chunk_files "k_i.zst".
    number = {f: k for k, f in enumerate(datasets.chunk_files(path))}
    inner: dict[int, list[tuple[int, str]]] = {}
    for f in out.iterdir():
        k, i = (int(v) for v in f.stem.split("_"))
        inner.setdefault(k, []).append((i, str(f)))
    return [[name for _, name in sorted(inner.get(number[str(f)], []))] for f in files]


def warm(path: pathlib.Path) -> None:
    for f in chunk_files(path):
        f.read_bytes()


# -- the epoch order every block loop follows -------------------------------------------------
def block_order(n_samples: int, outer: int, block_chunks: int, seed: int = 0) -> list[tuple[list[int], np.ndarray]]:
    """Blocks of `block_chunks` stored chunks in a shuffled chunk order, each with its samples
    shuffled: [(chunk ids, sample indices in the order they are served)]."""
    rng = np.random.default_rng(seed)
    n_chunks = -(-n_samples // outer)
    chunks = rng.permutation(n_chunks)
    out = []
    for b in range(0, n_chunks, block_chunks):
        ids = sorted(int(c) for c in chunks[b:b + block_chunks])
        samples = np.concatenate([np.arange(c * outer, min(n_samples, (c + 1) * outer)) for c in ids])
        out.append((ids, rng.permutation(samples)))
    return out


# -- one engine's run, in its own process ------------------------------------------------------
class Epoch:
    """Bookkeeping of one epoch: the order samples came in, and (checked) a copy of each."""

    def __init__(self, cfg: dict, copy: bool) -> None:
        self.n, self.copy = cfg["samples"], copy
        self.order: list[np.ndarray] = []
        self.values = np.empty((self.n, *cfg["field"]), dtype="float32") if copy else None
        self.t0 = time.perf_counter()
        self.cpu0 = time.process_time()
        self.first: float | None = None
        self.first_cpu: float | None = None

    def add(self, indices, batch) -> None:
        if self.first is None:
            self.first = time.perf_counter() - self.t0
            self.first_cpu = time.process_time() - self.cpu0
        idx = np.asarray(indices, dtype=np.int64).copy()
        self.order.append(idx)
        if self.values is not None:
            self.values[idx] = batch

    def result(self) -> dict:
        seconds, cpu = time.perf_counter() - self.t0, time.process_time() - self.cpu0
        order = np.concatenate(self.order) if self.order else np.empty(0, np.int64)
        out = {"ttfb_s": self.first, "ttfb_cpu_s": self.first_cpu, "epoch_s": seconds, "cpu_s": cpu, "samples": int(order.size),
               "permutation": bool(np.array_equal(np.sort(order), np.arange(self.n))),
               "order_crc": zlib.crc32(order.tobytes())}
        if self.values is not None:
            out["digests"] = [zlib.crc32(row) for row in self.values]
        return out


def _insitu_epoch(cfg: dict, check: bool, open_store) -> dict:
    """One epoch of an InSituDataset (ours, or the original's: the same API) over the store
    ``open_store(path)`` gives, timed from opening it."""
    from insitubatch import InSituDataset, open_geometries, split_by_chunk

    e = Epoch(cfg, check)
    s = open_store(cfg["path"])
    geoms = open_geometries(s, [VAR])
    manifest = split_by_chunk(geoms[VAR], fractions=(1.0, 0.0, 0.0))
    ds = InSituDataset(s, manifest, geoms, batch_size=cfg["batch_size"], block_chunks=cfg["block_chunks"])
    for batch in ds.train:
        e.add(batch.sample_indices, batch.arrays[VAR])
    out = e.result()
    if not check:  # the second pass, in the same process: a training run's steady state
        ds.set_epoch(1)
        second = Epoch(cfg, False)
        for batch in ds.train:
            second.add(batch.sample_indices, batch.arrays[VAR])
        res = second.result()
        if not res["permutation"]:
            raise RuntimeError("the second pass did not deliver every sample once")
        out.update(pass2_s=res["epoch_s"], pass2_cpu_s=res["cpu_s"])
    if hasattr(ds, "close"):
        ds.close()
    return out


def run_ours(cfg: dict, check: bool) -> dict:
    from insitubatch import store

    return _insitu_epoch(cfg, check, store)


def run_original(cfg: dict, check: bool) -> dict:
    from insitubatch import obstore_store

    return _insitu_epoch(cfg, check, lambda path: obstore_store("file://" + os.path.abspath(path)))


def _block_loop(cfg: dict, e: Epoch, read_block) -> dict:
    """Batches of `batch_size` samples, as ours hands out: the rows of a block short of a
    batch are held and completed from the next block (at 1 sample per chunk a block of 16
    chunks holds only 16 samples, and a loop handing out half batches would reach its
    "first batch" with half the decodes)."""
    bs = cfg["batch_size"]
    held_idx: np.ndarray = np.empty(0, np.int64)
    held: np.ndarray | None = None
    for chunks, samples in block_order(cfg["samples"], cfg["outer"], cfg["block_chunks"]):
        data = read_block(chunks)  # the chunks' samples, in chunk order
        rows = np.concatenate([np.arange(c * cfg["outer"], min(cfg["samples"], (c + 1) * cfg["outer"]))
                               for c in chunks])
        where = np.searchsorted(rows, samples)
        k = 0
        if held is not None:
            k = min(bs - held_idx.size, samples.size)
            held_idx, held = np.concatenate([held_idx, samples[:k]]), np.concatenate([held, data[where[:k]]])
            if held_idx.size < bs:
                continue
            e.add(held_idx, held)
            held = None
        full = k + (samples.size - k) // bs * bs
        for j in range(k, full, bs):
            e.add(samples[j:j + bs], data[where[j:j + bs]])
        if full < samples.size:
            held_idx, held = samples[full:], data[where[full:]]
    if held is not None:
        e.add(held_idx, held)
    return e.result()


def run_tensorstore(cfg: dict, check: bool) -> dict:
    import tensorstore as ts

    e = Epoch(cfg, check)
    arr = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": cfg["path"] + "/" + VAR + "/"}},
                  read=True).result()
    n, outer = cfg["samples"], cfg["outer"]

    def read_block(chunks):
        futures = [arr[c * outer:min(n, (c + 1) * outer)].read() for c in chunks]
        return np.concatenate([f.result() for f in futures])

    return _block_loop(cfg, e, read_block)


def run_zarr(cfg: dict, check: bool, zarrs: bool = False) -> dict:
    import zarr

    if zarrs:
        import zarrs  # noqa: F401  (registers the pipeline)

        zarr.config.set({"codec_pipeline.path": "zarrs.ZarrsCodecPipeline"})
    e = Epoch(cfg, check)
    arr = zarr.open_array(zarr.storage.LocalStore(cfg["path"], read_only=True), path=VAR, mode="r")
    n, outer = cfg["samples"], cfg["outer"]

    def read_block(chunks):
        rows = np.concatenate([np.arange(c * outer, min(n, (c + 1) * outer)) for c in chunks])
        return arr.oindex[rows]

    return _block_loop(cfg, e, read_block)


def run_floor(cfg: dict, check: bool) -> dict:
    from insitubatch import _ext

    frames = json.loads(pathlib.Path(cfg["frames"]).read_text())
    # The blocks the first batch draws from (two at 1 sample per chunk: a block of 16
    # chunks holds only 16 samples).
    first_chunks: list[int] = []
    held = 0
    for chunks, samples in block_order(cfg["samples"], cfg["outer"], cfg["block_chunks"]):
        if held >= cfg["batch_size"]:
            break
        first_chunks += chunks
        held += len(samples)
    first = [f for c in first_chunks for f in frames[c]]
    everything = [f for per_chunk in frames for f in per_chunk]
    size, threads = cfg["frame_bytes"], cfg["threads"]
    ttfb = _ext.zstd_decode_floor(first, size, threads)
    # The epoch's floor reads every frame as it decodes it, as an epoch must, into a ring of
    # two blocks of chunks: the decoded values a block-shuffled epoch holds at once (the
    # block it serves and the next), fresh until the ring wraps. Timed and charged like an
    # epoch, reads included.
    cpu0 = time.process_time()
    epoch = _ext.zstd_decode_floor(everything, size, threads, ring=2 * cfg["block_chunks"] * cfg["frames_per_chunk"])
    cpu = time.process_time() - cpu0
    return {"ttfb_s": ttfb, "epoch_s": epoch, "cpu_s": cpu, "samples": cfg["samples"], "permutation": True}


def child(cfg: dict) -> dict:
    runners = {"ours": run_ours, "original": run_original, "tensorstore": run_tensorstore, "zarr": run_zarr,
               "zarrs": lambda c, k: run_zarr(c, k, zarrs=True), "floor": run_floor}
    run = runners[cfg["engine"]]
    out = run(cfg, False)
    if cfg["check"] and cfg["engine"] != "floor":  # the same epoch again, cold, every sample copied out
        checked = run(cfg, True)
        out["digests"] = checked["digests"]
        out["same_order"] = checked["order_crc"] == out["order_crc"]
    return out


# -- the parent ------------------------------------------------------------------------------
def available(engine: str) -> str:
    """'' when `engine` can run here, else why not."""
    probe = {"tensorstore": "tensorstore", "zarrs": "zarrs"}.get(engine)
    if probe:
        found = subprocess.run([sys.executable, "-c", f"import {probe}"], capture_output=True).returncode == 0
        return "" if found else f"skipped: {probe} is not installed"
    if engine == "original" and not ORIG_PYTHON.exists():
        return "skipped: .venv-orig is missing (scripts/bench.sh --setup-only)"
    return ""


def run_child(cfg: dict, timeout: float) -> dict:
    python = str(ORIG_PYTHON) if cfg["engine"] == "original" else sys.executable
    proc = subprocess.run([python, str(pathlib.Path(__file__).resolve()), "--child", json.dumps(cfg)],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = proc.stderr.strip().splitlines()
        return {"failed": f"exit {proc.returncode}: {tail[-1] if tail else 'no output'}"}
    return json.loads(lines[-1])


def check_run(res: dict, reference: list[int]) -> str:
    """'' when the epoch delivered every sample once with zarr-python's values."""
    if res["samples"] != len(reference) or not res["permutation"]:
        return f"{res['samples']} samples delivered, not each of the {len(reference)} once"
    if "digests" not in res:
        return ""
    if not res.get("same_order", True):
        return "the checked epoch came in another order than the timed one"
    bad = [i for i, (a, b) in enumerate(zip(res["digests"], reference)) if a != b]
    return f"{len(bad)} samples differ from zarr-python's (first: {bad[0]})" if bad else ""


def summarize(rows: list[dict], layouts: list[str], engines: list[str], gb: float) -> list[dict]:
    table = []
    for layout in layouts:
        for engine in engines:
            runs = [r for r in rows if r["layout"] == layout and r["engine"] == engine]
            good = [r for r in runs if "failed" not in r and "skipped" not in r]
            entry = {"layout": layout, "engine": engine, "runs": len(good)}
            if not good:
                entry["status"] = next((r.get("skipped") or r.get("failed") for r in runs), "no run")
            else:
                entry.update(
                    ttfb_ms=statistics.median(r["ttfb_s"] for r in good) * 1e3,
                    samples_s=statistics.median(r["samples"] / r["epoch_s"] for r in good),
                    cpu_s_per_gb=statistics.median(r["cpu_s"] for r in good) / gb,
                    check="; ".join(sorted({r["check"] for r in good if r.get("check")})) or "ok")
                if all("pass2_s" in r for r in good):
                    entry.update(pass2_samples_s=statistics.median(r["samples"] / r["pass2_s"] for r in good),
                                 pass2_cpu_s_per_gb=statistics.median(r["pass2_cpu_s"] for r in good) / gb)
            table.append(entry)
    for layout in layouts:  # ratios to the floor, in one run
        floor = next((t for t in table if t["layout"] == layout and t["engine"] == "floor" and "ttfb_ms" in t), None)
        for t in table:
            if t["layout"] == layout and floor and "ttfb_ms" in t:
                t["ttfb_vs_floor"] = t["ttfb_ms"] / floor["ttfb_ms"]
                # The epoch's floor is the machine's limit: every frame read and decoded natively.
                t["rate_vs_floor"] = t["samples_s"] / floor["samples_s"]
                if "pass2_samples_s" in t:
                    t["pass2_vs_floor"] = t["pass2_samples_s"] / floor["samples_s"]
                if floor["cpu_s_per_gb"] > 0:  # tiny stores decode below the CPU clock's tick
                    t["cpu_vs_floor"] = t["cpu_s_per_gb"] / floor["cpu_s_per_gb"]
                    if "pass2_cpu_s_per_gb" in t:
                        t["pass2_cpu_vs_floor"] = t["pass2_cpu_s_per_gb"] / floor["cpu_s_per_gb"]
    return table


def markdown(table: list[dict], layouts: list[str], engines: list[str]) -> str:
    lines = ["| layout | " + " | ".join(engines) + " |", "|---|" + "---|" * len(engines)]
    for what, fmt in (("time to first batch, ms (x floor)", "ttfb"), ("epoch samples/s (x floor)", "rate"),
                      ("second pass samples/s (x floor), same process", "rate2"),
                      ("CPU s per decoded GB (x floor)", "cpu"), ("second pass CPU s per decoded GB (x floor)", "cpu2")):
        lines.append(f"| **{what}** |" + " |" * len(engines))
        for layout in layouts:
            cells = []
            for engine in engines:
                t = next(t for t in table if t["layout"] == layout and t["engine"] == engine)
                if "ttfb_ms" not in t:
                    cells.append(t["status"].split(":")[0])
                elif fmt == "ttfb":
                    cells.append(f"{t['ttfb_ms']:.1f} ({t.get('ttfb_vs_floor', float('nan')):.2f})")
                elif fmt == "rate":
                    cells.append(f"{t['samples_s']:.0f} ({t.get('rate_vs_floor', float('nan')):.2f})")
                elif fmt == "rate2":
                    cells.append(f"{t['pass2_samples_s']:.0f} ({t.get('pass2_vs_floor', float('nan')):.2f})"
                                 if "pass2_samples_s" in t else "-")
                elif fmt == "cpu2":
                    cells.append(f"{t['pass2_cpu_s_per_gb']:.2f} ({t.get('pass2_cpu_vs_floor', float('nan')):.2f})"
                                 if "pass2_cpu_s_per_gb" in t else "-")
                else:
                    cells.append(f"{t['cpu_s_per_gb']:.2f} ({t.get('cpu_vs_floor', float('nan')):.2f})")
                if t.get("check", "ok") != "ok":
                    cells[-1] += " CHECK FAILED"
            lines.append(f"| {layout} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--samples", type=int, default=1024)
    p.add_argument("--field", default="181x360", help="HxW of one sample")
    p.add_argument("--layouts", default=",".join(LAYOUTS))
    p.add_argument("--engines", default=",".join(ENGINES))
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the table gives medians")
    p.add_argument("--check-rounds", type=int, default=1, help="rounds whose epochs are checked against zarr-python")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--block-chunks", type=int, default=16)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="the floor's decode threads")
    p.add_argument("--timeout", type=float, default=600, help="seconds per engine process")
    p.add_argument("--data", default=str(HERE / "data" / "coldstart"), help="stores folder")
    p.add_argument("--json", default=str(RESULTS / "coldstart.json"))
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        sys.stdout.write("\n" + json.dumps(child(json.loads(args.child))) + "\n")
        return {}
    layouts, engines = args.layouts.split(","), args.engines.split(",")
    unknown = [x for x in layouts if x not in LAYOUTS] + [x for x in engines if x not in ENGINES]
    if unknown or args.rounds < 1:
        p.error(f"unknown layout or engine {unknown}" if unknown else "--rounds must be >= 1")
    field = tuple(int(v) for v in args.field.split("x"))
    data = pathlib.Path(args.data)
    stores, references, frames = {}, {}, {}
    for layout in layouts:
        t = time.perf_counter()
        stores[layout] = ensure_store(data, layout, args.samples, field)
        references[layout] = reference_digests(stores[layout])
        frames[layout] = data / f"{layout}_{args.samples}_{field[0]}x{field[1]}.frames.json"
        frames[layout].write_text(json.dumps(frame_files(stores[layout], layout, args.samples, field)))
        print(f"[{layout}] {stores[layout].name} ready ({time.perf_counter() - t:.1f} s)", flush=True)
    skipped = {e: available(e) for e in engines}
    rows = []
    for rnd in range(args.rounds):
        for layout in layouts:
            spc, shard = layout_chunks(layout)
            warm(stores[layout])
            for engine in engines:
                row = {"round": rnd, "layout": layout, "engine": engine}
                if skipped[engine]:
                    rows.append(row | {"skipped": skipped[engine]})
                    continue
                cfg = {"engine": engine, "path": str(stores[layout]), "samples": args.samples, "field": field,
                       "outer": shard or spc, "batch_size": args.batch_size, "block_chunks": args.block_chunks,
                       "threads": args.threads, "check": rnd < args.check_rounds, "frames": str(frames[layout]),
                       "frame_bytes": spc * field[0] * field[1] * 4,
                       "frames_per_chunk": (shard or spc) // spc}
                res = run_child(cfg, args.timeout)
                if "failed" not in res:
                    res["check"] = check_run(res, references[layout])
                    res.pop("digests", None)
                rows.append(row | res)
                what = res.get("failed") or (f"ttfb {res['ttfb_s'] * 1e3:.1f} ms, {res['samples'] / res['epoch_s']:.0f}"
                                             f" samples/s, {res['cpu_s']:.2f} CPU s {res['check'] or 'ok'}")
                print(f"  round {rnd} {layout} {engine}: {what}", flush=True)
    gb = args.samples * field[0] * field[1] * 4 / 1e9
    table = summarize(rows, layouts, [e for e in engines], gb)
    text = markdown(table, layouts, engines)
    print()
    print(text)
    result = {"args": {k: v for k, v in vars(args).items() if k != "child"}, "machine": {
        "cores": os.cpu_count(), "system": f"{platform.system()} {platform.release()}",
        "load_average": os.getloadavg()}, "table": table, "rows": rows, "markdown": text}
    pathlib.Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(args.json).write_text(json.dumps(result, indent=1))
    bad = [r for r in rows if r.get("failed") or r.get("check")]
    for r in bad:
        print(f"FAILED: round {r['round']} {r['layout']} {r['engine']}: {r.get('failed') or r['check']}")
    if bad:
        sys.exit(1)
    return result


if __name__ == "__main__":
    main()
