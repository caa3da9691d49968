"""certifi's CA bundle as the native transport's last resort.

The HTTP(S) stores verify TLS with the bundle the native layer finds (the ``ca_file``
option, SSL_CERT_FILE / SSL_CERT_DIR / CURL_CA_BUNDLE / REQUESTS_CA_BUNDLE / AWS_CA_BUNDLE,
the places the distributions keep theirs); on a system with none, certifi's serves when it
is installed. Found without importing certifi, so ``import insitubatch`` stays cheap.
"""

from __future__ import annotations

import importlib.util
import os


def certifi_bundle() -> str:
    """The path of certifi's ``cacert.pem``, or "" when certifi is not installed."""
    try:
        spec = importlib.util.find_spec("certifi")
    except (ImportError, ValueError):
        return ""
    if spec is None or not spec.origin:
        return ""
    path = os.path.join(os.path.dirname(spec.origin), "cacert.pem")
    return path if os.path.isfile(path) else ""


def register_certifi_bundle() -> str:
    """Tells the native transport about certifi's bundle; returns its path ("" if none)."""
    from . import _ext

    path = certifi_bundle()
    _ext.set_fallback_ca_bundle(path)
    return path
