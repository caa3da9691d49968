"""Hand-off of numpy :class:`~insitubatch.Batch` objects to PyTorch, JAX and TensorFlow.

Each adapter imports its framework on first call, never at import time: importing
insitubatch (or this package) pulls in no framework, and a missing one raises an
ImportError that names the extra to install. Install one framework per environment —
torch, JAX and TensorFlow load duplicate OpenMP/XLA/protobuf runtimes.
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np

from ..errors import InvalidTypeError, MissingDependencyError

_FRAMEWORKS = {
    # module -> (display name, extra)
    "torch": ("PyTorch", "torch"),
    "jax": ("JAX", "jax"),
    "tensorflow": ("TensorFlow", "tf"),
    "ray": ("Ray Data", "ray"),
}

# Public adapter -> the submodule that defines it (loaded on first attribute access).
_ADAPTERS = {
    "to_torch": "torch",
    "as_torch": "torch",
    "to_jax": "jax",
    "to_global_jax": "jax",
    "to_tf": "tf",
    "as_tf_dataset": "tf",
    "read_insitu": "ray",
}


def require(module: str) -> Any:
    """Imports a framework module, or raises an ImportError naming the extra to install."""
    name, extra = _FRAMEWORKS[module.partition(".")[0]]
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependencyError(
            f"insitubatch.frameworks needs {name}; install it with: pip install 'insitubatch[{extra}]'"
            f" (importing {module!r} failed: {exc})"
        ) from exc


def model_arrays(batch: Any) -> dict[str, np.ndarray]:
    """The arrays an adapter converts: ``batch.arrays`` only — ``sample_indices`` and
    ``offsets`` are bookkeeping and stay on the numpy Batch. A record (structured) array,
    which no framework takes, goes out as one array per field, ``"label.field"``; a
    datetime64 / timedelta64 array as its int64 counts of its unit."""
    arrays = getattr(batch, "arrays", None)
    if not isinstance(arrays, dict):
        raise InvalidTypeError(f"expected an insitubatch Batch (with .arrays), got {type(batch).__name__}")
    if not any(a.dtype.names or a.dtype.kind in "MmSUO" for a in arrays.values()):
        return arrays
    out: dict[str, np.ndarray] = {}
    for label, arr in arrays.items():
        if arr.dtype.kind in "SUO":
            raise InvalidTypeError(
                f"{label!r} holds text ({arr.dtype}): a framework cannot take it; drop it or encode it"
                " (e.g. as class codes) in a batch transform")
        if arr.dtype.kind in "Mm":  # datetime64 / timedelta64: their int64 counts of the unit
            out[label] = arr.view(np.int64)
            continue
        if not arr.dtype.names:
            out[label] = arr
            continue
        for name, dtype, _ in record_fields(label, arr.dtype):
            out[f"{label}.{name}"] = owned_copy(arr[name])  # strided inside the record: copied
    return out


def record_fields(label: str, dtype: np.dtype) -> list[tuple[str, np.dtype, tuple[int, ...]]]:
    """``(field, dtype, subarray shape)`` of a record type's fields, refusing the ones no
    framework can hold (raw bytes, nested records) by name."""
    fields = []
    for name, spec in (dtype.fields or {}).items():
        field = spec[0]
        base = field.base
        if base.kind not in "biufc" or base.names:
            raise InvalidTypeError(
                f"field {name!r} of {label!r} is {field} (not numeric): a framework cannot take it;"
                " drop or convert it in a batch transform")
        fields.append((name, base, tuple(field.shape)))
    return fields


def owned_copy(arr: np.ndarray) -> np.ndarray:
    """A C-contiguous, native-byte-order, writable copy, for the arrays DLPack cannot
    export as they are (read-only, byte-swapped or strided output of a batch transform)."""
    return np.array(arr, dtype=arr.dtype.newbyteorder("="), order="C", copy=True)


def default_pin_budget_bytes() -> int:
    """1/8 of the memory this process may use (the engine's figure and fraction, from
    engine/sizing: a container's cgroup limit where lower than physical RAM)."""
    from .. import _ext

    return int(_ext.pin_budget_bytes())


def __getattr__(name: str) -> Any:
    module = _ADAPTERS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_ADAPTERS])


__all__ = ["as_tf_dataset", "as_torch", "read_insitu", "to_global_jax", "to_jax", "to_tf", "to_torch"]
