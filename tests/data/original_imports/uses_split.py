"""Written as the original insitubatch's own tests import it: the split objects
from insitubatch.split. Prints the manifest, its JSON round trip and an anchor range."""

import json
import sys
import tempfile

from insitubatch import SplitName, open_geometries
from insitubatch.split import SplitManifest, split_by_chunk, valid_anchor_range

geom = open_geometries(sys.argv[1])["t2m"]
manifest = split_by_chunk(geom, fractions=(0.7, 0.2, 0.1), seed=5)
with tempfile.TemporaryDirectory() as tmp:
    manifest.to_json(f"{tmp}/split.json")
    again = SplitManifest.from_json(f"{tmp}/split.json")
print(json.dumps({
    "chunks": {name: sorted(int(c) for c in ids) for name, ids in manifest.chunks.items()},
    "round_trip": again.chunks == manifest.chunks and again.n_samples == manifest.n_samples,
    "val_samples": [int(i) for i in manifest.sample_indices(SplitName.VAL, geom)],
    "anchors": [int(a) for a in valid_anchor_range([-1, 0, 2], geom.n_samples)],
}))
