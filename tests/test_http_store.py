"""The native HTTP(S) store against real loopback servers: a Range-capable HTTP server
serving a store written by zarr-python 3 (consolidated), and a fault-injection proxy in
front of it. Values are compared with zarr-python's read of the local copy, byte for byte."""

from __future__ import annotations

import pickle
import shutil
import subprocess
import threading
import time

import numpy as np
import pytest

import insitubatch
from insitubatch import InSituDataset, _ext, open_geometries, split_by_chunk
from cloud_data import check_dataset_streams_exact, check_every_chunk, make_demo_store, oracle
from servers import FaultProxy, RangeServer, _RangeHandler

FAST = dict(retry_base_delay=0.001, retry_max_delay=0.01)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    root = make_demo_store(tmp_path_factory.mktemp("http") / "demo.zarr")
    plain = make_demo_store(root.parent / "plain.zarr", consolidated=False)
    return root, plain


@pytest.fixture(scope="module")
def server(demo):
    root, _ = demo
    with RangeServer(root.parent) as srv:
        yield srv


@pytest.fixture
def proxy(server):
    with FaultProxy(server.url, hang_seconds=3.0) as px:
        yield px


def test_raw_reads_whole_range_suffix_missing(demo, server):
    root, _ = demo
    store = insitubatch.store(server.url + "/demo.zarr")
    data = (root / "t2m" / "c" / "0" / "0" / "0").read_bytes()
    assert store.read("t2m/c/0/0/0") == data
    assert store.read("t2m/c/0/0/0", offset=3, length=17) == data[3:20]
    assert store.read("t2m/c/0/0/0", suffix=9) == data[-9:]
    assert store.read("t2m/c/0/0/0", offset=len(data), length=0) == b""  # HEAD: fits exactly
    assert store.read("t2m/c/9/0/0") is None  # 404: a missing chunk is fill value
    with pytest.raises(insitubatch.CorruptChunkError, match=f"object is {len(data)} bytes"):
        store.read("t2m/c/0/0/0", offset=len(data) - 2, length=5)
    with pytest.raises(insitubatch.CorruptChunkError):
        store.read("t2m/c/0/0/0", suffix=len(data) + 1)
    with pytest.raises(insitubatch.CorruptChunkError):
        store.read("t2m/c/0/0/0", offset=len(data) + 1, length=0)
    with pytest.raises(insitubatch.InvalidArgumentError):
        store.read("../secrets")
    assert repr(store) == f"<insitubatch.HttpStore {server.url}/demo.zarr>"


def test_every_chunk_matches_zarr_python(demo, server):
    root, _ = demo
    store = insitubatch.store(server.url + "/demo.zarr")
    assert check_every_chunk(store, root) == 26
    assert store.transport_stats()["retries"] == 0


def test_dataset_streams_exact_values_reading_each_chunk_once(demo, server):
    root, _ = demo
    store = insitubatch.store(server.url + "/demo.zarr")
    check_dataset_streams_exact(store, root, _ext.CountingStore(store))


def test_an_unconsolidated_group_opens_named_arrays_and_says_why_it_cannot_list_the_rest(demo, server):
    store = insitubatch.store(server.url + "/plain.zarr")
    with pytest.raises(insitubatch.UnsupportedError, match="consolidated metadata"):
        store.list()
    with pytest.raises(insitubatch.UnsupportedError, match="consolidated"):
        open_geometries(store)
    # A single array needs no listing, nor do variables named in the group.
    arr = insitubatch.read_chunk(insitubatch.store(server.url + "/plain.zarr/t2m"), "", (1, 0, 0))
    np.testing.assert_array_equal(arr, oracle(demo[1], "t2m")[8:16])
    # A dataset over them streams exact values, each chunk read once per epoch.
    check_dataset_streams_exact(store, demo[1], _ext.CountingStore(store))
    with pytest.raises(insitubatch.NotFoundError, match="'nope'"):
        open_geometries(store, ["nope"])


def _warming(request: dict) -> bool:
    """A one-byte read of zarr.json that opens a connection while the metadata is read."""
    return request["path"].endswith("/zarr.json") and request["headers"].get("Range") == "bytes=0-0"


def _chunk_reads(server) -> list[dict]:
    # Another test's warming reads may still arrive after clear_log(): they end in zarr.json.
    return [r for r in server.requests if "/c/" in r["path"]]


def test_connections_are_reused(demo, server):
    server.clear_log()
    store = insitubatch.store(server.url + "/demo.zarr", io_threads=1)
    for _ in range(3):  # the metadata is read once (read_chunk keeps it), the chunks every time
        check_every_chunk(store, demo[0], arrays=["t2m"])
    clients = [r["client"] for r in _chunk_reads(server)]
    assert len(clients) > 10
    # keep-alive: the connections opened while the metadata was read and one more at most
    # (one socket, two at most, before), not one per read
    assert len(set(clients)) <= insitubatch.stores._WARM_CONNECTIONS + 1, clients


def test_connections_outlive_the_bursts_that_opened_them(demo, server):
    # Bursts of 8 reads in flight with a pause between (no read in flight), as blocks and
    # epochs come: each burst reuses the connections the first opened. libcurl's default
    # keeps four per transfer in progress, so the pause closed them and every burst opened
    # its own again.
    server.clear_log()
    store = insitubatch.store(server.url + "/demo.zarr", io_threads=2)
    keys = [f"t2m/c/{i}/0/0" for i in range(5)] * 4
    seconds, nbytes = _ext.read_throughput(store, keys, 8, 8)
    assert len(seconds) == 8 and nbytes > 0
    clients = {r["client"] for r in _chunk_reads(server)}
    assert len(_chunk_reads(server)) == 8 * len(keys)
    assert len(clients) <= 9, len(clients)  # 12-15 before


class _BarrierHandler(_RangeHandler):
    """Holds every chunk read until `parties` reads are at the server at once (or 10 s pass)."""

    def _serve(self, head: bool) -> None:
        if "/c/" in self.path:
            try:
                self.owner.barrier.wait()
            except threading.BrokenBarrierError:
                self.owner.broken = True
        super()._serve(head)


def test_a_burst_of_reads_opens_its_connections_at_once(demo):
    # libcurl's PIPEWAIT had each IO thread send a burst's first read alone, on a new
    # connection, and the rest only once that connection was known not to multiplex: over a
    # cleartext link (HTTP/1.1 only) a whole connection setup lost on every first batch.
    parties = 12
    with RangeServer(demo[0].parent) as srv:
        srv._handler = type("Handler", (_BarrierHandler,), {"owner": srv})
        srv.httpd.RequestHandlerClass = srv._handler
        srv.barrier, srv.broken = threading.Barrier(parties, timeout=10), False
        store = insitubatch.store(srv.url + "/demo.zarr", io_threads=2)
        keys = [f"t2m/c/{i}/0/0" for i in range(parties)]
        _ext.read_throughput(store, keys, parties, 1)
        assert not srv.broken, "the burst's reads did not reach the server together"
        assert len({r["client"] for r in srv.requests}) == parties


def _wait_for(predicate, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_opening_geometries_warms_the_connections_the_first_block_reads_on(demo, server):
    # Over a link where a connection costs round trips of its own, the first block's reads
    # would each open one after the metadata arrived: they are opened while it is read.
    server.clear_log()
    geoms = open_geometries(insitubatch.store(server.url + "/demo.zarr"), ["t2m"])
    assert geoms["t2m"].shape[0] > 0
    warm = insitubatch.stores._WARM_CONNECTIONS
    _wait_for(lambda: sum(map(_warming, server.requests)) >= warm)
    assert [r["path"] for r in server.requests if not _warming(r)] == ["/demo.zarr/zarr.json"]
    # With a per-host connection limit the warming reads would queue ahead of the metadata's.
    server.clear_log()
    open_geometries(insitubatch.store(server.url + "/demo.zarr", max_connections_per_host=4), ["t2m"])
    time.sleep(0.3)
    assert [r["path"] for r in server.requests] == ["/demo.zarr/zarr.json"]


def test_warm_connections_are_the_ones_a_burst_reads_on(demo, server):
    store = insitubatch.store(server.url + "/demo.zarr", io_threads=1)
    server.clear_log()
    store.warm_connections("zarr.json", 4)
    _wait_for(lambda: sum(map(_warming, server.requests)) == 4)
    time.sleep(0.3)  # their answers are back: the connections are idle in the pool
    warmed = {r["client"] for r in server.requests if _warming(r)}
    assert len(warmed) == 4
    _ext.read_throughput(store, [f"t2m/c/{i}/0/0" for i in range(4)], 4, 1)
    # A read may go on a connection an earlier one of the burst freed; none opens its own.
    assert {r["client"] for r in _chunk_reads(server)} <= warmed
    local = insitubatch.store(str(demo[0]))
    assert not local.remote
    local.warm_connections("zarr.json", 4)  # nothing to open
    with pytest.raises(ValueError, match="connections must be at most 1024, got 1025"):
        store.warm_connections("zarr.json", 1025)
    with pytest.raises(ValueError, match="key"):
        store.warm_connections("../zarr.json", 1)
    with pytest.raises(TypeError):
        store.warm_connections("zarr.json", -1)


def test_a_dataset_over_open_geometries_reads_the_metadata_once(demo, server):
    # Over a network each metadata read is a round trip before the first chunk read: the
    # dataset takes the hierarchy open_geometries read from the same store object.
    server.clear_log()
    store = insitubatch.store(server.url + "/demo.zarr")
    geoms = open_geometries(store, ["t2m"])
    ds = InSituDataset(store, split_by_chunk(geoms["t2m"], fractions=(1.0, 0.0, 0.0)), geoms, batch_size=8)
    try:
        assert [r["path"] for r in server.requests if not _warming(r)] == ["/demo.zarr/zarr.json"]
        batch = next(iter(ds.train))
        np.testing.assert_array_equal(batch.arrays["t2m"], oracle(demo[0], "t2m")[batch.sample_indices])
    finally:
        ds.close()
    # The geometries still pickle (without the opened store) and compare equal.
    again = pickle.loads(pickle.dumps(geoms))
    assert again == geoms and again["t2m"]._opened is None
    # Geometries from another store object (or none opened) open the hierarchy again.
    server.clear_log()
    other = InSituDataset(insitubatch.store(server.url + "/demo.zarr"), ds.manifest, geoms, batch_size=8)
    other.close()
    # (The first store's warming reads may still arrive after clear_log(): not counted.)
    assert [r["path"] for r in server.requests if not _warming(r)] == ["/demo.zarr/zarr.json"]


def test_max_inflight_above_the_stores_connection_limit_is_said(demo, server, caplog):
    # The per-host limit is the user's (no limit by default): it is not raised behind their
    # back, and max_inflight above it is said once, at construction.
    store = insitubatch.store(server.url + "/demo.zarr", max_connections_per_host=4, io_threads=2)
    geoms = open_geometries(store, ["t2m"])
    manifest = split_by_chunk(geoms["t2m"], fractions=(1.0, 0.0, 0.0))
    with caplog.at_level("WARNING", logger="insitubatch"):
        InSituDataset(store, manifest, geoms, batch_size=8, max_inflight=16).close()
        InSituDataset(store, manifest, geoms, batch_size=8, max_inflight=8).close()
        InSituDataset(insitubatch.store(server.url + "/demo.zarr"), manifest, geoms, batch_size=8,
                      max_inflight=64).close()
    said = [r.getMessage() for r in caplog.records if "max_connections_per_host" in r.getMessage()]
    assert len(said) == 1 and "max_inflight=16" in said[0] and "at most 8 reads" in said[0], said


def test_an_oversized_chunk_is_refused_from_its_content_length(tmp_path):
    import zarr

    root = tmp_path / "big.zarr"
    arr = zarr.create_array(zarr.storage.LocalStore(root), name="v", shape=(6, 5), chunks=(3, 5), dtype="f8",
                            compressors=None, fill_value=0)
    arr[...] = np.arange(30, dtype="f8").reshape(6, 5)
    (root / "v" / "c" / "1" / "0").write_bytes(bytes(1 << 20))  # 1 MiB for a 120-byte chunk
    with RangeServer(tmp_path) as srv:
        store = insitubatch.store(srv.url + "/big.zarr")
        with pytest.raises(insitubatch.CorruptChunkError,
                           match=rf"v \[1, 0\]: reading {srv.url}/big.zarr/v/c/1/0: object is 1048576 bytes, more"
                                 r" than the 120 its reader accepts \(refused unread\)"):
            insitubatch.read_chunk(store, "v", (1, 0))
        assert len([r for r in srv.requests if r["path"].endswith("/v/c/1/0")]) == 1  # not retried
        np.testing.assert_array_equal(insitubatch.read_chunk(store, "v", (0, 0)), arr[:3])


def test_headers_authenticate_and_never_leak(demo, tmp_path):
    root, _ = demo
    secret = "Bearer s3cr3t-t0ken-value"
    with RangeServer(root.parent, required_headers={"Authorization": secret}) as srv:
        denied = insitubatch.store(srv.url + "/demo.zarr", max_retries=3, **FAST)
        t0 = time.monotonic()
        with pytest.raises(insitubatch.StoreError) as info:
            denied.read("zarr.json")
        assert time.monotonic() - t0 < 2  # 401 is not retried
        assert info.value.detail == 401
        assert f"{srv.url}/demo.zarr/zarr.json" in str(info.value)
        assert "401 Unauthorized" in str(info.value)
        assert len(srv.requests) == 1
        store = insitubatch.store(srv.url + "/demo.zarr", headers={"Authorization": secret})
        assert check_every_chunk(store, root, arrays=["t2m"]) == 5
        assert "s3cr3t" not in repr(store) and "s3cr3t" not in store.describe("zarr.json")
        with pytest.raises(insitubatch.InvalidArgumentError) as bad:
            insitubatch.store(srv.url, headers={"Authorization": "x\r\ny"})
        assert "x\r\ny" not in str(bad.value)


def test_url_credentials_become_basic_auth_and_never_leak(demo):
    root, _ = demo
    import base64

    token = "Basic " + base64.b64encode(b"alice:pa55word").decode()
    with RangeServer(root.parent, required_headers={"Authorization": token}) as srv:
        url = f"http://alice:pa55word@127.0.0.1:{srv.port}/demo.zarr"
        store = insitubatch.store(url)
        assert "pa55word" not in repr(store)
        assert store.read("zarr.json") == (root / "zarr.json").read_bytes()
        with pytest.raises(insitubatch.StoreError) as info:
            insitubatch.store(f"http://alice:Wr0ngPa55@127.0.0.1:{srv.port}/demo.zarr").read("zarr.json")
        assert "Wr0ngPa55" not in str(info.value) and "alice" not in str(info.value)


# -- faults -------------------------------------------------------------------------------------


@pytest.mark.timeout(120)
@pytest.mark.parametrize("fault", ["503", "429", "500", "reset", "truncate", "short206"])
def test_recovers_from_faults_with_exact_values(demo, proxy, fault):
    root, _ = demo
    proxy.plan.per_path(fault, 2)  # every object fails twice, then passes
    store = insitubatch.store(proxy.url + "/demo.zarr", max_retries=3, timeout=5, **FAST)
    assert check_every_chunk(store, root) == 26
    stats = store.transport_stats()
    assert stats["failures"] == 0 and stats["retries"] >= 2 * 10, stats
    assert proxy.plan.injected[fault] >= 20


@pytest.mark.timeout(120)
def test_dataset_survives_mixed_faults_and_latency(demo, proxy):
    root, _ = demo
    proxy.plan.latency = 0.01
    proxy.plan.per_path(["503", "reset", "truncate", "429", "short206"])
    store = insitubatch.store(proxy.url + "/demo.zarr", max_retries=5, timeout=5, **FAST)
    check_dataset_streams_exact(store, root, _ext.CountingStore(store))
    paths = {r["path"] for r in proxy.requests}
    # Every path failed at least twice (503, 429); those with a body five times.
    assert store.transport_stats()["retries"] >= 2 * len(paths) > 0


@pytest.mark.timeout(60)
def test_slow_trickle_times_out_and_is_retried(demo, proxy):
    root, _ = demo
    proxy.plan.trickle_delay = 0.2
    proxy.plan.sequence(["trickle"])
    store = insitubatch.store(proxy.url + "/demo.zarr", timeout=0.5, max_retries=3, **FAST)
    want = (root / "t2m" / "c" / "1" / "0" / "0").read_bytes()
    t0 = time.monotonic()
    assert store.read("t2m/c/1/0/0") == want
    assert store.transport_stats()["retries"] >= 1  # the trickled attempt timed out
    assert time.monotonic() - t0 >= 0.5


@pytest.mark.timeout(60)
@pytest.mark.parametrize("fault", ["503", "reset", "hang"])
def test_exhausted_retries_raise_a_clear_error_in_bounded_time(demo, proxy, fault):
    proxy.plan.always(fault)
    store = insitubatch.store(proxy.url + "/demo.zarr", max_retries=2, timeout=0.5, **FAST)
    t0 = time.monotonic()
    with pytest.raises(insitubatch.StoreError) as info:
        store.read("t2m/c/0/0/0")
    assert time.monotonic() - t0 < 10
    message = str(info.value)
    assert isinstance(info.value, OSError)
    assert f"{proxy.url}/demo.zarr/t2m/c/0/0/0" in message
    assert "gave up after 3 attempts" in message
    if fault == "503":
        assert info.value.detail == 503 and "503 Service Unavailable" in message


@pytest.mark.timeout(60)
def test_exhausted_retries_reach_the_consumer_and_the_next_pass_works(demo, proxy):
    root, _ = demo
    store = insitubatch.store(proxy.url + "/demo.zarr", max_retries=1, timeout=2, **FAST)
    geoms = open_geometries(store, ["t2m"])
    ds = InSituDataset(store, split_by_chunk(geoms["t2m"], fractions=(1.0, 0.0, 0.0)), geoms,
                       batch_size=4, block_chunks=1)
    proxy.plan.always("503")
    with pytest.raises(insitubatch.StoreError, match="t2m"):
        for _ in ds.train:
            pass
    proxy.plan.clear()
    values = np.concatenate([b.arrays["t2m"] for b in ds.all])
    np.testing.assert_array_equal(values, oracle(root, "t2m")[...])
    ds.close()


# -- TLS ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tls_server(demo, tmp_path_factory):
    import http.server
    import ssl
    import threading

    if shutil.which("openssl") is None:
        pytest.skip("openssl CLI not available to make a test certificate")
    d = tmp_path_factory.mktemp("tls")
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    srv = RangeServer(demo[0].parent)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    srv.httpd.socket = context.wrap_socket(srv.httpd.socket, server_side=True)
    yield f"https://127.0.0.1:{srv.port}", cert
    srv.close()


@pytest.mark.timeout(60)
def test_tls_is_verified_by_default(demo, tls_server):
    url, cert = tls_server
    with pytest.raises(insitubatch.StoreError, match="certificate|TLS|SSL"):
        insitubatch.store(url + "/demo.zarr", max_retries=0).read("zarr.json")
    want = (demo[0] / "zarr.json").read_bytes()
    assert insitubatch.store(url + "/demo.zarr", ca_file=str(cert)).read("zarr.json") == want
    assert insitubatch.store(url + "/demo.zarr", verify_tls=False).read("zarr.json") == want
    assert insitubatch.store(url + "/demo.zarr", allow_invalid_certificates=True).read("zarr.json") == want


# -- options ------------------------------------------------------------------------------------


@pytest.mark.parametrize("options, name", [
    (dict(regin="us-east-1"), "regin"),  # misspelt (region, an S3 option, is ignored here)
    (dict(timeout="soon"), "timeout"),
    (dict(timeout=-1), "timeout"),
    (dict(max_retries=1.5), "max_retries"),
    (dict(max_retries=True), "max_retries"),
    (dict(verify_tls="yes"), "verify_tls"),
    (dict(io_threads=0), "io_threads"),
    (dict(headers=["Authorization: x"]), "headers"),
    (dict(client_options={"proxy_url": "http://p"}), "proxy_url"),
    (dict(retry_config={"retry_timeout": "never"}), "retry_timeout"),
    (dict(retry_config={"jitter": True}), "jitter"),
    (dict(connect_retry_timeout=0), "connect_retry_timeout"),
    (dict(retry_config={"backoff": {"base": 3}}), "base"),
    (dict(timeout=5, client_options={"timeout": 5}), "timeout"),
    (dict(read_only=False), "read_only"),
])
def test_bad_options_name_the_option(server, options, name):
    with pytest.raises(insitubatch.InvalidArgumentError, match=name):
        insitubatch.store(server.url, **options)


def test_obstore_option_forms_are_accepted(demo, server):
    store = insitubatch.obstore_store(
        server.url + "/demo.zarr", read_only=True,
        client_options={"timeout": "30s", "connect_timeout": "500ms", "allow_http": True},
        retry_config={"max_retries": 2, "backoff": {"init_backoff": 0.01, "max_backoff": 1, "base": 2}})
    assert store.read("zarr.json") == (demo[0] / "zarr.json").read_bytes()


def test_unsupported_schemes(server):
    with pytest.raises(insitubatch.UnsupportedError, match="ftp"):
        insitubatch.store("ftp://host/x.zarr")
    with pytest.raises(insitubatch.InvalidArgumentError):
        insitubatch.store("http://host/x.zarr?token=1")
