"""Loopback servers for the cloud-store tests.

* ``RangeServer``: serves a directory over HTTP/1.1 (keep-alive) with GET/HEAD, single
  byte ranges (``a-b``, ``a-``, ``-n``), 404 and 416, optionally demanding a header.
* ``GcsMimic``: the two Google Cloud Storage endpoints the GCS store uses -- XML API object
  reads (``/bucket/object``) and JSON API listing (``/storage/v1/b/bucket/o``, paginated) --
  over a local directory, with an optional bearer token. (No GCS emulator installs from
  PyPI or Debian, so this stands in for one.)
* ``AzureMimic``: Azure Blob Storage's Get Blob (``x-ms-range``) and List Blobs (XML,
  NextMarker pages) over local directories, verifying SharedKey signatures with the
  azure-storage-blob SDK, SAS signatures and bearer tokens, plus the Entra ID and managed
  identity token endpoints. (Azurite needs Node, which this machine lacks.)
* ``FaultProxy``: an HTTP proxy in front of either that injects faults per request:
  latency, 503 bursts, connection resets mid-body, truncated bodies, short 206 replies,
  short 200 replies (a consistent Content-Length), slow trickles and hangs. A ``FaultPlan``
  says which request gets which fault.
* ``BlackHole``: a port that listens but never accepts (its backlog is full), so a connect
  to it neither succeeds nor is refused: what a dead or firewalled endpoint looks like.

Every server binds 127.0.0.1 on a free port, runs in daemon threads and stops on
``close()`` (they are context managers).
"""

from __future__ import annotations

import http.client
import json
import os
import re
import socket
import struct
import threading
import time
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

_RANGE_RE = re.compile(r"^bytes=(\d*)-(\d*)$")


class _Server:
    """Runs a ThreadingHTTPServer on 127.0.0.1:<free port> in a daemon thread."""

    def __init__(self, handler_cls: type[BaseHTTPRequestHandler]) -> None:
        self.requests: list[dict] = []
        self.connections: set[socket.socket] = set()  # open client connections (keep-alive)
        self._lock = threading.Lock()
        self._handler = type("Handler", (handler_cls,), {"owner": self})
        self.port = 0
        self._serve()
        self.url = f"http://127.0.0.1:{self.port}"

    def _serve(self) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", self.port), self._handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    def restart(self, down_seconds: float) -> threading.Thread:
        """Stops serving (connections are refused) and serves again on the same port after
        ``down_seconds``, in the background: a server restart. Returns the thread doing it."""
        def bounce() -> None:
            self.httpd.shutdown()
            self.httpd.server_close()
            with self._lock:  # a restarted process keeps no connection open
                for conn in list(self.connections):
                    try:
                        conn.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
            time.sleep(down_seconds)
            self._serve()

        thread = threading.Thread(target=bounce, daemon=True)
        thread.start()
        return thread

    def record(self, handler: BaseHTTPRequestHandler) -> None:
        with self._lock:
            self.requests.append({"method": handler.command, "path": handler.path,
                                  "headers": dict(handler.headers.items()),
                                  "client": handler.client_address})

    def clear_log(self) -> None:
        with self._lock:
            self.requests.clear()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _QuietHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, so the client can reuse connections
    disable_nagle_algorithm = True  # headers and body go out in separate writes
    owner: "_Server"

    def setup(self) -> None:
        super().setup()
        with self.owner._lock:
            self.owner.connections.add(self.connection)

    def finish(self) -> None:
        with self.owner._lock:
            self.owner.connections.discard(self.connection)
        super().finish()

    def log_message(self, *args) -> None:  # keep pytest output clean
        pass

    def send_body(self, status: int, body: bytes, headers: dict[str, str] | None = None,
                  head: bool = False) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)


def serve_file_bytes(handler: _QuietHandler, data: bytes, head: bool) -> None:
    """Answers GET/HEAD for one object with Range support (single ranges)."""
    size = len(data)
    spec = handler.headers.get("Range")
    if spec is None:
        handler.send_body(200, data, {"Accept-Ranges": "bytes"}, head)
        return
    m = _RANGE_RE.match(spec.strip())
    if not m or (m.group(1) == "" and m.group(2) == ""):
        handler.send_body(400, b"bad range")
        return
    first, last = m.group(1), m.group(2)
    if first == "":  # suffix: the last n bytes (all of a shorter object)
        n = int(last)
        if n == 0:
            handler.send_body(416, b"", {"Content-Range": f"bytes */{size}"}, head)
            return
        start, end = max(0, size - n), size - 1
    else:
        start = int(first)
        end = size - 1 if last == "" else min(int(last), size - 1)
        if start >= size or (last != "" and int(last) < start):
            handler.send_body(416, b"", {"Content-Range": f"bytes */{size}"}, head)
            return
    handler.send_body(206, data[start:end + 1], {"Content-Range": f"bytes {start}-{end}/{size}"}, head)


class _RangeHandler(_QuietHandler):
    owner: "RangeServer"

    def _serve(self, head: bool) -> None:
        self.owner.record(self)
        for name, value in self.owner.required_headers.items():
            if self.headers.get(name) != value:
                self.send_body(401, b"missing or wrong credentials", {}, head)
                return
        path = unquote(urlsplit(self.path).path)
        target = (self.owner.root / path.lstrip("/")).resolve()
        if self.owner.root not in target.parents and target != self.owner.root:
            self.send_body(403, b"outside the root", {}, head)
            return
        if not target.is_file():
            self.send_body(404, b"not found", {}, head)
            return
        serve_file_bytes(self, target.read_bytes(), head)

    def do_GET(self) -> None:
        self._serve(head=False)

    def do_HEAD(self) -> None:
        self._serve(head=True)


class RangeServer(_Server):
    """Serves ``root`` over HTTP with Range support."""

    def __init__(self, root: str | os.PathLike[str], required_headers: dict[str, str] | None = None):
        self.root = Path(root).resolve()
        self.required_headers = dict(required_headers or {})
        super().__init__(_RangeHandler)


class _GcsHandler(_QuietHandler):
    owner: "GcsMimic"

    def _error(self, status: int, message: str, head: bool = False) -> None:
        body = json.dumps({"error": {"code": status, "message": message}}).encode()
        self.send_body(status, body, {"Content-Type": "application/json"}, head)

    def _serve(self, head: bool) -> None:
        self.owner.record(self)
        token = self.owner.token
        if token is not None and self.headers.get("Authorization") != f"Bearer {token}":
            self._error(401, "Invalid Credentials", head)
            return
        parts = urlsplit(self.path)
        path = parts.path
        if path.startswith("/storage/v1/b/"):
            self._list(path, parse_qs(parts.query), head)
            return
        bucket, _, name = path.lstrip("/").partition("/")
        bucket_dir = self.owner.buckets.get(unquote(bucket))
        if bucket_dir is None:
            self._error(404, "The specified bucket does not exist.", head)
            return
        target = (bucket_dir / unquote(name)).resolve()
        if bucket_dir not in target.parents or not target.is_file():
            self.send_body(404, b"<Error><Code>NoSuchKey</Code><Message>No such object</Message></Error>",
                           {"Content-Type": "application/xml"}, head)
            return
        serve_file_bytes(self, target.read_bytes(), head)

    def _list(self, path: str, query: dict[str, list[str]], head: bool) -> None:
        m = re.match(r"^/storage/v1/b/([^/]+)/o$", path)
        if not m:
            self._error(400, "bad listing path", head)
            return
        bucket_dir = self.owner.buckets.get(unquote(m.group(1)))
        if bucket_dir is None:
            self._error(404, "The specified bucket does not exist.", head)
            return
        prefix = query.get("prefix", [""])[0]
        names = sorted(p.relative_to(bucket_dir).as_posix() for p in bucket_dir.rglob("*") if p.is_file())
        names = [n for n in names if n.startswith(prefix)]
        start = int(query.get("pageToken", ["0"])[0])
        page = names[start:start + self.owner.page_size]
        reply: dict = {"kind": "storage#objects", "items": [{"name": n} for n in page]}
        if start + self.owner.page_size < len(names):
            reply["nextPageToken"] = str(start + self.owner.page_size)
        self.send_body(200, json.dumps(reply).encode(), {"Content-Type": "application/json"}, head)

    def do_GET(self) -> None:
        self._serve(head=False)

    def do_HEAD(self) -> None:
        self._serve(head=True)


class GcsMimic(_Server):
    """GCS XML reads + JSON listing over local directories (``buckets``: name -> dir)."""

    def __init__(self, buckets: dict[str, str | os.PathLike[str]], token: str | None = None,
                 page_size: int = 3):
        self.buckets = {name: Path(d).resolve() for name, d in buckets.items()}
        self.token = token
        self.page_size = page_size
        super().__init__(_GcsHandler)


class _AzureHandler(_QuietHandler):
    owner: "AzureMimic"

    def _error(self, status: int, code: str, message: str, head: bool = False) -> None:
        body = f"<?xml version=\"1.0\"?><Error><Code>{code}</Code><Message>{message}</Message></Error>".encode()
        self.send_body(status, body, {"Content-Type": "application/xml"}, head)

    def _authorized(self, parts, head: bool) -> bool:
        """Checks the request's credentials as Azure would: a SharedKey signature recomputed
        by azure-storage-blob's own policy, a SAS signature, or a bearer token we issued."""
        owner = self.owner
        auth = self.headers.get("Authorization", "")
        query = parse_qs(parts.query)
        if auth.startswith("SharedKey ") and owner.account_key:
            from azure.core.pipeline import PipelineContext, PipelineRequest
            from azure.core.pipeline.transport import HttpRequest
            from azure.storage.blob._shared.authentication import SharedKeyCredentialPolicy

            headers = {k: v for k, v in self.headers.items() if k.lower() != "authorization"}
            request = HttpRequest(self.command, f"http://{self.headers.get('Host')}{self.path}", headers=headers)
            SharedKeyCredentialPolicy(owner.account, owner.account_key).on_request(
                PipelineRequest(request, PipelineContext(None)))
            if request.headers["Authorization"] == auth:
                return True
            self._error(403, "AuthenticationFailed", "Server failed to authenticate the request.", head)
            return False
        if auth.startswith("Bearer ") and auth[7:] in owner.issued_tokens:
            return True
        if owner.sas_signature is not None and query.get("sig") == [owner.sas_signature]:
            return True
        if owner.anonymous and not auth:
            return True
        self._error(403, "AuthenticationFailed", "Server failed to authenticate the request.", head)
        return False

    def _token(self, parts) -> None:
        """Entra ID's token endpoint (client secret or federated assertion) and the managed
        identity endpoint, as the store's credential exchanges call them."""
        owner = self.owner
        with owner._lock:
            owner.token_requests.append({"method": self.command, "path": parts.path,
                                         "query": parse_qs(parts.query), "headers": dict(self.headers.items())})
        if parts.path == "/metadata/identity/oauth2/token":
            query = parse_qs(parts.query)
            if self.headers.get("Metadata") != "true" or query.get("resource") != ["https://storage.azure.com"]:
                self.send_body(400, b'{"error": "invalid_request"}')
                return
            reply = {"access_token": owner.issue(), "expires_on": str(int(time.time()) + owner.token_lifetime),
                     "resource": "https://storage.azure.com", "token_type": "Bearer"}
            self.send_body(200, json.dumps(reply).encode(), {"Content-Type": "application/json"})
            return
        form = parse_qs(self.rfile.read(int(self.headers.get("Content-Length", "0"))).decode())
        ok = (parts.path == f"/{owner.tenant_id}/oauth2/v2.0/token"
              and form.get("client_id") == [owner.client_id]
              and form.get("scope") == ["https://storage.azure.com/.default"]
              and form.get("grant_type") == ["client_credentials"]
              and (form.get("client_secret") == [owner.client_secret]
                   or form.get("client_assertion") == [owner.federated_token]))
        if not ok:
            self.send_body(401, json.dumps({"error": "invalid_client",
                                            "error_description": "AADSTS7000215: Invalid client secret"}).encode(),
                           {"Content-Type": "application/json"})
            return
        reply = {"access_token": owner.issue(), "expires_in": owner.token_lifetime, "token_type": "Bearer"}
        self.send_body(200, json.dumps(reply).encode(), {"Content-Type": "application/json"})

    def _serve(self, head: bool) -> None:
        parts = urlsplit(self.path)
        if parts.path.endswith("/oauth2/token") or parts.path.endswith("/oauth2/v2.0/token"):
            self._token(parts)
            return
        self.owner.record(self)
        if not self._authorized(parts, head):
            return
        segments = parts.path.lstrip("/").split("/", 2 if self.owner.account_in_path else 1)
        if self.owner.account_in_path:
            if segments[0] != self.owner.account:
                self._error(400, "InvalidUri", "wrong account", head)
                return
            segments = segments[1:]
        container, name = segments[0], unquote(segments[1]) if len(segments) > 1 else ""
        root = self.owner.containers.get(container)
        if root is None:
            self._error(404, "ContainerNotFound", "The specified container does not exist.", head)
            return
        query = parse_qs(parts.query)
        if query.get("comp") == ["list"] and query.get("restype") == ["container"]:
            self._list(root, query, head)
            return
        target = (root / name).resolve()
        if root not in target.parents or not target.is_file():
            self._error(404, "BlobNotFound", "The specified blob does not exist.", head)
            return
        if "x-ms-range" in self.headers:  # Azure's own range header (it wins over Range)
            del self.headers["Range"]
            self.headers["Range"] = self.headers["x-ms-range"]
        serve_file_bytes(self, target.read_bytes(), head)

    def _list(self, root: Path, query: dict[str, list[str]], head: bool) -> None:
        from xml.sax.saxutils import escape

        prefix = query.get("prefix", [""])[0]
        names = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
        names = [n for n in names if n.startswith(prefix)]
        start = int(query.get("marker", ["0"])[0])
        page = names[start:start + self.owner.page_size]
        blobs = "".join(f"<Blob><Name>{escape(n)}</Name><Properties><Content-Length>{(root / n).stat().st_size}"
                        "</Content-Length></Properties></Blob>" for n in page)
        marker = str(start + self.owner.page_size) if start + self.owner.page_size < len(names) else ""
        body = (f'<?xml version="1.0" encoding="utf-8"?><EnumerationResults ContainerName="c">'
                f"<Prefix>{escape(prefix)}</Prefix><Blobs>{blobs}</Blobs><NextMarker>{marker}</NextMarker>"
                "</EnumerationResults>").encode()
        self.send_body(200, body, {"Content-Type": "application/xml"}, head)

    def do_GET(self) -> None:
        self._serve(head=False)

    def do_HEAD(self) -> None:
        self._serve(head=True)

    def do_POST(self) -> None:
        self._token(urlsplit(self.path))


class AzureMimic(_Server):
    """Azure Blob Storage's Get Blob and List Blobs over local directories (``containers``:
    name -> dir), checking SharedKey signatures with azure-storage-blob, SAS signatures and
    bearer tokens; plus an Entra ID token endpoint (``/<tenant>/oauth2/v2.0/token``) and a
    managed identity endpoint (``/metadata/identity/oauth2/token``) that issue the tokens.
    ``account_in_path``: the emulator's URL layout (``/account/container/blob``)."""

    def __init__(self, containers: dict[str, str | os.PathLike[str]], account: str, account_key: str | None = None,
                 sas_signature: str | None = None, anonymous: bool = False, account_in_path: bool = False,
                 page_size: int = 3, client_id: str = "", client_secret: str = "", tenant_id: str = "",
                 federated_token: str = "", token_lifetime: int = 3600):
        self.containers = {name: Path(d).resolve() for name, d in containers.items()}
        self.account, self.account_key = account, account_key
        self.sas_signature, self.anonymous, self.account_in_path = sas_signature, anonymous, account_in_path
        self.page_size = page_size
        self.client_id, self.client_secret, self.tenant_id = client_id, client_secret, tenant_id
        self.federated_token, self.token_lifetime = federated_token, token_lifetime
        self.issued_tokens: set[str] = set()
        self.token_requests: list[dict] = []
        super().__init__(_AzureHandler)

    def issue(self) -> str:
        with self._lock:
            token = f"eyJ.azure-token-{len(self.issued_tokens)}"
            self.issued_tokens.add(token)
            return token


# -- fault injection ------------------------------------------------------------------------

FAULTS = ("503", "429", "500", "reset", "truncate", "short206", "short200", "trickle", "hang")


class FaultPlan:
    """Which request gets which fault. Thread-safe; change it between test steps.

    * ``per_path(fault, times)`` / ``per_path([f1, f2, ...])``: every distinct path first
      fails that way, then passes -- so every object read must recover through retries.
    * ``always(fault)``: every request fails (exhausted-retry tests).
    * ``sequence([...])``: the next requests get these faults in order (None = pass).
    * ``latency``: seconds added to every request; ``trickle_delay``: seconds between the
      bytes of a trickled body.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.latency = 0.0
        self.trickle_delay = 0.05
        self._per_path: list[str] | None = None
        self._always: str | None = None
        self._sequence: list[str | None] = []
        self._seen: dict[str, int] = defaultdict(int)
        self.injected: dict[str, int] = defaultdict(int)

    def per_path(self, fault: str | list[str], times: int = 1) -> "FaultPlan":
        """Each path first gets ``fault`` ``times`` times, or the faults of a list in order."""
        faults = [fault] * times if isinstance(fault, str) else list(fault)
        assert all(f in FAULTS for f in faults), faults
        with self._lock:
            self._per_path, self._seen = faults, defaultdict(int)
        return self

    def always(self, fault: str | None) -> "FaultPlan":
        assert fault is None or fault in FAULTS, fault
        with self._lock:
            self._always = fault
        return self

    def sequence(self, faults: list[str | None]) -> "FaultPlan":
        with self._lock:
            self._sequence = list(faults)
        return self

    def clear(self) -> "FaultPlan":
        with self._lock:
            self._per_path, self._always, self._sequence = None, None, []
            self._seen = defaultdict(int)
            self.latency = 0.0
        return self

    def next_fault(self, path: str) -> str | None:
        with self._lock:
            fault = None
            if self._always is not None:
                fault = self._always
            elif self._sequence:
                fault = self._sequence.pop(0)
            elif self._per_path is not None:
                if self._seen[path] < len(self._per_path):
                    fault = self._per_path[self._seen[path]]
                self._seen[path] += 1
            if fault is not None:
                self.injected[fault] += 1
            return fault


class _ProxyHandler(_QuietHandler):
    owner: "FaultProxy"

    def _forward(self) -> tuple[int, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.owner.upstream_port, timeout=30)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in ("connection",)}
            conn.request(self.command, self.path, body=self._request_body or None, headers=headers)
            resp = conn.getresponse()
            body = resp.read()
            return resp.status, [(k, v) for k, v in resp.getheaders()
                                 if k.lower() not in ("connection", "transfer-encoding", "content-length")], body
        finally:
            conn.close()

    def _send_head(self, status: int, headers: list[tuple[str, str]], length: int) -> None:
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(length))
        self.end_headers()
        self.wfile.flush()

    def _reset(self) -> None:
        """Aborts the connection with a TCP RST (SO_LINGER 0), as a crashed peer would."""
        self.close_connection = True
        try:
            self.wfile.flush()
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
        except OSError:
            pass

    def _handle(self) -> None:
        # A PUT/POST body is read first: a fault answered early still drains it, so the
        # connection stays usable for the client's retry.
        self._request_body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.owner.record(self)
        plan = self.owner.plan
        if plan.latency:
            time.sleep(plan.latency)
        fault = plan.next_fault(urlsplit(self.path).path)
        head = self.command == "HEAD"
        if fault in ("503", "429", "500"):
            self.send_body(int(fault), b"<Error><Code>SlowDown</Code><Message>injected</Message></Error>",
                           {"Retry-After": "0"}, head)
            return
        if fault == "hang":
            time.sleep(self.owner.hang_seconds)
            self._reset()
            return
        status, headers, body = self._forward()
        if head or fault is None or len(body) < 2 or status >= 300:
            self._send_head(status, headers, len(body))
            if not head:
                self.wfile.write(body)
            return
        half = len(body) // 2
        if fault == "reset":
            self._send_head(status, headers, len(body))
            self.wfile.write(body[:half])
            self._reset()
        elif fault == "truncate":  # a clean close (FIN) before Content-Length bytes arrived
            self._send_head(status, headers, len(body))
            self.wfile.write(body[:half])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
        elif fault == "short206":  # self-consistent, but shorter than the range asked for
            if status == 206:
                content_range = dict((k.lower(), v) for k, v in headers)["content-range"]
                m = re.match(r"bytes (\d+)-(\d+)/(\d+|\*)", content_range)
                first, total = int(m.group(1)), m.group(3)
                cut = body[:half]
                headers = [(k, v) for k, v in headers if k.lower() != "content-range"]
                headers.append(("Content-Range", f"bytes {first}-{first + len(cut) - 1}/{total}"))
                self._send_head(206, headers, len(cut))
                self.wfile.write(cut)
            else:  # a whole-object reply: truncate instead
                self._send_head(status, headers, len(body))
                self.wfile.write(body[:half])
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
        elif fault == "short200":  # self-consistent 200 whose body is cut: only decoding notices
            self._send_head(200, [(k, v) for k, v in headers if k.lower() != "content-range"],
                            half)
            self.wfile.write(body[:half])
        elif fault == "trickle":
            self._send_head(status, headers, len(body))
            try:
                for i in range(len(body)):
                    self.wfile.write(body[i:i + 1])
                    self.wfile.flush()
                    time.sleep(plan.trickle_delay)
            except OSError:  # the client gave up (its timeout): expected
                self.close_connection = True

    def do_GET(self) -> None:
        self._handle()

    def do_HEAD(self) -> None:
        self._handle()

    def do_PUT(self) -> None:  # writes (S3 PutObject, multipart parts)
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def do_DELETE(self) -> None:
        self._handle()


class FaultProxy(_Server):
    """Forwards to ``upstream_url`` (http://127.0.0.1:<port>), injecting ``plan``'s faults."""

    def __init__(self, upstream_url: str, plan: FaultPlan | None = None, hang_seconds: float = 5.0):
        self.upstream_port = urlsplit(upstream_url).port
        self.plan = plan or FaultPlan()
        self.hang_seconds = hang_seconds
        super().__init__(_ProxyHandler)


class BlackHole:
    """127.0.0.1:<port> listening with a full accept queue that nobody drains: a connect
    there hangs (SYNs are dropped) until the client's own connect timeout."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(0)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        # Fill the queue (Linux admits backlog + 1) so later handshakes never complete.
        self._fillers = []
        for _ in range(4):
            c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            c.setblocking(False)
            try:
                c.connect(("127.0.0.1", self.port))
            except BlockingIOError:
                pass
            self._fillers.append(c)
        time.sleep(0.1)

    def close(self) -> None:
        for c in self._fillers:
            c.close()
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


__all__ = ["FAULTS", "BlackHole", "FaultPlan", "FaultProxy", "GcsMimic", "RangeServer",
           "serve_file_bytes"]
