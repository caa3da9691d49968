"""Instructions a fixed decode costs, counted by valgrind's callgrind: the same count whatever
else loads the machine, where wall-clock timings on the shared VM swing by tens of percent.

* `--libzstd PATH ...`: each libzstd decoding one fixed frame (4 of engine_bench.py's
  samples, 1.04 MB of float32, compressed once at level 1 by the first library given), 5 times through ctypes: the
  process's instructions with the decodes minus the same process without them (callgrind's
  --toggle-collect misses what ZSTD_decompress tail-calls).
* `--wheel WHEEL`: the installed package (this checkout, as scripts/setup.sh built it) and the
  wheel (installed into its own folder, as bench/engine_ab.py does) each reading every chunk
  of two arrays that zarr-python wrote (zstd level 1; blosc lz4 with byte shuffle) with
  read_chunk: the process's instructions with the reads minus the same process without them,
  the median of 3 rounds (the engine's threads make the count vary by about 2%).
  The wheel's own libzstd joins the `--libzstd` rows.

    .venv/bin/python bench/decode_instructions.py --wheel build/wheelhouse/insitubatch-...-cp311-...whl \
        [--libzstd /usr/lib/x86_64-linux-gnu/libzstd.so.1 ...]

Needs valgrind. Writes bench/results/decode_instructions.json. About 5 minutes.
"""

from __future__ import annotations

import argparse
import ctypes.util
import json
import os
import pathlib
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from engine_ab import RESULTS, install_wheel  # noqa: E402

DECODES = 5

# engine_bench.py's samples: a 181x360 float32 field, smooth plus noise, rounded to 0.1.
FIELD = """
import numpy as np
rng = np.random.default_rng(0)
y, x = np.meshgrid(np.linspace(0, np.pi, 181), np.linspace(0, 2 * np.pi, 360), indexing="ij")
base = (250 + 40 * np.sin(y) * np.cos(x)).astype("f4")
field = np.round(base + rng.normal(0, 2, size=(SAMPLES, 181, 360)).astype("f4"), 1)
"""

ZSTD = """
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
frame = open(sys.argv[2], 'rb').read()
out = ctypes.create_string_buffer(int(sys.argv[3]))
for _ in range(int(sys.argv[4])):
    n = lib.ZSTD_decompress(out, len(out), frame, len(frame))
    assert n == len(out), n
"""

READ = """
import sys, insitubatch
s = insitubatch.store(sys.argv[1])
reads = int(sys.argv[2])
for name in ('zstd', 'blosc'):
    for c in range(16 * reads):
        insitubatch.read_chunk(s, name, (c % 16, 0, 0))
"""


def callgrind(argv: list[str], env: dict | None = None) -> int:
    """Instructions valgrind counts running `argv`."""
    env = dict(os.environ if env is None else env, PYTHONHASHSEED="0")
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "callgrind.out"
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *argv], env=env, check=True,
                       capture_output=True)
        summary = re.search(r"^(?:summary|totals): (\d+)", out.read_text(), re.M)
        assert summary, f"no totals in {out}"
        return int(summary.group(1))


def zstd_rows(libs: list[str], tmp: pathlib.Path) -> list[dict]:
    """Instructions per decode of one fixed frame, for each libzstd."""
    lib = ctypes.CDLL(libs[0])
    ns: dict = {}
    exec(FIELD.replace("SAMPLES", "4"), ns)
    raw = ns["field"].tobytes()
    bound = lib.ZSTD_compressBound(ctypes.c_size_t(len(raw)))
    buf = ctypes.create_string_buffer(bound)
    n = lib.ZSTD_compress(buf, ctypes.c_size_t(bound), raw, ctypes.c_size_t(len(raw)), 1)
    frame = tmp / "field.zst"
    frame.write_bytes(buf.raw[:n])
    rows = []
    for path in libs:
        got = (callgrind([sys.executable, "-c", ZSTD, path, str(frame), str(len(raw)), str(DECODES)])
               - callgrind([sys.executable, "-c", ZSTD, path, str(frame), str(len(raw)), "0"]))
        version = ctypes.CDLL(path).ZSTD_versionNumber()
        rows.append({"libzstd": path, "version": f"{version // 10000}.{version // 100 % 100}.{version % 100}",
                     "input_bytes": len(raw), "frame_bytes": n, "instructions_per_decode": got // DECODES})
        print(f"libzstd {rows[-1]['version']} {path}: {got // DECODES:,} instructions per decode")
    return rows


def write_store(path: pathlib.Path) -> None:
    import numpy as np
    import zarr

    ns: dict = {}
    exec(FIELD.replace("SAMPLES", "16"), ns)
    data = ns["field"]
    root = zarr.open_group(zarr.storage.LocalStore(path), mode="w")
    for name, codec in (("zstd", zarr.codecs.ZstdCodec(level=1)),
                        ("blosc", zarr.codecs.BloscCodec(cname="lz4", clevel=5, shuffle="shuffle", typesize=4))):
        a = root.create_array(name, shape=data.shape, chunks=(1, 181, 360), dtype="f4", compressors=[codec])
        a[...] = data
    np.save(path / "want.npy", data)


def engine_rows(site: pathlib.Path, tmp: pathlib.Path, rounds: int = 3) -> list[dict]:
    """Instructions of reading every chunk 4 times, the installed package against the wheel."""
    store = tmp / "store.zarr"
    write_store(store)
    rows = []
    for label, where in (("source build", None), ("wheel", site)):
        env = dict(os.environ)
        env.pop("LD_LIBRARY_PATH", None)
        if where is not None:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(where), env.get("PYTHONPATH", "")]))
        check = ("import sys, numpy as np, insitubatch\n"
                 "want = np.load(sys.argv[1] + '/want.npy'); s = insitubatch.store(sys.argv[1])\n"
                 "assert all(np.array_equal(insitubatch.read_chunk(s, n, (c, 0, 0))[0], want[c])"
                 " for n in ('zstd', 'blosc') for c in range(16))\n"
                 "print(insitubatch.debug_info()['build'])")
        build = subprocess.run([sys.executable, "-c", check, str(store)], env=env, check=True, capture_output=True,
                               text=True).stdout.strip()
        counts = [callgrind([sys.executable, "-c", READ, str(store), "4"], env=env)
                  - callgrind([sys.executable, "-c", READ, str(store), "0"], env=env) for _ in range(rounds)]
        got = statistics.median(counts)
        rows.append({"build": label, "debug_build": build, "chunks_read": 2 * 16 * 4, "chunk_bytes": 181 * 360 * 4,
                     "instructions": got, "rounds": counts})
        print(f"{label} ({build}): {got:,} instructions for {2 * 16 * 4} chunk reads"
              f" (median of {', '.join(f'{c:,}' for c in counts)})")
    return rows


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--wheel", type=pathlib.Path, help="a built wheel: the engine rows, and its libzstd")
    p.add_argument("--libzstd", nargs="*", default=[], help="more libzstd files (the system's is always first)")
    args = p.parse_args(argv)
    if args.wheel is not None and not args.wheel.is_file():
        p.error(f"--wheel {args.wheel}: no such file")
    for lib in args.libzstd:
        if not pathlib.Path(lib).is_file():
            p.error(f"--libzstd {lib}: no such file")
    if shutil.which("valgrind") is None:
        p.error("needs valgrind (apt install valgrind)")
    system = ctypes.util.find_library("zstd")
    if system is None:
        p.error("no system libzstd to compress the frame with")
    libs = [system, *args.libzstd]
    site = None
    if args.wheel is not None:
        site = install_wheel(args.wheel.resolve())
        libs += sorted(str(f) for f in (site / "insitubatch.libs").glob("libzstd*"))
    with tempfile.TemporaryDirectory() as tmp:
        result = {"zstd": zstd_rows(libs, pathlib.Path(tmp)),
                  "engine": engine_rows(site, pathlib.Path(tmp)) if site is not None else []}
    if result["engine"]:
        src, whl = (r["instructions"] for r in result["engine"])
        print(f"wheel / source build: {whl / src:.3f}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "decode_instructions.json").write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
