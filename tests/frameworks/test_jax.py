"""The JAX adapter against real JAX on XLA:CPU: zero copy through DLPack, buffer lifetime,
device placement, and a hand-written linear model that learns from a store."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

jax = pytest.importorskip("jax")

import jax.numpy as jnp  # noqa: E402
from fwtest_util import expected, first_batch, run_without  # noqa: E402

from insitubatch import Batch, to_jax  # noqa: E402


def jax_dtype(dtype: np.dtype) -> np.dtype:
    """What JAX makes of a numpy dtype: 64-bit types narrow unless jax_enable_x64."""
    return jnp.asarray(np.zeros(1, dtype)).dtype


def test_to_jax_is_zero_copy_with_exact_values(mixed):
    open_dataset, sources = mixed
    batch = first_batch(open_dataset().train)
    arrays = to_jax(batch)
    assert set(arrays) == set(batch.arrays) == set(sources)
    device = jax.devices()[0]
    for label, x in arrays.items():
        arr = batch.arrays[label]
        assert isinstance(x, jax.Array)
        assert x.devices() == {device}
        assert x.shape == arr.shape == (6, *sources[label].shape[1:])
        assert x.dtype == jax_dtype(arr.dtype)
        want = expected(sources, batch, label)
        if x.dtype == arr.dtype:  # XLA:CPU aliases the 128-byte-aligned batch buffer
            assert x.unsafe_buffer_pointer() == arr.ctypes.data
            np.testing.assert_array_equal(np.asarray(x), want, strict=True)
        else:  # int64 without jax_enable_x64: JAX's own narrowing, hence a copy
            np.testing.assert_array_equal(np.asarray(x), want.astype(x.dtype), strict=True)
    assert arrays["x"].unsafe_buffer_pointer() == batch.arrays["x"].ctypes.data


def test_device_argument(mixed):
    open_dataset, _ = mixed
    batch = first_batch(open_dataset().val)
    cpu = jax.devices("cpu")[0]
    for device in (cpu, "cpu", "cpu:0"):
        x = to_jax(batch, device=device)["x"]
        assert x.devices() == {cpu}
        assert x.unsafe_buffer_pointer() == batch.arrays["x"].ctypes.data


def test_array_outlives_dataset_and_batch(mixed):
    open_dataset, sources = mixed
    ds = open_dataset()
    batch = first_batch(ds.train)
    want = expected(sources, batch, "x")
    x = to_jax(batch)["x"]
    ptr = x.unsafe_buffer_pointer()
    probe = weakref.ref(batch.arrays["x"])
    del ds, batch
    gc.collect()
    assert probe() is not None  # JAX holds the numpy array through DLPack
    for b in open_dataset().all:  # churn: freed batch memory would be overwritten here
        b.arrays["x"][...] = -1.0
    assert x.unsafe_buffer_pointer() == ptr
    np.testing.assert_array_equal(np.asarray(x), want, strict=True)
    assert float(jnp.sum(x)) == pytest.approx(float(want.sum()), rel=1e-5)
    del x
    gc.collect()
    assert probe() is None


def test_transform_output_dlpack_refuses_is_copied():
    base = np.arange(24, dtype="f4").reshape(4, 6)
    readonly = base.copy()
    readonly.setflags(write=False)
    arrays = to_jax(Batch({"s": base.astype(">f4"), "t": base[:, ::2], "r": readonly}, np.arange(4)))
    np.testing.assert_array_equal(np.asarray(arrays["s"]), base)
    np.testing.assert_array_equal(np.asarray(arrays["t"]), base[:, ::2])
    np.testing.assert_array_equal(np.asarray(arrays["r"]), base)


def test_linear_model_learns_from_the_store(linear):
    ds = linear()

    def loss_fn(params, features, target):
        w, b = params
        return jnp.mean((features @ w + b - target) ** 2)

    @jax.jit
    def step(params, features, target):
        loss, grads = jax.value_and_grad(loss_fn)(params, features, target)
        return [p - 0.05 * g for p, g in zip(params, grads)], loss

    params = [jnp.zeros((4, 1), jnp.float32), jnp.zeros((1,), jnp.float32)]
    losses = []
    for epoch in range(4):
        ds.set_epoch(epoch)
        for batch in ds.train:
            jb = to_jax(batch)
            params, loss = step(params, jb["features"], jb["target"])
            losses.append(float(loss))
    assert len(losses) == 4 * len(ds.train)
    assert np.mean(losses[-3:]) < 0.01 * np.mean(losses[:3])
    val = [float(loss_fn(params, jb["features"], jb["target"])) for jb in map(to_jax, ds.val)]
    assert max(val) < 0.01


def test_missing_jax_names_the_extra():
    message = run_without("jax", "insitubatch.to_jax(batch)")
    assert "insitubatch.frameworks needs JAX; install it with: pip install 'insitubatch[jax]'" in message


def test_not_a_batch():
    with pytest.raises(TypeError, match="Batch"):
        to_jax({"x": np.zeros(3)})


JAX_PROCESS = '''
import sys
import numpy as np
import jax
jax.config.update("jax_cpu_collectives_implementation", "gloo")
process, port, store_path = int(sys.argv[1]), sys.argv[2], sys.argv[3]
jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=process)
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import insitubatch as ib

def open_rank(rank=None, world_size=None):
    geoms = ib.open_geometries(store_path, ["x"])
    manifest = ib.split_by_chunk(geoms["x"], fractions=(1.0, 0.0, 0.0))
    return ib.InSituDataset(store_path, manifest, geometries=geoms, batch_size=4, block_chunks=1, seed=6,
                            rank=rank, world_size=world_size)

ds = open_rank()  # rank and world size from JAX's process index and count
assert (ds.rank, ds.world_size) == (process, 2), (ds.rank, ds.world_size)
others = [open_rank(r, 2) for r in range(2)]  # every rank's batches, to check the global array
sharding = NamedSharding(Mesh(np.array(jax.devices()), ("data",)), P("data"))
steps = 0
for batch, *locals_ in zip(ds.train, *(o.train for o in others)):
    x = ib.to_global_jax(batch, sharding)["x"]
    assert x.shape == (8, 3) and not x.is_fully_addressable
    whole = multihost_utils.process_allgather(x, tiled=True)
    np.testing.assert_array_equal(whole, np.concatenate([b.arrays["x"] for b in locals_]))
    steps += 1
assert steps == len(ds.train) > 0
print("ok", process, steps, flush=True)
'''


def test_two_processes_assemble_global_arrays(tmp_path):
    import socket
    import subprocess
    import sys

    import zarr

    root = zarr.open_group(str(tmp_path / "s.zarr"), mode="w", zarr_format=3)
    root.create_array("x", shape=(45, 3), chunks=(5, 3), dtype="f4")[...] = np.arange(135, dtype="f4").reshape(45, 3)
    script = tmp_path / "proc.py"
    script.write_text(JAX_PROCESS)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [subprocess.Popen([sys.executable, str(script), str(i), str(port), str(tmp_path / "s.zarr")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    try:
        outs = [p.communicate(timeout=180) for p in procs]
    finally:
        for p in procs:  # one that waits on its peer forever must not outlive the test
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
        assert out.splitlines()[-1].startswith("ok")  # gloo prints its own lines before
