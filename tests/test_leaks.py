"""nanobind's leak warnings (on in the test suite, off for users): a typical job leaves no
native object alive at exit."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import ctypes
    import numpy as np
    import zarr
    import insitubatch as ib

    path = {path!r}
    arr = zarr.create_array(zarr.storage.LocalStore(path), name="v", shape=(64, 3), chunks=(8, 3), dtype="f4")
    arr[...] = np.arange(192, dtype="f4").reshape(64, 3)

    class KeepsItsErrors(zarr.storage.LocalStore):
        # A store that keeps the exception it raised outside Python's GC, as icechunk's
        # Rust side does: the exception must not carry the bridge's frames (and its read).
        async def get(self, key, prototype=None, byte_range=None):
            if key == "v/c/1/0":
                exc = RuntimeError("denied")
                ctypes.pythonapi.Py_IncRef(ctypes.py_object(exc))
                raise exc
            return await super().get(key, prototype, byte_range)

    for store in (ib.local_store(path), zarr.storage.LocalStore(path, read_only=True)):
        g = ib.open_geometries(store, ["v"])
        with ib.InSituDataset(store, ib.split_by_chunk(g["v"]), g, batch_size=4) as ds:
            assert sum(len(b.sample_indices) for b in ds.train) > 0
            it = iter(ds.val)
            next(it)  # a pass closed early
            del it
    bad = KeepsItsErrors(path, read_only=True)
    try:
        ib.read_chunk(bad, "v", (1, 0))
    except ib.StoreError:
        pass
    print("done")
""")


def test_a_job_leaks_no_native_object(tmp_path):
    env = {**os.environ, "INSITUBATCH_LEAK_WARNINGS": "1"}
    out = subprocess.run([sys.executable, "-c", SCRIPT.format(path=str(tmp_path / "s.zarr"))], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "done" in out.stdout, out.stderr
    assert "nanobind: leaked" not in out.stderr, out.stderr
