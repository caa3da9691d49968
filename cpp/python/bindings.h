#pragma once

// Shared helpers of the bind_<topic>.cc files: the Status -> Python exception bridge and
// the numpy export of C++-owned buffers.

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <memory>
#include <vector>

#include "insitubatch/util/buffer.h"
#include "insitubatch/util/result.h"
#include "insitubatch/zarr/dtype.h"

namespace insitubatch::python {

namespace nb = nanobind;

// Thrown by ThrowIfError; the translator registered in bind_errors.cc maps the status
// code onto the class hierarchy of insitubatch.errors.
struct StatusException {
  Status status;
};

inline void ThrowIfError(const Status& status) {
  if (!status.ok()) throw StatusException{status};
}

template <typename T>
T ValueOrThrow(Result<T> result) {
  if (!result.ok()) throw StatusException{std::move(result).status()};
  return std::move(result).value();
}

nb::dlpack::dtype ToDlpackDtype(zarr::DataType dtype);

// A numpy array viewing `buffer` with `shape`; the array owns the buffer (freed when the
// last Python reference goes), so no copy is made.
nb::object BufferToNumpy(Buffer buffer, const std::vector<uint64_t>& shape,
                         zarr::DataType dtype);

void BindErrors(nb::module_& m);
void BindStores(nb::module_& m);
void BindCloudStores(nb::module_& m);
void BindPythonStore(nb::module_& m);
void BindZarr(nb::module_& m);
void BindBuildInfo(nb::module_& m);
void BindEngine(nb::module_& m);
void BindBench(nb::module_& m);
void BindOrder(nb::module_& m);

}  // namespace insitubatch::python
