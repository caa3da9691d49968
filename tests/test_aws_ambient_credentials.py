"""S3 credentials from the ambient sources of code running inside AWS: web identity (STS
AssumeRoleWithWebIdentity against moto), the container credentials endpoint and IMDSv2
(loopback servers speaking the documented protocols, handing out moto session keys). moto
verifies every signature, so a read that succeeds used the fetched keys."""

from __future__ import annotations

import datetime
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import insitubatch
from cloud_data import check_every_chunk
from cloud_fixtures import BUCKET
from servers import FaultProxy

DEMO = f"s3://{BUCKET}/stores/demo.zarr"
ROLE_ARN = "arn:aws:iam::123456789012:role/reader-role"


def _expiring_in(delta: datetime.timedelta) -> str:
    return (datetime.datetime.now(datetime.timezone.utc) + delta).strftime("%Y-%m-%dT%H:%M:%SZ")


class MetadataServer:
    """IMDSv2 (token PUT, role listing, role credentials) and a container credentials
    endpoint on 127.0.0.1, serving `session` keys that expire after `lifetime`."""

    def __init__(self, session: dict, lifetime=datetime.timedelta(hours=6), authorization="AUTH-SECRET"):
        self.session, self.lifetime, self.authorization = session, lifetime, authorization
        self.fetches = {"imds": 0, "container": 0}
        self.refused = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _send(self, status: int, body: str) -> None:
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_PUT(self):
                if self.path == "/latest/api/token" and self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
                    return self._send(200, "IMDS-SESSION")
                self._send(400, "bad token request")

            def do_GET(self):
                creds = {"Code": "Success", "AccessKeyId": server.session["AccessKeyId"],
                         "SecretAccessKey": server.session["SecretAccessKey"],
                         "Token": server.session["SessionToken"], "Expiration": _expiring_in(server.lifetime)}
                if self.path.startswith("/latest/"):
                    if self.headers.get("X-aws-ec2-metadata-token") != "IMDS-SESSION":
                        server.refused += 1
                        return self._send(401, "")
                    if self.path == "/latest/meta-data/iam/security-credentials/":
                        return self._send(200, "reader-role")
                    if self.path == "/latest/meta-data/iam/security-credentials/reader-role":
                        server.fetches["imds"] += 1
                        return self._send(200, json.dumps(creds))
                elif self.path == "/v2/credentials/task":
                    if self.headers.get("Authorization") != server.authorization:
                        server.refused += 1
                        return self._send(403, "")
                    server.fetches["container"] += 1
                    return self._send(200, json.dumps(creds))
                self._send(404, "")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def metadata(moto_auth):
    server = MetadataServer(moto_auth.session)
    yield server
    server.close()


def test_instance_metadata_imds_v2(metadata, moto_auth, monkeypatch, demo_dirs):
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "false")
    monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", metadata.url)
    store = insitubatch.store(DEMO, endpoint=moto_auth.endpoint)
    assert store.credentials_source == f"instance metadata ({metadata.url})"
    assert check_every_chunk(store, demo_dirs[0], arrays=["t2m"]) == 5
    assert metadata.fetches["imds"] == 1 and metadata.refused == 0  # fetched once, cached
    for text in (repr(store), store.credentials_source):
        assert moto_auth.session["SecretAccessKey"] not in text and "IMDS-SESSION" not in text


def test_credentials_near_expiry_are_fetched_again(moto_auth, monkeypatch, demo_dirs):
    server = MetadataServer(moto_auth.session, lifetime=datetime.timedelta(minutes=4))  # inside the margin
    try:
        monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "false")
        monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", server.url)
        store = insitubatch.store(DEMO, endpoint=moto_auth.endpoint)
        assert store.read("zarr.json") == (demo_dirs[0] / "zarr.json").read_bytes()
        assert store.read("t2m/zarr.json") is not None
        assert server.fetches["imds"] >= 3  # open, then once per signed request
    finally:
        server.close()


def test_container_credentials_with_an_authorization_token(metadata, moto_auth, monkeypatch, demo_dirs,
                                                           tmp_path):
    monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", metadata.url + "/v2/credentials/task")
    token = tmp_path / "token"
    token.write_text("AUTH-SECRET\n")
    monkeypatch.setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", str(token))
    store = insitubatch.store(DEMO, endpoint=moto_auth.endpoint)
    assert store.credentials_source == f"container credentials ({metadata.url}/v2/credentials/task)"
    assert store.read("zarr.json") == (demo_dirs[0] / "zarr.json").read_bytes()
    assert metadata.fetches["container"] == 1
    token.write_text("WRONG")  # read again at each fetch: a rotated token that is refused
    monkeypatch.setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", str(token))
    with pytest.raises(insitubatch.StoreError) as info:
        insitubatch.store(DEMO, endpoint=moto_auth.endpoint)
    assert "container credentials" in str(info.value) and "403" in str(info.value)
    assert "WRONG" not in str(info.value)
    monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://example.com/creds")
    with pytest.raises(insitubatch.InvalidArgumentError, match="must be https"):
        insitubatch.store(DEMO, endpoint=moto_auth.endpoint)


def test_web_identity_through_sts(moto, monkeypatch, demo_dirs, tmp_path):
    token = tmp_path / "web-identity-token"
    token.write_text("eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQifQ.SIGNATURE")
    monkeypatch.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", str(token))
    monkeypatch.setenv("AWS_ROLE_ARN", ROLE_ARN)
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", moto.endpoint)
    with FaultProxy(moto.endpoint) as proxy:
        # moto's signature checks reject AssumeRoleWithWebIdentity itself (an unsigned call
        # by design), so they are switched on only after the exchange, for the S3 reads.
        store = insitubatch.store(DEMO, endpoint=proxy.url)
        assert store.credentials_source == f"web identity (role {ROLE_ARN}, STS {moto.endpoint})"
        moto.enforce_auth(True)
        try:
            assert store.read("zarr.json") == (demo_dirs[0] / "zarr.json").read_bytes()
        finally:
            moto.enforce_auth(False)
        auth = [r["headers"].get("Authorization", r["headers"].get("authorization", "")) for r in proxy.requests]
    assert auth and all("Credential=ASIA" in a for a in auth)  # STS-issued temporary keys
    assert all(token.read_text() not in a for a in auth)
    token.unlink()
    with pytest.raises(insitubatch.InSituError, match="web identity token file"):
        insitubatch.store(DEMO, endpoint=moto.endpoint)


def test_credential_process_from_a_profile(moto_auth, monkeypatch, demo_dirs, tmp_path):
    import sys

    helper = tmp_path / "helper.py"
    helper.write_text("import json, sys\n"
                      f"print(json.dumps({{'Version': 1, 'AccessKeyId': {moto_auth.session['AccessKeyId']!r},"
                      f" 'SecretAccessKey': {moto_auth.session['SecretAccessKey']!r},"
                      f" 'SessionToken': {moto_auth.session['SessionToken']!r},"
                      f" 'Expiration': {_expiring_in(datetime.timedelta(hours=1))!r}}}))\n")
    config = tmp_path / "config"
    config.write_text(f"[profile helper]\ncredential_process = {sys.executable} '{helper}'\n"
                      f"[profile broken]\ncredential_process = {sys.executable} -c 'raise SystemExit(\"expired\")'\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    store = insitubatch.store(DEMO, endpoint=moto_auth.endpoint, profile="helper")
    assert store.credentials_source == "credential_process of profile 'helper'"
    assert store.read("zarr.json") == (demo_dirs[0] / "zarr.json").read_bytes()
    with pytest.raises(insitubatch.StoreError, match="exited with status 1: expired"):
        insitubatch.store(DEMO, endpoint=moto_auth.endpoint, profile="broken")


def test_role_profile_assumes_the_role_with_its_source_profile(moto_auth, monkeypatch, demo_dirs, tmp_path):
    creds, config = tmp_path / "credentials", tmp_path / "config"
    creds.write_text(f"[base]\naws_access_key_id = {moto_auth.access_key_id}\n"
                     f"aws_secret_access_key = {moto_auth.secret_access_key}\n")
    config.write_text(f"[profile ml]\nrole_arn = {ROLE_ARN}\nsource_profile = base\nrole_session_name = job-7\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", moto_auth.endpoint)
    with FaultProxy(moto_auth.endpoint) as proxy:  # moto verifies the signed AssumeRole too
        store = insitubatch.store(DEMO, endpoint=proxy.url, profile="ml")
        assert store.credentials_source == f"role {ROLE_ARN} (STS {moto_auth.endpoint})"
        assert store.read("zarr.json") == (demo_dirs[0] / "zarr.json").read_bytes()
        auth = [r["headers"].get("Authorization", "") for r in proxy.requests]
    assert auth and all("Credential=ASIA" in a for a in auth)  # the role's keys, not the base user's
    assert all(moto_auth.access_key_id not in a for a in auth)


def test_unreachable_instance_metadata_explains_every_source(monkeypatch):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "false")
    monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", f"http://127.0.0.1:{port}")
    with pytest.raises(insitubatch.InSituError) as info:
        insitubatch.store(DEMO)
    message = str(info.value)
    assert "no AWS credentials found" in message and "skip_signature=True" in message
    assert f"instance metadata http://127.0.0.1:{port}" in message
