"""pytest fixtures shared by the cloud-store tests (a plugin: tests/conftest.py loads it).

Servers run on 127.0.0.1 for the whole session: a Range HTTP server, moto's S3 server
(ThreadedMotoServer) holding the demo store uploaded with boto3, and the GCS mimic.
``aws_env`` isolates every test from the developer's AWS/GCS environment and files.
"""

from __future__ import annotations

import json
import logging
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from cloud_data import make_demo_store
from cloud_mimics import AzureMimic, GcsMimic
from servers import RangeServer

# The services (moto's backend is process-global) exist once per session.
_SESSION: dict[str, object] = {}


def _once(request, key: str, make):
    """The session's single instance of ``key``, made (and its cleanup registered) once."""
    if key not in _SESSION:
        value, cleanup = make()
        _SESSION[key] = value
        if cleanup is not None:
            request.config.add_cleanup(cleanup)
    return _SESSION[key]


BUCKET = "zarr-data"
PUBLIC_BUCKET = "public-data"  # anonymous GetObject/ListBucket via a bucket policy
MANY_KEYS = 1005  # more than one ListObjectsV2 page (1000)


@pytest.fixture(scope="session")
def demo_dirs(request, tmp_path_factory):
    """(consolidated, unconsolidated) copies of the demo store, side by side."""
    def make():
        base = tmp_path_factory.mktemp("cloud")
        return (make_demo_store(base / "demo.zarr"),
                make_demo_store(base / "plain.zarr", consolidated=False)), None
    return _once(request, "demo_dirs", make)


@pytest.fixture(scope="session")
def http_server(request, demo_dirs):
    def make():
        srv = RangeServer(demo_dirs[0].parent)
        return srv, srv.close
    return _once(request, "http_server", make)


@pytest.fixture(autouse=True)
def aws_env(monkeypatch, tmp_path):
    """No ambient credentials, regions, profiles or endpoints leak into a test, and no
    metadata service is asked."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN",
                 "AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION",
                 "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL_STS", "AWS_WEB_IDENTITY_TOKEN_FILE",
                 "AWS_ROLE_ARN", "AWS_ROLE_SESSION_NAME", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                 "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_AUTHORIZATION_TOKEN",
                 "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", "AWS_EC2_METADATA_SERVICE_ENDPOINT",
                 "GOOGLE_OAUTH_ACCESS_TOKEN", "STORAGE_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS",
                 "GOOGLE_SERVICE_ACCOUNT", "GOOGLE_SERVICE_ACCOUNT_PATH", "GOOGLE_SERVICE_ACCOUNT_KEY",
                 "GCE_METADATA_HOST"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "no-gcloud"))  # no gcloud login leaks in
    # Never ask a real instance metadata service (CI may run on EC2); tests that exercise
    # it point AWS_EC2_METADATA_SERVICE_ENDPOINT at a loopback server and lift this.
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("NO_GCE_CHECK", "true")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))


def _upload_dir(client, root: Path, prefix: str, bucket: str = BUCKET) -> None:
    files = [p for p in root.rglob("*") if p.is_file()]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda p: client.put_object(Bucket=bucket, Key=f"{prefix}/{p.relative_to(root).as_posix()}",
                                                  Body=p.read_bytes()), files))


class Moto:
    """The running moto server: endpoint, an IAM user's real keys, STS session keys."""

    def __init__(self, endpoint: str, key: dict, session: dict) -> None:
        self.endpoint = endpoint
        self.access_key_id = key["AccessKeyId"]
        self.secret_access_key = key["SecretAccessKey"]
        self.session = session  # AccessKeyId, SecretAccessKey, SessionToken

    def enforce_auth(self, on: bool) -> None:
        """moto verifies SigV4 signatures and IAM policies only while this is on."""
        from moto import settings
        from moto.core.responses import ActionAuthenticatorMixin

        settings.INITIAL_NO_AUTH_ACTION_COUNT = 0 if on else float("inf")
        ActionAuthenticatorMixin.request_count = 0


@pytest.fixture(scope="session")
def moto(request, demo_dirs):
    boto3 = pytest.importorskip("boto3")
    server_mod = pytest.importorskip("moto.server")
    return _once(request, "moto", lambda: _start_moto(boto3, server_mod, demo_dirs))


def _start_moto(boto3, server_mod, demo_dirs):
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    admin = dict(endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="admin",
                 aws_secret_access_key="admin")
    s3 = boto3.client("s3", **admin)
    s3.create_bucket(Bucket=BUCKET)
    _upload_dir(s3, demo_dirs[0], "stores/demo.zarr")
    _upload_dir(s3, demo_dirs[1], "stores/plain.zarr")
    s3.create_bucket(Bucket=PUBLIC_BUCKET)
    _upload_dir(s3, demo_dirs[0], "stores/demo.zarr", bucket=PUBLIC_BUCKET)
    s3.put_bucket_policy(Bucket=PUBLIC_BUCKET, Policy=json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Principal": "*", "Action": ["s3:GetObject", "s3:ListBucket"],
         "Resource": [f"arn:aws:s3:::{PUBLIC_BUCKET}", f"arn:aws:s3:::{PUBLIC_BUCKET}/*"]}]}))
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda i: s3.put_object(Bucket=BUCKET, Key=f"many/k{i:05d}", Body=b"%d" % i),
                      range(MANY_KEYS)))
    iam = boto3.client("iam", **admin)
    allow_all = json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": ["s3:*", "sts:*"], "Resource": "*"}]})
    iam.create_user(UserName="reader")
    iam.put_user_policy(UserName="reader", PolicyName="all", PolicyDocument=allow_all)
    key = iam.create_access_key(UserName="reader")["AccessKey"]
    iam.create_role(RoleName="reader-role", AssumeRolePolicyDocument=json.dumps({
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "sts:AssumeRole"}]}))
    iam.put_role_policy(RoleName="reader-role", PolicyName="all", PolicyDocument=allow_all)
    sts = boto3.client("sts", endpoint_url=endpoint, region_name="us-east-1",
                       aws_access_key_id=key["AccessKeyId"], aws_secret_access_key=key["SecretAccessKey"])
    session = sts.assume_role(RoleArn="arn:aws:iam::123456789012:role/reader-role",
                              RoleSessionName="insitubatch-test")["Credentials"]
    state = Moto(endpoint, key, session)

    def stop() -> None:
        state.enforce_auth(False)
        server.stop()
    return state, stop


@pytest.fixture
def moto_auth(moto):
    """moto with signature verification on for one test."""
    moto.enforce_auth(True)
    yield moto
    moto.enforce_auth(False)


GCS_TOKEN = "ya29.gcs-test-token-SECRET"


@pytest.fixture(scope="session")
def gcs(request, demo_dirs, tmp_path_factory):
    """The GCS mimic: bucket 'zarr-data' (demo stores under stores/) needs GCS_TOKEN; bucket
    'public-data' (the same files) is anonymous."""
    def make():
        bucket = tmp_path_factory.mktemp("gcs-bucket")
        shutil.copytree(demo_dirs[0], bucket / "stores" / "demo.zarr")
        shutil.copytree(demo_dirs[1], bucket / "stores" / "plain.zarr")
        private = GcsMimic({BUCKET: bucket}, token=GCS_TOKEN, page_size=4)
        public = GcsMimic({"public-data": bucket}, token=None, page_size=4)

        def stop() -> None:
            private.close()
            public.close()
        return (private, public), stop
    return _once(request, "gcs", make)


AZURE_ACCOUNT = "insitutest"
AZURE_KEY = "aW5zaXR1YmF0Y2gtYXp1cmUtdGVzdC1hY2NvdW50LWtleS0zMmI="  # base64 of a test key


@pytest.fixture(scope="session")
def azure_blob(request, demo_dirs, tmp_path_factory):
    """The Azure Blob mimic: container 'data' (demo stores under stores/), SharedKey with
    AZURE_KEY for account AZURE_ACCOUNT, every signature checked by azure-storage-blob."""
    pytest.importorskip("azure.storage.blob")

    def make():
        root = tmp_path_factory.mktemp("azure-container")
        shutil.copytree(demo_dirs[0], root / "stores" / "demo.zarr")
        shutil.copytree(demo_dirs[1], root / "stores" / "plain.zarr")
        server = AzureMimic({"data": root}, AZURE_ACCOUNT, account_key=AZURE_KEY, page_size=4)
        return server, server.close
    return _once(request, "azure_blob", make)


__all__ = ["AZURE_ACCOUNT", "AZURE_KEY", "azure_blob", "BUCKET", "GCS_TOKEN", "MANY_KEYS", "PUBLIC_BUCKET", "Moto", "aws_env", "demo_dirs", "gcs",
           "http_server", "moto", "moto_auth"]
