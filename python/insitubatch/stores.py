"""Store constructors.

Every constructor returns a native ``Store`` handle that all other entry points accept.
``store(url, **options)`` dispatches on the URL scheme -- a local path or ``file://``,
``memory://``, ``http(s)://``, ``s3://``, ``gs://`` and ``az://`` -- and takes obstore's option names;
``obstore_store`` is the same function under the name the product description uses.
zarr-python stores (``fsspec_store``, ``icechunk_store``, ``arraylake_store`` or any v3
``Store`` object) are read through the bridge loop of :mod:`insitubatch.bridge`.

Options are checked here: an unknown option or a value of the wrong type raises
``InvalidArgumentError`` naming the option; an option another scheme takes is ignored
(logged at debug level), so one set of options serves every URL of a job. Credential
values are never echoed in any message, ``repr`` or log.
"""

from __future__ import annotations

import copyreg
import datetime
import functools
import logging
import math
import os
import re
import sys
from typing import Any, Callable
from urllib.parse import urlparse

from . import _ext, arguments, bridge as _bridge, urls
from .errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    InvalidTypeError,
    MissingDependencyError,
    UnsupportedError,
)

logger = logging.getLogger("insitubatch")

Store = _ext.Store

# Options every backend accepts (zarr's read_only flag: True unless the store is written).
_COMMON_OPTIONS = frozenset({"read_only"})

# Options of the HTTP transport shared by http(s)://, s3:// and gs://.
_TRANSPORT_OPTIONS = frozenset({
    "timeout", "connect_timeout", "max_retries", "retry_base_delay", "retry_max_delay",
    "retry_timeout", "connect_retry_timeout",
    "verify_tls", "allow_invalid_certificates", "allow_http", "ca_file", "io_threads",
    "max_connections_per_host", "client_options", "retry_config",
})
_HTTP_OPTIONS = _TRANSPORT_OPTIONS | {"headers"}
_S3_OPTIONS = _TRANSPORT_OPTIONS | {
    "skip_signature", "region", "endpoint", "request_payer", "access_key_id",
    "secret_access_key", "session_token", "token", "profile", "virtual_hosted_style_request",
    "s3_express", "multipart_part_size",
}
_GCS_OPTIONS = _TRANSPORT_OPTIONS | {"skip_signature", "token", "endpoint", "service_account_key",
                                     "service_account_path", "application_credentials", "multipart_part_size"}
# Azure's credential options, as the native store names them.
_AZURE_CREDENTIALS = frozenset({
    "token", "account_key", "sas_key", "client_id", "client_secret", "tenant_id", "authority_host",
    "federated_token_file", "msi_endpoint", "object_id", "msi_resource_id",
})
# obstore's other spellings of them.
_AZURE_ALIASES = {
    "bearer_token": "token", "access_key": "account_key", "master_key": "account_key",
    "sas_token": "sas_key", "authority_id": "tenant_id", "identity_endpoint": "msi_endpoint",
}
_AZURE_OPTIONS = _TRANSPORT_OPTIONS | _AZURE_CREDENTIALS | set(_AZURE_ALIASES) | {
    "account_name", "endpoint", "use_emulator", "skip_signature", "use_azure_cli", "use_fabric_endpoint",
    "container_name", "disable_tagging", "multipart_part_size",
}
# What some store takes: given to another scheme, it is ignored rather than refused.
_ANY_STORE_OPTIONS = _HTTP_OPTIONS | _S3_OPTIONS | _GCS_OPTIONS | _AZURE_OPTIONS
# Values never shown in messages.
_SECRET_OPTIONS = frozenset({"secret_access_key", "session_token", "token", "access_key_id", "headers",
                            "service_account_key", "account_key", "access_key", "master_key", "sas_key",
                            "sas_token", "client_secret", "bearer_token"})

_MAX_DURATION_S = 24 * 3600.0


# -- value checks ---------------------------------------------------------------------------


def _bool(name: str, value: Any) -> bool:
    return arguments.flag(f"option {name!r}", value)


def _string(name: str, value: Any) -> str:
    return arguments.text(f"option {name!r}", value)


def _int(name: str, value: Any, lo: int, hi: int) -> int:
    return arguments.integer(f"option {name!r}", value, (lo, hi))


_DURATION_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(ms|s|m|min|h)?\s*$")
_DURATION_UNITS = {"ms": 1e-3, "s": 1.0, None: 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def _seconds(name: str, value: Any, *, allow_zero: bool = False) -> float:
    """Seconds from a number, a ``timedelta`` or a string such as ``"30s"`` / ``"500ms"``."""
    if isinstance(value, datetime.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str) and (match := _DURATION_RE.match(value)):
        seconds = float(match.group(1)) * _DURATION_UNITS[match.group(2)]
    else:
        error = InvalidArgumentError if isinstance(value, str) else InvalidTypeError
        raise error(
            f"option {name!r} must be a duration (seconds, a timedelta or a string such as '30s'),"
            f" got {value!r}"
        )
    if not math.isfinite(seconds) or seconds < 0 or (seconds == 0 and not allow_zero):
        raise InvalidArgumentError(f"option {name!r} must be a positive duration, got {value!r}")
    if seconds > _MAX_DURATION_S:
        raise InvalidArgumentError(f"option {name!r} must be at most 24 hours, got {value!r}")
    return seconds


_HEADER_NAME_RE = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


def _headers(name: str, value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise InvalidArgumentError(f"option {name!r} must be a dict of header name -> value")
    out = {}
    for key, val in value.items():
        if not isinstance(key, str) or not _HEADER_NAME_RE.match(key):
            raise InvalidArgumentError(f"option {name!r}: invalid header name {key!r}")
        if not isinstance(val, str) or any(c in val for c in "\r\n\x00"):
            raise InvalidArgumentError(f"option {name!r}: the value of header {key!r} must be a"
                                       " single-line string")
        if key.lower() in ("range", "host", "content-length"):
            raise InvalidArgumentError(f"option {name!r}: header {key!r} is set by the store itself")
        out[key] = val
    return out


def _check_options(scheme: str, options: dict[str, Any], allowed: frozenset[str]) -> None:
    """Raises on a name no store knows; drops (with a debug line) a name another scheme
    takes, as obstore does (``skip_signature`` on ``file://``), so one option set serves
    every URL of a job."""
    given = set(options) - allowed - _COMMON_OPTIONS
    unknown = sorted(given - _ANY_STORE_OPTIONS)
    if unknown:
        raise InvalidArgumentError(
            f"unknown option(s) {', '.join(map(repr, unknown))} for {scheme} stores"
            f" (accepted: {', '.join(sorted(allowed | _COMMON_OPTIONS))})"
        )
    for name in sorted(given):
        logger.debug("store option %r does not apply to %s stores: ignored", name, scheme)
        del options[name]


# -- obstore's nested forms -----------------------------------------------------------------


def _flatten_nested(options: dict[str, Any]) -> dict[str, Any]:
    """Folds obstore's ``client_options`` / ``retry_config`` dicts into flat options."""
    out = dict(options)

    def merge(source: str, key: str, value: Any) -> None:
        if key in out:
            raise InvalidArgumentError(f"option {key!r} is given both directly and in {source}")
        out[key] = value

    client = out.pop("client_options", None)
    if client is not None:
        if not isinstance(client, dict):
            raise InvalidArgumentError("option 'client_options' must be a dict")
        for key, value in client.items():
            if key not in ("timeout", "connect_timeout", "allow_http", "allow_invalid_certificates"):
                raise InvalidArgumentError(
                    f"client_options[{key!r}] is not supported (supported: timeout, connect_timeout,"
                    " allow_http, allow_invalid_certificates)"
                )
            merge("client_options", key, value)
    retry = out.pop("retry_config", None)
    if retry is not None:
        if not isinstance(retry, dict):
            raise InvalidArgumentError("option 'retry_config' must be a dict")
        for key, value in retry.items():
            if key in ("max_retries", "retry_timeout"):
                merge("retry_config", key, value)
            elif key == "backoff":
                if not isinstance(value, dict):
                    raise InvalidArgumentError("retry_config['backoff'] must be a dict")
                for bkey, bvalue in value.items():
                    if bkey == "init_backoff":
                        merge("retry_config['backoff']", "retry_base_delay", bvalue)
                    elif bkey == "max_backoff":
                        merge("retry_config['backoff']", "retry_max_delay", bvalue)
                    elif bkey == "base":
                        if isinstance(bvalue, bool) or bvalue not in (2, 2.0):
                            raise InvalidArgumentError(
                                "retry_config['backoff']['base'] must be 2 (delays double per attempt)"
                            )
                    else:
                        raise InvalidArgumentError(f"retry_config['backoff'][{bkey!r}] is not supported")
            else:
                raise InvalidArgumentError(
                    f"retry_config[{key!r}] is not supported (supported: max_retries, backoff,"
                    " retry_timeout)"
                )
    return out


def _transport(options: dict[str, Any]) -> Any:
    t = _ext.TransportOptions()
    if "timeout" in options:
        t.timeout_ms = max(1, round(_seconds("timeout", options["timeout"]) * 1000))
    if "connect_timeout" in options:
        t.connect_timeout_ms = max(1, round(_seconds("connect_timeout", options["connect_timeout"]) * 1000))
    if "max_retries" in options:
        t.max_attempts = _int("max_retries", options["max_retries"], 0, 99) + 1
    base = t.retry_base_delay_ms
    if "retry_base_delay" in options:
        base = round(_seconds("retry_base_delay", options["retry_base_delay"], allow_zero=True) * 1000)
        t.retry_base_delay_ms = base
    if "retry_max_delay" in options:
        cap = round(_seconds("retry_max_delay", options["retry_max_delay"], allow_zero=True) * 1000)
        if cap > 600_000:
            raise InvalidArgumentError("option 'retry_max_delay' must be at most 10 minutes")
        t.retry_max_delay_ms = cap
    elif base > t.retry_max_delay_ms:
        t.retry_max_delay_ms = min(600_000, base)
    if t.retry_base_delay_ms > t.retry_max_delay_ms:
        raise InvalidArgumentError("option 'retry_base_delay' must not exceed 'retry_max_delay'")
    if "retry_timeout" in options:
        t.retry_deadline_ms = max(1, round(_seconds("retry_timeout", options["retry_timeout"]) * 1000))
        if t.retry_deadline_ms > 3_600_000:
            raise InvalidArgumentError("option 'retry_timeout' must be at most an hour")
        t.connect_retry_deadline_ms = min(t.connect_retry_deadline_ms, t.retry_deadline_ms)
    if "connect_retry_timeout" in options:
        t.connect_retry_deadline_ms = max(
            1, round(_seconds("connect_retry_timeout", options["connect_retry_timeout"]) * 1000))
        if t.connect_retry_deadline_ms > 3_600_000:
            raise InvalidArgumentError("option 'connect_retry_timeout' must be at most an hour")
    verify = True
    if "verify_tls" in options:
        verify = _bool("verify_tls", options["verify_tls"])
    if "allow_invalid_certificates" in options:
        if _bool("allow_invalid_certificates", options["allow_invalid_certificates"]):
            verify = False
    t.verify_tls = verify
    if "allow_http" in options:
        _bool("allow_http", options["allow_http"])  # http:// endpoints are always allowed
    if "ca_file" in options:
        path = options["ca_file"]
        path = os.fspath(path) if isinstance(path, os.PathLike) else path
        t.ca_file = _string("ca_file", path)
    if "io_threads" in options:
        t.io_threads = _int("io_threads", options["io_threads"], 1, 64)
    if "max_connections_per_host" in options:
        t.max_connections_per_host = _int("max_connections_per_host", options["max_connections_per_host"], 0, 100_000)
    t.validate()
    return t


# -- constructors ---------------------------------------------------------------------------


def local_store(path: str | os.PathLike[str]) -> Store:
    """A store over a local directory."""
    return _with_recipe(_ext.open_file_store(os.fspath(path)), os.fspath(path), {})


def memory_store() -> Store:
    """An empty in-memory store (``.set(key, bytes)`` fills it)."""
    return _ext.MemoryStore()


def _http_store(url: str, options: dict[str, Any]) -> Store:
    headers = _headers("headers", options["headers"]) if "headers" in options else {}
    return _ext.open_http_store(url, _transport(options), headers)


def _s3_store(url: str, options: dict[str, Any]) -> Store:
    if "token" in options:  # obstore's alias of session_token
        if "session_token" in options:
            raise InvalidArgumentError("pass the S3 session token once: 'token' or 'session_token'")
        options["session_token"] = options.pop("token")
    if options.get("s3_express") is not None and _bool("s3_express", options["s3_express"]):
        raise UnsupportedError("s3_express=True (S3 Express One Zone buckets) is not supported yet")
    kwargs: dict[str, Any] = {}
    for name in ("region", "endpoint", "access_key_id", "secret_access_key", "session_token", "profile"):
        if name in options:
            kwargs[name] = _string(name, options[name])
    for name in ("skip_signature", "request_payer"):
        if name in options:
            kwargs[name] = _bool(name, options[name])
    if "virtual_hosted_style_request" in options:
        kwargs["virtual_hosted_style"] = _bool("virtual_hosted_style_request",
                                               options["virtual_hosted_style_request"])
    if "multipart_part_size" in options:  # bytes per part of an upload (S3: 5 MiB to 5 GiB)
        kwargs["multipart_part_size"] = _int("multipart_part_size", options["multipart_part_size"], 5 << 20, 5 << 30)
    kwargs["writable"] = bool(options.get("writable", False))
    return _ext.open_s3_store(url, _transport(options), **kwargs)


def _gcs_store(url: str, options: dict[str, Any]) -> Store:
    kwargs: dict[str, Any] = {}
    if "application_credentials" in options:  # obstore's name for a key file path
        if "service_account_path" in options:
            raise InvalidArgumentError("pass service_account_path or application_credentials, not both")
        options = {**options, "service_account_path": options["application_credentials"]}
    for name in ("endpoint", "token", "service_account_path"):
        if name in options:
            kwargs[name] = _string(name, options[name])
    if "service_account_key" in options:  # a key file's JSON text: line breaks are expected
        key = options["service_account_key"]
        if not isinstance(key, str) or not key.strip() or "\x00" in key:
            raise InvalidArgumentError("option 'service_account_key' must be a key file's JSON text")
        kwargs["service_account_key"] = key
    if "skip_signature" in options:
        kwargs["skip_signature"] = _bool("skip_signature", options["skip_signature"])
    if "multipart_part_size" in options:  # bytes per part of an XML API multipart upload: 5 MiB to 5 GiB
        kwargs["multipart_part_size"] = _int("multipart_part_size", options["multipart_part_size"], 5 << 20, 5 << 30)
    kwargs["writable"] = bool(options.get("writable", False))
    return _ext.open_gcs_store(url, _transport(options), **kwargs)


def _flag(name: str, value: Any) -> bool:
    """A boolean as obstore reads one: True/False, or a string such as "true" / "0"."""
    if isinstance(value, str) and value.strip().lower() in ("1", "true", "on", "yes", "y", "0", "false", "off", "no", "n"):
        return value.strip().lower() in ("1", "true", "on", "yes", "y")
    return _bool(name, value)


def _azure_store(url: str, options: dict[str, Any]) -> Store:
    for alias, name in _AZURE_ALIASES.items():
        if alias in options:
            if name in options:
                raise InvalidArgumentError(f"pass the Azure option once: {name!r} or {alias!r}")
            options[name] = options.pop(alias)
    if options.get("use_azure_cli") is not None and _flag("use_azure_cli", options["use_azure_cli"]):
        raise UnsupportedError("use_azure_cli=True is not supported: pass token= with the output of"
                               " `az account get-access-token --resource https://storage.azure.com --query"
                               " accessToken -o tsv`")
    if options.get("use_fabric_endpoint") is not None and _flag("use_fabric_endpoint", options["use_fabric_endpoint"]):
        raise UnsupportedError("use_fabric_endpoint=True (Microsoft Fabric / OneLake) is not supported")
    if "disable_tagging" in options:  # obstore's writer option: our writes never tag blobs
        _flag("disable_tagging", options["disable_tagging"])
    if "container_name" in options:
        container = _string("container_name", options["container_name"])
        named = url.split("://", 1)[1].split("/", 1)[0].split("@", 1)[0]
        if not url.lower().startswith("https://") and named != container:
            raise InvalidArgumentError(f"container_name={container!r} disagrees with the URL's container {named!r}")
    credentials = {name: _string(name, options[name]) for name in sorted(_AZURE_CREDENTIALS) if name in options}
    kwargs: dict[str, Any] = {}
    for name in ("account_name", "endpoint"):
        if name in options:
            kwargs[name] = _string(name, options[name])
    for name in ("use_emulator", "skip_signature"):
        if name in options:
            kwargs[name] = _flag(name, options[name])
    if "multipart_part_size" in options:  # bytes per block of a Put Block upload: at most 4000 MiB
        kwargs["multipart_part_size"] = _int("multipart_part_size", options["multipart_part_size"], 1, 4000 << 20)
    kwargs["writable"] = bool(options.get("writable", False))
    return _ext.open_azure_store(url, _transport(options), credentials=credentials, **kwargs)


def _without_prefix(options: dict[str, Any], prefix: str, names: frozenset[str]) -> dict[str, Any]:
    """Accepts obstore's prefixed spellings (``aws_region`` for ``region``)."""
    out: dict[str, Any] = {}
    for key, value in options.items():
        plain = key[len(prefix):] if key.startswith(prefix) and key[len(prefix):] in names else key
        if plain in out:
            raise InvalidArgumentError(f"option {plain!r} is given twice (as {plain!r} and {prefix + plain!r})")
        out[plain] = value
    return out


# The store of each scheme urls.SCHEMES names (its aliases map onto these).
_BACKENDS: dict[str, tuple[str, frozenset[str], Callable[[str, dict[str, Any]], Store]]] = {
    "http": ("http(s)://", _HTTP_OPTIONS, _http_store),
    "https": ("http(s)://", _HTTP_OPTIONS, _http_store),
    "s3": ("s3://", _S3_OPTIONS, _s3_store),
    "gs": ("gs://", _GCS_OPTIONS, _gcs_store),
    "az": ("az://", _AZURE_OPTIONS, _azure_store),
}


def store(url: str | os.PathLike[str], **options: Any) -> Store:
    """Opens the store at ``url``.

    Schemes: a local path or ``file://``; ``memory://``; ``http://`` / ``https://`` (Range
    reads; no listing: finding a group's arrays needs consolidated metadata, arrays named
    by path open without it); ``s3://bucket/prefix``
    (SigV4; ``skip_signature``, ``region``, ``endpoint``, ``request_payer``,
    ``access_key_id`` / ``secret_access_key`` / ``session_token``, ``profile``,
    ``virtual_hosted_style_request``; without keys, credentials come as botocore finds them:
    the environment, ``~/.aws`` profiles (keys, ``credential_process``, ``role_arn`` with
    ``source_profile`` or ``credential_source``: STS AssumeRole), web identity (EKS),
    the container endpoint (ECS,
    EKS Pod Identity) or instance metadata (EC2), refreshed before they expire; the store's
    ``credentials_source`` says which); ``gs://bucket/prefix`` (``token``,
    ``service_account_path`` / ``application_credentials``, ``service_account_key``,
    ``skip_signature``, ``endpoint``; without them, a token as google-auth finds one:
    ``GOOGLE_APPLICATION_CREDENTIALS``, gcloud's application-default login, or the metadata
    server of GCE / GKE / Cloud Run, refreshed before it expires). Every network store also takes ``timeout``,
    ``connect_timeout``, ``max_retries``, ``retry_base_delay``, ``retry_max_delay``,
    ``verify_tls`` (or obstore's ``allow_invalid_certificates``), ``ca_file``,
    ``io_threads`` and ``max_connections_per_host``, plus obstore's ``client_options`` /
    ``retry_config`` dicts. ``az://container/prefix`` (also ``abfs[s]://container@account.dfs.core.windows.net/``
    and ``https://account.blob.core.windows.net/container/``; ``account_name``, ``account_key``,
    ``sas_key``, ``token`` (a bearer token), ``client_id`` / ``client_secret`` / ``tenant_id``,
    ``federated_token_file``, ``msi_endpoint`` / ``object_id`` / ``msi_resource_id``, ``use_emulator``,
    ``endpoint``, ``skip_signature``, with or without obstore's ``azure_`` / ``azure_storage_``
    prefixes; without them, credentials come from the ``AZURE_*`` environment as obstore reads it,
    else the managed identity, refreshed before they expire).
    """
    if isinstance(url, os.PathLike):
        url = os.fspath(url)
    if not isinstance(url, str):
        raise InvalidTypeError(f"store url must be a non-empty string, got {type(url).__name__}")
    if not url:
        raise InvalidArgumentError("store url must be a non-empty string, got an empty one")
    recipe = (url, dict(options))
    scheme = urls.store_scheme(url)
    read_only = arguments.flag("option 'read_only'", options.pop("read_only", True))
    if scheme == "file":
        _check_options("file://", options, frozenset())
        return _with_recipe(_ext.open_file_store(url, writable=not read_only), *recipe)
    if scheme == "memory":
        _check_options("memory://", options, frozenset())
        return _ext.MemoryStore(writable=not read_only)
    if not read_only and scheme in ("http", "https"):
        raise InvalidArgumentError(f"option 'read_only': {url} cannot be opened for writing: HTTP has no write"
                                   " verb (write through s3://, gs://, az:// or a local path instead)")
    backend = _BACKENDS.get(scheme) if scheme is not None else None
    if backend is None:
        raise UnsupportedError(f"store scheme {urls.scheme_of(url)!r} is not supported by this build"
                               f" ({urls.SUPPORTED})")
    label, allowed, open_backend = backend
    if scheme == "s3":
        options = _without_prefix(options, "aws_", _S3_OPTIONS)
        url = "s3://" + url.split("://", 1)[1]  # s3a://
    elif scheme == "gs":
        url = "gs://" + url.split("://", 1)[1]  # gcs://
    elif scheme == "az":
        options = _without_prefix(_without_prefix(options, "azure_storage_", _AZURE_OPTIONS), "azure_", _AZURE_OPTIONS)
    _check_options(label, options, allowed)
    opened = _flatten_nested(options)
    if not read_only:
        opened["writable"] = True  # checked above: this backend writes
    return _with_recipe(open_backend(url, opened), *recipe)


# -- across processes: pickling, and re-opening in a forked child ---------------------------------


def _with_recipe(native: Store, url: str, options: dict[str, Any]) -> Store:
    """Remembers how ``native`` was opened, so another process can open it again. The
    options may hold credentials: they travel in a pickle as they would in obstore's."""
    native._recipe = (url, options)  # type: ignore[attr-defined]  # nb::dynamic_attr
    return native


# The reads a dataset sends at once after the metadata, each wanting a connection: over a
# store across a network, max_inflight (the engine's default, read here rather than restated).
_WARM_CONNECTIONS: int = _ext.EngineConfig().max_inflight


def warm_connections(native: Any) -> None:
    """Opens the connections a dataset's first block will read on, while the metadata is
    read: over a link where a new connection costs round trips of its own (TCP, TLS), the
    first batch's reads then start on open ones, one round trip after the metadata instead
    of a connection setup and a round trip. Each is a one-byte read of ``zarr.json`` whose
    answer is dropped. Not done with a per-host connection limit (the warm reads would queue
    ahead of the metadata's) or on a local store."""
    if native.remote and connection_limit(native) is None:
        native.warm_connections("zarr.json", _WARM_CONNECTIONS)


def connection_limit(native: Any) -> tuple[int, int] | None:
    """(max_connections_per_host, io_threads) of a store opened with a per-host connection
    limit, else None (no limit: the default). Each IO thread keeps its own connections, so
    over HTTP/1.1 at most their product of reads are in flight at once."""
    options: dict[str, Any] = (getattr(native, "_recipe", None) or ("", {}))[1]
    limit = options.get("max_connections_per_host")
    if not limit:
        return None
    return int(limit), int(options.get("io_threads", _ext.TransportOptions().io_threads))


def _reduce_native(native: Store) -> tuple[Any, tuple[str]]:
    recipe = getattr(native, "_recipe", None)
    if recipe is None:
        raise InvalidTypeError(
            f"{native!r} cannot be sent to another process: only stores opened by URL"
            " (insitubatch.store(url, ...)) can be re-opened there; a memory store's contents live"
            " in this process alone")
    url, options = recipe
    return functools.partial(getattr(native, "_opener", store), **options), (url,)


def _reduce_python_store(bridged: Any) -> tuple[Any, tuple[Any]]:
    return _bridge.wrap_python_store, (bridged.python_store,)


for _cls in (_ext.FileStore, _ext.HttpStore, _ext.S3Store, _ext.GcsStore, _ext.AzureStore, _ext.MemoryStore,
             _ext.CountingStore, _ext.ReferenceStore):
    copyreg.pickle(_cls, _reduce_native)
copyreg.pickle(_ext.PythonStore, _reduce_python_store)


def reopen_store(old: Any) -> Any:
    """The store ``old`` names, opened again in this process (a forked child, whose copy of
    a native store has no IO threads). zarr-python stores are returned as they are: the
    bridge loop restarts in the child on its own."""
    if _unwrapped(old) is not old:
        return type(old)(reopen_store(_unwrapped(old)))
    if isinstance(old, _ext.PythonStore):
        return _bridge.wrap_python_store(old.python_store)
    if isinstance(old, _ext.Store):
        recipe = getattr(old, "_recipe", None)
        if recipe is None:
            raise FailedPreconditionError(
                f"{old!r} was opened before fork() and cannot be re-opened in the child (it was"
                " not opened by URL); open the dataset in the child, or over insitubatch.store(url)")
        url, options = recipe
        return getattr(old, "_opener", store)(url, **options)
    return old


def obstore_store(url: str, **options: Any) -> Any:
    """:func:`store` (same URLs and options) as a zarr-python ``Store`` that the engine also
    reads natively: hand it to ``zarr.open_group``, ``xarray.open_zarr`` or ``InSituDataset``
    alike. (It imports zarr; :func:`store` does not.) With ``read_only=False`` (local paths,
    ``file://``, ``memory://``, ``s3://``, ``gs://`` and ``az://``) zarr-python and xarray write
    through it, each object replaced whole so a reader never sees part of one. A read-only ``memory://`` gives the
    native memory store."""
    native = store(url, **options)
    if isinstance(native, _ext.MemoryStore) and not native.writable:
        return native
    from .zarr_store import ZarrStore

    return ZarrStore(native)


def _unwrapped(obj: Any) -> Any:
    """The native store inside a :class:`~insitubatch.zarr_store.ZarrStore`, else ``obj``."""
    face = sys.modules.get("insitubatch.zarr_store")  # none was made if it is not imported
    return obj.native if face is not None and isinstance(obj, face.ZarrStore) else obj


# -- zarr-python stores (read through the bridge loop) -----------------------------------------


def as_native_store(obj: Any) -> Store:
    """``obj`` itself when it is a native ``Store``; a zarr-python v3 Store (anything with
    async ``get`` and ``list_prefix``: MemoryStore, LocalStore, FsspecStore, an Icechunk
    session store, ...) wrapped to be read through the bridge loop."""
    obj = _unwrapped(obj)
    if isinstance(obj, _ext.Store):
        return obj
    if _bridge.is_python_store(obj):
        return _bridge.wrap_python_store(obj)
    if isinstance(obj, (str, os.PathLike)) and os.fspath(obj):  # a URL or path, as zarr takes it
        return store(obj)
    raise InvalidTypeError(
        f"expected an insitubatch Store, a zarr-python Store (async get/list_prefix) or a URL,"
        f" got {type(obj).__module__}.{type(obj).__qualname__}"
    )


def ensure_local_dir(url: str) -> str:
    """For a ``file://`` URL or a plain path, creates the directory (``mkdir -p``) so writes
    can land; other schemes are left alone. Returns ``url`` unchanged, for chaining."""
    if not isinstance(url, (str, os.PathLike)):
        raise InvalidTypeError(f"url must be a non-empty string, got {url!r}")
    if not os.fspath(url):
        raise InvalidArgumentError(f"url must be a non-empty string, got {url!r}")
    text = os.fspath(url)
    if urls.store_scheme(text) == "file":
        os.makedirs(urlparse(text).path if urls.scheme_of(text) else text, exist_ok=True)
    return url


def fsspec_store(url: str, *, read_only: bool = True, **storage_options: Any) -> Any:
    """zarr's ``FsspecStore.from_url(url, storage_options)``: for what the native stores cannot
    reach (other fsspec filesystems). ``file://`` defaults ``auto_mkdir=True``."""
    from zarr.storage import FsspecStore

    if not isinstance(url, str):
        raise InvalidTypeError(f"store url must be a non-empty string, got {type(url).__name__}")
    if not url:
        raise InvalidArgumentError("store url must be a non-empty string, got an empty one")
    if urlparse(url).scheme in ("", "file"):
        storage_options.setdefault("auto_mkdir", True)
    return FsspecStore.from_url(url, storage_options=storage_options or None, read_only=read_only)


_ICECHUNK_REF_OPTIONS = ("branch", "tag", "snapshot_id")


def icechunk_store(url: str, *, anonymous: bool | None = None, region: str | None = None,
                   **kwargs: Any) -> Any:
    """The read-only session store of the Icechunk repository at ``url``.

    ``file://<dir>`` (a local repository), ``s3://bucket/prefix`` (``anonymous``, ``region``
    and icechunk's ``s3_storage`` options such as ``endpoint_url``, ``allow_http``,
    ``from_env``) or ``gs://bucket/prefix`` (``gcs_storage`` options). ``branch`` (default
    "main"), ``tag`` or ``snapshot_id`` picks the version. A repository of virtual chunks
    (byte ranges in other files, as VirtualiZarr writes them) reads them once their
    containers are authorized: ``virtual_chunk_credentials={"s3://bucket/": creds, ...}``
    (``None`` for anonymous or local access) is handed to icechunk as
    ``authorize_virtual_chunk_access``.
    """
    if not isinstance(url, str) or "://" not in url:
        raise InvalidArgumentError(f"icechunk_store needs a repository URL such as file:///path or"
                                   f" s3://bucket/prefix, got {url!r}")
    ref = {name: kwargs.pop(name) for name in _ICECHUNK_REF_OPTIONS if name in kwargs}
    virtual = kwargs.pop("virtual_chunk_credentials", None)
    if virtual is not None and not isinstance(virtual, dict):
        raise InvalidArgumentError("virtual_chunk_credentials must be a dict of URL prefix -> credentials (or None)")
    parsed = urlparse(url)
    scheme = parsed.scheme.lower()
    kind = urls.SCHEMES.get(scheme)  # s3a:// is s3://, gcs:// is gs://
    prefix = parsed.path.strip("/") or None
    if not scheme or kind not in ("file", "s3", "gs"):
        raise InvalidArgumentError(
            f"icechunk_store does not open {scheme}:// repositories (supported: file://, s3://,"
            " gs://); for a repository hosted on Arraylake use arraylake_store('org/repo')"
        )
    try:
        import icechunk
    except ImportError:
        raise MissingDependencyError("icechunk_store needs icechunk; install it with:"
                          " pip install 'insitubatch[icechunk]'") from None
    if kind == "file":
        given = sorted(k for k, v in {"anonymous": anonymous, "region": region, **kwargs}.items()
                       if v is not None)
        if given:
            raise InvalidArgumentError(f"option(s) {', '.join(given)} do not apply to file://"
                                       " Icechunk repositories")
        storage = icechunk.local_filesystem_storage(parsed.path or parsed.netloc)
    elif kind == "s3":
        if anonymous is not None:
            kwargs["anonymous"] = anonymous
        if region is not None:
            kwargs["region"] = region
        storage = icechunk.s3_storage(bucket=parsed.netloc, prefix=prefix, **kwargs)
    elif kind == "gs":
        if region is not None:
            raise InvalidArgumentError("option 'region' does not apply to gs:// Icechunk repositories")
        if anonymous is not None:
            kwargs["anonymous"] = anonymous
        storage = icechunk.gcs_storage(bucket=parsed.netloc, prefix=prefix, **kwargs)
    if virtual:
        repo = icechunk.Repository.open(storage, authorize_virtual_chunk_access=icechunk.containers_credentials(virtual))
    else:
        repo = icechunk.Repository.open(storage)
    if not ref:
        ref = {"branch": "main"}
    return repo.readonly_session(**ref).store


def arraylake_store(repo: str, *, branch: str = "main") -> Any:
    """The read-only session store of an Arraylake repository (``"org/repo"``); auth from
    a cached ``arraylake login`` or ``ARRAYLAKE_TOKEN``."""
    try:
        from arraylake import Client
    except ImportError:
        raise MissingDependencyError("arraylake_store needs the Arraylake client; install it with:"
                          " pip install 'insitubatch[arraylake]'") from None
    return Client().get_repo(repo).readonly_session(branch).store


def close_store(store: Any) -> None:
    """Best-effort teardown of an async fsspec session (aiohttp) on the loop that owns it.

    A no-op for native stores (other than bridged ones, which close the store they wrap),
    stores without a session, closed sessions; never raises. The session handle is dropped
    so the library's finalizer has nothing left to close at exit.
    """
    try:
        if isinstance(store, _ext.PythonStore):
            store = store.python_store
        if isinstance(store, _ext.Store):
            return
        fs = getattr(store, "fs", None)
        session = getattr(fs, "_session", None)
        if session is None:
            return
    except Exception:  # noqa: BLE001 - teardown must never raise
        return
    try:
        if not getattr(session, "closed", False):
            loop = getattr(session, "_loop", None) or getattr(fs, "_loop", None)
            if loop is not None and loop.is_running() and not loop.is_closed():
                import asyncio

                try:
                    running = asyncio.get_running_loop()
                except RuntimeError:
                    running = None
                if running is not None and running is loop:  # cannot block on our own loop: let it finish there
                    loop.create_task(session.close())
                else:
                    asyncio.run_coroutine_threadsafe(session.close(), loop).result(timeout=10)
    except Exception:  # noqa: BLE001
        pass
    finally:
        try:
            fs._session = None  # type: ignore[union-attr]
        except Exception:  # noqa: BLE001
            pass


__all__ = [
    "Store", "arraylake_store", "as_native_store", "close_store", "ensure_local_dir", "fsspec_store",
    "icechunk_store", "local_store", "memory_store", "obstore_store", "reopen_store", "store",
]
