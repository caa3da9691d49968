"""A throwaway certificate authority for TLS tests: a self-signed CA, a 127.0.0.1 server
certificate it signed, and the CA in the forms the native transport accepts (a PEM file, and
a hashed directory for SSL_CERT_DIR). Made with the openssl CLI; tests skip without it."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path

from servers import RangeServer


@dataclass
class TestCa:
    ca_pem: Path  # the CA certificate (what a client trusts)
    hashed_dir: Path  # a directory holding it under its subject hash (SSL_CERT_DIR)
    server_cert: Path
    server_key: Path


def openssl_available() -> bool:
    return shutil.which("openssl") is not None


def make_test_ca(directory: Path) -> TestCa:
    def run(*args: str) -> str:
        return subprocess.run(["openssl", *args], check=True, capture_output=True, text=True).stdout

    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca_pem = directory / "ca.key", directory / "ca.pem"
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=insitubatch test CA",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        "-keyout", str(ca_key), "-out", str(ca_pem))
    key, csr, cert = directory / "server.key", directory / "server.csr", directory / "server.pem"
    run("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out", str(csr))
    ext = directory / "server.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n")
    run("x509", "-req", "-in", str(csr), "-CA", str(ca_pem), "-CAkey", str(ca_key), "-CAcreateserial",
        "-days", "2", "-extfile", str(ext), "-out", str(cert))
    hashed = directory / "hashed"
    hashed.mkdir(exist_ok=True)
    subject_hash = run("x509", "-hash", "-noout", "-in", str(ca_pem)).strip()
    shutil.copy(ca_pem, hashed / f"{subject_hash}.0")
    return TestCa(ca_pem, hashed, cert, key)


def https_range_server(root: Path, ca: TestCa) -> RangeServer:
    """A RangeServer over ``root`` speaking HTTPS with the CA's server certificate."""
    server = RangeServer(root)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(ca.server_cert, ca.server_key)
    server.httpd.socket = context.wrap_socket(server.httpd.socket, server_side=True)
    server.url = f"https://127.0.0.1:{server.port}"
    return server
