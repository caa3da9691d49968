"""Shuffle helpers over the anchor grid, through the C++ engine."""

from __future__ import annotations

import numpy as np
import pytest

from insitubatch.errors import InvalidArgumentError
from insitubatch.shuffle import (
    block_shuffled_order,
    chunk_permutation,
    sequential_order,
    shuffle_quality,
)


def _anchors(order, spc):
    return order[:, 0] * spc + order[:, 1]


def _quality_reference(order, spc):
    rank = _anchors(order, spc)
    n = len(rank)
    return 0.0 if n <= 1 else min(1.0, float(np.mean(np.abs(np.diff(rank)))) / (n / 3))


def test_permutation_deterministic_per_seed_and_epoch():
    ids = list(range(50))
    a = chunk_permutation(ids, seed=0, epoch=0)
    assert a.dtype == np.int64 and sorted(a.tolist()) == ids
    np.testing.assert_array_equal(a, chunk_permutation(ids, seed=0, epoch=0))
    assert not np.array_equal(a, chunk_permutation(ids, seed=0, epoch=1))
    assert not np.array_equal(a, chunk_permutation(ids, seed=1, epoch=0))
    assert not np.array_equal(a, np.arange(50))


def test_permutation_of_arbitrary_ids():
    ids = np.array([90, 3, 41, 7], dtype=np.int32)
    perm = chunk_permutation(ids, seed=5, epoch=2)
    assert sorted(perm.tolist()) == [3, 7, 41, 90]
    assert chunk_permutation([], seed=0, epoch=0).shape == (0,)


def test_every_sample_exactly_once():
    order = block_shuffled_order(range(20), 8, 160, block_chunks=4, seed=0, epoch=0)
    with pytest.warns(DeprecationWarning, match=r"DrawOrder\.\w+ is deprecated"):  # the original returned an ndarray
        assert order.shape == (160, 2) and order.dtype == np.int64
    anchors = _anchors(order, 8)
    np.testing.assert_array_equal(np.sort(anchors), np.arange(160))
    assert not np.array_equal(anchors, np.arange(160))


def test_partial_final_chunk():
    order = block_shuffled_order(range(5), 8, 37, block_chunks=2, seed=1, epoch=3)
    with pytest.warns(DeprecationWarning, match=r"DrawOrder\.\w+ is deprecated"):  # the original returned an ndarray
        assert order.shape == (37, 2)
    last = order[order[:, 0] == 4, 1]
    assert sorted(last.tolist()) == [0, 1, 2, 3, 4]
    np.testing.assert_array_equal(np.sort(_anchors(order, 8)), np.arange(37))


def test_deterministic_and_different_across_epochs():
    a = block_shuffled_order(range(20), 8, 160, block_chunks=4, seed=9, epoch=0)
    np.testing.assert_array_equal(
        a, block_shuffled_order(range(20), 8, 160, block_chunks=4, seed=9, epoch=0)
    )
    assert not np.array_equal(
        a, block_shuffled_order(range(20), 8, 160, block_chunks=4, seed=9, epoch=1)
    )
    assert not np.array_equal(
        a, block_shuffled_order(range(20), 8, 160, block_chunks=4, seed=10, epoch=0)
    )


def test_rows_of_a_block_come_only_from_its_chunks():
    ids = [2, 5, 6, 9, 11, 12, 13, 20, 21, 30]  # a scattered split; all chunks full
    spc, bc = 4, 3
    order = block_shuffled_order(ids, spc, 200, block_chunks=bc, seed=11, epoch=4)
    perm = chunk_permutation(ids, seed=11, epoch=4)
    for b in range(0, len(ids), bc):
        block_rows = order[b * spc : (b + bc) * spc]
        assert set(block_rows[:, 0].tolist()) == set(perm[b : b + bc].tolist())


def test_sequential_order_strictly_increasing():
    order = sequential_order(range(5), 8, 37)
    anchors = _anchors(order, 8)
    np.testing.assert_array_equal(anchors, np.arange(37))
    assert np.all(np.diff(anchors) > 0)
    np.testing.assert_array_equal(sequential_order(range(5), 8, 37, block_chunks=2), order)
    np.testing.assert_array_equal(
        sequential_order([3, 7], 4, 40),
        [[3, 0], [3, 1], [3, 2], [3, 3], [7, 0], [7, 1], [7, 2], [7, 3]],
    )


def test_quality_grows_with_block_size():
    ids = range(32)
    narrow = shuffle_quality(
        block_shuffled_order(ids, 16, 512, block_chunks=1, seed=0, epoch=0), 16
    )
    wide = shuffle_quality(block_shuffled_order(ids, 16, 512, block_chunks=32, seed=0, epoch=0), 16)
    assert 0.0 <= narrow < wide <= 1.0
    assert wide > 0.9


def test_quality_bounds_and_formula():
    assert shuffle_quality(np.zeros((0, 2), np.int64), 8) == 0.0
    assert shuffle_quality([[3, 1]], 8) == 0.0
    seq = sequential_order(range(4), 8, 32)
    assert shuffle_quality(seq, 8) == pytest.approx(3 / 32)
    order = block_shuffled_order(range(10), 8, 80, block_chunks=2, seed=2, epoch=2)
    assert shuffle_quality(order, 8) == pytest.approx(_quality_reference(order, 8), rel=1e-12)
    # Non-contiguous ranks saturate at 1.
    assert shuffle_quality(np.array([[0, 0], [50, 0], [99, 0]], np.int32), 1) == 1.0
    # Any integer dtype and a non-contiguous view are accepted.
    with pytest.warns(DeprecationWarning, match=r"DrawOrder\.\w+ is deprecated"):  # the original returned an ndarray
        assert shuffle_quality(order.astype(np.int32)[::-1], 8) == pytest.approx(
            _quality_reference(order[::-1], 8), rel=1e-12
        )


def test_empty_input_yields_0_by_2():
    for order in (
        block_shuffled_order([], 8, 160, block_chunks=4, seed=0, epoch=0),
        sequential_order([], 8, 160),
        sequential_order(np.array([], np.int64), 8, 0, block_chunks=3),
    ):
        with pytest.warns(DeprecationWarning, match=r"DrawOrder\.\w+ is deprecated"):  # the original returned an ndarray
            assert order.shape == (0, 2) and order.dtype == np.int64


def test_large_order_is_fast_and_complete():
    n, spc = 1_000_000, 16
    order = block_shuffled_order(np.arange(n // spc), spc, n, block_chunks=16, seed=0, epoch=0)
    with pytest.warns(DeprecationWarning, match=r"DrawOrder\.\w+ is deprecated"):  # the original returned an ndarray
        assert order.shape == (n, 2)
    counts = np.bincount(_anchors(order, spc), minlength=n)
    assert counts.min() == counts.max() == 1


@pytest.mark.parametrize(
    "call, match",
    [
        (
            lambda: block_shuffled_order(range(4), 0, 32, block_chunks=1, seed=0, epoch=0),
            "samples per chunk",
        ),
        (
            lambda: block_shuffled_order(range(4), 8, 32, block_chunks=0, seed=0, epoch=0),
            "block_chunks",
        ),
        (
            lambda: block_shuffled_order([0, 4], 8, 32, block_chunks=1, seed=0, epoch=0),
            "outside the anchor grid",
        ),
        (
            lambda: block_shuffled_order([-1], 8, 32, block_chunks=1, seed=0, epoch=0),
            "outside the anchor grid",
        ),
        (
            lambda: block_shuffled_order([1, 1], 8, 32, block_chunks=1, seed=0, epoch=0),
            "listed twice",
        ),
        (lambda: block_shuffled_order([0.5], 8, 32, block_chunks=1, seed=0, epoch=0), "integers"),
        (lambda: block_shuffled_order([[0]], 8, 32, block_chunks=1, seed=0, epoch=0), "1-D"),
        (lambda: block_shuffled_order([0], 8, 32, block_chunks=1, seed=-1, epoch=0), "seed"),
        (lambda: chunk_permutation([0], seed=0, epoch=2**64), "epoch"),
        (lambda: sequential_order([0], 8, -1), "n_samples"),
        (lambda: shuffle_quality(np.zeros((4, 3), np.int64), 8), r"\(N, 2\)"),
        (lambda: shuffle_quality(np.zeros((4, 2)), 8), r"\(N, 2\)"),
    ],
)
def test_bad_arguments_raise(call, match):
    with pytest.raises(InvalidArgumentError, match=match):
        call()


def _original_order(ids, spc, n_samples, block_chunks, seed, epoch):
    """The original insitubatch's shuffle, as it reads: numpy permutes the chunks, then each
    block's (k, 2) rows in place with one generator shared by the blocks."""
    perm = np.random.default_rng((seed, epoch)).permutation(np.asarray(ids, dtype=np.int64))
    rng = np.random.default_rng((seed, epoch, 7919))
    blocks = []
    for start in range(0, len(perm), block_chunks):
        chunks = perm[start:start + block_chunks]
        rows = np.array([[c, w] for c in chunks for w in range(min(spc, n_samples - c * spc))], dtype=np.int64)
        rng.shuffle(rows)
        blocks.append(rows.reshape(-1, 2))
    return np.concatenate(blocks) if blocks else np.zeros((0, 2), dtype=np.int64)


@pytest.mark.parametrize("case", range(40))
def test_the_engines_order_is_the_originals_draw_for_draw(case):
    """The engine draws the shuffled order from numpy's own bit generators (one call per
    epoch); it must be the original's numpy shuffle exactly: grids with a short last chunk,
    subsets of the grid, blocks of one chunk to more than there are, seeds across 64 bits."""
    from insitubatch import shuffle

    assert shuffle._native_draws_numpys()  # this numpy: the engine's path is the one taken
    rng = np.random.default_rng(case)
    spc = int(rng.integers(1, 13))
    n_samples = int(rng.integers(0, 900))
    grid = -(-n_samples // spc)
    ids = rng.permutation(grid)[: int(rng.integers(0, grid + 1))] if grid else np.zeros(0, dtype=np.int64)
    block_chunks = int(rng.integers(1, 30))
    seed, epoch = int(rng.integers(0, 2**63)), int(rng.integers(0, 10**6))
    order = block_shuffled_order(ids, spc, n_samples, block_chunks=block_chunks, seed=seed, epoch=epoch)
    np.testing.assert_array_equal(order.rows, _original_order(ids, spc, n_samples, block_chunks, seed, epoch))


def test_numpys_own_loop_stands_in_when_the_engines_draws_would_differ(monkeypatch):
    from insitubatch import shuffle

    args = (np.arange(40, dtype=np.int64), 4, 157, 3, 11, 2)
    native = shuffle.epoch_order(*args)
    monkeypatch.setattr(shuffle, "_native_ok", False)
    monkeypatch.setattr(shuffle._ext, "shuffled_order", None)  # not called on that path
    plain = shuffle.epoch_order(*args)
    for x, y in zip(native, plain):
        np.testing.assert_array_equal(x, y)
    with pytest.raises(InvalidArgumentError, match="listed twice"):
        shuffle.epoch_order(np.array([1, 1]), 4, 157, 3, 0, 0)


def test_the_engines_order_rejects_what_is_not_a_bit_generator():
    import ctypes

    from insitubatch import _ext

    new_capsule = ctypes.pythonapi.PyCapsule_New
    new_capsule.restype, new_capsule.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    other = new_capsule(ctypes.c_void_p(1), b"SomethingElse", None)
    bits = np.random.default_rng(0).bit_generator.capsule
    with pytest.raises(InvalidArgumentError, match="not a numpy BitGenerator capsule"):
        _ext.shuffled_order(np.arange(3, dtype=np.int64), 1, 3, 1, bits, other)
    with pytest.raises(InvalidArgumentError, match="listed twice"):  # the engine's own checks first
        _ext.shuffled_order(np.array([1, 1], dtype=np.int64), 1, 3, 1, bits, bits)
