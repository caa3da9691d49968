// Chunk transforms as the engine sees them: a Python callable run on decode threads with
// the GIL held only for the call, or one of the engine's native ones (standard scaler,
// cast, scale-offset: engine/native_transforms.h), which never take it.

#include "bind_transforms.h"

#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

#include "insitubatch/engine/native_transforms.h"

namespace insitubatch::python {
namespace {

using engine::ChunkTransform;
using engine::ChunkTransformInput;

// Exceptions whose payload went on a thread without the GIL, released by the next holder.
std::mutex g_released_mutex;
std::vector<PyObject*> g_released;

void DropReleased() {  // with the GIL held
  std::vector<PyObject*> objects;
  {
    std::lock_guard lock(g_released_mutex);
    objects.swap(g_released);
  }
  for (PyObject* o : objects) Py_DECREF(o);
}

// "ZeroDivisionError: flaky transform": what the status says (logs, retry notes) while the
// exception itself rides on the payload.
std::string Describe(nb::handle exception) {
  std::string text = nb::cast<std::string>(nb::str(exception.type().attr("__name__")));
  try {
    const std::string message = nb::cast<std::string>(nb::str(exception));
    if (!message.empty()) text += ": " + message;
  } catch (const std::exception&) {  // a __str__ that raises, or text that is not UTF-8
    PyErr_Clear();
  }
  return text;
}

std::vector<uint64_t> ShapeOf(nb::handle seq) {
  std::vector<uint64_t> out;
  for (nb::handle v : seq) out.push_back(nb::cast<uint64_t>(v));
  return out;
}

zarr::DataType DtypeOf(const std::string& typestr) {
  // numpy typestrs in native order ("<f4", "|u1"), as the Python side passes them.
  if (typestr == "bfloat16") return zarr::DataType{zarr::DataTypeId::kBFloat16};  // numpy: "<V2"
  auto parsed = zarr::ParseV2TypeString(typestr);
  if (!parsed.ok()) throw StatusException{parsed.status()};
  return parsed->dtype;
}

// Runs a Python callable: (chunk_index, sample_offset, array) -> array of the declared
// output shape and dtype, C-contiguous. The input array owns a reference to the assembled
// buffer, so a callable that keeps it is still safe.
class PyChunkTransform final : public ChunkTransform {
 public:
  PyChunkTransform(nb::object callback, std::vector<uint64_t> out_field, zarr::DataType out_dtype)
      : callback_(std::move(callback)), out_field_(std::move(out_field)), out_dtype_(out_dtype) {}

  ~PyChunkTransform() override {
    if (InterpreterGone()) {
      callback_.release();  // the interpreter is gone or going: leak rather than crash
      return;
    }
    nb::gil_scoped_acquire gil;
    callback_.reset();
    DropReleased();
  }

  Status Apply(const ChunkTransformInput& in, std::span<std::byte> output) const override {
    if (InterpreterGone()) {
      return Cancelled("the Python interpreter is shutting down");
    }
    nb::gil_scoped_acquire gil;
    try {
      std::vector<uint64_t> shape{in.samples};
      shape.insert(shape.end(), in.layout->field_shape.begin(), in.layout->field_shape.end());
      nb::object array = SharedToNumpy(in.data, shape, in.layout->dtype);
      nb::object result = callback_(in.chunk_index, in.sample_offset, array);
      auto out = nb::cast<nb::ndarray<nb::c_contig, nb::device::cpu>>(result);
      std::vector<uint64_t> want_shape{in.samples};
      want_shape.insert(want_shape.end(), out_field_.begin(), out_field_.end());
      const std::vector<size_t> want = NumpyDims(want_shape, out_dtype_);  // records: + a bytes axis
      bool matches = out.dtype() == ToDlpackDtype(out_dtype_) && out.ndim() == want.size();
      for (size_t i = 0; matches && i < want.size(); ++i) matches = out.shape(i) == want[i];
      if (!matches) {
        return InvalidArgument(
            "chunk transform returned an array that does not match its "
            "declared output");
      }
      if (out.nbytes() != output.size()) return InvalidArgument("chunk transform output size");
      std::memcpy(output.data(), out.data(), output.size());
      return Status::Ok();
    } catch (nb::python_error& e) {
      // The consumer gets this exception object back (bind_errors.cc), not its text.
      // Before 3.12 a fetched exception may not hold its traceback yet: give it the one
      // fetched with it, so the consumer sees the frames inside the transform.
      nb::object traceback = e.traceback();
      if (traceback.is_valid() && !traceback.is_none()) PyException_SetTraceback(e.value().ptr(), traceback.ptr());
      return InvalidArgument(Describe(e.value())).set_payload(std::make_shared<PythonErrorPayload>(e.value()));
    } catch (const std::exception& e) {
      return InvalidArgument(std::string("chunk transform: ") + e.what());
    }
  }

  std::vector<uint64_t> output_field() const override { return out_field_; }
  zarr::DataType output_dtype() const override { return out_dtype_; }

 private:
  nb::object callback_;
  std::vector<uint64_t> out_field_;
  zarr::DataType out_dtype_;
};

}  // namespace

PythonErrorPayload::PythonErrorPayload(nb::handle exception) : exception_(exception.inc_ref().ptr()) { DropReleased(); }

nb::object PythonErrorPayload::Take() const {
  PyObject* taken = std::exchange(exception_, nullptr);
  return taken == nullptr ? nb::object() : nb::steal(taken);
}

PythonErrorPayload::~PythonErrorPayload() {
  if (exception_ == nullptr || InterpreterGone()) return;  // taken; or nothing may touch it any more
  if (PyGILState_Check() != 0) {
    Py_DECREF(exception_);
    return;
  }
  std::lock_guard lock(g_released_mutex);
  g_released.push_back(exception_);
}

std::shared_ptr<const ChunkTransform> TransformFromSpec(nb::handle spec) {
  if (spec.is_none()) return nullptr;
  const std::string kind = nb::cast<std::string>(spec["kind"]);
  const std::vector<uint64_t> field = ShapeOf(spec["out_shape"]);
  const zarr::DataType dtype = DtypeOf(nb::cast<std::string>(spec["out_dtype"]));
  if (kind == "python") {
    return std::make_shared<PyChunkTransform>(nb::borrow(spec["callback"]), field, dtype);
  }
  if (kind == "scale") {
    return ValueOrThrow(engine::MakeStandardScaler(nb::cast<std::vector<double>>(spec["mean"]),
                                                   nb::cast<std::vector<double>>(spec["scale"]), field, dtype));
  }
  if (kind == "cast") {
    return ValueOrThrow(engine::MakeCast(DtypeOf(nb::cast<std::string>(spec["in_dtype"])), dtype, field));
  }
  if (kind == "affine") {
    return ValueOrThrow(engine::MakeScaleOffset(DtypeOf(nb::cast<std::string>(spec["in_dtype"])), dtype,
                                                nb::cast<double>(spec["scale"]), nb::cast<double>(spec["offset"]),
                                                field));
  }
  throw StatusException{InvalidArgument("unknown chunk transform kind '" + kind + "'")};
}

}  // namespace insitubatch::python
