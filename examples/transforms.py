"""Worked chunk and batch transforms (see the README's Transforms section and
`insitubatch-check-transform`)."""

from __future__ import annotations

import numpy as np


def kelvin_to_celsius(chunk):
    """Shape- and dtype-preserving, vectorized (releases the GIL inside numpy)."""
    chunk.data -= chunk.data.dtype.type(273.15)
    return chunk


class Coarsen2x:
    """A reshaping transform: 2x2 block means of the last two axes, declared so the cache
    can size its slot."""

    def __call__(self, chunk):
        d = chunk.data
        h, w = d.shape[-2] // 2 * 2, d.shape[-1] // 2 * 2
        d = d[..., :h, :w]
        chunk.data = d.reshape(*d.shape[:-2], h // 2, 2, w // 2, 2).mean(axis=(-3, -1), dtype=np.float32)
        return chunk

    def output_inner(self, geom):
        *lead, h, w = geom.inner_shape
        return (*lead, h // 2, w // 2), np.float32


coarsen2x = Coarsen2x()


def wind_speed(batch):
    """A batch transform: a cross-variable derived field."""
    batch.arrays["wind_speed"] = np.hypot(batch.arrays["u10"], batch.arrays["v10"])
    return batch


def slow_python_loop(chunk):
    """What not to do: a per-element Python loop holds the GIL (the CLI reports it)."""
    flat = chunk.data.reshape(-1)
    for i in range(flat.size):
        flat[i] = flat[i] * 1.0
    return chunk
