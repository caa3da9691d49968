"""Helpers shared by the framework adapter tests (plain functions; fixtures are in conftest.py).
Imports no framework."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap

import numpy as np
import zarr
from zarr.codecs import ZstdCodec

from insitubatch import Batch


def write_store(path, arrays: dict) -> None:
    """arrays: name -> (values, chunks)."""
    for name, (values, chunks) in arrays.items():
        arr = zarr.create_array(zarr.storage.LocalStore(path), name=name, shape=values.shape, chunks=chunks,
                                dtype=values.dtype, compressors=[ZstdCodec(level=1)], fill_value=0)
        arr[...] = values


def add_index(batch: Batch) -> Batch:
    """Batch transform carrying each row's read index through a framework, for round trips."""
    arrays = dict(batch.arrays)
    arrays["idx"] = batch.read_indices("x").copy()
    return Batch(arrays, batch.sample_indices, batch.offsets)


def first_batch(view) -> Batch:
    with iter(view) as it:
        return next(it)


def expected(sources, batch: Batch, label: str) -> np.ndarray:
    return sources[label][batch.read_indices(label)]


def run_without(module: str, call: str) -> str:
    """Runs ``call`` in a fresh interpreter where importing ``module`` fails, returning the
    ImportError message it raised (failing the test if it raised none)."""
    code = textwrap.dedent(f"""
        import sys
        sys.modules[{module!r}] = None  # what an uninstalled framework looks like to import
        import numpy as np
        import insitubatch
        assert {module!r} not in [m for m in sys.modules if sys.modules[m] is not None]
        batch = insitubatch.Batch({{"x": np.zeros((2, 3), "f4")}}, np.arange(2))
        try:
            {call}
        except ImportError as exc:
            print(exc)
            sys.exit(0)
        sys.exit("no ImportError")
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    return proc.stdout.strip()


def run_python(code: str) -> None:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr + proc.stdout


def run_torchrun(script, *args: str, nproc: int = 3, timeout: float = 240) -> None:
    """Runs ``script`` under ``torchrun --nproc_per_node=nproc`` (gloo over loopback, a free
    port for the rendezvous) and fails with its stderr unless every rank exits 0. The job
    runs in its own session, so a hang kills torchrun's rank processes too."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo"}  # loopback only: no other interface is reachable here
    proc = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}",
                             "--master_addr=127.0.0.1", f"--master_port={port}", str(script), *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        _, stderr = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
    assert proc.returncode == 0, stderr[-4000:]
