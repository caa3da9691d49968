#!/usr/bin/env bash
# Builds the C libraries a manylinux_2_17 wheel bundles (requirements/wheel-deps.lock: the
# codecs, zlib, OpenSSL, nghttp2, libcurl, nlohmann-json's headers) for one target, linked by
# zig against glibc 2.17's symbol versions (the codecs compiled by Debian's GCC, the rest by
# zig's clang), into a prefix that scripts/build_wheels.sh compiles the extension against.
# Also writes that target's compiler wrappers and CMake toolchain files.
#
#   scripts/build_wheel_deps.sh --target x86_64|aarch64 [--zig PATH] [--lock FILE]
#   scripts/build_wheel_deps.sh --target x86_64 --sources-only   fetch the sources; print the
#                                                lock as fetched (this script's "sources" section)
#
# The prefix, <cache>/<target>-<key>, is kept: <key> hashes the lock file, this script, zstd's trainer and the
# zig and GCC versions, so a run that changes none of them only checks it is there (seconds), and any
# change builds a new one. <cache> is INSITU_WHEEL_DEPS, by default ~/.cache/insitubatch/
# wheel-deps: outside the checkout, as ccache's and zig's own caches are, because CI builds
# in a fresh clone, whose build/ is empty. Sources are fetched once into <cache>/src with
# `apt-get source` (a private apt state, the mirrors this machine's apt uses) and checked
# against the lock's SHA-256 (or, where Debian has moved past a pin, its signed index's).
# The compiler wrappers and the CMake toolchain file go to build/wheel-toolchain/<target>.
# JOBS sets -j (default 2). Prints the prefix last.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
LOCK=$ROOT/requirements/wheel-deps.lock
GLIBC=2.17  # manylinux2014
target="" zig="" sources_only=0
while (($#)); do
  case $1 in
    --target) target=$2; shift 2 ;;
    --zig) zig=$2; shift 2 ;;
    --lock) LOCK=$(realpath -e "${2:-}" 2>/dev/null) || { echo "build_wheel_deps: --lock: no file ${2:-}" >&2; exit 2; }; shift 2 ;;
    --sources-only) sources_only=1; shift ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "build_wheel_deps: unknown argument $1" >&2; exit 2 ;;
  esac
done
case $target in
  x86_64|aarch64) ;;
  *) echo "build_wheel_deps: --target x86_64 or aarch64" >&2; exit 2 ;;
esac
if [[ -z $zig ]]; then
  zig=$(build/wheel-tools/bin/python -c 'import ziglang, os; print(os.path.join(os.path.dirname(ziglang.__file__), "zig"))' 2>/dev/null) ||
    { echo "build_wheel_deps: no zig: run scripts/build_wheels.sh (its tool venv installs ziglang), or pass --zig" >&2; exit 1; }
fi
JOBS=${JOBS:-2}
triple=$target-linux-gnu.$GLIBC
zig_version=$("$zig" version)
# GCC compiles the codecs (below): Debian's, for aarch64 its cross compiler.
case $target in x86_64) gcc=gcc-12 ;; aarch64) gcc=aarch64-linux-gnu-gcc-12 ;; esac
if ! command -v "$gcc" >/dev/null; then
  echo "build_wheel_deps: installing Debian's $gcc (gcc-12 / gcc-aarch64-linux-gnu)"
  SUDO=""
  [[ $(id -u) -eq 0 ]] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    "$( [[ $target == x86_64 ]] && echo gcc-12 || echo gcc-aarch64-linux-gnu)" >/dev/null
fi
gcc_version=$("$gcc" -dumpfullversion)
key=$(cat "$LOCK" "$0" scripts/zstd_train.c <(echo "$zig_version $triple $gcc $gcc_version") | sha256sum | cut -c1-12)
CACHE=${INSITU_WHEEL_DEPS:-${XDG_CACHE_HOME:-$HOME/.cache}/insitubatch/wheel-deps}
prefix=$CACHE/$target-$key
toolchain=$ROOT/build/wheel-toolchain/$target

# --- the toolchain: wrappers (ccache recognizes *-clang as clang) and a CMake toolchain file
mkdir -p "$toolchain"
write_if_changed() {  # <file> <content>: the mtime moves only on change (ccache, make)
  if [[ ! -f $1 || $(cat "$1") != "$2" ]]; then printf '%s\n' "$2" > "$1"; chmod +x "$1"; fi
}
write_if_changed "$toolchain/$triple-clang" "#!/bin/sh
exec $zig cc -target $triple \"\$@\""
write_if_changed "$toolchain/$triple-clang++" "#!/bin/sh
exec $zig c++ -target $triple \"\$@\""
for tool in ar ranlib; do
  write_if_changed "$toolchain/$tool" "#!/bin/sh
exec $zig $tool \"\$@\""
done
# llvm-strip knows every architecture (binutils' strip only the host's).
strip_tool=$(command -v llvm-strip-14 || command -v llvm-strip || true)
[[ -n $strip_tool ]] || { echo "build_wheel_deps: needs llvm-strip (apt install llvm-14)" >&2; exit 1; }
write_if_changed "$toolchain/toolchain.cmake" "# Written by scripts/build_wheel_deps.sh: $triple through zig $zig_version.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR $target)
set(CMAKE_C_COMPILER $toolchain/$triple-clang)
set(CMAKE_CXX_COMPILER $toolchain/$triple-clang++)
set(CMAKE_AR $toolchain/ar CACHE FILEPATH \"\")
set(CMAKE_RANLIB $toolchain/ranlib CACHE FILEPATH \"\")
set(CMAKE_STRIP $strip_tool CACHE FILEPATH \"\")
# Libraries and headers only from the prefix, never the build machine's /usr.
set(CMAKE_FIND_ROOT_PATH $prefix)
set(CMAKE_PREFIX_PATH $prefix)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
set(ENV{PKG_CONFIG_LIBDIR} $prefix/lib/pkgconfig)
set(ENV{PKG_CONFIG_PATH} \"\")"
CLANG=$toolchain/$triple-clang

# --- GCC for the codecs: clang compiles zstd's decoder into ~9% more instructions than GCC
# (docs/building-wheels.md), so the compression libraries are compiled by Debian's GCC (for
# aarch64 its cross compiler) and linked by zig. GCC sees glibc 2.17's headers (zig's, with
# -nostdinc: only GCC's own intrinsics and stddef.h are its), so configure checks, feature
# macros and inline functions are 2.17's, and the link against 2.17's stubs (-z defs)
# refuses any symbol 2.17 lacks. A link given sources (configure probes, CMake's compiler
# identification) compiles them with GCC first, so the build sees one compiler throughout.
# The libc headers zig's clang is given for this target (its -### line: -isystem .../libc/include/...
# and -D __GLIBC_MINOR__=17), for GCC, after GCC's own headers.
libc_headers=$(cd / && "$zig" cc -target "$triple" -### -x c -c /dev/null -o /dev/null 2>&1 | tr ' ' '\n' | tr -d '"' |
  awk 'prev == "-isystem" && $0 ~ /\/libc\/include\// {printf "-isystem /%s ", $0}
       prev == "-D" && $0 ~ /^__GLIBC_MINOR__=/ {printf "-D%s ", $0} {prev = $0}')
[[ $libc_headers == *generic-glibc*__GLIBC_MINOR__=${GLIBC#2.}* ]] ||
  { echo "build_wheel_deps: zig $zig_version's glibc headers for $triple not found (zig cc -###: $libc_headers)" >&2; exit 1; }
write_if_changed "$toolchain/$triple-gcc" "#!/usr/bin/env bash
# Written by scripts/build_wheel_deps.sh: $gcc $gcc_version compiles against glibc $GLIBC's
# headers (zig's); zig $zig_version links against glibc $GLIBC's symbols.
compile=($(command -v ccache || true) $(command -v "$gcc") -nostdinc -isystem $("$gcc" -print-file-name=include)
  $libc_headers-U_FORTIFY_SOURCE -D_FORTIFY_SOURCE=0)
link=($zig cc -target $triple)
"'
shopt -s extglob
if [[ $# == 1 && $1 == -@(-version|v|dumpversion|dumpfullversion|dumpmachine|print-*) ]]; then exec "${compile[@]}" "$1"; fi
for a in "$@"; do
  case $a in -c|-S|-E|-M|-MM|-fsyntax-only) exec "${compile[@]}" "$@" ;; esac
done
# A link. Sources among the arguments are compiled first, each with the options that are
# not the link'"'"'s; the link gets their objects in their places.
flags=() value=""
for a in "$@"; do
  if [[ -n $value ]]; then [[ $value == keep ]] && flags+=("$a"); value=""; continue; fi
  case $a in
    -o|-Xlinker|-T|-x) value=drop ;;
    -MF|-MT|-MQ|-I|-D|-U|-include|-imacros|-isystem|-iquote|-idirafter) flags+=("$a"); value=keep ;;
    -l*|-L*|-Wl,*|-shared|-static|-rdynamic|-pie|-no-pie|-nostdlib|-nodefaultlibs) ;;
    -*) flags+=("$a") ;;
    *.@(c|s|S|i)|*.o|*.a|*.so|*.so.*) ;;
    *) flags+=("$a") ;;
  esac
done
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gcc-zig-XXXXXX")
trap '"'"'rm -rf "$tmp"'"'"' EXIT
args=() value="" n=0
for a in "$@"; do
  if [[ -n $value ]]; then
    [[ $value == keep ]] && args+=("$a")
    value=""
    continue
  fi
  case $a in
    -x) value=drop ;;
    -o|-Xlinker|-T|-MF|-MT|-MQ|-I|-D|-U|-include|-imacros|-isystem|-iquote|-idirafter) args+=("$a"); value=keep ;;
    -*) args+=("$a") ;;
    *.@(c|s|S|i))
      n=$((n + 1))
      "${compile[@]}" "${flags[@]}" -c "$a" -o "$tmp/$n.o" || exit
      args+=("$tmp/$n.o") ;;
    *) args+=("$a") ;;
  esac
done
"${link[@]}" "${args[@]}"  # not exec: the EXIT trap removes $tmp (each link left one behind)'
GCC=$toolchain/$triple-gcc
write_if_changed "$toolchain/toolchain-gcc.cmake" "# Written by scripts/build_wheel_deps.sh: the codecs, compiled by $gcc, linked by zig.
include($toolchain/toolchain.cmake)
set(CMAKE_C_COMPILER $GCC)"

# --- sources: apt-get source (a private apt state with deb-src entries for the mirrors this
# machine's apt already uses), each .orig tarball checked against the lock. A pin Debian has
# since moved past (its security archive keeps only the newest release of each package, and a
# point release can replace a suite's) would otherwise stop every build, CI's included, the
# day Debian moves: the newest upstream tarball the line's suites carry is taken instead,
# checked against the SHA-256 of Debian's signed index, and the build says so
# (INSITU_WHEEL_DEPS_STRICT=1, as `build_wheels.sh --check` sets, refuses instead). SOURCES is
# the lock as fetched, and the prefix keeps a copy of the one it was built from.
SRC=$CACHE/src
SOURCES=$CACHE/sources-$target.lock
if ((!sources_only)) && [[ -f $prefix/.complete ]]; then
  if [[ -f $prefix/sources.lock ]] && ! cmp -s "$LOCK" "$prefix/sources.lock"; then
    echo "build_wheel_deps: $target: this prefix was built from sources newer than the lock's pins" \
      "($(diff <(grep -v '^#' "$LOCK") <(grep -v '^#' "$prefix/sources.lock") | awk '/^>/ {printf " %s", $5}')); update $LOCK" >&2
  fi
  echo "build_wheel_deps: $target: cached ($prefix)"
  echo "$prefix"
  exit 0
fi

apt_state() {  # a private apt state listing the lock's suites' sources; sets APT_CONFIG
  local apt=$CACHE/apt main security suites security_suites
  mkdir -p "$apt"/{lists/partial,archives/partial,sources}
  main=$(apt-get indextargets --format '$(REPO_URI) $(LABEL)' | awk '$2 == "Debian" {print $1; exit}')
  security=$(apt-get indextargets --format '$(REPO_URI) $(LABEL)' | awk '$2 == "Debian-Security" {print $1; exit}')
  [[ -n $main ]] || { echo "build_wheel_deps: this machine's apt has no Debian archive configured" >&2; exit 1; }
  # Suites named *-security come from the security archive; a line may list several, by commas.
  local all
  all=$(awk '!/^#/ && NF {print $3}' "$LOCK" | tr ',' '\n' | sort -u)
  suites=$(grep -v -- '-security$' <<< "$all" | tr '\n' ' ' || true)
  security_suites=$(grep -- '-security$' <<< "$all" | tr '\n' ' ' || true)
  local entry='Types: deb-src\nURIs: %s\nSuites: %s\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n'
  {
    [[ -z $suites ]] || printf "$entry" "$main" "$suites"
    if [[ -n $security_suites ]]; then
      [[ -n $security ]] || { echo "build_wheel_deps: this machine's apt has no Debian security archive" >&2; exit 1; }
      printf "$entry" "$security" "$security_suites"
    fi
  } > "$apt/sources/src.sources"
  cat > "$apt/apt.conf" <<EOF
Dir::State "$apt";
Dir::State::status "/dev/null";
Dir::Cache "$apt";
Dir::Etc::SourceList "/dev/null";
Dir::Etc::SourceParts "$apt/sources";
Dir::Etc::PreferencesParts "$apt/sources";
APT::Sandbox::User "root";
EOF
  export APT_CONFIG=$apt/apt.conf
  apt-get -qq update
}
orig_tarballs() {  # <package> <suite> -> "uri file sha256" of the upstream tarball the suite carries
  apt-get source --print-uris --only-source --tar-only "$1/$2" 2>/dev/null |
    awk -v p="$1_" 'index($2, p) == 1 && $2 ~ /^[^_]+_[^_]+\.orig\.tar\.[a-z0-9]+$/ && $4 ~ /^SHA256:/ {
      gsub("\047", "", $1); print $1, $2, substr($4, 8) }'
}
have_source() {  # <file> <sha256>: fetched already, and intact
  [[ -f $SRC/$1 && $(sha256sum "$SRC/$1" | cut -d' ' -f1) == "$2" ]]
}
fetch_sources() {  # writes SOURCES
  local line name pkg suites file sha need=0
  while read -r name pkg suites file sha; do
    [[ -z $name || $name == \#* ]] && continue
    have_source "$file" "$sha" || need=1
  done < "$LOCK"
  if ((!need)); then cp "$LOCK" "$SOURCES"; return 0; fi
  mkdir -p "$SRC"
  apt_state
  local suite uri f s v carried candidates got
  while IFS= read -r line; do
    read -r name pkg suites file sha <<< "$line"
    if [[ -z $name || $name == \#* ]]; then printf '%s\n' "$line"; continue; fi
    # "version uri file sha256 suite" of each tarball the suites carry, the pin alone if one does
    candidates="" carried=""
    for suite in ${suites//,/ }; do
      while read -r uri f s; do
        carried+=" $f ($suite)"
        if [[ $f == "$file" ]]; then
          [[ $s == "$sha" ]] || { echo "build_wheel_deps: Debian's $suite lists $file with SHA-256 $s, not the lock's $sha" >&2; exit 1; }
          candidates="pin $uri $f $s $suite"
          break 2
        fi
        v=${f#"${pkg}_"}
        candidates+="${v%.orig.tar.*} $uri $f $s $suite"$'\n'
      done < <(orig_tarballs "$pkg" "$suite")
    done
    if [[ -z $candidates ]]; then
      echo "build_wheel_deps: Debian's $suites carries no upstream tarball of $pkg; update $LOCK" >&2
      exit 1
    fi
    if [[ $candidates != pin\ * ]]; then
      if [[ ${INSITU_WHEEL_DEPS_STRICT:-0} == 1 ]]; then
        echo "build_wheel_deps: Debian's $suites no longer carries $file (it carries:$carried); update $LOCK" >&2
        exit 1
      fi
      # Newest first (a mirror may list a release whose files it lacks: the next is tried).
      candidates=$(sed '/^$/d' <<< "$candidates" | sort -u | sort -r -k1,1 -V)
    fi
    got=""
    while read -r v uri f s suite; do
      if have_source "$f" "$s"; then got=$f; break; fi
      echo "build_wheel_deps: fetching $f" >&2
      if /usr/lib/apt/apt-helper -qq download-file "$uri" "$SRC/$f" "SHA256:$s" >/dev/null; then got=$f; break; fi
      rm -f "$SRC/$f"
    done <<< "$candidates"
    [[ -n $got ]] || { echo "build_wheel_deps: could not fetch $pkg's upstream tarball (tried:$carried)" >&2; exit 1; }
    if [[ $got == "$file" ]]; then
      printf '%s\n' "$line"
    else
      echo "build_wheel_deps: WARNING: Debian's $suites no longer carries the lock's $file; building $name from" \
        "$got ($suite, SHA-256 from Debian's signed index). Update $LOCK to pin it." >&2
      printf '%-12s %-16s %-23s %-42s %s\n' "$name" "$pkg" "$suite" "$got" "$s"
    fi
  done < "$LOCK" > "$SOURCES.new"
  mv "$SOURCES.new" "$SOURCES"
  unset APT_CONFIG
}
fetch_sources
if ((sources_only)); then
  echo "$SOURCES"
  exit 0
fi

# --- the build: each library into $prefix, from a fresh unpack
work=$CACHE/work-$target
rm -rf "$work" "$prefix"
mkdir -p "$work" "$prefix"
unpack() {  # <name> -> cd into its fresh source tree
  local file
  file=$(awk -v n="$1" '$1 == n {print $4}' "$SOURCES")
  mkdir -p "$work/$1"
  tar -xf "$SRC/$file" -C "$work/$1" --strip-components=1
  cd "$work/$1"
}
export AR=$toolchain/ar RANLIB=$toolchain/ranlib
# -O2 as the distributions build them; -z defs: a symbol glibc 2.17 lacks fails the link
# here instead of loading as unresolved on the user's machine. --undefined-version: lld
# refuses a version script naming a symbol the output lacks (zlib's configure probes its
# shared build with zlib.map on a one-function library).
export CFLAGS="-O2 -g0 -fPIC" LDFLAGS="-Wl,-z,defs -Wl,--undefined-version"
export PKG_CONFIG_LIBDIR=$prefix/lib/pkgconfig PKG_CONFIG_PATH=""
cmake_build() {  # <cmake args...>: configure, build and install the current tree
  cmake -S . -B _build -G Ninja -DCMAKE_TOOLCHAIN_FILE="$cmake_toolchain" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_FLAGS_RELEASE="-O2 -DNDEBUG" -DCMAKE_INSTALL_PREFIX="$prefix" -DCMAKE_INSTALL_LIBDIR=lib \
    -DBUILD_SHARED_LIBS=ON -DCMAKE_POLICY_VERSION_MINIMUM=3.5 "$@"
  ninja -C _build -j"$JOBS"
  ninja -C _build install
}

build_zlib() {  # (its configure probes the shared build without LDFLAGS)
  LDSHARED="$CC -shared -Wl,-soname,libz.so.1,--version-script,zlib.map $LDFLAGS" \
    ./configure --prefix="$prefix" --libdir="$prefix/lib"
  make -j"$JOBS" && make install
  rm -f "$prefix"/lib/libz.a
}
build_bzip2() {  # its Makefile builds a static library; the shared one as Debian names it
  local f objs=()
  for f in blocksort huffman crctable randtable compress decompress bzlib; do
    "$CC" $CFLAGS -D_FILE_OFFSET_BITS=64 -c $f.c -o $f.o
    objs+=($f.o)
  done
  "$CC" -shared $LDFLAGS -Wl,-soname,libbz2.so.1.0 -o "$prefix/lib/libbz2.so.1.0.8" "${objs[@]}"
  ln -sf libbz2.so.1.0.8 "$prefix/lib/libbz2.so.1.0"
  ln -sf libbz2.so.1.0 "$prefix/lib/libbz2.so"
  install -m644 bzlib.h "$prefix/include/"
}
build_xz() {
  cmake_build -DXZ_TOOL_XZ=OFF -DXZ_TOOL_XZDEC=OFF -DXZ_TOOL_LZMADEC=OFF -DXZ_TOOL_LZMAINFO=OFF \
    -DXZ_TOOL_SCRIPTS=OFF -DXZ_TOOL_SYMLINKS_LZMA=OFF -DXZ_DOC=OFF -DXZ_NLS=OFF
}
# zstd's decoder, profile-guided where the build machine can run the target's code (x86-64):
# its objects compiled instrumented by the same GCC wrapper, linked with scripts/zstd_train.c
# by GCC (the wrapper's zig link has no gcov runtime), trained, then compiled again from the
# profile. 1.5.7's sequence loop costs ~6% over 1.5.4's; the profile wins it back
# (docs/building-wheels.md). The objects' folder is fixed so the profile's file names match.
# 0 when trained; otherwise the build goes on without a profile, and says so.
zstd_profile() {  # <profile dir> <cflags>
  local dir=$1 flags=$2 objs=lib/obj/pgo/dynamic
  CFLAGS="$flags -fprofile-generate=$dir -fprofile-update=atomic" \
    make -C lib -j"$JOBS" CC="$CC" BUILD_DIR=obj/pgo libzstd || true  # the objects; the zig link fails
  ls "$objs"/*.o >/dev/null 2>&1 &&
    "$gcc" -O2 -Ilib "$ROOT/scripts/zstd_train.c" "$objs"/*.o -lgcov -lm -lpthread -o zstd_train &&
    ./zstd_train && ls "$dir"/*.gcda >/dev/null 2>&1
  local rc=$?
  rm -rf lib/obj/pgo zstd_train lib/libzstd.so*
  return $rc
}
build_zstd() {  # at its own -O3: its decoder is ~5% faster than at -O2 (docs/building-wheels.md)
  local flags=${CFLAGS/-O2/-O3}
  if [[ $target == "$(uname -m)" ]]; then
    if zstd_profile "$work/zstd-profile" "$flags"; then
      flags+=" -fprofile-use=$work/zstd-profile -fprofile-correction"
      echo "build_wheel_deps: zstd: profile-guided"
    else
      echo "build_wheel_deps: WARNING: zstd's training run failed; built without a profile" >&2
    fi
  fi
  CFLAGS=$flags make -C lib -j"$JOBS" CC="$CC" BUILD_DIR=obj/pgo libzstd
  make -C lib install-shared install-includes install-pc PREFIX="$prefix" LIBDIR="$prefix/lib"
}
build_lz4() {
  make -C lib -j"$JOBS" CC="$CC" BUILD_STATIC=no liblz4
  make -C lib install PREFIX="$prefix" LIBDIR="$prefix/lib" BUILD_STATIC=no
}
build_libdeflate() {
  cmake_build -DLIBDEFLATE_BUILD_STATIC_LIB=OFF -DLIBDEFLATE_BUILD_GZIP=OFF
}
build_blosc() {  # Debian's +ds tarball leaves out the bundled codecs: it links the ones above
  cmake_build -DPREFER_EXTERNAL_LZ4=ON -DPREFER_EXTERNAL_ZSTD=ON -DPREFER_EXTERNAL_ZLIB=ON -DDEACTIVATE_SNAPPY=ON \
    -DBUILD_STATIC=OFF -DBUILD_TESTS=OFF -DBUILD_BENCHMARKS=OFF -DBUILD_FUZZERS=OFF
}
build_openssl() {  # what the engine and libcurl use: libcrypto and libssl, the default provider built in
  local os_target
  case $target in x86_64) os_target=linux-x86_64 ;; aarch64) os_target=linux-aarch64 ;; esac
  # Left out, to compile less (OpenSSL is most of this script's time): the protocols and
  # formats neither libcurl's HTTPS nor the engine's signing (SHA-256, HMAC, RSA) uses, and
  # ciphers, hashes and signatures no TLS 1.2/1.3 server needs.
  ./Configure "$os_target" --prefix="$prefix" --libdir=lib shared no-tests no-docs no-apps no-legacy \
    no-module no-engine no-comp no-quic no-afalgeng no-ui-console \
    no-dtls no-srtp no-srp no-ssl-trace no-cmp no-cms no-ts no-ct no-rfc3779 \
    no-aria no-bf no-camellia no-cast no-idea no-mdc2 no-rc2 no-rc4 no-seed no-sm2 no-sm3 no-sm4 no-whirlpool \
    no-ocb no-siv no-siphash no-scrypt no-argon2 no-dsa no-ec2m no-gost no-slh-dsa
  make -j"$JOBS" build_libs
  make install_dev
  rm -f "$prefix"/lib/libcrypto.a "$prefix"/lib/libssl.a
}
build_nghttp2() {
  cmake_build -DENABLE_LIB_ONLY=ON -DBUILD_STATIC_LIBS=OFF -DENABLE_DOC=OFF
}
build_curl() {  # HTTP(S) only, over OpenSSL, HTTP/2 through nghttp2: what the stores speak
  cmake_build -DBUILD_CURL_EXE=OFF -DBUILD_STATIC_LIBS=OFF -DHTTP_ONLY=ON -DCURL_USE_OPENSSL=ON -DUSE_NGHTTP2=ON \
    -DCURL_USE_LIBPSL=OFF -DUSE_LIBIDN2=OFF -DCURL_USE_LIBSSH2=OFF -DUSE_LIBSSH=OFF -DCURL_BROTLI=OFF \
    -DCURL_ZSTD=OFF -DCURL_USE_GSSAPI=OFF -DUSE_LIBRTMP=OFF -DUSE_NGTCP2=OFF -DENABLE_THREADED_RESOLVER=ON \
    -DCURL_DISABLE_LDAP=ON -DCURL_DISABLE_LDAPS=ON -DENABLE_CURL_MANUAL=OFF -DBUILD_LIBCURL_DOCS=OFF \
    -DBUILD_MISC_DOCS=OFF
}
build_json() {  # headers and its CMake package only
  cmake_build -DJSON_BuildTests=OFF -DJSON_Install=ON
}

start=$(date +%s)
for name in zlib bzip2 xz zstd lz4 libdeflate blosc openssl nghttp2 curl json; do
  t0=$(date +%s)
  case $name in  # the codecs by GCC (above), the rest by zig's clang
    zlib|bzip2|xz|zstd|lz4|libdeflate|blosc) export CC=$GCC; cmake_toolchain=$toolchain/toolchain-gcc.cmake ;;
    *) export CC=$CLANG; cmake_toolchain=$toolchain/toolchain.cmake ;;
  esac
  unpack "$name"
  set +e  # (set -e holds in the subshell only outside a tested context)
  (set -e; "build_$name") > "$work/$name.log" 2>&1
  rc=$?
  set -e
  if ((rc)); then
    tail -40 "$work/$name.log" >&2
    echo "build_wheel_deps: $target: building $name failed (above; the whole log: $work/$name.log)" >&2
    exit 1
  fi
  grep -h "^build_wheel_deps: " "$work/$name.log" || true  # what a build said of itself (zstd's profile)
  echo "build_wheel_deps: $target: $name ($(( $(date +%s) - t0 )) s)"
done

# No symbol tables in what the wheel ships (auditwheel copies these files as they are).
find "$prefix/lib" -maxdepth 1 -type f -name '*.so*' -exec "$strip_tool" --strip-unneeded {} +
cd "$ROOT"
rm -rf "$work"
# Older prefixes of this target (another lock or zig) are stale.
for old in "$CACHE/$target"-*; do
  [[ $old == "$prefix" ]] || rm -rf "$old"
done
cp "$SOURCES" "$prefix/sources.lock"
echo "$zig_version $triple $(sha256sum "$SOURCES" | cut -d' ' -f1)" > "$prefix/.complete"
echo "build_wheel_deps: $target: built in $(( $(date +%s) - start )) s ($prefix)"
echo "$prefix"
