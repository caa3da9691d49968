"""Loopback stand-ins for Google Cloud Storage and Azure Blob Storage (no GCS emulator
installs from PyPI or Debian, and Azurite needs Node, which this machine lacks).

* ``GcsMimic``: the Google Cloud Storage endpoints the GCS store uses, over local
  directories, with an optional bearer token: XML API object reads (``/bucket/object``,
  Range), writes (PUT, ``x-goog-if-generation-match`` checked against object generations:
  412 when it fails), deletes (204; 404 ``NoSuchKey``) and multipart uploads as the XML API
  documents them (``POST ?uploads``, ``PUT ?partNumber=&uploadId=`` answering an ETag,
  ``POST ?uploadId=`` with the parts' ETags, every part but the last at least 5 MiB,
  ``DELETE ?uploadId=``, ``GET /bucket?uploads``); JSON API listing
  (``/storage/v1/b/bucket/o``, paginated).
* ``AzureMimic``: Azure Blob Storage over local directories: Get Blob (``x-ms-range``), List
  Blobs (XML, NextMarker pages), Put Blob (``x-ms-blob-type: BlockBlob`` required), Put Block
  (base64 block IDs of one length per blob, kept uncommitted), Put Block List (commits the
  named blocks at once -- ``Latest`` an uncommitted block else the committed one of that ID --
  discarding the blob's other uncommitted blocks), Snapshot Blob (``PUT ?comp=snapshot``),
  Delete Blob (202; 404 ``BlobNotFound``; 409 ``SnapshotsPresent`` unless
  ``x-ms-delete-snapshots: include``, which deletes them too), ``If-None-Match: *`` refused with 409 ``BlobAlreadyExists``; every
  request's SharedKey signature recomputed by the azure-storage-blob SDK, SAS signatures and
  bearer tokens checked, plus the Entra ID and managed identity token endpoints.

An object lands by rename from a scratch directory beside the roots, so a reader never sees
part of one and listings never see temporaries.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import itertools
import json
import os
import re
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit
from xml.sax.saxutils import escape

from servers import _QuietHandler, _Server, serve_file_bytes

GCS_MIN_PART = 5 << 20  # every part of an XML API multipart upload but the last


def delimited(names: list[str], prefix: str, delimiter: str) -> list[tuple[str, bool]]:
    """A listing's entries in name order, as GCS and Azure give them: with a delimiter, each
    name past it below `prefix` stands once for its "directory" (prefix + segment + delimiter)."""
    if not delimiter:
        return [(n, False) for n in names]
    out: dict[str, bool] = {}
    for n in names:
        cut = n.find(delimiter, len(prefix))
        out.setdefault(n[:cut + len(delimiter)] if cut >= 0 else n, cut >= 0)
    return sorted(out.items())

def _object_path(root: Path, name: str) -> Path | None:
    """``root/name`` when it stays inside ``root`` (None otherwise)."""
    target = (root / name).resolve()
    return target if name and root in target.parents else None


def _land(scratch: Path, target: Path, data: bytes) -> None:
    """Writes ``data`` at ``target`` by rename: whole or not at all."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=scratch)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(temp, target)


def _scratch_beside(roots: list[Path]) -> Path:
    return Path(tempfile.mkdtemp(prefix="mimic-scratch-", dir=roots[0].parent if roots else None))


# -- Google Cloud Storage ---------------------------------------------------------------------


class _GcsHandler(_QuietHandler):
    owner: "GcsMimic"

    def _error(self, status: int, message: str, head: bool = False) -> None:
        body = json.dumps({"error": {"code": status, "message": message}}).encode()
        self.send_body(status, body, {"Content-Type": "application/json"}, head)

    def _xml_error(self, status: int, code: str, message: str) -> None:
        body = f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code><Message>{message}</Message></Error>"
        self.send_body(status, body.encode(), {"Content-Type": "application/xml"})

    def _authorized(self, head: bool = False) -> bool:
        token = self.owner.token
        if token is not None and self.headers.get("Authorization") != f"Bearer {token}":
            self._error(401, "Invalid Credentials", head)
            return False
        return True

    def _serve(self, head: bool) -> None:
        self.owner.record(self)
        if not self._authorized(head):
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
        if not name and "uploads" in parse_qs(parts.query, keep_blank_values=True):
            self._list_uploads(unquote(bucket), parse_qs(parts.query))
            return
        target = _object_path(bucket_dir, unquote(name))
        if target is None or not target.is_file():
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
        entries = delimited([n for n in names if n.startswith(prefix)], prefix, query.get("delimiter", [""])[0])
        start = int(query.get("pageToken", ["0"])[0])
        page = entries[start:start + self.owner.page_size]
        reply: dict = {"kind": "storage#objects", "items": [{"name": n} for n, is_dir in page if not is_dir]}
        if any(is_dir for _, is_dir in page):
            reply["prefixes"] = [n for n, is_dir in page if is_dir]
        if start + self.owner.page_size < len(entries):
            reply["nextPageToken"] = str(start + self.owner.page_size)
        self.send_body(200, json.dumps(reply).encode(), {"Content-Type": "application/json"}, head)

    def _list_uploads(self, bucket: str, query: dict[str, list[str]]) -> None:
        prefix = query.get("prefix", [""])[0]
        with self.owner._lock:
            uploads = sorted((u["name"], uid) for uid, u in self.owner.uploads.items()
                             if u["bucket"] == bucket and u["name"].startswith(prefix))
        items = "".join(f"<Upload><Key>{escape(n)}</Key><UploadId>{uid}</UploadId></Upload>" for n, uid in uploads)
        body = (f"<?xml version='1.0' encoding='UTF-8'?><ListMultipartUploadsResult><Bucket>{bucket}</Bucket>"
                f"<IsTruncated>false</IsTruncated>{items}</ListMultipartUploadsResult>")
        self.send_body(200, body.encode(), {"Content-Type": "application/xml"})

    def _write(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.owner.record(self)
        if not self._authorized():
            return
        parts = urlsplit(self.path)
        bucket, _, name = parts.path.lstrip("/").partition("/")
        bucket, name = unquote(bucket), unquote(name)
        bucket_dir = self.owner.buckets.get(bucket)
        if bucket_dir is None:
            self._xml_error(404, "NoSuchBucket", "The specified bucket does not exist.")
            return
        target = _object_path(bucket_dir, name)
        if target is None:
            self._xml_error(400, "InvalidArgument", "Invalid object name.")
            return
        query = parse_qs(parts.query, keep_blank_values=True)
        upload_id = query.get("uploadId", [None])[0]
        if self.command == "POST" and "uploads" in query:
            self._initiate(bucket, name)
        elif upload_id is not None:
            with self.owner._lock:
                upload = self.owner.uploads.get(upload_id)
            if upload is None or (upload["bucket"], upload["name"]) != (bucket, name):
                self._xml_error(404, "NoSuchUpload", "The requested upload was not found.")
            elif self.command == "PUT":
                etag = f'"{hashlib.md5(body).hexdigest()}"'
                with self.owner._lock:
                    upload["parts"][int(query["partNumber"][0])] = (etag, body)
                self.send_body(200, b"", {"ETag": etag})
            elif self.command == "POST":
                self._complete(upload_id, upload, target, body)
            else:  # DELETE: abort
                with self.owner._lock:
                    self.owner.uploads.pop(upload_id, None)
                self.send_body(204, b"")
        elif self.command == "PUT":
            self._put(bucket, name, target, body)
        elif self.command == "DELETE":
            with self.owner._lock:
                if not target.is_file():
                    self._xml_error(404, "NoSuchKey", "The specified key does not exist.")
                    return
                target.unlink()
                self.owner.generations.pop((bucket, name), None)
            self.send_body(204, b"")
        else:
            self._xml_error(400, "InvalidArgument", f"unexpected {self.command} {self.path}")

    def _store(self, bucket: str, name: str, target: Path, data: bytes) -> bool:
        """Lands ``data`` unless x-goog-if-generation-match disagrees (checked and written as
        one step, as the service does)."""
        wanted = self.headers.get("x-goog-if-generation-match")
        with self.owner._lock:
            current = self.owner.generations.get((bucket, name), 0) if target.is_file() else 0
            if wanted is not None and int(wanted) != current:
                return False
            _land(self.owner.scratch, target, data)
            self.owner.generations[(bucket, name)] = next(self.owner.generation_counter)
        return True

    def _put(self, bucket: str, name: str, target: Path, body: bytes) -> None:
        if not self._store(bucket, name, target, body):
            self._xml_error(412, "PreconditionFailed", "At least one of the pre-conditions you specified did not hold.")
            return
        self.send_body(200, b"", {"ETag": f'"{hashlib.md5(body).hexdigest()}"'})

    def _initiate(self, bucket: str, name: str) -> None:
        upload_id = f"upload-{next(self.owner.generation_counter)}"
        with self.owner._lock:
            self.owner.uploads[upload_id] = {"bucket": bucket, "name": name, "parts": {}}
        body = (f"<?xml version='1.0' encoding='UTF-8'?><InitiateMultipartUploadResult><Bucket>{bucket}</Bucket>"
                f"<Key>{escape(name)}</Key><UploadId>{upload_id}</UploadId></InitiateMultipartUploadResult>")
        self.send_body(200, body.encode(), {"Content-Type": "application/xml"})

    def _complete(self, upload_id: str, upload: dict, target: Path, body: bytes) -> None:
        try:
            listed = [(int(p.findtext("PartNumber")), p.findtext("ETag")) for p in ET.fromstring(body).iter("Part")]
        except (ET.ParseError, TypeError, ValueError):
            self._xml_error(400, "MalformedXML", "The XML you provided was not well-formed.")
            return
        numbers = [n for n, _ in listed]
        if not listed or numbers != sorted(set(numbers)):
            self._xml_error(400, "InvalidPartOrder", "The list of parts was not in ascending order.")
            return
        with self.owner._lock:
            stored = dict(upload["parts"])
        if any(n not in stored or stored[n][0] != etag for n, etag in listed):
            self._xml_error(400, "InvalidPart", "One or more of the specified parts could not be found.")
            return
        if any(len(stored[n][1]) < GCS_MIN_PART for n in numbers[:-1]):
            self._xml_error(400, "EntityTooSmall", "Your proposed upload is smaller than the minimum allowed.")
            return
        data = b"".join(stored[n][1] for n in numbers)
        if not self._store(upload["bucket"], upload["name"], target, data):
            self._xml_error(412, "PreconditionFailed", "At least one of the pre-conditions you specified did not hold.")
            return
        with self.owner._lock:
            self.owner.uploads.pop(upload_id, None)
        reply = (f"<?xml version='1.0' encoding='UTF-8'?><CompleteMultipartUploadResult><Bucket>{upload['bucket']}"
                 f"</Bucket><Key>{escape(upload['name'])}</Key><ETag>\"{hashlib.md5(data).hexdigest()}-{len(listed)}\""
                 "</ETag></CompleteMultipartUploadResult>")
        self.send_body(200, reply.encode(), {"Content-Type": "application/xml"})

    def do_GET(self) -> None:
        self._serve(head=False)

    def do_HEAD(self) -> None:
        self._serve(head=True)

    def do_PUT(self) -> None:
        self._write()

    def do_POST(self) -> None:
        self._write()

    def do_DELETE(self) -> None:
        self._write()


class GcsMimic(_Server):
    """GCS over local directories (``buckets``: name -> dir); see the module docstring.
    ``uploads`` holds the incomplete multipart uploads (id -> bucket, name, parts)."""

    def __init__(self, buckets: dict[str, str | os.PathLike[str]], token: str | None = None,
                 page_size: int = 3):
        self.buckets = {name: Path(d).resolve() for name, d in buckets.items()}
        self.token = token
        self.page_size = page_size
        self.scratch = _scratch_beside(list(self.buckets.values()))
        self.generations: dict[tuple[str, str], int] = {}
        self.generation_counter = itertools.count(1)
        self.uploads: dict[str, dict] = {}
        super().__init__(_GcsHandler)


# -- Azure Blob Storage -----------------------------------------------------------------------


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
        if owner.anonymous and not auth and self.command in ("GET", "HEAD"):
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

    def _locate(self, parts, head: bool) -> tuple[str, str, Path] | None:
        """(container, blob name, container dir) of the request, or None after an error reply."""
        segments = parts.path.lstrip("/").split("/", 2 if self.owner.account_in_path else 1)
        if self.owner.account_in_path:
            if segments[0] != self.owner.account:
                self._error(400, "InvalidUri", "wrong account", head)
                return None
            segments = segments[1:]
        container, name = segments[0], unquote(segments[1]) if len(segments) > 1 else ""
        root = self.owner.containers.get(container)
        if root is None:
            self._error(404, "ContainerNotFound", "The specified container does not exist.", head)
            return None
        return container, name, root

    def _serve(self, head: bool) -> None:
        parts = urlsplit(self.path)
        if parts.path.endswith("/oauth2/token") or parts.path.endswith("/oauth2/v2.0/token"):
            self._token(parts)
            return
        self.owner.record(self)
        if not self._authorized(parts, head):
            return
        located = self._locate(parts, head)
        if located is None:
            return
        _, name, root = located
        query = parse_qs(parts.query)
        if query.get("comp") == ["list"] and query.get("restype") == ["container"]:
            self._list(root, query, head)
            return
        target = _object_path(root, name)
        if target is None or not target.is_file():
            self._error(404, "BlobNotFound", "The specified blob does not exist.", head)
            return
        if "x-ms-range" in self.headers:  # Azure's own range header (it wins over Range)
            del self.headers["Range"]
            self.headers["Range"] = self.headers["x-ms-range"]
        serve_file_bytes(self, target.read_bytes(), head)

    def _list(self, root: Path, query: dict[str, list[str]], head: bool) -> None:
        prefix = query.get("prefix", [""])[0]
        names = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
        entries = delimited([n for n in names if n.startswith(prefix)], prefix, query.get("delimiter", [""])[0])
        start = int(query.get("marker", ["0"])[0])
        page = entries[start:start + self.owner.page_size]
        blobs = "".join(f"<BlobPrefix><Name>{escape(n)}</Name></BlobPrefix>" if is_dir else
                        f"<Blob><Name>{escape(n)}</Name><Properties><Content-Length>{(root / n).stat().st_size}"
                        "</Content-Length></Properties></Blob>" for n, is_dir in page)
        marker = str(start + self.owner.page_size) if start + self.owner.page_size < len(entries) else ""
        body = (f'<?xml version="1.0" encoding="utf-8"?><EnumerationResults ContainerName="c">'
                f"<Prefix>{escape(prefix)}</Prefix><Blobs>{blobs}</Blobs><NextMarker>{marker}</NextMarker>"
                "</EnumerationResults>").encode()
        self.send_body(200, body, {"Content-Type": "application/xml"}, head)

    def _write(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        parts = urlsplit(self.path)
        self.owner.record(self)
        if not self._authorized(parts, False):
            return
        located = self._locate(parts, False)
        if located is None:
            return
        container, name, root = located
        target = _object_path(root, name)
        if target is None:
            self._error(400, "InvalidUri", "The requested URI does not represent any resource on the server.")
            return
        comp = parse_qs(parts.query).get("comp", [""])[0]
        blob = (container, name)
        if self.command == "DELETE" and not comp:
            with self.owner._lock:
                if not target.is_file():
                    self._error(404, "BlobNotFound", "The specified blob does not exist.")
                    return
                if self.owner.snapshots.get(blob) and self.headers.get("x-ms-delete-snapshots") != "include":
                    self._error(409, "SnapshotsPresent", "This operation is not permitted because the blob has"
                                " snapshots.")
                    return
                target.unlink()
                self.owner.committed.pop(blob, None)
                self.owner.snapshots.pop(blob, None)
            self.send_body(202, b"")
        elif self.command == "PUT" and comp == "snapshot":
            with self.owner._lock:
                if not target.is_file():
                    self._error(404, "BlobNotFound", "The specified blob does not exist.")
                    return
                stamp = f"2026-01-01T00:00:{len(self.owner.snapshots.get(blob, [])):02d}.0000000Z"
                self.owner.snapshots.setdefault(blob, []).append((stamp, target.read_bytes()))
            self.send_body(201, b"", {"x-ms-snapshot": stamp, "ETag": '"0x1"',
                                      "Last-Modified": "Thu, 01 Jan 2026 00:00:00 GMT"})
        elif self.command == "PUT" and comp == "block":
            self._put_block(blob, parse_qs(parts.query).get("blockid", [""])[0], body)
        elif self.command == "PUT" and comp == "blocklist":
            self._commit(blob, target, body)
        elif self.command == "PUT" and not comp:
            if self.headers.get("x-ms-blob-type") != "BlockBlob":
                self._error(400, "MissingRequiredHeader", "An HTTP header that's mandatory for this request is"
                            " not specified. (x-ms-blob-type)")
                return
            self._land_blob(blob, target, body)
        else:
            self._error(400, "InvalidQueryParameterValue", f"unexpected {self.command} {self.path}")

    def _land_blob(self, blob: tuple[str, str], target: Path, data: bytes,
                   committed: dict[str, bytes] | None = None) -> None:
        """Writes the blob unless If-None-Match: * finds one (checked and written as one step);
        a write discards the blob's uncommitted blocks, as the service does."""
        with self.owner._lock:
            if self.headers.get("If-None-Match") == "*" and target.is_file():
                self._error(409, "BlobAlreadyExists", "The specified blob already exists.")
                return
            _land(self.owner.scratch, target, data)
            self.owner.uncommitted.pop(blob, None)
            self.owner.committed[blob] = committed or {}
        self.send_body(201, b"", {"ETag": f'"0x{hashlib.md5(data).hexdigest()[:15].upper()}"'})

    def _put_block(self, blob: tuple[str, str], block_id: str, data: bytes) -> None:
        try:
            raw = base64.b64decode(block_id, validate=True)
        except (binascii.Error, ValueError):
            raw = b""
        if not raw or len(raw) > 64:
            self._error(400, "InvalidQueryParameterValue", "Value for one of the query parameters specified in"
                        " the request URI is invalid. (blockid)")
            return
        with self.owner._lock:
            blocks = self.owner.uncommitted.setdefault(blob, {})
            if any(len(other) != len(block_id) for other in blocks):
                self._error(400, "InvalidBlobOrBlock", "The specified blob or block content is invalid.")
                return
            blocks[block_id] = data
        self.send_body(201, b"")

    def _commit(self, blob: tuple[str, str], target: Path, body: bytes) -> None:
        try:
            ids = [(e.tag, e.text or "") for e in ET.fromstring(body)]
        except ET.ParseError:
            self._error(400, "InvalidXmlDocument", "XML specified is not syntactically valid.")
            return
        with self.owner._lock:
            uncommitted, committed = self.owner.uncommitted.get(blob, {}), self.owner.committed.get(blob, {})
            chosen = {}
            for tag, block_id in ids:
                if tag in ("Latest", "Uncommitted") and block_id in uncommitted:
                    chosen[block_id] = uncommitted[block_id]
                elif tag in ("Latest", "Committed") and block_id in committed:
                    chosen[block_id] = committed[block_id]
                else:
                    self._error(400, "InvalidBlockList", "The specified block list is invalid.")
                    return
        self._land_blob(blob, target, b"".join(chosen[block_id] for _, block_id in ids), chosen)

    def do_GET(self) -> None:
        self._serve(head=False)

    def do_HEAD(self) -> None:
        self._serve(head=True)

    def do_POST(self) -> None:
        self._token(urlsplit(self.path))

    def do_PUT(self) -> None:
        self._write()

    def do_DELETE(self) -> None:
        self._write()


class AzureMimic(_Server):
    """Azure Blob Storage over local directories (``containers``: name -> dir); see the
    module docstring. ``uncommitted`` and ``committed``: (container, blob) -> {block id: bytes}.
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
        self.scratch = _scratch_beside(list(self.containers.values()))
        self.uncommitted: dict[tuple[str, str], dict[str, bytes]] = {}
        self.committed: dict[tuple[str, str], dict[str, bytes]] = {}
        self.snapshots: dict[tuple[str, str], list[tuple[str, bytes]]] = {}  # (timestamp, bytes), oldest first
        super().__init__(_AzureHandler)

    def issue(self) -> str:
        with self._lock:
            token = f"eyJ.azure-token-{len(self.issued_tokens)}"
            self.issued_tokens.add(token)
            return token


__all__ = ["GCS_MIN_PART", "AzureMimic", "GcsMimic"]
