"""The source build's configure step: a machine missing a development package gets one CMake
error naming the package to install (Debian and Fedora names), not a find module's message
or compiler errors. Configures only (seconds); nothing is compiled."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def configure(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(["cmake", "-S", str(REPO), "-B", str(tmp_path / "build"), "-DINSITU_BUILD_TESTS=OFF", *args],
                          capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})})


@pytest.fixture(autouse=True)
def needs_cmake():
    if shutil.which("cmake") is None:
        pytest.skip("cmake not installed")


@pytest.mark.timeout(120)
def test_missing_packages_are_named_with_what_provides_them(tmp_path):
    empty = tmp_path / "no-pkgconfig"
    empty.mkdir()
    # No .pc file is found (zstd, lz4, blosc, libdeflate, lzma), and CURL is switched off.
    out = configure(tmp_path, "-DCMAKE_DISABLE_FIND_PACKAGE_CURL=ON",
                    env={"PKG_CONFIG_LIBDIR": str(empty), "PKG_CONFIG_PATH": ""})
    assert out.returncode != 0
    text = out.stderr
    assert "insitubatch needs these development packages, which were not found" in text, text
    for debian, fedora in [("libzstd-dev", "libzstd-devel"), ("liblz4-dev", "lz4-devel"),
                           ("libblosc-dev", "blosc-devel"), ("libdeflate-dev", "libdeflate-devel"),
                           ("liblzma-dev", "xz-devel"), ("libcurl4-openssl-dev", "libcurl-devel")]:
        assert f"apt install {debian}  |  dnf install {fedora}" in text, (debian, text)
    # What is installed is not listed.
    for present in ("zlib1g-dev", "libssl-dev", "libbz2-dev"):
        assert present not in text


@pytest.mark.timeout(120)
def test_a_machine_with_every_package_configures(tmp_path):
    out = configure(tmp_path)
    assert out.returncode == 0, out.stderr
    assert "development packages" not in out.stderr
