"""Which CA certificates verify TLS: a loopback HTTPS server whose certificate a throwaway CA
signed, that CA passed each way a user can pass one (the ca_file option, SSL_CERT_FILE,
SSL_CERT_DIR, CURL_CA_BUNDLE, REQUESTS_CA_BUNDLE, AWS_CA_BUNDLE), and the store and the
debug report naming what is in use. A bundled libcurl must not rely on its compiled-in path."""

from __future__ import annotations

import pytest

import insitubatch
from insitubatch import _ext, _tls
from cloud_data import make_demo_store
from tls_ca import https_range_server, make_test_ca, openssl_available

VARIABLES = ("SSL_CERT_FILE", "SSL_CERT_DIR", "CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE", "AWS_CA_BUNDLE")
FAST = dict(max_retries=0)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch):
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    if not openssl_available():
        pytest.skip("openssl CLI not available to make a test CA")
    d = tmp_path_factory.mktemp("tls")
    root = make_demo_store(d / "data" / "demo.zarr")
    ca = make_test_ca(d / "ca")
    server = https_range_server(root.parent, ca)
    yield server.url + "/demo.zarr", ca, (root / "zarr.json").read_bytes()
    server.close()


@pytest.mark.timeout(60)
def test_the_system_bundle_refuses_the_test_ca_and_the_error_names_it(tls):
    url, _, _ = tls
    s = insitubatch.store(url, **FAST)
    system = _ext.find_ca_bundle()
    assert system["source"] == "the system", system
    assert s.ca_bundle == system["description"]
    with pytest.raises(insitubatch.StoreError, match="certificate verification failed") as info:
        s.read("zarr.json")
    assert system["description"] in str(info.value)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("way", ["ca_file", *VARIABLES])
def test_the_test_ca_passed_each_way_verifies_the_server(tls, monkeypatch, way):
    url, ca, want = tls
    path = str(ca.hashed_dir if way == "SSL_CERT_DIR" else ca.ca_pem)
    if way == "ca_file":
        s = insitubatch.store(url, ca_file=path, **FAST)
        source = "the ca_file option"
    else:
        monkeypatch.setenv(way, path)
        s = insitubatch.store(url, **FAST)
        source = way
    assert s.read("zarr.json") == want
    assert s.ca_bundle == f"{path} (from {source})"
    assert insitubatch.debug_info()["TLS CA bundle"] == (s.ca_bundle if way != "ca_file" else
                                                           _ext.find_ca_bundle()["description"])


@pytest.mark.timeout(60)
def test_ssl_cert_file_outranks_the_other_variables(tls, monkeypatch, tmp_path):
    url, ca, want = tls
    monkeypatch.setenv("SSL_CERT_FILE", str(ca.ca_pem))
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt")
    assert insitubatch.store(url, **FAST).read("zarr.json") == want
    monkeypatch.delenv("SSL_CERT_FILE")
    with pytest.raises(insitubatch.StoreError, match="REQUESTS_CA_BUNDLE"):
        insitubatch.store(url, **FAST).read("zarr.json")


@pytest.mark.parametrize("way", VARIABLES)
def test_a_variable_naming_a_missing_path_is_an_error_naming_it(tmp_path, monkeypatch, way):
    missing = tmp_path / "nowhere.pem"
    monkeypatch.setenv(way, str(missing))
    with pytest.raises(insitubatch.InvalidArgumentError, match=f"{way} names {missing}"):
        insitubatch.store("https://127.0.0.1:9/x.zarr")
    assert insitubatch.debug_info()["TLS CA bundle"].startswith(f"error: {way} names {missing}")
    # Unverified TLS uses no bundle, so a stale variable does not stop it.
    assert "not verified" in insitubatch.store("https://127.0.0.1:9/x.zarr", verify_tls=False).ca_bundle


def test_every_network_store_says_which_bundle_it_uses(monkeypatch, tmp_path):
    pem = tmp_path / "ca.pem"
    pem.write_text("")
    monkeypatch.setenv("AWS_CA_BUNDLE", str(pem))
    s3 = insitubatch.store("s3://bucket/x.zarr", endpoint="http://127.0.0.1:9", region="us-east-1",
                           skip_signature=True)
    assert s3.ca_bundle == f"{pem} (from AWS_CA_BUNDLE)"


def test_certifi_is_found_without_importing_it():
    certifi = pytest.importorskip("certifi")
    assert _tls.certifi_bundle() == certifi.where()
