#!/usr/bin/env bash
# Unpacks Debian's CPython for another architecture into a folder: its headers are what an
# aarch64 wheel compiles against, and qemu-user runs the interpreter for the wheel's smoke run
# (scripts/check_wheel_aarch64.sh). apt resolves the packages (a private apt state under
# build/, the mirrors this machine's apt uses, no host package touched); dpkg-deb unpacks them.
#
#   scripts/debian_python.sh --suite bookworm --python 3.11 [--arch arm64]
#
# Out: build/debian-python/<arch>-<suite>/root (usr/bin/python3.X, usr/include/...). Kept
# once complete. Prints the root last.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
arch=arm64 suite="" python=""
while (($#)); do
  case $1 in
    --arch) arch=$2; shift 2 ;;
    --suite) suite=$2; shift 2 ;;
    --python) python=$2; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "debian_python: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -n $suite && -n $python ]] || { echo "debian_python: --suite and --python are required" >&2; exit 2; }
dir=$ROOT/build/debian-python/$arch-$suite
root=$dir/root
# The interpreter, its standard library (venv without pip: the checks install with the
# build machine's pip), the headers, and the C++ runtime the manylinux policy lets PyPI's
# wheels (numpy's) take from the system.
packages=("python$python" "libpython$python-dev" libstdc++6)
want="$arch $suite ${packages[*]}"
if [[ -f $dir/.complete && $(cat "$dir/.complete") == "$want" ]]; then
  echo "$root"
  exit 0
fi

rm -rf "$dir"
mkdir -p "$dir"/apt/{lists/partial,archives/partial,sources} "$root"
main=$(apt-get indextargets --format '$(REPO_URI) $(LABEL)' | awk '$2 == "Debian" {print $1; exit}')
security=$(apt-get indextargets --format '$(REPO_URI) $(LABEL)' | awk '$2 == "Debian-Security" {print $1; exit}')
[[ -n $main ]] || { echo "debian_python: this machine's apt has no Debian archive configured" >&2; exit 1; }
entry='Types: deb\nURIs: %s\nSuites: %s\nComponents: main\nArchitectures: %s\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n'
{
  printf "$entry" "$main" "$suite $suite-updates" "$arch"
  [[ -z $security ]] || printf "$entry" "$security" "$suite-security" "$arch"
} > "$dir/apt/sources/debian.sources"
: > "$dir/apt/status"  # nothing installed: apt resolves the whole closure, libc6 included
cat > "$dir/apt/apt.conf" <<EOF
Dir::State "$dir/apt";
Dir::State::status "$dir/apt/status";
Dir::Cache "$dir/apt";
Dir::Etc::SourceList "/dev/null";
Dir::Etc::SourceParts "$dir/apt/sources";
Dir::Etc::PreferencesParts "$dir/apt/sources";
APT::Architecture "$arch";
APT::Architectures { "$arch"; };
APT::Install-Recommends "false";
APT::Sandbox::User "root";
EOF
export APT_CONFIG=$dir/apt/apt.conf
apt-get -qq update
apt-get -qq install --download-only -y "${packages[@]}" >/dev/null
debs=("$dir"/apt/archives/*.deb)
for deb in "${debs[@]}"; do dpkg-deb -x "$deb" "$root"; done
# Debian's merged /usr: the loader is looked up as /lib/ld-linux-*.so.1.
for d in bin lib sbin; do [[ -e $root/$d ]] || ln -s usr/$d "$root/$d"; done
rm -rf "$dir/apt/archives"
[[ -x $root/usr/bin/python$python ]] || { echo "debian_python: no usr/bin/python$python in $root" >&2; exit 1; }
echo "$want" > "$dir/.complete"
echo "debian_python: $arch $suite: ${#debs[@]} packages unpacked ($(du -sm "$root" | cut -f1) MB)" >&2
echo "$root"
