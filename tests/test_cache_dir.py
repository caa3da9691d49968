"""cache_dir, persist, readonly_cache and reset_stale_cache with real processes and real
files: a writer killed with SIGKILL mid-epoch, two writers, readers beside a writer,
read-only misses, per-array staleness, tampered logs, wrong-shape files, a full disk, the
three-block floor, and memory and descriptors flat across epochs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr.codecs import ZstdCodec

import insitubatch
from insitubatch import (
    CacheLockedError,
    InSituDataset,
    InvalidArgumentError,
    _ext,
    applies,
    open_geometries,
    split_by_chunk,
)

N = 64


def _write(path: Path) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(5)
    values = {"t2m": rng.standard_normal((N, 6, 5)).astype("f4"),
              "u10": rng.standard_normal((N, 4)).astype("f8")}
    for name, v in values.items():
        arr = zarr.create_array(zarr.storage.LocalStore(path), name=name, shape=v.shape,
                                chunks=(4, *v.shape[1:]), dtype=v.dtype, compressors=[ZstdCodec(level=1)],
                                fill_value=0)
        arr[...] = v
    return values


@pytest.fixture
def era(tmp_path):
    path = tmp_path / "era.zarr"
    return path, _write(path)


def _dataset(path, cache, **kwargs):
    store = kwargs.pop("store", None) or _ext.CountingStore(insitubatch.local_store(path))
    geoms = open_geometries(store, kwargs.pop("variables", ["t2m", "u10"]))
    manifest = split_by_chunk(next(iter(geoms.values())), fractions=(0.75, 0.25, 0.0))
    kwargs.setdefault("batch_size", 8)
    kwargs.setdefault("block_chunks", 2)
    return InSituDataset(store, manifest, geoms, cache_dir=cache, **kwargs), store


def _epoch(ds, values) -> int:
    n = 0
    for batch in ds.train:
        for label, arr in batch.arrays.items():
            np.testing.assert_array_equal(arr, values[label][batch.read_indices(label)])
        n += len(batch.sample_indices)
    return n


def _chunk_reads(store) -> int:
    """Chunk reads the store served (metadata reads left out)."""
    return sum(n for key, n in store.reads().items() if "/c/" in key)


def _chunk_files(cache) -> list[str]:
    return sorted(p.name for p in Path(cache).iterdir() if p.name.endswith(".npy"))


def test_heap_and_disk_passes_are_identical_and_unpersisted_files_go(era, tmp_path):
    path, values = era
    cache = tmp_path / "cache"
    ds, _ = _dataset(path, cache)
    assert _epoch(ds, values) == 48
    assert ds.describe()["config"]["cache_dir"] == str(cache)
    text = []
    ds.print_summary(file=type("W", (), {"write": lambda self, t: text.append(t)})())
    assert f"cache backing {cache}" in "".join(text) and "on disk" in "".join(text)
    assert any(p.name.endswith(".insitu-tmp") for p in cache.iterdir())  # the live slots
    ds.close()
    assert not any(p.name.endswith((".npy", ".insitu-tmp")) for p in cache.iterdir())


def test_persisted_chunks_revive_in_a_new_process_after_sigkill(era, tmp_path):
    """The writer is killed mid-epoch: everything it completed is revived, nothing partial."""
    path, values = era
    cache = tmp_path / "cache"
    code = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import insitubatch
        from insitubatch import InSituDataset, open_geometries, split_by_chunk
        store = insitubatch.local_store({str(path)!r})
        geoms = open_geometries(store, ["t2m", "u10"])
        manifest = split_by_chunk(geoms["t2m"], fractions=(0.75, 0.25, 0.0))
        ds = InSituDataset(store, manifest, geoms, cache_dir={str(cache)!r}, persist=True,
                           batch_size=8, block_chunks=2, shuffle=False)
        it = iter(ds.train)
        for _ in range(3):
            next(it)
        print("ready", ds.decode_threads or os.cpu_count(), flush=True)  # 0: one per core
        signal.pause()
    """)
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    word, decode_threads = child.stdout.readline().split()
    assert word == "ready"
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    log = [json.loads(line) for line in (cache / "insitu_cache.jsonl").read_text().splitlines()[1:]]
    logged = {e["key"] for e in log}
    files = set(_chunk_files(cache))
    # Every logged chunk has its file. Files are committed on the decode threads, so each of them
    # may have renamed one into place just before the kill without logging it yet.
    assert logged and {e["file"] for e in log} <= files and len(files) - len(logged) <= int(decode_threads)
    ds, store = _dataset(path, cache, persist=True, shuffle=False)
    assert set(_chunk_files(cache)) == {e["file"] for e in log}  # the unlogged ones are swept
    assert _epoch(ds, values) == 48
    reads = store.reads()
    revived = ds.last_pass.revived
    assert revived == len(logged)
    assert ds.last_pass.cache_misses == 24 - revived  # 12 train chunks x 2 arrays
    assert all(f"{key.split('#')[0]}/c/{key.split('#')[1]}/0" + ("/0" if key.startswith("t2m") else "")
               not in reads for key in logged)  # a revived chunk is never fetched
    ds.close()
    ds2, store2 = _dataset(path, cache, persist=True)
    assert _epoch(ds2, values) == 48
    assert _chunk_reads(store2) == 0 and ds2.last_pass.revived == 24


def test_one_writer_many_readers(era, tmp_path):
    path, values = era
    cache = tmp_path / "cache"
    writer, _ = _dataset(path, cache, persist=True)
    assert _epoch(writer, values) == 48
    with pytest.raises(CacheLockedError, match=rf"pid {os.getpid()} on host .* since .*readonly_cache=True"):
        _dataset(path, cache, persist=True)
    script = textwrap.dedent(f"""
        import sys, numpy as np, zarr, insitubatch
        from insitubatch import InSituDataset, open_geometries, split_by_chunk, _ext
        store = _ext.CountingStore(insitubatch.local_store({str(path)!r}))
        geoms = open_geometries(store, ["t2m", "u10"])
        ds = InSituDataset(store, split_by_chunk(geoms["t2m"], fractions=(0.75, 0.25, 0.0)), geoms,
                           cache_dir={str(cache)!r}, readonly_cache=True, batch_size=8, block_chunks=2)
        src = {{k: zarr.open_array(zarr.storage.LocalStore({str(path)!r}), path=k, mode="r")[...]
               for k in ("t2m", "u10")}}
        n = 0
        for b in ds.train:
            for k, a in b.arrays.items():
                np.testing.assert_array_equal(a, src[k][b.read_indices(k)])
            n += len(b.sample_indices)
        print(n, sum(c for k, c in store.reads().items() if "/c/" in k), ds.last_pass.revived)
    """)
    before = sorted(p.name for p in cache.iterdir())
    readers = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True) for _ in range(3)]
    assert _epoch(writer, values) == 48  # the writer keeps working beside them
    for r in readers:
        out, err = r.communicate(timeout=120)
        assert r.returncode == 0, err
        assert out.split() == ["48", "0", "24"]
    after = sorted(p.name for p in cache.iterdir())
    assert before == after  # readers write nothing


def test_read_only_miss_names_the_chunk(era, tmp_path):
    path, values = era
    cache = tmp_path / "cache"
    with pytest.raises(InvalidArgumentError, match="does not exist"):
        _dataset(path, cache, readonly_cache=True)
    writer, _ = _dataset(path, cache, persist=True, variables=["t2m"])
    _epoch(writer, values)
    writer.close()
    reader, _ = _dataset(path, cache, readonly_cache=True)  # u10 was never cached
    with pytest.raises(insitubatch.NotFoundError, match=r"chunk \d+ of array 'u10' is not in the cache"):
        _epoch(reader, values)


def test_a_changed_transform_makes_only_its_arrays_stale(era, tmp_path):
    path, values = era
    cache = tmp_path / "cache"

    def scale(k):
        def f(chunk):
            chunk.data[...] *= k
            return chunk
        f.cache_key = f"scale-{k}"  # the closure's source is the same for every k
        return f

    def run(k, variables=("t2m", "u10"), **kwargs):
        ds, store = _dataset(path, cache, persist=True, chunk_transforms=[applies(["t2m"], scale(k))],
                             variables=list(variables), **kwargs)
        want = {"t2m": values["t2m"] * k, "u10": values["u10"]}
        assert _epoch(ds, want) == 48
        ds.close()
        return ds, store

    run(2.0, variables=["t2m"])
    # Adding an array is not a reset: u10 is cold (read), t2m revived.
    ds, store = run(2.0)
    assert {k.split("/")[0] for k in store.reads() if "/c/" in k} == {"u10"}
    ds, store = run(2.0)  # same transform: every chunk revived
    assert _chunk_reads(store) == 0
    with pytest.raises(InvalidArgumentError, match="stale for 't2m'.*reset_stale_cache=True") as info:
        run(3.0)
    assert "u10" not in str(info.value)
    ds, store = run(3.0, reset_stale_cache=True)
    assert {k for k in store.reads() if "/c/" in k} == {f"t2m/c/{c}/0/0" for c in range(12)}  # only t2m
    ds, store = run(3.0)
    assert _chunk_reads(store) == 0


def test_with_cloudpickle_a_closures_captured_value_is_part_of_its_fingerprint():
    from insitubatch.caching import array_fingerprints

    def scale(k):
        return lambda chunk: chunk.data * k

    (a, weak_a), (b, _), (c, _) = (array_fingerprints({"t2m": [scale(k)]}) for k in (2.0, 3.0, 2.0))
    assert a["t2m"] != b["t2m"] and a["t2m"] == c["t2m"] and not weak_a
    assert array_fingerprints({"u10": []})[0] == {"u10": ""}


def test_a_transform_without_cache_key_or_cloudpickle_warns(era, tmp_path, caplog, monkeypatch):
    import builtins
    import logging

    real_import = builtins.__import__

    def no_cloudpickle(name, *args, **kwargs):
        if name == "cloudpickle":
            raise ImportError("no cloudpickle")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_cloudpickle)
    path, _ = era
    with caplog.at_level(logging.WARNING, logger="insitubatch"):
        _dataset(path, tmp_path / "cache", persist=True, chunk_transforms=[lambda c: c])
    assert any("best effort" in r.getMessage() and "insitubatch[cache]" in r.getMessage()
               for r in caplog.records)


@pytest.mark.parametrize("tamper, match", [
    (lambda log: log[0] + '{"key": "t2m#0", "file": "/etc/passwd", "bytes": 1, "tag": ""}\n', "path separator"),
    (lambda log: log[0] + '{"key": "t2m#0", "file": "..", "bytes": 1, "tag": ""}\n', "not a file name"),
    (lambda log: log[0] + "garbage\n" + "".join(log[1:]), "not a JSON object"),
    (lambda log: "not a header\n" + "".join(log[1:]), "header is unreadable"),
])
def test_a_tampered_log_is_refused_as_corrupt(era, tmp_path, tamper, match):
    path, values = era
    cache = tmp_path / "cache"
    ds, _ = _dataset(path, cache, persist=True)
    _epoch(ds, values)
    ds.close()
    log = cache / "insitu_cache.jsonl"
    log.write_text(tamper(log.read_text().splitlines(keepends=True)))
    with pytest.raises(InvalidArgumentError, match=match):
        _dataset(path, cache, persist=True, reset_stale_cache=True)


def test_a_wrong_shape_file_is_a_miss(era, tmp_path, caplog):
    path, values = era
    cache = tmp_path / "cache"
    ds, _ = _dataset(path, cache, persist=True)
    _epoch(ds, values)
    ds.close()
    for name in _chunk_files(cache):
        if name.startswith("t2m"):
            np.save(cache / name, np.zeros((2, 2), "f4"))  # a valid .npy, another layout
    ds, store = _dataset(path, cache, persist=True, variables=["t2m"])
    import logging
    with caplog.at_level(logging.WARNING, logger="insitubatch"):
        assert _epoch(ds, values) == 48
    assert _chunk_reads(store) == 12 and ds.last_pass.revived == 0
    assert any("0 of 12 persisted chunks were served" in r.getMessage() for r in caplog.records)
    ds.close()
    ds, store = _dataset(path, cache, persist=True, variables=["t2m"])
    assert _epoch(ds, values) == 48 and _chunk_reads(store) == 0  # rewritten on the refetch


def _mount_tiny_tmpfs(where: Path) -> bool:
    where.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(where)], capture_output=True)
    return proc.returncode == 0


def test_a_full_disk_is_a_clear_error_and_leaves_nothing_partial(era, tmp_path):
    path, values = era
    cache = tmp_path / "tiny"
    if not _mount_tiny_tmpfs(cache):
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        ds, _ = _dataset(path, cache, persist=True)
        with pytest.raises(insitubatch.ResourceExhaustedError, match=rf"{cache}.*disk holding the cache directory is full"):
            _epoch(ds, values)
        ds.close()  # waits for the writes still in flight when the error reached the loop
        assert not any(p.name.endswith(".insitu-tmp") for p in cache.iterdir())
        logged = len((cache / "insitu_cache.jsonl").read_text().splitlines()) - 1
        assert logged == len(_chunk_files(cache))  # every logged chunk is whole
        ds, _ = _dataset(path, tmp_path / "roomy", persist=True)  # the dataset API stays usable
        assert _epoch(ds, values) == 48
    finally:
        subprocess.run(["umount", "-l", str(cache)], capture_output=True)


def test_windowed_shuffled_persist_holds_a_three_block_floor(era, tmp_path):
    path, values = era
    store = insitubatch.local_store(path)
    g = open_geometries(store, ["t2m"])["t2m"]
    window = {"x": g, "y": g.shift(2)}
    manifest = split_by_chunk(g, fractions=(1.0, 0.0, 0.0))
    heap = InSituDataset(store, manifest, window, batch_size=4, block_chunks=1)
    spill = InSituDataset(store, manifest, window, batch_size=4, block_chunks=1,
                          cache_dir=tmp_path / "cache", persist=True)
    slot = 4 * 6 * 5 * 4
    assert heap.working_set_bytes >= 16 * slot  # the whole split stays pinned without spill
    assert spill.working_set_bytes == 3 * 1 * (1 + 2) * slot  # three blocks; y straddles chunks
    assert spill.describe()["config"]["reread_spill"]
    for epoch in range(2):
        spill.set_epoch(epoch)
        n = 0
        for batch in spill.train:
            np.testing.assert_array_equal(batch.arrays["x"], values["t2m"][batch.read_indices("x")])
            np.testing.assert_array_equal(batch.arrays["y"], values["t2m"][batch.read_indices("y")])
            n += len(batch.sample_indices)
        assert n == N - 2
        assert spill.last_pass.depths.resident_peak_bytes <= spill.working_set_bytes
    assert spill.last_pass.revived > 0  # re-reads came back from the disk tier


def test_memory_and_descriptors_flat_across_epochs(era, tmp_path):
    path, values = era
    ds, _ = _dataset(path, tmp_path / "cache", persist=True, cache_budget_bytes=1 << 20)

    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    def maps() -> int:
        return sum(1 for _ in open("/proc/self/maps"))

    _epoch(ds, values)
    base_fds, base_maps = fds(), maps()
    for epoch in range(10):
        ds.set_epoch(epoch)
        _epoch(ds, values)
    assert fds() <= base_fds + 2
    assert maps() <= base_maps + 8
