#!/usr/bin/env bash
# The CI check of the installable package (scripts/test.sh runs it): builds the sdist and
# from it one repaired wheel for the repo venv's Python, checks auditwheel's verdict and the
# extension's exports and stripping, then installs the wheel into a fresh venv and uses it
# from outside the checkout (scripts/check_wheel.py, the extras included), and finally
# installs the sdist itself, as pip does for a user, into another fresh venv.
# A full Release compile the first time; ccache makes a rerun quick.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
base=$(.venv/bin/python -c 'import sys; print(sys._base_executable)')
JOBS=${JOBS:-2} scripts/build_wheels.sh --python "$base"
tag=$("$base" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
wheel=$(ls build/wheelhouse/insitubatch-*-"$tag"-*manylinux*.whl)
sdist=$(ls build/dist/insitubatch-*.tar.gz)
# -v: without it, show stops before the external-library verdict when the glibc symbols limit the tag.
show=$(build/wheel-tools/bin/python -m auditwheel -v show "$wheel" 2>/dev/null)
if ! grep -q "requires no external shared libraries" <<<"$show"; then
  echo "check_wheel: auditwheel finds libraries outside the manylinux policy:" >&2
  echo "$show" >&2
  exit 1
fi
echo "check_wheel: auditwheel: no library outside the policy; $(tr '\n' ' ' <<<"$show" | grep -o 'consistent with the following platform tag: "[^"]*"' | head -1)"

tmp=$(mktemp -d /tmp/insitubatch-check-XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# The extension as pip installs it (the wheel's bytes; RECORD pins their hash): a Release
# build exports only the module's init (cpp/python/ext.map) and ships no symbol table or
# debug information (install.strip in pyproject.toml).
build/wheel-tools/bin/python -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' \
  "$wheel" "$tmp/ext"
ext=$(ls "$tmp"/ext/insitubatch/_ext.*.so)
exports=$(nm -D --defined-only "$ext" | awk '{print $NF}' | sort -u)
if [[ $exports != PyInit__ext ]]; then
  echo "check_wheel: $(basename "$ext") in $wheel exports more than PyInit__ext (cpp/python/ext.map):" >&2
  grep -vx PyInit__ext <<<"$exports" | head -20 >&2
  exit 1
fi
sections=$(readelf -SW "$ext" | grep -oE '\.(debug_[a-z_]+|symtab|zdebug_[a-z_]+)\b' | sort -u | tr '\n' ' ' || true)
if [[ -n $sections ]]; then
  echo "check_wheel: $(basename "$ext") in $wheel is not stripped: it has ${sections}(a Release wheel ships" \
    "no symbol table or debug info: install.strip in pyproject.toml)" >&2
  exit 1
fi
# Our code never raises the tag: the extension needs no newer glibc than the libraries it
# bundles (std::random_device, for one, pulls in glibc 2.36's arc4random from GCC 12's libstdc++).
glibc_minor() {  # <files...> -> the newest GLIBC_2.N they reference: N
  objdump -T "$@" 2>/dev/null | { grep -oE '\(GLIBC_2\.[0-9]+' || true; } | cut -d. -f2 | sort -n | tail -1
}
ext_glibc=$(glibc_minor "$ext")
libs_glibc=$(glibc_minor "$tmp"/ext/insitubatch.libs/*)
if ((${ext_glibc:-0} > ${libs_glibc:-0})); then
  echo "check_wheel: $(basename "$ext") needs glibc 2.$ext_glibc, newer than the 2.$libs_glibc its bundled" \
    "libraries need, which raises the wheel's manylinux tag; the symbols:" >&2
  objdump -T "$ext" | grep -E "\(GLIBC_2\.$ext_glibc\)" >&2
  exit 1
fi
echo "check_wheel: $(basename "$ext"): exports only PyInit__ext; stripped (no .symtab, no .debug_*);" \
  "needs glibc 2.$ext_glibc, no newer than its bundled libraries (2.$libs_glibc)"

env -u LD_LIBRARY_PATH .venv/bin/python scripts/check_wheel.py "$wheel" --python "$base"

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
