"""debug_info() of a source build (this checkout's `pip install .`, which the suite runs
against): the build row says "source build", and each linked library's row carries the
version that library reports about itself, read here through ctypes from the very file the
row names (the one this process has mapped, the system's, not a wheel's insitubatch.libs).
The repaired-wheel case is scripts/check_wheel.py's."""

from __future__ import annotations

import ctypes
import io
import os
import platform
import re
import tomllib
from pathlib import Path

import pytest

import insitubatch
from cpu_flags import proc_cpu_flags

# The row's library -> its own version call (restype char*), or None where the library has
# no runtime call (libdeflate: the header's version, compiled in).
VERSION_CALLS = {
    "libcurl": "curl_version",  # "libcurl/7.88.1 OpenSSL/3.0.19 ..."
    "openssl": "OpenSSL_version",  # OpenSSL_version(OPENSSL_VERSION = 0)
    "zstd": "ZSTD_versionString",
    "blosc": "blosc_get_version_string",
    "lz4": "LZ4_versionString",
    "libdeflate": None,
    "zlib": "zlibVersion",
    "bzip2": "BZ2_bzlibVersion",
    "liblzma": "lzma_version_string",
}
ROW = re.compile(r"^(?P<version>\S.*) \((?P<path>/\S+)\)$")


def own_version(path: str, call: str) -> str:
    fn = getattr(ctypes.CDLL(path), call)  # already loaded: dlopen returns the same mapping
    fn.restype = ctypes.c_char_p
    return (fn(0) if call == "OpenSSL_version" else fn()).decode()


def mapped_files() -> set[str]:
    with open("/proc/self/maps") as f:
        return {os.path.realpath(line.split()[-1]) for line in f if line.rstrip().endswith(".so") or ".so." in line}


def test_source_build_reports_itself_and_every_librarys_own_version():
    info = insitubatch.debug_info()
    assert info["build"].startswith("source build ("), info["build"]
    assert "repaired wheel" not in info["build"] and "system libraries" in info["build"]

    rows = {label.strip(): value for label, value in info.items() if label.startswith("  ")}
    assert set(rows) == set(VERSION_CALLS), rows
    mapped = mapped_files()
    for name, call in VERSION_CALLS.items():
        m = ROW.match(rows[name])
        assert m, f"{name}: {rows[name]!r} is not 'VERSION (PATH)'"
        version, path = m["version"], m["path"]
        assert re.search(r"\d+\.\d+", version), (name, version)
        assert os.path.realpath(path) in mapped, f"{name}: {path} is not a file this process has loaded"
        assert "insitubatch.libs" not in path, (name, path)
        if call is None:  # libdeflate: the codecs row reports the same compiled-in version
            assert f"libdeflate {version}" in info["codecs"], (version, info["codecs"])
        elif name == "libcurl":
            assert f"libcurl/{version} " in own_version(path, call) + " ", (version, own_version(path, call))
        else:
            assert version == own_version(path, call), (name, version, own_version(path, call))


def test_the_report_opens_with_the_one_version_pyproject_defines():
    """The version a user upgrading from the original insitubatch 0.2.0 gets: above it, so
    `pip install -U insitubatch` and `insitubatch>=0.2` take this package."""
    version = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]["version"]
    out = io.StringIO()
    insitubatch.print_debug_info(out)
    assert re.match(rf"insitubatch debug info\n  insitubatch +: {re.escape(version)}\n", out.getvalue()), out.getvalue()
    assert insitubatch.__version__ == version
    assert tuple(int(part) for part in version.split(".")) > (0, 2, 0)


def test_the_cpu_paths_are_the_ones_this_cpu_offers():
    """The loops compiled for more than the baseline (CRC-32C on SSE4.2 or ARMv8's CRC32
    extension, the batch copy's AVX2 streaming stores) are taken exactly where the kernel
    lists the feature: the features are read from the CPU, not from a compiler runtime that
    may never fill them in (zig's did not, in the wheels)."""
    flags = proc_cpu_flags()
    if not flags:
        pytest.skip("no CPU flags in /proc/cpuinfo")
    cpu = insitubatch._ext.build_info()["cpu"]
    arm = platform.machine() == "aarch64"
    want = {"sse4.2": not arm and "sse4_2" in flags, "avx2": not arm and "avx2" in flags,
            "arm crc32": arm and "crc32" in flags}
    assert cpu == want, (cpu, sorted(flags & {"sse4_2", "avx2", "crc32"}))
    row = insitubatch.debug_info()["cpu paths"]
    assert ("crc32c sse4.2" in row) == want["sse4.2"], row
    assert ("crc32c armv8 crc32" in row) == want["arm crc32"], row
    assert ("avx2 streaming stores" in row) == want["avx2"], row
