"""ArrayGeometry and the store constructors."""

from __future__ import annotations

import logging
import numpy as np
import pytest
import zarr

import insitubatch
from insitubatch import ArrayGeometry


def test_basic_members():
    g = ArrayGeometry("t2m", (10, 9, 7), (4, 4, 4), np.float32)
    assert g.n_samples == 10 and g.sample_chunk_size == 4 and g.n_chunks == 3
    assert g.inner_shape == (9, 7) and g.inner_chunks == (4, 4)
    assert g.chunk_of(9) == 2
    assert g.samples_in_chunk(2) == range(8, 10)
    assert [len(r) for r in g.inner_grid()] == [3, 2]
    assert list(g.inner_coords())[:3] == [(0, 0), (0, 1), (1, 0)]
    assert g.n_inner_chunks() == 6
    assert g.slot_shape(2) == (2, 9, 7)
    assert g.tile_shape() == (4, 4, 4)
    assert g.physical_chunk_coord(2, (1, 0)) == (2, 1, 0)
    assert g.inner_index((2, 1)) == 5
    dst, src = g.tile_placement(2, (2, 1))
    assert dst == (slice(0, 2), slice(8, 9), slice(4, 7))
    assert src == (slice(0, 2), slice(0, 1), slice(0, 3))


def test_chunk_bytes_counts_edge_tiles_whole():
    # 721 rows chunked at 180 hold 900 (five padded tiles).
    g = ArrayGeometry("t", (100, 721, 1440), (16, 180, 1440), np.float32)
    assert g.chunk_bytes == 5 * 16 * 180 * 1440 * 4
    era5 = ArrayGeometry("t2m", (6000, 721, 1440), (16, 721, 1440), np.float32)
    assert era5.chunk_bytes == 16 * 721 * 1440 * 4  # 63.4 MiB
    assert round(era5.chunk_bytes / 2**20, 1) == 63.4


def test_sample_axis_other_than_zero():
    g = ArrayGeometry("raw", (2, 6, 8, 8), (2, 1, 4, 4), np.uint16, sample_axis=1)
    assert g.n_samples == 6 and g.inner_shape == (2, 8, 8)
    assert g.slot_shape(0) == (1, 2, 8, 8)
    assert g.physical_chunk_coord(3, (0, 1, 1)) == (0, 3, 1, 1)
    with pytest.raises(ValueError, match="sample_axis"):
        ArrayGeometry("raw", (2, 6), (2, 1), np.uint16, sample_axis=2)


def test_shift_composes_and_is_frozen():
    g = ArrayGeometry("t", (10, 2), (5, 2), np.float32)
    h = g.shift(1).shift(2)
    assert h.offset == 3 and g.offset == 0
    with pytest.raises(Exception):
        g.offset = 5  # type: ignore[misc]


def test_sharded_geometry_reports_the_shard_not_the_inner_chunk(tmp_path):
    arr = zarr.create_array(zarr.storage.LocalStore(tmp_path / "s.zarr"), name="v", shape=(16, 8),
                            chunks=(2, 4), shards=(8, 8), dtype="float32", zarr_format=3)
    arr[...] = 1
    g = insitubatch.open_geometries(insitubatch.local_store(tmp_path / "s.zarr"))["v"]
    assert g.chunks == (8, 8)
    assert g.read_chunks == (2, 4)
    assert g.chunk_bytes == 8 * 8 * 4


def test_sample_axis_argument(tmp_path):
    arr = zarr.create_array(zarr.storage.LocalStore(tmp_path / "s.zarr"), name="v", shape=(2, 6, 4),
                            chunks=(2, 1, 4), dtype="uint8", zarr_format=3)
    arr[...] = 0
    g = insitubatch.open_geometries(insitubatch.local_store(tmp_path / "s.zarr"), sample_axis=1)["v"]
    assert g.sample_axis == 1 and g.n_samples == 6 and g.n_chunks == 6


def test_variables_must_be_a_list(tmp_path):
    zarr.create_array(zarr.storage.LocalStore(tmp_path / "s.zarr"), name="v", shape=(2,), chunks=(1,), dtype="u1")
    with pytest.raises(TypeError, match="list"):
        insitubatch.open_geometries(insitubatch.local_store(tmp_path / "s.zarr"), "v")


def test_store_constructors(tmp_path, caplog):
    zarr.create_array(zarr.storage.LocalStore(tmp_path / "s.zarr"), name="v", shape=(2,), chunks=(1,), dtype="u1")
    for s in [insitubatch.store(str(tmp_path / "s.zarr")), insitubatch.store(f"file://{tmp_path}/s.zarr"),
              insitubatch.obstore_store(f"file://{tmp_path}/s.zarr"), insitubatch.local_store(tmp_path / "s.zarr")]:
        assert "v/zarr.json" in insitubatch.as_native_store(s).list("")  # obstore_store's list is zarr's
        assert s.read("absent/key") is None
        assert s.read("v/zarr.json", offset=0, length=1) == b"{"
        assert s.read("v/zarr.json", suffix=1) == b"}"
        assert str(tmp_path) in repr(s)
    with pytest.raises(ValueError, match="unknown option.*'bogus'"):
        insitubatch.obstore_store(f"file://{tmp_path}/s.zarr", bogus=1, skip_signature=True)
    # An option another scheme takes is ignored, as obstore does: one option set for every URL.
    with caplog.at_level(logging.DEBUG, logger="insitubatch"):
        s = insitubatch.obstore_store(f"file://{tmp_path}/s.zarr", skip_signature=True, region="us-west-2")
    assert "v/zarr.json" in s.native.list("")
    assert "'region' does not apply to file:// stores: ignored" in caplog.text
    with pytest.raises(insitubatch.UnsupportedError, match="ftp"):
        insitubatch.store("ftp://host/x")


def test_memory_store_roundtrip():
    s = insitubatch.memory_store()
    s.set("a/b", b"hello")
    assert s.read("a/b") == b"hello"
    assert s.read("a/b", offset=1, length=3) == b"ell"
    assert s.list("a") == ["a/b"]
    with pytest.raises(insitubatch.CorruptChunkError):
        s.read("a/b", offset=3, length=10)


def test_errors_are_builtin_subclasses():
    assert issubclass(insitubatch.InvalidArgumentError, ValueError)
    assert issubclass(insitubatch.NotFoundError, KeyError)
    assert issubclass(insitubatch.NotFoundError, FileNotFoundError)
    assert issubclass(insitubatch.StoreError, OSError)


def test_import_pulls_in_no_framework():
    import subprocess
    import sys

    code = "import sys, insitubatch; bad=[m for m in ('torch','jax','tensorflow') if m in sys.modules]; print(bad); assert not bad"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_read_chunk_refuses_bad_coordinates_by_name(tmp_path):
    zarr.create_array(zarr.storage.LocalStore(tmp_path / "s.zarr"), name="v", shape=(4, 4), chunks=(2, 2), dtype="u1")
    with pytest.raises(insitubatch.InvalidArgumentError, match=r"chunk_coords\[1\] must be in \[0, .*got -1"):
        insitubatch.read_chunk(str(tmp_path / "s.zarr"), "v", [0, -1])
    with pytest.raises(insitubatch.InvalidArgumentError, match=r"chunk_coords\[0\].*1.5"):
        insitubatch.read_chunk(str(tmp_path / "s.zarr"), "v", [1.5, 0])
    with pytest.raises(insitubatch.InvalidTypeError, match="sequence of ints"):
        insitubatch.read_chunk(str(tmp_path / "s.zarr"), "v", 3)
    assert insitubatch.read_chunk(str(tmp_path / "s.zarr"), "v", (1, 1)).shape == (2, 2)


def test_ensure_local_dir_makes_local_directories_and_refuses_bad_urls(tmp_path):
    assert insitubatch.ensure_local_dir(f"file://{tmp_path}/a/b") == f"file://{tmp_path}/a/b"
    assert insitubatch.ensure_local_dir(str(tmp_path / "c" / "d")) == str(tmp_path / "c" / "d")
    assert (tmp_path / "a" / "b").is_dir() and (tmp_path / "c" / "d").is_dir()
    assert insitubatch.ensure_local_dir("s3://bucket/x") == "s3://bucket/x"  # not local: left alone
    for bad in ("", None, 3):
        with pytest.raises(insitubatch.InvalidArgumentError, match="url must be a non-empty string"):
            insitubatch.ensure_local_dir(bad)
