// Build facts for print_debug_info(): compiler, build kind, and each linked library's
// version and the file it was loaded from (a repaired wheel loads them from insitubatch.libs).

#include <blosc.h>
#include <bzlib.h>
#include <curl/curl.h>
#include <dlfcn.h>
#include <libdeflate.h>
#include <lz4.h>
#include <lzma.h>
#include <nanobind/stl/string.h>
#include <openssl/crypto.h>
#include <zlib.h>
#include <zstd.h>

#include <string>

#include "bindings.h"
#include "insitubatch/util/cpu_features.h"

namespace insitubatch::python {
namespace {

// The file the dynamic loader mapped `symbol` from ("" if it cannot tell).
std::string LoadedFrom(const void* symbol) {
  Dl_info info{};
  if (dladdr(symbol, &info) == 0 || info.dli_fname == nullptr) return "";
  return info.dli_fname;
}

void AddLibrary(nb::list& out, const char* name, const std::string& version, const void* symbol) {
  nb::dict d;
  d["name"] = name;
  d["version"] = version;
  d["path"] = LoadedFrom(symbol);
  out.append(d);
}

void ExtensionMarker() {}

}  // namespace

void BindBuildInfo(nb::module_& m) {
  m.def("build_info", [] {
    nb::dict d;
    d["compiler"] = INSITU_COMPILER;
    d["build_type"] = INSITU_BUILD_TYPE;
    d["portable_wheel_build"] = static_cast<bool>(INSITU_PORTABLE_WHEEL);
    d["extension_path"] = LoadedFrom(reinterpret_cast<const void*>(&ExtensionMarker));
    d["cxx_standard"] = std::to_string(__cplusplus);
    d["zstd"] = ZSTD_versionString();
    d["blosc"] = BLOSC_VERSION_STRING;
    d["lz4"] = LZ4_versionString();
    d["libdeflate"] = LIBDEFLATE_VERSION_STRING;
    d["zlib"] = zlibVersion();
    d["nanobind"] = std::to_string(NB_VERSION_MAJOR) + "." + std::to_string(NB_VERSION_MINOR) + "." +
                    std::to_string(NB_VERSION_PATCH);
#ifdef Py_GIL_DISABLED
    d["free_threading"] = true;
#else
    d["free_threading"] = false;
#endif
    // Versions as the loaded libraries report them (libdeflate has no runtime call: its
    // header's), and where each was loaded from.
    const curl_version_info_data* curl = curl_version_info(CURLVERSION_NOW);
    nb::list libs;
    AddLibrary(libs, "libcurl", curl->version, reinterpret_cast<const void*>(&curl_version_info));
    AddLibrary(libs, "openssl", OpenSSL_version(OPENSSL_VERSION), reinterpret_cast<const void*>(&OpenSSL_version));
    AddLibrary(libs, "zstd", ZSTD_versionString(), reinterpret_cast<const void*>(&ZSTD_versionString));
    AddLibrary(libs, "blosc", blosc_get_version_string(), reinterpret_cast<const void*>(&blosc_get_version_string));
    AddLibrary(libs, "lz4", LZ4_versionString(), reinterpret_cast<const void*>(&LZ4_versionString));
    AddLibrary(libs, "libdeflate", LIBDEFLATE_VERSION_STRING,
               reinterpret_cast<const void*>(&libdeflate_alloc_compressor));
    AddLibrary(libs, "zlib", zlibVersion(), reinterpret_cast<const void*>(&zlibVersion));
    AddLibrary(libs, "bzip2", BZ2_bzlibVersion(), reinterpret_cast<const void*>(&BZ2_bzlibVersion));
    AddLibrary(libs, "liblzma", lzma_version_string(), reinterpret_cast<const void*>(&lzma_version_string));
    d["libraries"] = libs;
    // The CPU features the hand-vectorized loops found (CRC-32C, the batch copy's streaming stores).
    nb::dict cpu;
    cpu["sse4.2"] = HostCpu().sse42;
    cpu["avx2"] = HostCpu().avx2;
    cpu["arm crc32"] = HostCpu().arm_crc32;
    d["cpu"] = cpu;
    d["curl_tls_backend"] = curl->ssl_version != nullptr ? curl->ssl_version : "";
    return d;
  });
}

}  // namespace insitubatch::python
