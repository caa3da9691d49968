"""The timeline shown in docs/tuning.md: one recorded epoch over the README demo's kind of
store (float32 fields of 361 x 720, 16 per chunk, zstd 1, on local disk), read by a training
loop whose step takes `--step-ms`, saved as trace-event JSON and drawn to a PNG by
scripts/plot_trace.py.

    .venv/bin/python bench/trace_demo.py [--samples 512] [--step-ms 30] [--png docs/img/trace_timeline.png]

Writes bench/results/trace_demo.json (the trace: open it in ui.perfetto.dev) and the PNG.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from engine_bench import DATA, RESULTS, make_store  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=512)
    p.add_argument("--step-ms", type=float, default=30.0)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--png", type=pathlib.Path, default=ROOT / "docs" / "img" / "trace_timeline.png")
    args = p.parse_args()

    from insitubatch import InSituDataset, open_geometries, split_by_chunk, store

    path = DATA / f"era5_c16_{args.samples}_361x720.zarr"
    make_store(path, args.samples, (361, 720), 16)
    s = store(str(path))
    geoms = open_geometries(s, ["t2m"])
    manifest = split_by_chunk(geoms["t2m"], fractions=(1.0, 0.0, 0.0))
    with InSituDataset(s, manifest, geoms, batch_size=args.batch_size, trace=True) as ds:
        for _ in ds.train:
            time.sleep(args.step_ms / 1000)  # the training step
        stats = ds.last_pass
        RESULTS.mkdir(exist_ok=True)
        out = RESULTS / "trace_demo.json"
        stats.save_trace(out)
    print(stats.log_line())
    print(json.dumps({"trace": str(out), "events": len(stats.trace.events), "dropped": stats.trace.dropped,
                      "limiting_stage": stats.limiting_stage, "shares": stats.shares}))
    subprocess.run([sys.executable, str(ROOT / "scripts" / "plot_trace.py"), str(out), str(args.png),
                    "--title", f"one epoch, {args.samples} samples of 361 x 720 float32 (16 per chunk, zstd),"
                    f" batch {args.batch_size}, a {args.step_ms:.0f} ms training step; local disk, 2 cores"],
                   check=True)
    print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
