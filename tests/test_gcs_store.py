"""The native GCS store against a loopback GCS mimic (tests/servers.py: XML API object
reads, JSON API listing with pagination, bearer tokens). No GCS emulator installs from
PyPI or Debian, so the mimic stands in for one; the C++ request builder is unit-tested in
gcs_store_test.cc."""

from __future__ import annotations

import pytest

import insitubatch
from insitubatch import _ext, open_geometries
from cloud_data import check_dataset_streams_exact, check_every_chunk
from cloud_fixtures import BUCKET, GCS_TOKEN
from servers import FaultProxy

FAST = dict(retry_base_delay=0.001, retry_max_delay=0.01)
DEMO = f"gs://{BUCKET}/stores/demo.zarr"


def test_every_chunk_matches_zarr_python_with_a_bearer_token(gcs, demo_dirs):
    private, _ = gcs
    private.clear_log()
    store = insitubatch.store(DEMO, endpoint=private.url, token=GCS_TOKEN)
    assert check_every_chunk(store, demo_dirs[0]) == 26
    assert all(r["headers"].get("Authorization") == f"Bearer {GCS_TOKEN}" for r in private.requests)
    assert repr(store) == f"<insitubatch.GcsStore {DEMO} endpoint={private.url}>"
    assert GCS_TOKEN not in repr(store)


def test_reads_go_to_the_xml_api_path(gcs):
    private, _ = gcs
    private.clear_log()
    store = insitubatch.store(DEMO, endpoint=private.url, token=GCS_TOKEN)
    assert store.read("t2m/c/0/0/0", offset=1, length=4) is not None
    request = private.requests[-1]
    assert request["path"] == f"/{BUCKET}/stores/demo.zarr/t2m/c/0/0/0"
    assert request["headers"]["Range"] == "bytes=1-4"
    assert store.read("t2m/c/9/0/0") is None


def test_dataset_streams_exact_values_reading_each_chunk_once(gcs, demo_dirs):
    store = insitubatch.store(DEMO, endpoint=gcs[0].url, token=GCS_TOKEN)
    check_dataset_streams_exact(store, demo_dirs[0], _ext.CountingStore(store))


def test_token_from_the_environment(gcs, monkeypatch, demo_dirs):
    monkeypatch.setenv("GOOGLE_OAUTH_ACCESS_TOKEN", GCS_TOKEN)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs[0].url.removeprefix("http://"))
    store = insitubatch.store(DEMO)
    assert store.endpoint_url == gcs[0].url
    assert store.read("zarr.json") == (demo_dirs[0] / "zarr.json").read_bytes()


def test_wrong_token_is_a_clear_error_without_the_token(gcs):
    bad = "ya29.WRONG-token-value"
    store = insitubatch.store(DEMO, endpoint=gcs[0].url, token=bad, max_retries=3, **FAST)
    with pytest.raises(insitubatch.StoreError) as info:
        store.read("zarr.json")
    assert info.value.detail == 401
    assert f"{DEMO}/zarr.json" in str(info.value) and "Invalid Credentials" in str(info.value)
    assert "gave up" not in str(info.value)
    assert bad not in str(info.value) and bad not in repr(store)
    with pytest.raises(insitubatch.StoreError, match="listing"):
        store.list()


def test_anonymous_public_bucket(gcs, demo_dirs):
    _, public = gcs
    public.clear_log()
    store = insitubatch.store("gs://public-data/stores/demo.zarr", endpoint=public.url, skip_signature=True)
    assert store.anonymous
    assert check_every_chunk(store, demo_dirs[0], arrays=["t2m"]) == 5
    assert all("Authorization" not in r["headers"] for r in public.requests)


def test_no_token_suggests_skip_signature():
    with pytest.raises(insitubatch.InSituError, match="skip_signature=True"):
        insitubatch.store(DEMO)


def test_listing_paginates_and_opens_unconsolidated_groups(gcs, demo_dirs):
    private, _ = gcs
    store = insitubatch.store(f"gs://{BUCKET}/stores/plain.zarr", endpoint=private.url, token=GCS_TOKEN)
    private.clear_log()
    keys = store.list()
    local = sorted(p.relative_to(demo_dirs[1]).as_posix() for p in demo_dirs[1].rglob("*") if p.is_file())
    assert keys == local
    pages = [r for r in private.requests if r["path"].startswith("/storage/v1/")]
    assert len(pages) == -(-len(local) // 4) > 1  # page size 4: every page fetched
    assert store.list("t2m/") == [k for k in local if k.startswith("t2m/")]
    assert sorted(open_geometries(store)) == ["labels/masks", "sh", "t2m"]
    assert check_every_chunk(store, demo_dirs[1]) == 26


def test_unconsolidated_groups_are_walked_a_level_at_a_time(gcs, demo_dirs):
    """objects.list with delimiter "/" (4 entries a page here): a named array lists nothing,
    every array lists each group once, never an array's chunks."""
    private, _ = gcs
    store = insitubatch.store(f"gs://{BUCKET}/stores/plain.zarr", endpoint=private.url, token=GCS_TOKEN)
    assert store.list_dir() == (["zarr.json"], ["labels", "sh", "t2m"])
    assert store.list_dir("labels") == (["labels/zarr.json"], ["labels/masks"])
    chunks = {k.split("/")[2] for k in store.list("t2m/c/")}
    assert store.list_dir("t2m/c") == ([], sorted(f"t2m/c/{c}" for c in chunks))
    counted = _ext.CountingStore(store)
    assert sorted(open_geometries(counted, ["t2m"])) == ["t2m"] and counted.lists() == {}
    assert sorted(open_geometries(counted)) == ["labels/masks", "sh", "t2m"]
    assert counted.lists() == {"/": 1, "labels/": 1}


def test_missing_bucket(gcs):
    store = insitubatch.store("gs://no-such-bucket/x", endpoint=gcs[0].url, token=GCS_TOKEN)
    with pytest.raises(insitubatch.NotFoundError, match="no-such-bucket"):
        store.list()


@pytest.mark.timeout(120)
def test_recovers_from_faults(gcs, demo_dirs):
    with FaultProxy(gcs[0].url) as proxy:
        proxy.plan.per_path(["503", "reset", "short206"])
        store = insitubatch.store(f"gs://{BUCKET}/stores/plain.zarr", endpoint=proxy.url, token=GCS_TOKEN,
                                  max_retries=4, timeout=5, **FAST)
        assert check_every_chunk(store, demo_dirs[1]) == 26  # listing pages and reads recover
        assert store.transport_stats()["retries"] >= 20


@pytest.mark.parametrize("options, name", [
    (dict(token=5), "token"),
    (dict(regoin="us"), "regoin"),  # misspelt: no store takes it (region is S3's: ignored here)
    (dict(skip_signature=1), "skip_signature"),
    (dict(endpoint=""), "endpoint"),
])
def test_bad_options(options, name):
    with pytest.raises(insitubatch.InvalidArgumentError, match=name):
        insitubatch.store(DEMO, **options)
