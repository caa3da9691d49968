"""Virtual Zarr stores: chunks that are byte ranges inside other files.

``reference_store(refs, **store_options)`` reads a kerchunk reference set -- JSON version 0
or 1 (templates and ``gen`` included), or the parquet form -- natively: the JSON is parsed
in C++, and each chunk read becomes one ranged read of its target file through the
project's own store for that URL (``file://`` or a path, ``s3://``, ``gs://``,
``http(s)://``), opened with ``store_options`` (credentials, endpoints, timeouts: options a
target's scheme does not take are ignored). VirtualiZarr writes the same formats
(``vds.vz.to_kerchunk(...)``); a virtual xarray Dataset is accepted directly.

Every reference is untrusted: a negative or overflowing offset or length, a range past the
end of its target, a target path with ``..`` segments, or a scheme no store serves is an
error naming the key.
"""

from __future__ import annotations

import base64
import json
import math
import os
from typing import Any
from urllib.parse import urlparse

from . import _ext, arguments, urls
from .errors import InvalidArgumentError, InvalidTypeError, MissingDependencyError, UnsupportedError
from .stores import Store, _ANY_STORE_OPTIONS, store


def reference_store(refs: Any, *, base: str | os.PathLike[str] | None = None, allow_local_targets: bool = False,
                    **store_options: Any) -> Store:
    """A read-only store over the kerchunk references ``refs``.

    ``refs``: a path or URL of a reference JSON file or of a parquet reference directory
    (the one holding ``.zmetadata``); the JSON text as ``bytes``; the references as a
    ``dict``; or a VirtualiZarr virtual ``xarray.Dataset``. Target paths without a scheme
    resolve against ``base`` (default: the directory of the reference file, local or
    remote, else the working directory). ``store_options`` go to the store of every target
    (and of a remote reference file).

    References read from a remote URL may point only at remote targets: a ``file://``
    URL or a path (absolute, or relative to a local ``base``) is refused unless
    ``allow_local_targets=True``, so a reference file someone else serves cannot make this
    process read its local files. References from a local file or held in memory are the
    caller's own and may point anywhere.
    """
    unknown = sorted(set(store_options) - _ANY_STORE_OPTIONS - {"read_only"})
    if unknown:
        raise InvalidArgumentError(f"unknown store option(s) {', '.join(map(repr, unknown))} for reference_store")
    allow_local_targets = arguments.flag("allow_local_targets", allow_local_targets)
    source = refs
    name, refset, default_base, remote = _load(refs, store_options)
    if base is not None:
        default_base = os.fspath(base)
    targets = _open_targets(refset, default_base, store_options, local_ok=allow_local_targets or not remote,
                            source=name)
    native = _ext.open_reference_store(refset, targets, name)
    if isinstance(source, (str, os.PathLike, dict, bytes)):
        recipe_options = {**store_options, **({"base": os.fspath(base)} if base is not None else {}),
                          **({"allow_local_targets": True} if allow_local_targets else {})}
        native._recipe = (os.fspath(source) if isinstance(source, os.PathLike) else source,  # type: ignore[attr-defined]
                          recipe_options)
        native._opener = reference_store  # type: ignore[attr-defined]
    return native


# -- loading the reference set ------------------------------------------------------------------


def _load(refs: Any, options: dict[str, Any]) -> tuple[str, Any, str, bool]:
    """(a name for messages, the parsed ReferenceSet, the base for relative targets, whether
    the references were read from a remote URL)."""
    if isinstance(refs, dict):
        return "<references>", _ext.ReferenceSet.parse_json(_dict_json(refs), "<references>"), os.getcwd(), False
    if isinstance(refs, (bytes, bytearray, memoryview)):
        return "<references>", _ext.ReferenceSet.parse_json(bytes(refs), "<references>"), os.getcwd(), False
    if _is_virtual_dataset(refs):
        as_dict = refs.vz.to_kerchunk(format="dict")
        return ("<virtual dataset>", _ext.ReferenceSet.parse_json(_dict_json(as_dict), "<virtual dataset>"),
                os.getcwd(), False)
    if not isinstance(refs, (str, os.PathLike)) or not os.fspath(refs):
        raise InvalidTypeError("refs must be a path or URL, JSON bytes, a dict of references or a virtual"
                               f" xarray Dataset, got {type(refs).__module__}.{type(refs).__qualname__}")
    location = os.fspath(refs)
    scheme = urls.scheme_of(location)
    if scheme in ("", "file"):
        path = os.path.abspath(urlparse(location).path if scheme else location)
        if os.path.isdir(path):
            return path, _load_parquet(path), os.path.dirname(path), False
        try:
            with open(path, "rb") as f:
                text = f.read()
        except OSError as e:
            raise FileNotFoundError(f"reference file {path}: {e.strerror}") from None
        return path, _ext.ReferenceSet.parse_json(text, path), os.path.dirname(path), False
    parent, _, leaf = location.rstrip("/").rpartition("/")
    remote = store(parent, **options).read(leaf)
    if not isinstance(remote, bytes):  # None: no such object
        raise FileNotFoundError(f"reference file {location} does not exist")
    # Relative targets live beside the reference file, as they do for a local one.
    return location, _ext.ReferenceSet.parse_json(remote, location), parent, True


def _dict_json(refs: dict[str, Any]) -> bytes:
    """JSON text of references held in memory, whose values may be ``bytes`` (kerchunk's
    readers return inline chunks that way): those become ``base64:`` strings."""
    def plain(value: Any) -> Any:
        if isinstance(value, (bytes, bytearray, memoryview)):
            return "base64:" + base64.b64encode(bytes(value)).decode()
        return value

    if "refs" in refs and refs.get("version") == 1:
        refs = {**refs, "refs": {k: plain(v) for k, v in refs["refs"].items()}}
    else:
        refs = {k: plain(v) for k, v in refs.items()}
    try:
        return json.dumps(refs).encode()
    except (TypeError, ValueError) as e:
        raise InvalidArgumentError(f"references must be JSON-serializable: {e}") from None


def _is_virtual_dataset(obj: Any) -> bool:
    return type(obj).__name__ == "Dataset" and hasattr(obj, "data_vars") and hasattr(obj, "vz")


def _load_parquet(root: str) -> Any:
    """The parquet form (fsspec's LazyReferenceMapper): ``.zmetadata`` holds the metadata
    and ``record_size``; ``<array>/refs.<n>.parq`` hold rows (path, offset, size, raw) for the
    array's chunks in C order, ``record_size`` per file."""
    meta_path = os.path.join(root, ".zmetadata")
    try:
        with open(meta_path, "rb") as f:
            meta = json.loads(f.read())
    except OSError:
        raise FileNotFoundError(f"{root} is a directory but not a parquet reference set (no .zmetadata)") from None
    except ValueError as e:
        raise InvalidArgumentError(f"{meta_path}: not valid JSON ({e})") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("metadata"), dict):
        raise InvalidArgumentError(f"{meta_path}: expected {{\"metadata\": {{...}}, \"record_size\": N}}")
    record_size = meta.get("record_size")
    if isinstance(record_size, bool) or not isinstance(record_size, int) or record_size <= 0:
        raise InvalidArgumentError(f"{meta_path}: \"record_size\" must be a positive integer, got {record_size!r}")
    try:
        import pandas as pd
    except ImportError:
        raise MissingDependencyError("parquet references need pandas and fastparquet or pyarrow") from None
    refset = _ext.ReferenceSet()
    for key, value in meta["metadata"].items():
        refset.add_inline(key, (value if isinstance(value, str) else json.dumps(value)).encode())
    for key, value in meta["metadata"].items():
        if not (key == ".zarray" or key.endswith("/.zarray")):
            continue
        array = key[: -len(".zarray")].rstrip("/")
        zarray = json.loads(value) if isinstance(value, str) else value
        shape, chunks = zarray.get("shape"), zarray.get("chunks")
        if not isinstance(shape, list) or not isinstance(chunks, list) or len(shape) != len(chunks) or \
                not all(isinstance(n, int) and n >= 0 for n in shape) or not all(isinstance(c, int) and c > 0 for c in chunks):
            raise InvalidArgumentError(f"{meta_path}: {key} needs integer \"shape\" and positive \"chunks\" of one rank")
        grid = [math.ceil(n / c) for n, c in zip(shape, chunks)]
        total = math.prod(grid)
        separator = zarray.get("dimension_separator") or "."
        prefix = f"{array}/" if array else ""
        for record in range(math.ceil(total / record_size)):
            path = os.path.join(root, array, f"refs.{record}.parq")
            if not os.path.exists(path):
                continue  # a record with no references: its chunks are missing (fill value)
            try:
                frame = pd.read_parquet(path)
            except ImportError as e:
                raise MissingDependencyError(f"reading {path} needs fastparquet or pyarrow: {e}") from None
            except Exception as e:
                raise InvalidArgumentError(f"{path}: not a readable parquet file ({e})") from None
            columns = {c: frame[c].tolist() if c in frame else [None] * len(frame) for c in ("path", "offset", "size", "raw")}
            first = record * record_size
            for row in range(min(len(frame), total - first)):
                index = first + row
                coords = []
                for extent in reversed(grid):
                    coords.append(index % extent)
                    index //= extent
                chunk = separator.join(str(c) for c in reversed(coords)) if grid else "0"
                _add_row(refset, prefix + chunk, columns, row, path)
    return refset


def _add_row(refset: Any, key: str, columns: dict[str, list[Any]], row: int, where: str) -> None:
    raw, url = columns["raw"][row], columns["path"][row]
    if raw is not None and not (isinstance(raw, float) and math.isnan(raw)):
        refset.add_inline(key, bytes(raw))
        return
    if url is None or (isinstance(url, float) and math.isnan(url)) or url == "":
        return  # no reference: the chunk is missing
    offset, size = columns["offset"][row], columns["size"][row]
    try:
        offset, size = int(offset), int(size)
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"{where}: reference {key!r} has offset {offset!r} and size {size!r},"
                                   " not integers") from None
    if offset == 0 and size == 0:
        refset.add_whole(key, str(url))  # fsspec's convention for a whole-file reference
    else:
        refset.add_range(key, str(url), offset, size)


# -- the target stores ------------------------------------------------------------------------


def _open_targets(refset: Any, base: str, options: dict[str, Any], *, local_ok: bool,
                  source: str) -> list[tuple[Store, str]]:
    """One store per bucket, host or local filesystem, and each target's key inside it.
    Every target is checked before any store is opened."""
    stores: dict[str, Store] = {}
    out = []
    split = [_split_target(url, base, refset.first_key_of(i)) for i, url in enumerate(refset.targets)]
    for i, (root, key) in enumerate(split):
        if root == "/" and not local_ok:
            # Nothing about the local file is looked at or said: only what the reference holds.
            raise InvalidArgumentError(
                f"reference {refset.first_key_of(i)!r} points to {refset.targets[i]!r}, a local file, and the"
                f" references come from {source}: remote references may point only at remote targets"
                " (pass allow_local_targets=True to read local files they name)")
        if root not in stores:
            stores[root] = store(root, **options)
        out.append((stores[root], key))
    return out


def _split_target(url: str, base: str, key: str) -> tuple[str, str]:
    def refuse(why: str) -> InvalidArgumentError:
        return InvalidArgumentError(f"reference {key!r} points to {url!r}: {why}")

    scheme = urls.scheme_of(url)
    if scheme in ("", "file"):
        path = urlparse(url).path if scheme else url
        if scheme == "" and "://" not in base and not os.path.isabs(path):
            path = os.path.join(base, path)
        elif scheme == "" and "://" in base and not path.startswith("/"):
            return _split_target(base.rstrip("/") + "/" + path, base, key)
        if ".." in path.split("/"):
            raise refuse("a path with '..' segments")
        return "/", path.lstrip("/")
    kind = urls.SCHEMES.get(scheme)
    if kind in (None, "memory"):
        targets = ", ".join(k for k in dict.fromkeys(urls.SCHEMES.values()) if k != "memory")
        raise UnsupportedError(f"reference {key!r} points to {url!r}: scheme {scheme!r} is not supported"
                               f" ({targets})")
    parsed = urlparse(url)
    if parsed.query or parsed.fragment:
        raise refuse("target URLs with a query string or fragment are not supported")
    path = parsed.path.lstrip("/")
    if not parsed.netloc or not path:
        raise refuse("no bucket or host and object path")
    if ".." in path.split("/"):
        raise refuse("a path with '..' segments")
    return f"{kind}://{parsed.netloc}", path
