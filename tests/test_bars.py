"""The one-line-per-stage chart of where a pass's wall time went: bars and a mark on the
limiting stage on a terminal, plain figures anywhere else; print_summary() ends with it once
a pass has run, and the speedtest CLIs end with it (a real pseudo-terminal shows the bars)."""

from __future__ import annotations

import io
import os
import pty
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr.codecs import ZstdCodec

import insitubatch as ib
from insitubatch import bars

BLOCKS = set("█▏▎▍▌▋▊▉")


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_bars_and_a_mark_and_anything_else_plain_figures():
    shares = {"consumer": 0.1, "store": 0.0, "decode": 0.55, "residency": 0.0, "gather": 0.35}
    tty = bars.stage_chart("share of wall time", shares, "decode", tty=True).splitlines()
    plain = bars.stage_chart("share of wall time", shares, "decode", tty=False).splitlines()
    assert tty[0] == plain[0] == "share of wall time"
    assert len(tty) == len(plain) == 1 + len(shares)  # a line per stage
    assert tty[3].startswith("  decode     ") and tty[3].endswith("55.0%  ◀ limiting stage")
    assert tty[3].count("█") == round(0.55 * bars.WIDTH * 8) // 8
    assert plain[3] == "  decode      55.0%  <- limiting stage"
    assert not BLOCKS & set("".join(plain)) and all(ord(c) < 128 for c in "".join(plain))
    assert sum("limiting stage" in line for line in tty) == 1
    unknown = bars.stage_chart("t", shares, None, tty=False, unmarked="no single stage dominated")
    assert "limiting stage" not in unknown and unknown.endswith("(no single stage dominated)")
    assert bars.bar(1.0) == "█" * bars.WIDTH and bars.bar(0.0) == " " * bars.WIDTH
    assert bars.bar(1 / (8 * bars.WIDTH)).rstrip() == "▏"


@pytest.fixture(scope="module")
def store_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("bars") / "b.zarr"
    arr = zarr.create_array(zarr.storage.LocalStore(path), name="t2m", shape=(128, 16, 16), chunks=(8, 16, 16),
                            dtype="float32", compressors=[ZstdCodec(level=1)], fill_value=0)
    arr[...] = np.random.default_rng(0).standard_normal((128, 16, 16)).astype("f4")
    return path


def test_print_summary_ends_with_the_last_pass_chart_once_a_pass_has_run(store_path):
    geoms = ib.open_geometries(ib.local_store(store_path), ["t2m"])
    with ib.InSituDataset(str(store_path), ib.split_by_chunk(geoms["t2m"], fractions=(1.0, 0.0, 0.0)), geoms,
                          batch_size=16) as ds:
        before = io.StringIO()
        ds.print_summary(file=before)
        assert "share of wall time" not in before.getvalue()  # no pass yet: the static report alone
        for _ in ds.train:
            pass
        plain, terminal = io.StringIO(), _Terminal()
        ds.print_summary(file=plain)
        ds.print_summary(file=terminal)
        stats = ds.last_pass
    assert plain.getvalue().startswith(before.getvalue())
    tail = plain.getvalue().split("\n\n")[-1].splitlines()
    assert tail[0] == f"share of wall time, last pass (train, epoch 0, {stats.wall_s:.2f} s)"
    assert [line.split()[0] for line in tail[1:6]] == list(stats.shares)
    assert not BLOCKS & set(plain.getvalue())
    chart = terminal.getvalue().split("\n\n")[-1]
    assert BLOCKS & set(chart)
    if stats.limiting_stage != "unknown":
        marked = [line for line in chart.splitlines() if "◀ limiting stage" in line]
        assert len(marked) == 1 and marked[0].split()[0] == stats.limiting_stage


def test_the_speedtest_cli_draws_bars_on_a_terminal_and_plain_figures_into_a_pipe(store_path):
    command = [str(Path(sys.executable).with_name("insitubatch")), "speedtest", str(store_path), "--var", "t2m",
               "--samples", "64", "--batch-size", "16", "--no-ceilings"]
    piped = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert piped.returncode == 0, piped.stdout + piped.stderr
    lines = piped.stdout.rstrip("\n").splitlines()
    title = lines.index("share of wall time, cold epoch")
    assert [line.split()[0] for line in lines[title + 1:title + 6]] == ["consumer", "store", "decode", "residency",
                                                                      "gather"]
    assert not BLOCKS & set(piped.stdout)
    leader, follower = pty.openpty()  # a real terminal for the child's stdout
    proc = subprocess.Popen(command, stdout=follower, stderr=subprocess.DEVNULL)
    os.close(follower)
    out = b""
    try:
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the child closed its end: all is read
                break
            if not chunk:
                break
            out += chunk
    finally:
        os.close(leader)
        proc.wait(timeout=300)
    assert proc.returncode == 0, out
    text = out.decode()
    assert "share of wall time, cold epoch" in text and BLOCKS & set(text.split("share of wall time, cold epoch")[1])


def test_the_planfetch_speedtest_ends_with_each_stages_share_at_its_ceiling(images, tmp_path):
    index, _ = images
    out = tmp_path / "r.json"
    proc = subprocess.run([str(Path(sys.executable).with_name("planfetch")), "speedtest", str(index), "--s3-uri-col",
                           "s3_path", "--class-col", "class_id", "--limit", "24", "--batch-size", "8", "--json",
                           str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    import json

    report = json.loads(out.read_text())
    lines = proc.stdout.rstrip("\n").splitlines()
    title = lines.index("share of wall time each stage needs at its ceiling")
    rows = lines[title + 1:]
    assert [r.split()[0] for r in rows[:3]] == ["network", "disk", "consumer"]
    for row in rows[:3]:  # the run's rate over the stage's ceiling, as a share of wall time
        stage, share = row.split()[:2]
        assert float(share.rstrip("%")) == pytest.approx(100 * report["ceiling_shares"][stage], abs=0.06)
    marked = [r.split()[0] for r in rows if "<- limiting stage" in r]
    assert marked == ([report["limiting_stage"]] if report["limiting_stage"] != "prefetch window" else [])
