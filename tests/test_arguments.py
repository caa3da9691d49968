"""Every argument is checked at construction, with an InSituError subclass that names the
argument, the value and what is accepted -- never later, inside a pass or inside numpy."""

from __future__ import annotations

import numpy as np
import pytest
import zarr
from zarr.codecs import ZstdCodec

import insitubatch
from insitubatch import (
    InSituDataset,
    InSituError,
    InvalidArgumentError,
    ResourceExhaustedError,
    open_geometries,
    split_by_chunk,
)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("args") / "s.zarr"
    arr = zarr.create_array(zarr.storage.LocalStore(path), name="t2m", shape=(40, 3, 4), chunks=(8, 3, 4),
                            dtype="float32", compressors=[ZstdCodec(level=1)], fill_value=0)
    arr[...] = np.arange(480, dtype="float32").reshape(40, 3, 4)
    return insitubatch.local_store(path)


@pytest.fixture(scope="module")
def geoms(store):
    return open_geometries(store, ["t2m"])


BAD = [
    ({"batch_size": 0}, InvalidArgumentError, r"batch_size must be in \[1, 2147483647\], got 0"),
    ({"batch_size": True}, InvalidArgumentError, r"batch_size must be an integer .* got True \(bool\)"),
    ({"batch_size": 2.0}, InvalidArgumentError, r"batch_size must be an integer"),
    ({"batch_size": 2**63}, InvalidArgumentError, r"batch_size must be in \[1, 2147483647\]"),
    ({"batch_size": 2**30}, ResourceExhaustedError, r"the batch queue .*Lower batch_size"),
    ({"block_chunks": 2**40}, InvalidArgumentError, r"block_chunks must be in"),
    ({"block_chunks": -1}, InvalidArgumentError, r"block_chunks must be in"),
    ({"max_inflight": 10**9}, InvalidArgumentError, r"max_inflight must be in \[1, 4096\]"),
    ({"max_inflight": 0}, InvalidArgumentError, r"max_inflight must be in \[1, 4096\], got 0"),
    ({"prefetch_depth": 0}, InvalidArgumentError, r"prefetch_depth must be in \[1, 1024\], got 0"),
    ({"prefetch_depth": -5}, InvalidArgumentError, r"prefetch_depth must be in \[1, 1024\], got -5"),
    ({"prefetch_depth": 10**7}, InvalidArgumentError, r"prefetch_depth must be in \[1, 1024\]"),
    ({"decode_threads": 3000}, InvalidArgumentError, r"decode_threads must be in \[0, 1024\], got 3000"),
    ({"gather_threads": 300}, InvalidArgumentError, r"gather_threads must be in \[0, 256\]"),
    ({"seed": -1}, InvalidArgumentError, r"seed must be in \[0, 18446744073709551615\], got -1"),
    ({"seed": 2**70}, InvalidArgumentError, r"seed must be in \[0, 18446744073709551615\]"),
    ({"seed": "x"}, InvalidArgumentError, r"seed must be an integer .*'x'"),
    ({"shuffle": "yes"}, InvalidArgumentError, r"shuffle must be True or False, got 'yes'"),
    ({"persist": 1}, InvalidArgumentError, r"persist must be True or False"),
    ({"on_bad_chunk": "skip"}, InvalidArgumentError, r"on_bad_chunk must be"),
    ({"cache_budget_bytes": 0}, InvalidArgumentError, r"cache_budget_bytes must be in"),
    ({"cache_budget_bytes": 1000}, InvalidArgumentError, r"below the residency floor"),
    ({"cache_budget_bytes": "1GB"}, InvalidArgumentError, r"cache_budget_bytes must be an integer"),
]


@pytest.mark.parametrize("kwargs, error, match", BAD, ids=[str(k) for k, _, _ in BAD])
def test_bad_arguments_fail_at_construction(store, geoms, kwargs, error, match):
    with pytest.raises(error, match=match) as info:
        InSituDataset(store, split_by_chunk(geoms["t2m"]), geoms, **kwargs)
    assert isinstance(info.value, InSituError)


def test_numpy_integers_and_bools_are_accepted(store, geoms):
    ds = InSituDataset(store, split_by_chunk(geoms["t2m"]), geoms, batch_size=np.int64(4), seed=np.uint64(2**63),
                       shuffle=np.bool_(True), block_chunks=np.int32(2))
    assert ds.batch_size == 4 and ds.seed == 2**63 and ds.shuffle is True
    assert sum(len(b.sample_indices) for b in ds.train) == len(ds.manifest.chunks["train"]) * 8


def test_sizing_inputs_are_read_only(store, geoms):
    ds = InSituDataset(store, split_by_chunk(geoms["t2m"]), geoms, batch_size=4)
    for name in ("batch_size", "block_chunks", "max_inflight", "prefetch_depth", "seed", "shuffle",
                 "cache_budget_bytes", "decode_threads"):
        with pytest.raises(AttributeError):
            setattr(ds, name, 8)
    assert ds.batch_size == 4


def test_set_epoch_and_describe_check_their_arguments(store, geoms):
    ds = InSituDataset(store, split_by_chunk(geoms["t2m"]), geoms)
    with pytest.raises(InvalidArgumentError, match=r"epoch must be in \[0, "):
        ds.set_epoch(-1)
    with pytest.raises(InvalidArgumentError, match="epoch must be an integer"):
        ds.set_epoch(1.5)
    with pytest.raises(InvalidArgumentError, match="iterations must be in"):
        ds.describe(iterations=0)


def test_a_window_wider_than_the_array_and_an_empty_axis(tmp_path, store, geoms):
    g = geoms["t2m"]
    wide = {"x": g, "y": g.shift(40)}
    with pytest.raises(InvalidArgumentError, match="the window .* spans 41 samples but the sample axis has 40"):
        InSituDataset(store, split_by_chunk(g), wide)
    path = tmp_path / "empty.zarr"
    zarr.create_array(zarr.storage.LocalStore(path), name="e", shape=(0, 3), chunks=(4, 3), dtype="f4")
    empty = insitubatch.local_store(path)
    eg = open_geometries(empty, ["e"])
    with pytest.raises(InvalidArgumentError, match="empty"):
        InSituDataset(empty, split_by_chunk(eg["e"]), eg)


def test_a_chunk_no_machine_can_hold_fails_at_construction(tmp_path):
    """A 32 GiB chunk is metadata only here (never written): it is refused before any read."""
    path = tmp_path / "huge.zarr"
    zarr.create_array(zarr.storage.LocalStore(path), name="v", shape=(64, 65536, 65536),
                      chunks=(2, 65536, 65536), dtype="float32", fill_value=0)
    s = insitubatch.local_store(path)
    g = open_geometries(s, ["v"])
    with pytest.raises(ResourceExhaustedError, match="needs .* at once but the machine has"):
        InSituDataset(s, split_by_chunk(g["v"]), g)


@pytest.mark.parametrize("fractions, match", [
    ((float("nan"), 0.1, 0.1), "finite"),
    (("0.8", 0.1, 0.1), "must be a number"),
    ((0.8, -0.1, 0.3), "in \\[0, 1\\]"),
    ((0.8, 0.3, 0.3), "sum"),
    ((0.8, 0.2), "three"),
])
def test_split_fractions_are_checked(geoms, fractions, match):
    with pytest.raises(InvalidArgumentError, match=match):
        split_by_chunk(geoms["t2m"], fractions=fractions)


# -- one check per kind of argument, one error class per mistake -------------------------------


def test_a_wrong_type_is_a_type_error_and_a_bad_value_a_value_error_everywhere(store, geoms):
    """The same mistake raised InvalidTypeError in the adapters and InvalidArgumentError in
    the dataset, the store options and planfetch; now a wrong type is InvalidTypeError (a
    TypeError and an InvalidArgumentError) and a bad value InvalidArgumentError alone."""
    import planfetch as pf
    from insitubatch import InvalidTypeError, block_shuffled_order

    wrong_types = [
        lambda: InSituDataset(store, split_by_chunk(geoms["t2m"]), geoms, batch_size=2.0),
        lambda: InSituDataset(store, split_by_chunk(geoms["t2m"]), geoms, shuffle="yes"),
        lambda: InSituDataset(store, split_by_chunk(geoms["t2m"]), geoms, eviction=1),
        lambda: InSituDataset(store, {"train": [0]}, geoms),
        lambda: insitubatch.store("http://127.0.0.1:9/x", io_threads=2.5),
        lambda: insitubatch.store("http://127.0.0.1:9/x", verify_tls="no"),
        lambda: block_shuffled_order([0], 8, 32, block_chunks=1, seed=True, epoch=0),
        lambda: pf.SharedDiskCache("/nonexistent/cache", lock_wait_seconds="10"),
        lambda: split_by_chunk(geoms["t2m"], fractions=("0.8", 0.1, 0.1)),
    ]
    for call in wrong_types:
        with pytest.raises(InvalidTypeError) as info:
            call()
        assert isinstance(info.value, TypeError) and isinstance(info.value, InvalidArgumentError)
    bad_values = [
        lambda: InSituDataset(store, split_by_chunk(geoms["t2m"]), geoms, batch_size=0),
        lambda: InSituDataset(store, split_by_chunk(geoms["t2m"]), geoms, eviction="fifo"),
        lambda: insitubatch.store("http://127.0.0.1:9/x", io_threads=65),
        lambda: pf.SharedDiskCache("/nonexistent/cache", lock_wait_seconds=0),
    ]
    for call in bad_values:
        with pytest.raises(InvalidArgumentError) as info:
            call()
        assert not isinstance(info.value, TypeError)


def test_numpy_integers_are_integers_for_every_check(store, geoms):
    """stores' own check refused numpy integers that the dataset's took; bools are refused
    by both (the order functions took True as 1)."""
    from insitubatch import block_shuffled_order, sequential_order
    from insitubatch.distributed import resolve

    native = insitubatch.store("http://127.0.0.1:9/x", io_threads=np.int64(3), max_retries=np.uint8(2))
    assert native is not None
    assert resolve(np.int64(1), np.int32(2)) == (1, 2)
    assert len(sequential_order(np.arange(2), np.int64(8), np.int64(16))) == 16
    with pytest.raises(InvalidArgumentError, match=r"seed must be an integer .*got True \(bool\)"):
        block_shuffled_order([0], 8, 32, block_chunks=1, seed=True, epoch=0)
    with pytest.raises(InvalidArgumentError, match="'io_threads' must be an integer"):
        insitubatch.store("http://127.0.0.1:9/x", io_threads=np.bool_(True))


def test_string_options_are_literals_with_their_accepted_values():
    import inspect
    import typing

    from insitubatch import arguments

    params = inspect.signature(InSituDataset.__init__).parameters
    hints = typing.get_type_hints(InSituDataset.__init__)
    for name in ("on_bad_chunk", "plan", "remainder", "patch_mode", "patch_edges"):
        assert typing.get_args(hints[name]) == arguments.CHOICES[name], name
        assert params[name].default in arguments.CHOICES[name]
    # eviction's and revalidate's defaults are the engine's own (None: not restated here).
    for name in ("eviction", "revalidate"):
        literal, none = typing.get_args(hints[name])
        assert typing.get_args(literal) == arguments.CHOICES[name] and none is type(None)
        assert params[name].default is None
    with pytest.raises(InvalidArgumentError, match='eviction must be "next_use" or "lru", got \'fifo\''):
        arguments.choice("eviction", "fifo")


def test_the_string_options_accepted_here_are_those_the_engine_parses():
    """The Literal types name the values for signatures; the engine's parsers own them. Each
    value offered here parses natively, and the engine refuses what is not offered."""
    from insitubatch import _ext, arguments

    for name in ("on_bad_chunk", "eviction", "revalidate"):
        config = _ext.EngineConfig()
        for value in arguments.CHOICES[name]:
            setattr(config, name, value)
            assert getattr(config, name) == value
        with pytest.raises(InvalidArgumentError, match=name):
            setattr(config, name, "neither")
    for mode in arguments.CHOICES["patch_mode"]:
        for edges in arguments.CHOICES["patch_edges"]:
            if edges == "cover" and mode != "grid":
                continue
            _ext.PatchGrid(mode, [8], [4], [4], 1, 0, edges)
    for mode, edges in (("tiles", "inside"), ("grid", "wrap")):
        with pytest.raises(InvalidArgumentError, match="patch_mode" if mode == "tiles" else "patch_edges"):
            _ext.PatchGrid(mode, [8], [4], [4], 1, 0, edges)
