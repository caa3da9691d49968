// numpy export of C++ buffers: the ndarray's owner capsule holds the Buffer, so the
// memory lives exactly as long as the last Python (or DLPack consumer) reference.

#include "bind_transforms.h"
#include "bindings.h"

namespace insitubatch::python {

nb::dlpack::dtype ToDlpackDtype(zarr::DataType dtype) {
  using zarr::DataTypeId;
  using Code = nb::dlpack::dtype_code;
  auto make = [](Code code, size_t bytes) {
    return nb::dlpack::dtype{static_cast<uint8_t>(code), static_cast<uint8_t>(bytes * 8), 1};
  };
  switch (dtype.id) {
    case DataTypeId::kBool:
      return make(Code::Bool, 1);
    case DataTypeId::kInt8:
    case DataTypeId::kInt16:
    case DataTypeId::kInt32:
    case DataTypeId::kInt64:
      return make(Code::Int, dtype.itemsize());
    case DataTypeId::kUInt8:
    case DataTypeId::kUInt16:
    case DataTypeId::kUInt32:
    case DataTypeId::kUInt64:
      return make(Code::UInt, dtype.itemsize());
    case DataTypeId::kFloat16:
    case DataTypeId::kFloat32:
    case DataTypeId::kFloat64:
      return make(Code::Float, dtype.itemsize());
    case DataTypeId::kComplex64:
    case DataTypeId::kComplex128:
      return make(Code::Complex, dtype.itemsize());
    case DataTypeId::kStructured:
      return make(Code::UInt, 1);  // the record's bytes: see NumpyDims
    case DataTypeId::kDateTime64:
    case DataTypeId::kTimeDelta64:
      return make(Code::Int, 8);  // counts: Python views the unit
    case DataTypeId::kBFloat16:
      return make(Code::UInt, 2);  // bits: Python views ml_dtypes.bfloat16
    case DataTypeId::kString:      // never in a buffer: read_string_chunk returns objects
    default:
      break;
  }
  return make(Code::UInt, 1);
}

// A record type has no DLPack dtype: its arrays go out as bytes with one more axis (the
// record), which Python views as the numpy structured dtype (no copy).
std::vector<size_t> NumpyDims(const std::vector<uint64_t>& shape, zarr::DataType dtype) {
  std::vector<size_t> dims(shape.begin(), shape.end());
  if (dtype.id == zarr::DataTypeId::kStructured) dims.push_back(dtype.itemsize());
  return dims;
}

nb::object BufferToNumpy(Buffer buffer, const std::vector<uint64_t>& shape, zarr::DataType dtype) {
  auto* owned = new Buffer(std::move(buffer));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<Buffer*>(p); });
  std::vector<size_t> dims = NumpyDims(shape, dtype);
  nb::ndarray<nb::numpy> array(owned->data(), dims.size(), dims.data(), owner,
                               /*strides=*/nullptr, ToDlpackDtype(dtype));
  return nb::cast(array, nb::rv_policy::reference);
}

}  // namespace insitubatch::python

namespace insitubatch::python {

// The capsule owns a reference to the shared buffer; when numpy (and any DLPack consumer
// that borrowed from it) lets go, the buffer returns to its recycler or is freed.
nb::object SharedToNumpy(std::shared_ptr<Buffer> buffer, const std::vector<uint64_t>& shape, zarr::DataType dtype) {
  auto* holder = new std::shared_ptr<Buffer>(std::move(buffer));
  nb::capsule owner(holder, [](void* p) noexcept { delete static_cast<std::shared_ptr<Buffer>*>(p); });
  std::vector<size_t> dims = NumpyDims(shape, dtype);
  nb::ndarray<nb::numpy> array((*holder)->data(), dims.size(), dims.data(), owner, nullptr, ToDlpackDtype(dtype));
  return nb::cast(array, nb::rv_policy::reference);
}

}  // namespace insitubatch::python
