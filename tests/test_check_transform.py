"""insitubatch-check-transform: report, verdicts and exit codes."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import numpy as np
import pytest
import zarr

from insitubatch.check_transform import load_target, main

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples" / "transforms.py"


@pytest.fixture
def store_url(tmp_path):
    values = np.random.default_rng(0).standard_normal((24, 6, 8)).astype("f4") + 280
    zarr.create_array(zarr.storage.LocalStore(tmp_path / "s.zarr"), name="t2m", shape=values.shape,
                      chunks=(8, 3, 8), dtype="f4")[...] = values
    return f"file://{tmp_path}/s.zarr"


def run(argv, capsys):
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_preserving_transform_passes(store_url, capsys):
    code, out, _ = run([store_url, "--var", "t2m", "--transform", f"{EXAMPLES}:kelvin_to_celsius",
                        "--chunk", "1", "--threads", "2", "--min-seconds", "0.05", "--repeats", "1"], capsys)
    assert "8/chunk" in out and "3 chunks" in out and "(8, 6, 8)" in out
    assert "shape- and dtype-preserving" in out and "cacheable as-is" in out
    assert "GIL-release probe (thread-scaling, 2 threads):" in out
    assert code in (0, 1)  # the GIL verdict depends on this machine's load; never a hard timing assert


def test_declared_reshape_ok(store_url, capsys):
    code, out, _ = run([store_url, "--var", "t2m", "--transform", f"{EXAMPLES}:coarsen2x", "--no-gil-probe"],
                       capsys)
    assert code == 0, out
    assert "(8, 6, 8) float32  ->  (8, 3, 4) float32" in out and "[OK]" in out and "PASS" in out
    # The original CLI's words, which scripts grep.
    assert "  inner shape : (6, 8)  dtype=float32  inner tiles/chunk=2\n" in out
    assert "  declares output_inner -> (3, 4) float32  [OK]\n" in out
    assert out.rstrip().endswith("PASS: chunk_transform checks all passed.")


def test_mismatch_and_undeclared_reshape_fail(store_url, tmp_path, capsys):
    module = tmp_path / "bad.py"
    module.write_text(
        "import numpy as np\n"
        "class Liar:\n"
        "    def __call__(self, c):\n"
        "        c.data = c.data[..., :2]\n"
        "        return c\n"
        "    def output_inner(self, g):\n"
        "        return (6, 3), np.float32\n"
        "liar = Liar()\n"
        "def undeclared(c):\n"
        "    c.data = c.data[..., :2]\n"
        "    return c\n")
    code, out, _ = run([store_url, "--var", "t2m", "--transform", f"{module}:liar", "--no-gil-probe"], capsys)
    assert code == 1 and "[MISMATCH]" in out and "FAIL" in out
    # The original's words up to " -- "; its "ChunkPool._persist would raise." names a class
    # that is gone, and raised only with a cache_dir (docs/limits.md).
    assert ("  FAIL: declared (6, 3)/float32 != actual (6, 2)/float32 -- the engine would raise"
            " InvalidArgumentError on this chunk, with or without a cache.\n") in out
    code, out, _ = run([store_url, "--var", "t2m", "--transform", f"{module}:undeclared", "--no-gil-probe"], capsys)
    assert code == 1 and "does not declare output_inner" in out


def test_usage_errors_exit_2(store_url, tmp_path, capsys):
    for target in ["nope", f"{tmp_path}/missing.py:f", f"{EXAMPLES}:absent", "json:dumps_not_there"]:
        code, _, err = run([store_url, "--var", "t2m", "--transform", target, "--no-gil-probe"], capsys)
        assert code == 2 and err.startswith(f"error: could not load --transform {target!r}: "), (target, err)
    code, _, err = run([store_url, "--var", "t2m", "--transform", f"{EXAMPLES}:kelvin_to_celsius",
                        "--chunk", "3", "--no-gil-probe"], capsys)
    assert code == 2 and err == "error: --chunk 3 out of range [0, 3)\n"


def test_a_transform_scoped_to_another_variable_fails(store_url, tmp_path, capsys):
    module = tmp_path / "scoped.py"
    module.write_text("from insitubatch import applies\nonly_u10 = applies(['u10'], lambda c: c)\n"
                      "both = applies(['u10', 't2m'], lambda c: c)\n")
    code, out, _ = run([store_url, "--var", "t2m", "--transform", f"{module}:only_u10", "--no-gil-probe"], capsys)
    assert code == 1 and "FAIL: this transform is scoped with applies(['u10'])" in out
    code, out, _ = run([store_url, "--var", "t2m", "--transform", f"{module}:both", "--no-gil-probe"], capsys)
    assert code == 0 and "  scope       : applies to ['t2m', 'u10']" in out


def test_load_target_forms(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("class Zero:\n    def __call__(self, c):\n        return c\n"
                      "class NeedsArgs:\n    def __init__(self, k):\n        self.k = k\n"
                      "    def __call__(self, c):\n        return c\nvalue = 3\n")
    assert callable(load_target(f"{module}:Zero"))
    from insitubatch.check_transform import UsageError

    with pytest.raises(UsageError, match="module-level instance"):
        load_target(f"{module}:NeedsArgs")
    with pytest.raises(UsageError, match="not callable"):
        load_target(f"{module}:value")
    assert load_target("numpy:asarray") is np.asarray


def test_gil_probe_tells_numpy_from_a_python_loop(store_url):
    from insitubatch.check_transform import gil_probe
    from insitubatch.records import ChunkRead, DecodedChunk

    data = np.ones((8, 64, 64), "f4")
    make = lambda buf: DecodedChunk(ChunkRead("t2m", 0), buf, 0)  # noqa: E731
    one = gil_probe(lambda c: c, make, data, threads=1, repeats=1, min_seconds=0.01)
    assert set(one) == {"iters", "serial_s", "parallel_s", "speedup", "per_call_ms", "mb_s"}
    assert 0.3 < one["speedup"] < 3  # ~1x at one thread (no hard timing assertion)


def test_console_script_is_installed(store_url):
    exe = pathlib.Path(sys.executable).parent / "insitubatch-check-transform"
    result = subprocess.run([str(exe), store_url, "--var", "t2m", "--transform", f"{EXAMPLES}:coarsen2x",
                             "--no-gil-probe"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
