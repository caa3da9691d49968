"""Smoke runs of the standalone benchmarks at tiny sizes, so a change cannot rot them
unnoticed: each must finish and report the figures docs/benchmarks.md quotes (values are
not checked: speed is never a test's business)."""

from __future__ import annotations

import importlib.util
import json
import math
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _run(tmp_path: pathlib.Path, script: str, *args: str, timeout: float = 300) -> dict:
    out = tmp_path / "result.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / script), *args, "--json", str(out)],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.timeout(400)
def test_planfetch_bench(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("obstore")
    r = _run(tmp_path, "planfetch_bench.py", "--objects", "200", "--s3-objects", "20", "--size", "20000",
             "--rounds", "1", "--step-ms", "5")
    assert {"http", "s3_nginx", "s3", "epoch"} <= r.keys() and r["epoch"][0]["prefetch_s"] > 0


@pytest.mark.timeout(400)
def test_cache_bench(tmp_path):
    r = _run(tmp_path, "cache_bench.py", "--samples", "128", "--rounds", "1")
    assert r


@pytest.mark.timeout(400)
def test_eviction_bench(tmp_path):
    r = _run(tmp_path, "eviction_bench.py", "--chunks", "64", "--block-chunks", "2", "--epochs", "2")
    assert r


@pytest.mark.timeout(400)
def test_scaleout_bench(tmp_path):
    r = _run(tmp_path, "scaleout_bench.py", "--chunks", "32", "--field", "8x8", "--repeats", "1")
    assert [x["world"] for x in r["ranks"]] == [1, 2] and sum(r["ranks"][1]["decodes_per_rank"]) == 32
    assert r["resume"]["state_bytes"] < 1024


@pytest.mark.timeout(400)
def test_zarr_store_bench(tmp_path):
    pytest.importorskip("obstore")
    r = _run(tmp_path, "zarr_store_bench.py", "--chunks", "4", "--rounds", "1")
    assert r["local"]["ours_over_obstore"] > 0 and r["http (nginx)"]["ours_over_obstore"] > 0


@pytest.mark.timeout(400)
def test_class_plans_bench(tmp_path):
    r = _run(tmp_path, "class_plans_bench.py", "--samples", "256", "--epochs", "2")
    assert r


@pytest.mark.timeout(400)
def test_reference_bench(tmp_path):
    pytest.importorskip("kerchunk")
    pytest.importorskip("aiohttp")  # fsspec's HTTP filesystem, the peer over HTTP
    r = _run(tmp_path, "reference_bench.py", "--steps", "64", "--rounds", "1")
    assert r["local"]["ours_over_fsspec"] > 0 and r["http (nginx)"]["ours_over_fsspec"] > 0
    # In order, one block holds the 16 chunks, end to end in the file: one request.
    assert r["local"]["our_requests_in_order"] == 1


@pytest.mark.timeout(400)
def test_coldstart_bench(tmp_path):
    r = _run(tmp_path, "coldstart_bench.py", "--samples", "64", "--field", "8x16", "--rounds", "1",
             "--data", str(tmp_path / "data"))
    cells = {(t["layout"], t["engine"]): t for t in r["table"]}
    assert {layout for layout, _ in cells} == {"c1", "c4", "c16", "shard16"}
    for (layout, engine), t in cells.items():
        if "status" in t:  # a peer that is not installed here, never ours or the floor
            assert engine in ("tensorstore", "zarrs", "original") and t["status"].startswith("skipped"), t
            continue
        # Every engine's epoch was checked sample by sample against zarr-python.
        assert t["check"] == "ok" and t["ttfb_ms"] > 0 and t["samples_s"] > 0 and t["cpu_s_per_gb"] >= 0, t
    assert all("digests" not in row for row in r["rows"])


@pytest.mark.timeout(600)
def test_cloud_bench(tmp_path):
    pytest.importorskip("obstore")
    r = _run(tmp_path, "cloud_bench.py", "--samples", "64", "--field", "8x16", "--latencies", "5", "--rounds", "1",
             "--inflight", "8", "--data", str(tmp_path / "data"), timeout=540)
    cells = {(t["layout"], t["engine"]): t for t in r["table"]}
    assert {layout for layout, _ in cells} == {"c1", "c4", "c16", "shard16"}
    for (layout, engine), t in cells.items():
        if "status" in t:  # a peer that is not installed here, never ours or a limit
            assert engine in ("tensorstore", "zarr", "zarrs", "original") and t["status"].startswith("skipped"), t
            continue
        if engine in ("link", "decode"):
            assert t["samples_s"] > 0, t
        elif engine == "floor":
            assert t["ttfb_ms"] > 0 and t["fetch_ms"] > 0, t
        else:  # ours two passes, the peers one, each checked sample by sample (probes), the
            # first round's extra epoch whole (crc32)
            assert t["ttfb_ms"] > 0 and t["pass0_samples_s"] > 0, t
            assert engine != "ours" or t["pass1_samples_s"] > 0, t
    runs = [row for row in r["rows"] if row["engine"] not in ("floor", "link", "decode") and "skipped" not in row]
    assert runs and all(row["check"] == "" and "check_epoch" in row for row in runs)
    # The server saw every run's requests and measured its own CPU.
    assert all(row["server"]["requests"] > 0 and row["server"]["cpu_s"] >= 0 for row in runs)
    # Plain HTTP: nothing signed.
    assert all(row["server"]["signed"] == 0 for row in r["rows"])


def test_cloud_server_keeps_a_bounded_number_of_files_open(tmp_path):
    """More files than the server keeps open: each still answers whole, twice over, and the
    server's descriptors stay near its bound (a 16,384-chunk store once ran it out of them)."""
    import os
    import urllib.request

    sys.path.insert(0, str(ROOT / "bench"))
    from cloud_server import CloudServer

    files = {f"k{i}": os.urandom(100 + i) for i in range(40)}
    for name, body in files.items():
        (tmp_path / name).write_bytes(body)
    with CloudServer(tmp_path, latency_ms=0, connect_ms=0, open_files=8) as server:
        for _ in range(2):
            for name, body in files.items():
                with urllib.request.urlopen(f"{server.url}/{name}", timeout=10) as reply:
                    assert reply.read() == body
        open_now = len(os.listdir(f"/proc/{server.proc.pid}/fd"))
        assert open_now < 8 + 12, open_now  # the kept files, stdio, the listener, epoll, a connection
        assert server.stats()["requests"] == 80
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "cloud_server.py"), str(tmp_path), "--open-files", "0"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--open-files must be at least 1, got 0" in proc.stderr, proc.stderr


@pytest.mark.timeout(300)
@pytest.mark.parametrize("args, says", [
    (["--engines", "ours,before"], "the 'before' engine and --before REV go together"),
    (["--engines", "ours", "--before", "HEAD"], "the 'before' engine and --before REV go together"),
    (["--engines", "ours,before", "--before", "no-such-revision"], "--before no-such-revision: no such revision"),
])
def test_cloud_bench_before_arguments(tmp_path, args, says):
    """The 'before' engine (an earlier revision's build) and --before come together, and an
    unknown revision is named before anything is built."""
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "cloud_bench.py"), *args, "--data", str(tmp_path)],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 2 and says in proc.stderr, proc.stderr


def test_build_wheel_deps_names_a_missing_lock(tmp_path):
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "build_wheel_deps.sh"), "--target", "x86_64", "--lock",
                           str(tmp_path / "none.lock"), "--sources-only"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and f"--lock: no file {tmp_path / 'none.lock'}" in proc.stderr, proc.stderr


def test_cloud_bench_over_s3(tmp_path):
    """--protocol s3: every engine, the floor and the link read through their S3 clients
    (signed GetObject, path-style) from the same server, each epoch checked."""
    pytest.importorskip("obstore")
    r = _run(tmp_path, "cloud_bench.py", "--protocol", "s3", "--samples", "64", "--field", "8x16", "--latencies", "5",
             "--rounds", "1", "--inflight", "8", "--layouts", "c4,shard16", "--data", str(tmp_path / "bucket"),
             timeout=240)
    ran = [row for row in r["rows"] if "skipped" not in row and row["engine"] != "decode"]
    assert {row["engine"] for row in ran} >= {"ours", "floor", "link"}
    for row in ran:  # every request signed: each read went through an S3 client
        assert row["server"]["requests"] > 0 and row["server"]["signed"] == row["server"]["requests"], row
    runs = [row for row in ran if row["engine"] not in ("floor", "link")]
    assert all(row["check"] == "" and "check_epoch" in row for row in runs)


@pytest.mark.timeout(400)
def test_write_bench(tmp_path):
    pytest.importorskip("obstore")
    r = _run(tmp_path, "write_bench.py", "--size-mb", "4", "--samples", "32", "--rounds", "1")
    assert {"file", "s3", "writer", "encode"} <= r.keys()
    assert r["writer"]["ratio"] and all(ratio > 0 for ratio in r["writer"]["ratio"].values())
    assert 0 < r["zstd_ceiling"] < 1 and r["encode"]["ratio_raw"] > 0


@pytest.mark.timeout(400)
def test_patch_bench(tmp_path):
    # Every engine it compares: ours (random, grid, three filters), the zarr-python loop and
    # xbatcher under a DataLoader (requirements/bench.txt and torch, as scripts/bench.sh installs).
    for peer in ("torch", "xarray", "xbatcher"):
        pytest.importorskip(peer)
    r = _run(tmp_path, "patch_bench.py", "--planes", "3", "--peer-planes", "2", "--plane", "48", "--patch", "16",
             "--rounds", "1", "--workers", "0", "--data", str(tmp_path / "data"))
    assert set(r["patches_per_s"]) == {"ours random", "ours grid", "ours mask all", "ours ocean", "ours predicate",
                                       "zarr loop", "xbatcher w0"}
    assert all(v > 0 for v in r["patches_per_s"].values())
    # Each filter's figures; the first (untimed) round checked every drawn patch against its mask.
    assert set(r["filters"]) == {"ours mask all", "ours ocean", "ours predicate"}
    assert r["filters"]["ours mask all"]["rejected_share"] == 0 and r["filters"]["ours ocean"]["rejected_share"] > 0
    assert all(math.isfinite(f["evaluation_s"]) and f["per_drawn_cpu_vs_unmasked"] > 0 for f in r["filters"].values())

@pytest.mark.timeout(400)
def test_max_inflight_bench(tmp_path):
    r = _run(tmp_path, "max_inflight_bench.py", "--samples", "48", "--rounds", "1")
    assert set(r["median_s"]) == {"32", "4"}


def test_engine_ab_refuses_a_bad_revision_wheel_or_count_before_building_anything():
    # A real A/B builds a wheel (minutes): only its argument checks run here.
    for args, message in ((["--rev", "no-such-revision"], "names no commit"),
                          (["--rev", "HEAD", "--pairs", "0"], "--pairs and --runs must be >= 1"),
                          (["--wheel", "no-such.whl"], "no such file")):
        proc = subprocess.run([sys.executable, str(ROOT / "bench" / "engine_ab.py"), *args], capture_output=True,
                              text=True, timeout=60, cwd=ROOT)
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr


def test_decode_instructions_refuses_a_missing_wheel_or_library_before_running_anything():
    # A real count runs valgrind over two builds (minutes): only its argument checks run here.
    for args, message in ((["--wheel", "no-such.whl"], "--wheel no-such.whl: no such file"),
                          (["--libzstd", "no-such.so"], "--libzstd no-such.so: no such file")):
        proc = subprocess.run([sys.executable, str(ROOT / "bench" / "decode_instructions.py"), *args],
                              capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr


@pytest.mark.timeout(300)
def test_open_bench(tmp_path):
    """Opening over S3 with listings: every engine finds every array (the script checks their
    shapes); without consolidated metadata ours lists each group once for every array and
    nothing for a named one."""
    engines = "ours,zarr" if importlib.util.find_spec("obstore") else "ours"
    r = _run(tmp_path, "open_bench.py", "--latencies", "2", "--rounds", "1", "--rows", "40", "--engines", engines,
             "--data", str(tmp_path / "bucket"), timeout=240)
    rows = [row for row in r["results"] if row["engine"] == "ours"]
    assert rows and all("failed" not in row for row in r["results"])
    for row in rows:
        plain = row["store"].endswith("plain")
        assert row["lists"] == (2 if plain and not row["named"] else 0), row
