"""Microscopy: segment nuclei slice by slice out of an OME-NGFF volume, samples over Z.

Writes (with ome-zarr) a synthetic two-channel fluorescence volume (axes t, c, z, y, x;
nuclear stain and membrane marker under uneven illumination) chunked one Z slice per
chunk, and its instance-label image under ``labels/nuclei`` chunked 30 slices per chunk,
as a labelling tool would write it. One ``InSituDataset`` samples both over Z
(``sample_axis=2``): every batch carries the raw slices and their label slices, although
one label chunk serves 30 raw chunks (it is decoded once and shared). A tiny dilated CNN is
trained on the train slices; its IoU on the held-out slices is printed beside an
Otsu-threshold baseline's.

    python examples/microscopy/run.py                         # full size (minutes on 2 cores)
    python examples/microscopy/run.py --z 60 --size 64 --epochs 4    # seconds
"""

from __future__ import annotations

import argparse
import json
import pathlib
import time

import numpy as np

import insitubatch as ib

ROOT = pathlib.Path(__file__).resolve().parents[2] / "demo_data" / "microscopy"
LABEL_Z_CHUNK = 30


def make_volume(z: int, size: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(raw uint16 [1, 2, z, size, size], labels uint16 [1, 1, z, size, size])."""
    labels = np.zeros((z, size, size), "u2")
    stain = np.zeros((z, size, size), "f4")
    for n in range(1, int(z * size * size / 2000) + 2):
        c = rng.uniform([0, 0, 0], [z, size, size])
        r = rng.uniform([3, size / 24, size / 24], [6, size / 9, size / 9])
        lo = np.maximum(0, np.floor(c - r)).astype(int)
        hi = np.minimum([z, size, size], np.ceil(c + r) + 1).astype(int)
        gz, gy, gx = np.ogrid[lo[0]:hi[0], lo[1]:hi[1], lo[2]:hi[2]]  # the nucleus's bounding box
        inside = ((gz - c[0]) / r[0]) ** 2 + ((gy - c[1]) / r[1]) ** 2 + ((gx - c[2]) / r[2]) ** 2 <= 1
        box = (slice(lo[0], hi[0]), slice(lo[1], hi[1]), slice(lo[2], hi[2]))
        labels[box][inside & (labels[box] == 0)] = n
        stain[box][inside] = rng.uniform(0.25, 0.8)
    zz, _, xx = np.ogrid[0:z, 0:size, 0:size]
    body = labels > 0
    edge = body & ~(np.roll(body, 1, 1) & np.roll(body, -1, 1) & np.roll(body, 1, 2) & np.roll(body, -1, 2))
    illumination = 0.1 + 0.9 * (xx / size) * (0.7 + 0.3 * np.cos(zz / z * np.pi))  # uneven field
    nuclear = stain + illumination + rng.normal(0, 0.12, stain.shape)
    membrane = 0.8 * edge + 0.5 * illumination + rng.normal(0, 0.12, stain.shape)
    raw = np.clip(np.stack([nuclear, membrane]) * 1000, 0, 65535).astype("u2")[None]
    return raw, labels[None, None]


def write_ome_zarr(path: pathlib.Path, z: int, size: int) -> None:
    import zarr
    from ome_zarr.writer import write_image, write_labels

    stamp = path.parent / (path.name + ".made.json")
    if stamp.exists() and json.loads(stamp.read_text()) == {"z": z, "size": size}:
        return
    print(f"writing an OME-NGFF volume (t=1, c=2, z={z}, y=x={size}) to {path} ...")
    raw, labels = make_volume(z, size, np.random.default_rng(0))
    group = zarr.open_group(str(path), mode="w")
    write_image(raw, group, axes="tczyx", scale_factors=(), storage_options={"chunks": (1, 1, 1, size, size)},
                channel_names=["DAPI", "membrane"])
    write_labels(labels, group, name="nuclei", axes="tczyx", scale_factors=(),
                 storage_options={"chunks": (1, 1, LABEL_Z_CHUNK, size, size)})
    stamp.write_text(json.dumps({"z": z, "size": size}))


def multiscale_path(store, group: str = "") -> str:
    """The full-resolution array of an OME-NGFF image group, from its multiscales metadata."""
    import zarr

    attrs = dict(zarr.open_group(ib.obstore_store(store) if isinstance(store, str) else store, path=group, mode="r").attrs)
    multiscales = attrs.get("ome", attrs).get("multiscales") or attrs["multiscales"]
    path = multiscales[0]["datasets"][0]["path"]
    return f"{group}/{path}" if group else path


def iou(pred: np.ndarray, truth: np.ndarray) -> float:
    return float((pred & truth).sum() / max(1, (pred | truth).sum()))


def otsu_masks(raw: np.ndarray) -> np.ndarray:
    from skimage.filters import threshold_otsu

    return np.stack([raw[i, 0, 0] > threshold_otsu(raw[i, 0, 0]) for i in range(len(raw))])[:, None, None]


def make_model(torch, width: int = 16):
    layers, channels = [], 2
    for dilation in (1, 2, 4, 8, 1):
        layers += [torch.nn.Conv2d(channels, width, 3, padding=dilation, dilation=dilation), torch.nn.ReLU()]
        channels = width
    return torch.nn.Sequential(*layers, torch.nn.Conv2d(width, 1, 1))


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=pathlib.Path, default=ROOT)
    parser.add_argument("--z", type=int, default=240)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--epochs", type=int, default=4)
    args = parser.parse_args(argv)
    import torch

    torch.manual_seed(0)
    path = args.data / "nuclei.ome.zarr"
    write_ome_zarr(path, args.z, args.size)

    store = ib.obstore_store(str(path))
    raw_path, label_path = multiscale_path(store), multiscale_path(store, "labels/nuclei")
    geoms = ib.open_geometries(store, variables=[raw_path, label_path], sample_axis=2)  # samples over Z
    # Split by raw slices: a label chunk spanning both splits is decoded once, for both.
    manifest = ib.split_by_chunk(geoms[raw_path], fractions=(0.7, 0.3, 0.0))
    ds = ib.InSituDataset(store, manifest, geometries=geoms, batch_size=4, block_chunks=LABEL_Z_CHUNK, seed=0)

    def tensors(batch):
        x = torch.from_numpy(batch.arrays[raw_path][:, 0].astype("f4") / 1000.0)  # (B, C, Y, X)
        y = torch.from_numpy((batch.arrays[label_path][:, 0] > 0).astype("f4"))  # (B, 1, Y, X)
        return x, y

    model = make_model(torch)
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    t0 = time.perf_counter()
    for epoch in range(args.epochs):
        ds.set_epoch(epoch)
        seen = []
        for batch in ds.train:
            x, y = tensors(batch)
            # Nuclei are the minority class: weight them so the model cannot settle on "none".
            loss = torch.nn.functional.binary_cross_entropy_with_logits(model(x), y, pos_weight=torch.tensor(4.0))
            opt.zero_grad()
            loss.backward()
            opt.step()
            seen.append(batch.sample_indices.copy())
        seen = np.concatenate(seen)
        assert np.array_equal(np.sort(seen), manifest.sample_indices("train")), "each train slice once per epoch"

    import zarr

    raw_oracle = zarr.open_array(str(path / raw_path), mode="r")
    inter = {"cnn": 0, "otsu": 0}
    union = {"cnn": 0, "otsu": 0}
    with torch.no_grad():
        for i, batch in enumerate(ds.val):
            if i == 0:  # spot-check against zarr-python: raw slices are the Z slices asked for
                assert np.array_equal(batch.arrays[raw_path], np.moveaxis(raw_oracle[:, :, batch.sample_indices], 2, 0))
            x, y = tensors(batch)
            truth = y.numpy() > 0.5
            for name, pred in (("cnn", model(x).numpy() > 0), ("otsu", otsu_masks(batch.arrays[raw_path])[:, 0])):
                inter[name] += int((pred & truth).sum())
                union[name] += int((pred | truth).sum())
    stats = ds.last_pass
    ds.close()
    result = {name: inter[name] / max(1, union[name]) for name in inter}
    result["val_slices"] = int(stats.samples)
    print(f"nuclei over Z ({args.z} slices of {args.size}x{args.size}, {len(manifest.sample_indices('train'))} train /"
          f" {stats.samples} held out): IoU  CNN {result['cnn']:.3f}  Otsu threshold {result['otsu']:.3f}"
          f"  ({time.perf_counter() - t0:.1f} s)")
    return result


if __name__ == "__main__":
    main()
