"""The product description's quickstart, run against a local ERA5-shaped store.

Generates (once) ``demo_data/era5_c16.zarr``: one float32 variable ``t2m`` of 640 x 361 x 720
(16 samples per chunk, zstd, written by zarr-python; smooth random fields, not real data),
then streams two epochs of train and val with progress bars, the static cost report and
the per-epoch log lines. The second epoch's train line shows chunks served from the pool.
"""

from __future__ import annotations

import argparse
import logging
import pathlib
import time

import numpy as np

from insitubatch import InSituDataset, obstore_store, open_geometries, split_by_chunk

try:
    from tqdm import tqdm
except ImportError:  # progress bars are optional
    def tqdm(it, **_):
        return it

ROOT = pathlib.Path(__file__).resolve().parent.parent / "demo_data"


def make_store(path: pathlib.Path, n: int, shape: tuple[int, int], spc: int) -> None:
    import zarr
    from zarr.codecs import ZstdCodec

    if (path / "t2m" / "zarr.json").exists():
        return
    print(f"generating {path} ({n} x {shape[0]} x {shape[1]} float32, {spc} samples per chunk) ...")
    rng = np.random.default_rng(0)
    y, x = np.meshgrid(np.linspace(0, np.pi, shape[0]), np.linspace(0, 2 * np.pi, shape[1]), indexing="ij")
    base = (250 + 40 * np.sin(y) * np.cos(x)).astype("f4")
    arr = zarr.create_array(zarr.storage.LocalStore(path), name="t2m", shape=(n, *shape),
                            chunks=(spc, *shape), dtype="float32", compressors=[ZstdCodec(level=1)],
                            fill_value=0.0, attributes={"units": "K"})
    for start in range(0, n, spc):
        noise = rng.normal(0, 2, size=(spc, *shape)).astype("f4")
        arr[start:start + spc] = np.round(base + noise, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=640)
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    path = ROOT / "era5_c16.zarr"
    make_store(path, args.samples, (361, 720), 16)

    store = obstore_store(f"file://{path}")
    geoms = open_geometries(store, variables=["t2m"])
    manifest = split_by_chunk(geoms["t2m"], fractions=(0.8, 0.1, 0.1), sample_range=(0, args.samples))
    ds = InSituDataset(store, manifest, geometries=geoms, batch_size=32, block_chunks=16)
    ds.print_summary()

    import zarr

    oracle = zarr.open_array(zarr.storage.LocalStore(path, read_only=True), path="t2m", mode="r")
    for epoch in range(args.epochs):
        ds.set_epoch(epoch)
        t0 = time.perf_counter()
        samples = 0
        for i, batch in enumerate(tqdm(ds.train, desc=f"epoch {epoch} train", unit="batch")):
            samples += len(batch)
            if i == 0:  # spot-check one batch against zarr-python's own read
                idx = batch.sample_indices
                assert np.array_equal(batch.arrays["t2m"], oracle.get_orthogonal_selection((idx,)))
        for batch in tqdm(ds.val, desc=f"epoch {epoch} val", unit="batch"):
            samples += len(batch)
        dt = time.perf_counter() - t0
        print(f"epoch {epoch}: {samples} samples in {dt:.2f} s ({samples / dt:.0f} samples/s,"
              f" {samples * 361 * 720 * 4 / dt / 2**20:.0f} MiB/s)")
    ds.close()


if __name__ == "__main__":
    main()
