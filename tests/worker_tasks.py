"""Functions that worker processes (spawn, forkserver) import by name: they cannot be
defined inside a test's child script."""

from __future__ import annotations

import numpy as np


def count_exact(args) -> int:
    """Iterates share ``share`` of ``count`` of the dataset's train view, checks every value
    against zarr-python's read of the local copy at ``root``, and returns the samples seen."""
    ds, share, count, root = args
    import zarr

    source = zarr.open_array(zarr.storage.LocalStore(root, read_only=True), path="t2m", mode="r")[...]
    seen = 0
    for batch in ds.train.shard(share, count):
        np.testing.assert_array_equal(batch.arrays["t2m"], source[batch.read_indices("t2m")])
        seen += len(batch.sample_indices)
    return seen
