"""Ranks of a data-parallel job, simulated in one process (torchrun runs the real thing in
tests/frameworks/test_torch.py): every rank takes the same number of steps, the ranks'
samples are disjoint (drop) or cover the split (pad), and each chunk is read by one rank."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

import insitubatch as ib
from insitubatch import _ext

N, SPC = 101, 6  # 17 chunks, the last one short: no world size here divides it


@pytest.fixture(scope="module")
def store_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("ddp") / "s.zarr"
    root = zarr.open_group(str(path), mode="w", zarr_format=3)
    root.create_array("x", shape=(N, 2), chunks=(SPC, 2), dtype="i8")[...] = np.arange(2 * N).reshape(N, 2)
    return str(path)


def open_rank(store_path, rank, world_size, **kwargs):
    counting = _ext.CountingStore(ib.store(store_path))
    geoms = ib.open_geometries(counting, ["x"])
    manifest = ib.split_by_chunk(geoms["x"], fractions=(1.0, 0.0, 0.0))
    ds = ib.InSituDataset(counting, manifest, geometries=geoms, batch_size=4, block_chunks=2, seed=3,
                          rank=rank, world_size=world_size, **kwargs)
    return ds, counting


@pytest.mark.parametrize("world_size", [2, 3, 4])
@pytest.mark.parametrize("remainder", ["drop", "pad"])
def test_equal_steps_disjoint_chunks_and_the_remainder_policy(store_path, world_size, remainder):
    for epoch in (0, 1):
        steps, samples, chunks_read = [], [], []
        for rank in range(world_size):
            ds, counting = open_rank(store_path, rank, world_size, remainder=remainder)
            ds.set_epoch(epoch)
            batches = list(ds.train)
            assert len(batches) == len(ds.train)
            assert all(len(b) == 4 for b in batches)  # full batches on every rank
            for b in batches:
                np.testing.assert_array_equal(b.arrays["x"][:, 0], 2 * b.sample_indices)
            steps.append(len(batches))
            samples.append(np.concatenate([b.sample_indices for b in batches]).tolist() if batches else [])
            chunks_read.append({k for k, n in counting.reads().items() if k.startswith("x/c/")})
            ds.close()
        assert len(set(steps)) == 1, steps  # a collective per step never waits on a missing rank
        for a in range(world_size):
            for b in range(a + 1, world_size):
                assert not chunks_read[a] & chunks_read[b]  # no chunk fetched by two ranks
        seen = [i for s in samples for i in s]
        if remainder == "drop":
            assert len(seen) == len(set(seen)) and set(seen) <= set(range(N))
            assert len(seen) >= N - world_size * (SPC + 4)
        else:
            assert set(seen) == set(range(N))  # every sample, a few twice


def test_a_rank_resumes_its_own_share(store_path):
    ds, _ = open_rank(store_path, 1, 3)
    full = [b.sample_indices.tolist() for b in ds.train]
    it = iter(ds.train)
    head = [next(it).sample_indices.tolist() for _ in range(2)]
    state = ds.state_dict()
    it.close()
    ds.close()
    assert state["views"][0]["share"] == [1, 3] and state["views"][0]["world_size"] == 3
    ds, _ = open_rank(store_path, 1, 3)
    ds.load_state_dict(state)
    assert head + [b.sample_indices.tolist() for b in ds.train] == full
    ds.close()
    ds, _ = open_rank(store_path, 1, 3)
    with pytest.raises(ib.InvalidArgumentError, match="belongs to view 'train'"):
        ds.val.load_state_dict(state["views"][0])
    ds.close()


def test_rank_and_world_size_come_from_the_environment(store_path, monkeypatch):
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "3")
    ds, _ = open_rank(store_path, None, None)
    assert (ds.rank, ds.world_size) == (2, 3)
    assert repr(ds.train) == "<SplitView train (shuffled, share 2 of 3)>"
    ds.close()
    for rank, world_size, match in ((3, 3, "rank must be in"), (0, 0, "rank must be in"), (1, None, "together"),
                                    (True, 2, "integers")):
        with pytest.raises(ib.InvalidArgumentError, match=match):
            open_rank(store_path, rank, world_size)
    with pytest.raises(ib.InvalidArgumentError, match="remainder"):
        open_rank(store_path, 0, 2, remainder="wrap")


def run_ranks(store_path, world_size, states=None, steps=None, epoch=1):
    """Each rank's samples and chunks read (and its state after ``steps`` batches)."""
    out = []
    for rank in range(world_size):
        ds, counting = open_rank(store_path, rank, world_size)
        if states is None:
            ds.set_epoch(epoch)
        else:
            ds.load_state_dict(states[rank % len(states)])
        it = iter(ds.train)
        samples = [b.sample_indices.tolist() for _, b in zip(range(steps if steps is not None else 10**9), it)]
        state = ds.state_dict()
        it.close()
        out.append((samples, {k for k in counting.reads() if k.startswith("x/c/")}, state))
        ds.close()
    return out


@pytest.mark.parametrize("sizes", [(4, 2), (2, 3), (4, 2, 3), (1, 3)])
def test_resuming_under_another_world_size_sees_no_sample_twice(store_path, sizes):
    seen, states = [], None
    for i, world_size in enumerate(sizes):
        last = i == len(sizes) - 1
        ranks = run_ranks(store_path, world_size, states, steps=None if last else 2)
        assert len({len(samples) for samples, _, _ in ranks}) == 1  # equal steps in every segment
        for a in range(world_size):
            for b in range(a + 1, world_size):
                assert not ranks[a][1] & ranks[b][1]  # each chunk to one rank
        seen += [i for samples, _, _ in ranks for batch in samples for i in batch]
        states = [state for _, _, state in ranks]
    assert len(seen) == len(set(seen))  # no sample twice in the epoch, across the changes
    assert states[0]["views"][0]["history"] == [[w, 8] for w in sizes[:-1]]  # 2 steps of 4 rows each
    assert len(seen) >= N - (len(sizes) + 1) * 3 * (SPC + 4)  # only each segment's remainder is dropped


RANKS_WORKER = """
import json, os, sys
import insitubatch as ib
store, out, world = sys.argv[1], sys.argv[2], int(sys.argv[3])
geoms = ib.open_geometries(store, ["x"])
manifest = ib.split_by_chunk(geoms["x"], fractions=(1.0, 0.0, 0.0))
ranks = [ib.InSituDataset(store, manifest, geometries=geoms, batch_size=4, block_chunks=2, seed=3, rank=r,
                          world_size=world) for r in range(world)]
log = {"steps": [], "states": None, "resumed": []}


def save(log):
    with open(out + ".tmp", "w") as f:  # a step and the states after it land together
        json.dump(log, f)
    os.replace(out + ".tmp", out)


if os.path.exists(out):
    log = json.load(open(out))
    for ds in ranks:  # every rank of the new world loads one old rank's state: they stood alike
        ds.load_state_dict(log["states"][0])
    log["resumed"].append([world, len(log["steps"])])
else:
    for ds in ranks:
        ds.set_epoch(1)
its = [iter(ds.train) for ds in ranks]
paced = os.environ.get("PACED") == "1"  # a step per line on stdin: the test picks the kill
while True:  # the ranks in lockstep, as a collective per step keeps them
    if paced:
        sys.stdin.readline()
    step = [next(it, None) for it in its]
    if any(b is None for b in step):
        assert all(b is None for b in step), "unequal steps"
        break
    log["steps"].append([b.sample_indices.tolist() for b in step])
    log["states"] = [ds.state_dict() for ds in ranks]
    save(log)
    print(len(log["steps"]), flush=True)
save(log)
print("done", flush=True)
"""


@pytest.mark.parametrize("before, after", [(4, 2), (2, 3)])
def test_a_job_killed_with_sigkill_resumes_exactly_on_another_world_size(store_path, tmp_path, before, after):
    """A process running ``before`` ranks is killed at a random step; a new one resumes on
    ``after`` ranks from the saved state: its steps are exactly those an uninterrupted
    change of world size at that step yields, and no sample is seen twice in the epoch."""
    import json
    import os
    import signal
    import subprocess
    import sys
    import time

    script = tmp_path / "ranks.py"
    script.write_text(RANKS_WORKER)
    out = tmp_path / "log.json"
    total = len(run_ranks(store_path, before)[0][0])
    kill_after = int(np.random.default_rng(int(time.time())).integers(1, total - 1))  # a step is left
    proc = subprocess.Popen([sys.executable, str(script), store_path, str(out), str(before)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env={**os.environ, "PACED": "1"})
    for _ in range(kill_after):
        proc.stdin.write("step\n")
        proc.stdin.flush()
        proc.stdout.readline()
    proc.stdin.write("step\n")  # the next step may be under way when the kill lands
    proc.stdin.flush()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    stopped = len(json.loads(out.read_text())["steps"])
    assert kill_after <= stopped <= kill_after + 1 < total
    subprocess.run([sys.executable, str(script), store_path, str(out), str(after)], check=True,
                   capture_output=True, timeout=120)
    log = json.loads(out.read_text())
    assert log["resumed"] == [[after, stopped]]
    # The same change made without a kill, in this process.
    head = run_ranks(store_path, before, steps=stopped)
    tail = run_ranks(store_path, after, [state for _, _, state in head])
    assert [[samples[i] for samples, _, _ in head] for i in range(stopped)] == log["steps"][:stopped]
    assert [[samples[i] for samples, _, _ in tail] for i in range(len(tail[0][0]))] == log["steps"][stopped:]
    seen = [i for step in log["steps"] for batch in step for i in batch]
    assert len(seen) == len(set(seen))
