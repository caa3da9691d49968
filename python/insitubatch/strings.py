"""Variable-length string arrays (zarr v3 ``string`` / ``variable_length_bytes``, v2 ``|O``
with vlen-utf8, vlen-bytes or a categorize object codec): labels, station names, file
names kept beside the data.

Their items have no fixed size, so no engine slot holds them: a dataset reads them beside
the engine, a chunk at a time as batches need it, and hands each batch's rows as a numpy
object array (``str``, or ``bytes`` for ``variable_length_bytes``). They are small next to
the data they label, so they are not counted in the cache budget; a pass holds at most
:data:`MAX_BLOCKS` sample-chunks of each string array.
"""

from __future__ import annotations

import collections
import itertools
import math
import threading
from typing import Any

import numpy as np

from .geometry import ArrayGeometry, read_string_chunk

MAX_BLOCKS = 64


def is_string(dtype: np.dtype) -> bool:
    return np.dtype(dtype).kind == "O"


class StringColumn:
    """The rows of one string array, gathered for the batches of one pass."""

    def __init__(self, array: Any, geometry: ArrayGeometry) -> None:
        """``array``: the native string array, opened once by the dataset's hierarchy."""
        self._geometry = geometry
        self._array = array
        self._blocks: collections.OrderedDict[int, np.ndarray] = collections.OrderedDict()
        self._lock = threading.Lock()  # batch transforms may gather on their own thread

    def _block(self, c: int) -> np.ndarray:
        """Sample-chunk ``c``: every chunk along the other axes, assembled, sample axis first."""
        if c in self._blocks:
            self._blocks.move_to_end(c)
            return self._blocks[c]
        g = self._geometry
        axis, spc = g.sample_axis, g.sample_chunk_size
        lo, hi = c * spc, min((c + 1) * spc, g.shape[axis])
        extent = [hi - lo if d == axis else n for d, n in enumerate(g.shape)]
        block = np.empty(extent, dtype=object)
        grids = [[c] if d == axis else range(math.ceil(n / k)) for d, (n, k) in enumerate(zip(g.shape, g.chunks))]
        for coords in itertools.product(*grids):
            chunk = read_string_chunk(self._array, coords)
            dst, src = [], []
            for d, (i, k) in enumerate(zip(coords, g.chunks)):
                start = 0 if d == axis else i * k
                stop = min(start + k, extent[d])
                dst.append(slice(start, stop))
                src.append(slice(0, stop - start))
            block[tuple(dst)] = chunk[tuple(src)]
        block = np.moveaxis(block, axis, 0)
        self._blocks[c] = block
        if len(self._blocks) > MAX_BLOCKS:
            self._blocks.popitem(last=False)
        return block

    def take(self, rows: np.ndarray) -> np.ndarray:
        """``(len(rows), *inner)`` object array of the rows at sample-axis indices ``rows``."""
        rows = np.asarray(rows, dtype=np.int64)
        g = self._geometry
        out = np.empty((len(rows), *g.inner_shape), dtype=object)
        spc = g.sample_chunk_size
        with self._lock:
            chunks = rows // spc
            for c in np.unique(chunks):
                picked = chunks == c
                out[picked] = self._block(int(c))[rows[picked] - int(c) * spc]
        return out
