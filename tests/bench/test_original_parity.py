"""Our shuffled order is the original insitubatch's, draw for draw (same seed, same batches).

Runs the PyPI insitubatch 0.2.0 in .venv-orig (Python 3.12; `scripts/bench.sh --setup-only`
makes it) and compares its `block_shuffled_order` with ours over several seeds, epochs,
block sizes and a short final chunk. Skips only where no Python 3.12 exists.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from insitubatch import block_shuffled_order, chunk_permutation

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "suite"))
import run as suite  # noqa: E402

CASES = [  # (chunk ids, spc, n_samples, block_chunks, seed, epoch)
    (list(range(32)), 16, 6000, 16, 0, 0),
    (list(range(32)), 16, 6000, 16, 0, 1),
    (list(range(40)), 4, 157, 3, 7, 5),   # short final chunk (157 = 39 * 4 + 1)
    ([2, 3, 5, 8, 13, 21], 1, 30, 4, 123, 9),
    (list(range(100)), 8, 800, 1, 2**40, 2),
]

ORIGINAL = """
import json, sys
import numpy as np
import insitubatch
from insitubatch import block_shuffled_order, chunk_permutation
out = []
for ids, spc, n, bc, seed, epoch in json.loads(sys.argv[1]):
    order = block_shuffled_order(np.asarray(ids, dtype=np.int64), spc, n, block_chunks=bc, seed=seed, epoch=epoch)
    rows = getattr(order, "rows", order)
    perm = chunk_permutation(np.asarray(ids, dtype=np.int64), seed=seed, epoch=epoch)
    out.append({"rows": np.asarray(rows).tolist(), "perm": np.asarray(perm).tolist()})
print(json.dumps({"version": insitubatch.__version__, "orders": out}))
"""


@pytest.mark.timeout(300)
def test_shuffled_order_matches_the_original_insitubatch():
    python = ROOT / ".venv-orig" / "bin" / "python"
    if not python.exists():
        assert suite.find_python312() is None, "a Python 3.12 exists: run scripts/bench.sh --setup-only"
        pytest.skip("no Python 3.12 for the original insitubatch")
    proc = subprocess.run([str(python), "-c", ORIGINAL, json.dumps(CASES)], capture_output=True, text=True,
                          timeout=240, cwd="/")
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout)
    assert got["version"] == "0.2.0"
    for (ids, spc, n, bc, seed, epoch), theirs in zip(CASES, got["orders"], strict=True):
        ours = block_shuffled_order(ids, spc, n, block_chunks=bc, seed=seed, epoch=epoch)
        np.testing.assert_array_equal(ours, np.asarray(theirs["rows"], dtype=np.int64).reshape(-1, 2))
        np.testing.assert_array_equal(chunk_permutation(ids, seed=seed, epoch=epoch), theirs["perm"])
