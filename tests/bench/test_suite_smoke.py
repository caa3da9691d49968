"""Smoke run of the benchmark suite (bench/suite) at tiny sizes, so the suite cannot rot.

Needs torch, xarray, xbatcher and .venv-orig: run `scripts/bench.sh --setup-only` first.
Not collected by the main `pytest tests` run (tests/conftest.py); run it with
`.venv/bin/python -m pytest -q tests/bench/test_suite_smoke.py`.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "suite"))

import run as suite  # noqa: E402

VENV_PY = ROOT / ".venv" / "bin" / "python"


def _mtime(p: pathlib.Path) -> float | None:
    return p.stat().st_mtime_ns if p.exists() else None


@pytest.mark.timeout(600)
def test_suite_smoke(tmp_path):
    python = str(VENV_PY if VENV_PY.exists() else sys.executable)
    missing = subprocess.run([python, "-c", "import torch, xarray, xbatcher, matplotlib, insitubatch"],
                             capture_output=True, text=True)
    assert missing.returncode == 0, f"suite dependencies missing (scripts/bench.sh --setup-only): {missing.stderr}"
    guarded = [ROOT / "docs" / "benchmarks.md", ROOT / "bench" / "results" / "suite.json",
               ROOT / "docs" / "img" / "suite_rates.png"]
    before = [_mtime(p) for p in guarded]

    proc = subprocess.run([python, str(ROOT / "bench" / "suite" / "run.py"), "--smoke", "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=540)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]

    res = json.loads((tmp_path / "suite.json").read_text())
    assert len(res["datasets"]) == 2
    have_py312 = suite.find_python312() is not None
    for name in res["datasets"]:
        rows = [r for r in res["rows"] if r["dataset"] == name]
        assert {r["engine"] for r in rows} == set(suite.ALL_ENGINES), name
        for engine in suite.SWEPT:
            assert sorted(r["workers"] for r in rows if r["engine"] == engine) == [0, 1], (name, engine)
        for r in rows:
            what = f"{name} {r['engine']} workers={r['workers']}"
            if r["engine"] == "original" and "skipped" in r:
                assert not have_py312, f"{what} skipped although a Python 3.12 exists: {r['skipped']}"
                continue
            assert "failed" not in r and "skipped" not in r, (what, r.get("failed"), r.get("stderr_tail"))
            assert r["samples_s"] > 0 and r["mb_s"] > 0, what
            assert r["check"] == "ok" and r["full_epochs"], (what, r["check"])
            assert r["peak_rss_mib"] > 0, what
            if r["engine"] != "decode":
                assert r["ttfb_s"] > 0, what
        if have_py312:
            orig = next(r for r in rows if r["engine"] == "original")
            assert orig.get("version") == "0.2.0", orig
        assert 0 <= next(r for r in rows if r["engine"] == "ours")["hit_rate"] <= 1
        targets = res["summary"][name]["targets"]
        assert all(t["met"] is not None for t in targets.values()) or not have_py312, targets

    assert (tmp_path / "suite.md").read_text().count("<!-- suite:") == 2
    assert all((tmp_path / "img" / f).stat().st_size > 0 for f in ("suite_rates.png", "suite_ratios.png"))
    assert [_mtime(p) for p in guarded] == before, "a smoke run must not touch docs/ or bench/results"
    assert any((tmp_path / "data").iterdir()), "the smoke stores go under --out"
