"""Patch samples: windows of each decoded field as samples. Every grid patch once per
epoch and exact against numpy slicing of zarr-python's read, random origins a pure function
of (seed, epoch), each stored chunk read once per epoch however many patches it yields,
resume and DDP ranks with patches, and clear errors for bad patch arguments."""

from __future__ import annotations

import io
import json
import warnings

import numpy as np
import pytest
import zarr
from zarr.codecs import ZstdCodec

import insitubatch as ib
from insitubatch import _ext
from insitubatch.errors import InvalidArgumentError, InvalidTypeError

N, H, W = 12, 40, 36


@pytest.fixture(scope="module")
def store_path(tmp_path_factory):
    """A (time, y, x) float32 plane store in tiles of 8 x 12 (the last row and column of
    tiles ragged), a (time,) scalar, and a (time, band, y, x) stack sharing y and x."""
    path = tmp_path_factory.mktemp("patches") / "p.zarr"
    root = zarr.open_group(str(path), mode="w", zarr_format=3)
    rng = np.random.default_rng(5)
    plane = root.create_array("plane", shape=(N, H, W), chunks=(3, 8, 12), dtype="f4",
                              compressors=[ZstdCodec(level=1)], dimension_names=("time", "y", "x"))
    plane[...] = rng.standard_normal((N, H, W)).astype("f4")
    scalar = root.create_array("scalar", shape=(N,), chunks=(3,), dtype="i8", dimension_names=("time",))
    scalar[...] = np.arange(N) * 10
    stack = root.create_array("stack", shape=(N, 2, H, W), chunks=(3, 1, 20, 36), dtype="i2",
                              dimension_names=("time", "band", "y", "x"))
    stack[...] = rng.integers(-1000, 1000, (N, 2, H, W)).astype("i2")
    return str(path)


def values(store_path, name):
    return zarr.open_group(store_path, mode="r")[name][...]


def open_ds(store_path, variables=("plane",), store=None, **kwargs):
    store = store if store is not None else ib.store(store_path)
    geoms = ib.open_geometries(store, list(variables))
    manifest = ib.split_by_chunk(geoms[variables[0]], fractions=(1.0, 0.0, 0.0))
    kwargs.setdefault("batch_size", 7)
    kwargs.setdefault("block_chunks", 2)
    return ib.InSituDataset(store, manifest, geometries=geoms, **kwargs)


def rows_of(view, check=None):
    out = []
    for b in view:
        assert b.patch_dims == ("y", "x")
        for i, (s, (y, x)) in enumerate(zip(b.sample_indices.tolist(), b.patch_origins.tolist())):
            if check is not None:
                check(b, i, s, y, x)
            out.append((s, y, x))
    return out


@pytest.mark.parametrize("size,stride", [((8, 12), None), ((10, 16), (5, 4)), ((40, 36), None), ((1, 1), (13, 7))])
def test_grid_covers_every_position_once_with_exact_values(store_path, size, stride):
    plane = values(store_path, "plane")
    kwargs = {} if stride is None else {"patch_stride": dict(zip("yx", stride))}
    with open_ds(store_path, patch={"y": size[0], "x": size[1]}, **kwargs) as ds:
        step = stride or size
        ys, xs = range(0, H - size[0] + 1, step[0]), range(0, W - size[1] + 1, step[1])
        expected = {(s, y, x) for s in range(N) for y in ys for x in xs}
        assert ds.describe()["config"]["drawable_samples"]["train"] == len(expected)
        assert len(ds.train) == -(-len(expected) // 7)

        def check(b, i, s, y, x):
            np.testing.assert_array_equal(b.arrays["plane"][i], plane[s, y:y + size[0], x:x + size[1]])

        for epoch in (0, 1):
            ds.set_epoch(epoch)
            got = rows_of(ds.train, check)
            assert len(got) == len(set(got)) and set(got) == expected
        seq = rows_of(ds.all)
        assert sorted(seq) == sorted(expected) and [s for s, _, _ in seq] == sorted(s for s, _, _ in seq)


def test_unpatched_variables_ride_along_whole_and_patches_cut_every_variable_with_the_dims(store_path):
    plane, scalar, stack = (values(store_path, n) for n in ("plane", "scalar", "stack"))
    with open_ds(store_path, ("plane", "scalar", "stack"), patch={"y": 16, "x": 12}, patch_stride=8) as ds:
        geoms = ds.output_geometries()
        assert geoms["plane"].inner_shape == (16, 12) and geoms["stack"].inner_shape == (2, 16, 12)
        assert geoms["scalar"].inner_shape == ()
        report = ds.describe()
        assert report["patches"]["per_sample"] == 4 * 4 and report["variables"]["stack"]["batch_row_shape"] == (2, 16, 12)
        n = 0
        for b in ds.train:
            assert b.arrays["stack"].shape[1:] == (2, 16, 12) and b.arrays["scalar"].shape == (len(b),)
            for i, (s, (y, x)) in enumerate(zip(b.sample_indices, b.patch_origins)):
                np.testing.assert_array_equal(b.arrays["plane"][i], plane[s, y:y + 16, x:x + 12])
                np.testing.assert_array_equal(b.arrays["stack"][i], stack[s, :, y:y + 16, x:x + 12])
                assert b.arrays["scalar"][i] == scalar[s]
            n += len(b)
        assert n == N * 16


def test_random_origins_are_a_pure_function_of_seed_and_epoch(store_path):
    plane = values(store_path, "plane")

    def run(seed, epoch):
        with open_ds(store_path, patch={"y": 9, "x": 10}, patch_mode="random", patches_per_sample=3, seed=seed) as ds:
            ds.set_epoch(epoch)

            def check(b, i, s, y, x):
                assert 0 <= y <= H - 9 and 0 <= x <= W - 10
                np.testing.assert_array_equal(b.arrays["plane"][i], plane[s, y:y + 9, x:x + 10])

            got = rows_of(ds.train, check)
            # The origins are a pure function anyone can recompute: (anchor, patch, epoch).
            anchors = np.repeat(np.arange(N), 3)
            again = ds.patching.origins(anchors, np.tile(np.arange(3), N), epoch)
            assert sorted(got) == sorted(zip(anchors.tolist(), *again.T.tolist()))
            return got

    first = run(1, 0)
    assert len(first) == 3 * N and sorted(s for s, _, _ in first) == sorted(list(range(N)) * 3)
    assert run(1, 0) == first
    assert sorted(run(1, 1)) != sorted(first)
    assert sorted(run(2, 0)) != sorted(first)
    assert len({(y, x) for _, y, x in first}) > N  # origins spread, not one per sample


def test_each_stored_chunk_is_read_once_per_epoch_however_many_patches(store_path):
    counting = _ext.CountingStore(ib.store(store_path))
    with open_ds(store_path, store=counting, patch={"y": 4, "x": 4}, patch_stride=2) as ds:
        counting.reset()
        got = rows_of(ds.train)
        assert len(got) == N * 19 * 17
        reads = {k: n for k, n in counting.reads().items() if "/c/" in k}
        assert len(reads) == (N // 3) * 5 * 3  # every stored chunk of the plane
        assert set(reads.values()) == {1}


@pytest.mark.parametrize("mode", ["grid", "random"])
@pytest.mark.parametrize("stop", [0, 5, 20])
def test_resume_mid_epoch_with_patches(store_path, stop, mode):
    # Random origins are drawn per (seed, epoch): a resumed pass must draw the same ones.
    kwargs = {"patch_mode": "grid"} if mode == "grid" else {"patch_mode": "random", "patches_per_sample": 15}

    def make():
        return open_ds(store_path, patch={"y": 8, "x": 12}, seed=4, **kwargs)

    with make() as ds:
        ds.set_epoch(3)
        full = rows_of(ds.train)
    with make() as ds:
        ds.set_epoch(3)
        it = iter(ds.train)
        head = [r for b in (next(it) for _ in range(stop)) for r in zip(b.sample_indices.tolist(),
                                                                       *b.patch_origins.T.tolist())]
        state = json.loads(json.dumps(ds.train.state_dict()))
        it.close()
    with make() as ds:
        ds.train.load_state_dict(state)
        assert head + rows_of(ds.train) == full


def test_ddp_ranks_take_equal_disjoint_steps_with_patches(store_path):
    per_rank = []
    for rank in range(3):
        with open_ds(store_path, patch={"y": 20, "x": 18}, rank=rank, world_size=3, seed=2) as ds:
            per_rank.append(rows_of(ds.train))
    assert len({len(r) for r in per_rank}) == 1 and len(per_rank[0]) % 7 == 0
    flat = [r for rows in per_rank for r in rows]
    assert len(flat) == len(set(flat))


def test_patch_arguments_are_checked_by_name(store_path):
    with pytest.raises(InvalidArgumentError, match=r"'z'.*known dimensions: x, y"):
        open_ds(store_path, patch={"z": 4})
    with pytest.raises(InvalidArgumentError, match=r"size 41 on patch axis 0 must be in \[1, 40\] \(the field's"
                                                   r' extent there; patch_edges="pad" takes a larger patch\)'):
        open_ds(store_path, patch={"y": 41, "x": 4})
    with pytest.raises(InvalidArgumentError, match="patch_stride, patches_per_sample and patch_edges need patch="):
        open_ds(store_path, patch_stride=4)
    with pytest.raises(InvalidArgumentError, match='patches_per_sample applies to patch_mode="random"'):
        open_ds(store_path, patch={"y": 4}, patches_per_sample=2)
    with pytest.raises(InvalidArgumentError, match='patch_stride applies to patch_mode="grid"'):
        open_ds(store_path, patch={"y": 4}, patch_mode="random", patch_stride=2)
    with pytest.raises(InvalidArgumentError, match="patch_mode"):
        open_ds(store_path, patch={"y": 4}, patch_mode="tiles")
    with pytest.raises(InvalidTypeError, match="patch must be a non-empty mapping"):
        open_ds(store_path, patch=[4, 4])
    with pytest.raises(InvalidArgumentError, match=r"patch\['y'\]"):
        open_ds(store_path, patch={"y": 0})
    with pytest.raises(InvalidArgumentError, match='plan="shuffle" is'):
        open_ds(store_path, patch={"y": 4}, labels=np.arange(N) % 2, plan="stratified", batch_size=8)


def test_field_axis_numbers_name_patch_axes_too(store_path):
    plane = values(store_path, "plane")
    with open_ds(store_path, patch={0: 20, 1: 36}) as ds:
        for b in ds.all:
            assert b.patch_dims == ("axis 0", "axis 1")
            for i, (s, (y, x)) in enumerate(zip(b.sample_indices, b.patch_origins)):
                np.testing.assert_array_equal(b.arrays["plane"][i], plane[s, y:y + 20, :])


def test_cover_edges_adds_a_last_position_flush_with_each_axis_end(store_path):
    plane = values(store_path, "plane")
    with open_ds(store_path, patch={"y": 16, "x": 10}, patch_edges="cover") as ds:
        assert ds.describe()["patches"]["edges"] == "cover"
        covered = np.zeros((N, H, W), dtype=int)

        def check(b, i, s, y, x):
            np.testing.assert_array_equal(b.arrays["plane"][i], plane[s, y:y + 16, x:x + 10])
            covered[s, y:y + 16, x:x + 10] += 1

        got = rows_of(ds.train, check)
        assert {(y, x) for _, y, x in got} == {(y, x) for y in (0, 16, 24) for x in (0, 10, 20, 26)}
        assert covered.min() >= 1  # every element lies in some patch, none leaves the field
    with pytest.raises(InvalidArgumentError, match='patch_edges="cover" applies to patch_mode="grid"'):
        open_ds(store_path, patch={"y": 4}, patch_mode="random", patch_edges="cover")
    with pytest.raises(InvalidArgumentError, match="patch_edges must be one of 'inside', 'cover', 'pad', got 'edge'"):
        open_ds(store_path, patch={"y": 4}, patch_edges="edge")


def test_a_resume_state_belongs_to_its_way_of_drawing(store_path):
    with open_ds(store_path, patch={"y": 8, "x": 12}, batch_size=6) as ds:
        it = iter(ds.train)
        next(it)
        state = ds.train.state_dict()
        it.close()
    assert state["draw"] == "patches 8x12 grid stride 8x12 inside"
    with open_ds(store_path, batch_size=6) as ds, pytest.raises(InvalidArgumentError, match="saved drawing samples as"):
        ds.train.load_state_dict(state)
    with open_ds(store_path, patch={"y": 8, "x": 12}, patch_stride=4, batch_size=6) as ds:
        with pytest.raises(InvalidArgumentError, match="this dataset draws 'patches 8x12 grid stride 4x4 inside'"):
            ds.train.load_state_dict(state)


def test_a_lattice_too_fine_for_one_epochs_order_is_refused(store_path, monkeypatch):
    from insitubatch import dataset

    monkeypatch.setattr(dataset, "MAX_EPOCH_ROWS", 1000)
    with pytest.raises(InvalidArgumentError, match="raise patch_stride, or draw patches_per_sample random patches"):
        open_ds(store_path, patch={"y": 4, "x": 4}, patch_stride=1)


# -- patch_edges="pad" -------------------------------------------------------------------------
PN, PH, PW = 6, 13, 10


@pytest.fixture(scope="module")
def pad_path(tmp_path_factory):
    """(time, y, x) arrays of 13 x 10 in tiles of 5 x 4 (ragged): float32 with a NaN fill
    value, int16 with fill 0, uint8 with fill 5; and a (time, z, y, x) float64 volume with
    fill -1.5."""
    path = tmp_path_factory.mktemp("pad") / "p.zarr"
    root = zarr.open_group(str(path), mode="w", zarr_format=3)
    rng = np.random.default_rng(11)
    dims = ("time", "y", "x")
    plane = root.create_array("plane", shape=(PN, PH, PW), chunks=(3, 5, 4), dtype="f4", fill_value=np.nan,
                              dimension_names=dims)
    plane[...] = rng.standard_normal((PN, PH, PW)).astype("f4")
    counts = root.create_array("counts", shape=(PN, PH, PW), chunks=(2, 5, 4), dtype="i2", fill_value=0,
                               dimension_names=dims)
    counts[...] = rng.integers(1, 1000, (PN, PH, PW)).astype("i2")
    level = root.create_array("level", shape=(PN, PH, PW), chunks=(3, 13, 10), dtype="u1", fill_value=5,
                              dimension_names=dims)
    level[...] = rng.integers(10, 200, (PN, PH, PW)).astype("u1")
    vol = root.create_array("vol", shape=(PN, 5, 6, 7), chunks=(3, 2, 4, 3), dtype="f8", fill_value=-1.5,
                            dimension_names=("time", "z", "y", "x"))
    vol[...] = rng.standard_normal((PN, 5, 6, 7))
    return str(path)


def padded(path, name, reach):
    """zarr-python's read of ``name``, padded past each field axis's end with its fill value
    to ``reach`` elements (np.pad, constant)."""
    array = zarr.open_group(path, mode="r")[name]
    data = array[...]
    widths = [(0, 0)] + [(0, max(0, r - n)) for r, n in zip(reach, data.shape[1:])]
    return np.pad(data, widths, constant_values=array.fill_value)


def patch_rows(view, dims):
    for b in view:
        assert b.patch_dims == dims
        for i, (s, origin) in enumerate(zip(b.sample_indices.tolist(), b.patch_origins.tolist())):
            yield b, i, s, tuple(origin)


@pytest.mark.parametrize("size", [(5, 4), (13, 10), (20, 3)])
def test_pad_grid_covers_every_element_once_with_the_fill_value_past_the_end(pad_path, size):
    h, w = size
    ys, xs = range(0, PH, h), range(0, PW, w)  # every origin below the extent
    reach = (ys[-1] + h, xs[-1] + w)
    expected = {name: padded(pad_path, name, reach) for name in ("plane", "counts")}
    with open_ds(pad_path, ("plane", "counts"), patch={"y": h, "x": w}, patch_edges="pad", batch_size=5) as ds:
        patches = ds.describe()["patches"]
        assert patches["per_sample"] == len(ys) * len(xs) and patches["edges"] == "pad"
        inside = sum(y + h <= PH for y in ys) * sum(x + w <= PW for x in xs)
        assert patches["padded_per_sample"] == len(ys) * len(xs) - inside
        assert ds.describe()["config"]["drawable_samples"]["train"] == PN * len(ys) * len(xs)
        assert ds.output_geometries()["plane"].inner_shape == size
        summary = io.StringIO()
        ds.print_summary(file=summary)
        extra = f" ({len(ys) * len(xs) - inside} padded)" if inside < len(ys) * len(xs) else ""
        assert f"edges pad): {len(ys) * len(xs)} per sample{extra}" in summary.getvalue()
        covered = np.zeros((PN, *reach), dtype=int)
        seen = set()
        for b, i, s, (y, x) in patch_rows(ds.train, ("y", "x")):
            assert b.arrays["plane"].dtype == np.float32 and b.arrays["counts"].dtype == np.int16
            for name, want in expected.items():
                np.testing.assert_array_equal(b.arrays[name][i], want[s, y:y + h, x:x + w])  # NaN == NaN here
            covered[s, y:y + h, x:x + w] += 1
            seen.add((s, y, x))
        assert seen == {(s, y, x) for s in range(PN) for y in ys for x in xs}
        assert (covered[:, :PH, :PW] == 1).all()  # stride == size: every element exactly once
        assert np.isnan(expected["plane"][:, PH:, :]).all() or PH == reach[0]


def test_pad_cuts_three_dimensional_patches_exactly(pad_path):
    size = {"z": 2, "y": 4, "x": 5}
    lattice = [range(0, 5, 2), range(0, 6, 4), range(0, 7, 5)]
    want = padded(pad_path, "vol", (6, 8, 10))
    with open_ds(pad_path, ("vol",), patch=size, patch_edges="pad", batch_size=4) as ds:
        got = set()
        for b, i, s, (z, y, x) in patch_rows(ds.train, ("z", "y", "x")):
            np.testing.assert_array_equal(b.arrays["vol"][i], want[s, z:z + 2, y:y + 4, x:x + 5])
            got.add((s, z, y, x))
    assert got == {(s, z, y, x) for s in range(PN) for z in lattice[0] for y in lattice[1] for x in lattice[2]}
    assert (want[:, 5:] == -1.5).all()


def test_pad_random_origins_span_the_whole_axis_and_are_a_pure_function_of_seed_and_epoch(pad_path):
    want = padded(pad_path, "plane", (PH + 8, PW + 9))

    def run(seed, epoch):
        with open_ds(pad_path, patch={"y": 9, "x": 10}, patch_mode="random", patch_edges="pad",
                     patches_per_sample=8, seed=seed) as ds:
            assert ds.describe()["patches"]["edges"] == "pad"
            ds.set_epoch(epoch)
            got = []
            for b, i, s, (y, x) in patch_rows(ds.train, ("y", "x")):
                assert 0 <= y < PH and 0 <= x < PW  # origins over [0, extent): the patch may run past the end
                np.testing.assert_array_equal(b.arrays["plane"][i], want[s, y:y + 9, x:x + 10])
                got.append((s, y, x))
            anchors = np.repeat(np.arange(PN), 8)
            again = ds.patching.origins(anchors, np.tile(np.arange(8), PN), epoch)
            assert sorted(got) == sorted(zip(anchors.tolist(), *again.T.tolist()))
            return got

    first = run(3, 0)
    assert run(3, 0) == first
    assert sorted(run(3, 1)) != sorted(first) and sorted(run(4, 0)) != sorted(first)
    assert max(y for _, y, _ in first) > PH - 9 and max(x for _, _, x in first) > 0  # past the inside range


def test_pad_inside_a_crop_pads_past_the_crops_end_and_reads_nothing_outside_it(pad_path):
    rows, cols = np.arange(2, 11), np.array([6, 7, 8, 9, 0, 1, 2])  # crop y (2, 11), x (6, 3) wraps
    array = zarr.open_group(pad_path, mode="r")["plane"]
    region = array[...][:, rows][:, :, cols]
    want = np.pad(region, [(0, 0), (0, 3), (0, 1)], constant_values=np.nan)  # to 12 x 8
    with open_ds(pad_path, patch={"y": 4, "x": 4}, patch_edges="pad", crop={"y": (2, 11), "x": (6, 3)}) as ds:
        assert ds.describe()["patches"]["extent"] == [9, 7]
        got = set()
        for b, i, s, (y, x) in patch_rows(ds.train, ("y", "x")):
            np.testing.assert_array_equal(b.arrays["plane"][i], want[s, y:y + 4, x:x + 4])
            got.add((s, y, x))
    assert got == {(s, y, x) for s in range(PN) for y in (0, 4, 8) for x in (0, 4)}


def test_a_patch_larger_than_the_field_needs_pad(pad_path):
    with pytest.raises(InvalidArgumentError,
                       match=r"size 16 on patch axis 0 must be in \[1, 13\].*patch_edges=\"pad\""):
        open_ds(pad_path, patch={"y": 16, "x": 4})
    want = padded(pad_path, "counts", (16, 12))
    with open_ds(pad_path, ("counts",), patch={"y": 16, "x": 12}, patch_edges="pad") as ds:
        n = 0
        for b, i, s, (y, x) in patch_rows(ds.all, ("y", "x")):
            assert (y, x) == (0, 0)
            np.testing.assert_array_equal(b.arrays["counts"][i], want[s])
            n += 1
        assert n == PN


def test_pad_fraction_counts_padded_elements_as_invalid(pad_path):
    mask = np.ones((PH, PW), dtype=bool)
    mask[:2, :2] = False
    lattice = [(y, x) for y in range(0, PH, 5) for x in range(0, PW, 4)]
    full = np.zeros((15, 12), dtype=bool)
    full[:PH, :PW] = mask
    for min_valid in (0.5, 1.0):
        keep = {(y, x) for y, x in lattice if full[y:y + 5, x:x + 4].mean() >= min_valid}
        assert len(keep) == {0.5: 8, 1.0: 3}[min_valid]  # padded (10, 8) holds 6 valid of 20; (0, 8) 10
        with open_ds(pad_path, patch={"y": 5, "x": 4}, patch_edges="pad", sample_filter=mask,
                     min_valid=min_valid) as ds:
            got = {(s, y, x) for _, _, s, (y, x) in patch_rows(ds.train, ("y", "x"))}
            assert ds.describe()["sample_filter"]["drawn"]["train"] == PN * len(keep)
        assert got == {(s, y, x) for s in range(PN) for y, x in keep}


def test_pad_value_is_the_fill_value_cast_to_a_transforms_dtype(pad_path):
    want = padded(pad_path, "level", (15, 12)).astype("f4")
    with open_ds(pad_path, ("level",), patch={"y": 5, "x": 4}, patch_edges="pad",
                 chunk_transforms=[ib.Cast("f4")]) as ds:
        for b, i, s, (y, x) in patch_rows(ds.train, ("y", "x")):
            assert b.arrays["level"].dtype == np.float32
            np.testing.assert_array_equal(b.arrays["level"][i], want[s, y:y + 5, x:x + 4])
    assert want[0, 14, 11] == 5.0
    with pytest.raises(InvalidArgumentError, match=r"pads 'plane' with its fill value nan, which its chunk"):
        open_ds(pad_path, patch={"y": 5, "x": 4}, patch_edges="pad", chunk_transforms=[ib.Cast("i4")])
    from insitubatch.patching import pad_element

    assert pad_element("v", np.int16(300).tobytes(), np.dtype("i2"), np.dtype("f8")) == np.float64(300).tobytes()
    with pytest.raises(InvalidArgumentError, match="fill value 300, which its chunk transform's output dtype uint8"):
        pad_element("v", np.int16(300).tobytes(), np.dtype("i2"), np.dtype("u1"))  # would wrap to 44


REC = np.dtype([("a", "<i2"), ("b", "<f4")])


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("dtype, fill", [("bool", True), (REC, (7, 1.5)), ("S3", b"zz"), ("<U3", "qq")],
                         ids=["bool", "record", "bytes", "text"])
def test_pad_fills_bool_record_and_fixed_text_rows_with_their_fill_value(tmp_path, zarr_format, dtype, fill):
    # Item sizes of 1, 6, 3 and 12 bytes; zarr v2 stores them in F order (transposed in the
    # read), v3 with named dimensions.
    n, h, w = 4, 7, 5
    rng = np.random.default_rng(3)
    data = np.empty((n, h, w), dtype)
    if data.dtype.names:
        data["a"], data["b"] = rng.integers(0, 100, data.shape), rng.standard_normal(data.shape)
    else:
        data[...] = rng.choice(np.array([True, False] if dtype == "bool" else ["ab", "c", "xyz"], dtype), data.shape)
    root = zarr.open_group(str(tmp_path / "t.zarr"), mode="w", zarr_format=zarr_format)
    extra = {"dimension_names": ("time", "y", "x")} if zarr_format == 3 else {"order": "F"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr-python: these dtypes have no v3 spec yet
        array = root.create_array("v", shape=data.shape, chunks=(2, 3, 2), dtype=dtype,
                                  fill_value=np.array(fill, dtype)[()], **extra)
        array[...] = data
    want = np.empty((n, h + 1, w + 1), dtype)
    want[...] = np.array(fill, dtype)
    want[:, :h, :w] = data
    rows = 0
    with open_ds(str(tmp_path / "t.zarr"), ("v",), patch={0: 4, 1: 3}, patch_edges="pad", batch_size=3) as ds:
        for b in ds.train:
            for i, (s, (y, x)) in enumerate(zip(b.sample_indices.tolist(), b.patch_origins.tolist())):
                assert b.arrays["v"].dtype == want.dtype
                assert b.arrays["v"][i].tobytes() == want[s, y:y + 4, x:x + 3].tobytes()
                rows += 1
    assert rows == n * 2 * 2


def test_a_resume_state_carries_pad(pad_path):
    for kwargs, draw in (({}, "patches 5x4 grid stride 5x4 pad"),
                         ({"patch_mode": "random", "patches_per_sample": 2}, "patches 5x4 random 2 per sample pad")):
        with open_ds(pad_path, patch={"y": 5, "x": 4}, patch_edges="pad", batch_size=6, **kwargs) as ds:
            it = iter(ds.train)
            next(it)
            state = ds.train.state_dict()
            it.close()
        assert state["draw"] == draw
        with open_ds(pad_path, patch={"y": 5, "x": 4}, batch_size=6, **kwargs) as ds:
            with pytest.raises(InvalidArgumentError, match="saved drawing samples as"):
                ds.train.load_state_dict(state)


def test_the_memory_model_sizes_batches_at_the_patch_shape(tmp_path):
    # 256 x 256 patches of 2048 x 2048 fields: a queued batch holds batch x patch, not batch
    # x field (64x less here). Geometry alone: no chunk is written or read.
    root = zarr.open_group(str(tmp_path / "big.zarr"), mode="w", zarr_format=3)
    root.create_array("v", shape=(4, 2048, 2048), chunks=(1, 2048, 2048), dtype="f4",
                      dimension_names=("time", "y", "x"))
    root.create_array("bands", shape=(4, 3, 2048, 2048), chunks=(1, 3, 1024, 1024), dtype="i2",
                      dimension_names=("time", "band", "y", "x"))
    batch, depth = 16, 3
    for patch, row in ((None, 2048 * 2048), ({"y": 256, "x": 256}, 256 * 256)):
        kwargs = {} if patch is None else {"patch": patch}
        with open_ds(str(tmp_path / "big.zarr"), variables=("v", "bands"), batch_size=batch, prefetch_depth=depth,
                     **kwargs) as ds:
            report = ds.describe()
            memory = report["memory"]
            per_row = row * 4 + 3 * row * 2  # float32 v, int16 bands (3 of them in each row)
            assert memory["queue_bytes"] == (depth + 1) * batch * per_row
            assert memory["accounted_bytes"] == (memory["residency_bytes"] + memory["inflight_bytes"]
                                                 + memory["queue_bytes"] + memory["scratch_bytes"])
            if patch is not None:
                assert report["variables"]["v"]["batch_row_shape"] == (256, 256)
                assert report["variables"]["bands"]["batch_row_shape"] == (3, 256, 256)
    # The engine's model itself: what gather writes per sample is the patch's bytes.
    terms = _ext.memory_model(
        [_ext.SizedLabel("v", [4, 2048, 2048], [1, 2048, 2048], 0, "<f4", 0, [2048, 2048], "<f4", False, rf)
         for rf in ([], [256, 256])],
        batch_size=batch, block_chunks=1, ref_spc=0, max_inflight=1, prefetch_depth=depth, shuffle=True,
        reread_spill=False, batch_transforms=False, n_train_chunks=4, split_chunks=4, budget=None, iterations=1,
        cache_dir=False)
    assert [t.output_sample_bytes for t in terms.labels] == [2048 * 2048 * 4, 256 * 256 * 4]
    assert terms.queue_bytes == (depth + 1) * batch * (2048 * 2048 * 4 + 256 * 256 * 4)
