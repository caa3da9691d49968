"""The compatibility shims (insitubatch._compat): each still works, warns with a
DeprecationWarning naming its replacement and the release that removes it."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
import warnings
from pathlib import Path

import numpy as np
import pytest

import insitubatch as ib
import planfetch as pf
from insitubatch import _compat, frameworks

ROOT = Path(__file__).resolve().parents[1]


def test_the_removal_version_is_the_next_release_that_may_break():
    """Above this package's own version (pyproject.toml, the one place it is written): the
    next minor release below 1.0, the next major one from 1.0. A version bump fails here
    until REMOVED_IN moves with it, and the shims it named go."""
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    major, minor, _ = (int(part) for part in version.split("."))
    assert _compat.REMOVED_IN == (f"{major + 1}.0.0" if major else f"0.{minor + 1}.0")
    assert (major, minor) >= (0, 3), "above the original insitubatch 0.2.0, which this package replaces"
    assert f"**Deprecated, removed in {_compat.REMOVED_IN}**" in (ROOT / "README.md").read_text()


def _warns(what):
    return pytest.warns(DeprecationWarning, match=rf"{re.escape(what)} is deprecated and will be removed in"
                                                  rf" insitubatch {re.escape(_compat.REMOVED_IN)}: ")


def test_the_backend_probes_warn_and_still_answer():
    for name in ("has_rust_backend", "has_native_backend"):
        with _warns(f"planfetch.{name}()"):
            assert getattr(pf, name)() is True
    for name in ("assert_rust_backend", "assert_native_backend"):
        with _warns(f"planfetch.{name}()"):
            assert getattr(pf, name)() is None


def test_use_rust_warns_and_still_chooses_the_backend(tmp_path):
    with _warns("SharedDiskCache(use_rust=...)"):
        cache = pf.SharedDiskCache(tmp_path / "a", use_rust=False)
    assert not cache.use_rust
    import pickle

    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # a worker's copy does not warn again
        assert not pickle.loads(pickle.dumps(cache)).use_rust
        assert pf.SharedDiskCache(tmp_path / "b").use_rust


def test_the_original_engine_names_say_once_what_replaced_them():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no DeprecationWarning before the error
        for name, replacement in _compat.ENGINE_INTERNALS.items():
            with pytest.raises(AttributeError) as error:
                getattr(ib, name)
            assert str(error.value) == (f"insitubatch.{name} was part of the original's Python engine and is not"
                                        f" public here: {replacement}")
            assert not hasattr(ib, name) and name not in dir(ib)


def test_hasattr_answers_false_with_deprecation_warnings_as_errors():
    """As under pytest's `filterwarnings = error`: introspection of a removed name must not raise."""
    out = subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-c", """
import insitubatch, insitubatch.pool
print(hasattr(insitubatch, "ChunkPool"), hasattr(insitubatch, "Scheduler"), hasattr(insitubatch.pool, "ChunkPool"),
      getattr(insitubatch, "build_stored_chunk_reads", None))
"""], capture_output=True, text=True, timeout=120, cwd="/")
    assert out.returncode == 0, out.stderr
    assert out.stdout == "False False False None\n"


def test_draw_order_array_attributes_warn():
    order = ib.block_shuffled_order(range(2), 4, 8, block_chunks=1, seed=0, epoch=0)
    with _warns("DrawOrder.shape"):
        assert order.shape == (8, 2)
    np.testing.assert_array_equal(np.asarray(order), order.rows)  # the array protocol stays


def test_insitubatch_ray_warns_and_imports_no_framework():
    out = subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-c", """
import sys, warnings
import insitubatch.ray as r
assert "ray" not in sys.modules
try:
    r.read_insitu
except DeprecationWarning as e:
    print(e)
from insitubatch.frameworks.ray import read_insitu
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    assert r.read_insitu is read_insitu
assert "ray" not in sys.modules
"""], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert f"insitubatch.ray.read_insitu is deprecated and will be removed in insitubatch {_compat.REMOVED_IN}: use" \
           " insitubatch.read_insitu" in out.stdout


def test_one_list_of_lazy_adapters():
    for name in frameworks._ADAPTERS:
        assert name in dir(ib) and name in ib.__all__
    assert ib.as_torch is frameworks.torch.as_torch  # loads the adapter module, not torch
