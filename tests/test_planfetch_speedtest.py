"""``planfetch speedtest`` end to end: the console script against moto (signature checks on)
behind a fault proxy, its --json report checked for consistency, the limiting stage it names
when the server is slowed or the consumer made expensive, and its usage errors."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
import trace_format
from planfetch_data import IMAGE_BUCKET, N_IMAGES, image_bytes, key_of

PLANFETCH = Path(sys.executable).with_name("planfetch")


def speedtest(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(PLANFETCH), "speedtest", *args], capture_output=True, text=True, timeout=300)


def report(tmp_path: Path, *args: str) -> dict:
    out = tmp_path / "report.json"
    proc = speedtest(*args, "--json", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "limiting stage" in proc.stdout or "--no-ceilings" in args
    return json.loads(out.read_text())


def test_the_seeds_example_reports_consistent_figures(images, tmp_path):
    index, proxy = images
    # The seed's default columns (s3_uri, label): its quick example runs as written.
    seed_index = tmp_path / "data.csv"
    with open(index) as src, open(seed_index, "w", newline="") as dst:
        w = csv.writer(dst)
        w.writerow(["s3_uri", "label"])
        for row in list(csv.DictReader(src)):
            w.writerow([row["s3_path"], row["class_id"]])
    r = report(tmp_path, str(seed_index), "--limit", "40", "--batch-size", "8")
    run = r["run"]
    assert r["rows"] == 40 and run["samples"] == 40 and run["batches"] == 5 and run["distinct_objects"] == 40
    assert run["bytes_downloaded"] == sum(len(image_bytes(i)[0]) for i in range(40)) == run["object_bytes"]
    assert run["downloads"] == 40 and run["failures"] == 0
    lat = run["batch_latency_ms"]
    assert 0 < lat["p50"] <= lat["p95"] <= lat["p99"] <= lat["max"]
    assert r["limiting_stage"] in ("network", "disk", "consumer", "prefetch window") and r["advice"]
    # The seed's tuning example, with a cache directory that stays.
    r = report(tmp_path, str(seed_index), "--batch-size", "8", "--download-threads", "128", "--batches-ahead", "300",
               "--cache-dir", str(tmp_path / "kept"), "--limit", "24", "--no-ceilings")
    assert r["run"]["samples"] == 24 and (tmp_path / "kept").is_dir()
    # --offset, --sample-frac and the stratified strategy over the full index's labels.
    r = report(tmp_path, str(index), "--s3-uri-col", "s3_path", "--class-col", "class_id", "--offset", "16",
               "--sample-frac", "0.5", "--strategy", "stratified", "--batch-size", "8", "--no-ceilings")
    assert r["rows"] == (N_IMAGES - 16) // 2 and "ceilings" not in r


def test_trace_writes_the_runs_timeline(images, tmp_path):
    index, _ = images
    out = tmp_path / "run.json"
    r = report(tmp_path, str(index), "--s3-uri-col", "s3_path", "--class-col", "class_id", "--limit", "24",
               "--batch-size", "8", "--no-ceilings", "--trace", str(out))
    assert r["trace"] == str(out)
    doc = json.loads(out.read_text())
    trace_format.check(doc)
    downloads = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["name"].startswith("download ")]
    assert len(downloads) == r["run"]["downloads"] == 24
    assert sum(e["args"]["bytes"] for e in downloads) == r["run"]["bytes_downloaded"]
    assert len([e for e in doc["traceEvents"] if e["name"] == "batch done"]) == r["run"]["batches"] == 3


def test_a_slow_server_is_named_the_network(images, tmp_path):
    index, proxy = images
    proxy.plan.latency = 0.15  # every request waits: 4 in flight give ~27 objects/s, 8 twice that
    r = report(tmp_path, str(index), "--s3-uri-col", "s3_path", "--class-col", "class_id", "--limit", "32",
               "--batch-size", "4", "--download-threads", "4")
    assert r["limiting_stage"] == "network", r
    assert "--download-threads to 8" in r["advice"]


def test_an_expensive_consumer_is_named_decode(images, tmp_path):
    index, _ = images
    loader = tmp_path / "slow_loader.py"
    loader.write_text("import time\n\ndef load(path):\n    time.sleep(0.25)\n    return open(path, 'rb').read()\n")
    r = report(tmp_path, str(index), "--s3-uri-col", "s3_path", "--class-col", "class_id", "--limit", "16",
               "--batch-size", "4", "--workers", "1", "--image-loader", f"{loader}:load")
    assert r["limiting_stage"] == "decode", json.dumps({k: r[k] for k in ("run", "ceilings", "advice")})
    assert "DataLoader workers" in r["advice"]


@pytest.mark.parametrize("args, message", [
    (["--s3-uri-col", "nope"], 'no column "nope"'),
    (["--sample-frac", "0"], r"--sample-frac must be in \(0, 1\]"),
    (["--sample-frac", "1.5"], r"--sample-frac must be in \(0, 1\]"),
    (["--batch-size", "0"], "must be >= 1"),
    (["--strategy", "stratified", "--class-col", ""], "needs class labels"),
    (["--image-loader", "missing.py:f"], "does not exist"),
    (["--offset", "100000"], "no rows left"),
])
def test_usage_errors_exit_2_with_a_clear_message(tmp_path, args, message):
    index = tmp_path / "i.csv"
    index.write_text("s3_uri,label\ns3://b/k0.jpg,0\ns3://b/k1.jpg,1\n")
    proc = speedtest(str(index), *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    import re

    assert re.search(message, proc.stderr), proc.stderr


def test_the_command_lists_its_subcommands():
    proc = subprocess.run([str(PLANFETCH), "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and "speedtest" in proc.stdout
    proc = subprocess.run([str(PLANFETCH), "nope"], capture_output=True, text=True)
    assert proc.returncode == 2 and "unknown command" in proc.stderr
