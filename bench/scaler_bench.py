"""Native StandardScaler cost vs decode, on a 16-samples-per-chunk store (per-thread CPU
time from ds.last_pass: assemble_s covers chunk assembly + the transform, decode_s the codec).

    .venv/bin/python bench/scaler_bench.py [--samples 2048]
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import engine_bench  # noqa: E402

from insitubatch import InSituDataset, StandardScaler, open_geometries, split_by_chunk, store  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=2048)
    p.add_argument("--runs", type=int, default=5)
    args = p.parse_args()
    path = engine_bench.DATA / f"era5_c16_{args.samples}_181x360.zarr"
    engine_bench.make_store(path, args.samples, (181, 360), 16)
    s = store(str(path))
    geoms = open_geometries(s, ["t2m"])
    manifest = split_by_chunk(geoms["t2m"], fractions=(1.0, 0.0, 0.0))
    scaler = StandardScaler({"t2m": 250.0}, {"t2m": 40.0})
    ds = InSituDataset(s, manifest, geoms, batch_size=32, chunk_transforms=[scaler])
    assert ds._transform_spec("t2m")["kind"] == "scale"
    shares = []
    for epoch in range(args.runs + 1):
        ds.set_epoch(epoch)
        ds.clear_cache()
        for _ in ds.train:
            pass
        t = ds.last_pass.times
        if epoch:
            shares.append(t.assemble_s / t.decode_s)
    print(f"native StandardScaler (assembly + transform) CPU / decode CPU: median {statistics.median(shares):.3f}"
          f" over {args.runs} epochs (target <= 0.10)")


if __name__ == "__main__":
    main()
