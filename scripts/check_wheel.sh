#!/usr/bin/env bash
# The CI check of the installable package (scripts/test.sh runs it): builds the sdist and
# from it one repaired manylinux_2_17 x86-64 wheel for the repo venv's Python (zig, against
# glibc 2.17's symbols; the bundled libraries from build/wheel-deps, built once per pin set),
# checks auditwheel's verdict, the symbols the wheel needs from the system, the extension's
# exports and stripping, then installs the wheel into a fresh venv and uses it from outside
# the checkout (scripts/check_wheel.py, the extras included), runs the Python suite on the
# wheel, and finally installs the sdist itself, as pip does for a user, into another fresh venv.
#
#   scripts/check_wheel.sh            build, then check
#   scripts/check_wheel.sh --built    check the wheel already in build/wheelhouse
#
# A full Release compile the first time; ccache makes a rerun quick.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
base=$(.venv/bin/python -c 'import sys; print(sys._base_executable)')
[[ ${1:-} == --built ]] || JOBS=${JOBS:-2} scripts/build_wheels.sh --python "$base"
tag=$("$base" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
wheel=$(ls build/wheelhouse/insitubatch-*-"$tag"-*manylinux*_x86_64.whl)
sdist=$(ls build/dist/insitubatch-*.tar.gz)
# -v: without it, show stops before the external-library verdict when the glibc symbols limit the tag.
show=$(build/wheel-tools/bin/python -m auditwheel -v show "$wheel" 2>/dev/null)
if ! grep -q "requires no external shared libraries" <<<"$show" ||
   ! tr '\n' ' ' <<<"$show" | grep -q 'consistent with the following platform tag: "manylinux_2_17_x86_64"'; then
  echo "check_wheel: auditwheel does not give $wheel the manylinux_2_17 policy with every library bundled:" >&2
  echo "$show" >&2
  exit 1
fi
echo "check_wheel: auditwheel: manylinux_2_17_x86_64, no library outside the policy"
# The ELF files as pip installs them: no versioned glibc symbol newer than 2.17, no system C++
# runtime, no symbol left unresolved; the extension exports only PyInit__ext and is stripped.
build/wheel-tools/bin/python scripts/check_wheel_symbols.py "$wheel"

tmp=$(mktemp -d /tmp/insitubatch-check-XXXXXX)
trap 'rm -rf "$tmp"' EXIT

env -u LD_LIBRARY_PATH .venv/bin/python scripts/check_wheel.py "$wheel" --python "$base"

# The whole Python suite again, on the wheel: unpacked ahead of the source build on the path,
# so every test (and every process a test starts) imports it. A wheel-only difference (another
# compiler, C++ runtime, compiler runtime and codec builds) shows here, as the CPU features
# zig's compiler-rt never filled in would have. Only the source build's own report is left out.
start=$(date +%s)
.venv/bin/python -m zipfile -e "$wheel" "$tmp/wheel-site"
env -u LD_LIBRARY_PATH PYTHONPATH="$tmp/wheel-site" .venv/bin/python -c "
import insitubatch, sys
assert insitubatch.__file__.startswith(sys.argv[1]), insitubatch.__file__
assert insitubatch.debug_info()['build'].startswith('repaired wheel'), insitubatch.debug_info()['build']" "$tmp/wheel-site"
env -u LD_LIBRARY_PATH PYTHONPATH="$tmp/wheel-site" .venv/bin/python -m pytest -q -p no:cacheprovider tests \
  --deselect tests/test_debug_info.py::test_source_build_reports_itself_and_every_librarys_own_version ||
  { echo "check_wheel: the Python suite fails on $(basename "$wheel") (above)" >&2; exit 1; }
echo "check_wheel: the Python suite passed on $(basename "$wheel"); $(( $(date +%s) - start )) s"

# The sdist as pip installs it for a user: unpacked into a temporary directory and built in
# isolation, with its build requirements (pyproject.toml's [build-system]) from the index.
# ccache: paths under TMPDIR are hashed relative to the build directory, as the checkout's
# are, so the C++ layers setup.sh compiled are served from the cache; the bindings (they
# include the isolated build environment's nanobind) compile afresh.
start=$(date +%s)
"$base" -m venv "$tmp/sdist-venv"
mkdir "$tmp/pip-tmp"
if command -v ccache >/dev/null; then
  export CMAKE_CXX_COMPILER_LAUNCHER=${CMAKE_CXX_COMPILER_LAUNCHER:-ccache}
  export CMAKE_C_COMPILER_LAUNCHER=${CMAKE_C_COMPILER_LAUNCHER:-ccache} CCACHE_NOHASHDIR=1
fi
TMPDIR=$tmp/pip-tmp CCACHE_BASEDIR=$tmp/pip-tmp CMAKE_BUILD_PARALLEL_LEVEL=${JOBS:-2} \
  "$tmp/sdist-venv/bin/python" -m pip install -q --disable-pip-version-check "$ROOT/$sdist"
.venv/bin/python -c "import sys, numpy as np, zarr
a = zarr.create_array(zarr.storage.LocalStore(sys.argv[1]), name='x', shape=(40, 3), chunks=(8, 3), dtype='f4')
a[...] = np.arange(120, dtype='f4').reshape(40, 3) / 7" "$tmp/small.zarr"
(cd "$tmp" && env -u LD_LIBRARY_PATH -u PYTHONPATH "$tmp/sdist-venv/bin/python" -I -c "
import insitubatch, numpy as np
from insitubatch import read_chunk, store
assert insitubatch.__file__.startswith('$tmp/sdist-venv/'), insitubatch.__file__
build = insitubatch.debug_info()['build']
assert build.startswith('source build ('), build
want = np.arange(120, dtype='f4').reshape(40, 3) / 7
s = store('$tmp/small.zarr')
assert all(np.array_equal(read_chunk(s, 'x', (c, 0)), want[8 * c:8 * c + 8]) for c in range(5))
") || { echo "check_wheel: the package pip installed from $sdist fails in a fresh venv (above)" >&2; exit 1; }
echo "check_wheel: sdist: pip install $(basename "$sdist") (build isolation) into a fresh venv: imports, a source build, reads a local store exactly; $(( $(date +%s) - start )) s"
