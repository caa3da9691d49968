"""Native StandardScaler cost vs decode, on a 16-samples-per-chunk store.

The scaler runs inside decode (piece by piece while each zstd block is still in cache), so
its cost is not a stage of its own: it is the extra decode-thread CPU of an epoch with the
scaler over an epoch without it. Epochs alternate (plain, scaled) on two warm datasets with
the pool emptied before each, so both decode every chunk; per-thread CPU time comes from
ds.last_pass (decode_s + assemble_s). Reported: median over pairs of
(scaled CPU - plain CPU) / plain decode CPU, for per-variable and per-grid-point statistics.

    .venv/bin/python bench/scaler_bench.py [--samples 2048] [--runs 7]
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import engine_bench  # noqa: E402

from insitubatch import InSituDataset, StandardScaler, open_geometries, split_by_chunk, store  # noqa: E402


def epoch_cpu(ds: InSituDataset, epoch: int) -> tuple[float, float]:
    """(decode-thread CPU of decode + transform, decode CPU) of one cold-pool epoch."""
    engine_bench.cold_pool_epoch(ds, epoch)
    t = ds.last_pass.times
    return t.decode_s + t.assemble_s, t.decode_s


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=2048)
    p.add_argument("--runs", type=int, default=7)
    args = p.parse_args()
    path = engine_bench.DATA / f"era5_c16_{args.samples}_181x360.zarr"
    engine_bench.make_store(path, args.samples, (181, 360), 16)
    s = store(str(path))
    geoms = open_geometries(s, ["t2m"])
    manifest = split_by_chunk(geoms["t2m"], fractions=(1.0, 0.0, 0.0))
    field = geoms["t2m"].inner_shape
    scalers = {
        "per-variable (one mean, one std)": StandardScaler({"t2m": 250.0}, {"t2m": 40.0}),
        "per-grid-point (mean, std fields)": StandardScaler(
            {"t2m": np.full(field, 250.0) + np.linspace(-5, 5, field[-1])},
            {"t2m": np.full(field, 40.0)}),
    }
    plain = InSituDataset(s, manifest, geoms, batch_size=32)
    for label, scaler in scalers.items():
        scaled = InSituDataset(s, manifest, geoms, batch_size=32, chunk_transforms=[scaler])
        assert scaled._transform_spec("t2m").kind == "scale"
        shares = []
        for epoch in range(args.runs + 1):
            base_cpu, base_decode = epoch_cpu(plain, epoch)
            with_cpu, _ = epoch_cpu(scaled, epoch)
            if epoch:  # epoch 0 warms threads and buffers
                shares.append((with_cpu - base_cpu) / base_decode)
        scaled.close()
        print(f"native StandardScaler, {label}: extra CPU / decode CPU = median {statistics.median(shares):.3f}"
              f" over {args.runs} pairs (target <= 0.10; pairs {' '.join(f'{v:.3f}' for v in shares)})")
    plain.close()


if __name__ == "__main__":
    main()
