"""Masks and predicates (sample_filter=): an ocean mask with min_valid over grid patches
draws exactly the patches that meet it, a boolean array along the sample axis draws its
samples, a predicate over decoded chunks is evaluated once per chunk and persisted with
cache_dir (a new process reads it: counted), counts are known before the epoch, batches
stay full and equal across ranks, and bad filters are clear errors."""

from __future__ import annotations

import ast
import os

import numpy as np
import pytest
import zarr

import insitubatch as ib
from insitubatch.errors import InvalidArgumentError, InvalidTypeError

N, H, W = 10, 24, 30
PATCH = {"y": 6, "x": 5}


@pytest.fixture(scope="module")
def store_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("filters") / "f.zarr"
    root = zarr.open_group(str(path), mode="w", zarr_format=3)
    rng = np.random.default_rng(9)
    sst = rng.standard_normal((N, H, W)).astype("f4")
    land = np.zeros((H, W), dtype=bool)
    land[:10, :12] = True
    land[15:, 20:] = True
    sst[:, land] = np.nan  # NaN over land, as ocean archives store it
    root.create_array("sst", shape=(N, H, W), chunks=(3, 12, 15), dtype="f4", dimension_names=("time", "y", "x"))[...] = sst
    root.create_array("ocean", shape=(H, W), chunks=(12, 30), dtype="bool", dimension_names=("y", "x"))[...] = ~land
    keep = np.arange(N) % 3 != 1
    root.create_array("keep", shape=(N,), chunks=(4,), dtype="bool", dimension_names=("time",))[...] = keep
    return str(path)


def values(store_path, name):
    return zarr.open_group(store_path, mode="r")[name][...]


def open_ds(store_path, **kwargs):
    store = ib.store(store_path)
    geoms = ib.open_geometries(store, ["sst"])
    manifest = ib.split_by_chunk(geoms["sst"], fractions=(1.0, 0.0, 0.0))
    kwargs.setdefault("batch_size", 5)
    return ib.InSituDataset(store, manifest, geometries=geoms, block_chunks=2, **kwargs)


def drawn(view):
    out = []
    for b in view:
        origins = b.patch_origins if b.patch_origins is not None else np.zeros((len(b), 0), dtype=np.int64)
        out += [(int(s), *map(int, o)) for s, o in zip(b.sample_indices, origins)]
    return out


@pytest.mark.parametrize("min_valid", [None, 0.5, 1.0])
def test_a_static_ocean_mask_draws_exactly_the_patches_that_meet_min_valid(store_path, min_valid):
    ocean = values(store_path, "ocean")
    expected = set()
    for y in range(0, H - 6 + 1, 6):
        for x in range(0, W - 5 + 1, 5):
            fraction = ocean[y:y + 6, x:x + 5].mean()
            if (fraction >= min_valid) if min_valid is not None else fraction > 0:
                expected |= {(s, y, x) for s in range(N)}
    assert 0 < len(expected) < N * 4 * 6
    with open_ds(store_path, patch=PATCH, sample_filter="ocean", min_valid=min_valid) as ds:
        assert ds.describe()["config"]["drawable_samples"]["train"] == len(expected)
        assert len(ds.train) == -(-len(expected) // 5)
        got = drawn(ds.train)
        assert len(got) == len(set(got)) and set(got) == expected
        report = ds.describe()["sample_filter"]
        assert report["source"] == "array 'ocean'" and report["drawn"]["train"] == len(expected)
        assert report["of"]["train"] == N * 4 * 6
    # The same mask as an ndarray.
    with open_ds(store_path, patch=PATCH, sample_filter=ocean, min_valid=min_valid) as ds:
        assert set(drawn(ds.train)) == expected


@pytest.mark.parametrize("stride,edges", [((4, 3), "cover"), ((6, 5), "cover"), ((1, 2), "inside")])
def test_a_per_sample_mask_over_overlapping_and_flush_patches_draws_exactly_those_that_meet_min_valid(
        store_path, stride, edges):
    # Box sums over many corner coordinates (overlap) and over few (the mask's fractions
    # take either path), windows flush with the far edge: against each window's mean.
    mask = np.random.default_rng(3).random((N, H, W)) < 0.6
    ys, xs = range(0, H - 6 + 1, stride[0]), range(0, W - 5 + 1, stride[1])
    if edges == "cover":
        ys, xs = sorted({*ys, H - 6}), sorted({*xs, W - 5})
    expected = {(s, y, x) for s in range(N) for y in ys for x in xs if mask[s, y:y + 6, x:x + 5].mean() >= 0.6}
    assert 0 < len(expected) < N * len(ys) * len(xs)
    with open_ds(store_path, patch=PATCH, patch_stride=dict(zip("yx", stride)), patch_edges=edges,
                 sample_filter=mask, min_valid=0.6) as ds:
        got = drawn(ds.train)
        assert len(got) == len(set(got)) and set(got) == expected


def test_a_boolean_array_along_the_sample_axis_draws_its_samples(store_path):
    keep = values(store_path, "keep")
    with open_ds(store_path, sample_filter="keep") as ds:
        got = drawn(ds.train)
        assert sorted(s for s, in got) == list(np.flatnonzero(keep))
    with open_ds(store_path, sample_filter="keep", patch=PATCH, patch_mode="random", patches_per_sample=2) as ds:
        assert sorted({s for s, _, _ in drawn(ds.train)}) == list(np.flatnonzero(keep))


PREDICATE = """
import ast
import os
import numpy as np

def not_all_nan(chunk):  # per pixel: the patch needs at least half its pixels finite
    with open(os.environ["FILTER_CALLS"], "a") as f:
        f.write(f"{chunk.shape[0]}\\n")
    return np.isfinite(chunk)
"""

CHILD = """
import sys
sys.path[:0] = [sys.argv[1], sys.argv[2]]
import insitubatch as ib
from filter_predicate import not_all_nan
from test_sample_filters import PATCH, drawn, open_ds
with open_ds(sys.argv[3], patch=PATCH, sample_filter=not_all_nan, min_valid=0.5, cache_dir=sys.argv[4]) as ds:
    print(sorted(drawn(ds.train)))
"""


def test_a_predicate_is_evaluated_once_per_chunk_and_persisted_for_a_new_process(store_path, tmp_path, monkeypatch):
    import subprocess
    import sys

    sst = values(store_path, "sst")
    calls = tmp_path / "calls"
    (tmp_path / "filter_predicate.py").write_text(PREDICATE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("FILTER_CALLS", str(calls))
    from filter_predicate import not_all_nan

    expected = {(s, y, x) for s in range(N) for y in range(0, H - 5, 6) for x in range(0, W - 4, 5)
                if np.isfinite(sst[s, y:y + 6, x:x + 5]).mean() >= 0.5}
    cache = tmp_path / "cache"
    with open_ds(store_path, patch=PATCH, sample_filter=not_all_nan, min_valid=0.5, cache_dir=cache) as ds:
        assert calls.read_text().split() == ["3", "3", "3", "1"]  # once per stored chunk along time
        got = drawn(ds.train)
        assert set(got) == expected and len(got) == len(expected)
        for b in ds.train:
            for i, (s, (y, x)) in enumerate(zip(b.sample_indices, b.patch_origins)):
                np.testing.assert_array_equal(b.arrays["sst"][i], sst[s, y:y + 6, x:x + 5])
    assert len(os.listdir(cache / "sample-filters")) == 1
    calls.unlink()
    # A new process with the same predicate reads the table back instead of decoding again.
    tests = os.path.dirname(os.path.abspath(__file__))
    out = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path), tests, store_path, str(cache)],
                         capture_output=True, text=True, timeout=120, check=True)
    assert not calls.exists()
    assert set(map(tuple, ast.literal_eval(out.stdout))) == expected


def test_a_per_sample_predicate_and_equal_full_batches_across_ranks(store_path):
    def warm(chunk):
        return np.nanmean(chunk, axis=(1, 2)) > -0.05

    sst = values(store_path, "sst")
    keep = {s for s in range(N) if np.nanmean(sst[s]) > -0.05}
    per_rank = []
    for rank in range(2):
        with open_ds(store_path, sample_filter=warm, rank=rank, world_size=2, batch_size=2) as ds:
            per_rank.append(drawn(ds.train))
    assert len(per_rank[0]) == len(per_rank[1]) and len(per_rank[0]) % 2 == 0
    flat = [s for rows in per_rank for s, in rows]
    assert len(flat) == len(set(flat)) and set(flat) <= keep


def test_bad_filters_are_clear_errors(store_path):
    with pytest.raises(InvalidArgumentError, match=r"has shape \(29, 24\): expected \(10,\) \(one per sample\) or \(10, 24, 30\)"):
        open_ds(store_path, sample_filter=np.ones((H, W), dtype=bool)[:, :-1].T.copy())
    with pytest.raises(InvalidArgumentError, match="min_valid applies to per-pixel masks"):
        open_ds(store_path, sample_filter="keep", min_valid=0.5)
    with pytest.raises(InvalidArgumentError, match="min_valid needs sample_filter"):
        open_ds(store_path, min_valid=0.5)
    with pytest.raises(InvalidArgumentError, match="min_valid must be a number in"):
        open_ds(store_path, sample_filter="ocean", min_valid=1.5)
    with pytest.raises(InvalidArgumentError, match="must be boolean"):
        open_ds(store_path, sample_filter=np.linspace(0, 1, N))
    with pytest.raises(InvalidTypeError, match="sample_filter must be"):
        open_ds(store_path, sample_filter=3)
    with pytest.raises(InvalidArgumentError, match='needs patch_mode="grid"'):
        open_ds(store_path, sample_filter="ocean", patch=PATCH, patch_mode="random")
    with pytest.raises(InvalidArgumentError, match="predicate's result"):
        open_ds(store_path, sample_filter=lambda chunk: np.ones(2, dtype=bool))


def test_a_mask_over_a_covering_grid_counts_the_flush_positions(store_path):
    ocean = values(store_path, "ocean")
    ys, xs = (0, 6, 12, 18), (0, 7, 14, 21, 25)  # stride 7 on 30 columns: 25 covers the end
    expected = {(s, y, x) for s in range(N) for y in ys for x in xs if ocean[y:y + 6, x:x + 5].mean() >= 0.6}
    with open_ds(store_path, patch=PATCH, patch_stride={"y": 6, "x": 7}, patch_edges="cover",
                 sample_filter="ocean", min_valid=0.6) as ds:
        got = drawn(ds.train)
        assert len(got) == len(set(got)) and set(got) == expected


def test_the_table_follows_no_link_and_a_readonly_cache_gets_none(store_path, tmp_path):
    def warm(chunk):
        return np.nanmean(chunk, axis=(1, 2)) > -0.05

    cache = tmp_path / "cache"
    with open_ds(store_path, sample_filter=warm, cache_dir=cache, persist=True) as ds:
        expected = drawn(ds.train)
    (table,) = (cache / "sample-filters").iterdir()
    decoy = tmp_path / "decoy.npy"
    np.save(decoy, np.ones(N, dtype=bool))  # a link planted at the table's name is not read
    table.unlink()
    table.symlink_to(decoy)
    with open_ds(store_path, sample_filter=warm, cache_dir=cache, persist=True) as ds:
        assert sorted(drawn(ds.train)) == sorted(expected)
    assert not table.is_symlink()  # replaced by the table this cache wrote
    table.unlink()
    with open_ds(store_path, sample_filter=warm, cache_dir=cache, readonly_cache=True) as ds:
        assert sorted(drawn(ds.train)) == sorted(expected)
    assert not table.exists()  # a read-only cache is not written


@pytest.mark.parametrize("crop", [{"y": (3, 21), "x": (4, 29)}, {"x": (20, 10)}])  # the second wraps
def test_a_mask_over_the_whole_field_is_cut_to_the_crop(store_path, crop):
    """With crop=, a mask over the uncropped field (a store path, a static or per-sample
    ndarray) draws what the same mask cut to the region draws."""
    ocean = values(store_path, "ocean")
    ys = np.arange(*crop["y"]) if "y" in crop else np.arange(H)
    xs = np.arange(crop["x"][0], crop["x"][1] + (W if crop["x"][1] <= crop["x"][0] else 0)) % W
    cut = ocean[np.ix_(ys, xs)]
    per_sample = np.stack([np.roll(ocean, s, axis=1) for s in range(N)])
    cases = [("ocean", cut), (ocean, cut), (per_sample, per_sample[:, ys][:, :, xs])]
    for whole, region in cases:
        with open_ds(store_path, patch=PATCH, crop=crop, sample_filter=region, min_valid=0.5) as ds:
            expected = drawn(ds.train)
        with open_ds(store_path, patch=PATCH, crop=crop, sample_filter=whole, min_valid=0.5) as ds:
            got = drawn(ds.train)
        assert 0 < len(expected) < N * (len(ys) // 6) * (len(xs) // 5)
        assert sorted(got) == sorted(expected)
    with pytest.raises(InvalidArgumentError, match=r"or \(10, 24, 30\) or \(24, 30\) over the uncropped field"):
        open_ds(store_path, patch=PATCH, crop=crop, sample_filter=np.ones((N, 5, 5), dtype=bool))
