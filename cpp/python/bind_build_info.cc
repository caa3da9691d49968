// Build facts for print_debug_info(): compiler and codec library versions.

#include <blosc.h>
#include <libdeflate.h>
#include <lz4.h>
#include <nanobind/stl/string.h>
#include <zlib.h>
#include <zstd.h>

#include <string>

#include "bindings.h"

namespace insitubatch::python {

void BindBuildInfo(nb::module_& m) {
  m.def("build_info", [] {
    nb::dict d;
    d["compiler"] = INSITU_COMPILER;
    d["build_type"] = INSITU_BUILD_TYPE;
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
    return d;
  });
}

}  // namespace insitubatch::python
