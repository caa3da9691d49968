// Chunk transforms as the engine sees them: a Python callable run on decode threads with
// the GIL held only for the call, or a native one (standard scaler, cast, scale-offset),
// which never takes it.

#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <type_traits>

#include "bind_transforms.h"

namespace insitubatch::python {
namespace {

using engine::ChunkTransform;
using engine::ChunkTransformInput;

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
        return InvalidArgument("chunk transform returned an array that does not match its "
                               "declared output");
      }
      if (out.nbytes() != output.size()) return InvalidArgument("chunk transform output size");
      std::memcpy(output.data(), out.data(), output.size());
      return Status::Ok();
    } catch (nb::python_error& e) {
      // The Python side keeps the exception object and re-raises it in the consumer; the
      // message carries its token (see insitubatch/transforms.py).
      std::string message = e.what();
      e.restore();
      PyErr_Clear();
      return InvalidArgument(message);
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

// StandardScaler, natively: y = (x - mean) * scale per field element (scale = 1/(std+eps)),
// float32 or float64 in and out, no GIL. Statistics that are one number for the whole field
// (the common per-variable case) take a loop that streams only x; per-element statistics are
// converted to the chunk's type once, here, not per chunk.
class ScaleTransform final : public ChunkTransform {
 public:
  ScaleTransform(const std::vector<double>& mean, const std::vector<double>& scale,
                 std::vector<uint64_t> field, zarr::DataType dtype)
      : field_(std::move(field)), dtype_(dtype) {
    field_elements_ = 1;
    for (uint64_t e : field_) field_elements_ *= e;
    if (dtype_.id == zarr::DataTypeId::kFloat32) {
      stats32_ = {{mean.begin(), mean.end()}, {scale.begin(), scale.end()}};
    } else {
      stats64_ = {mean, scale};
    }
  }

  Status Apply(const ChunkTransformInput& in, std::span<std::byte> output) const override {
    if (in.layout->dtype.id != dtype_.id ||
        output.size() != in.samples * field_elements_ * dtype_.itemsize()) {
      return InvalidArgument("standard scaler: unexpected chunk layout");
    }
    const size_t count = in.samples * field_elements_;
    if (dtype_.id == zarr::DataTypeId::kFloat32) {
      Run(stats32_, reinterpret_cast<const float*>(in.data->data()),
              reinterpret_cast<float*>(output.data()), count, 0);
    } else {
      Run(stats64_, reinterpret_cast<const double*>(in.data->data()),
              reinterpret_cast<double*>(output.data()), count, 0);
    }
    return Status::Ok();
  }
  std::vector<uint64_t> output_field() const override { return field_; }
  zarr::DataType output_dtype() const override { return dtype_; }
  bool in_place() const override { return true; }
  bool fuses_into_decode() const override { return true; }
  void ApplyToRun(std::span<std::byte> run, uint64_t first_element) const override {
    if (dtype_.id == zarr::DataTypeId::kFloat32) {
      auto* x = reinterpret_cast<float*>(run.data());
      Run(stats32_, x, x, run.size() / sizeof(float), first_element);
    } else {
      auto* x = reinterpret_cast<double*>(run.data());
      Run(stats64_, x, x, run.size() / sizeof(double), first_element);
    }
  }

 private:
  template <typename T>
  struct Stats {
    std::vector<T> mean, scale;  // one element each, or one per field element
  };

  // Elements [first, first + count) of a chunk; per-element statistics repeat every field.
  template <typename T>
  static void Run(const Stats<T>& stats, const T* x, T* y, size_t count, uint64_t first) {
    if (stats.mean.size() == 1) {
      const T mean = stats.mean[0], scale = stats.scale[0];
      for (size_t i = 0; i < count; ++i) y[i] = (x[i] - mean) * scale;
      return;
    }
    const size_t n = stats.mean.size();
    const T* mean = stats.mean.data();
    const T* scale = stats.scale.data();
    size_t j = static_cast<size_t>(first % n);  // field element of x[0]
    for (size_t done = 0; done < count;) {
      const size_t len = std::min(count - done, n - j);
      const T* xs = x + done;
      T* ys = y + done;
      for (size_t i = 0; i < len; ++i) ys[i] = (xs[i] - mean[j + i]) * scale[j + i];
      done += len;
      j = 0;
    }
  }

  std::vector<uint64_t> field_;
  uint64_t field_elements_ = 0;
  zarr::DataType dtype_;
  Stats<float> stats32_;
  Stats<double> stats64_;
};

// Calls fn(T{}) with the C++ type of a real numeric dtype (not bool, float16 or complex).
template <typename Fn>
bool WithNumericType(zarr::DataTypeId id, Fn&& fn) {
  using Id = zarr::DataTypeId;
  switch (id) {
    case Id::kInt8: fn(int8_t{}); return true;
    case Id::kInt16: fn(int16_t{}); return true;
    case Id::kInt32: fn(int32_t{}); return true;
    case Id::kInt64: fn(int64_t{}); return true;
    case Id::kUInt8: fn(uint8_t{}); return true;
    case Id::kUInt16: fn(uint16_t{}); return true;
    case Id::kUInt32: fn(uint32_t{}); return true;
    case Id::kUInt64: fn(uint64_t{}); return true;
    case Id::kFloat32: fn(float{}); return true;
    case Id::kFloat64: fn(double{}); return true;
    default: return false;
  }
}

// Cast and ScaleOffset, natively: y = Out(x), or y = Out(x) * scale + offset computed in Out
// (a float type), one number each per array. The Python side only asks for conversions
// that are defined for every value (integer or float to float, integer widening), so no
// out-of-range float-to-integer cast can happen here. Products and sums round separately,
// as numpy's do (the extension builds with -ffp-contract=off).
class AffineCastTransform final : public ChunkTransform {
 public:
  AffineCastTransform(zarr::DataType in, zarr::DataType out, bool affine, double scale,
                      double offset, std::vector<uint64_t> field)
      : in_(in), out_(out), affine_(affine), scale_(scale), offset_(offset),
        field_(std::move(field)) {
    field_elements_ = 1;
    for (uint64_t e : field_) field_elements_ *= e;
  }

  Status Apply(const ChunkTransformInput& in, std::span<std::byte> output) const override {
    const size_t count = in.samples * field_elements_;
    if (in.layout->dtype.id != in_.id || output.size() != count * out_.itemsize() ||
        in.data->size() < count * in_.itemsize()) {
      return InvalidArgument("cast: unexpected chunk layout");
    }
    ConvertRun(in.data->data(), output.data(), count);
    return Status::Ok();
  }
  std::vector<uint64_t> output_field() const override { return field_; }
  zarr::DataType output_dtype() const override { return out_; }
  // Over the same memory only when the types match (different types of one size would
  // alias through two pointer types).
  bool in_place() const override { return in_.id == out_.id; }
  bool fuses_into_decode() const override { return affine_ && in_.id == out_.id; }
  void ApplyToRun(std::span<std::byte> run, uint64_t) const override {
    ConvertRun(run.data(), run.data(), run.size() / in_.itemsize());
  }

 private:
  void ConvertRun(const std::byte* src, std::byte* dst, size_t count) const {
    WithNumericType(in_.id, [&](auto in_type) {
      WithNumericType(out_.id, [&](auto out_type) {
        using In = decltype(in_type);
        using Out = decltype(out_type);
        const auto* x = reinterpret_cast<const In*>(src);
        auto* y = reinterpret_cast<Out*>(dst);
        if constexpr (std::is_floating_point_v<Out>) {
          if (affine_) {
            const Out scale = static_cast<Out>(scale_), offset = static_cast<Out>(offset_);
            for (size_t i = 0; i < count; ++i) y[i] = static_cast<Out>(x[i]) * scale + offset;
            return;
          }
        }
        for (size_t i = 0; i < count; ++i) y[i] = static_cast<Out>(x[i]);
      });
    });
  }

  zarr::DataType in_, out_;
  bool affine_;
  double scale_, offset_;
  std::vector<uint64_t> field_;
  uint64_t field_elements_ = 0;
};

}  // namespace

std::shared_ptr<const ChunkTransform> TransformFromSpec(nb::handle spec) {
  if (spec.is_none()) return nullptr;
  const std::string kind = nb::cast<std::string>(spec["kind"]);
  const std::vector<uint64_t> field = ShapeOf(spec["out_shape"]);
  const zarr::DataType dtype = DtypeOf(nb::cast<std::string>(spec["out_dtype"]));
  if (kind == "python") {
    return std::make_shared<PyChunkTransform>(nb::borrow(spec["callback"]), field, dtype);
  }
  if (kind == "scale") {
    auto mean = nb::cast<std::vector<double>>(spec["mean"]);
    auto scale = nb::cast<std::vector<double>>(spec["scale"]);
    uint64_t n = 1;
    for (uint64_t e : field) n *= e;
    const bool uniform = mean.size() == 1 && scale.size() == 1;
    if ((!uniform && (mean.size() != n || scale.size() != n)) ||
        (dtype.id != zarr::DataTypeId::kFloat32 && dtype.id != zarr::DataTypeId::kFloat64)) {
      throw StatusException{InvalidArgument("standard scaler: statistics do not fit the field")};
    }
    return std::make_shared<ScaleTransform>(std::move(mean), std::move(scale), field, dtype);
  }
  if (kind == "cast" || kind == "affine") {
    const zarr::DataType in = DtypeOf(nb::cast<std::string>(spec["in_dtype"]));
    const bool affine = kind == "affine";
    const bool numeric = WithNumericType(in.id, [](auto) {}) && WithNumericType(dtype.id, [](auto) {});
    if (!numeric || (affine && !dtype.is_float())) {
      throw StatusException{InvalidArgument("cast: no native conversion from " +
                                            std::string(in.name()) + " to " +
                                            std::string(dtype.name()))};
    }
    const double scale = affine ? nb::cast<double>(spec["scale"]) : 1.0;
    const double offset = affine ? nb::cast<double>(spec["offset"]) : 0.0;
    return std::make_shared<AffineCastTransform>(in, dtype, affine, scale, offset, field);
  }
  throw StatusException{InvalidArgument("unknown chunk transform kind '" + kind + "'")};
}

}  // namespace insitubatch::python
