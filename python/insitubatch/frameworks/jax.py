"""JAX adapter.

On XLA:CPU a batch array becomes a ``jax.Array`` through DLPack with no copy — XLA aliases
a host buffer only when it is suitably aligned, which the engine's 128-byte-aligned batch
buffers are. JAX keeps the numpy array (and so the buffer) alive while the jax.Array
lives. On an accelerator the array is copied there by ``jax.device_put``. JAX gets no
pinned memory: it cannot consume it and exposes no event to gate buffer recycling on.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import model_arrays, owned_copy, require


def _jax() -> Any:
    return require("jax")


def _resolve_device(jax: Any, device: Any) -> Any:
    if device is None:
        return jax.devices()[0]
    if isinstance(device, str):  # "cpu", "gpu", "cpu:1"
        platform, _, index = device.partition(":")
        return jax.devices(platform)[int(index or 0)]
    return device


def _to_device(jax: Any, arr: np.ndarray, device: Any) -> Any:
    if device.platform == "cpu":
        try:
            x = jax.dlpack.from_dlpack(arr)
        except (BufferError, TypeError, RuntimeError, ValueError):
            # Read-only, byte-swapped or strided arrays (batch-transform output).
            x = jax.dlpack.from_dlpack(owned_copy(arr))
        if x.devices() == {device}:
            return x
        return jax.device_put(x, device)
    return jax.device_put(arr, device)


def to_jax(batch: Any, device: Any = None) -> dict[str, Any]:
    """``{label: jax.Array}`` for a Batch's model-input arrays, on ``jax.devices()[0]``
    like any JAX array unless ``device=`` (a ``jax.Device`` or a string such as ``"cpu"``)
    says otherwise. Zero copy on XLA:CPU."""
    jax = _jax()
    require("jax.dlpack")
    target = _resolve_device(jax, device)
    return {label: _to_device(jax, arr, target) for label, arr in model_arrays(batch).items()}


def to_global_jax(batch: Any, sharding: Any) -> dict[str, Any]:
    """``{label: jax.Array}`` of the *global* batch of a multi-process job: each process
    hands its own rank's batch (a dataset with ``world_size`` = ``jax.process_count()``, so
    every process has the same number of rows each step) and gets arrays of the global
    shape, sharded by ``sharding`` (e.g. ``NamedSharding(mesh, P("data"))``) across every
    process's devices, through ``jax.make_array_from_process_local_data``. The leading axis
    of the global arrays is the processes' batches in process order."""
    jax = _jax()
    out = {}
    for label, arr in model_arrays(batch).items():
        local = np.ascontiguousarray(arr)
        global_shape = (local.shape[0] * jax.process_count(), *local.shape[1:])
        out[label] = jax.make_array_from_process_local_data(sharding, local, global_shape)
    return out


__all__ = ["to_global_jax", "to_jax"]
