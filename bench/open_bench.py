"""Opening a store over S3 with latency: the time and requests until every array's geometry
(or one named array's) is known, for stores with and without consolidated metadata.

The stores (zarr-python 3, written once under bench/data/open/): a root group with arrays
a0..a3 and a group `sub` with arrays b0, b1, each `--rows` (4096) x 8 float32 in chunks of
one row (24,576 chunk objects in all), as zarr v3 and v2, consolidated and not. They are served
by bench/cloud_server.py as S3 (path-style, bucket `open`; GetObject and ListObjectsV2,
each request `--latencies` ms late, a new connection's first request one more latency).
Each engine runs in a fresh process, `--rounds` times, interleaved:

* ours   -- `open_geometries(store)` (every array) or `open_geometries(store, ["a0"])`
            (named) over `store("s3://open/<store>")`;
* before -- the same calls in an earlier revision's build (`--before REV`, built as
            bench/engine_ab.py builds one);
* zarr   -- zarr-python 3 on obstore's S3Store: `open_group(...).members(max_depth=None)`
            (every array) or `open_group(...)["a0"]` (named);
* zarr-ours, zarr-before -- the same zarr-python calls on ours' zarr-python face
            (`insitubatch.obstore_store`), of this checkout or of `--before REV`'s build.

Each run reports its seconds (from before the store is opened, imports excluded) and what
the server answered: requests, of which listings. Every engine must find the same arrays
with the same shapes.

    .venv/bin/python bench/open_bench.py [--latencies 20,50] [--rounds 3] [--before REV]

Writes bench/results/open.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from cloud_server import CloudServer  # noqa: E402

RESULTS = HERE / "results"
DATA = HERE / "data" / "open"  # the bucket: a folder under the served root
ARRAYS = ("a0", "a1", "a2", "a3", "sub/b0", "sub/b1")
WIDTH = 8
STORES = ("v3_consolidated", "v3_plain", "v2_consolidated", "v2_plain")
ENV = {"AWS_ACCESS_KEY_ID": "openbench", "AWS_SECRET_ACCESS_KEY": "openbench-secret", "AWS_REGION": "us-east-1"}
FORMAT = 1  # bump when the stores change


def make_stores(data: pathlib.Path, rows: int) -> None:
    """Writes the four stores once (about a minute at 4096 rows): each array in chunks of one row."""
    import numpy as np
    import zarr

    stamp = data / "open.json"
    if stamp.exists() and json.loads(stamp.read_text()) == {"format": FORMAT, "rows": rows}:
        return
    shutil.rmtree(data, ignore_errors=True)
    data.mkdir(parents=True)
    for fmt in (3, 2):
        plain = data / f"v{fmt}_plain.zarr"
        root = zarr.open_group(str(plain), mode="w", zarr_format=fmt)
        for i, path in enumerate(ARRAYS):
            a = root.create_array(path, shape=(rows, WIDTH), chunks=(1, WIDTH), dtype="float32",
                                  **({"dimension_names": ("row", "x")} if fmt == 3 else {}))
            a[:] = np.arange(rows * WIDTH, dtype="float32").reshape(rows, WIDTH) + i
        consolidated = data / f"v{fmt}_consolidated.zarr"
        shutil.copytree(plain, consolidated)
        zarr.consolidate_metadata(str(consolidated), zarr_format=fmt)
    stamp.write_text(json.dumps({"format": FORMAT, "rows": rows}))


# -- one run, in its own process -------------------------------------------------------------
def child(cfg: dict) -> dict:
    os.environ.update(ENV)
    bucket, named = cfg["bucket"], cfg["named"]
    url = f"s3://{bucket}/{cfg['store']}.zarr"
    if cfg["engine"] in ("ours", "before"):
        from insitubatch import open_geometries, store

        t0 = time.perf_counter()
        s = store(url, endpoint=cfg["endpoint"], region=ENV["AWS_REGION"])
        geoms = open_geometries(s, ["a0"] if named else None)
        seconds = time.perf_counter() - t0
        shapes = {path: list(g.shape) for path, g in geoms.items()}
    else:
        import zarr
        from obstore.store import S3Store

        from insitubatch import obstore_store

        zarr.config.set({"async.concurrency": 64})
        t0 = time.perf_counter()
        if cfg["engine"] == "zarr":
            obj = S3Store(bucket, prefix=f"{cfg['store']}.zarr", endpoint=cfg["endpoint"], region=ENV["AWS_REGION"],
                          access_key_id=ENV["AWS_ACCESS_KEY_ID"], secret_access_key=ENV["AWS_SECRET_ACCESS_KEY"],
                          client_options={"allow_http": True})
            zstore = zarr.storage.ObjectStore(obj, read_only=True)
        else:  # zarr-python on ours' zarr-python face
            zstore = obstore_store(url, endpoint=cfg["endpoint"], region=ENV["AWS_REGION"])
        group = zarr.open_group(zstore, mode="r")
        if named:
            shapes = {"a0": list(group["a0"].shape)}
        else:
            shapes = {path: list(node.shape) for path, node in group.members(max_depth=None)
                      if isinstance(node, zarr.Array)}
        seconds = time.perf_counter() - t0
    return {"seconds": seconds, "shapes": shapes}


def run_child(cfg: dict, site: str | None) -> dict:
    env = os.environ | ENV
    if site:  # the earlier build shadows the installed one
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [site, env.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, __file__, "--child", json.dumps(cfg)], capture_output=True, text=True,
                          timeout=600, cwd=ROOT, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = proc.stderr.strip().splitlines()
        return {"failed": f"exit {proc.returncode}: {tail[-1] if tail else 'no output'}"}
    return json.loads(lines[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--latencies", default="20,50", help="ms added to every request")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--engines", default="ours,zarr", help="of ours, zarr, zarr-ours (and with --before:"
                   " before, zarr-before)")
    p.add_argument("--before", metavar="REV", help="adds the 'before' engine: this revision's build")
    p.add_argument("--stores", default=",".join(STORES))
    p.add_argument("--rows", type=int, default=4096, help="rows (chunks) per array")
    p.add_argument("--data", default=str(DATA), help="the stores' folder (its name is the bucket)")
    p.add_argument("--json", default=str(RESULTS / "open.json"))
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return

    engines = args.engines.split(",")
    unknown = set(engines) - {"ours", "zarr", "zarr-ours", "before", "zarr-before"}
    if unknown:
        p.error(f"--engines: unknown {sorted(unknown)}")
    if args.before and not any(e.endswith("before") for e in engines):
        engines.append("before")  # --before alone: the revision's own calls beside ours
    if any(e.endswith("before") for e in engines) and not args.before:
        p.error("the 'before' engines need --before REV")
    site = None
    if args.before:
        import engine_ab

        site = str(engine_ab.build_revision(args.before))
    data = pathlib.Path(args.data).resolve()
    make_stores(data, args.rows)
    results: list[dict] = []
    for latency in [float(x) for x in args.latencies.split(",")]:
        server = CloudServer(data.parent, latency_ms=latency, connect_ms=latency)
        try:
            # The server reads the bucket's keys once, at its first listing: not inside a run.
            urllib.request.urlopen(f"{server.url}/{data.name}?list-type=2&max-keys=1", timeout=600).read()
            for r in range(args.rounds):
                for name in args.stores.split(","):
                    for named in (False, True):
                        for engine in engines:
                            cfg = {"engine": engine, "store": name, "named": named, "endpoint": server.url,
                                   "bucket": data.name}
                            server.reset()
                            out = run_child(cfg, site if engine.endswith("before") else None)
                            stats = server.stats(spans=True)
                            lists = sum("list-type=2" in path for path in stats["span_paths"])
                            row = {"latency_ms": latency, "round": r, "store": name, "named": named,
                                   "engine": engine, "requests": stats["requests"], "lists": lists, **out}
                            results.append(row)
                            print(json.dumps({k: v for k, v in row.items() if k != "shapes"}), flush=True)
        finally:
            server.close()
    RESULTS.mkdir(exist_ok=True)
    pathlib.Path(args.json).write_text(json.dumps({"machine": os.uname().nodename, "cpus": os.cpu_count(),
                                                   "before": args.before, "rows": args.rows, "results": results},
                                                  indent=1))
    print_table(results, engines, args.rows)


def print_table(results: list[dict], engines: list[str], rows: int) -> None:
    expected = {path: [rows, WIDTH] for path in ARRAYS}
    for row in results:  # every engine finds the same arrays, shaped the same
        if "failed" not in row:
            want = {"a0": expected["a0"]} if row["named"] else expected
            assert row["shapes"] == want, (row["engine"], row["store"], row["shapes"])
    print("\n| latency | store | arrays | " + " | ".join(f"{e}: ms (requests, lists)" for e in engines) + " |")
    print("|---|---|---|" + "---|" * len(engines))
    keys = sorted({(r["latency_ms"], r["store"], r["named"]) for r in results},
                  key=lambda k: (k[0], STORES.index(k[1]), k[2]))
    for latency, store, named in keys:
        cells = []
        for engine in engines:
            rows = [r for r in results
                    if (r["latency_ms"], r["store"], r["named"], r["engine"]) == (latency, store, named, engine)]
            good = [r for r in rows if "failed" not in r]
            if not good:
                cells.append(rows[0]["failed"] if rows else "-")
                continue
            ms = statistics.median(r["seconds"] for r in good) * 1000
            cells.append(f"{ms:.0f} ({good[0]['requests']}, {good[0]['lists']})")
        print(f"| +{latency:g} ms | {store} | {'a0' if named else 'every'} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
