"""Chunk and batch transforms: scoping, declared reshapes, the StandardScaler (native and
Python paths), decode-once with transforms, and failures reaching the consumer."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import zarr
from zarr.codecs import ZstdCodec

import insitubatch
from insitubatch import InSituDataset, StandardScaler, applies, open_geometries, split_by_chunk


@pytest.fixture
def weather(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "w.zarr"
    src = {
        "t2m": (250 + 10 * rng.standard_normal((40, 3, 4))).astype("f4"),
        "u10": rng.standard_normal((40, 3, 4)).astype("f4"),
        "v10": rng.standard_normal((40, 3, 4)).astype("f8"),
    }
    for name, values in src.items():
        zarr.create_array(zarr.storage.LocalStore(path), name=name, shape=values.shape, chunks=(8, 3, 4),
                          dtype=values.dtype, compressors=[ZstdCodec()], fill_value=0)[...] = values
    store = insitubatch.local_store(path)
    geoms = open_geometries(store)
    manifest = split_by_chunk(geoms["t2m"], fractions=(1.0, 0.0, 0.0))
    return store, geoms, manifest, src


def rows(ds, view="all"):
    return list(getattr(ds, view))


def test_scaler_math_and_save_load(tmp_path):
    s = StandardScaler({"t2m": np.full((1, 1), 250.0)}, {"t2m": np.full((1, 1), 10.0)}, eps=0.0)
    chunk = insitubatch.DecodedChunk(insitubatch.ChunkRead("t2m", 0), np.full((2, 3, 4), 260, "f4"), 0)
    np.testing.assert_allclose(s(chunk).data, 1.0)
    assert s(chunk).data.dtype == np.float32
    s.save(tmp_path / "stats.npz")
    t = StandardScaler.load(tmp_path / "stats.npz", eps=0.0)
    np.testing.assert_array_equal(t.mean["t2m"], s.mean["t2m"])


@pytest.mark.parametrize("scoped", [False, True])
def test_native_scaler_end_to_end(weather, scoped):
    store, geoms, manifest, src = weather
    scaler = StandardScaler({"t2m": 250.0, "u10": 0.0, "v10": 0.0}, {"t2m": 10.0, "u10": 2.0, "v10": 2.0})
    transform = applies(["t2m"], scaler) if scoped else scaler
    ds = InSituDataset(store, manifest, geoms, batch_size=8, shuffle=False, chunk_transforms=[transform])
    assert ds._transform_spec("t2m").kind == "scale"  # runs in C++, no GIL
    for b in rows(ds):
        i = b.sample_indices
        np.testing.assert_allclose(b.arrays["t2m"], (src["t2m"][i] - 250.0) / (10.0 + 1e-8), rtol=1e-6)
        if scoped:
            np.testing.assert_array_equal(b.arrays["u10"], src["u10"][i])  # untouched
        else:
            np.testing.assert_allclose(b.arrays["u10"], src["u10"][i] / 2.0, rtol=1e-6)
        assert b.arrays["v10"].dtype == np.float64


def test_native_scaler_per_grid_point_statistics(weather):
    store, geoms, manifest, src = weather
    mean = src["t2m"].mean(axis=0)  # one statistic per field element: the per-element loop
    std = src["t2m"].std(axis=0) + 1.0
    ds = InSituDataset(store, manifest, {"t2m": geoms["t2m"]}, batch_size=8, shuffle=False,
                       chunk_transforms=[StandardScaler({"t2m": mean}, {"t2m": std})])
    spec = ds._transform_spec("t2m")
    assert spec.kind == "scale" and spec.parameters == mean.size
    for b in rows(ds):
        want = (src["t2m"][b.sample_indices] - mean) / (std + 1e-8)
        np.testing.assert_allclose(b.arrays["t2m"], want, rtol=1e-5, atol=1e-6)


def test_python_transform_runs_once_per_chunk_and_is_cached(weather):
    store, geoms, manifest, src = weather
    calls = []
    lock = threading.Lock()

    def kelvin_to_celsius(chunk):
        with lock:
            calls.append((chunk.read.array, chunk.read.chunk_index, chunk.sample_offset, chunk.data.shape))
        chunk.data = chunk.data - np.float32(273.15)
        return chunk

    ds = InSituDataset(store, manifest, {"t2m": geoms["t2m"]}, batch_size=4, block_chunks=2,
                       cache_budget_bytes=10**6, chunk_transforms=[applies(["t2m"], kelvin_to_celsius)])
    for epoch in range(2):
        ds.set_epoch(epoch)
        for b in ds.train:
            np.testing.assert_array_equal(b.arrays["t2m"], src["t2m"][b.sample_indices] - np.float32(273.15))
    assert sorted(calls) == [("t2m", c, 8 * c, (8, 3, 4)) for c in range(5)]  # once, then cached
    assert ds.last_pass.cache_hits == 5
    assert "kelvin_to_celsius[t2m]" in ds.describe()["config"]["chunk_transforms"]


class MeanOverLastAxis:
    def __call__(self, chunk):
        chunk.data = chunk.data.mean(axis=-1, dtype=np.float64)
        return chunk

    def output_inner(self, geom):
        return geom.inner_shape[:-1], np.float64


def test_reshaping_transform_with_declaration(weather):
    store, geoms, manifest, src = weather
    ds = InSituDataset(store, manifest, {"t2m": geoms["t2m"], "u10": geoms["u10"]}, batch_size=8,
                       shuffle=False, chunk_transforms=[applies(["t2m"], MeanOverLastAxis())])
    assert ds.all.geometries["t2m"].inner_shape == (3,)
    assert ds.all.geometries["t2m"].dtype == np.float64
    assert ds.all.geometries["u10"].inner_shape == (3, 4)  # scoped: geometry untouched
    for b in rows(ds):
        np.testing.assert_allclose(b.arrays["t2m"], src["t2m"][b.sample_indices].mean(-1, dtype=np.float64))
        assert b.arrays["u10"].shape == (8, 3, 4)
    assert ds.describe()["variables"]["t2m"]["output_inner_shape"] == (3,)


def test_output_disagreeing_with_declaration_raises(weather):
    store, geoms, manifest, _ = weather

    class Liar(MeanOverLastAxis):
        def output_inner(self, geom):
            return (2,), np.float64

    ds = InSituDataset(store, manifest, {"t2m": geoms["t2m"]}, batch_size=8, chunk_transforms=[Liar()])
    with pytest.raises(ValueError, match="output_inner must agree"):
        rows(ds, "train")

    def undeclared_reshape(chunk):
        chunk.data = chunk.data[..., :2]
        return chunk

    ds = InSituDataset(store, manifest, {"t2m": geoms["t2m"]}, batch_size=8,
                       chunk_transforms=[undeclared_reshape])
    with pytest.raises(ValueError, match="output_inner must agree"):
        rows(ds, "train")


def test_failing_transform_reraises_the_original_exception_then_recovers(weather):
    store, geoms, manifest, src = weather
    fail = {"on": True}

    def flaky(chunk):
        if fail["on"] and chunk.read.chunk_index == 2:
            raise ZeroDivisionError("flaky transform")
        return chunk

    ds = InSituDataset(store, manifest, {"t2m": geoms["t2m"]}, batch_size=8, shuffle=False,
                       chunk_transforms=[flaky])
    with pytest.raises(ZeroDivisionError, match="flaky transform"):
        rows(ds, "train")
    fail["on"] = False
    assert sum(len(b) for b in ds.train) == 40  # the failed chunk is refetched, not poisoned


def test_applies_validation(weather):
    store, geoms, manifest, _ = weather
    with pytest.raises(TypeError, match="not the string"):
        applies("t2m", MeanOverLastAxis())
    with pytest.raises(ValueError):
        applies([], MeanOverLastAxis())
    scaler = StandardScaler({"t2m": 1.0}, {"t2m": 1.0})
    with pytest.raises(ValueError, match="no statistics"):
        applies(["u10"], scaler)
    with pytest.raises(ValueError, match="nope"):
        InSituDataset(store, manifest, geoms, chunk_transforms=[applies(["nope"], MeanOverLastAxis())])
    with pytest.raises(TypeError):
        InSituDataset(store, manifest, geoms, chunk_transforms=[42])
    assert not hasattr(applies(["t2m"], lambda c: c), "output_inner")
    assert hasattr(applies(["t2m"], MeanOverLastAxis()), "output_inner")


def test_batch_transform_derives_a_field(weather):
    store, geoms, manifest, src = weather

    def wind_speed(batch):
        batch.arrays["wind"] = np.hypot(batch.arrays.pop("u10"), batch.arrays.pop("v10"))
        return batch

    ds = InSituDataset(store, manifest, {"u10": geoms["u10"], "v10": geoms["v10"]}, batch_size=8,
                       batch_transforms=[wind_speed])
    for b in ds.train:
        i = b.sample_indices
        assert set(b.arrays) == {"wind"}
        np.testing.assert_allclose(b.arrays["wind"], np.hypot(src["u10"][i], src["v10"][i]))


@pytest.mark.parametrize("codec", ["zstd", "blosc"])
@pytest.mark.parametrize("per_point", [False, True])
def test_native_scaler_fused_into_decode_is_exact(tmp_path, codec, per_point):
    # Chunks of 8 x 64 x 512 float32 (1 MiB): zstd hands the scaler dozens of pieces as they
    # decode; blosc reports the whole chunk once. 20 samples: the last chunk is an edge chunk,
    # and chunk 1 is never written (fill value), so it is scaled after FillChunk instead.
    rng = np.random.default_rng(1)
    values = (280 + 5 * rng.standard_normal((20, 64, 512))).astype("f4")
    compressor = ZstdCodec(level=1) if codec == "zstd" else zarr.codecs.BloscCodec(cname="lz4")
    arr = zarr.create_array(zarr.storage.LocalStore(tmp_path / "s.zarr"), name="t", shape=values.shape,
                            chunks=(8, 64, 512), dtype="f4", compressors=[compressor], fill_value=271.5)
    arr[0:8] = values[0:8]
    arr[16:20] = values[16:20]
    src = values.copy()
    src[8:16] = 271.5
    mean = src.mean(axis=0) if per_point else 280.0
    std = src.std(axis=0) + 0.5 if per_point else 5.0
    store = insitubatch.local_store(tmp_path / "s.zarr")
    geoms = open_geometries(store)
    ds = InSituDataset(store, split_by_chunk(geoms["t"], fractions=(1.0, 0.0, 0.0)), geoms, batch_size=6,
                       chunk_transforms=[StandardScaler({"t": mean}, {"t": std}, eps=1e-3)])
    # The native loop computes (x - mean) * scale in float32 with scale = 1 / (std + eps).
    m32 = np.asarray(mean, dtype=np.float32)
    s32 = (1.0 / (np.asarray(std, dtype=np.float64) + 1e-3)).astype(np.float32)
    seen = 0
    for epoch in range(2):  # epoch 2 is served from the pool: scaled once, not twice
        ds.set_epoch(epoch)
        for b in ds.train:
            np.testing.assert_array_equal(b.arrays["t"], (src[b.sample_indices] - m32) * s32)
            seen += len(b)
    assert seen == 40


def _one_array_store(tmp_path, values, chunks, compressor=None):
    zarr.create_array(zarr.storage.LocalStore(tmp_path / "p.zarr"), name="v", shape=values.shape, chunks=chunks,
                      dtype=values.dtype, compressors=[compressor or ZstdCodec(level=1)],
                      fill_value=0)[...] = values
    store = insitubatch.local_store(tmp_path / "p.zarr")
    geoms = open_geometries(store)
    return store, geoms, split_by_chunk(geoms["v"], fractions=(1.0, 0.0, 0.0))


@pytest.mark.parametrize("dtype", [None, "f8"])
def test_scale_offset_unpacks_int16_natively_and_exactly(tmp_path, dtype):
    rng = np.random.default_rng(2)
    packed = rng.integers(-32000, 32000, size=(36, 16, 24), dtype="i2")  # CF packed temperature
    store, geoms, manifest = _one_array_store(tmp_path, packed, (8, 16, 24))
    t = insitubatch.ScaleOffset({"v": 0.0021}, {"v": 250.3}, dtype=dtype)
    ds = InSituDataset(store, manifest, geoms, batch_size=5, chunk_transforms=[t])
    out = np.dtype(dtype or "f4")
    assert ds._transform_spec("v").kind == "affine"
    assert ds.train.geometries["v"].dtype == out
    for b in ds.train:
        want = packed[b.sample_indices].astype(out) * out.type(0.0021) + out.type(250.3)
        assert b.arrays["v"].dtype == out
        np.testing.assert_array_equal(b.arrays["v"], want)


def test_scale_offset_on_float32_is_fused_into_decode_and_exact(tmp_path):
    values = (280 + 5 * np.random.default_rng(3).standard_normal((20, 64, 512))).astype("f4")
    store, geoms, manifest = _one_array_store(tmp_path, values, (8, 64, 512))
    ds = InSituDataset(store, manifest, geoms, batch_size=6,
                       chunk_transforms=[insitubatch.ScaleOffset({"v": 1.8}, {"v": -459.67})])  # K -> F
    for epoch in range(2):  # the second epoch comes from the pool: converted once
        ds.set_epoch(epoch)
        for b in ds.train:
            want = values[b.sample_indices] * np.float32(1.8) + np.float32(-459.67)
            np.testing.assert_array_equal(b.arrays["v"], want)


@pytest.mark.parametrize("src,dst,native", [("f8", "f4", True), ("i4", "f4", True), ("u2", "i8", True),
                                            ("i2", "f8", True), ("f4", "i2", False), ("i8", "i4", False)])
def test_cast_native_where_defined_for_every_value(tmp_path, src, dst, native):
    rng = np.random.default_rng(4)
    values = (rng.standard_normal((24, 6, 10)) * 1000).astype(src)
    store, geoms, manifest = _one_array_store(tmp_path, values, (8, 6, 10))
    ds = InSituDataset(store, manifest, geoms, batch_size=7, chunk_transforms=[insitubatch.Cast(dst)])
    assert (ds._transform_spec("v").kind == "cast") == native
    for b in ds.train:
        assert b.arrays["v"].dtype == np.dtype(dst)
        np.testing.assert_array_equal(b.arrays["v"], values[b.sample_indices].astype(dst))


def test_a_persisted_partial_chunk_holds_no_recycled_memory(tmp_path):
    """The rows past the array's end in its last chunk, after a transform that writes a new
    buffer (a cast), are zeros in the cache file: never the recycled memory the buffer held
    (the test process poisons every buffer, so stale bytes would show as 0xA5)."""
    values = np.random.default_rng(6).standard_normal((10, 3)).astype("f4")  # chunks of 4: the last holds 2
    store, geoms, manifest = _one_array_store(tmp_path, values, (4, 3))
    cache = tmp_path / "cache"
    ds = InSituDataset(store, manifest, geoms, batch_size=5, cache_dir=str(cache), persist=True,
                       chunk_transforms=[insitubatch.Cast("f8")])
    assert sum(len(b) for b in ds.train) == 10
    ds.close()
    slots = [np.load(f).reshape(4, 3) for f in sorted(cache.rglob("*.npy"))]
    last = [s for s in slots if np.array_equal(s[:2], values[8:].astype("f8"))]
    assert len(slots) == 3 and len(last) == 1
    np.testing.assert_array_equal(last[0][2:], np.zeros((2, 3)), strict=True)


def test_scale_offset_scope_and_arguments_are_checked():
    with pytest.raises(insitubatch.InvalidArgumentError, match="no scale/offset for"):
        applies(["u10"], insitubatch.ScaleOffset({"t2m": 1.0}, {"t2m": 0.0}))
    with pytest.raises(insitubatch.InvalidArgumentError, match="same arrays"):
        insitubatch.ScaleOffset({"t2m": 1.0}, {"u10": 0.0})
    with pytest.raises(insitubatch.InvalidArgumentError, match="float type"):
        insitubatch.ScaleOffset({"t2m": 1.0}, {"t2m": 0.0}, dtype="i4")


def test_native_transform_arguments_are_checked():
    with pytest.raises(TypeError, match="not understood"):
        insitubatch.Cast("not-a-dtype")
    from insitubatch import _ext

    with pytest.raises(insitubatch.InvalidArgumentError, match="concurrency"):
        _ext.read_throughput(_ext.MemoryStore(), ["k"], 0, 1)
