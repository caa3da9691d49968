"""Written as the original insitubatch's examples are (examples/wb2_dataloader.py): the
dataset class from insitubatch.source. Prints the draw and a digest of every batch."""

import hashlib
import json
import sys

import numpy as np

from insitubatch import open_geometries, split_by_chunk
from insitubatch.source import InSituDataset

store_dir = sys.argv[1]
geoms = open_geometries(store_dir, variables=["t2m", "u10"])
manifest = split_by_chunk(geoms["t2m"], fractions=(0.6, 0.2, 0.2), seed=3)
ds = InSituDataset(store_dir, manifest, geometries=geoms, batch_size=5, block_chunks=2, seed=7)
ds.set_epoch(1)
digest, rows = hashlib.sha256(), []
for batch in ds.train:
    rows.append([int(i) for i in batch.sample_indices])
    for name in sorted(batch.arrays):
        digest.update(np.ascontiguousarray(batch.arrays[name]).tobytes())
val = [[int(i) for i in batch.sample_indices] for batch in ds.val]
print(json.dumps({"train": rows, "sha256": digest.hexdigest(), "val": val}))
