"""print_debug_info(): the facts a bug report needs, without importing any framework
(versions come from installed metadata only: importing two frameworks can crash)."""

from __future__ import annotations

import os
import platform
import sys
from collections import OrderedDict
from typing import Any
from importlib import metadata

_STACK = ("zarr", "numpy", "xarray", "obstore", "numcodecs")
_OPTIONAL = ("torch", "jax", "tensorflow", "tensorflow-cpu", "icechunk", "virtualizarr", "kerchunk",
             "fsspec", "gcsfs", "s3fs", "cloudpickle", "cupy", "kvikio")


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def _free_threading() -> str:
    if not getattr(sys, "_is_gil_enabled", None) or not hasattr(sys, "_is_gil_enabled"):
        return "GIL build (not free-threaded)"
    import sysconfig

    if not sysconfig.get_config_var("Py_GIL_DISABLED"):
        return "GIL build (not free-threaded)"
    return f"free-threaded build, GIL currently {'ON' if sys._is_gil_enabled() else 'OFF'}"


def _wheel_tag() -> str:
    """The installed wheel's platform tag (auditwheel rewrites it to manylinux_*), or ""."""
    try:
        wheel = metadata.distribution("insitubatch").read_text("WHEEL") or ""
    except metadata.PackageNotFoundError:
        return ""
    tags = [line.split(":", 1)[1].strip() for line in wheel.splitlines() if line.startswith("Tag:")]
    return tags[0].rsplit("-", 1)[-1] if tags else ""


def _build_kind(build: dict[str, Any]) -> str:
    """A repaired wheel (its libraries loaded from the wheel's insitubatch.libs) or a source build."""
    ext_dir = os.path.dirname(os.path.realpath(str(build["extension_path"])))
    bundled = os.path.join(os.path.dirname(ext_dir), "insitubatch.libs")
    libs = build["libraries"]
    inside = [lib["name"] for lib in libs if os.path.realpath(str(lib["path"])).startswith(bundled + os.sep)]
    tag = _wheel_tag()
    if inside:
        return (f"repaired wheel ({tag or 'tag unknown'}): {len(inside)} of {len(libs)} libraries"
                f" bundled in {bundled}")
    static = "static C++ runtime, " if build["portable_wheel_build"] else ""
    return f"source build ({static}{build['build_type']}, system libraries; wheel tag {tag or 'none'})"


def _cpu_paths(cpu: dict[str, bool]) -> str:
    """Which of the loops compiled for more than the architecture's baseline this machine takes."""
    crc = "sse4.2" if cpu["sse4.2"] else "armv8 crc32" if cpu["arm crc32"] else "tables"
    copy = "avx2 streaming stores" if cpu["avx2"] else "memcpy"
    return f"crc32c {crc}, batch copy {copy}"


def _ca_bundle() -> str:
    """What a store opened now verifies TLS servers with, or why none can be chosen."""
    from . import _ext

    try:
        return str(_ext.find_ca_bundle()["description"])
    except Exception as error:  # a variable naming a missing file: the report says so
        return f"error: {error}"


def debug_info() -> "OrderedDict[str, str]":
    """The debug report as an ordered dict of ``label -> value``."""
    from . import __version__, _ext

    info: OrderedDict[str, str] = OrderedDict()
    info["insitubatch"] = __version__
    info["python"] = f"{platform.python_version()} ({platform.python_implementation()})"
    info["free-threading"] = _free_threading()
    info["platform"] = platform.platform()
    info["cpus"] = str(os.cpu_count())
    build = _ext.build_info()
    info["compiler"] = f"{build['compiler']} ({build['build_type']}, C++ {build['cxx_standard']})"
    info["nanobind"] = build["nanobind"]
    info["extension free-threading"] = "yes" if build["free_threading"] else "no"
    info["codecs"] = ", ".join(f"{k} {build[k]}" for k in ("zstd", "blosc", "lz4", "libdeflate", "zlib"))
    info["build"] = _build_kind(build)
    for lib in build["libraries"]:
        path = os.path.normpath(lib["path"]) if lib["path"] else "linked in"
        info[f"  {lib['name']}"] = f"{lib['version']} ({path})"
    info["cpu paths"] = _cpu_paths(build["cpu"])
    info["TLS CA bundle"] = _ca_bundle()
    for dist in _STACK:
        info[dist] = _version(dist)
    for dist in _OPTIONAL:
        info[dist] = _version(dist)
    return info


def print_debug_info(file: Any = None) -> None:
    """Prints :func:`debug_info` as aligned ``label : value`` rows."""
    info = debug_info()
    width = max(len(k) for k in info)
    lines = ["insitubatch debug info"]
    lines += [f"  {k.ljust(width)} : {v}" for k, v in info.items()]
    print("\n".join(lines), file=file or sys.stdout)


__all__ = ["debug_info", "print_debug_info"]
