"""The engine's rules have one home, its C++ EngineConfig: defaults, limits and messages
reach the dataset through the binding; a chunk transform's exception crosses the engine as
itself; window edges and the sample-axis rule are the engine's functions."""

from __future__ import annotations

import traceback

import numpy as np
import pytest
import zarr
from zarr.codecs import ZstdCodec

import insitubatch
from insitubatch import InSituDataset, InvalidArgumentError, _ext, open_geometries, split_by_chunk


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("cfg") / "s.zarr"
    for name, n in (("a", 40), ("b", 48)):
        arr = zarr.create_array(zarr.storage.LocalStore(path), name=name, shape=(n, 3), chunks=(8, 3),
                                dtype="float32", compressors=[ZstdCodec(level=1)], fill_value=0)
        arr[...] = np.arange(n * 3, dtype="float32").reshape(n, 3)
    return insitubatch.local_store(path)


def test_the_dataset_takes_its_defaults_from_the_engine(store):
    geoms = open_geometries(store, ["a"])
    ds = InSituDataset(store, split_by_chunk(geoms["a"]), geoms)
    defaults = _ext.EngineConfig()
    assert (defaults.eviction, defaults.max_inflight, defaults.on_bad_chunk) == ("next_use", 32, "raise")
    assert (ds.eviction, ds.max_inflight, ds.on_bad_chunk) == ("next_use", 32, "raise")
    ds.close()


@pytest.mark.parametrize("name, value, match", [
    ("max_inflight", 0, r"max_inflight must be in \[1, 4096\], got 0"),
    ("max_inflight", 2**70, r"max_inflight must be in \[1, 4096\], got 1180591620717411303424"),
    ("max_inflight", True, r"max_inflight must be an integer in \[1, 4096\], got True \(bool\)"),
    ("decode_threads", 2.0, r"decode_threads must be an integer in \[0, 1024\], got 2.0 \(float\)"),
    ("gather_threads", np.int64(-1), r"gather_threads must be in \[0, 256\], got -1"),
    ("eviction", "fifo", r"eviction must be \"next_use\" or \"lru\", got 'fifo'"),
    ("on_bad_chunk", "skip", r"on_bad_chunk must be \"raise\" or \"nan\", got 'skip'"),
])
def test_engine_config_setters_refuse_with_the_engines_messages(name, value, match):
    config = _ext.EngineConfig()
    with pytest.raises(InvalidArgumentError, match=match):
        setattr(config, name, value)
    config.gather_threads = np.int32(8)  # numpy integers are integers
    assert config.gather_threads == 8


def test_disk_modes_are_checked_together():
    config = _ext.EngineConfig()
    config.readonly_cache = True
    with pytest.raises(InvalidArgumentError, match="readonly_cache=True requires cache_dir"):
        config.validate()
    config.cache_dir = "/nonexistent/cache"
    config.validate()
    config.reset_stale_cache = True
    with pytest.raises(InvalidArgumentError, match="contradict each other"):
        config.validate()


def test_a_readers_missing_directory_is_one_error_from_the_engine(store, tmp_path):
    geoms = open_geometries(store, ["a"])
    for missing in (tmp_path / "cache", tmp_path / "no-parent" / "cache"):
        with pytest.raises(InvalidArgumentError, match=rf"the cache directory {missing} does not exist .*persist=True"):
            InSituDataset(store, split_by_chunk(geoms["a"]), geoms, cache_dir=missing, readonly_cache=True)
        assert not missing.exists()


def test_sample_lengths_are_the_engines_rule(store):
    geoms = open_geometries(store)
    with pytest.raises(InvalidArgumentError, match="same sample-axis length; got 'a' with 40 and 'b' with 48"):
        InSituDataset(store, split_by_chunk(geoms["a"]), geoms)


def test_keep_anchors_is_the_plans_filter():
    rng = np.random.default_rng(3)
    spc = 8
    rows = np.stack([np.repeat(rng.permutation(6), spc), np.tile(np.arange(spc), 6)], axis=1).astype(np.int64)
    bounds = np.array([0, 16, 17, 40, 48], dtype=np.int64)
    kept, kept_bounds = _ext.keep_anchors(rows, bounds, spc, 3, 45)
    anchors = rows[:, 0] * spc + rows[:, 1]
    keep = (anchors >= 3) & (anchors < 45)
    np.testing.assert_array_equal(kept, rows[keep])
    np.testing.assert_array_equal(kept_bounds, np.concatenate([[0], np.cumsum(keep)])[bounds])
    with pytest.raises(InvalidArgumentError, match="block_start"):
        _ext.keep_anchors(rows, np.array([0, 50], dtype=np.int64), spc, 0, 48)


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("this exception has no text")


@pytest.mark.parametrize("make", [lambda: KeyError("station 7"), lambda: Unprintable()])
def test_a_chunk_transforms_exception_arrives_as_itself(store, make):
    raised = []

    def fails_on_chunk_2(chunk):
        if chunk.read.chunk_index == 2:
            raised.append(make())
            raise raised[-1]
        return chunk

    geoms = open_geometries(store, ["a"])
    ds = InSituDataset(store, split_by_chunk(geoms["a"], fractions=(1.0, 0.0, 0.0)), geoms, batch_size=8,
                       shuffle=False, chunk_transforms=[fails_on_chunk_2])
    with pytest.raises(Exception) as info:
        list(ds.train)
    assert info.value is raised[0]  # the object itself (so its type), whatever its text
    frames = [frame.name for frame in traceback.extract_tb(info.value.__traceback__)]
    assert "fails_on_chunk_2" in frames  # its traceback reaches into the transform
    ds.close()


def test_pass_options_are_the_engines_rules(store):
    geoms = open_geometries(store, ["a"])
    manifest = split_by_chunk(geoms["a"])
    for kwargs, error, match in [
        (dict(batch_size=0), insitubatch.InvalidArgumentError, r"batch_size must be in \[1, 2147483647\], got 0"),
        (dict(prefetch_depth=2000), insitubatch.InvalidArgumentError, r"prefetch_depth must be in \[1, 1024\]"),
        (dict(max_inflight=2.5), insitubatch.InvalidTypeError, r"max_inflight must be an integer in \[1, 4096\]"),
    ]:
        with pytest.raises(error, match=match):
            InSituDataset(store, manifest, geoms, **kwargs)
    spec = _ext.PassSpec()
    with pytest.raises(insitubatch.InvalidArgumentError, match="at least one label"):
        spec.validate()


def test_native_transforms_cross_as_objects_built_in_cpp():
    scaler = _ext.standard_scaler([1.0, 2.0], [0.5, 0.25], [2], "<f4")
    assert (scaler.kind, scaler.parameters, scaler.out_shape) == ("scale", 2, [2])
    with pytest.raises(insitubatch.InvalidArgumentError):
        _ext.standard_scaler([1.0, 2.0], [0.5], [2], "<f4")  # a scale per mean, or one for all
    assert _ext.cast_transform("<i2", "<f4", [3]).kind == "cast"
    assert _ext.python_transform(lambda i, o, a: a, [3], "<f4").kind == "python"
    with pytest.raises(insitubatch.InvalidArgumentError, match="not callable"):
        _ext.python_transform(3, [3], "<f4")
