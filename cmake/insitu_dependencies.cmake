# Looks for every library the build needs before any target is declared, so that a machine
# missing one gets a single error naming the package that provides it (Debian/Ubuntu and
# Fedora/RHEL names), not a find module's message or a wall of compiler errors.

set(_insitu_missing "")
macro(_insitu_require found what debian fedora)
  if(NOT ${found})
    list(APPEND _insitu_missing "  ${what}: apt install ${debian}  |  dnf install ${fedora}")
  endif()
endmacro()

find_package(PkgConfig QUIET)
_insitu_require(PKG_CONFIG_FOUND "pkg-config" "pkg-config" "pkgconf-pkg-config")
if(PKG_CONFIG_FOUND)
  pkg_check_modules(_insitu_zstd QUIET libzstd)
  _insitu_require(_insitu_zstd_FOUND "zstd (libzstd.pc)" "libzstd-dev" "libzstd-devel")
  pkg_check_modules(_insitu_lz4 QUIET liblz4)
  _insitu_require(_insitu_lz4_FOUND "lz4 (liblz4.pc)" "liblz4-dev" "lz4-devel")
  pkg_check_modules(_insitu_blosc QUIET blosc)
  _insitu_require(_insitu_blosc_FOUND "c-blosc (blosc.pc)" "libblosc-dev" "blosc-devel")
  pkg_check_modules(_insitu_deflate QUIET libdeflate)
  _insitu_require(_insitu_deflate_FOUND "libdeflate (libdeflate.pc)" "libdeflate-dev" "libdeflate-devel")
  pkg_check_modules(_insitu_lzma QUIET liblzma)
  _insitu_require(_insitu_lzma_FOUND "liblzma (liblzma.pc)" "liblzma-dev" "xz-devel")
endif()
find_package(ZLIB QUIET)
_insitu_require(ZLIB_FOUND "zlib" "zlib1g-dev" "zlib-devel")
find_package(BZip2 QUIET)
_insitu_require(BZIP2_FOUND "bzip2" "libbz2-dev" "bzip2-devel")
find_package(CURL QUIET)
_insitu_require(CURL_FOUND "libcurl" "libcurl4-openssl-dev" "libcurl-devel")
find_package(OpenSSL QUIET)
_insitu_require(OPENSSL_FOUND "OpenSSL" "libssl-dev" "openssl-devel")
find_package(nlohmann_json 3.10 QUIET)
_insitu_require(nlohmann_json_FOUND "nlohmann-json >= 3.10" "nlohmann-json3-dev" "json-devel")
if(INSITU_BUILD_TESTS)
  find_package(GTest QUIET)
  _insitu_require(GTest_FOUND "GoogleTest (or configure with -DINSITU_BUILD_TESTS=OFF)"
                  "libgtest-dev libgmock-dev" "gtest-devel gmock-devel")
endif()

if(_insitu_missing)
  list(JOIN _insitu_missing "\n" _insitu_lines)
  message(FATAL_ERROR "insitubatch needs these development packages, which were not found:\n"
                      "${_insitu_lines}\n"
                      "(scripts/setup.sh installs all of them on Debian/Ubuntu; a prebuilt wheel needs none.)")
endif()
