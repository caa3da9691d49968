"""The native S3 store against moto's S3 server on loopback (ThreadedMotoServer): the demo
store uploaded with boto3 streams exact values; with moto's auth on, moto verifies our
SigV4 signatures (ranges, session tokens, requester pays) against its IAM users."""

from __future__ import annotations

import re

import numpy as np
import pytest

import insitubatch
from insitubatch import _ext, open_geometries
from cloud_data import check_dataset_streams_exact, check_every_chunk, oracle
from cloud_fixtures import BUCKET, MANY_KEYS, PUBLIC_BUCKET
from servers import FaultProxy

FAST = dict(retry_base_delay=0.001, retry_max_delay=0.01)
DEMO = f"s3://{BUCKET}/stores/demo.zarr"


def open_s3(moto, url=DEMO, **options):
    options.setdefault("endpoint", moto.endpoint)
    options.setdefault("access_key_id", moto.access_key_id)
    options.setdefault("secret_access_key", moto.secret_access_key)
    return insitubatch.store(url, **options)


def test_every_chunk_matches_zarr_python(moto, demo_dirs):
    store = open_s3(moto)
    assert check_every_chunk(store, demo_dirs[0]) == 26
    assert repr(store) == (f"<insitubatch.S3Store {DEMO} region=us-east-1 endpoint={moto.endpoint}/{BUCKET}>")


def test_dataset_streams_exact_values_reading_each_chunk_once(moto, demo_dirs):
    store = open_s3(moto)
    check_dataset_streams_exact(store, demo_dirs[0], _ext.CountingStore(store))


def test_raw_ranges_and_missing_keys(moto, demo_dirs):
    store = open_s3(moto)
    data = (demo_dirs[0] / "t2m" / "c" / "2" / "0" / "0").read_bytes()
    assert store.read("t2m/c/2/0/0") == data
    assert store.read("t2m/c/2/0/0", offset=5, length=11) == data[5:16]
    assert store.read("t2m/c/2/0/0", suffix=7) == data[-7:]
    assert store.read("t2m/c/2/0/0", offset=len(data), length=0) == b""
    assert store.read("t2m/c/7/0/0") is None
    with pytest.raises(insitubatch.CorruptChunkError, match=rf"{DEMO}/t2m/c/2/0/0.*object is {len(data)} bytes"):
        store.read("t2m/c/2/0/0", offset=len(data) - 1, length=4)


def test_listing_paginates_and_opens_unconsolidated_groups(moto, demo_dirs):
    many = open_s3(moto, f"s3://{BUCKET}/many")
    keys = many.list()
    assert keys == [f"k{i:05d}" for i in range(MANY_KEYS)]  # two ListObjectsV2 pages, sorted
    assert many.list("k0100") == [f"k0100{i}" for i in range(5)]
    plain = open_s3(moto, f"s3://{BUCKET}/stores/plain.zarr")
    assert "t2m/zarr.json" in plain.list() and "zarr.json" in plain.list()
    assert plain.list("labels/") == sorted(plain.list("labels/"))
    geoms = open_geometries(plain)  # no consolidated metadata: discovered by listing
    assert sorted(geoms) == ["labels/masks", "sh", "t2m"]
    assert check_every_chunk(plain, demo_dirs[1]) == 26


def test_unconsolidated_groups_are_walked_a_level_at_a_time(moto, demo_dirs):
    """Without consolidated metadata nothing is listed for arrays named by path, and asking
    for every array lists each group once, with a delimiter (moto's ListObjectsV2), never an
    array's folder of chunks."""
    plain = open_s3(moto, f"s3://{BUCKET}/stores/plain.zarr")
    assert plain.list_dir() == (["zarr.json"], ["labels", "sh", "t2m"])
    assert plain.list_dir("labels") == (["labels/zarr.json"], ["labels/masks"])
    for bad in ("labels/", "../x", "/labels"):
        with pytest.raises(insitubatch.InvalidArgumentError, match="invalid store key"):
            plain.list_dir(bad)
    assert plain.list_dir("t2m/c") == ([], sorted(f"t2m/c/{k}" for k in {p.split("/")[2] for p in plain.list("t2m/c/")}))
    many = open_s3(moto, f"s3://{BUCKET}/many")
    assert many.list_dir() == ([f"k{i:05d}" for i in range(MANY_KEYS)], [])  # two delimited pages
    counted = _ext.CountingStore(plain)
    named = open_geometries(counted, ["t2m", "labels/masks"])
    assert counted.lists() == {}
    every = open_geometries(counted)
    assert sorted(every) == ["labels/masks", "sh", "t2m"]
    assert counted.lists() == {"/": 1, "labels/": 1}
    assert named["t2m"].shape == every["t2m"].shape
    assert check_every_chunk(plain, demo_dirs[1]) == 26


def test_missing_bucket_and_prefix(moto):
    with pytest.raises(insitubatch.NotFoundError, match="bucket no-such-bucket does not exist"):
        open_s3(moto, "s3://no-such-bucket/x.zarr").read("zarr.json")
    with pytest.raises(insitubatch.NotFoundError):
        open_s3(moto, "s3://no-such-bucket/x.zarr").list()
    with pytest.raises(insitubatch.NotFoundError, match="no zarr metadata"):
        open_geometries(open_s3(moto, f"s3://{BUCKET}/stores/absent.zarr"))


# -- credentials (moto verifies signatures while auth is on) ---------------------------------


def test_signed_requests_pass_moto_verification(moto_auth, demo_dirs):
    store = open_s3(moto_auth)
    assert check_every_chunk(store, demo_dirs[0], arrays=["t2m", "sh"]) == 10  # GETs and ranges
    assert len(open_s3(moto_auth, f"s3://{BUCKET}/many").list()) == MANY_KEYS  # signed query
    assert open_s3(moto_auth, f"s3://{BUCKET}/stores/plain.zarr").list_dir()[1] == ["labels", "sh", "t2m"]  # delimiter=/


def test_wrong_secret_is_a_clear_error_without_the_secret(moto_auth):
    secret = "WrongSecretValue/abc+def123"
    store = open_s3(moto_auth, secret_access_key=secret, max_retries=3, **FAST)
    with pytest.raises(insitubatch.StoreError) as info:
        store.read("zarr.json")
    message = str(info.value)
    assert info.value.detail == 403 and isinstance(info.value, OSError)
    assert f"{DEMO}/zarr.json" in message and "SignatureDoesNotMatch" in message
    assert "gave up" not in message  # 403 is not retried
    for text in (message, repr(store), store.describe("zarr.json"), repr(info.value)):
        assert secret not in text
    with pytest.raises(insitubatch.StoreError, match="InvalidAccessKeyId"):
        open_s3(moto_auth, access_key_id="AKIANOTAREALKEY00000").read("zarr.json")


def test_session_token(moto_auth, demo_dirs):
    s = moto_auth.session
    store = open_s3(moto_auth, access_key_id=s["AccessKeyId"], secret_access_key=s["SecretAccessKey"],
                    session_token=s["SessionToken"])
    assert store.read("zarr.json") == (demo_dirs[0] / "zarr.json").read_bytes()
    alias = open_s3(moto_auth, access_key_id=s["AccessKeyId"], secret_access_key=s["SecretAccessKey"],
                    token=s["SessionToken"])  # obstore's name for it
    assert alias.read("zarr.json") is not None
    without = open_s3(moto_auth, access_key_id=s["AccessKeyId"], secret_access_key=s["SecretAccessKey"])
    with pytest.raises(insitubatch.StoreError) as info:
        without.read("zarr.json")
    assert s["SecretAccessKey"] not in str(info.value) and s["SessionToken"] not in str(info.value)


def test_credentials_from_the_environment(moto_auth, monkeypatch, demo_dirs):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", moto_auth.access_key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", moto_auth.secret_access_key)
    monkeypatch.setenv("AWS_REGION", "eu-west-3")
    store = insitubatch.store(DEMO, endpoint=moto_auth.endpoint)
    assert store.region == "eu-west-3"
    assert store.read("zarr.json") == (demo_dirs[0] / "zarr.json").read_bytes()
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", moto_auth.endpoint)
    assert insitubatch.store(DEMO).endpoint_url == f"{moto_auth.endpoint}/{BUCKET}"


def test_credentials_from_profiles(moto_auth, monkeypatch, tmp_path, demo_dirs):
    creds, config = tmp_path / "credentials", tmp_path / "config"
    creds.write_text(f"[default]\naws_access_key_id = AKIADEFAULTBOGUS000\naws_secret_access_key = bogus\n\n"
                     f"[reader]\naws_access_key_id = {moto_auth.access_key_id}\n"
                     f"aws_secret_access_key = {moto_auth.secret_access_key}\n")
    config.write_text("[default]\nregion = us-east-2\n[profile reader]\nregion = ap-northeast-1\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    default = insitubatch.store(DEMO, endpoint=moto_auth.endpoint)
    assert default.region == "us-east-2"
    with pytest.raises(insitubatch.StoreError, match="InvalidAccessKeyId"):
        default.read("zarr.json")
    by_argument = insitubatch.store(DEMO, endpoint=moto_auth.endpoint, profile="reader")
    assert by_argument.region == "ap-northeast-1"
    assert by_argument.read("zarr.json") == (demo_dirs[0] / "zarr.json").read_bytes()
    monkeypatch.setenv("AWS_PROFILE", "reader")
    assert insitubatch.store(DEMO, endpoint=moto_auth.endpoint).read("zarr.json") is not None
    with pytest.raises(insitubatch.NotFoundError, match="'nobody'"):
        insitubatch.store(DEMO, endpoint=moto_auth.endpoint, profile="nobody")


def test_no_credentials_suggests_skip_signature():
    with pytest.raises(insitubatch.InSituError, match="skip_signature=True") as info:
        insitubatch.store(DEMO)
    assert DEMO.split("/stores")[0] in str(info.value)


def test_skip_signature_sends_no_authorization(moto, demo_dirs):
    with FaultProxy(moto.endpoint) as proxy:
        store = insitubatch.store(f"s3://{PUBLIC_BUCKET}/stores/demo.zarr", endpoint=proxy.url,
                                  skip_signature=True)
        assert store.anonymous and "anonymous" in repr(store)
        assert check_every_chunk(store, demo_dirs[0], arrays=["t2m"]) == 5
        assert proxy.requests
        for request in proxy.requests:
            names = {k.lower() for k in request["headers"]}
            assert "authorization" not in names and "x-amz-date" not in names


def test_anonymous_request_to_a_private_bucket_is_refused_clearly(moto):
    store = insitubatch.store(DEMO, endpoint=moto.endpoint, skip_signature=True)
    with pytest.raises(insitubatch.StoreError) as info:
        store.read("zarr.json")
    assert info.value.detail == 403 and f"{DEMO}/zarr.json" in str(info.value)


def test_request_payer_header_is_sent_and_signed(moto_auth):
    with FaultProxy(moto_auth.endpoint) as proxy:
        store = open_s3(moto_auth, endpoint=proxy.url, request_payer=True)
        assert store.read("zarr.json") is not None  # moto verified the signature
        headers = {k.lower(): v for k, v in proxy.requests[-1]["headers"].items()}
        assert headers["x-amz-request-payer"] == "requester"
        signed = re.search(r"SignedHeaders=([^,]+)", headers["authorization"]).group(1).split(";")
        assert signed == sorted(signed) and {"host", "x-amz-date", "x-amz-content-sha256",
                                              "x-amz-request-payer"} <= set(signed)
        assert moto_auth.secret_access_key not in str(proxy.requests)


def test_virtual_hosted_style(moto, demo_dirs):
    port = moto.endpoint.rsplit(":", 1)[1]
    store = open_s3(moto, endpoint=f"http://localhost:{port}", virtual_hosted_style_request=True)
    assert store.endpoint_url == f"http://{BUCKET}.localhost:{port}"
    assert store.read("zarr.json") == (demo_dirs[0] / "zarr.json").read_bytes()
    assert "zarr.json" in store.list()


def test_aws_default_endpoint_addressing():
    store = insitubatch.store("s3://my-bucket/x.zarr", skip_signature=True, region="eu-west-1")
    assert store.endpoint_url == "https://my-bucket.s3.eu-west-1.amazonaws.com"
    dotted = insitubatch.store("s3://my.bucket/x.zarr", skip_signature=True)
    assert dotted.endpoint_url == "https://s3.us-east-1.amazonaws.com/my.bucket"
    path = insitubatch.store("s3://my-bucket", skip_signature=True, aws_virtual_hosted_style_request=False)
    assert path.endpoint_url == "https://s3.us-east-1.amazonaws.com/my-bucket"


# -- faults -------------------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_dataset_over_s3_survives_faults(moto, demo_dirs):
    with FaultProxy(moto.endpoint) as proxy:
        proxy.plan.per_path(["503", "reset", "truncate", "500"])
        store = open_s3(moto, endpoint=proxy.url, max_retries=4, timeout=5, **FAST)
        check_dataset_streams_exact(store, demo_dirs[0], _ext.CountingStore(store))
        assert store.transport_stats()["retries"] >= 20


@pytest.mark.timeout(60)
def test_list_recovers_from_faults_and_gives_up_clearly(moto):
    with FaultProxy(moto.endpoint) as proxy:
        store = open_s3(moto, f"s3://{BUCKET}/many", endpoint=proxy.url, max_retries=2, **FAST)
        proxy.plan.sequence(["503", "reset"])
        assert len(store.list()) == MANY_KEYS
        proxy.plan.always("503")
        with pytest.raises(insitubatch.StoreError, match=rf"s3://{BUCKET}/many.*gave up after 3 attempts"):
            store.list()


# -- options ------------------------------------------------------------------------------------


@pytest.mark.parametrize("options, error, name", [
    (dict(region=5), insitubatch.InvalidArgumentError, "region"),
    (dict(skip_signature="yes"), insitubatch.InvalidArgumentError, "skip_signature"),
    (dict(request_payer=1), insitubatch.InvalidArgumentError, "request_payer"),
    (dict(header={"a": "b"}), insitubatch.InvalidArgumentError, "header"),  # headers (HTTP's) is ignored
    (dict(s3_express=True), insitubatch.UnsupportedError, "s3_express"),
    (dict(token="a", session_token="b"), insitubatch.InvalidArgumentError, "once"),
    (dict(endpoint="ftp://x"), insitubatch.InvalidArgumentError, "endpoint"),
    (dict(region="a", aws_region="b"), insitubatch.InvalidArgumentError, "twice"),
])
def test_bad_options(options, error, name):
    options.setdefault("skip_signature", True)
    with pytest.raises(error, match=name):
        insitubatch.store(DEMO, **options)


def test_secret_values_never_echoed_by_option_errors():
    with pytest.raises(insitubatch.InvalidArgumentError) as info:
        insitubatch.store(DEMO, access_key_id="AKIA", secret_access_key=["TopSecretList"])
    assert "TopSecretList" not in str(info.value) and "secret_access_key" in str(info.value)
    with pytest.raises(insitubatch.InvalidArgumentError) as info:
        insitubatch.store(DEMO, access_key_id="AKIAEXAMPLE")
    assert "secret_access_key" in str(info.value)


def test_values_match_after_reopening(moto, demo_dirs):
    """Stores are independent: two open at once, one closed mid-way, values stay exact."""
    a, b = open_s3(moto), open_s3(moto)
    del a
    np.testing.assert_array_equal(insitubatch.read_chunk(b, "t2m", (4, 0, 0)), oracle(demo_dirs[0], "t2m")[32:40])
