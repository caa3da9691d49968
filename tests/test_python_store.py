"""The bridge to zarr-python stores: one store written by zarr-python, read through
MemoryStore, LocalStore, FsspecStore (file://) and an Icechunk repository via the native
engine, values exact against zarr-python's own read; failures, concurrency, shutdown and the
store constructors (Arraylake needs its service, so its call chain runs against a stand-in
module)."""

from __future__ import annotations

import asyncio
import collections
import subprocess
import sys
import textwrap
import threading
import types

import numpy as np
import pytest
import zarr
from zarr.codecs import ZstdCodec

import insitubatch
from insitubatch import InSituDataset, _ext, open_geometries, read_chunk, split_by_chunk
from insitubatch.bridge import _location

try:
    import icechunk
except ImportError:  # requirements/dev.txt installs it; without it only its tests skip
    icechunk = None
needs_icechunk = pytest.mark.skipif(icechunk is None, reason="icechunk is not installed")

N = 80
T2M_CHUNKS = (8, 3, 4)
SH_SHARDS, SH_CHUNKS = (16, 6), (4, 6)


def t2m_values():
    return (np.random.default_rng(1).standard_normal((N, 3, 4)) * 10).astype("f4")


def sh_values():
    return np.arange(N * 6, dtype="i4").reshape(N, 6) * 7 - 100


def fill(zstore):
    """Writes the test hierarchy with zarr-python: a zstd array and a sharded array."""
    root = zarr.open_group(zstore, mode="w", zarr_format=3)
    t2m = root.create_array("t2m", shape=(N, 3, 4), chunks=T2M_CHUNKS, dtype="f4",
                            compressors=[ZstdCodec(level=1)], fill_value=0)
    t2m[...] = t2m_values()
    sh = root.create_array("sh", shape=(N, 6), chunks=SH_CHUNKS, shards=SH_SHARDS, dtype="i4",
                           compressors=[ZstdCodec(level=1)], fill_value=0)
    sh[...] = sh_values()


def make_memory(tmp_path):
    zstore = zarr.storage.MemoryStore()
    fill(zstore)
    return zstore


def make_local(tmp_path):
    fill(zarr.storage.LocalStore(tmp_path / "s.zarr"))
    return zarr.storage.LocalStore(tmp_path / "s.zarr", read_only=True)


def make_fsspec(tmp_path):
    fill(zarr.storage.LocalStore(tmp_path / "s.zarr"))
    return insitubatch.fsspec_store(f"file://{tmp_path / 's.zarr'}")


def make_icechunk(tmp_path):
    if icechunk is None:
        pytest.skip("icechunk is not installed")
    path = tmp_path / "repo.icechunk"
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(path)))
    session = repo.writable_session("main")
    fill(session.store)
    session.commit("write the test hierarchy")
    return insitubatch.icechunk_store(f"file://{path}")


MAKERS = {"memory": make_memory, "local": make_local, "fsspec": make_fsspec, "icechunk": make_icechunk}


@pytest.fixture(params=sorted(MAKERS))
def zstore(request, tmp_path):
    return MAKERS[request.param](tmp_path)


class CountingPyStore:
    """A duck-typed zarr-python store forwarding to `inner`, counting get() per key and
    recording the threads and concurrency the bridge drives it with."""

    def __init__(self, inner, delay_s=0.0):
        self.inner = inner
        self.delay_s = delay_s
        self.counts = collections.Counter()
        self.threads = set()
        self.active = 0
        self.peak = 0

    async def get(self, key, prototype, byte_range=None):
        self.counts[key] += 1
        self.threads.add(threading.current_thread().name)
        self.active += 1
        self.peak = max(self.peak, self.active)
        try:
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            return await self.inner.get(key, prototype, byte_range)
        finally:
            self.active -= 1

    def list_prefix(self, prefix):
        return self.inner.list_prefix(prefix)

    def chunk_counts(self, array):
        return {k: v for k, v in self.counts.items() if k.startswith(f"{array}/c/")}


def check_values(batches, source):
    for b in batches:
        np.testing.assert_array_equal(b.arrays["t2m"], source[b.read_indices("t2m")], strict=True)


# -- the same store through every zarr-python store kind ----------------------------------------


def test_geometries_and_every_chunk_equal_zarr_python(zstore):
    geoms = open_geometries(zstore)
    assert sorted(geoms) == ["sh", "t2m"]
    assert geoms["t2m"].shape == (N, 3, 4) and geoms["t2m"].chunks == T2M_CHUNKS
    assert geoms["sh"].chunks == SH_SHARDS and geoms["sh"].read_chunks == SH_CHUNKS
    t2m = zarr.open_array(zstore, path="t2m", mode="r")[...]
    sh = zarr.open_array(zstore, path="sh", mode="r")[...]
    np.testing.assert_array_equal(t2m, t2m_values())  # the oracle read what was written
    for i in range(N // T2M_CHUNKS[0]):
        got = read_chunk(zstore, "t2m", (i, 0, 0))
        np.testing.assert_array_equal(got, t2m[i * 8:(i + 1) * 8], strict=True)
    for i in range(N // SH_SHARDS[0]):
        got = read_chunk(zstore, "sh", (i, 0))
        np.testing.assert_array_equal(got, sh[i * 16:(i + 1) * 16], strict=True)


def test_dataset_exact_values_and_each_chunk_read_once_per_epoch(zstore):
    counted = CountingPyStore(zstore)
    geoms = open_geometries(counted, ["t2m"])
    manifest = split_by_chunk(geoms["t2m"], fractions=(1.0, 0.0, 0.0))
    ds = InSituDataset(counted, manifest, geoms, batch_size=6, block_chunks=3)
    source = t2m_values()
    for epoch in range(2):
        ds.set_epoch(epoch)
        counted.counts.clear()
        batches = list(ds.train)
        check_values(batches, source)
        seen = np.concatenate([b.sample_indices for b in batches])
        assert sorted(seen.tolist()) == list(range(N))
        reads = counted.chunk_counts("t2m")
        assert set(reads.values()) <= {1}  # decode-once: never a chunk twice in a pass
        assert len(reads) == ds.last_pass.cache_misses
        if epoch == 0:
            assert len(reads) == N // T2M_CHUNKS[0]  # a cold pool reads every chunk
    assert counted.threads == {"insitubatch-bridge"}  # awaited on the bridge loop only


def test_range_suffix_missing_and_list_through_the_bridge(tmp_path):
    zstore = make_local(tmp_path)
    native = insitubatch.as_native_store(zstore)
    assert isinstance(native, _ext.PythonStore) and native.python_store is zstore
    key = "t2m/c/3/0/0"
    whole = (tmp_path / "s.zarr" / key).read_bytes()
    assert native.read(key) == whole
    assert native.read(key, offset=5, length=11) == whole[5:16]
    assert native.read(key, offset=len(whole), length=0) == b""
    assert native.read(key, suffix=9) == whole[-9:]
    assert native.read("t2m/c/99/0/0") is None  # missing chunk: fill value, not an error
    with pytest.raises(insitubatch.CorruptChunkError, match=r"t2m/c/3/0/0 \[bytes"):
        native.read(key, offset=len(whole) - 2, length=10)  # object ends inside the range
    with pytest.raises(insitubatch.CorruptChunkError, match=r"last \d+ bytes"):
        native.read(key, suffix=len(whole) + 1)
    with pytest.raises(insitubatch.InvalidArgumentError):
        native.read("../escape")
    expected = sorted(p.relative_to(tmp_path / "s.zarr").as_posix()
                      for p in (tmp_path / "s.zarr").rglob("*") if p.is_file())
    assert native.list() == expected
    assert native.list("sh/") == [k for k in expected if k.startswith("sh/")]
    assert native.describe(key) == f"LocalStore({tmp_path / 's.zarr'})/{key}"


# -- failures -----------------------------------------------------------------------------------


class FailingStore(CountingPyStore):
    def __init__(self, inner, fail_key, make_exc):
        super().__init__(inner)
        self.fail_key, self.make_exc = fail_key, make_exc

    async def get(self, key, prototype, byte_range=None):
        if key == self.fail_key:
            raise self.make_exc()
        return await super().get(key, prototype, byte_range)


@pytest.mark.timeout(60)
def test_store_exception_is_a_store_error_naming_the_key(tmp_path):
    bad = FailingStore(make_memory(tmp_path), "t2m/c/2/0/0", lambda: RuntimeError("backend exploded"))
    with pytest.raises(insitubatch.StoreError, match=r"t2m/c/2/0/0.*RuntimeError: backend exploded"):
        read_chunk(bad, "t2m", (2, 0, 0))
    geoms = open_geometries(bad, ["t2m"])
    ds = InSituDataset(bad, split_by_chunk(geoms["t2m"], fractions=(1.0, 0.0, 0.0)), geoms,
                       batch_size=8, shuffle=False)
    for _ in range(2):  # raises each pass, never hangs
        with pytest.raises(insitubatch.StoreError, match=r"FailingStore/t2m/c/2/0/0"):
            list(ds.train)
    np.testing.assert_array_equal(read_chunk(bad, "t2m", (3, 0, 0)), t2m_values()[24:32])


@pytest.mark.timeout(60)
@pytest.mark.parametrize("exc", [KeyError, FileNotFoundError])
def test_key_and_file_not_found_errors_are_missing_chunks(tmp_path, exc):
    store = FailingStore(make_memory(tmp_path), "t2m/c/2/0/0", exc)
    np.testing.assert_array_equal(read_chunk(store, "t2m", (2, 0, 0)), np.zeros(T2M_CHUNKS, "f4"))


@pytest.mark.timeout(60)
def test_a_value_that_is_not_bytes_is_a_store_error(tmp_path):
    class Odd(CountingPyStore):
        async def get(self, key, prototype, byte_range=None):
            return 12345 if key.startswith("t2m/c/") else await super().get(key, prototype, byte_range)

    with pytest.raises(insitubatch.StoreError, match=r"t2m/c/0/0/0.*int"):
        read_chunk(Odd(make_memory(tmp_path)), "t2m", (0, 0, 0))


@pytest.mark.timeout(60)
def test_list_failure_is_a_store_error(tmp_path):
    class NoList(CountingPyStore):
        def list_prefix(self, prefix):
            raise PermissionError("listing denied")

    # A MemoryStore has no consolidated metadata, so opening the hierarchy lists.
    with pytest.raises(insitubatch.StoreError, match=r"listing NoList.*PermissionError: listing denied"):
        open_geometries(NoList(make_memory(tmp_path)))


@pytest.mark.timeout(120)
def test_many_concurrent_reads_do_not_deadlock_and_respect_max_inflight():
    values = np.arange(512 * 4, dtype="i8").reshape(512, 4)
    inner = zarr.storage.MemoryStore()
    root = zarr.open_group(inner, mode="w")
    root.create_array("x", shape=values.shape, chunks=(2, 4), dtype="i8", fill_value=0)[...] = values
    store = CountingPyStore(inner, delay_s=0.02)
    geoms = open_geometries(store)
    ds = InSituDataset(store, split_by_chunk(geoms["x"], fractions=(1.0, 0.0, 0.0)), geoms,
                       batch_size=16, block_chunks=64, max_inflight=32, decode_threads=4)
    for epoch in range(2):
        ds.set_epoch(epoch)
        batches = list(ds.train)
        for b in batches:
            np.testing.assert_array_equal(b.arrays["x"], values[b.read_indices("x")])
        assert sum(len(b) for b in batches) == 512
    assert 8 <= store.peak <= 32  # reads really overlap on the loop, within the budget


@pytest.mark.timeout(120)
def test_exit_mid_pass_cancels_bridged_reads_without_hanging(tmp_path):
    script = textwrap.dedent(f"""
        import asyncio, sys, zarr, numpy as np, insitubatch
        class Slow:
            def __init__(self, inner): self.inner = inner
            async def get(self, key, prototype, byte_range=None):
                if key.startswith("x/c/"):
                    await asyncio.sleep(0.2)
                return await self.inner.get(key, prototype, byte_range)
            def list_prefix(self, prefix): return self.inner.list_prefix(prefix)
        inner = zarr.storage.LocalStore({str(tmp_path / "slow.zarr")!r})
        root = zarr.open_group(inner, mode="w")
        root.create_array("x", shape=(400, 2), chunks=(2, 2), dtype="f8")[...] = 1.0
        store = Slow(inner)
        g = insitubatch.open_geometries(store)
        ds = insitubatch.InSituDataset(store, insitubatch.split_by_chunk(g["x"], fractions=(1, 0, 0)),
                                       g, batch_size=4, max_inflight=32)
        it = iter(ds.train)
        next(it)
        print("mid-pass", flush=True)
        sys.exit(0)  # reads are still in flight on the bridge loop
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "mid-pass" in done.stdout
    # The exit hook dropped the Python store, so the dataset global was freed at teardown.
    assert "leaked" not in done.stderr, done.stderr[-3000:]


# -- constructors, dispatch, reprs --------------------------------------------------------------


def test_as_native_store_passes_native_stores_and_rejects_others(tmp_path):
    native = insitubatch.memory_store()
    assert insitubatch.as_native_store(native) is native
    # A URL or path opens as insitubatch.store would (as zarr-python takes strings).
    zarr.create_array(str(tmp_path / "s.zarr"), name="a", shape=(4,), chunks=(2,), dtype="i4")
    for url in (str(tmp_path / "s.zarr"), tmp_path / "s.zarr", f"file://{tmp_path}/s.zarr"):
        assert isinstance(insitubatch.as_native_store(url), _ext.Store)
        assert list(open_geometries(url)) == ["a"]
    with pytest.raises(TypeError, match=r"builtins.int"):
        open_geometries(42)


def test_locations_never_show_credentials():
    class UrlStore:
        url = "s3://AKIDEXAMPLE:wJalrXUtnFEMI@bucket/data.zarr?X-Amz-Signature=deadbeef#frag"

        async def get(self, key, prototype, byte_range=None):
            return None

        def list_prefix(self, prefix):
            return iter(())

    native = insitubatch.as_native_store(UrlStore())
    text = repr(native) + native.describe("t2m/zarr.json")
    assert "UrlStore(s3://bucket/data.zarr)" in text
    for secret in ("AKIDEXAMPLE", "wJalrXUtnFEMI", "deadbeef", "Signature", "frag"):
        assert secret not in text
    assert _location(zarr.storage.MemoryStore()) == "MemoryStore"


def test_fsspec_store_location_and_auto_mkdir(tmp_path):
    store = insitubatch.fsspec_store(f"file://{tmp_path / 'new' / 'nested.zarr'}", read_only=False)
    assert type(store).__name__ == "FsspecStore" and not store.read_only
    fill(store)  # auto_mkdir: nested chunk directories are created
    assert (tmp_path / "new" / "nested.zarr" / "t2m" / "c" / "0" / "0" / "0").is_file()
    ro = insitubatch.fsspec_store(f"file://{tmp_path / 'new' / 'nested.zarr'}")
    assert ro.read_only
    assert insitubatch.as_native_store(ro).describe("k") == f"FsspecStore(file://{tmp_path}/new/nested.zarr)/k"


def test_icechunk_store_rejects_other_schemes_pointing_at_arraylake(tmp_path):
    with pytest.raises(ValueError, match=r"arraylake_store"):
        insitubatch.icechunk_store("https://example.com/repo")
    if icechunk is not None:
        with pytest.raises(ValueError, match=r"region"):
            insitubatch.icechunk_store(f"file://{tmp_path}", region="us-west-2")
    with pytest.raises(ValueError, match=r"repository URL"):
        insitubatch.icechunk_store(str(tmp_path))


@needs_icechunk
def test_icechunk_store_is_read_only_and_follows_branches(tmp_path):
    path = tmp_path / "repo"
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(path)))
    session = repo.writable_session("main")
    fill(session.store)
    first = session.commit("v1")
    repo.create_branch("dev", first)
    session = repo.writable_session("dev")
    zarr.open_array(session.store, path="t2m", mode="r+")[0] = 99.0
    session.commit("v2 on dev")
    main = insitubatch.icechunk_store(f"file://{path}")
    dev = insitubatch.icechunk_store(f"file://{path}", branch="dev")
    assert main.read_only and dev.read_only
    np.testing.assert_array_equal(read_chunk(main, "t2m", (0, 0, 0))[0], t2m_values()[0])
    assert (read_chunk(dev, "t2m", (0, 0, 0))[0] == 99.0).all()


@needs_icechunk
def test_icechunk_store_maps_s3_and_gs_urls_to_icechunk_storage(monkeypatch):
    # Only the argument mapping: no object store is reached (the repository open is stubbed).
    calls = []

    class Repo:
        def readonly_session(self, **ref):
            calls.append(("session", ref))
            return types.SimpleNamespace(store="session-store")

    monkeypatch.setattr(icechunk, "s3_storage", lambda **kw: calls.append(("s3", kw)) or "s3-storage")
    monkeypatch.setattr(icechunk, "gcs_storage", lambda **kw: calls.append(("gcs", kw)) or "gcs-storage")
    monkeypatch.setattr(icechunk.Repository, "open", staticmethod(lambda storage: calls.append(storage) or Repo()))
    got = insitubatch.icechunk_store("s3://bucket/path/era5.icechunk", anonymous=True, region="us-west-2")
    assert got == "session-store"
    assert calls == [("s3", {"bucket": "bucket", "prefix": "path/era5.icechunk", "anonymous": True,
                             "region": "us-west-2"}), "s3-storage", ("session", {"branch": "main"})]
    calls.clear()
    insitubatch.icechunk_store("gs://b/repo", anonymous=True, tag="v1")
    assert calls == [("gcs", {"bucket": "b", "prefix": "repo", "anonymous": True}), "gcs-storage",
                     ("session", {"tag": "v1"})]


def _fake_arraylake(calls):
    class Session:
        def __init__(self, branch):
            self.store = ("store-of", branch)

    class Repo:
        def readonly_session(self, branch):
            calls.append(("readonly_session", branch))
            return Session(branch)

    class Client:
        def __init__(self):
            calls.append(("Client",))

        def get_repo(self, name):
            calls.append(("get_repo", name))
            return Repo()

    return types.SimpleNamespace(Client=Client)


def test_arraylake_store_call_chain_with_a_stand_in_module(monkeypatch):
    # Arraylake needs its hosted service; this checks our call chain against a stand-in.
    calls = []
    monkeypatch.setitem(sys.modules, "arraylake", _fake_arraylake(calls))
    assert insitubatch.arraylake_store("org/repo") == ("store-of", "main")
    assert calls == [("Client",), ("get_repo", "org/repo"), ("readonly_session", "main")]
    calls.clear()
    assert insitubatch.arraylake_store("org/repo", branch="dev") == ("store-of", "dev")
    assert calls[-1] == ("readonly_session", "dev")
    monkeypatch.setitem(sys.modules, "arraylake", None)
    with pytest.raises(ImportError, match=r"insitubatch\[arraylake\]"):
        insitubatch.arraylake_store("org/repo")


def test_close_store_never_raises_and_closes_a_session_on_its_own_loop(tmp_path):
    insitubatch.close_store(insitubatch.memory_store())
    insitubatch.close_store(zarr.storage.MemoryStore())
    insitubatch.close_store(insitubatch.fsspec_store(f"file://{tmp_path}"))
    insitubatch.close_store(insitubatch.as_native_store(zarr.storage.MemoryStore()))
    insitubatch.close_store(None)

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        class Session:
            closed = False
            _loop = loop
            closed_on = None

            async def close(self):
                self.closed_on = asyncio.get_running_loop()
                self.closed = True

        session = Session()
        store = types.SimpleNamespace(fs=types.SimpleNamespace(_session=session))
        insitubatch.close_store(store)
        assert session.closed and session.closed_on is loop
        assert store.fs._session is None  # dropped: the library finalizer has nothing to do

        class Broken:
            closed = False
            _loop = loop

            async def close(self):
                raise OSError("teardown failed")

        insitubatch.close_store(types.SimpleNamespace(fs=types.SimpleNamespace(_session=Broken())))
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()
