"""Exact mid-epoch resume: a pass restarted from a saved state (a few integers) yields exactly
the batches the uninterrupted pass had left -- shuffled and sequential, with windows, string
labels, two views at once, and across a process killed with SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings

import numpy as np
import pytest
import zarr

import insitubatch as ib

N = 83  # not a multiple of the chunk or batch size


@pytest.fixture(scope="module")
def store_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("resume") / "s.zarr"
    root = zarr.open_group(str(path), mode="w", zarr_format=3)
    rng = np.random.default_rng(0)
    root.create_array("x", shape=(N, 3), chunks=(7, 3), dtype="f4")[...] = rng.normal(size=(N, 3)).astype("f4")
    root.create_array("y", shape=(N,), chunks=(5,), dtype="i8")[...] = np.arange(N) * 10
    names = np.array([f"sample-{i}" for i in range(N)], dtype=object)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr-python: v3 strings are not yet in the spec
        root.create_array("name", shape=(N,), chunks=(9,), dtype=str)[...] = names
    return str(path)


def make(store_path, *, window=False, strings=False, **kwargs):
    geoms = ib.open_geometries(store_path, ["x", "y"] + (["name"] if strings else []))
    if window:
        geoms["y_next"] = geoms["y"].shift(2)
        geoms["x_prev"] = geoms["x"].shift(-1)
    manifest = ib.split_by_chunk(geoms["x"], fractions=(0.7, 0.3, 0.0), seed=1)
    return ib.InSituDataset(store_path, manifest, geometries=geoms, batch_size=kwargs.pop("batch_size", 4),
                            block_chunks=kwargs.pop("block_chunks", 2), **kwargs)


def record(batches):
    return [(b.sample_indices.tolist(), {k: np.asarray(v).tolist() for k, v in b.arrays.items()}) for b in batches]


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("window, strings", [(False, False), (True, False), (False, True)])
def test_a_resumed_pass_yields_exactly_the_remaining_batches(store_path, shuffle, window, strings):
    for epoch in (0, 3):
        with make(store_path, window=window, strings=strings, shuffle=shuffle, seed=7) as ds:
            ds.set_epoch(epoch)
            full = record(ds.train)
        for stop in (0, 1, len(full) // 2, len(full) - 1, len(full)):
            with make(store_path, window=window, strings=strings, shuffle=shuffle, seed=7) as ds:
                ds.set_epoch(epoch)
                it = iter(ds.train)
                head = record(b for _, b in zip(range(stop), it))
                state = ds.train.state_dict()
                it.close()
            assert state["epoch"] == epoch and state["cursor"] == sum(len(i) for i, _ in head)
            assert json.loads(json.dumps(state)) == state  # plain integers and strings
            with make(store_path, window=window, strings=strings, shuffle=shuffle, seed=7) as ds:
                ds.train.load_state_dict(state)
                assert ds.epoch == epoch
                assert head + record(ds.train) == full, (epoch, stop)
                assert record(ds.train) == full  # only the first pass after a load resumes


def test_two_views_resume_together_through_the_dataset_state(store_path):
    with make(store_path, seed=3) as ds:
        ds.set_epoch(2)
        train_full, val_full = record(ds.train), record(ds.val)
    with make(store_path, seed=3) as ds:
        ds.set_epoch(2)
        train, val = iter(ds.train), iter(ds.val)
        head_train = record(b for _, b in zip(range(3), train))
        head_val = record(b for _, b in zip(range(2), val))
        state = ds.state_dict()
        train.close()
        val.close()
    assert {(v["split"], v["cursor"]) for v in state["views"]} == {("train", 12), ("val", 8)}
    with make(store_path, seed=3) as ds:
        ds.load_state_dict(json.loads(json.dumps(state)))
        assert head_train + record(ds.train) == train_full
        assert head_val + record(ds.val) == val_full


def test_a_state_for_another_dataset_or_view_is_refused(store_path):
    with make(store_path, seed=1) as ds:
        state = ds.train.state_dict()
        with pytest.raises(ib.InvalidArgumentError, match="belongs to view 'train'"):
            ds.val.load_state_dict(state)
        with pytest.raises(ib.InvalidArgumentError, match="share"):
            ds.train.shard(1, 2).load_state_dict(state)
        for change, match in (({"seed": 2}, "seed=2"), ({"block_chunks": 3}, "block_chunks=3"),
                              ({"format": 9}, "format 9"), ({"cursor": -1}, "'cursor' must be >= 0"),
                              ({"epoch": "1"}, "'epoch' must be an integer")):
            with pytest.raises(ib.InvalidArgumentError, match=match):
                ds.train.load_state_dict({**state, **change})
        with pytest.raises(ib.InvalidArgumentError, match="lacks 'cursor'"):
            ds.train.load_state_dict({k: v for k, v in state.items() if k != "cursor"})
        with pytest.raises(ib.InvalidTypeError):
            ds.load_state_dict([state])


def test_a_sharded_view_resumes_its_own_share(store_path):
    with make(store_path, seed=4) as ds:
        full = record(ds.train.shard(1, 2))
        it = iter(ds.train.shard(1, 2))
        head = record(b for _, b in zip(range(2), it))
        state = ds.train.shard(1, 2).state_dict()
        it.close()
    assert state["share"] == [1, 2]
    with make(store_path, seed=4) as ds:
        ds.train.shard(1, 2).load_state_dict(state)
        assert head + record(ds.train.shard(1, 2)) == full


WORKER = textwrap.dedent("""
    import itertools, json, os, sys
    import numpy as np
    import insitubatch as ib
    store, out, paced = sys.argv[1], sys.argv[2], sys.argv[4:] == ["paced"]
    geoms = ib.open_geometries(store, ["x", "y"])
    geoms["y_next"] = geoms["y"].shift(1)
    manifest = ib.split_by_chunk(geoms["x"], fractions=(0.7, 0.3, 0.0), seed=1)
    ds = ib.InSituDataset(store, manifest, geometries=geoms, batch_size=3, block_chunks=2, seed=11)
    log = {"batches": [], "starts": 0}
    if os.path.exists(out):
        log = json.load(open(out))
        ds.load_state_dict(log["state"])
        log["starts"] += 1
    else:
        ds.set_epoch(5)
    views = [ds.train, ds.val][:int(sys.argv[3])]  # the shuffled view, and the sequential one beside it
    for step in itertools.zip_longest(*views):
        batch = [[b.sample_indices.tolist(), b.arrays["y_next"].tolist()] for b in step if b is not None]
        log["batches"].append(batch)
        log["state"] = ds.state_dict()
        with open(out + ".tmp", "w") as f:  # the batch and the state land together, or neither
            json.dump(log, f)
        os.replace(out + ".tmp", out)
        print(len(log["batches"]), flush=True)
        if paced:  # the next batch waits for the test, so a kill lands right after this one
            sys.stdin.readline()
    print("done", flush=True)
""")


@pytest.mark.parametrize("views", ["1", "2"])  # train alone; train (shuffled) and val (sequential) at once
def test_resume_after_sigkill_at_a_random_batch_yields_exactly_the_rest(store_path, tmp_path, views):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    reference, out = tmp_path / "reference.json", tmp_path / "run.json"
    subprocess.run([sys.executable, str(script), store_path, str(reference), views], check=True, capture_output=True)
    expected = json.loads(reference.read_text())["batches"]
    rng = np.random.default_rng(int(time.time()))
    kills = 0
    for kill_after in sorted(rng.choice(np.arange(1, len(expected) - 1), size=2, replace=False)):
        proc = subprocess.Popen([sys.executable, str(script), store_path, str(out), views, "paced"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for line in proc.stdout:  # paced: it cannot run past the batch the kill is meant for
            if line.strip() == "done" or int(line) >= kill_after:
                break
            proc.stdin.write("\n")
            proc.stdin.flush()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        kills += proc.returncode == -signal.SIGKILL
    subprocess.run([sys.executable, str(script), store_path, str(out), views], check=True, capture_output=True)
    log = json.loads(out.read_text())
    assert kills == 2 and log["starts"] == 2
    assert log["batches"] == expected
