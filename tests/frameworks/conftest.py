"""Fixtures for the framework adapter tests. Each test file needs its own framework and runs
in its own pytest process (scripts/test_frameworks.sh): torch, JAX and TF must not share a
process. This file imports no framework. Stores are written by zarr-python 3 (the oracle)."""

from __future__ import annotations

import numpy as np
import pytest
from fwtest_util import write_store

import insitubatch
from insitubatch import InSituDataset, open_geometries, split_by_chunk


@pytest.fixture
def mixed(tmp_path):
    """Four dtypes and ranks, 80 samples in chunks of 8: returns (open_dataset, sources)."""
    rng = np.random.default_rng(7)
    sources = {
        "x": rng.standard_normal((80, 3, 4)).astype("f4"),
        "label": rng.integers(-(2**40), 2**40, 80, dtype="i8"),
        "mask": rng.integers(0, 2, (80, 5)).astype(bool),
        "code": rng.integers(0, 255, (80, 2, 2), dtype="u1"),
    }
    path = tmp_path / "mixed.zarr"
    write_store(path, {name: (values, (8, *values.shape[1:])) for name, values in sources.items()})

    def open_dataset(**kwargs) -> InSituDataset:
        store = insitubatch.local_store(path)
        geoms = open_geometries(store)
        manifest = split_by_chunk(geoms["x"], fractions=(0.8, 0.1, 0.1))
        kwargs.setdefault("batch_size", 6)
        kwargs.setdefault("block_chunks", 2)
        return InSituDataset(store, manifest, geometries=geoms, **kwargs)

    return open_dataset, sources


@pytest.fixture
def linear(tmp_path):
    """A linear-regression store (16 samples per chunk): target = features @ w + b + noise."""
    rng = np.random.default_rng(3)
    n = 512
    features = rng.standard_normal((n, 4)).astype("f4")
    w = np.array([[1.5], [-2.0], [0.5], [3.0]], dtype="f4")
    target = (features @ w + 0.7 + 0.01 * rng.standard_normal((n, 1))).astype("f4")
    path = tmp_path / "linear.zarr"
    write_store(path, {"features": (features, (16, 4)), "target": (target, (16, 1))})

    def open_dataset(batch_size=32) -> InSituDataset:
        store = insitubatch.local_store(path)
        geoms = open_geometries(store)
        manifest = split_by_chunk(geoms["features"], fractions=(0.75, 0.25, 0.0))
        return InSituDataset(store, manifest, geometries=geoms, batch_size=batch_size, block_chunks=4)

    return open_dataset
