#!/usr/bin/env bash
# The aarch64 wheel's check (scripts/build_wheels.sh --check runs it after building every
# wheel): auditwheel's verdict (manylinux_2_17_aarch64, no library outside the policy), the
# symbols check (scripts/check_wheel_symbols.py), then the smoke run under qemu-user with
# Debian's arm64 CPython (scripts/check_wheel_aarch64.py): a local store written by zarr and
# read exactly, a crc32c-checked store read on ARMv8's CRC32 instructions, HTTPS with a
# throwaway CA, S3 from moto, one planfetch epoch.
#
#   scripts/check_wheel_aarch64.sh [--python 3.11|3.13]   (3.11: Debian 12's; 3.13: Debian 13's)
#
# Needs the wheel built (scripts/build_wheels.sh --arch aarch64 --python 3.X) and .venv
# (scripts/setup.sh: moto, boto3, zarr); installs Debian's qemu-user-static when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
version=3.11
while (($#)); do
  case $1 in
    --python) version=$2; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "check_wheel_aarch64: unknown argument $1" >&2; exit 2 ;;
  esac
done
case $version in
  3.11) suite=bookworm ;;
  3.13) suite=trixie ;;
  *) echo "check_wheel_aarch64: Debian has an arm64 CPython 3.11 (bookworm) and 3.13 (trixie), not $version" >&2; exit 2 ;;
esac
tag=cp${version/./}
wheel=$(ls build/wheelhouse/insitubatch-*-"$tag"-*manylinux*_aarch64.whl 2>/dev/null || true)
[[ -n $wheel ]] || { echo "check_wheel_aarch64: no $tag aarch64 wheel: scripts/build_wheels.sh --arch aarch64 --python $version" >&2; exit 1; }
show=$(build/wheel-tools/bin/python -m auditwheel -v show "$wheel" 2>/dev/null)
if ! grep -q "requires no external shared libraries" <<<"$show" ||
   ! tr '\n' ' ' <<<"$show" | grep -q 'consistent with the following platform tag: "manylinux_2_17_aarch64"'; then
  echo "check_wheel_aarch64: auditwheel does not give $wheel the manylinux_2_17 policy with every library bundled:" >&2
  echo "$show" >&2
  exit 1
fi
echo "check_wheel_aarch64: auditwheel: manylinux_2_17_aarch64, no library outside the policy"
build/wheel-tools/bin/python scripts/check_wheel_symbols.py "$wheel"

if ! command -v qemu-aarch64-static >/dev/null && ! command -v qemu-aarch64 >/dev/null; then
  echo "check_wheel_aarch64: installing Debian's qemu-user-static"
  SUDO=""
  [[ $(id -u) -eq 0 ]] || SUDO="sudo"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends qemu-user-static >/dev/null
fi
root=$(scripts/debian_python.sh --suite "$suite" --python "$version" | tail -1)
env -u LD_LIBRARY_PATH .venv/bin/python scripts/check_wheel_aarch64.py "$wheel" --root "$root" --python "$version"
