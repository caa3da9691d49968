"""ZarrWriter: a shuffled inference pass writes f(x) into an array like= the source, each
chunk once; zarr-python reads back exactly f(source); a job killed with SIGKILL half way and
restarted writes only the missing chunks (counted at the store); bad input is a clear error
and leaves no partial object."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import zarr

import insitubatch
from insitubatch import InSituDataset, ZarrWriter, _ext, open_geometries, split_by_chunk

N, SPC = 60, 8  # 8 chunks, the last one short


@pytest.fixture
def source(tmp_path):
    data = np.random.default_rng(3).standard_normal((N, 5, 6)).astype("f4")
    group = zarr.open_group(zarr.storage.LocalStore(tmp_path / "src.zarr"), mode="w")
    group.create_array("t2m", shape=data.shape, chunks=(SPC, 5, 3), dtype="f4")[...] = data
    return tmp_path / "src.zarr", data


def predict(x):
    return (2 * x + 1).astype("f4")


def run_inference(src, out, *, seed=0, budget=1 << 20, zarr_format=3):
    geoms = open_geometries(insitubatch.store(str(src)), ["t2m"])
    ds = InSituDataset(str(src), split_by_chunk(geoms["t2m"], fractions=(1.0, 0.0, 0.0)), geoms, batch_size=6,
                       shuffle=True, seed=seed, block_chunks=2)
    writer = ZarrWriter(out, "pred", like=geoms["t2m"], budget_bytes=budget, zarr_format=zarr_format)
    for batch in ds.train:
        writer.write(batch.sample_indices, predict(batch.arrays["t2m"]))
    writer.close()
    ds.close()
    return writer


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_a_shuffled_pass_writes_predictions_zarr_reads_back_exactly(source, tmp_path, zarr_format):
    src, data = source
    out = insitubatch.store(str(tmp_path / "out.zarr"), read_only=False)
    writer = run_inference(src, out, zarr_format=zarr_format)
    assert writer.chunks_written == 8 and writer.chunks_skipped == 0
    written = zarr.open_array(zarr.storage.LocalStore(tmp_path / "out.zarr", read_only=True), path="pred", mode="r")
    assert written.shape == data.shape and written.chunks == (SPC, 5, 3)
    np.testing.assert_array_equal(written[...], predict(data))
    # Peak rows held stays within the budget however shuffled the order.
    assert writer.peak_buffered_bytes <= 1 << 20


def test_values_of_another_dtype_and_layout_are_cast_and_placed_exactly(source, tmp_path):
    # float64, Fortran-ordered batches that straddle chunks, unsigned indices: each row lands
    # once in its chunk's buffer (buffers of written chunks are reused by later ones).
    src, data = source
    geoms = open_geometries(insitubatch.store(str(src)), ["t2m"])
    rng = np.random.default_rng(5)  # shuffled within blocks of two chunks, so later chunks reuse buffers
    order = np.concatenate([rng.permutation(np.arange(b, min(b + 2 * SPC, N))) for b in range(0, N, 2 * SPC)])
    order = order.astype("u4")
    with ZarrWriter(str(tmp_path / "out.zarr"), "pred", like=geoms["t2m"], budget_bytes=3 * SPC * 30 * 4) as writer:
        for start in range(0, N, 7):
            rows = order[start:start + 7]
            writer.write(rows, np.asfortranarray(data[rows].astype("f8")))
        assert writer.peak_buffered_bytes <= 3 * SPC * 30 * 4
    assert writer.chunks_written == 8
    # The short last chunk's rows past the array's end are stored as the fill value, not as
    # whatever the reused buffer held before.
    stored = _ext.open_hierarchy(insitubatch.store(str(tmp_path / "out.zarr"))).open_array("pred")
    for inner in (0, 1):
        assert not stored.read_chunk([N // SPC, 0, inner])[N % SPC:].any()
    back = zarr.open_array(zarr.storage.LocalStore(tmp_path / "out.zarr"), path="pred", mode="r")[...]
    np.testing.assert_array_equal(back, data)


def test_different_inner_shape_and_dtype(source, tmp_path):
    src, data = source
    geoms = open_geometries(insitubatch.store(str(src)), ["t2m"])
    with ZarrWriter(str(tmp_path / "out.zarr"), "mean", like=geoms["t2m"], inner_shape=(2,), dtype="f8") as writer:
        for order in (np.arange(N)[::-1],):
            writer.write(order, np.stack([data[order].mean(axis=(1, 2)), data[order].max(axis=(1, 2))], axis=1))
    back = zarr.open_array(zarr.storage.LocalStore(tmp_path / "out.zarr"), path="mean", mode="r")
    assert back.dtype == np.float64 and back.chunks == (SPC, 2)
    np.testing.assert_array_equal(back[:, 0], data.mean(axis=(1, 2)))


# An inference job as a user runs it: `python job.py SRC OUT --model M`. Its run identity
# is the writer's default (the command line, the source, the layout). KILL_AFTER (in the
# environment, so the restarted command is the same command) sends it a real SIGKILL.
INFERENCE_JOB = """
import os, sys
sys.path.insert(0, os.environ["TESTS"])
import numpy as np
import insitubatch
from insitubatch import InSituDataset, ZarrWriter, open_geometries, split_by_chunk
src, out, model = sys.argv[1], sys.argv[2], sys.argv[4]
geoms = open_geometries(insitubatch.store(src), ["t2m"])
ds = InSituDataset(src, split_by_chunk(geoms["t2m"], fractions=(1.0, 0.0, 0.0)), geoms, batch_size=6,
                   shuffle=True, seed=0, block_chunks=2)
store = insitubatch.store(out, read_only=False)
if os.environ.get("COUNT"):
    store = insitubatch._ext.CountingStore(store)
writer = ZarrWriter(store, "pred", like=geoms["t2m"], budget_bytes=1 << 20)
kill_after = int(os.environ.get("KILL_AFTER", "-1"))
for n, batch in enumerate(ds.train):
    if n == kill_after:
        os.kill(os.getpid(), 9)
    x = batch.arrays["t2m"]
    writer.write(batch.sample_indices, (2 * x + 1 if model == "a" else 3 * x - 1).astype("f4"))
writer.close()
if os.environ.get("COUNT"):
    print(" ".join(sorted(k for k in store.writes() if "/c/" in k)))
print("skipped", writer.chunks_skipped)
"""


def _job(src, out, model, **env):
    return subprocess.run([sys.executable, "-c", INFERENCE_JOB, str(src), str(out), "--model", model],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TESTS": os.path.dirname(__file__), **env})


def _chunk_files(root):
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if "/c/" in p.as_posix()
            and p.is_file()}


def test_killed_halfway_then_restarted_writes_only_the_missing_chunks(source, tmp_path):
    src, data = source
    out = tmp_path / "out.zarr"
    killed = _job(src, out, "a", KILL_AFTER="8")
    assert killed.returncode == -9, killed.stderr
    native = insitubatch.store(str(out), read_only=False)
    done_before = {k for k in native.list("pred/") if "/c/" in k}
    assert 0 < len(done_before) < 16  # some chunks (two stored chunks each) landed, not all
    again = _job(src, out, "a", COUNT="1")  # the same command: the same run
    assert again.returncode == 0, again.stderr
    written = set(again.stdout.splitlines()[0].split())
    keys = {c: {f"pred/c/{c}/0/{i}" for i in range(2)} for c in range(8)}  # two stored chunks per row chunk
    complete = {c for c in range(8) if keys[c] <= done_before}  # a kill between the two leaves one
    assert complete and written == set().union(*(keys[c] for c in range(8) if c not in complete))
    assert again.stdout.splitlines()[1] == f"skipped {len(complete)}"
    np.testing.assert_array_equal(zarr.open_array(zarr.storage.LocalStore(out), path="pred", mode="r")[...],
                                  2 * data + 1)
    # Byte for byte what an uninterrupted run stores.
    whole = _job(src, tmp_path / "whole.zarr", "a")
    assert whole.returncode == 0, whole.stderr
    assert _chunk_files(out) == _chunk_files(tmp_path / "whole.zarr")


def test_another_models_run_is_refused_then_overwritten_exactly(source, tmp_path):
    """The same layout, another command: not this run's chunks to resume."""
    src, data = source
    out = tmp_path / "out.zarr"
    first = _job(src, out, "a")
    assert first.returncode == 0, first.stderr
    second = _job(src, out, "b")
    assert second.returncode == 1
    assert "FailedPreconditionError" in second.stderr and "was written by run 'auto-" in second.stderr, second.stderr
    assert "--model a" in second.stderr and "mode='w' to overwrite it" in second.stderr, second.stderr
    back = zarr.open_array(zarr.storage.LocalStore(out), path="pred", mode="r")
    np.testing.assert_array_equal(back[...], 2 * data + 1)  # untouched
    # Named runs, and mode="w": the old chunks are cleared first, the new run's written exactly.
    geoms = open_geometries(insitubatch.store(str(src)), ["t2m"])
    with pytest.raises(insitubatch.FailedPreconditionError, match=r"was written by run 'auto-[0-9a-f]{16}'"):
        ZarrWriter(str(out), "pred", like=geoms["t2m"], run="model-b")
    with ZarrWriter(str(out), "pred", like=geoms["t2m"], run="model-b", mode="w") as writer:
        assert writer.chunks_skipped == 0
        order = np.random.default_rng(1).permutation(N)
        writer.write(order, 3 * data[order] - 1)
    assert writer.chunks_written == 8
    np.testing.assert_array_equal(zarr.open_array(zarr.storage.LocalStore(out), path="pred", mode="r")[...],
                                  3 * data - 1)
    assert zarr.open_array(zarr.storage.LocalStore(out), path="pred", mode="r").attrs[
        insitubatch.writer.RUN_ATTRIBUTE]["run"] == "model-b"
    resumed = ZarrWriter(str(out), "pred", like=geoms["t2m"], run="model-b")  # its own: resumed, all done
    assert resumed.chunks_skipped == 8
    resumed.close()
    with pytest.raises(insitubatch.FailedPreconditionError, match="mode='w-' creates only"):
        ZarrWriter(str(out), "pred", like=geoms["t2m"], run="model-b", mode="w-")
    # An array no ZarrWriter wrote records no run: refused too, once it holds a chunk...
    other = zarr.create_array(zarr.storage.LocalStore(tmp_path / "other.zarr"), name="pred", shape=data.shape,
                              chunks=(SPC, 5, 3), dtype="f4")
    other[:1] = 7
    with pytest.raises(insitubatch.FailedPreconditionError, match="was not written by a ZarrWriter"):
        ZarrWriter(str(tmp_path / "other.zarr"), "pred", like=geoms["t2m"])
    # ...while one created for the writer and never written is taken, and becomes its run's.
    zarr.create_array(zarr.storage.LocalStore(tmp_path / "fresh.zarr"), name="pred", shape=data.shape,
                      chunks=(SPC, 5, 3), dtype="f4", compressors=None)
    with ZarrWriter(str(tmp_path / "fresh.zarr"), "pred", like=geoms["t2m"], run="mine") as taken:
        taken.write(np.arange(N), data)
    fresh = zarr.open_array(zarr.storage.LocalStore(tmp_path / "fresh.zarr"), path="pred", mode="r")
    assert fresh.attrs[insitubatch.writer.RUN_ATTRIBUTE]["run"] == "mine" and fresh.compressors == ()
    np.testing.assert_array_equal(fresh[...], data)
    with pytest.raises(insitubatch.FailedPreconditionError, match="was written by run 'mine'"):
        ZarrWriter(str(tmp_path / "fresh.zarr"), "pred", like=geoms["t2m"], run="theirs")


def test_a_sample_written_again_after_its_chunk_was_written_raises(source, tmp_path):
    src, data = source
    geoms = open_geometries(insitubatch.store(str(src)), ["t2m"])
    writer = ZarrWriter(str(tmp_path / "out.zarr"), "pred", like=geoms["t2m"])
    writer.write(np.arange(SPC), data[:SPC])  # chunk 0 complete: written
    with pytest.raises(insitubatch.InvalidArgumentError,
                       match=r"sample 3 was written twice \(its chunk 0 was already written\)"):
        writer.write([9, 3], np.zeros((2, 5, 6), "f4"))
    writer.write(np.arange(SPC, N), data[SPC:])
    writer.close()
    np.testing.assert_array_equal(zarr.open_array(zarr.storage.LocalStore(tmp_path / "out.zarr"), path="pred",
                                                  mode="r")[...], data)


@pytest.mark.timeout(120)
def test_an_empty_array_of_ten_billion_chunks_opens_at_once(tmp_path):
    """Opening lists what exists (nothing here); it never probes chunk by chunk."""
    out = str(tmp_path / "big.zarr")
    writer = ZarrWriter(out, "pred", shape=(10**10, 2), chunks=(1, 2), dtype="u1", run="big")
    assert writer.chunks_skipped == 0 and writer.n_chunks == 10**10
    writer.write([5, 7], np.ones((2, 2), "u1"))
    with pytest.raises(insitubatch.FailedPreconditionError,
                       match=r"9999999998 samples were never written \(chunks \[0, 1, 2, 3, 4, 6, 8, 9\] \.\.\.\)"):
        writer.close()
    again = ZarrWriter(out, "pred", shape=(10**10, 2), chunks=(1, 2), dtype="u1", run="big")
    assert again.chunks_skipped == 2


def test_bad_input_is_a_clear_error(source, tmp_path):
    src, _ = source
    geoms = open_geometries(insitubatch.store(str(src)), ["t2m"])
    writer = ZarrWriter(str(tmp_path / "out.zarr"), "pred", like=geoms["t2m"])
    with pytest.raises(insitubatch.InvalidArgumentError, match=r"values of shape \(2, 5\)"):
        writer.write([0, 1], np.zeros((2, 5), "f4"))
    with pytest.raises(insitubatch.InvalidTypeError, match="complex64"):
        writer.write([0, 1], np.zeros((2, 5, 6), "c8"))
    with pytest.raises(insitubatch.InvalidArgumentError, match=r"sample index 60 is outside \[0, 60\)"):
        writer.write([60], np.zeros((1, 5, 6), "f4"))
    writer.write([3], np.zeros((1, 5, 6), "f4"))
    with pytest.raises(insitubatch.InvalidArgumentError, match="sample 3 was written twice"):
        writer.write([4, 3], np.zeros((2, 5, 6), "f4"))
    with pytest.raises(insitubatch.FailedPreconditionError, match="59 samples were never written"):
        writer.close()
    with pytest.raises(insitubatch.InvalidArgumentError, match="read-only"):
        ZarrWriter(insitubatch.store(str(src)), "pred", like=geoms["t2m"])
    with pytest.raises(insitubatch.InvalidArgumentError, match="HTTP has no write verb"):
        ZarrWriter("http://127.0.0.1:9/x.zarr", "pred", like=geoms["t2m"])
    with pytest.raises(insitubatch.FailedPreconditionError, match="already holds an array of shape"):
        ZarrWriter(str(tmp_path / "out.zarr"), "pred", shape=(10, 2), dtype="f4")
    small = ZarrWriter(str(tmp_path / "small.zarr"), "pred", like=geoms["t2m"], budget_bytes=SPC * 30 * 4 * 2)
    small.write([0, 8], np.zeros((2, 5, 6), "f4"))  # two chunks open: at the budget
    with pytest.raises(insitubatch.ResourceExhaustedError, match="past budget_bytes"):
        small.write([16], np.zeros((1, 5, 6), "f4"))


def test_a_full_disk_names_the_array_and_chunk_and_leaves_no_partial_chunk(small_disk):
    noise = np.random.default_rng(0).integers(0, 2**32, (64, 128, 64), dtype="u4").view("f4")  # 2 MiB, incompressible
    writer = ZarrWriter(str(small_disk / "out.zarr"), "pred", shape=noise.shape, chunks=(16, 128, 64), dtype="f4")
    with pytest.raises(insitubatch.ResourceExhaustedError, match=r"pred \[\d, 0, 0\]: cannot write .*/pred/c/\d/0/0: No space left"):
        writer.write(np.arange(64), noise)
        writer.close()
    landed = sorted(int(c) for c in os.listdir(small_disk / "out.zarr" / "pred" / "c"))
    hidden = [f for _, _, names in os.walk(small_disk / "out.zarr") for f in names if f.startswith(".")]
    assert not hidden  # no temporary left behind
    back = zarr.open_array(zarr.storage.LocalStore(small_disk / "out.zarr"), path="pred", mode="r")
    for c in landed:  # whatever landed is whole
        if (small_disk / "out.zarr" / "pred" / "c" / str(c) / "0" / "0").is_file():
            np.testing.assert_array_equal(back[16 * c:16 * (c + 1)], noise[16 * c:16 * (c + 1)])
