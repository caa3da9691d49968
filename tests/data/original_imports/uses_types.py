"""Written as the original insitubatch's examples are (examples/transforms.py): transforms
typed with the records of insitubatch.types. Prints the records and the transformed batch."""

import json
import sys

import numpy as np

from insitubatch import InSituDataset, open_geometries, split_by_chunk
from insitubatch.types import ArrayGeometry, Batch, ChunkRead, DecodedChunk, SplitName, StoredChunkRead


def kelvin_to_celsius(chunk: DecodedChunk) -> DecodedChunk:
    if chunk.read.array == "t2m":
        chunk.data = chunk.data - np.float32(273.15)
    return chunk


def add_windspeed(batch: Batch) -> Batch:
    batch.arrays["windspeed"] = np.sqrt(batch.arrays["u10"] ** 2 + batch.arrays["v10"] ** 2)
    return batch


geoms = open_geometries(sys.argv[1])
manifest = split_by_chunk(geoms["t2m"], fractions=(0.8, 0.1, 0.1))
ds = InSituDataset(sys.argv[1], manifest, geometries=geoms, batch_size=6, shuffle=False,
                   chunk_transforms=[kelvin_to_celsius], batch_transforms=[add_windspeed])
batch = next(iter(ds.train))
geom = ArrayGeometry("x", shape=(10, 4), chunks=(3, 2), dtype=np.dtype("f4"))
print(json.dumps({
    "batch": {name: np.round(batch.arrays[name].astype("f8"), 4).tolist() for name in sorted(batch.arrays)},
    "rows": [int(i) for i in batch.sample_indices],
    "geometry": [geom.n_samples, geom.n_chunks, list(geom.inner_shape), list(geom.slot_shape(3))],
    "splits": [s.value for s in SplitName],
    "records": [ChunkRead("x", 2).chunk_index, list(StoredChunkRead("x", 2, (1,)).inner_coord),
                DecodedChunk(ChunkRead("x", 1), np.zeros((3, 4)), 3).sample_offset,
                len(Batch(arrays={"x": np.zeros((2, 4))}).sample_indices)],
}))
