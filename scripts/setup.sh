#!/usr/bin/env bash
# Sets up a development machine: Debian packages, the .venv virtualenv, and the package
# built and installed into it. Idempotent; a no-op (seconds) when everything is current.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  build-essential pkg-config ninja-build ccache
  libzstd-dev libblosc-dev liblz4-dev libdeflate-dev zlib1g-dev libbz2-dev liblzma-dev
  libcurl4-openssl-dev libssl-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  clang-14 libclang-rt-14-dev clang-format-14
  llvm-14  # llvm-strip: scripts/build_wheels.sh strips the wheels' libraries for either architecture
)

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""
  [[ $(id -u) -eq 0 ]] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

PYTHON=${PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
  echo "setup: creating .venv"
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.requirements-dev.sha
want=$(sha256sum requirements/dev.txt | cut -d' ' -f1)
if [[ ! -f $stamp || $(cat "$stamp") != "$want" ]]; then
  echo "setup: installing Python build and test dependencies"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r requirements/dev.txt
  echo "$want" > "$stamp"
fi

# Build and install the package (incremental: scikit-build-core keeps build/<wheel tag>).
# Through ccache: scripts/build_wheels.sh compiles the same objects again for the wheel.
if command -v ccache >/dev/null; then
  export CMAKE_CXX_COMPILER_LAUNCHER=${CMAKE_CXX_COMPILER_LAUNCHER:-ccache}
  export CMAKE_C_COMPILER_LAUNCHER=${CMAKE_C_COMPILER_LAUNCHER:-ccache}
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
fi
echo "setup: building the insitubatch extension"
.venv/bin/python -m pip install -q --no-build-isolation --no-deps .
.venv/bin/python -c "import insitubatch, insitubatch._ext" || {
  echo "setup: the package failed to build or import" >&2
  exit 1
}
echo "setup: ready (.venv)"
