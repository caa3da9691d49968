"""Chunk-granular splits and window anchor ranges."""

from __future__ import annotations

import json

import numpy as np
import pytest

from insitubatch.errors import InvalidArgumentError
from insitubatch.geometry import ArrayGeometry
from insitubatch.splits import SplitManifest, SplitName, split_by_chunk, valid_anchor_range


@pytest.fixture
def geom():
    # 1000 samples, 10 per chunk -> 100 chunks.
    return ArrayGeometry("t2m", (1000, 3, 4), (10, 3, 4), np.float32)


def _all(manifest):
    return [c for name in ("train", "val", "test") for c in manifest.chunks[name]]


def test_default_split_is_disjoint_covering_80_10_10(geom):
    m = split_by_chunk(geom)
    assert [len(m.chunks[s]) for s in ("train", "val", "test")] == [80, 10, 10]
    ids = _all(m)
    assert len(ids) == len(set(ids)) == 100
    assert sorted(ids) == list(range(100))
    assert (m.n_chunks, m.sample_chunk_size, m.n_samples, m.seed) == (100, 10, 1000, 0)


def test_contiguous_train_is_the_first_chunks(geom):
    m = split_by_chunk(geom)
    assert m.chunks["train"] == list(range(80))
    assert m.chunks["val"] == list(range(80, 90))
    assert m.chunks["test"] == list(range(90, 100))


def test_non_contiguous_uses_numpy_default_rng_permutation(geom):
    m = split_by_chunk(geom, seed=3, contiguous=False)
    perm = np.random.default_rng(3).permutation(100)
    assert m.chunks["train"] == sorted(perm[:80].tolist())
    assert m.chunks["val"] == sorted(perm[80:90].tolist())
    assert m.chunks["test"] == sorted(perm[90:].tolist())
    assert m.chunks["train"] != list(range(80))
    assert split_by_chunk(geom, seed=4, contiguous=False).chunks["val"] != m.chunks["val"]
    assert m.seed == 3


def test_sample_indices_expand_chunks(geom):
    m = split_by_chunk(geom)
    train = m.sample_indices("train")
    assert train.dtype == np.int64
    np.testing.assert_array_equal(train, np.arange(800))
    np.testing.assert_array_equal(m.sample_indices(SplitName.VAL, geom), np.arange(800, 900))
    np.testing.assert_array_equal(m.sample_indices("test"), np.arange(900, 1000))


def test_sample_indices_of_a_scattered_split_and_a_short_last_chunk():
    g = ArrayGeometry("x", (37,), (8,), np.int16)  # chunk 4 holds samples 32..36
    m = SplitManifest(5, 8, 37, {"train": [1, 4], "val": [0], "test": [2, 3]})
    np.testing.assert_array_equal(
        m.sample_indices("train", g), np.r_[np.arange(8, 16), np.arange(32, 37)]
    )
    with pytest.raises(ValueError, match="does not match"):
        m.sample_indices("train", ArrayGeometry("y", (40,), (8,), np.int16))
    with pytest.raises(ValueError, match="unknown split"):
        m.sample_indices("training")


def test_sample_range_keeps_overlapping_chunks(geom):
    m = split_by_chunk(geom, sample_range=(250, 500))
    assert sorted(_all(m)) == list(range(25, 50))
    assert m.chunks["train"] == list(range(25, 45))
    # 25 candidates: round(2.5) == 2 (banker's rounding), test takes the remaining 3.
    assert m.chunks["val"] == [45, 46]
    assert m.chunks["test"] == [47, 48, 49]
    assert m.n_chunks == 100


def test_sample_range_snaps_outward(geom):
    m = split_by_chunk(geom, sample_range=(13, 27))
    assert sorted(_all(m)) == [1, 2]
    assert m.chunks["train"] == [1, 2]
    np.testing.assert_array_equal(m.sample_indices("train"), np.arange(10, 30))


@pytest.mark.parametrize("bad", [(-1, 10), (10, 10), (10, 5), (0, 1001)])
def test_invalid_sample_range_raises(geom, bad):
    with pytest.raises(ValueError, match="sample_range"):
        split_by_chunk(geom, sample_range=bad)


def test_full_sample_range_is_accepted(geom):
    assert split_by_chunk(geom, sample_range=(0, 1000)) == split_by_chunk(geom)


def test_fractions_must_sum_to_one(geom):
    with pytest.raises(InvalidArgumentError, match=r"fractions must sum to 1\.0"):
        split_by_chunk(geom, fractions=(0.8, 0.1, 0.2))
    assert isinstance(InvalidArgumentError("x"), ValueError)
    split_by_chunk(geom, fractions=(0.8, 0.1, 0.1 + 5e-7))  # within the 1e-6 tolerance
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        split_by_chunk(geom, fractions=(1.2, -0.1, -0.1))
    with pytest.raises(ValueError, match="train, val, test"):
        split_by_chunk(geom, fractions=(0.5, 0.5))


def test_split_rounding_to_zero_chunks_is_empty_not_an_error():
    g = ArrayGeometry("x", (40,), (8,), np.float32)  # 5 chunks: 4 / round(0.5)=0 / 1
    m = split_by_chunk(g)
    assert m.chunks == {"train": [0, 1, 2, 3], "val": [], "test": [4]}
    val = m.sample_indices("val")
    assert val.shape == (0,) and val.dtype == np.int64


def test_json_round_trip(geom, tmp_path):
    m = split_by_chunk(geom, seed=7, contiguous=False, sample_range=(250, 500))
    path = tmp_path / "split.json"
    m.to_json(path)
    text = path.read_text()
    assert '\n  "n_chunks": 100,' in text  # indent-2 JSON of the dataclass
    assert json.loads(text)["chunks"]["train"] == m.chunks["train"]
    back = SplitManifest.from_json(str(path))
    assert back == m
    np.testing.assert_array_equal(back.sample_indices("test"), m.sample_indices("test"))


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda d: d["chunks"].update(train=[0, 100]), "outside"),
        (lambda d: d["chunks"].update(val=[0]), "more than once"),
        (lambda d: d.update(n_chunks=99), "does not match"),
        (lambda d: d["chunks"].update(train=["a"]), "integer"),
        (lambda d: d.pop("seed"), "keys"),
        (lambda d: d["chunks"].update(holdout=[]), "unknown split"),
    ],
)
def test_malformed_manifest_json_raises(geom, tmp_path, edit, match):
    path = tmp_path / "split.json"
    split_by_chunk(geom).to_json(path)
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    with pytest.raises(InvalidArgumentError, match=match):
        SplitManifest.from_json(path)


def test_truncated_manifest_json_raises(tmp_path):
    path = tmp_path / "split.json"
    path.write_text('{"n_chunks": 3')
    with pytest.raises(InvalidArgumentError, match="not valid JSON"):
        SplitManifest.from_json(path)


def test_split_name_is_a_string_enum():
    assert [s.value for s in SplitName] == ["train", "val", "test"]
    assert SplitName.TRAIN == "train" and str(SplitName.TEST) == "test"


@pytest.mark.parametrize(
    "offsets, expected",
    [
        ([0], (0, 10)),
        ([0, 1], (0, 9)),
        ([-1, 0], (1, 10)),
        ([-1, 0, 1], (1, 9)),
        ([-2, 3], (2, 7)),
        ([], (0, 10)),
        ([5], (0, 5)),
        ([-3], (3, 10)),
    ],
)
def test_valid_anchor_range(offsets, expected):
    assert valid_anchor_range(offsets, 10) == expected


def test_window_wider_than_the_array_is_empty():
    lo, hi = valid_anchor_range([0, 12], 10)
    assert (lo, hi) == (0, 0)
    lo, hi = valid_anchor_range([-6, 6], 10)
    assert lo == hi == 6


def test_chunk_ids_as_ints_arrays_or_numpy_scalars_give_one_manifest():
    """Plain ints and an integer array are taken in one pass; anything else goes through the
    per-id checks, which still refuse bools and floats by name."""
    lists = SplitManifest(n_chunks=5, sample_chunk_size=2, n_samples=10, chunks={"train": [0, 3], "val": [4]})
    arrays = SplitManifest(n_chunks=5, sample_chunk_size=2, n_samples=10,
                           chunks={"train": np.array([0, 3], dtype=np.uint16), "val": [np.int64(4)]})
    assert lists == arrays and all(type(c) is int for ids in arrays.chunks.values() for c in ids)
    for bad, match in (([0, True], "integer"), (np.array([0.0, 1.0]), "integer"), ([0, 5], "outside"),
                       (np.array([-1, 0]), "outside"), ([3, 1, 3], r"chunk ids \[3\] .* more than once"),
                       (np.array([2, 2, 4, 4]), r"chunk ids \[2, 4\] .* more than once")):
        with pytest.raises(InvalidArgumentError, match=match):
            SplitManifest(n_chunks=5, sample_chunk_size=2, n_samples=10, chunks={"train": bad})


def test_chunk_ranges_cut_the_short_chunk_and_the_windows_edges():
    from insitubatch.epochs import chunk_ranges

    start, stop = chunk_ranges([0, 1, 3, 4], 4, 18, (2, 15))
    assert (stop - start).tolist() == [2, 4, 3, 0]  # [2,4) + [4,8) + [12,15); chunk 4 past the window
    start, stop = chunk_ranges([4], 4, 18, (0, 18))
    assert (start.tolist(), stop.tolist()) == ([16], [18])  # the short final chunk
