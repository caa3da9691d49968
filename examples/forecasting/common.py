"""What the three forecasting scripts share (no framework here): the ERA5-shaped store, the
windowed dataset over it, normalization and the scores.

The store holds ``t2m``, ``u10`` and ``v10`` on a 181 x 360 grid (0.25 deg would be
721 x 1440; the layout is the same), ``time``-chunked 16 steps per chunk with zstd, as an
ERA5 mirror is. ``t2m`` is carried by the wind: every step is a semi-Lagrangian advection
of the previous one along ``(u10, v10)``, relaxed towards a climatology, plus smooth noise;
the winds are a slowly rotating jet with travelling waves. A model that reads the recent
steps can infer the motion; persistence (tomorrow = today) cannot.

A sample is a window: the previous ``HISTORY`` steps of every variable as input and the
next ``t2m`` as target, expressed as geometries shifted along time over the same arrays
(``geometry.shift(k)``), so each stored chunk is still fetched and decoded once per pass.
"""

from __future__ import annotations

import pathlib

import numpy as np

import insitubatch as ib

ROOT = pathlib.Path(__file__).resolve().parents[2] / "demo_data" / "forecasting"
VARIABLES = ("t2m", "u10", "v10")
HISTORY = 2  # input steps
SCALE = {"t2m": (273.0, 20.0), "u10": (0.0, 10.0), "v10": (0.0, 10.0)}  # (offset, scale)
DELTA_SCALE = 0.5  # kelvin: the size of a typical one-step change, so targets are O(1)


def _bilinear(field: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
    """field sampled at fractional (y, x): y clamped at the poles, x periodic."""
    ny, nx = field.shape
    y0 = np.clip(np.floor(y), 0, ny - 2).astype(int)
    x0 = np.floor(x).astype(int)
    fy, fx = np.clip(y - y0, 0, 1), x - x0
    x0 %= nx
    x1 = (x0 + 1) % nx
    top = field[y0, x0] * (1 - fx) + field[y0, x1] * fx
    bottom = field[y0 + 1, x0] * (1 - fx) + field[y0 + 1, x1] * fx
    return top * (1 - fy) + bottom * fy


def make_store(path: pathlib.Path, steps: int, lat: int = 181, lon: int = 360, seed: int = 0) -> None:
    """Writes the store with zarr-python (once; a finished store is left as it is)."""
    import zarr
    from zarr.codecs import ZstdCodec

    try:  # a store finished with these dimensions is kept (an interrupted one is rewritten)
        done = zarr.open_group(str(path), mode="r").attrs.get("complete") == [steps, lat, lon]
    except (FileNotFoundError, KeyError, ValueError):
        done = False
    if done:
        return
    print(f"writing {path}: {len(VARIABLES)} variables x {steps} steps x {lat} x {lon} float32 ...")
    rng = np.random.default_rng(seed)
    group = zarr.open_group(str(path), mode="w")
    arrays = {name: group.create_array(name, shape=(steps, lat, lon), chunks=(16, lat, lon), dtype="float32",
                                       compressors=[ZstdCodec(level=1)], dimension_names=("time", "latitude", "longitude"))
              for name in VARIABLES}
    phi = np.linspace(np.pi / 2, -np.pi / 2, lat)[:, None]
    lam = np.linspace(0, 2 * np.pi, lon, endpoint=False)[None, :]
    climate = (288 - 40 * np.sin(phi) ** 2 + 5 * np.cos(2 * lam) * np.cos(phi)).astype("f4") * np.ones((1, lon), "f4")
    bank = []  # smooth noise fields: random low-wavenumber sums
    for _ in range(16):
        f = np.zeros((lat, lon), "f4")
        for _ in range(6):
            k, m = rng.integers(1, 6), rng.integers(1, 4)
            f += rng.normal() * np.cos(k * lam + rng.uniform(0, 6.3)) * np.cos(m * phi + rng.uniform(0, 6.3))
        bank.append(f)
    yy, xx = np.mgrid[0:lat, 0:lon].astype("f4")
    t2m = climate + 3 * bank[0]
    block = {name: np.empty((16, lat, lon), "f4") for name in VARIABLES}
    for t in range(steps):
        angle = 0.3 * np.sin(2 * np.pi * t / 400)
        u = (1.6 * np.cos(phi) ** 2 + 0.6 * np.cos(3 * lam - 0.05 * t) * np.cos(phi)) * np.cos(angle)
        v = 0.5 * np.sin(2 * lam + 0.03 * t) * np.cos(phi) + 0.3 * np.sin(angle)
        u, v = (u * np.ones_like(xx)).astype("f4"), (v * np.ones_like(xx)).astype("f4")
        if t:
            t2m = 0.985 * _bilinear(t2m, yy - v, xx - u) + 0.015 * climate + 0.05 * bank[rng.integers(16)]
        for name, value in (("t2m", t2m), ("u10", u * 5), ("v10", v * 5)):  # winds in m/s
            block[name][t % 16] = value
        if t % 16 == 15 or t == steps - 1:
            start = t - t % 16
            for name in VARIABLES:
                arrays[name][start:t + 1] = block[name][: t % 16 + 1]
    group.attrs["complete"] = [steps, lat, lon]


def dataset(path: pathlib.Path, batch_size: int = 16, seed: int = 0) -> tuple[ib.InSituDataset, list[str]]:
    """The windowed dataset: labels ``<var>@-k`` (k steps back, k = 0..HISTORY-1) and the
    target ``target`` (``t2m`` one step ahead). Returns it and the input labels in order."""
    store = ib.store(str(path))
    base = ib.open_geometries(store, variables=list(VARIABLES))
    geoms, inputs = {}, []
    for name in VARIABLES:
        for k in range(HISTORY):
            label = f"{name}@-{k}"
            geoms[label] = base[name].shift(-k)
            inputs.append(label)
    geoms["target"] = base["t2m"].shift(1)
    manifest = ib.split_by_chunk(base["t2m"], fractions=(0.8, 0.2, 0.0))
    return ib.InSituDataset(store, manifest, geometries=geoms, batch_size=batch_size, block_chunks=8, seed=seed), inputs


def normalized_inputs(arrays: dict[str, np.ndarray], inputs: list[str]) -> np.ndarray:
    """(batch, channels, lat, lon) float32: each input offset and scaled, plus the last
    step's t2m change on the scale of the target (the tendency a forecaster starts from)."""
    channels = [(arrays[label] - SCALE[label.split("@")[0]][0]) / SCALE[label.split("@")[0]][1] for label in inputs]
    channels.append((arrays["t2m@-0"] - arrays["t2m@-1"]) / DELTA_SCALE)
    return np.stack(channels, axis=1).astype("f4")


def channels(inputs: list[str]) -> int:
    return len(inputs) + 1


def target_delta(arrays: dict[str, np.ndarray]) -> np.ndarray:
    """The normalized change of t2m over the next step: what the models predict."""
    return ((arrays["target"] - arrays["t2m@-0"]) / DELTA_SCALE)[:, None].astype("f4")


class Scores:
    """RMSE in kelvin of a model and of persistence, accumulated over batches."""

    def __init__(self) -> None:
        self.model = self.persistence = self.n = 0.0

    def add(self, arrays: dict[str, np.ndarray], predicted_delta: np.ndarray) -> None:
        truth = arrays["target"]
        forecast = arrays["t2m@-0"] + predicted_delta[:, 0] * DELTA_SCALE
        self.model += float(((forecast - truth) ** 2).sum())
        self.persistence += float(((arrays["t2m@-0"] - truth) ** 2).sum())
        self.n += truth.size

    def report(self, framework: str, samples: int, seconds: float) -> dict:
        out = {"model_rmse": (self.model / self.n) ** 0.5, "persistence_rmse": (self.persistence / self.n) ** 0.5}
        print(f"{framework}: t2m next-step RMSE  model {out['model_rmse']:.3f} K  persistence"
              f" {out['persistence_rmse']:.3f} K  ({samples} training samples, {seconds:.1f} s)")
        return out


def parse_args(argv, description: str):
    import argparse

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--data", type=pathlib.Path, default=ROOT / "era5.zarr")
    parser.add_argument("--steps", type=int, default=2048)
    parser.add_argument("--lat", type=int, default=181)
    parser.add_argument("--lon", type=int, default=360)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=16)
    return parser.parse_args(argv)
