"""Scripts that import the way users of the original insitubatch 0.2.0 do, one per module
of its public paths (tests/data/original_imports/uses_<module>.py), and how to run one:
shared by tests/test_original_modules.py (ours) and tests/bench/test_dropin_parity.py (ours
against the original's output)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import zarr

SCRIPTS = Path(__file__).resolve().parent / "data" / "original_imports"

# What each of the original 0.2.0's modules defines under a public name (read from the PyPI
# package: names its module defines, not those it imports from elsewhere).
ORIGINAL_NAMES = {
    "source": ["InSituDataset", "read_ahead_bound"],
    "split": ["SplitManifest", "split_by_chunk", "valid_anchor_range"],
    "store": ["arraylake_store", "close_store", "ensure_local_dir", "fsspec_store", "icechunk_store", "obstore_store",
              "open_geometries"],
    "types": ["ArrayGeometry", "Batch", "ChunkRead", "DecodedChunk", "SplitName", "StoredChunkRead"],
    "plan": ["ChunkReadPlan", "build_stored_chunk_reads"],
    "pool": ["ChunkPool", "PassCounters", "SlotState", "output_geometry", "slot_charge_bytes", "transforms_for",
             "validate_scopes"],
    "scheduler": ["Scheduler", "SchedulerConfig", "decode_pool", "decode_pool_workers", "reset_decode_pool"],
}
WORKING = ("source", "split", "store", "types")  # the modules whose scripts run here


def write_store(path: Path) -> str:
    """Three variables as the original's transforms example has them (Kelvin, two winds)."""
    rng = np.random.default_rng(0)
    group = zarr.open_group(zarr.storage.LocalStore(path), mode="w")
    for name, base in (("t2m", 273.15), ("u10", 0.0), ("v10", 0.0)):
        array = group.create_array(name, shape=(30, 4, 5), chunks=(4, 4, 5), dtype="f4")
        array[:] = (base + 5 * rng.standard_normal((30, 4, 5))).astype("f4")
    return str(path)


def run_script(python: str, module: str, store_dir: str, work: Path) -> subprocess.CompletedProcess[str]:
    """One script as a user runs it: its own process, from outside the checkout, warnings
    as errors (a DeprecationWarning on the way would fail it)."""
    work.mkdir(exist_ok=True)
    return subprocess.run([python, "-W", "error::DeprecationWarning", str(SCRIPTS / f"uses_{module}.py"), store_dir,
                           str(work)], capture_output=True, text=True, timeout=240, cwd=work)
