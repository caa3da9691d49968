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

void BindTransforms(nb::module_& m) {
  nb::class_<NativeTransform>(m, "NativeTransform",
                              "A chunk transform the engine runs, built and checked in C++ (see the factories).")
      .def_ro("kind", &NativeTransform::kind)
      .def_ro("parameters", &NativeTransform::parameters)
      .def_prop_ro("out_shape", [](const NativeTransform& t) { return t.transform->output_field(); })
      .def("__repr__", [](const NativeTransform& t) { return "<NativeTransform " + t.kind + ">"; });
  // Dtypes cross as numpy typestrs in native order ("<f4", "|u1"; "bfloat16").
  m.def(
      "python_transform",
      [](nb::object callback, std::vector<uint64_t> out_shape, const std::string& out_dtype) {
        if (!PyCallable_Check(callback.ptr()))
          ThrowIfError(InvalidArgument("python_transform: callback is not callable"));
        auto transform =
            std::make_shared<PyChunkTransform>(std::move(callback), std::move(out_shape), DtypeOf(out_dtype));
        return NativeTransform{std::move(transform), "python", 0};
      },
      nb::arg("callback"), nb::arg("out_shape"), nb::arg("out_dtype"),
      "Runs callback(chunk_index, sample_offset, array) -> array of out_shape x out_dtype per chunk, with the GIL.");
  m.def(
      "standard_scaler",
      [](std::vector<double> mean, std::vector<double> scale, std::vector<uint64_t> field, const std::string& dtype) {
        const size_t n = mean.size();
        return NativeTransform{ValueOrThrow(engine::MakeStandardScaler(std::move(mean), std::move(scale),
                                                                       std::move(field), DtypeOf(dtype))),
                               "scale", n};
      },
      nb::arg("mean"), nb::arg("scale"), nb::arg("field"), nb::arg("dtype"),
      "(x - mean) * scale, natively (one value each, or one per element of the field).");
  m.def(
      "cast_transform",
      [](const std::string& in_dtype, const std::string& out_dtype, std::vector<uint64_t> field) {
        return NativeTransform{ValueOrThrow(engine::MakeCast(DtypeOf(in_dtype), DtypeOf(out_dtype), std::move(field))),
                               "cast", 0};
      },
      nb::arg("in_dtype"), nb::arg("out_dtype"), nb::arg("field"), "A dtype conversion, natively.");
  m.def(
      "scale_offset_transform",
      [](const std::string& in_dtype, const std::string& out_dtype, double scale, double offset,
         std::vector<uint64_t> field) {
        return NativeTransform{ValueOrThrow(engine::MakeScaleOffset(DtypeOf(in_dtype), DtypeOf(out_dtype), scale,
                                                                    offset, std::move(field))),
                               "affine", 1};
      },
      nb::arg("in_dtype"), nb::arg("out_dtype"), nb::arg("scale"), nb::arg("offset"), nb::arg("field"),
      "x.astype(out) * scale + offset, each rounding in out as numpy does, natively.");
}

}  // namespace insitubatch::python
