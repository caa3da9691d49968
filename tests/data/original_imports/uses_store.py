"""Written as the original insitubatch's benchmarks are (bench/make_dataset.py): the store
functions from insitubatch.store. Writes a store through obstore_store, reads it back."""

import json
import sys

import numpy as np
import zarr

from insitubatch.store import (
    arraylake_store,
    close_store,
    ensure_local_dir,
    fsspec_store,
    icechunk_store,
    obstore_store,
    open_geometries,
)

url = ensure_local_dir("file://" + sys.argv[2] + "/written.zarr")
group = zarr.open_group(store=obstore_store(url, read_only=False), mode="w")
group.create_array("z", shape=(12, 3), chunks=(4, 3), dtype="i4")[:] = np.arange(36, dtype="i4").reshape(12, 3)
store = obstore_store(url)
geoms = open_geometries(store)
geoms.update(open_geometries(obstore_store("file://" + sys.argv[1])))
close_store(store)
print(json.dumps({
    "local_dir": url.startswith("file://") and url.endswith("/written.zarr"),
    "geometries": {k: [list(g.shape), list(g.chunks), str(g.dtype)] for k, g in sorted(geoms.items())},
    "read_back": zarr.open_array(obstore_store(url), path="z", mode="r")[5].tolist(),
    "callables": [callable(f) for f in (arraylake_store, fsspec_store, icechunk_store)],
}))
