#!/usr/bin/env bash
# The benchmark suite (bench/suite): sets up what it needs, then runs it.
#   scripts/bench.sh                  full suite -> bench/results/suite.json, docs/img/suite_*.png,
#                                     the generated section of docs/benchmarks.md
#   scripts/bench.sh --setup-only     only the setup (before tests/bench/test_suite_smoke.py)
#   scripts/bench.sh --no-setup ...   skip scripts/setup.sh (the caller already ran it)
#   scripts/bench.sh --smoke --out D  any other arguments go to bench/suite/run.py
# Setup: scripts/setup.sh (the package), torch at scripts/test_frameworks.sh's pin, the
# peers of requirements/bench.txt in .venv, and .venv-orig (a Python 3.12) with the PyPI
# insitubatch of requirements/bench-orig.txt. Idempotent: stamp files skip current installs.
set -euo pipefail
cd "$(dirname "$0")/.."

setup=1 run=1 args=()
for a in "$@"; do
  case $a in
    --no-setup) setup=0 ;;
    --setup-only) run=0 ;;
    *) args+=("$a") ;;
  esac
done
((setup)) && scripts/setup.sh

PY=.venv/bin/python
stamp_of() { cat "$@" | sha256sum | cut -d' ' -f1; }

# torch: the one pin scripts/test_frameworks.sh installs, never another build.
if ! "$PY" -c "import torch" >/dev/null 2>&1; then
  pin=$(grep -o '^torch==[^ ]*' requirements/frameworks.txt)
  echo "bench: installing $pin into .venv"
  "$PY" -m pip install -q "$pin"
fi

# The peers and plotting, constrained to the numpy/zarr/torch the package was built against.
want=$(stamp_of requirements/bench.txt)
if [[ $(cat .venv/.bench-requirements.sha 2>/dev/null) != "$want" ]]; then
  echo "bench: installing requirements/bench.txt into .venv"
  constraints=$(mktemp)
  "$PY" -m pip freeze | grep -iE '^(numpy|zarr|numcodecs|torch)==' > "$constraints" || true
  "$PY" -m pip install -q -r requirements/bench.txt -c "$constraints"
  rm -f "$constraints"
  echo "$want" > .venv/.bench-requirements.sha
fi

# The original insitubatch needs Python >= 3.12: $ORIG_PYTHON, pyenv's 3.12, or python3.12.
find_py312() {
  local c
  local pyenv
  pyenv=$(ls -r ~/.pyenv/versions/3.12*/bin/python3.12 2>/dev/null || true)
  for c in "${ORIG_PYTHON:-}" $pyenv "$(command -v python3.12 || true)"; do
    [[ -n $c ]] && "$c" -c "import sys; assert sys.version_info[:2] == (3, 12)" 2>/dev/null && { echo "$c"; return; }
  done
  return 0
}
py312=$(find_py312)
if [[ -z $py312 ]]; then
  echo "bench: no Python 3.12 found: the suite's 'original' row will read 'skipped'"
else
  if [[ ! -x .venv-orig/bin/python ]]; then
    echo "bench: creating .venv-orig with $py312"
    "$py312" -m venv .venv-orig
  fi
  want=$(stamp_of requirements/bench-orig.txt)
  if [[ $(cat .venv-orig/.requirements.sha 2>/dev/null) != "$want" ]]; then
    echo "bench: installing requirements/bench-orig.txt into .venv-orig"
    .venv-orig/bin/python -m pip install -q --upgrade pip
    .venv-orig/bin/python -m pip install -q -r requirements/bench-orig.txt
    echo "$want" > .venv-orig/.requirements.sha
  fi
fi
echo "bench: ready"

((run)) || exit 0
exec "$PY" bench/suite/run.py "${args[@]}"
