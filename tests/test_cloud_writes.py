"""Writing through the native GCS and Azure stores, against the loopback stand-ins of
``cloud_mimics`` (GCS's XML API with bearer tokens; Azure Blob Storage with every SharedKey
signature recomputed by azure-storage-blob): zarr-python 3 and xarray write through
``obstore_store(gs:// or az://, read_only=False)`` and what lands, read as a plain directory
by zarr-python's own LocalStore, is exact, as the engine reads it too; conditional creates;
deletes; large objects in parts / blocks (one failing once and retried; all failing: no
object appears); wrong credentials."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr
import zarr
from zarr.core.buffer import default_buffer_prototype

import insitubatch
from insitubatch import obstore_store
from cloud_data import engine_read
from cloud_mimics import GCS_MIN_PART, AzureMimic, GcsMimic
from servers import FaultPlan, FaultProxy

FAST = dict(retry_base_delay=0.001, retry_max_delay=0.01)
GCS_TOKEN = "ya29.gcs-write-test-token-SECRET"
AZURE_ACCOUNT = "insitutest"
AZURE_KEY = "aW5zaXR1YmF0Y2gtYXp1cmUtdGVzdC1hY2NvdW50LWtleS0zMmI="
AZURE_PART = 64 << 10  # Azure takes blocks of any size: small ones keep the test quick


@dataclass
class Cloud:
    """One writable cloud backend: its mimic, the directory its objects land in, and how
    to open a store there."""

    scheme: str
    server: Any
    root: Path
    part: int  # the smallest part / block size the backend takes (what the tests upload in)

    def url(self, prefix: str) -> str:
        return f"gs://out/{prefix}" if self.scheme == "gs" else f"az://data/{prefix}"

    def options(self, endpoint: str | None = None, **extra: Any) -> dict[str, Any]:
        endpoint = endpoint or self.server.url
        if self.scheme == "gs":
            return dict(endpoint=endpoint, token=GCS_TOKEN, read_only=False, **FAST, **extra)
        return dict(endpoint=endpoint, account_name=AZURE_ACCOUNT, account_key=AZURE_KEY, read_only=False, **FAST,
                    **extra)

    def open(self, prefix: str, endpoint: str | None = None, **extra: Any) -> Any:
        return insitubatch.store(self.url(prefix), **self.options(endpoint, **extra))

    def pending_uploads(self) -> int:
        """Incomplete multipart uploads (GCS) or uncommitted blocks (Azure) on the server."""
        if self.scheme == "gs":
            return len(self.server.uploads)
        return sum(len(blocks) for blocks in self.server.uncommitted.values())


@pytest.fixture(params=["gs", "az"])
def cloud(request, tmp_path):
    root = tmp_path / "bucket"
    root.mkdir()
    if request.param == "gs":
        server = GcsMimic({"out": root}, token=GCS_TOKEN, page_size=4)
        part = GCS_MIN_PART
    else:
        pytest.importorskip("azure.storage.blob")
        server = AzureMimic({"data": root}, AZURE_ACCOUNT, account_key=AZURE_KEY, page_size=4)
        part = AZURE_PART
    with server:
        yield Cloud(request.param, server, root, part)


@pytest.fixture
def proxied(cloud):
    """A fault-injecting proxy in front of the cloud's mimic."""
    with FaultProxy(cloud.server.url, FaultPlan()) as proxy:
        yield proxy


@pytest.mark.filterwarnings("ignore:Consolidated metadata is currently not part:UserWarning")
@pytest.mark.parametrize("zarr_format, sharded", [(2, False), (3, True)])
def test_zarr_writes_arrays_that_zarr_and_the_engine_read_back_exactly(cloud, zarr_format, sharded):
    store = obstore_store(cloud.url("out.zarr"), **cloud.options())
    assert not store.read_only and store.supports_writes and store.supports_deletes
    data = np.random.default_rng(zarr_format).standard_normal((16, 6, 10)).astype("f4")
    group = zarr.open_group(store, mode="w", zarr_format=zarr_format)
    layout = dict(chunks=(4, 3, 5), shards=(8, 6, 10)) if sharded else dict(chunks=(4, 3, 5))
    group.create_array("t2m", shape=data.shape, dtype="f4", **layout)[...] = data
    zarr.consolidate_metadata(store)
    # What landed in the bucket, read as a plain directory by zarr-python itself.
    local = zarr.open_group(zarr.storage.LocalStore(cloud.root / "out.zarr", read_only=True), mode="r")
    np.testing.assert_array_equal(local["t2m"][...], data)
    np.testing.assert_array_equal(zarr.open_group(store.with_read_only(True), mode="r")["t2m"][...], data)
    np.testing.assert_array_equal(engine_read(store, "t2m", 16), data)
    # mode="w" again deletes what was there (delete_dir: a listing, then the deletes).
    zarr.open_group(store, mode="w", zarr_format=zarr_format)
    assert not [p for p in (cloud.root / "out.zarr").rglob("*") if p.is_file() and "t2m" in p.parts]
    assert sorted(zarr.open_group(store, mode="r").array_keys()) == []


@pytest.mark.filterwarnings("ignore:Consolidated metadata is currently not part:UserWarning")
def test_xarray_writes_and_appends_through_it(cloud):
    store = obstore_store(cloud.url("x.zarr"), **cloud.options())
    data = xr.Dataset({"t2m": (("time", "x"), np.arange(40, dtype="f4").reshape(8, 5))}, coords={"time": np.arange(8)})
    data.to_zarr(store, mode="w", zarr_format=3)
    more = data.assign_coords(time=np.arange(8, 16))
    more.to_zarr(store, append_dim="time")
    both = xr.concat([data, more], dim="time")
    xr.testing.assert_identical(xr.open_zarr(zarr.storage.LocalStore(cloud.root / "x.zarr")).load(), both)


def test_set_if_not_exists_refuses_an_existing_key(cloud):
    store = cloud.open("c")
    assert store.write("k", b"first", if_absent=True) is True
    assert store.write("k", b"second", if_absent=True) is False
    assert (cloud.root / "c" / "k").read_bytes() == b"first"
    proto = default_buffer_prototype()
    zstore = obstore_store(cloud.url("c"), **cloud.options())
    asyncio.run(zstore.set_if_not_exists("k", proto.buffer.from_bytes(b"third")))
    asyncio.run(zstore.set_if_not_exists("new", proto.buffer.from_bytes(b"made")))
    assert store.read("k") == b"first" and store.read("new") == b"made"
    condition = ("x-goog-if-generation-match", "0") if cloud.scheme == "gs" else ("If-None-Match", "*")
    puts = [r for r in cloud.server.requests if r["method"] == "PUT"]
    assert len(puts) == 4 and all(r["headers"].get(condition[0]) == condition[1] for r in puts)
    # A large conditional create: GCS sends one conditional PUT (a multipart completion takes no
    # precondition); Azure commits its blocks with a conditional Put Block List.
    big = cloud.open("c", multipart_part_size=cloud.part)
    value = np.random.default_rng(3).bytes(cloud.part + 7)
    assert big.write("large", value, if_absent=True) is True
    assert big.write("large", b"x" * (cloud.part + 9), if_absent=True) is False
    assert (cloud.root / "c" / "large").read_bytes() == value
    if cloud.scheme == "gs":
        assert not [r for r in cloud.server.requests if "uploads" in r["path"]]


@pytest.mark.parametrize("large", [False, True])
def test_a_retried_write_whose_reply_was_lost_is_safe(cloud, proxied, large):
    """The last request of a write lands on the server, its reply is lost, and the write is
    retried: an overwrite lands the same bytes again; a conditional create refused by its
    own first attempt's object sees that it holds exactly its bytes and reports a win."""
    store = cloud.open("r", endpoint=proxied.url, multipart_part_size=cloud.part)
    size = cloud.part + 5 if large else 5  # large: two parts / blocks
    # The requests before the last: Azure's two blocks before its commit; GCS's upload listing,
    # initiation and two parts before the complete (a conditional create is one PUT on GCS).
    before = {("az", True, True): 2, ("az", True, False): 2, ("gs", True, False): 4}
    for conditional, value, won in [(True, b"m" * size, True), (True, b"t" * size, False),
                                    (False, b"t" * size, True)]:
        proxied.plan.sequence([None] * before.get((cloud.scheme, large, conditional), 0) + ["lost_reply"])
        assert store.write("k", value, if_absent=conditional) is won
        assert proxied.plan.injected["lost_reply"] == 1
        proxied.plan.injected.clear()
    assert (cloud.root / "r" / "k").read_bytes() == b"t" * size
    assert cloud.pending_uploads() == 0


def test_deletes_and_delete_prefix(cloud):
    store = cloud.open("d")
    for key in ("a/0", "a/b/1", "ab/2", "c"):
        store.write(key, b"v")
    store.delete("a/0")
    store.delete("never/there")  # a missing key is no error
    assert store.list() == ["a/b/1", "ab/2", "c"]
    store.delete_prefix("a")  # "a/...", not "ab/..."
    assert store.list() == ["ab/2", "c"]
    store.delete_prefix("")
    assert store.list() == []


def test_an_azure_blob_with_snapshots_is_deleted_with_them(tmp_path):
    """Delete Blob refuses a blob that has snapshots unless asked to take them too; a zarr
    delete means the key is gone, so the store asks. The snapshot is taken by the SDK."""
    blob_sdk = pytest.importorskip("azure.storage.blob")
    root = tmp_path / "bucket"
    root.mkdir()
    with AzureMimic({"data": root}, AZURE_ACCOUNT, account_key=AZURE_KEY) as server:
        cloud = Cloud("az", server, root, AZURE_PART)
        store = cloud.open("snap")
        store.write("k", b"first")
        client = blob_sdk.BlobServiceClient(f"{server.url}/", credential={"account_name": AZURE_ACCOUNT,
                                                                         "account_key": AZURE_KEY})
        client.get_blob_client("data", "snap/k").create_snapshot()
        assert len(server.snapshots[("data", "snap/k")]) == 1
        with pytest.raises(Exception, match="SnapshotsPresent"):  # what a plain Delete Blob meets
            client.get_blob_client("data", "snap/k").delete_blob()
        store.delete("k")
        assert store.list() == [] and not server.snapshots


def test_a_large_object_goes_in_parts_one_failing_once(cloud, proxied):
    store = cloud.open("big", endpoint=proxied.url, multipart_part_size=cloud.part)
    value = np.random.default_rng(1).bytes(2 * cloud.part + 12345)  # three parts
    marker = "partNumber=" if cloud.scheme == "gs" else "blockid="
    is_part = lambda r: marker in r["path"]  # noqa: E731
    # GCS: the stale-upload listing and the initiation pass; the first part to arrive fails once.
    proxied.plan.sequence([None, None, "503"] if cloud.scheme == "gs" else ["503"])
    assert store.write("obj", value) is True
    assert proxied.plan.injected["503"] == 1
    assert len([r for r in proxied.requests if r["method"] == "PUT" and is_part(r)]) == 4  # three, one twice
    assert (cloud.root / "big" / "obj").read_bytes() == value
    assert store.read("obj") == value
    assert cloud.pending_uploads() == 0


def test_a_server_failure_mid_upload_leaves_no_object_visible(cloud, proxied):
    store = cloud.open("big", endpoint=proxied.url, multipart_part_size=cloud.part, max_retries=1)
    prefix = [None, None] if cloud.scheme == "gs" else []
    proxied.plan.sequence(prefix + ["503"] * 6)  # every part fails, its retry too
    noun = "part" if cloud.scheme == "gs" else "block"
    with pytest.raises(insitubatch.StoreError, match=rf"{cloud.url('big')}/obj \({noun} \d of 3\).*503"):
        store.write("obj", b"x" * (2 * cloud.part + 1))
    assert not (cloud.root / "big" / "obj").exists() and store.read("obj") is None
    if cloud.scheme == "gs":
        assert cloud.pending_uploads() == 0  # the upload was aborted
    # The next write lands whole (Azure discards the blob's uncommitted blocks on commit).
    assert store.write("obj", b"y" * (cloud.part + 3)) is True
    assert (cloud.root / "big" / "obj").read_bytes() == b"y" * (cloud.part + 3)
    assert cloud.pending_uploads() == 0


def test_a_killed_writers_gcs_upload_is_aborted_by_the_next_write(tmp_path):
    root = tmp_path / "bucket"
    root.mkdir()
    with GcsMimic({"out": root}, token=GCS_TOKEN) as server:
        server.uploads["upload-stale"] = {"bucket": "out", "name": "k/obj", "parts": {1: ('"e"', b"old")}}
        server.uploads["upload-other"] = {"bucket": "out", "name": "k/obj2", "parts": {}}
        store = insitubatch.store("gs://out/k", endpoint=server.url, token=GCS_TOKEN, read_only=False,
                                  multipart_part_size=GCS_MIN_PART)
        value = b"n" * (GCS_MIN_PART + 1)
        assert store.write("obj", value)
        assert list(server.uploads) == ["upload-other"]  # only the key's own stale upload
        assert (root / "k" / "obj").read_bytes() == value


def test_wrong_credentials_and_read_only_stores_say_which_store_and_key(cloud):
    wrong = dict(token="ya29.wrong") if cloud.scheme == "gs" else dict(account_key="d3Jvbmcta2V5")
    denied = insitubatch.store(cloud.url("p"), **{**cloud.options(), **wrong})
    code, needs = ("401", "storage.objects.create") if cloud.scheme == "gs" else ("403", "Write permission")
    with pytest.raises(insitubatch.StoreError, match=rf"writing {cloud.url('p')}/x: HTTP {code}.*{needs}"):
        denied.write("x", b"v")
    with pytest.raises(insitubatch.StoreError, match=rf"deleting {cloud.url('p')}/x: HTTP {code}"):
        denied.delete("x")
    reader = insitubatch.store(cloud.url("p"), **{**cloud.options(), "read_only": True})
    with pytest.raises(insitubatch.FailedPreconditionError, match=rf"{cloud.url('p')}/x.*read-only"):
        reader.write("x", b"v")
    with pytest.raises(ValueError, match="read-only"):
        zarr.open_group(obstore_store(cloud.url("p"), **{**cloud.options(), "read_only": True}), mode="w")
    too_small = 1 << 20 if cloud.scheme == "gs" else 0
    with pytest.raises(insitubatch.InvalidArgumentError, match="multipart_part_size"):
        cloud.open("p", multipart_part_size=too_small)
    assert not [p for p in cloud.root.rglob("*") if p.is_file()]  # nothing was written
