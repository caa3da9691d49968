"""``insitubatch speedtest`` end to end: the console script against a zarr-python store
served by an HTTP Range server (directly and through a fault proxy that adds latency), its
--json report checked for consistency, the stage the engine names when the store is slowed
or decode made expensive, the sweep, and its usage errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import trace_format
from servers import FaultProxy, RangeServer

from insitubatch.speedtest import render

INSITUBATCH = Path(sys.executable).with_name("insitubatch")
N, SPC, FIELD = 512, 16, (30, 40)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    import zarr
    from zarr.codecs import ZstdCodec

    root = tmp_path_factory.mktemp("speedtest")
    arr = zarr.create_array(zarr.storage.LocalStore(root / "s.zarr"), name="t2m", shape=(N, *FIELD),
                            chunks=(SPC, 30, 20), dtype="float32", compressors=[ZstdCodec(level=1)])
    arr[:] = np.round(np.random.default_rng(0).normal(280, 5, (N, *FIELD)), 1).astype("f4")
    zarr.consolidate_metadata(zarr.storage.LocalStore(root / "s.zarr"))  # plain HTTP cannot list
    with RangeServer(root) as server:
        yield root, server


def speedtest(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(INSITUBATCH), "speedtest", *args], capture_output=True, text=True, timeout=300)


def report(tmp_path: Path, *args: str) -> dict:
    out = tmp_path / "r.json"
    proc = speedtest(*args, "--json", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "cold" in proc.stdout and "warm" in proc.stdout
    return json.loads(out.read_text())


def test_the_report_is_consistent(served, tmp_path):
    root, server = served
    r = report(tmp_path, f"{server.url}/s.zarr", "--var", "t2m", "--samples", "256", "--batch-size", "16",
               "--block-chunks", "4", "--sweep", "max_inflight=1,4,16")
    assert r["samples"] == 256 and r["cold"]["samples"] == r["warm"]["samples"] == 256
    chunk_files = [p for p in (root / "s.zarr" / "t2m" / "c").rglob("*") if p.is_file()
                   and int(p.relative_to(root / "s.zarr" / "t2m" / "c").parts[0]) < 256 // SPC]
    assert len(chunk_files) == 16 * 2
    stored = sum(p.stat().st_size for p in chunk_files) / 1e6
    assert r["cold"]["stored_mb_read"] == pytest.approx(stored)  # a cold epoch reads each chunk once
    assert r["cold"]["cache_misses"] == 16 and r["cold"]["ttfb_s"] > 0
    c = r["ceilings"]["variables"]["t2m"]
    assert c["chunks"] == 32 and c["stored_mb"] == pytest.approx(stored)
    assert c["decoded_mb"] == pytest.approx(256 * 30 * 40 * 4 / 1e6)
    assert r["peak_rss_bytes"] > 0 and r["memory_estimate_bytes"] > 0
    sweep = r["sweep"]
    assert [row["max_inflight"] for row in sweep["rows"]] == [1, 4, 16] and sweep["recommended"] in (1, 4, 16)
    assert all(row["samples"] == 256 for row in sweep["rows"])


def test_trace_writes_the_cold_epochs_timeline(served, tmp_path):
    _, server = served
    out = tmp_path / "cold.json"
    r = report(tmp_path, f"{server.url}/s.zarr", "--var", "t2m", "--samples", "128", "--batch-size", "16",
               "--no-ceilings", "--trace", str(out))
    assert r["trace"] == str(out)
    doc = json.loads(out.read_text())
    trace_format.check(doc)
    reads = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["name"].startswith("read t2m chunk")]
    assert len(reads) == 2 * r["cold"]["cache_misses"] == 2 * 128 // SPC  # two stored chunks per sample chunk
    assert sum(e["args"]["bytes"] for e in reads) / 1e6 == pytest.approx(r["cold"]["stored_mb_read"])
    gathers = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["name"].startswith("gather ")]
    assert len(gathers) == 128 // 16


def test_a_slow_store_is_named_the_store(served, tmp_path):
    _, server = served
    with FaultProxy(server.url) as proxy:
        proxy.plan.latency = 0.05  # every read waits 50 ms; two in flight
        r = report(tmp_path, f"{proxy.url}/s.zarr", "--var", "t2m", "--samples", "128", "--max-inflight", "2",
                   "--block-chunks", "2")
    assert r["cold"]["limiting_stage"] == "store", r["cold"]
    share = r["cold"]["shares"]["store"]  # the share of wall time the verdict rests on, printed beside it
    assert share >= 0.3 and f"limited by store ({100 * share:.0f}% of wall)" in render(r)
    assert r["ceilings"]["max_inflight"] == 2
    assert r["cold_over_get"] > 0.5  # the epoch runs near what the store can give at 2 in flight


def test_expensive_decode_is_named_decode(served, tmp_path):
    # The files directly: the Range server shares this test process (and CI's load), so its
    # answers can take as long as the transform and the store would rightly be named.
    root, _ = served
    slow = tmp_path / "slow.py"
    slow.write_text("import time\n\ndef slow(chunk):\n    time.sleep(0.05)\n    return chunk\n")
    r = report(tmp_path, str(root / "s.zarr"), "--var", "t2m", "--samples", "128", "--block-chunks", "2",
               "--decode-threads", "1", "--transform", f"{slow}:slow", "--no-ceilings")
    assert r["cold"]["limiting_stage"] == "decode", r["cold"]


@pytest.mark.parametrize("args, message", [
    (["--var", "nope"], "no array 'nope'"),
    (["--var", "t2m", "--sweep", "threads=1,2"], "--sweep wants NAME=V1"),
    (["--var", "t2m", "--sweep", "max_inflight=0,2"], "positive integers"),
    (["--var", "t2m", "--batch-size", "0"], "must be >= 1"),
    (["--var", "t2m", "--transform", "missing.py:f"], "not found"),
    (["--var", "t2m", "--option", "novalue"], "KEY=VALUE"),
])
def test_usage_errors_exit_2(served, args, message):
    root, _ = served
    proc = speedtest(str(root / "s.zarr"), *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr, proc.stderr


def test_the_command_lists_its_subcommands():
    proc = subprocess.run([str(INSITUBATCH), "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and "speedtest" in proc.stdout and "check-transform" in proc.stdout
