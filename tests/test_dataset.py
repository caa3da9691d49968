"""InSituDataset end to end over stores written by zarr-python 3: every batch value equals
the source at read_indices (exact), sample-once and read-once per epoch (counted at the
store), splits, determinism, windows, mixed chunking, sample axes, failures, memory."""

from __future__ import annotations

import gc
import logging

import numpy as np
import pytest
import zarr
from zarr.codecs import ZstdCodec

import insitubatch
from insitubatch import InSituDataset, _ext, open_geometries, split_by_chunk


def write(tmp_path, arrays: dict, fmt=3):
    """arrays: name -> (values, chunks[, sample_axis ignored]); returns (path, sources)."""
    import numcodecs

    path = tmp_path / "s.zarr"
    compressor = [ZstdCodec(level=1)] if fmt == 3 else numcodecs.Zstd(level=1)
    for name, (values, chunks) in arrays.items():
        arr = zarr.create_array(zarr.storage.LocalStore(path), name=name, shape=values.shape, chunks=chunks,
                                dtype=values.dtype, compressors=compressor, zarr_format=fmt,
                                fill_value=0)
        arr[...] = values
    return path


def counting(path):
    return _ext.CountingStore(insitubatch.local_store(path))


def field(n, inner=(3, 4), seed=0, dtype="f4", base=0.0):
    rng = np.random.default_rng(seed)
    return (base + rng.standard_normal((n, *inner))).astype(dtype)


def collect(view):
    batches = list(view)
    return batches


def check_values(batches, sources, sample_axes=None):
    for b in batches:
        for label, arr in b.arrays.items():
            src = sources[label]
            axis = (sample_axes or {}).get(label, 0)
            expect = np.take(src, b.read_indices(label), axis=axis)
            expect = np.moveaxis(expect, axis, 0)
            np.testing.assert_array_equal(arr, expect, err_msg=label, strict=True)
            assert arr.ctypes.data % 128 == 0


@pytest.fixture
def era(tmp_path):
    t2m = field(80, seed=1)
    path = write(tmp_path, {"t2m": (t2m, (8, 3, 4))})
    return path, t2m


def test_quickstart_shape_and_exact_values(era):
    path, t2m = era
    store = counting(path)
    geoms = open_geometries(store, variables=["t2m"])
    manifest = split_by_chunk(geoms["t2m"], fractions=(0.8, 0.1, 0.1))
    ds = InSituDataset(store, manifest, geometries=geoms, batch_size=6, block_chunks=3)
    for epoch in range(2):
        ds.set_epoch(epoch)
        train = collect(ds.train)
        check_values(train, {"t2m": t2m})
        seen = np.concatenate([b.sample_indices for b in train])
        assert sorted(seen.tolist()) == list(range(64))  # sample-once: chunks 0..7
        assert [len(b) for b in train] == [6] * 10 + [4]  # only the last batch is short
        val = collect(ds.val)
        check_values(val, {"t2m": t2m})
        assert np.concatenate([b.sample_indices for b in val]).tolist() == list(range(64, 72))
    ds.close()


def test_read_once_per_epoch_counted_at_the_store(era):
    path, _ = era
    store = counting(path)
    geoms = open_geometries(store, ["t2m"])
    ds = InSituDataset(store, split_by_chunk(geoms["t2m"]), geoms, batch_size=1, block_chunks=2)
    store.reset()
    collect(ds.train)
    reads = store.reads()
    assert len(reads) == 8 and set(reads.values()) == {1}
    assert ds.last_pass.cache_misses == 8


def test_second_epoch_hits_with_a_budget_that_holds_the_split(era):
    path, _ = era
    store = counting(path)
    geoms = open_geometries(store, ["t2m"])
    g = geoms["t2m"]
    ds = InSituDataset(store, split_by_chunk(g), geoms, batch_size=8, block_chunks=2,
                       cache_budget_bytes=10 * g.chunk_bytes)
    collect(ds.train)
    store.reset()
    ds.set_epoch(1)
    collect(ds.train)
    assert store.total_reads == 0
    assert ds.last_pass.cache_hits == 8 and ds.last_pass.hit_rate == 1.0


def test_splits_disjoint_all_is_union_and_val_ignores_epoch(era):
    path, t2m = era
    store = insitubatch.local_store(path)
    geoms = open_geometries(store, ["t2m"])
    ds = InSituDataset(store, split_by_chunk(geoms["t2m"], contiguous=False, seed=3), geoms, batch_size=5)
    got = {}
    for split in ("train", "val", "test", "all"):
        batches = collect(getattr(ds, split))
        check_values(batches, {"t2m": t2m})
        got[split] = np.concatenate([b.sample_indices for b in batches]).tolist()
    assert not set(got["train"]) & set(got["val"])
    assert not set(got["val"]) & set(got["test"])
    assert sorted(got["train"] + got["val"] + got["test"]) == got["all"] == list(range(80))
    ds.set_epoch(5)
    assert np.concatenate([b.sample_indices for b in ds.val]).tolist() == got["val"]


def test_deterministic_per_seed_and_epoch(era):
    path, _ = era
    store = insitubatch.local_store(path)
    geoms = open_geometries(store, ["t2m"])

    def order(seed, epoch):
        ds = InSituDataset(store, split_by_chunk(geoms["t2m"]), geoms, batch_size=4, block_chunks=4, seed=seed)
        ds.set_epoch(epoch)
        return np.concatenate([b.sample_indices for b in ds.train]).tolist()

    assert order(0, 0) == order(0, 0)
    assert order(0, 0) != order(0, 1)
    assert order(0, 0) != order(1, 0)
    assert order(0, 0) != sorted(order(0, 0))


def test_shuffle_false_is_sequential(era):
    path, t2m = era
    store = insitubatch.local_store(path)
    geoms = open_geometries(store, ["t2m"])
    ds = InSituDataset(store, split_by_chunk(geoms["t2m"]), geoms, batch_size=7, shuffle=False)
    assert np.concatenate([b.sample_indices for b in ds.train]).tolist() == list(range(64))


def test_residency_and_inflight_bounds(tmp_path):
    t2m = field(320, inner=(2, 2))
    path = write(tmp_path, {"t2m": (t2m, (4, 2, 2))})
    store = insitubatch.local_store(path)
    geoms = open_geometries(store, ["t2m"])
    ds = InSituDataset(store, split_by_chunk(geoms["t2m"], fractions=(1.0, 0.0, 0.0)), geoms,
                       batch_size=8, block_chunks=8, max_inflight=3)
    check_values(collect(ds.train), {"t2m": t2m})
    d = ds.last_pass.depths
    assert d.resident_peak_bytes <= ds.cache_budget_bytes == ds.describe()["memory"]["residency_bytes"]
    assert d.resident_peak <= 2 * 8
    assert 1 <= d.inflight_peak <= 3


def test_window_drops_edge_anchors(tmp_path):
    t2m = field(40, inner=(2,))
    path = write(tmp_path, {"t2m": (t2m, (8, 2))})
    store = counting(path)
    g = open_geometries(store, ["t2m"])["t2m"]
    geoms = {"x": g, "y": g.shift(1), "prev": g.shift(-2)}
    ds = InSituDataset(store, split_by_chunk(g, fractions=(1.0, 0.0, 0.0)), geoms, batch_size=5, shuffle=False)
    store.reset()
    batches = collect(ds.train)
    check_values(batches, {"x": t2m, "y": t2m, "prev": t2m})
    assert np.concatenate([b.sample_indices for b in batches]).tolist() == list(range(2, 39))
    assert store.total_reads == 5  # three labels, one path: each chunk read once
    b = batches[0]
    np.testing.assert_array_equal(b.arrays["y"], t2m[b.read_indices("y")])
    assert b.stack(["x", "y"]).shape == (5, 2, 2)


def test_mixed_sample_chunking_and_sample_axis(tmp_path):
    raw = field(12, inner=(2, 6, 5), seed=3).transpose(1, 0, 2, 3).copy()  # (C, Z, Y, X), Z is the sample axis
    mask = (field(12, inner=(6, 5), seed=4) > 0).astype("u1")              # (Z, Y, X)
    path = tmp_path / "s.zarr"
    zarr.create_array(zarr.storage.LocalStore(path), name="raw", shape=raw.shape, chunks=(2, 1, 4, 5),
                      dtype="f4")[...] = raw
    zarr.create_array(zarr.storage.LocalStore(path), name="mask", shape=mask.shape, chunks=(6, 6, 5),
                      dtype="u1")[...] = mask
    store = counting(path)
    graw = open_geometries(store, ["raw"], sample_axis=1)["raw"]
    gmask = open_geometries(store, ["mask"])["mask"]
    manifest = split_by_chunk(graw, fractions=(0.5, 0.25, 0.25))
    ds = InSituDataset(store, manifest, {"raw": graw, "mask": gmask}, batch_size=4, block_chunks=2)
    store.reset()
    batches = collect(ds.train) + collect(ds.val) + collect(ds.test)
    check_values(batches, {"raw": raw, "mask": mask}, sample_axes={"raw": 1})
    assert batches[0].arrays["raw"].shape[1:] == (2, 6, 5)
    assert max(store.reads().values()) <= 2  # mask chunks straddle splits: at most once per pass


def test_uneven_tail_and_ragged_tiles(tmp_path):
    t2m = field(37, inner=(7, 5), seed=5)
    path = write(tmp_path, {"t2m": (t2m, (4, 3, 2))}, fmt=2)
    store = insitubatch.local_store(path)
    geoms = open_geometries(store, ["t2m"])
    ds = InSituDataset(store, split_by_chunk(geoms["t2m"], fractions=(1.0, 0.0, 0.0)), geoms, batch_size=5)
    batches = collect(ds.train)
    check_values(batches, {"t2m": t2m})
    assert sorted(np.concatenate([b.sample_indices for b in batches]).tolist()) == list(range(37))


def test_batches_gathered_by_helper_threads_are_exact(tmp_path):
    # 128 KiB samples in batches of 10 (1.25 MiB): each batch is split among three gather
    # threads. Whole-field chunks for t2m, ragged field tiles for u10, and a window.
    t2m = field(60, inner=(128, 256), seed=11)
    u10 = field(60, inner=(128, 256), seed=12)
    path = write(tmp_path, {"t2m": (t2m, (6, 128, 256)), "u10": (u10, (4, 100, 200))})
    store = insitubatch.local_store(path)
    geoms = open_geometries(store, ["t2m", "u10"])
    geoms["t2m_next"] = geoms["t2m"].shift(3)
    ds = InSituDataset(store, split_by_chunk(geoms["t2m"], fractions=(1.0, 0.0, 0.0)), geoms,
                       batch_size=10, block_chunks=2, gather_threads=3)
    assert ds._engine.gather_threads == 3
    batches = collect(ds.train)
    check_values(batches, {"t2m": t2m, "u10": u10, "t2m_next": t2m})
    assert sorted(np.concatenate([b.sample_indices for b in batches]).tolist()) == list(range(57))
    assert ds.last_pass.depths.gather_threads == 3
    assert ", gather on 3, " in ds.last_pass.log_line()
    assert InSituDataset(store, split_by_chunk(geoms["t2m"]), geoms,
                         decode_threads=8)._engine.gather_threads == 2  # one per four decoders


def test_several_variables_and_concurrent_views(tmp_path):
    a, b = field(48, seed=6), field(48, inner=(5,), seed=7, dtype="f8")
    path = write(tmp_path, {"a": (a, (4, 3, 4)), "b": (b, (6, 5))})
    store = insitubatch.local_store(path)
    geoms = open_geometries(store)
    ds = InSituDataset(store, split_by_chunk(geoms["a"]), geoms, batch_size=4, block_chunks=2,
                       cache_budget_bytes=10**7)
    for tb, vb in zip(ds.train, ds.val):
        check_values([tb, vb], {"a": a, "b": b})


def test_empty_split_yields_nothing(era):
    path, _ = era
    store = insitubatch.local_store(path)
    geoms = open_geometries(store, ["t2m"])
    manifest = split_by_chunk(geoms["t2m"], fractions=(0.95, 0.05, 0.0))
    assert manifest.chunks["test"] == []
    ds = InSituDataset(store, manifest, geoms, batch_size=4)
    assert list(ds.test) == [] and len(ds.test) == 0


def test_corrupt_chunk_raises_then_nan_policy(era):
    path, t2m = era
    (path / "t2m" / "c" / "1" / "0" / "0").write_bytes(b"corrupt")
    store = insitubatch.local_store(path)
    geoms = open_geometries(store, ["t2m"])
    manifest = split_by_chunk(geoms["t2m"], fractions=(1.0, 0.0, 0.0))
    ds = InSituDataset(store, manifest, geoms, batch_size=8, shuffle=False)
    with pytest.raises(insitubatch.CorruptChunkError, match=r"t2m \[1, 0, 0\]"):
        collect(ds.train)
    with pytest.raises(insitubatch.CorruptChunkError):  # the next pass re-raises, no hang
        collect(ds.train)
    ds = InSituDataset(store, manifest, geoms, batch_size=8, shuffle=False, on_bad_chunk="nan")
    batches = collect(ds.train)
    for b in batches:
        bad = (b.sample_indices >= 8) & (b.sample_indices < 16)
        assert np.isnan(b.arrays["t2m"][bad]).all()
        np.testing.assert_array_equal(b.arrays["t2m"][~bad], t2m[b.sample_indices[~bad]])
        # The batch says which rows were filled in: only where there are some.
        if bad.any():
            np.testing.assert_array_equal(b.filled["t2m"], bad)
        else:
            assert b.filled == {}
    assert ds.bad_chunks == [insitubatch.StoredChunkRead("t2m", 1, (0, 0))]
    assert ds.bad_chunks[0].coords == (1, 0, 0)
    assert "t2m [1, 0, 0]" in ds.bad_chunks[0].reason and ds.last_pass.bad_chunks == tuple(ds.bad_chunks)


def test_nan_on_an_integer_array_is_its_fill_value_and_the_batch_says_which_rows(tmp_path):
    """An integer, bool or record array has no NaN: a bad chunk's rows are its fill value,
    which looks like data; batch.filled marks them."""
    path = tmp_path / "labels.zarr"
    labels = np.arange(40, dtype="int32") % 7 + 1
    flags = labels % 2 == 0
    group = zarr.open_group(zarr.storage.LocalStore(path), mode="w")
    group.create_array("label", shape=(40,), chunks=(8,), dtype="int32", fill_value=0)[...] = labels
    group.create_array("flag", shape=(40,), chunks=(8,), dtype="bool", fill_value=False)[...] = flags
    (path / "label" / "c" / "3").write_bytes(b"\x28\xb5\x2f\xfd not zstd")
    store = insitubatch.local_store(path)
    geoms = open_geometries(store, ["label", "flag"])
    ds = InSituDataset(store, split_by_chunk(geoms["label"], fractions=(1.0, 0.0, 0.0)), geoms, batch_size=16,
                       shuffle=True, on_bad_chunk="nan")
    seen = 0
    for b in ds.train:
        bad = (b.sample_indices // 8) == 3
        np.testing.assert_array_equal(b.arrays["label"], np.where(bad, 0, labels[b.sample_indices]))
        np.testing.assert_array_equal(b.arrays["flag"], flags[b.sample_indices])
        assert set(b.filled) == ({"label"} if bad.any() else set())
        if bad.any():
            np.testing.assert_array_equal(b.filled["label"], bad)
        seen += len(b)
    assert seen == 40 and ds.bad_chunks == [insitubatch.StoredChunkRead("label", 3, ())]


def test_early_break_then_full_epoch(era):
    path, t2m = era
    store = insitubatch.local_store(path)
    geoms = open_geometries(store, ["t2m"])
    ds = InSituDataset(store, split_by_chunk(geoms["t2m"]), geoms, batch_size=2, block_chunks=2)
    for _ in range(3):
        for i, _b in enumerate(ds.train):
            if i == 2:
                break
        gc.collect()
        assert ds.pool_state()["pinned_slots"] == 0
        assert ds.pool_state()["live_passes"] == 0
        assert ds.last_pass is not None and not ds.last_pass.finished
    batches = collect(ds.train)
    assert sorted(np.concatenate([b.sample_indices for b in batches]).tolist()) == list(range(64))
    assert ds.last_pass.finished


def test_budget_below_floor_raises_naming_it(era):
    path, _ = era
    store = insitubatch.local_store(path)
    geoms = open_geometries(store, ["t2m"])
    with pytest.raises(ValueError, match="cache_budget_bytes") as info:
        InSituDataset(store, split_by_chunk(geoms["t2m"]), geoms, batch_size=8, block_chunks=2,
                      cache_budget_bytes=100)
    floor = InSituDataset(store, split_by_chunk(geoms["t2m"]), geoms, batch_size=8, block_chunks=2).working_set_bytes
    assert str(floor) in str(info.value)


def test_describe_budget_is_the_engines(era):
    path, _ = era
    store = insitubatch.local_store(path)
    geoms = open_geometries(store, ["t2m"])
    ds = InSituDataset(store, split_by_chunk(geoms["t2m"]), geoms, batch_size=8, block_chunks=2)
    report = ds.describe()
    assert report["memory"]["residency_bytes"] == ds.cache_budget_bytes == ds._engine.budget_bytes
    assert report["memory"]["working_set_bytes"] == ds.working_set_bytes


def test_describe_slot_charges_are_what_the_pool_charges(tmp_path):
    """A reshaping chunk transform on one array, none on the other: the per-slot charge
    describe() reports for each is what the engine's pool charges for it."""
    from insitubatch import applies
    from insitubatch.transforms import Cast

    path = write(tmp_path, {"a": (field(32, inner=(5, 6)), (4, 2, 4)), "b": (field(32, inner=(7,)), (8, 3))})
    store = insitubatch.local_store(path)
    geoms = open_geometries(store)
    for label in ("a", "b"):
        ds = InSituDataset(store, split_by_chunk(geoms[label], fractions=(1.0, 0.0, 0.0)), {label: geoms[label]},
                           batch_size=4, shuffle=False, cache_budget_bytes=1 << 24,
                           chunk_transforms=[applies(["a"], Cast("float64"))] if label == "a" else ())
        collect(ds.train)
        state = ds.pool_state()
        assert state["resident_bytes"] == state["resident_slots"] * ds.describe()["variables"][label]["slot_bytes"]


def test_memory_flat_across_epochs(era):
    path, _ = era
    store = insitubatch.local_store(path)
    geoms = open_geometries(store, ["t2m"])
    ds = InSituDataset(store, split_by_chunk(geoms["t2m"]), geoms, batch_size=8, block_chunks=2)
    states = []
    for epoch in range(10):
        ds.set_epoch(epoch)
        for _ in ds.train:
            pass
        states.append(ds.pool_state())
    assert all(s["resident_bytes"] <= ds.cache_budget_bytes for s in states)
    assert all(s["pinned_slots"] == 0 and s["live_passes"] == 0 for s in states)
    # Batch buffers are recycled: allocations stop growing once the pipeline's working set
    # of buffers exists (queue + one being gathered + one held by the consumer, for the full
    # and the short batch size), however many epochs run.
    limit = 2 * (ds.prefetch_depth + 3)
    assert states[-1]["batch_buffer_allocations"] <= limit


def test_batch_memory_outlives_dataset(era):
    path, t2m = era
    store = insitubatch.local_store(path)
    geoms = open_geometries(store, ["t2m"])
    ds = InSituDataset(store, split_by_chunk(geoms["t2m"]), geoms, batch_size=8, shuffle=False)
    batch = next(iter(ds.train))
    arr = batch.arrays["t2m"]
    ds.close()
    del ds, batch
    gc.collect()
    np.testing.assert_array_equal(arr, t2m[:8])


def test_per_epoch_log_line(era, caplog):
    path, _ = era
    store = insitubatch.local_store(path)
    geoms = open_geometries(store, ["t2m"])
    ds = InSituDataset(store, split_by_chunk(geoms["t2m"]), geoms, batch_size=8, block_chunks=8)
    with caplog.at_level(logging.INFO, logger="insitubatch"):
        for epoch in range(2):
            ds.set_epoch(epoch)
            collect(ds.train)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("epoch")]
    assert len(lines) == 2
    assert "chunk hits 0/8 (0.0%)" in lines[0] and "chunk hits 8/8 (100.0%)" in lines[1]
    assert all(" limited by: " in line for line in lines)
    assert ds.last_pass.limiting_stage in {"consumer", "store", "decode", "residency", "gather", "unknown"}


@pytest.mark.parametrize(
    "kwargs,match",
    [({"batch_size": 0}, "batch_size"), ({"on_bad_chunk": "skip"}, "on_bad_chunk"),
     ({"persist": True}, "persist=True requires cache_dir"), ({"readonly_cache": True}, "readonly_cache"),
     ({"max_inflight": 0}, "max_inflight"), ({"block_chunks": -1}, "block_chunks"),
     ({"gather_threads": -1}, "gather_threads"), ({"gather_threads": 10_000}, r"gather_threads must be in \[0, 256\]")],
)
def test_bad_arguments(era, kwargs, match):
    path, _ = era
    store = insitubatch.local_store(path)
    geoms = open_geometries(store, ["t2m"])
    with pytest.raises(ValueError, match=match):
        InSituDataset(store, split_by_chunk(geoms["t2m"]), geoms, **kwargs)


def test_mismatched_lengths_raise(tmp_path):
    path = write(tmp_path, {"a": (field(40), (8, 3, 4)), "b": (field(48), (8, 3, 4))})
    store = insitubatch.local_store(path)
    geoms = open_geometries(store)
    with pytest.raises(ValueError, match="same sample-axis length"):
        InSituDataset(store, split_by_chunk(geoms["a"]), geoms)
    with pytest.raises(ValueError, match="manifest sample-axis length"):
        InSituDataset(store, split_by_chunk(geoms["b"]), {"a": geoms["a"]})


def test_seed_print_summary_through_the_dataset_without_touching_chunks(tmp_path):
    """The seed's printed example, from a store holding only metadata: 6000x721x1440 float32."""
    import io

    from test_summary import SEED_EXPECTED, _split_footnotes

    zarr.create_array(zarr.storage.LocalStore(tmp_path / "era5.zarr"), name="t2m", shape=(6000, 721, 1440),
                      chunks=(16, 721, 1440), dtype="float32", compressors=[ZstdCodec()], fill_value=0)
    store = counting(tmp_path / "era5.zarr")
    geoms = open_geometries(store, variables=["t2m"])
    manifest = split_by_chunk(geoms["t2m"], fractions=(0.8, 0.1, 0.1), sample_range=(0, 640))
    ds = InSituDataset(store, manifest, geometries=geoms, batch_size=32, block_chunks=16)
    store.reset()
    out = io.StringIO()
    ds.print_summary(file=out)
    assert store.total_reads == 0  # answers from geometry and configuration alone
    lines, _ = _split_footnotes(out.getvalue().rstrip("\n"))
    # Line for line, the shuffle-quality score included: the shuffled order is the original's,
    # draw for draw (numpy PCG64 keyed on (seed, epoch) as the original's).
    assert lines == SEED_EXPECTED.split("\n")


def test_print_debug_info_imports_no_framework():
    import io
    import subprocess
    import sys

    out = io.StringIO()
    insitubatch.print_debug_info(file=out)
    text = out.getvalue()
    for label in ("insitubatch", "python", "free-threading", "compiler", "codecs", "zarr", "torch"):
        assert label in text
    code = ("import io, sys, insitubatch; insitubatch.print_debug_info(file=io.StringIO());"
            "assert not [m for m in ('torch', 'jax', 'tensorflow') if m in sys.modules]")
    subprocess.run([sys.executable, "-c", code], check=True)
