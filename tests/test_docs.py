"""The docs site builds in strict mode (a broken link, or an API reference to a name that no
longer exists, fails), the README points to it, and nothing in the repository points at
design notes that live outside it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_docs_site_builds_strictly(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-f", str(ROOT / "mkdocs.yml"),
                           "-d", str(tmp_path / "site")], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    api = (tmp_path / "site" / "api" / "insitubatch" / "index.html").read_text()
    assert "reference_store" in api and "InSituDataset" in api


def test_the_readme_links_every_page_it_promises():
    readme = (ROOT / "README.md").read_text()
    for page in ("docs/tuning.md", "docs/architecture.md", "docs/stores.md", "docs/caching.md", "docs/examples.md",
                 "docs/building-wheels.md"):
        assert page in readme, page
        assert (ROOT / page).is_file(), page


def test_no_source_cites_notes_outside_the_repository():
    pattern = re.compile(r"behaviou?r-spec|\.\./shared/|\bspec(ification)? (section )?[AB]\.\d+")
    offenders = []
    for folder in ("cpp", "python", "tests", "bench", "examples", "docs", "scripts"):
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in {".py", ".cc", ".h", ".md", ".sh", ".txt", ".toml", ".yml"} and path.is_file():
                for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                    if pattern.search(line):
                        offenders.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def test_the_benchmarks_page_opens_with_its_headline_table_and_plot_and_the_home_page_shows_it():
    import importlib.util

    spec = importlib.util.spec_from_file_location("headline_plot", ROOT / "bench" / "headline_plot.py")
    headline = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = headline  # its dataclass looks its module up
    spec.loader.exec_module(headline)
    rows = headline.parse(ROOT / "docs" / "benchmarks.md")  # each "ours ahead" agrees with its two figures
    assert {r.where for r in rows} == {"local", "first batch", "cloud"}
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    first_section = page.split("\n## ", 2)[1]
    assert first_section.startswith("At a glance") and headline.BEGIN in first_section
    assert "![ours ahead of each peer](img/headline.png)" in first_section
    assert "](img/headline.png)" in (ROOT / "docs" / "index.md").read_text()
    assert (ROOT / "docs" / "img" / "headline.png").is_file()
