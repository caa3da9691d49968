"""The one table of URL schemes both packages read (held by the native core, whose Azure URL
parser reads the same aliases), and the one parser of a URL's scheme.

``insitubatch.store`` dispatches on it, ``reference_store`` checks each target's scheme
against it and planfetch's ``SharedDiskCache`` opens its buckets' stores through it. A
bucket's prefix (``scheme://bucket/``, the part every object of one bucket shares) is the
core's ``BucketPrefix``, which planfetch's CSV index also uses: one rule for both.
"""

from __future__ import annotations

from urllib.parse import urlparse

from . import _ext

#: A scheme as written -> the scheme of the store that serves it. "" is a plain path. The
#: native core holds the table (its Azure URL parser reads the same aliases).
SCHEMES: dict[str, str] = dict(_ext.store_schemes())

#: What error messages list as supported: the store schemes, in the table's order.
SUPPORTED = ", ".join(dict.fromkeys(SCHEMES.values()))


def scheme_of(url: str) -> str:
    """The URL's scheme in lower case; "" for a plain path (no ``://``)."""
    return urlparse(url).scheme.lower() if "://" in url else ""


def is_azure_blob_url(url: str) -> bool:
    """An ``https://<account>.blob.core.windows.net/...`` (or ``.dfs.``) URL: an Azure store."""
    host = (urlparse(url).hostname or "").lower()
    return host.endswith((".blob.core.windows.net", ".dfs.core.windows.net"))


def store_scheme(url: str) -> str | None:
    """The scheme of the store that serves ``url`` ("file", "memory", "http", "https",
    "s3", "gs" or "az"), or None when no store does."""
    scheme = SCHEMES.get(scheme_of(url))
    if scheme == "https" and is_azure_blob_url(url):
        return "az"
    return scheme


def bucket_prefix(uri: str) -> str:
    """``scheme://bucket/`` of an object URI (``file:///`` for every local path): what
    every URI of one bucket starts with. InvalidArgumentError when ``uri`` names no bucket
    and key."""
    return str(_ext.bucket_prefix(uri))


__all__ = ["SCHEMES", "SUPPORTED", "bucket_prefix", "is_azure_blob_url", "scheme_of", "store_scheme"]
