"""The native Azure store (az://) against a loopback Azure Blob mimic (tests/servers.py) that
checks every SharedKey signature with the official azure-storage-blob SDK, SAS signatures and
bearer tokens, and issues tokens as Entra ID and the managed identity endpoint do. Values are
compared with zarr-python's reads of the same store."""

from __future__ import annotations

import base64
import pickle
import shutil

import pytest

import insitubatch
from insitubatch import _ext, open_geometries
from cloud_data import check_dataset_streams_exact, check_every_chunk
from cloud_fixtures import AZURE_ACCOUNT as ACCOUNT, AZURE_KEY as KEY
from cloud_mimics import AzureMimic

pytest.importorskip("azure.storage.blob")
FAST = dict(max_retries=1, retry_base_delay=0.001, retry_max_delay=0.01)
AZURE_ENV = ("AZURE_STORAGE_ACCOUNT_NAME", "AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_SAS_KEY",
             "AZURE_STORAGE_TOKEN", "AZURE_CLIENT_ID", "AZURE_CLIENT_SECRET", "AZURE_TENANT_ID",
             "AZURE_FEDERATED_TOKEN_FILE", "AZURE_AUTHORITY_HOST", "AZURE_STORAGE_USE_EMULATOR",
             "AZURE_STORAGE_ENDPOINT", "AZURITE_BLOB_STORAGE_URL", "IDENTITY_ENDPOINT", "IDENTITY_HEADER",
             "AZURE_MSI_ENDPOINT")


@pytest.fixture(autouse=True)
def clean_azure_env(monkeypatch):
    for name in AZURE_ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def container(demo_dirs, tmp_path_factory):
    root = tmp_path_factory.mktemp("azure-container")
    shutil.copytree(demo_dirs[0], root / "stores" / "demo.zarr")
    shutil.copytree(demo_dirs[1], root / "stores" / "plain.zarr")
    return root


@pytest.fixture
def azure(container):
    with AzureMimic({"data": container}, ACCOUNT, account_key=KEY, sas_signature="c2FzLXNpZw==",
                    client_id="app-1", client_secret="s3cret-value", tenant_id="tenant-1",
                    federated_token="federated-jwt-1", page_size=4) as server:
        yield server


def test_shared_key_reads_every_chunk_exactly_and_the_sdk_accepts_every_signature(azure, demo_dirs):
    store = insitubatch.store("az://data/stores/demo.zarr", account_name=ACCOUNT, account_key=KEY,
                              endpoint=azure.url)
    assert check_every_chunk(store, demo_dirs[0]) == 26
    assert store.credentials_source == "the account key (the account_key argument)"
    assert azure.requests and all(r["headers"]["Authorization"].startswith(f"SharedKey {ACCOUNT}:")
                                  for r in azure.requests)
    assert KEY not in repr(store)
    azure.clear_log()
    assert store.read("t2m/c/0/0/0", offset=2, length=5) == (demo_dirs[0] / "t2m/c/0/0/0").read_bytes()[2:7]
    request = azure.requests[-1]
    assert request["path"] == "/data/stores/demo.zarr/t2m/c/0/0/0"
    assert request["headers"]["x-ms-range"] == "bytes=2-6" and "Range" not in request["headers"]
    assert request["headers"]["x-ms-version"] == "2023-11-03"
    assert store.read("t2m/c/9/9/9") is None  # BlobNotFound is a missing key


def test_listing_pages_open_a_store_without_consolidated_metadata(azure, demo_dirs):
    store = insitubatch.store(f"https://{ACCOUNT}.blob.core.windows.net/data/stores/plain.zarr",
                              account_key=KEY, endpoint=azure.url)
    names = store.list("")
    assert names == sorted(p.relative_to(demo_dirs[1]).as_posix() for p in demo_dirs[1].rglob("*") if p.is_file())
    lists = [r for r in azure.requests if "comp=list" in r["path"]]
    assert len(lists) == -(-len(names) // 4)  # four names a page: every NextMarker followed
    check_dataset_streams_exact(store, demo_dirs[1], _ext.CountingStore(store))


def test_unconsolidated_groups_are_walked_a_level_at_a_time(azure, demo_dirs):
    """List Blobs with delimiter "/" (<BlobPrefix> entries, 4 a page here, signed as the SDK
    signs them): a named array lists nothing, every array lists each group once."""
    store = insitubatch.store(f"https://{ACCOUNT}.blob.core.windows.net/data/stores/plain.zarr",
                              account_key=KEY, endpoint=azure.url)
    assert store.list_dir() == (["zarr.json"], ["labels", "sh", "t2m"])
    assert store.list_dir("labels") == (["labels/zarr.json"], ["labels/masks"])
    counted = _ext.CountingStore(store)
    assert sorted(open_geometries(counted, ["t2m"])) == ["t2m"] and counted.lists() == {}
    assert sorted(open_geometries(counted)) == ["labels/masks", "sh", "t2m"]
    assert counted.lists() == {"/": 1, "labels/": 1}
    check_dataset_streams_exact(store, demo_dirs[1], _ext.CountingStore(store))


def test_string_to_sign_matches_the_sdk_for_listing_queries():
    from azure.core.pipeline import PipelineContext, PipelineRequest
    from azure.core.pipeline.transport import HttpRequest
    from azure.storage.blob._shared.authentication import SharedKeyCredentialPolicy

    headers = {"x-ms-date": "Tue, 01 Dec 2026 21:00:00 GMT", "x-ms-version": "2023-11-03"}
    query = [("restype", "container"), ("comp", "list"), ("prefix", "a b/ü+/"), ("marker", "2!x=y")]
    url = "http://h/acct/data?" + "&".join(f"{k}={_quote(v)}" for k, v in query)
    request = HttpRequest("GET", url, headers=dict(headers))
    captured = {}
    policy = SharedKeyCredentialPolicy("acct", KEY)
    policy._add_authorization_header = lambda req, sts: captured.setdefault("sts", sts)
    policy.on_request(PipelineRequest(request, PipelineContext(None)))
    ours = _ext.azure_string_to_sign("GET", [f"{k}: {v}" for k, v in headers.items()], "acct", "/acct/data", query)
    assert ours == captured["sts"]


def _quote(value: str) -> str:
    from urllib.parse import quote
    return quote(value, safe="")


def test_sas_token_from_the_environment_goes_in_the_query(azure, monkeypatch, demo_dirs):
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_NAME", ACCOUNT)
    monkeypatch.setenv("AZURE_STORAGE_SAS_KEY", "?sv=2022-11-02&sp=rl&sig=c2FzLXNpZw%3D%3D")
    monkeypatch.setenv("AZURE_STORAGE_ENDPOINT", azure.url)
    store = insitubatch.store("az://data/stores/demo.zarr")
    assert store.read("zarr.json") == (demo_dirs[0] / "zarr.json").read_bytes()
    assert "sig=c2FzLXNpZw%3D%3D" in azure.requests[-1]["path"]
    assert "Authorization" not in azure.requests[-1]["headers"]
    assert store.credentials_source == "a SAS token (AZURE_STORAGE_SAS_KEY)"
    bad = insitubatch.store("az://data/stores/demo.zarr", sas_token="sv=1&sig=wrong", **FAST)
    with pytest.raises(insitubatch.StoreError) as info:
        bad.read("zarr.json")
    assert info.value.detail == 403 and "az://data/stores/demo.zarr/zarr.json" in str(info.value)
    assert "AuthenticationFailed" in str(info.value) and "wrong" not in str(info.value)


def test_a_wrong_account_key_names_the_blob_not_the_key(azure):
    wrong = base64.b64encode(b"another-key-entirely-wrong-000000").decode()
    store = insitubatch.store("az://data/stores/demo.zarr", azure_storage_account_name=ACCOUNT,
                              azure_storage_account_key=wrong, endpoint=azure.url, **FAST)
    with pytest.raises(insitubatch.StoreError) as info:
        store.read("zarr.json")
    assert info.value.detail == 403
    assert "az://data/stores/demo.zarr/zarr.json" in str(info.value) and wrong not in str(info.value)


def test_service_principal_and_bearer_tokens(azure, demo_dirs):
    store = insitubatch.store("az://data/stores/demo.zarr", account_name=ACCOUNT, endpoint=azure.url,
                              client_id="app-1", client_secret="s3cret-value", tenant_id="tenant-1",
                              authority_host=azure.url)
    assert check_every_chunk(store, demo_dirs[0]) == 26
    assert store.credentials_source == "service principal app-1 (the client_id argument)"
    assert len(azure.token_requests) == 1  # an hour-long token is fetched once
    assert azure.requests[-1]["headers"]["Authorization"] == "Bearer eyJ.azure-token-0"

    bearer = insitubatch.store("az://data/stores/demo.zarr", account_name=ACCOUNT, endpoint=azure.url,
                               bearer_token="eyJ.azure-token-0")
    assert bearer.read("zarr.json") == (demo_dirs[0] / "zarr.json").read_bytes()

    with pytest.raises(insitubatch.StoreError) as info:
        insitubatch.store("az://data/x", account_name=ACCOUNT, endpoint=azure.url, client_id="app-1",
                          client_secret="not-the-secret", tenant_id="tenant-1", authority_host=azure.url)
    assert "Entra ID" in str(info.value) and "Invalid client secret" in str(info.value)
    assert "not-the-secret" not in str(info.value)


def test_workload_identity_rereads_its_token_file_and_refreshes_short_tokens(azure, monkeypatch, tmp_path,
                                                                              demo_dirs):
    token_file = tmp_path / "azure-identity-token"
    token_file.write_text("federated-jwt-1\n")
    monkeypatch.setenv("AZURE_CLIENT_ID", "app-1")
    monkeypatch.setenv("AZURE_TENANT_ID", "tenant-1")
    monkeypatch.setenv("AZURE_FEDERATED_TOKEN_FILE", str(token_file))
    monkeypatch.setenv("AZURE_AUTHORITY_HOST", azure.url)
    azure.token_lifetime = 60  # inside the refresh margin: every request fetches a new token
    store = insitubatch.store("az://data/stores/demo.zarr", account_name=ACCOUNT, endpoint=azure.url)
    assert store.credentials_source == f"workload identity app-1 (token file {token_file})"
    for _ in range(3):
        assert store.read("zarr.json") == (demo_dirs[0] / "zarr.json").read_bytes()
    assert len(azure.token_requests) == 4  # at open, then once per read
    assert {r["headers"]["Authorization"] for r in azure.requests} == {f"Bearer eyJ.azure-token-{i}" for i in (1, 2, 3)}
    token_file.write_text("rotated-by-the-kubelet")  # the file is read again at each fetch
    azure.federated_token = "rotated-by-the-kubelet"
    assert store.read("zarr.json") == (demo_dirs[0] / "zarr.json").read_bytes()
    assert azure.requests[-1]["headers"]["Authorization"] == "Bearer eyJ.azure-token-4"


def test_managed_identity_names_the_identity_and_forwards_the_identity_header(azure, monkeypatch, demo_dirs):
    monkeypatch.setenv("IDENTITY_HEADER", "app-service-header")
    store = insitubatch.store("az://data/stores/demo.zarr", account_name=ACCOUNT, endpoint=azure.url,
                              msi_endpoint=azure.url + "/metadata/identity/oauth2/token", object_id="obj-7")
    assert store.read("zarr.json") == (demo_dirs[0] / "zarr.json").read_bytes()
    fetched = azure.token_requests[-1]
    assert fetched["query"]["object_id"] == ["obj-7"] and fetched["query"]["api-version"] == ["2019-08-01"]
    assert fetched["headers"]["X-IDENTITY-HEADER"] == "app-service-header"
    assert store.credentials_source.startswith("managed identity obj-7 at ")


def test_nothing_configured_says_what_to_configure(azure):
    with pytest.raises(insitubatch.InSituError) as info:
        insitubatch.store("az://data/x", account_name=ACCOUNT, endpoint=azure.url,
                          msi_endpoint="http://127.0.0.1:9/metadata/identity/oauth2/token", **FAST)
    assert "no Azure credentials" in str(info.value) and "skip_signature=True" in str(info.value)


def test_the_emulator_layout_and_well_known_key(container, monkeypatch, demo_dirs):
    from insitubatch._ext import azure_string_to_sign  # noqa: F401  (the binding exists)

    emulator_key = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
    with AzureMimic({"data": container}, "devstoreaccount1", account_key=emulator_key, account_in_path=True) as emu:
        monkeypatch.setenv("AZURITE_BLOB_STORAGE_URL", emu.url)
        store = insitubatch.store("az://data/stores/demo.zarr", use_emulator="true")
        assert store.container_url == emu.url + "/devstoreaccount1/data"
        assert check_every_chunk(store, demo_dirs[0]) == 26
        assert emu.requests[-1]["path"].startswith("/devstoreaccount1/data/stores/demo.zarr/")


def test_anonymous_reads_of_a_public_container(container, demo_dirs):
    with AzureMimic({"public": container}, ACCOUNT, anonymous=True) as public:
        store = insitubatch.store("az://public/stores/demo.zarr", account_name=ACCOUNT, endpoint=public.url,
                                  skip_signature=True)
        assert store.anonymous and store.credentials_source == ""
        assert open_geometries(store, ["t2m"])["t2m"].shape == (40, 12, 10)
        assert "Authorization" not in public.requests[-1]["headers"]


def test_a_store_travels_to_another_process_by_its_recipe(azure, demo_dirs):
    store = insitubatch.store("az://data/stores/demo.zarr", account_name=ACCOUNT, account_key=KEY, endpoint=azure.url)
    again = pickle.loads(pickle.dumps(store))
    assert again.read("zarr.json") == (demo_dirs[0] / "zarr.json").read_bytes()


def test_virtual_references_to_azure_blobs(azure, container):
    import numpy as np

    (container / "raw.bin").write_bytes(bytes(range(100, 116)))
    refs = {"version": 1, "refs": {
        ".zgroup": '{"zarr_format": 2}',
        "x/.zarray": '{"zarr_format": 2, "shape": [8], "chunks": [4], "dtype": "|u1", "order": "C",'
                     ' "fill_value": 0, "filters": null, "compressor": null}',
        "x/0": ["az://data/raw.bin", 2, 4], "x/1": ["abfss://data@%s.dfs.core.windows.net/raw.bin" % ACCOUNT, 10, 4]}}
    store = insitubatch.reference_store(refs, account_name=ACCOUNT, account_key=KEY, endpoint=azure.url)
    np.testing.assert_array_equal(insitubatch.read_chunk(store, "x", (0,)), [102, 103, 104, 105])
    np.testing.assert_array_equal(insitubatch.read_chunk(store, "x", (1,)), [110, 111, 112, 113])


@pytest.mark.parametrize("url, options, error, match", [
    ("az://data/x?sv=1&sig=2", {"account_name": ACCOUNT}, insitubatch.InvalidArgumentError, "sas_key="),
    ("az://data/x", {"skip_signature": True}, insitubatch.InvalidArgumentError, "no storage account"),
    ("az://Data/x", {"account_name": ACCOUNT}, insitubatch.InvalidArgumentError, "lower-case letters"),
    ("abfss://data@acct.foo.dfs.core.windows.net/", {}, insitubatch.InvalidArgumentError, "blob.core.windows.net"),
    ("az://data@other.blob.core.windows.net/x", {"account_name": ACCOUNT, "skip_signature": True},
     insitubatch.InvalidArgumentError, "disagrees"),
    ("az://data/x", {"account_name": ACCOUNT, "use_azure_cli": True}, insitubatch.UnsupportedError,
     "az account get-access-token"),
    ("az://data/x", {"account_name": ACCOUNT, "account_key": "k", "access_key": "k"},
     insitubatch.InvalidArgumentError, "once"),
    ("az://data/x", {"account_name": ACCOUNT, "account_key": "!!not base64!!"}, insitubatch.InvalidArgumentError,
     "not base64"),
    ("az://data/x", {"account_name": ACCOUNT, "use_emulator": "perhaps"}, insitubatch.InvalidArgumentError,
     "use_emulator"),
    ("az://data/x", {"account_name": ACCOUNT, "container_name": "other"}, insitubatch.InvalidArgumentError,
     "disagrees"),
])
def test_bad_urls_and_options_are_named(url, options, error, match):
    with pytest.raises(error, match=match) as info:
        insitubatch.store(url, **options)
    assert "!!not base64!!" not in str(info.value)
