"""zarr-python reading through our store vs through obstore's: `array[...]` of one array,
local and over HTTP (nginx), everything else equal (zarr-python's own decode and its
default concurrency). ours = `insitubatch.obstore_store(url)` (a zarr Store over the native
IO); peer = `zarr.storage.ObjectStore(obstore.store.from_url(url))`, what the original
insitubatch's `obstore_store` returns. Rounds alternate; medians and the median ratio.

    .venv/bin/python bench/zarr_store_bench.py [--chunks 256] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from http_bench import Nginx  # noqa: E402


def make_store(path: Path, chunks: int) -> int:
    import zarr
    from zarr.codecs import ZstdCodec

    arr = zarr.create_array(zarr.storage.LocalStore(path), name="t2m", shape=(chunks * 4, 181, 360),
                            chunks=(4, 181, 360), dtype="f4", compressors=[ZstdCodec(level=1)])
    rng = np.random.default_rng(0)
    for start in range(0, chunks * 4, 64):
        arr[start:start + 64] = np.round(280 + rng.standard_normal((64, 181, 360)), 1).astype("f4")
    zarr.consolidate_metadata(zarr.storage.LocalStore(path))
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def read_all(store) -> float:
    import zarr

    t0 = time.perf_counter()
    data = zarr.open_array(store, path="t2m", mode="r")[...]
    elapsed = time.perf_counter() - t0
    assert data.shape[1:] == (181, 360)
    return elapsed


def main() -> None:
    import obstore
    import zarr

    import insitubatch

    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--chunks", type=int, default=256)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--json")
    args = p.parse_args()
    out: dict = {"machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                             "python": platform.python_version(), "zarr": zarr.__version__,
                             "obstore": obstore.__version__}}
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o755)  # nginx's workers run as nobody when we are root
        root = Path(tmp) / "www"
        stored = make_store(root / "s.zarr", args.chunks)
        decoded = args.chunks * 4 * 181 * 360 * 4
        out["stored_mb"], out["decoded_mb"] = stored / 1e6, decoded / 1e6
        with Nginx(root) as nginx:
            urls = {"local": f"file://{root}/s.zarr", "http (nginx)": f"{nginx.url}/s.zarr"}
            for name, url in urls.items():
                ours = insitubatch.obstore_store(url)
                opts = {"client_options": {"allow_http": True}} if url.startswith("http:") else {}
                peer = zarr.storage.ObjectStore(obstore.store.from_url(url, **opts), read_only=True)
                read_all(ours), read_all(peer)  # warm the page cache and both stores' connections
                times: dict[str, list[float]] = {"ours": [], "obstore": []}
                for _ in range(args.rounds):
                    times["ours"].append(read_all(ours))
                    times["obstore"].append(read_all(peer))
                med = {k: statistics.median(v) for k, v in times.items()}
                ratio = statistics.median(o / s for s, o in zip(times["ours"], times["obstore"]))
                out[name] = {"seconds": med, "decoded_mb_s": {k: decoded / 1e6 / v for k, v in med.items()},
                             "ours_over_obstore": ratio}
    print("| store | ours MB/s (decoded) | obstore MB/s | ours / obstore |")
    print("|---|---|---|---|")
    for name in ("local", "http (nginx)"):
        r = out[name]
        print(f"| {name} | {r['decoded_mb_s']['ours']:.0f} | {r['decoded_mb_s']['obstore']:.0f} |"
              f" **{r['ours_over_obstore']:.2f}** |")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
