"""Shared fixtures. Every store here is written by zarr-python 3 (the oracle), never by hand."""

from __future__ import annotations

import os
import subprocess
import warnings

# Every buffer the engine allocates in this process and its children starts as a poison
# pattern: a byte a read path forgets to write fails the value tests (util/buffer.h).
os.environ["INSITU_POISON_BUFFERS"] = "1"
# nanobind's leak warnings, off for users (a dataset alive at exit is no fault of theirs),
# are on here and in every child process: an object the package itself leaks is reported
# at exit (test_leaks.py fails on one).
os.environ["INSITUBATCH_LEAK_WARNINGS"] = "1"

import numpy as np  # noqa: E402
import pytest

warnings.filterwarnings("ignore", message=".*Numcodecs codecs are not in the Zarr version 3.*")
warnings.filterwarnings("ignore", message=".*numcodecs.zarr3 module is deprecated.*")

# The cloud servers' fixtures (moto, GCS and Azure mimics, the HTTP server) and planfetch's
# images, for every test module that names them.
pytest_plugins = ("cloud_fixtures", "planfetch_data")

# Framework adapter tests need one framework per process; scripts/test_frameworks.sh runs them.
# The benchmark suite's smoke test needs torch and the suite's peers (scripts/bench.sh --setup-only).
collect_ignore = ["frameworks", "bench"]


def source_values(shape, dtype, seed=0):
    """Deterministic values exercising the whole dtype (signs, fractions, NaN for floats)."""
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    n = int(np.prod(shape))
    if dtype.kind == "b":
        values = rng.integers(0, 2, n).astype(bool)
    elif dtype.kind in "iu":
        info = np.iinfo(dtype)
        values = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    elif dtype.kind == "f":
        values = (rng.standard_normal(n) * 100).astype(dtype)
        values[:: max(7, n // 5)] = np.nan
        if n > 3:
            values[1] = np.inf
            values[2] = -np.inf
    else:  # complex
        values = (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(dtype)
    return values.reshape(shape)


@pytest.fixture
def make_values():
    return source_values


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs: a disk that fills up (writes past it fail with ENOSPC)."""
    mount = tmp_path / "small"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
                                           capture_output=True).returncode != 0:
        pytest.skip("needs root to mount a 1 MiB tmpfs")
    yield mount
    subprocess.run(["umount", str(mount)], check=True)
