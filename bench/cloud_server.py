"""A loopback HTTP server that behaves like a distant object store: it serves the files under
a folder (GET with Range, HEAD; keep-alive HTTP/1.1) and answers each request `latency` late,
the first request on a new connection `connect` later still (the handshake round trips a
real link charges), and, with `rate`, no faster than a link of that many bytes per second
(responses queue for it in arrival order, each sent whole when its last byte would have
arrived). Network emulation (netem) is not available in this kernel, so the delays are the
server's; its own CPU is measured (getrusage) and reported, so a reader can see what it took
from the client on the same cores.

One thread, one epoll loop, bodies sent with sendfile from the page cache: about as little
CPU per request as Python allows. S3's ListObjectsV2 (``GET /<bucket>?list-type=2``,
path-style: a folder under the root is a bucket) is answered too, with ``prefix``,
``delimiter``, ``max-keys`` (at most 1000) and continuation tokens, delayed like any
request: what a client that lists (a hierarchy without consolidated metadata) pays in
round trips. It runs in its own process:

    python bench/cloud_server.py ROOT [--latency-ms 20] [--connect-ms 20] [--rate-mb-s 0]

prints its port on the first line of stdout, and serves until killed. Two control paths,
never delayed: ``GET /__server__/stats`` (JSON: CPU seconds, requests, connections, bytes,
requests in flight over time) and ``GET /__server__/reset`` (zeroes them).
``CloudServer`` starts and stops one from Python.
"""

from __future__ import annotations

import argparse
import bisect
import errno
import heapq
import json
import os
import resource
import select
import signal
import socket
import subprocess
import sys
import time
from email.utils import formatdate
from urllib.parse import parse_qs, unquote
from xml.sax.saxutils import escape

LIST_PAGE = 1000  # S3's most keys per ListObjectsV2 page
OPEN_FILES = 4096  # files kept open between requests, by default: a store of 16,384 chunk files
#                    (or several stores in one run) would otherwise pass the descriptor limit
STATS_PATH = b"/__server__/stats"
RESET_PATH = b"/__server__/reset"
MAX_HEADER = 16384


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class Stats:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.t0 = time.monotonic()
        self.cpu0 = cpu_seconds()
        self.requests = 0
        self.signed = 0  # requests with an Authorization header (S3's SigV4; checked by no one)
        self.connections = 0
        self.bytes = 0
        self.sizes: list[int] = []
        # (received, answered) per request, seconds since t0: requests in flight over time.
        self.spans: list[tuple[float, float]] = []
        self.conn_of: list[int] = []
        self.paths: list[str] = []
        self.per_connection: dict[int, int] = {}

    def report(self, raw: bool = False) -> dict:
        now = time.monotonic()
        spans = sorted(self.spans)
        events = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
        level = peak = 0
        area = 0.0
        last = events[0][0] if events else 0.0
        timeline = []  # (t, requests in flight) at each change, thinned to ~2000 points
        for t, d in events:
            area += level * (t - last)
            last = t
            level += d
            peak = max(peak, level)
            timeline.append((round(t, 5), level))
        if len(timeline) > 2000:
            step = len(timeline) / 2000
            timeline = [timeline[int(i * step)] for i in range(2000)]
        busy = (events[-1][0] - events[0][0]) if events else 0.0
        sizes = sorted(self.sizes)
        return {
            "cpu_s": cpu_seconds() - self.cpu0, "wall_s": now - self.t0, "requests": self.requests,
            "signed": self.signed,
            "connections": self.connections, "bytes": self.bytes,
            "requests_per_connection_max": max(self.per_connection.values(), default=0),
            "size_median": sizes[len(sizes) // 2] if sizes else 0,
            "size_min": sizes[0] if sizes else 0, "size_max": sizes[-1] if sizes else 0,
            "inflight_peak": peak, "inflight_mean": area / busy if busy > 0 else 0.0,
            "first_request_s": spans[0][0] if spans else None,
            "last_answer_s": max((b for _, b in spans), default=None),
            "timeline": timeline,
            **({"spans": self.spans, "span_connections": self.conn_of, "span_paths": self.paths} if raw else {}),
        }


class Conn:
    __slots__ = ("sock", "fd", "inbuf", "busy", "fresh", "out", "file", "offset", "left", "id", "received", "size", "what",
                 "signed")

    def __init__(self, sock: socket.socket, cid: int) -> None:
        self.sock, self.fd, self.id = sock, sock.fileno(), cid
        self.inbuf = bytearray()
        self.busy = False  # a request is being delayed or answered (one at a time per connection)
        self.fresh = True  # no request answered yet: the first pays the connection's set-up
        self.out = b""
        self.file = -1
        self.offset = self.left = 0
        self.received = 0.0
        self.size = 0
        self.what = ""
        self.signed = False


def parse_range(value: str, size: int) -> tuple[int, int] | None:
    """(start, stop) of a single "bytes=" range within an object of `size`, else None."""
    if not value.startswith("bytes=") or "," in value:
        return None
    a, _, b = value[6:].strip().partition("-")
    if a == "":
        n = int(b)
        return (max(0, size - n), size) if n > 0 else None
    start = int(a)
    stop = min(size, int(b) + 1) if b else size
    return (start, stop) if start < stop else None


class Server:
    def __init__(self, root: str, latency: float, connect: float, rate: float, sock: socket.socket,
                 open_files: int = OPEN_FILES) -> None:
        self.root = os.path.realpath(root)
        self.open_files = open_files
        self.latency, self.connect, self.rate = latency, connect, rate
        self.listener = sock
        self.ep = select.epoll()
        self.conns: dict[int, Conn] = {}
        self.timers: list[tuple[float, int, int]] = []  # (due, seq, fd)
        self.seq = 0
        self.link_free = 0.0  # when the emulated link has sent everything queued on it
        self.stats = Stats()
        self.files: dict[str, tuple[int, int, str]] = {}  # path -> (fd, size, validators), kept open
        self.listings: dict[str, list[str]] = {}  # bucket -> its keys, sorted
        self.entries: dict[tuple[str, str], str] = {}  # (bucket, key) -> its listing's fields
        self.next_id = 0

    def open_file(self, path: str) -> tuple[int, int, str] | None:
        """(fd, size, validators): the file's ETag and Last-Modified headers, as an object
        store sends them (tensorstore's S3 driver requires the ETag)."""
        hit = self.files.get(path)
        if hit is not None:
            return hit
        if len(self.files) >= self.open_files:
            self.close_idle_files()
        full = os.path.realpath(os.path.join(self.root, path.lstrip("/")))
        if not (full == self.root or full.startswith(self.root + os.sep)) or not os.path.isfile(full):
            return None
        fd = os.open(full, os.O_RDONLY)
        st = os.fstat(fd)
        validators = (f'ETag: "{st.st_ino:x}-{st.st_size:x}-{st.st_mtime_ns:x}"\r\n'
                      f"Last-Modified: {formatdate(st.st_mtime, usegmt=True)}\r\n")
        hit = (fd, st.st_size, validators)
        self.files[path] = hit
        return hit

    def close_idle_files(self) -> None:
        """Closes every kept file no connection is sending from."""
        sending = {c.file for c in self.conns.values() if c.file >= 0}
        for path, (fd, _size, _validators) in list(self.files.items()):
            if fd not in sending:
                os.close(fd)
                del self.files[path]

    def bucket_keys(self, bucket: str) -> list[str] | None:
        """Every file under the folder `bucket` as a sorted key list (read once: the stores do
        not change while served), or None when there is no such folder."""
        hit = self.listings.get(bucket)
        if hit is None:
            base = os.path.realpath(os.path.join(self.root, bucket))
            if os.path.dirname(base) != self.root or not os.path.isdir(base):
                return None
            hit = sorted(os.path.relpath(os.path.join(d, f), base) for d, _, files in os.walk(base) for f in files)
            self.listings[bucket] = hit
            for key in hit:  # what each <Contents> says of it, as a GET's validators do
                st = os.stat(os.path.join(base, key))
                self.entries[(bucket, key)] = (
                    f"<Size>{st.st_size}</Size><ETag>&quot;{st.st_ino:x}-{st.st_size:x}-{st.st_mtime_ns:x}&quot;</ETag>"
                    f"<LastModified>{time.strftime('%Y-%m-%dT%H:%M:%S.000Z', time.gmtime(st.st_mtime))}</LastModified>")
        return hit

    def list_objects(self, bucket: str, query: str) -> bytes | None:
        """A ListObjectsV2 reply's XML (prefix, delimiter, max-keys, continuation-token)."""
        keys = self.bucket_keys(bucket)
        if keys is None:
            return None
        q = {k: v[0] for k, v in parse_qs(query, keep_blank_values=True).items()}
        prefix, delimiter = q.get("prefix", ""), q.get("delimiter", "")
        limit = max(1, min(LIST_PAGE, int(q.get("max-keys", LIST_PAGE))))
        after = q.get("continuation-token", "")
        entries: list[tuple[str, bool]] = []  # (key or common prefix, is a prefix)
        i = bisect.bisect_right(keys, after) if after else bisect.bisect_left(keys, prefix)
        truncated = False
        while i < len(keys) and keys[i].startswith(prefix):
            key = keys[i]
            cut = key.find(delimiter, len(prefix)) if delimiter else -1
            if len(entries) == limit:
                truncated = True
                break
            if cut >= 0:
                common = key[:cut + len(delimiter)]
                entries.append((common, True))
                i = bisect.bisect_left(keys, common[:-1] + chr(ord(common[-1]) + 1))
            else:
                entries.append((key, False))
                i += 1
        parts = [f"<?xml version=\"1.0\" encoding=\"UTF-8\"?><ListBucketResult><Name>{escape(bucket)}</Name>"
                 f"<Prefix>{escape(prefix)}</Prefix><KeyCount>{len(entries)}</KeyCount><MaxKeys>{limit}</MaxKeys>"]
        if delimiter:
            parts.append(f"<Delimiter>{escape(delimiter)}</Delimiter>")
        parts.append(f"<IsTruncated>{'true' if truncated else 'false'}</IsTruncated>")
        if truncated:  # the last entry answered: the next page starts past it (and past its keys)
            last, is_prefix = entries[-1]
            token = last[:-1] + chr(ord(last[-1]) + 1) if is_prefix else last
            parts.append(f"<NextContinuationToken>{escape(token)}</NextContinuationToken>")
        for name, is_prefix in entries:
            if not is_prefix:
                parts.append(f"<Contents><Key>{escape(name)}</Key>{self.entries[(bucket, name)]}</Contents>")
        for name, is_prefix in entries:
            if is_prefix:
                parts.append(f"<CommonPrefixes><Prefix>{escape(name)}</Prefix></CommonPrefixes>")
        parts.append("</ListBucketResult>")
        return "".join(parts).encode()

    def run(self) -> None:
        self.listener.setblocking(False)
        self.ep.register(self.listener.fileno(), select.EPOLLIN)
        lfd = self.listener.fileno()
        while True:
            timeout = -1.0
            if self.timers:
                timeout = max(0.0, self.timers[0][0] - time.monotonic())
            for fd, ev in self.ep.poll(timeout):
                if fd == lfd:
                    self.accept()
                    continue
                c = self.conns.get(fd)
                if c is None:
                    continue
                if ev & (select.EPOLLERR | select.EPOLLHUP) and not ev & select.EPOLLIN:
                    self.close(c)
                elif ev & select.EPOLLOUT:
                    self.send(c)
                elif ev & select.EPOLLIN:
                    self.receive(c)
            now = time.monotonic()
            while self.timers and self.timers[0][0] <= now:
                _, _, fd = heapq.heappop(self.timers)
                c = self.conns.get(fd)
                if c is not None:
                    self.send(c)

    def accept(self) -> None:
        while True:
            try:
                s, _ = self.listener.accept()
            except BlockingIOError:
                return
            s.setblocking(False)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            c = Conn(s, self.next_id)
            self.next_id += 1
            self.conns[c.fd] = c
            self.stats.connections += 1
            self.ep.register(c.fd, select.EPOLLIN)

    def close(self, c: Conn) -> None:
        self.conns.pop(c.fd, None)
        try:
            self.ep.unregister(c.fd)
        except OSError:
            pass
        c.sock.close()

    def receive(self, c: Conn) -> None:
        try:
            data = c.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.close(c)
            return
        if not data:
            self.close(c)
            return
        c.inbuf += data
        if len(c.inbuf) > MAX_HEADER and b"\r\n\r\n" not in c.inbuf:
            self.close(c)
            return
        self.next_request(c)

    def next_request(self, c: Conn) -> None:
        if c.busy:
            return
        end = c.inbuf.find(b"\r\n\r\n")
        if end < 0:
            return
        head = bytes(c.inbuf[:end]).decode("latin-1")
        del c.inbuf[:end + 4]
        lines = head.split("\r\n")
        method, _, rest = lines[0].partition(" ")
        target = rest.rpartition(" ")[0] or rest
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        c.busy = True
        c.received = time.monotonic()
        path, _, query = target.partition("?")
        if path.encode() in (STATS_PATH, RESET_PATH):
            if path.encode() == RESET_PATH:
                self.stats.reset()
                body = b"{}"
            else:
                body = json.dumps(self.stats.report(raw="spans" in query)).encode()
            c.out = (f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\nContent-Type: application/json\r\n\r\n"
                     .encode() + body)
            c.file, c.left, c.size = -1, 0, -1  # not counted
            self.send(c)
            return
        listing = None
        if method == "GET" and "list-type=2" in query and unquote(path).strip("/").count("/") == 0:
            listing = self.list_objects(unquote(path).strip("/"), query)
        found = self.open_file(unquote(path)) if method in ("GET", "HEAD") and listing is None else None
        status, c.file, c.offset, c.left = 404, -1, 0, 0
        extra = ""
        if listing is not None:
            status = 200
        elif method not in ("GET", "HEAD"):
            status = 405
        elif found is not None:
            fd, size, validators = found
            extra = validators
            rng = headers.get("range")
            span = parse_range(rng, size) if rng else (0, size)
            if span is None:
                status, extra = 416, f"Content-Range: bytes */{size}\r\n"
            else:
                status = 206 if rng else 200
                c.file, c.offset, c.left = fd, span[0], span[1] - span[0]
                if rng:
                    extra += f"Content-Range: bytes {span[0]}-{span[1] - 1}/{size}\r\n"
        reason = {200: "OK", 206: "Partial Content", 404: "Not Found", 405: "Method Not Allowed",
                  416: "Range Not Satisfiable"}[status]
        length = c.left if listing is None else len(listing)
        c.out = (f"HTTP/1.1 {status} {reason}\r\nContent-Length: {length}\r\n{extra}"
                 f"Content-Type: {'application/xml' if listing is not None else 'application/octet-stream'}\r\n\r\n"
                 ).encode() + (listing or b"")
        if method == "HEAD":
            c.left = 0
        c.size = c.left if listing is None else len(listing)
        c.what = f"{method} {path} {headers.get('range', '')}" + (f"?{query}" if listing is not None else "")
        c.signed = "authorization" in headers
        due = c.received + self.latency + (self.connect if c.fresh else 0.0)
        if self.rate > 0 and c.left:
            self.link_free = max(self.link_free, due) + c.left / self.rate
            due = self.link_free
        c.fresh = False
        self.seq += 1
        heapq.heappush(self.timers, (due, self.seq, c.fd))

    def send(self, c: Conn) -> None:
        try:
            while c.out:
                n = c.sock.send(c.out)
                c.out = c.out[n:]
            while c.left > 0:
                n = os.sendfile(c.fd, c.file, c.offset, c.left)
                if n == 0:
                    break
                c.offset += n
                c.left -= n
        except (BlockingIOError, InterruptedError):
            self.ep.modify(c.fd, select.EPOLLOUT)
            return
        except OSError as e:
            if e.errno in (errno.EAGAIN,):
                self.ep.modify(c.fd, select.EPOLLOUT)
                return
            self.close(c)
            return
        # Answered.
        if c.size >= 0:
            now = time.monotonic()
            st = self.stats
            st.requests += 1
            st.signed += c.signed
            st.bytes += c.size
            st.sizes.append(c.size)
            st.spans.append((c.received - st.t0, now - st.t0))
            st.conn_of.append(c.id)
            st.paths.append(c.what)
            st.per_connection[c.id] = st.per_connection.get(c.id, 0) + 1
        c.busy = False
        self.ep.modify(c.fd, select.EPOLLIN)
        if c.inbuf:
            self.next_request(c)


class CloudServer:
    """The server in its own process, on 127.0.0.1:<free port>; stopped on close."""

    def __init__(self, root, latency_ms: float = 20.0, connect_ms: float = 20.0, rate_mb_s: float = 0.0,
                 open_files: int = OPEN_FILES) -> None:
        self.latency_ms, self.connect_ms, self.rate_mb_s = latency_ms, connect_ms, rate_mb_s
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), os.fspath(root), "--latency-ms", str(latency_ms),
             "--connect-ms", str(connect_ms), "--rate-mb-s", str(rate_mb_s), "--open-files", str(open_files)],
            stdout=subprocess.PIPE, text=True, start_new_session=True)
        line = self.proc.stdout.readline()
        if not line.strip():
            self.close()
            raise RuntimeError(f"cloud_server did not start (exit {self.proc.poll()})")
        self.port = int(line)
        self.url = f"http://127.0.0.1:{self.port}"

    def _get(self, path: bytes) -> dict:
        with socket.create_connection(("127.0.0.1", self.port), timeout=10) as s:
            s.sendall(b"GET " + path + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            data = b""
            while True:
                head, sep, body = data.partition(b"\r\n\r\n")
                if sep:
                    n = int(next(v for k, v in (ln.split(b":", 1) for ln in head.split(b"\r\n")[1:])
                                 if k.strip().lower() == b"content-length"))
                    if len(body) >= n:
                        return json.loads(body[:n])
                more = s.recv(1 << 20)
                if not more:
                    raise RuntimeError("cloud_server closed the stats connection early")
                data += more

    def stats(self, spans: bool = False) -> dict:
        """The server's figures since the last reset; `spans`: with each request's (received,
        answered) seconds and connection number."""
        return self._get(STATS_PATH + (b"?spans" if spans else b""))

    def reset(self) -> None:
        self._get(RESET_PATH)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=5)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(timeout=5)

    def __enter__(self) -> "CloudServer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("root")
    p.add_argument("--latency-ms", type=float, default=20.0, help="added to every request")
    p.add_argument("--connect-ms", type=float, default=20.0, help="added to a connection's first request")
    p.add_argument("--rate-mb-s", type=float, default=0.0, help="the link's rate, MB/s (0: unlimited)")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--open-files", type=int, default=OPEN_FILES, help="files kept open between requests")
    a = p.parse_args()
    if a.open_files < 1:
        p.error(f"--open-files must be at least 1, got {a.open_files}")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", a.port))
    sock.listen(4096)
    print(sock.getsockname()[1], flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    Server(a.root, a.latency_ms / 1e3, a.connect_ms / 1e3, a.rate_mb_s * 1e6, sock, a.open_files).run()


if __name__ == "__main__":
    main()
