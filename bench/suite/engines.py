"""One engine's run, in its own process: ``python engines.py '<json config>'``.

The parent (run.py) starts a fresh interpreter per engine and worker count, so the time to
the first batch includes interpreter start, imports and store opening, and the peak RSS
it samples covers this process and every worker it starts. Each engine runs a warm-up
epoch (whose first batch is the TTFB) and then ``epochs`` timed epochs, checks that each
epoch delivered every sample exactly once (or, for the budget-capped naive loop, no sample
twice), and prints one JSON line.

Module-level imports stay to the standard library and numpy: the `original` engine runs
this file under .venv-orig (the PyPI insitubatch, no torch), and DataLoader workers
started by spawn or forkserver (--mp-context) re-import it.
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

VAR = "t2m"


class SampleCheck:
    """Per-epoch check: every sample exactly once (indices known) or the right count."""

    def __init__(self, n_samples: int) -> None:
        self.n = n_samples
        self.parts: list[np.ndarray] = []
        self.count = 0

    def add(self, batch_len: int, indices=None) -> None:
        self.count += int(batch_len)
        if indices is not None:  # a copy: a view could keep the engine's batch buffer alive
            self.parts.append(np.array(indices, dtype=np.int64, copy=True).reshape(-1))

    def finish(self, complete: bool = True) -> str:
        """'' when the epoch was right, else what was wrong; then resets."""
        err = ""
        if self.parts:
            idx = np.concatenate(self.parts)
            if len(idx) != self.count:
                err = f"{len(idx)} indices for {self.count} samples"
            elif complete and not np.array_equal(np.sort(idx), np.arange(self.n)):
                err = f"epoch is not a permutation of {self.n} samples ({len(idx)} delivered)"
            elif not complete and len(np.unique(idx)) != len(idx):
                err = "a sample was delivered twice"
        elif complete and self.count != self.n:
            err = f"{self.count} samples delivered, expected {self.n}"
        self.parts, self.count = [], 0
        return err


class Runner:
    """Times a warm-up epoch plus ``epochs`` epochs of ``one_epoch(epoch, check)``."""

    def __init__(self, cfg: dict) -> None:
        self.cfg = cfg
        self.first_batch_t: float | None = None
        self.check = SampleCheck(cfg["samples"])
        self.errors: list[str] = []
        self.extra: dict = {}

    def first(self) -> None:
        if self.first_batch_t is None:
            self.first_batch_t = time.monotonic()

    def epochs(self, one_epoch, n: int | None = None, key: str = "epochs") -> None:
        out = []
        for epoch in range((self.cfg["epochs"] if n is None else n) + 1):  # epoch 0 warms up
            t0 = time.perf_counter()
            info = one_epoch(epoch, self.check) or {}
            dt = time.perf_counter() - t0
            samples = self.check.count
            err = self.check.finish(info.get("complete", True))
            if err:
                self.errors.append(f"{key}[{epoch}]: {err}")
            out.append({"epoch": epoch, "s": dt, "samples": samples, **info})
        self.extra[key] = out

    def result(self) -> dict:
        return {"first_batch_t": self.first_batch_t, "errors": self.errors, **self.extra,
                "vm_hwm": _status("VmHWM:")}


def _status(field: str) -> int:
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) * 1024
    return 0


def _open_zarr(path: str):
    import zarr

    return zarr.open_array(zarr.storage.LocalStore(path, read_only=True), path=VAR, mode="r")


# -- ours ----------------------------------------------------------------------------------
def _ours_dataset(cfg: dict):
    from insitubatch import InSituDataset, open_geometries, split_by_chunk, store

    s = store(cfg["path"])
    geoms = open_geometries(s, [VAR])
    manifest = split_by_chunk(geoms[VAR], fractions=(1.0, 0.0, 0.0))
    return InSituDataset(s, manifest, geoms, batch_size=cfg["batch_size"], block_chunks=cfg["block_chunks"],
                         max_inflight=cfg["max_inflight"])


def _hit_info(stats) -> dict:
    if stats is None:
        return {}
    return {"hits": stats.cache_hits, "misses": stats.cache_misses}


def run_ours(r: Runner) -> None:
    ds = _ours_dataset(r.cfg)

    def epoch(e, check, clear=False):
        ds.set_epoch(e)
        if clear:
            ds.clear_cache()
        for batch in ds.train:
            r.first()
            check.add(len(batch), batch.sample_indices)
        return _hit_info(ds.last_pass)

    r.epochs(epoch)  # as a training loop sees it: the pool carries over between epochs
    # Every chunk decoded again each epoch: what the raw decode ceiling is compared with.
    r.epochs(lambda e, check: epoch(e, check, clear=True), key="epochs_cleared")
    r.extra["decode_threads"] = ds.decode_threads
    r.extra["max_inflight"] = ds.max_inflight
    ds.close()


def run_ours_torch(r: Runner) -> None:
    import torch.utils.data

    from insitubatch import as_torch

    ds = _ours_dataset(r.cfg)
    loader = torch.utils.data.DataLoader(as_torch(ds.train), batch_size=None, num_workers=0)

    def epoch(e, check):
        ds.set_epoch(e)
        for batch in loader:
            r.first()
            check.add(batch[VAR].shape[0])  # to_torch keeps only the arrays
        return _hit_info(ds.last_pass)

    r.epochs(epoch)
    ds.close()


# -- the original pure-Python insitubatch (PyPI 0.2.0, run under .venv-orig) -----------------
def run_original(r: Runner) -> None:
    import insitubatch
    from insitubatch import InSituDataset, obstore_store, open_geometries, split_by_chunk

    s = obstore_store("file://" + os.path.abspath(r.cfg["path"]))
    geoms = open_geometries(s, [VAR])
    manifest = split_by_chunk(geoms[VAR], fractions=(1.0, 0.0, 0.0))
    ds = InSituDataset(s, manifest, geoms, batch_size=r.cfg["batch_size"], block_chunks=r.cfg["block_chunks"],
                       max_inflight=r.cfg["max_inflight"])

    def epoch(e, check):
        ds.set_epoch(e)
        for batch in ds.train:
            r.first()
            check.add(len(batch.sample_indices), batch.sample_indices)
        return _hit_info(getattr(ds, "last_pass", None))

    r.epochs(epoch)
    r.extra["version"] = insitubatch.__version__
    close = getattr(ds, "close", None)
    if close:
        close()


# -- torch DataLoader peers ----------------------------------------------------------------
def _over(cfg: dict, t0: float, check: SampleCheck) -> bool:
    """--peer-budget: stop a DataLoader peer's epoch after that many seconds (0: never)."""
    budget = cfg.get("peer_budget_s") or 0
    return bool(budget) and time.perf_counter() - t0 > budget and check.count < check.n


def _loader_kwargs(cfg: dict) -> dict:
    """Persistent workers, started by the platform's default method unless --mp-context
    names one (zarr-python resets its event loop in a forked child, so fork is safe here)."""
    if not cfg["workers"]:
        return {"num_workers": 0}
    return {"num_workers": cfg["workers"], "persistent_workers": True, "prefetch_factor": 2,
            "multiprocessing_context": cfg.get("mp_context") or None}


def run_xbatcher(r: Runner) -> None:
    import torch
    import xarray as xr
    import xbatcher
    from xbatcher.loaders.torch import MapDataset

    da = xr.open_zarr(r.cfg["path"], consolidated=False)[VAR]
    # One sample per generator item (a 1-step time window over the whole field); the
    # DataLoader batches 32 of them with a per-epoch random permutation (shuffle=True).
    gen = xbatcher.BatchGenerator(da, input_dims={"time": 1, "lat": da.sizes["lat"], "lon": da.sizes["lon"]})
    loader = torch.utils.data.DataLoader(MapDataset(gen), batch_size=r.cfg["batch_size"], shuffle=True,
                                         **_loader_kwargs(r.cfg))

    def epoch(e, check):
        t0 = time.perf_counter()
        for batch in loader:
            r.first()
            check.add(batch.shape[0])
            if _over(r.cfg, t0, check):
                return {"complete": False}
        return {}

    r.epochs(epoch)


class ZarrSamples:
    """Map-style dataset: item i is ``zarr_array[i]`` (zarr-python), opened once per worker.
    Returns the index too, so the parent can check the epoch. Plain class (no torch import):
    the DataLoader needs only __len__/__getitem__, and it must pickle to workers."""

    def __init__(self, path: str, n: int) -> None:
        self.path, self.n, self._arr = path, n, None

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        if self._arr is None:
            self._arr = _open_zarr(self.path)
        return i, self._arr[i]


def run_mapstyle(r: Runner) -> None:
    import torch

    loader = torch.utils.data.DataLoader(ZarrSamples(r.cfg["path"], r.cfg["samples"]), batch_size=r.cfg["batch_size"],
                                         shuffle=True, **_loader_kwargs(r.cfg))

    def epoch(e, check):
        t0 = time.perf_counter()
        for idx, batch in loader:
            r.first()
            check.add(batch.shape[0], idx.numpy())
            if _over(r.cfg, t0, check):
                return {"complete": False}
        return {}

    r.epochs(epoch)


# -- no loader ----------------------------------------------------------------------------
def run_naive(r: Runner) -> None:
    arr = _open_zarr(r.cfg["path"])
    n, bs, budget = r.cfg["samples"], r.cfg["batch_size"], r.cfg["naive_budget_s"]

    def epoch(e, check):
        order = np.random.default_rng(e).permutation(n)
        t0 = time.perf_counter()
        for k in range(0, n, bs):
            idx = order[k:k + bs]
            batch = np.stack([arr[int(i)] for i in idx])
            r.first()
            check.add(len(batch), idx)
            if time.perf_counter() - t0 > budget and k + bs < n:
                return {"complete": False}
        return {"complete": True}

    r.epochs(epoch)


def run_inmem(r: Runner) -> None:
    arr = _open_zarr(r.cfg["path"])
    full = arr[:]  # the preload is part of this engine's time to first batch
    n, bs = r.cfg["samples"], r.cfg["batch_size"]
    buf = np.empty((bs, *full.shape[1:]), dtype=full.dtype)

    def epoch(e, check):
        order = np.random.default_rng(e).permutation(n)
        for k in range(0, n, bs):
            idx = order[k:k + bs]
            np.take(full, idx, axis=0, out=buf[:len(idx)])
            r.first()
            check.add(len(idx), idx)
        return {}

    r.epochs(epoch)


def run_decode(r: Runner) -> None:
    """The raw decode ceiling: every stored zstd frame decoded by ``threads`` threads with
    libzstd, frames already in memory (best of ``repeats``); no loader, no samples."""
    from insitubatch import _ext

    files = open(r.cfg["frames"]).read().split("\n")
    threads = r.cfg["threads"]
    s = _ext.zstd_decode_ceiling(files, r.cfg["decoded"], threads, r.cfg["decode_repeats"])
    r.extra["epochs"] = [{"epoch": 1, "s": s, "samples": r.cfg["samples"]}]
    r.extra["frames"] = len(files)
    r.extra["threads"] = threads


ENGINES = {"ours": run_ours, "ours+torch": run_ours_torch, "original": run_original, "xbatcher": run_xbatcher,
           "mapstyle": run_mapstyle, "naive": run_naive, "inmem": run_inmem, "decode": run_decode}


def main() -> None:
    cfg = json.loads(sys.argv[1])
    r = Runner(cfg)
    ENGINES[cfg["engine"]](r)
    sys.stdout.write("\n" + json.dumps(r.result()) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
