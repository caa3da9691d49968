"""Index loading: a CSV (or DataFrame) of object URIs and class labels -> ``(uris, labels)``.

``pack_uris=True`` returns an :class:`S3KeyList`: the URIs' common prefix stored once and
the rest front-coded in native memory (a few bytes per URI), behaving like a list of str.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from insitubatch import _ext, urls
from insitubatch.errors import InvalidArgumentError, InvalidTypeError, NotFoundError


class S3KeyList(Sequence[str]):
    """URIs sharing a prefix, packed natively. Indexing (negative too), slicing (a new
    S3KeyList), iteration, ``len``, equality with any sequence of str, pickling."""

    __slots__ = ("_native",)

    def __init__(self, uris: Iterable[str] | _ext.KeyList = (), prefix: str | None = None) -> None:
        if isinstance(uris, _ext.KeyList):
            self._native = uris
            return
        listed = list(uris) if not isinstance(uris, list) else uris
        if prefix is None:
            prefix = urls.bucket_prefix(listed[0]) if listed else ""
        self._native = _ext.KeyList(prefix)
        try:
            self._native.extend(listed)
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(f"S3KeyList: {exc}") from None

    @property
    def prefix(self) -> str:
        return self._native.prefix

    @property
    def memory_bytes(self) -> int:
        """Native bytes held (the packed URIs and their index)."""
        return self._native.memory_bytes

    @property
    def native(self) -> Any:
        return self._native

    def __len__(self) -> int:
        return len(self._native)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return S3KeyList([self._native[k] for k in range(*i.indices(len(self)))], prefix=self.prefix)
        try:
            return self._native[int(i)]
        except TypeError:
            raise InvalidTypeError(f"S3KeyList indices must be integers or slices, not {type(i).__name__}") from None

    def __iter__(self) -> Iterator[str]:
        native = self._native
        return (native[k] for k in range(len(native)))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, S3KeyList):
            return self._native == other._native or list(self) == list(other)
        if isinstance(other, (list, tuple)):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    def __hash__(self) -> int:  # mutable-free, but equal to lists: unhashable like them
        raise TypeError("unhashable type: 'S3KeyList'")

    def __reduce__(self) -> tuple[Any, tuple[bytes]]:
        return _from_bytes, (self._native.serialize(),)

    def __repr__(self) -> str:
        head = ", ".join(repr(u) for u in (self[k] for k in range(min(2, len(self)))))
        return f"S3KeyList([{head}{', ...' if len(self) > 2 else ''}], {len(self)} URIs, prefix={self.prefix!r})"


def _from_bytes(data: bytes) -> S3KeyList:
    return S3KeyList(_ext.KeyList.deserialize(data))


def _labels_out(labels: Any) -> np.ndarray | None:
    if labels is None:
        return None
    return labels if isinstance(labels, np.ndarray) else np.asarray(labels)


def load_index_csv(path: str | os.PathLike[str], s3_uri_col: str = "s3_uri", class_col: str | None = "label",
                   pack_uris: bool = False,
                   compact_prefix: str | None = None) -> tuple[Any, np.ndarray | None]:
    """``(uris, labels)`` from a CSV with a header row: the ``s3_uri_col`` column and the
    ``class_col`` column (integers become an int64 array, anything else an array of str;
    ``class_col=None`` for no labels: then labels is None)."""
    path = os.fspath(path)
    for name, value in (("s3_uri_col", s3_uri_col), ("class_col", class_col)):
        if value is not None and (not isinstance(value, str) or not value):
            raise InvalidArgumentError(f"{name} must be a column name, got {value!r}")
    if compact_prefix is not None and not pack_uris:
        raise InvalidArgumentError("compact_prefix applies with pack_uris=True")
    if not os.path.isfile(path):
        raise NotFoundError(f"index {path} does not exist")
    uris, labels = _ext.read_csv_index(path, s3_uri_col, class_col or "", bool(pack_uris), compact_prefix)
    if pack_uris:
        uris = S3KeyList(uris)
    return uris, _labels_out(labels)


def load_index_dataframe(df: Any, s3_uri_col: str = "s3_uri", class_col: str | None = "label",
                         pack_uris: bool = False,
                         compact_prefix: str | None = None) -> tuple[Any, np.ndarray | None]:
    """``(uris, labels)`` from a pandas DataFrame's columns (as :func:`load_index_csv`)."""
    columns = list(getattr(df, "columns", ()))
    for col in (s3_uri_col, class_col):
        if col is not None and col not in columns:
            raise InvalidArgumentError(f"the DataFrame has no column {col!r} (its columns: {', '.join(map(str, columns))})")
    if len(df) == 0:
        raise InvalidArgumentError("the DataFrame has no rows")
    uris = [str(u) for u in df[s3_uri_col].tolist()]
    for row, u in enumerate(uris):
        if not u:
            raise InvalidArgumentError(f"row {row}: the {s3_uri_col} value is empty")
    if compact_prefix is not None and not pack_uris:
        raise InvalidArgumentError("compact_prefix applies with pack_uris=True")
    labels = None
    if class_col is not None:
        values = df[class_col].to_numpy()
        labels = values.astype(np.int64) if values.dtype.kind in "iu" else np.asarray([str(v) for v in values])
    if pack_uris:
        prefix = compact_prefix if compact_prefix is not None else urls.bucket_prefix(uris[0])
        return S3KeyList(uris, prefix=prefix), labels
    return uris, labels


__all__ = ["S3KeyList", "load_index_csv", "load_index_dataframe"]
