"""Astronomy: denoise Hubble-like images and SDSS-like spectra read straight out of FITS files.

Writes (with astropy) a set of FITS image files -- each a noisy ``SCI`` exposure and its
noise-free ``TRUTH`` -- and one FITS binary table of spectra (``FLUX`` and ``TRUTH``
columns, one row per object). kerchunk's FITS reader turns each file into virtual Zarr
references (byte ranges inside the FITS files, nothing copied), stacked into one
(image, y, x) array; the table becomes a record array whose chunks are blocks of rows, each
a byte range the header locates. ``insitubatch.reference_store`` streams them, and two
small torch models (a 2-D and a 1-D residual CNN) are trained to denoise. Each prints its
RMSE against the truth beside a median filter's, and the read amplification (bytes read
from the FITS files / bytes of samples delivered).

    python examples/astronomy/run.py                   # full size (a few minutes on 2 cores)
    python examples/astronomy/run.py --images 48 --size 64 --spectra 512 --epochs 3   # seconds
"""

from __future__ import annotations

import argparse
import json
import pathlib
import time

import numpy as np

import insitubatch as ib

ROOT = pathlib.Path(__file__).resolve().parents[2] / "demo_data" / "astronomy"
ROWS_PER_CHUNK = 128  # the spectra table's rows per virtual chunk


# -- data: FITS files as a telescope archive would hold them ----------------------------------


def sky(rng: np.random.Generator, size: int) -> np.ndarray:
    """A noise-free field: faint background, point sources (Gaussian PSFs), one galaxy."""
    y, x = np.mgrid[0:size, 0:size].astype("f4")
    image = np.full((size, size), 0.05, "f4")
    for _ in range(rng.integers(size // 8, size // 3)):
        cy, cx = rng.uniform(0, size, 2)
        flux, width = rng.lognormal(0.0, 0.8), rng.uniform(0.8, 1.6)
        image += flux * np.exp(-((y - cy) ** 2 + (x - cx) ** 2) / (2 * width**2))
    cy, cx = rng.uniform(size * 0.2, size * 0.8, 2)
    a, b, theta = rng.uniform(size / 16, size / 8), rng.uniform(size / 32, size / 16), rng.uniform(0, np.pi)
    u = (x - cx) * np.cos(theta) + (y - cy) * np.sin(theta)
    v = -(x - cx) * np.sin(theta) + (y - cy) * np.cos(theta)
    image += 0.6 * np.exp(-np.sqrt((u / a) ** 2 + (v / b) ** 2))
    return image


def spectrum(rng: np.random.Generator, loglam: np.ndarray) -> np.ndarray:
    """A continuum with absorption and emission lines, redshifted."""
    z = rng.uniform(0, 0.3)
    lam = 10 ** loglam / (1 + z)
    flux = 1.0 + 0.3 * np.sin(lam / 900.0) + rng.uniform(-0.2, 0.2) * (lam - 5000) / 3000
    for line, depth in ((3934, -0.5), (3969, -0.4), (4861, 0.8), (5007, 1.2), (6563, 1.5)):
        flux += depth * rng.uniform(0.3, 1.0) * np.exp(-((lam - line) ** 2) / (2 * 4.0**2))
    return flux.astype("f4")


def write_fits(root: pathlib.Path, images: int, size: int, spectra: int, wavelengths: int) -> None:
    from astropy.io import fits

    stamp = root / "made.json"
    wanted = {"images": images, "size": size, "spectra": spectra, "wavelengths": wavelengths}
    if stamp.exists() and json.loads(stamp.read_text()) == wanted:
        return
    print(f"writing {images} FITS images of {size}x{size} and a table of {spectra} spectra to {root} ...")
    rng = np.random.default_rng(0)
    (root / "images").mkdir(parents=True, exist_ok=True)
    for i in range(images):
        truth = sky(rng, size)
        noisy = truth + rng.normal(0, 0.15, truth.shape).astype("f4")
        header = fits.Header({"TELESCOP": "HST-like", "EXPTIME": 600.0, "BUNIT": "ELECTRONS/S"})
        fits.HDUList([fits.PrimaryHDU(header=header), fits.ImageHDU(noisy, name="SCI"),
                      fits.ImageHDU(truth, name="TRUTH")]).writeto(root / "images" / f"exp{i:05d}.fits", overwrite=True)
    loglam = np.linspace(np.log10(3800), np.log10(9200), wavelengths)
    truth = np.stack([spectrum(rng, loglam) for _ in range(spectra)])
    flux = truth + rng.normal(0, 0.25, truth.shape).astype("f4")
    columns = [fits.Column("FLUX", f"{wavelengths}E", array=flux), fits.Column("TRUTH", f"{wavelengths}E", array=truth),
               fits.Column("Z", "E", array=rng.uniform(0, 0.3, spectra).astype("f4"))]
    fits.HDUList([fits.PrimaryHDU(), fits.BinTableHDU.from_columns(columns, name="SPECTRA")]).writeto(
        root / "spectra.fits", overwrite=True)
    stamp.write_text(json.dumps(wanted))


# -- references: the FITS bytes, addressed as Zarr chunks ---------------------------------------


def _decoded(value):
    return json.loads(value.decode() if isinstance(value, bytes) else value)


def image_references(root: pathlib.Path) -> dict:
    """One (image, y, x) array per extension, one chunk per exposure: kerchunk reads each
    file's header, and the chunks are the data blocks where they lie in each file."""
    from kerchunk.fits import process_file

    files = sorted((root / "images").glob("exp*.fits"))
    refs: dict = {".zgroup": json.dumps({"zarr_format": 2})}
    for ext in ("SCI", "TRUTH"):
        name = ext.lower()
        for i, path in enumerate(files):
            one = process_file(f"file://{path}", extension=ext, inline_threshold=0)
            if i == 0:
                zarray = _decoded(one[f"{ext}/.zarray"])
                zarray["shape"] = [len(files), *zarray["shape"]]
                zarray["chunks"] = [1, *zarray["chunks"]]
                refs[f"{name}/.zarray"] = json.dumps(zarray)
                refs[f"{name}/.zattrs"] = json.dumps({"_ARRAY_DIMENSIONS": ["image", "y", "x"]})
            url, offset, length = one[f"{ext}/0.0"]
            refs[f"{name}/{i}.0.0"] = [url, offset, length]
    return refs


def spectra_references(root: pathlib.Path) -> dict:
    """The binary table as a record array whose chunks are blocks of rows: a FITS table is
    row-major, so rows [k*R, (k+1)*R) are one contiguous byte range of the file. The header
    gives where the data starts and each row's layout, read here with astropy as kerchunk's
    FITS reader does (which, under zarr-python 3.1, cannot describe array-valued columns)."""
    from astropy.io import fits

    path = root / "spectra.fits"
    with fits.open(path, memmap=False) as hdul:
        hdu = hdul["SPECTRA"]
        rows, row_bytes = hdu.header["NAXIS2"], hdu.header["NAXIS1"]
        offset = hdu.fileinfo()["datLoc"]
        dtype = hdu.data.dtype.newbyteorder(">")  # FITS tables are big-endian
    descr = [[name, dtype.fields[name][0].base.str, list(dtype.fields[name][0].shape)] if dtype.fields[name][0].shape
             else [name, dtype.fields[name][0].str] for name in dtype.names]
    if rows % ROWS_PER_CHUNK:
        raise SystemExit(f"--spectra must be a multiple of {ROWS_PER_CHUNK}")
    assert dtype.itemsize == row_bytes, (dtype.itemsize, row_bytes)
    zarray = {"zarr_format": 2, "shape": [rows], "chunks": [ROWS_PER_CHUNK], "dtype": descr,
              "compressor": None, "filters": None, "fill_value": None, "order": "C"}
    refs = {".zgroup": json.dumps({"zarr_format": 2}), "spectra/.zarray": json.dumps(zarray),
            "spectra/.zattrs": json.dumps({"_ARRAY_DIMENSIONS": ["object"]})}
    for k in range(rows // ROWS_PER_CHUNK):
        refs[f"spectra/{k}"] = [f"file://{path}", offset + k * ROWS_PER_CHUNK * row_bytes, ROWS_PER_CHUNK * row_bytes]
    return refs


def check_against_astropy(root: pathlib.Path, images, spectra) -> None:
    """The virtual arrays hold exactly what astropy reads from the files."""
    from astropy.io import fits

    first = sorted((root / "images").glob("exp*.fits"))[0]
    assert np.array_equal(ib.read_chunk(images, "sci", (0, 0, 0))[0], fits.getdata(first, "SCI"))
    table = fits.getdata(root / "spectra.fits", "SPECTRA")
    block = ib.read_chunk(spectra, "spectra", (1,))
    for name in ("FLUX", "TRUTH", "Z"):
        assert np.array_equal(block[name], table[name][ROWS_PER_CHUNK:2 * ROWS_PER_CHUNK]), name


# -- models and baselines -----------------------------------------------------------------------


def median_filter(x: np.ndarray, width: int) -> np.ndarray:
    """Median over a width^d window of the trailing d axes (d = x.ndim - 1), edges reflected."""
    d = x.ndim - 1
    pad = [(0, 0)] + [(width // 2, width // 2)] * d
    windows = np.lib.stride_tricks.sliding_window_view(np.pad(x, pad, mode="reflect"), (width,) * d, axis=tuple(range(1, d + 1)))
    return np.median(windows.reshape(*x.shape, -1), axis=-1)


def make_model(torch, dims: int, width: int = 24):
    conv = torch.nn.Conv2d if dims == 2 else torch.nn.Conv1d
    net = torch.nn.Sequential(conv(1, width, 5, padding=2), torch.nn.ReLU(), conv(width, width, 3, padding=1),
                              torch.nn.ReLU(), conv(width, width, 3, padding=1), torch.nn.ReLU(), conv(width, 1, 3, padding=1))

    class Residual(torch.nn.Module):  # predicts the noise, so it starts as the identity
        def __init__(self):
            super().__init__()
            self.net = net

        def forward(self, x):
            return x - self.net(x)

    return Residual()


def field(batch, key: str) -> np.ndarray:
    """A batch array, or one field of a record array ("spectra.FLUX"), as native float32."""
    name, _, sub = key.partition(".")
    values = batch.arrays[name]
    return np.ascontiguousarray(values[sub] if sub else values, "f4")


def train_and_score(torch, ds, noisy_key: str, truth_key: str, dims: int, epochs: int, median_width: int, lr: float):
    """Trains on ds.train, scores on ds.val; checks every sample of each pass arrives once."""
    model = make_model(torch, dims)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    expected = None
    for epoch in range(epochs):
        ds.set_epoch(epoch)
        seen = []
        for batch in ds.train:
            x = torch.from_numpy(field(batch, noisy_key))[:, None]
            y = torch.from_numpy(field(batch, truth_key))[:, None]
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            seen.append(batch.sample_indices.copy())
        seen = np.sort(np.concatenate(seen))
        assert len(np.unique(seen)) == len(seen), "a sample was delivered twice in one epoch"
        assert expected is None or np.array_equal(seen, expected), "an epoch missed samples"
        expected = seen
    sq_model = sq_median = sq_noisy = n = 0.0
    with torch.no_grad():
        for batch in ds.val:
            noisy = field(batch, noisy_key)
            truth = field(batch, truth_key)
            pred = model(torch.from_numpy(noisy)[:, None])[:, 0].numpy()
            sq_model += float(((pred - truth) ** 2).sum())
            sq_median += float(((median_filter(noisy, median_width) - truth) ** 2).sum())
            sq_noisy += float(((noisy - truth) ** 2).sum())
            n += truth.size
    stats = ds.last_pass  # the val pass just run
    return {"model_rmse": (sq_model / n) ** 0.5, "median_rmse": (sq_median / n) ** 0.5,
            "noisy_rmse": (sq_noisy / n) ** 0.5, "train_samples": int(len(expected)),
            "val_bytes_read": stats.bytes_read}


def stream(store, variables, batch_size, seed=0):
    geoms = ib.open_geometries(store, variables=variables)
    manifest = ib.split_by_chunk(geoms[variables[0]], fractions=(0.75, 0.25, 0.0))
    return ib.InSituDataset(store, manifest, geometries=geoms, batch_size=batch_size, block_chunks=8, seed=seed), geoms


def report(what: str, r: dict, t0: float) -> None:
    print(f"{what}: RMSE  CNN {r['model_rmse']:.4f}  median filter {r['median_rmse']:.4f}"
          f"  noisy input {r['noisy_rmse']:.4f}  | read amplification {r['read_amplification']:.3f}"
          f"  ({time.perf_counter() - t0:.1f} s)")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=pathlib.Path, default=ROOT)
    parser.add_argument("--images", type=int, default=512)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--spectra", type=int, default=8192)
    parser.add_argument("--wavelengths", type=int, default=1024)
    parser.add_argument("--epochs", type=int, default=6)
    args = parser.parse_args(argv)
    import torch

    torch.manual_seed(0)
    write_fits(args.data, args.images, args.size, args.spectra, args.wavelengths)
    results = {}

    store = ib.reference_store(image_references(args.data))
    table = ib.reference_store(spectra_references(args.data))
    check_against_astropy(args.data, store, table)

    t0 = time.perf_counter()
    ds, geoms = stream(store, ["sci", "truth"], batch_size=8)
    r = train_and_score(torch, ds, "sci", "truth", dims=2, epochs=args.epochs, median_width=3, lr=2e-3)
    used = sum(ds.last_pass.samples * int(np.prod(g.inner_shape)) * g.dtype.itemsize for g in geoms.values())
    r["read_amplification"] = r["val_bytes_read"] / used
    ds.close()
    report(f"images  ({args.images} FITS files, {args.size}x{args.size})", r, t0)
    results["images"] = r

    t0 = time.perf_counter()
    ds, geoms = stream(table, ["spectra"], batch_size=64)
    r = train_and_score(torch, ds, "spectra.FLUX", "spectra.TRUTH", dims=1, epochs=args.epochs, median_width=5, lr=2e-3)
    # Only FLUX and TRUTH are used; the table's Z column is read along with them.
    used = ds.last_pass.samples * 2 * args.wavelengths * 4
    r["read_amplification"] = r["val_bytes_read"] / used
    ds.close()
    report(f"spectra ({args.spectra} rows x {args.wavelengths} wavelengths)", r, t0)
    results["spectra"] = r
    return results


if __name__ == "__main__":
    main()
