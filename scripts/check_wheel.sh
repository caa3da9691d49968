#!/usr/bin/env bash
# The CI check of the installable package (scripts/test.sh runs it): builds the sdist and
# from it one repaired wheel for the repo venv's Python, checks auditwheel's verdict, then
# installs the wheel into a fresh venv and uses it from outside the checkout
# (scripts/check_wheel.py). A full Release compile the first time; ccache makes a rerun quick.
set -euo pipefail
cd "$(dirname "$0")/.."
base=$(.venv/bin/python -c 'import sys; print(sys._base_executable)')
JOBS=${JOBS:-2} scripts/build_wheels.sh --python "$base"
tag=$("$base" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
wheel=$(ls build/wheelhouse/insitubatch-*-"$tag"-*manylinux*.whl)
# -v: without it, show stops before the external-library verdict when the glibc symbols limit the tag.
show=$(build/wheel-tools/bin/python -m auditwheel -v show "$wheel" 2>/dev/null)
if ! grep -q "requires no external shared libraries" <<<"$show"; then
  echo "check_wheel: auditwheel finds libraries outside the manylinux policy:" >&2
  echo "$show" >&2
  exit 1
fi
echo "check_wheel: auditwheel: no library outside the policy; $(tr '\n' ' ' <<<"$show" | grep -o 'consistent with the following platform tag: "[^"]*"' | head -1)"
env -u LD_LIBRARY_PATH .venv/bin/python scripts/check_wheel.py "$wheel" --python "$base"
