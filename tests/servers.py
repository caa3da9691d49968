"""Loopback servers for the cloud-store tests.

* ``RangeServer``: serves a directory over HTTP/1.1 (keep-alive) with GET/HEAD, single
  byte ranges (``a-b``, ``a-``, ``-n``), 404 and 416, optionally demanding a header.
* The Google Cloud Storage and Azure Blob Storage stand-ins live in ``cloud_mimics``.
* ``FaultProxy``: an HTTP proxy in front of any of them that injects faults per request:
  latency, 503 bursts, connection resets mid-body, truncated bodies, short 206 replies,
  short 200 replies (a consistent Content-Length), slow trickles, hangs, and replies lost
  after the server acted. A ``FaultPlan`` says which request gets which fault.
* ``BlackHole``: a port that listens but never accepts (its backlog is full), so a connect
  to it neither succeeds nor is refused: what a dead or firewalled endpoint looks like.

Every server binds 127.0.0.1 on a free port, runs in daemon threads and stops on
``close()`` (they are context managers).
"""

from __future__ import annotations

import http.client
import os
import re
import socket
import struct
import threading
import time
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

_RANGE_RE = re.compile(r"^bytes=(\d*)-(\d*)$")


class _BacklogHTTPServer(ThreadingHTTPServer):
    # socketserver listens with a backlog of 5: a client opening dozens of connections at once
    # (the stores warm 32 while the metadata is read) would see SYNs dropped and retried 1 s later.
    request_queue_size = 256


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
        self.httpd = _BacklogHTTPServer(("127.0.0.1", self.port), self._handler)
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


# -- fault injection ------------------------------------------------------------------------

FAULTS = ("503", "429", "500", "reset", "truncate", "short206", "short200", "trickle", "hang", "lost_reply")


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
        if fault == "lost_reply":  # the server acts on the request, but its reply never arrives
            self._forward()
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


__all__ = ["FAULTS", "BlackHole", "FaultPlan", "FaultProxy", "RangeServer", "serve_file_bytes"]
