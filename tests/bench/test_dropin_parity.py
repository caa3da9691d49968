"""A script written for the original insitubatch 0.2.0 runs unchanged here, with the same results.

Each scenario runs twice: in this process (ours) and in .venv-orig (the PyPI 0.2.0, Python
3.12; `scripts/bench.sh --setup-only` makes it), over the same stores, and the results are
compared exactly: string stores, CF-style stores written by xarray (coordinates, a
datetime64 `time`, a 0-d `spatial_ref`), batches draw for draw, `describe()` keys, the
`bad_chunks` records, the public names, `Batch` without provenance and `DrawOrder`.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import zarr
from zarr.codecs import ZstdCodec

import insitubatch

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "suite"))
sys.path.insert(0, str(ROOT / "tests"))
import run as suite  # noqa: E402
from original_scripts import ORIGINAL_NAMES, WORKING, run_script, write_store  # noqa: E402

# The scenarios, written once against the original's documented API; `store_dir` and `cf_dir`
# are filled in. Each prints one JSON document of results.
SCRIPT = textwrap.dedent("""
    import hashlib, json, logging, sys
    import numpy as np
    import insitubatch as ib

    store_dir, cf_dir, bad_dir, out_dir = sys.argv[1:5]
    out = {"version": ib.__version__, "all": sorted(ib.__all__)}

    # A path string as the store, everywhere a store is taken.
    geoms = ib.open_geometries(store_dir)
    out["geometries"] = {k: [list(g.shape), list(g.chunks), str(g.dtype)] for k, g in geoms.items()}
    manifest = ib.split_by_chunk(geoms["t2m"], fractions=(0.6, 0.2, 0.2), seed=3)
    out["manifest"] = {k: sorted(int(c) for c in v) for k, v in manifest.chunks.items()}
    ds = ib.InSituDataset(store_dir, manifest, geoms, batch_size=7, seed=11, block_chunks=2)
    digest, rows = hashlib.sha256(), []
    for batch in ds.train:
        rows.append([int(i) for i in batch.sample_indices])
        for label in sorted(batch.arrays):
            digest.update(np.ascontiguousarray(batch.arrays[label]).tobytes())
    out["train"] = {"rows": rows, "sha256": digest.hexdigest()}
    out["val"] = [[int(i) for i in b.sample_indices] for b in ds.val]
    report = ds.describe()
    out["describe"] = {k: sorted(report[k]) for k in ("config", "memory")}
    out["describe_top"] = sorted(report)
    out["drawable"] = {k: int(v) for k, v in report["config"]["drawable_samples"].items()}

    # A CF store as xarray writes it: which arrays are data, with and without variables=.
    out["cf"] = sorted(ib.open_geometries(cf_dir))
    out["cf_named"] = sorted(ib.open_geometries(cf_dir, variables=["t2m"]))

    # A corrupt chunk, read with on_bad_chunk="nan": the records name it.
    bgeoms = ib.open_geometries(bad_dir)
    bds = ib.InSituDataset(bad_dir, ib.split_by_chunk(bgeoms["v"], fractions=(1.0, 0.0, 0.0)), bgeoms,
                           batch_size=4, shuffle=False, on_bad_chunk="nan")
    values = np.concatenate([b.arrays["v"] for b in bds.train])
    out["bad"] = [[r.array, int(r.chunk_index), [int(c) for c in r.inner_coord], list(r.coords)]
                  for r in bds.bad_chunks]
    out["bad_type"] = type(bds.bad_chunks[0]).__name__
    out["nan_rows"] = [int(i) for i in np.flatnonzero(np.isnan(values).all(axis=1))]

    # A batch transform that builds a new Batch from arrays alone.
    b = ib.Batch(arrays={"x": np.zeros((3, 2))})
    out["bare_batch"] = [len(b.sample_indices), b.offsets]

    order = ib.block_shuffled_order(np.arange(6), 4, 22, block_chunks=4, seed=5, epoch=2)
    out["draw_order"] = [type(order).__name__, np.asarray(order.rows).tolist(), np.asarray(order.bounds).tolist(),
                         order.n_blocks, list(order.block(1)), len(order)]
    kept = order.keep(order.rows[:, 0] != 1)
    out["draw_order_kept"] = [np.asarray(kept.rows).tolist(), np.asarray(kept.bounds).tolist()]
    out["ensure_local_dir"] = ib.ensure_local_dir("file://" + out_dir + "/made/here")
    out["stage_fields"] = sorted(ib.StageTimes.__dataclass_fields__)

    import inspect
    out["signatures"] = {}
    for name in ("InSituDataset", "open_geometries", "split_by_chunk", "StandardScaler", "applies", "as_torch",
                 "to_torch", "to_jax", "as_tf_dataset", "block_shuffled_order", "sequential_order",
                 "shuffle_quality", "valid_anchor_range", "chunk_permutation", "ArrayGeometry", "Batch"):
        params = inspect.signature(getattr(ib, name)).parameters.values()
        out["signatures"][name] = {p.name: (p.kind.name, None if p.default is inspect.Parameter.empty
                                            else repr(p.default)) for p in params}
    print(json.dumps(out))
""")


def _write_stores(tmp: pathlib.Path) -> tuple[str, str, str]:
    rng = np.random.default_rng(0)
    store_dir = tmp / "era5.zarr"
    root = zarr.open_group(zarr.storage.LocalStore(store_dir), mode="w")
    for name, dtype in (("t2m", "f4"), ("u10", "f8")):
        a = root.create_array(name, shape=(50, 6, 5), chunks=(4, 6, 5), dtype=dtype,
                              compressors=[ZstdCodec(level=1)])
        a[:] = rng.standard_normal((50, 6, 5)).astype(dtype)

    import xarray as xr

    cf_dir = tmp / "cf.zarr"
    times = np.arange("2020-01-01", "2020-01-13", dtype="datetime64[D]").astype("datetime64[ns]")
    data = xr.Dataset(
        {"t2m": (("time", "latitude", "longitude"), rng.standard_normal((12, 4, 5)).astype("f4")),
         "u10": (("time", "latitude", "longitude"), rng.standard_normal((12, 4, 5)).astype("f4")),
         "spatial_ref": ((), np.int32(0), {"crs_wkt": "GEOGCS[...]"})},
        coords={"time": times, "latitude": np.linspace(50, 40, 4), "longitude": np.linspace(0, 4, 5)},
    )
    data.to_zarr(cf_dir, mode="w", zarr_format=3, consolidated=False)

    bad_dir = tmp / "bad.zarr"
    b = zarr.create_array(zarr.storage.LocalStore(bad_dir), name="v", shape=(12, 3), chunks=(4, 3), dtype="f4",
                          compressors=[ZstdCodec(level=1)])
    b[:] = np.arange(36, dtype="f4").reshape(12, 3)
    (bad_dir / "v" / "c" / "1" / "0").write_bytes(b"not zstd at all")
    return str(store_dir), str(cf_dir), str(bad_dir)


def _run(python: str, tmp: pathlib.Path, stores: tuple[str, str, str], who: str) -> dict:
    out_dir = tmp / who
    out_dir.mkdir()
    proc = subprocess.run([python, "-c", SCRIPT, *stores, str(out_dir)], capture_output=True, text=True,
                          timeout=240, cwd="/")
    assert proc.returncode == 0, f"{who}:\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout)


@pytest.mark.timeout(400)
def test_a_script_for_the_original_runs_unchanged_with_the_same_results(tmp_path):
    orig = ROOT / ".venv-orig" / "bin" / "python"
    if not orig.exists():
        assert suite.find_python312() is None, "a Python 3.12 exists: run scripts/bench.sh --setup-only"
        pytest.skip("no Python 3.12 for the original insitubatch")
    stores = _write_stores(tmp_path)
    theirs = _run(str(orig), tmp_path, stores, "theirs")
    ours = _run(sys.executable, tmp_path, stores, "ours")
    assert theirs["version"] == "0.2.0"

    # Every name the original documents exists here; its engine internals point elsewhere.
    internals = {"ChunkPool", "Scheduler", "SchedulerConfig", "build_stored_chunk_reads"}
    assert set(theirs["all"]) - internals <= set(ours["all"])
    for name in internals:
        with pytest.raises(AttributeError, match="public"):
            getattr(insitubatch, name)

    for key in ("geometries", "manifest", "train", "val", "drawable", "cf", "cf_named", "bad", "bad_type",
                "nan_rows", "bare_batch", "draw_order", "draw_order_kept", "stage_fields"):
        assert ours[key] == theirs[key], key
    assert ours["cf"] == ["t2m", "u10"]  # not time/latitude/longitude (coordinates) nor spatial_ref (0-d)
    assert ours["bad"] == [["v", 1, [0], [1, 0]]] and ours["nan_rows"] == [4, 5, 6, 7]
    assert pathlib.Path(tmp_path / "ours" / "made" / "here").is_dir()
    assert pathlib.Path(tmp_path / "theirs" / "made" / "here").is_dir()
    # Every argument the original takes is taken here, by the same name, with the same default.
    for name, params in theirs["signatures"].items():
        for param, spec in params.items():
            assert param in ours["signatures"][name], (name, param)
            kind, default = ours["signatures"][name][param]
            assert default == spec[1] or spec[1] is None, (name, param, spec)  # None: required there
            # Taken the same way (ours may also take a keyword-only argument positionally).
            assert kind == spec[0] or (spec[0], kind) == ("KEYWORD_ONLY", "POSITIONAL_OR_KEYWORD"), (name, param)
    # describe(): every key the original reports is reported here (ours adds some).
    assert set(theirs["describe_top"]) <= set(ours["describe_top"]) | {"notes"}
    for section in ("config", "memory"):
        missing = set(theirs["describe"][section]) - set(ours["describe"][section])
        assert not missing, (section, sorted(missing))


def test_scripts_importing_from_the_originals_modules_print_what_they_print_there(tmp_path):
    """tests/test_original_modules.py's scripts, one per module path of the original: those
    of its public modules print the same here; those of its Python engine run there (so they
    are the original's style) and stop here on their import line."""
    orig = ROOT / ".venv-orig" / "bin" / "python"
    if not orig.exists():
        assert suite.find_python312() is None, "a Python 3.12 exists: run scripts/bench.sh --setup-only"
        pytest.skip("no Python 3.12 for the original insitubatch")
    store_dir = write_store(tmp_path / "weather.zarr")
    for module in ORIGINAL_NAMES:
        theirs = run_script(str(orig), module, store_dir, tmp_path / f"theirs-{module}")
        ours = run_script(sys.executable, module, store_dir, tmp_path / f"ours-{module}")
        assert theirs.returncode == 0, (module, theirs.stderr[-3000:])
        if module in WORKING:
            assert ours.returncode == 0, (module, ours.stderr[-3000:])
            assert ours.stdout == theirs.stdout, module
        else:
            assert ours.returncode == 1 and f"from 'insitubatch.{module}'" in ours.stderr, (module, ours.stderr)
