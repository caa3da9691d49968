#!/usr/bin/env bash
# Runs every test: the C++ suites (ctest) in a normal build and an AddressSanitizer +
# UBSan build, then the Python suite (pytest) against the installed package.
#   scripts/test.sh            everything (what CI runs)
#   scripts/test.sh --quick    skip the sanitizer builds
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
[[ ${1:-} == "--quick" ]] && quick=1

scripts/setup.sh
scripts/bench_http_setup.sh  # nginx (tests/test_http2_nginx.py serves HTTP/2 with it) and obstore

JOBS=${JOBS:-$(nproc)}
start=$(date +%s)
stage() { echo "== [$(( $(date +%s) - start )) s] $*"; }
export CTEST_OUTPUT_ON_FAILURE=1

# The sanitizer builds use clang (its TSan and libFuzzer): the newest installed, unless
# CLANG / CLANGXX name one.
find_clang() {  # <clang|clang++>
  local tool=$1 v
  for v in "" -19 -18 -17 -16 -15 -14; do
    if command -v "$tool$v" >/dev/null; then echo "$tool$v"; return; fi
  done
  echo "test: no $tool found (setup.sh installs clang-14)" >&2
  return 1
}
CLANG=${CLANG:-$(find_clang clang)}
CLANGXX=${CLANGXX:-$(find_clang clang++)}
# Formatting differs between clang-format versions: the tree is formatted with 14's.
CLANG_FORMAT=${CLANG_FORMAT:-clang-format-14}

run_ctest() {  # <build dir> <cmake args...>
  local dir=$1
  shift
  cmake -S . -B "$dir" -G Ninja "$@" >/dev/null
  ninja -C "$dir" -j"$JOBS"
  ctest --test-dir "$dir" -j"$JOBS" --timeout 600 --no-tests=error
}

stage "C++ formatting (.clang-format)"
git ls-files -z 'cpp/*.cc' 'cpp/*.h' | xargs -0 "$CLANG_FORMAT" --dry-run -Werror

stage "C++ tests (RelWithDebInfo)"
run_ctest build/cpp -DCMAKE_BUILD_TYPE=RelWithDebInfo

if ((!quick)); then
  stage "C++ tests under AddressSanitizer + UBSan (clang)"
  ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    run_ctest build/asan -DCMAKE_BUILD_TYPE=Debug -DINSITU_SANITIZE="address;undefined" \
    -DCMAKE_C_COMPILER="$CLANG" -DCMAKE_CXX_COMPILER="$CLANGXX"
fi

if ((!quick)); then
  stage "engine and IO tests under ThreadSanitizer (clang)"
  cmake -S . -B build/tsan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DINSITU_SANITIZE=thread \
    -DCMAKE_C_COMPILER="$CLANG" -DCMAKE_CXX_COMPILER="$CLANGXX" >/dev/null
  ninja -C build/tsan -j"$JOBS" engine_test util_test io_test
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 allocator_may_return_null=1" build/tsan/cpp/util_test
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 allocator_may_return_null=1" build/tsan/cpp/engine_test
  # The IO threads (HTTP transport, stores, downloads) hand work across threads too.
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 allocator_may_return_null=1" build/tsan/cpp/io_test
fi

stage "Python tests"
# pytest exits 5 when it collects nothing: that must fail, and it does (non-zero).
.venv/bin/python -m pytest -q -p no:cacheprovider tests

stage "framework adapters (torch, JAX, TensorFlow: one process and venv each)"
scripts/test_frameworks.sh --no-setup

stage "the installable package: sdist, a repaired wheel, used from a fresh venv (scripts/check_wheel.sh)"
scripts/check_wheel.sh  # -j2 and ccache: setup.sh compiled the same objects;
# after the framework stage: the wheel's extras install the torch, Lightning and Ray versions
# it installed into .venv, out of pip's cache

stage "benchmark suite smoke run (tiny sizes, every engine)"
scripts/bench.sh --no-setup --setup-only
.venv/bin/python -m pytest -q -p no:cacheprovider tests/bench
stage "all tests passed"
