"""The original insitubatch's module paths (insitubatch.source, .split, .store, .types, .plan,
.pool, .scheduler): a script importing from them runs unchanged, each public name there is
the root's own object, and each name of the original's Python engine raises an
AttributeError naming its replacement, with no warning first.

tests/bench/test_dropin_parity.py runs the same scripts through the original 0.2.0 and
compares their output with ours."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import numpy as np
import pytest
import zarr
from original_scripts import ORIGINAL_NAMES, WORKING, run_script, write_store

import insitubatch
from insitubatch import _compat


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory):
    return write_store(tmp_path_factory.mktemp("original") / "weather.zarr")


@pytest.mark.parametrize("module", WORKING)
def test_a_script_importing_from_the_module_runs_unchanged(module, store_dir, tmp_path):
    proc = run_script(sys.executable, module, store_dir, tmp_path / module)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    if module == "source":
        drawn = [i for rows in out["train"] for i in rows]  # 5 of 8 chunks of 4: 20 samples, each once
        assert len(out["train"]) == 4 and len(set(drawn)) == len(drawn) == 20
    elif module == "split":
        assert out["round_trip"] and out["anchors"] == [1, 28]
    elif module == "store":
        assert out["read_back"] == [15, 16, 17] and out["geometries"]["z"] == [[12, 3], [4, 3], "int32"]
    else:
        source = zarr.open_group(store_dir, mode="r")
        rows = out["rows"]
        np.testing.assert_allclose(out["batch"]["t2m"], source["t2m"][rows] - np.float32(273.15), atol=1e-4)
        wind = np.sqrt(source["u10"][rows] ** 2 + source["v10"][rows] ** 2)
        np.testing.assert_allclose(out["batch"]["windspeed"], wind, atol=1e-4)
        assert out["records"] == [2, [1], 3, 0]  # a Batch built from arrays alone: no provenance


@pytest.mark.parametrize("module", ["plan", "pool", "scheduler"])
def test_a_script_importing_the_originals_engine_stops_on_its_import_line(module, store_dir, tmp_path):
    proc = run_script(sys.executable, module, store_dir, tmp_path / module)
    assert proc.returncode == 1
    first = ORIGINAL_NAMES[module][0]
    assert f"ImportError: cannot import name {first!r} from 'insitubatch.{module}' (" in proc.stderr, proc.stderr
    assert f"insitubatch/{module}.py)" in proc.stderr  # the file whose docstring says what replaced it


@pytest.mark.parametrize("module", ORIGINAL_NAMES)
def test_each_public_name_is_the_roots_object_or_names_its_replacement(module):
    mod = sys.modules[f"insitubatch.{module}"]  # imported with the package, as the original's were
    assert getattr(insitubatch, module) is (insitubatch.stores.store if module == "store" else mod)
    assert sorted(mod.__all__) == sorted(n for n in ORIGINAL_NAMES[module] if n not in _compat.ENGINE_INTERNALS)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name in ORIGINAL_NAMES[module]:
            if name in mod.__all__:
                assert getattr(mod, name) is getattr(insitubatch, name), (module, name)
                assert name in insitubatch.__all__
                continue
            assert not hasattr(mod, name) and not hasattr(insitubatch, name), (module, name)
            with pytest.raises(AttributeError) as error:
                getattr(mod, name)
            assert str(error.value) == (f"insitubatch.{module}.{name} was part of the original's Python engine and"
                                        f" is not public here: {_compat.ENGINE_INTERNALS[name]}")
    with pytest.raises(AttributeError, match=f"^module 'insitubatch.{module}' has no attribute 'nope'$"):
        getattr(mod, "nope")


def test_every_engine_name_is_one_the_original_had():
    names = {n for names in ORIGINAL_NAMES.values() for n in names}
    assert set(_compat.ENGINE_INTERNALS) <= names


def test_insitubatch_store_stays_the_function_whatever_imports_the_module_first():
    out = subprocess.run([sys.executable, "-c", """
import insitubatch.store
from insitubatch.store import obstore_store
import insitubatch
from insitubatch.stores import store
assert insitubatch.store is store, insitubatch.store
assert obstore_store is insitubatch.obstore_store
import insitubatch.store as bound
assert bound is store  # `import ... as` reads the package attribute: the function
print("ok")
"""], capture_output=True, text=True, timeout=120, cwd="/")
    assert out.returncode == 0 and out.stdout == "ok\n", out.stderr
