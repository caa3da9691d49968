"""gs:// tokens the store fetches itself: a service-account key (a JWT the token endpoint
verifies with the key's public half), gcloud's authorized_user login (the refresh-token
grant) and the metadata server. The token endpoint and metadata server are loopback servers
speaking Google's documented protocols; the GCS mimic accepts only the token they issue."""

from __future__ import annotations

import base64
import json
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import insitubatch
from cloud_data import check_every_chunk
from cloud_fixtures import BUCKET, GCS_TOKEN

cryptography = pytest.importorskip("cryptography")
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import padding, rsa  # noqa: E402

DEMO = f"gs://{BUCKET}/stores/demo.zarr"
SCOPE = "https://www.googleapis.com/auth/devstorage.read_only"


def _b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class GoogleAuthServer:
    """A token endpoint (jwt-bearer and refresh_token grants) and a metadata server that
    hand out GCS_TOKEN, checking what Google checks: the JWT's RS256 signature against the
    service account's public key, its audience, scope and lifetime; the refresh token; the
    Metadata-Flavor header."""

    def __init__(self, public_key, refresh_token="RT-SECRET", expires_in=3600):
        self.public_key, self.refresh_token, self.expires_in = public_key, refresh_token, expires_in
        self.grants: list[str] = []
        self.claims: list[dict] = []
        self.errors: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _token(self) -> None:
                self._send(200, {"access_token": GCS_TOKEN, "expires_in": server.expires_in, "token_type": "Bearer"})

            def do_POST(self):
                form = dict(urllib.parse.parse_qsl(self.rfile.read(int(self.headers["Content-Length"])).decode()))
                grant = form.get("grant_type", "")
                server.grants.append(grant)
                if grant == "urn:ietf:params:oauth:grant-type:jwt-bearer":
                    header, claims, signature = form["assertion"].split(".")
                    try:
                        server.public_key.verify(_b64url_decode(signature), f"{header}.{claims}".encode(),
                                                 padding.PKCS1v15(), hashes.SHA256())
                    except Exception as exc:  # noqa: BLE001
                        server.errors.append(f"bad signature: {exc!r}")
                        return self._send(400, {"error": "invalid_grant"})
                    body = json.loads(_b64url_decode(claims))
                    server.claims.append(body)
                    if (body["aud"] != f"{server.url}/token" or body["scope"] != SCOPE
                            or not body["iat"] <= time.time() + 5 < body["exp"]):
                        server.errors.append(f"bad claims: {body}")
                        return self._send(400, {"error": "invalid_grant"})
                    return self._token()
                if grant == "refresh_token" and form.get("refresh_token") == server.refresh_token:
                    return self._token()
                self._send(400, {"error": "invalid_grant", "error_description": "Bad Request"})

            def do_GET(self):
                path, _, query = self.path.partition("?")
                if path == "/computeMetadata/v1/instance/service-accounts/default/token":
                    if self.headers.get("Metadata-Flavor") != "Google":
                        return self._send(403, {"error": "missing Metadata-Flavor"})
                    server.grants.append("metadata " + urllib.parse.unquote(query))
                    return self._token()
                self._send(404, {})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def google():
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    server = GoogleAuthServer(key.public_key())
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    service_account = {"type": "service_account", "project_id": "p", "private_key_id": "k1",
                       "private_key": pem, "client_email": "reader@p.iam.gserviceaccount.com",
                       "token_uri": f"{server.url}/token"}
    yield server, service_account
    server.close()


def test_service_account_key_file(google, gcs, demo_dirs, tmp_path, monkeypatch):
    server, service_account = google
    private, _ = gcs
    key = tmp_path / "sa.json"
    key.write_text(json.dumps(service_account))
    store = insitubatch.store(DEMO, endpoint=private.url, service_account_path=str(key))
    assert store.credentials_source == f"service account reader@p.iam.gserviceaccount.com (file {key})"
    assert check_every_chunk(store, demo_dirs[0], arrays=["t2m"]) == 5
    assert server.errors == [] and server.grants == ["urn:ietf:params:oauth:grant-type:jwt-bearer"]
    assert server.claims[0]["iss"] == "reader@p.iam.gserviceaccount.com"
    for text in (repr(store), store.credentials_source):
        assert GCS_TOKEN not in text and "PRIVATE KEY" not in text
    # The same key by GOOGLE_APPLICATION_CREDENTIALS, by obstore's option name, and as JSON text.
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key))
    assert insitubatch.store(DEMO, endpoint=private.url).read("zarr.json") is not None
    assert insitubatch.store(DEMO, endpoint=private.url, application_credentials=str(key)).read("zarr.json")
    inline = insitubatch.store(DEMO, endpoint=private.url, service_account_key=json.dumps(service_account, indent=2))
    assert inline.credentials_source.endswith("(the service_account_key argument)")  # as Google writes key files


@pytest.mark.parametrize("options, match", [
    (dict(service_account_path=3), "'service_account_path' must be a string"),
    (dict(service_account_path=""), "'service_account_path' must not be empty"),
    (dict(service_account_key={"type": "service_account"}), "'service_account_key' must be a key file's JSON"),
    (dict(service_account_key="  "), "'service_account_key' must be a key file's JSON"),
    (dict(service_account_path="/a.json", application_credentials="/b.json"), "not both"),
    (dict(service_account_key='{"type": "external_account", "secret": "S3CRET"}'), "external_account"),
])
def test_bad_key_options_are_clear_errors(gcs, options, match):
    private, _ = gcs
    with pytest.raises(insitubatch.InSituError, match=match) as info:
        insitubatch.store(DEMO, endpoint=private.url, **options)
    assert "S3CRET" not in str(info.value)


def test_a_key_the_token_endpoint_rejects_fails_at_open(google, gcs, tmp_path):
    server, service_account = google
    private, _ = gcs
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    service_account["private_key"] = other.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()
    key = tmp_path / "sa.json"
    key.write_text(json.dumps(service_account))
    with pytest.raises(insitubatch.StoreError) as info:
        insitubatch.store(DEMO, endpoint=private.url, service_account_path=str(key), max_retries=1)
    message = str(info.value)
    assert f"the token endpoint {server.url}/token" in message and "400" in message
    assert "PRIVATE KEY" not in message
    assert server.errors and "bad signature" in server.errors[0]


def test_gcloud_application_default_login(google, gcs, demo_dirs, tmp_path, monkeypatch):
    server, _ = google
    private, _ = gcs
    adc = tmp_path / "gcloud" / "application_default_credentials.json"
    adc.parent.mkdir()
    adc.write_text(json.dumps({"type": "authorized_user", "client_id": "cid", "client_secret": "CS-SECRET",
                               "refresh_token": "RT-SECRET", "token_uri": f"{server.url}/token"}))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(adc.parent))
    store = insitubatch.store(DEMO, endpoint=private.url)
    assert store.credentials_source == f"authorized user (file {adc})"
    assert store.read("zarr.json") == (demo_dirs[0] / "zarr.json").read_bytes()
    assert server.grants == ["refresh_token"]


def test_metadata_server(google, gcs, demo_dirs, monkeypatch):
    server, _ = google
    private, _ = gcs
    monkeypatch.delenv("NO_GCE_CHECK")
    monkeypatch.setenv("GCE_METADATA_HOST", server.url.removeprefix("http://"))
    store = insitubatch.store(DEMO, endpoint=private.url)
    assert store.credentials_source == f"the metadata server {server.url}"
    assert store.read("zarr.json") == (demo_dirs[0] / "zarr.json").read_bytes()
    assert server.grants == [f"metadata scopes={SCOPE}"]


def test_tokens_near_expiry_are_fetched_again(gcs, demo_dirs, monkeypatch):
    private, _ = gcs
    server = GoogleAuthServer(None, expires_in=120)  # inside the five-minute margin
    try:
        monkeypatch.delenv("NO_GCE_CHECK")
        monkeypatch.setenv("GCE_METADATA_HOST", server.url.removeprefix("http://"))
        store = insitubatch.store(DEMO, endpoint=private.url)
        store.read("zarr.json")
        store.read("t2m/zarr.json")
        assert len(server.grants) >= 3  # at open, then before each request
    finally:
        server.close()


def test_no_credentials_still_suggests_skip_signature(gcs):
    private, _ = gcs
    with pytest.raises(insitubatch.InSituError, match="skip_signature=True") as info:
        insitubatch.store(DEMO, endpoint=private.url)
    assert "NO_GCE_CHECK" in str(info.value)
