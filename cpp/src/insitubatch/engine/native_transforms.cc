#include "insitubatch/engine/native_transforms.h"

#include <algorithm>
#include <string>
#include <type_traits>

namespace insitubatch::engine {
namespace {

// StandardScaler: y = (x - mean) * scale per field element (scale = 1/(std+eps)), float32
// or float64 in and out. Statistics that are one number for the whole field
// (the common per-variable case) take a loop that streams only x; per-element statistics are
// converted to the chunk's type once, here, not per chunk.
class ScaleTransform final : public ChunkTransform {
 public:
  ScaleTransform(const std::vector<double>& mean, const std::vector<double>& scale, std::vector<uint64_t> field,
                 zarr::DataType dtype)
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
    const size_t count = in.samples * field_elements_;
    // The input must hold every element read (a larger field would read past it).
    if (in.layout->dtype.id != dtype_.id || output.size() != count * dtype_.itemsize() ||
        in.data->size() < count * dtype_.itemsize()) {
      return InvalidArgument("standard scaler: unexpected chunk layout");
    }
    if (dtype_.id == zarr::DataTypeId::kFloat32) {
      Run(stats32_, reinterpret_cast<const float*>(in.data->data()), reinterpret_cast<float*>(output.data()), count, 0);
    } else {
      Run(stats64_, reinterpret_cast<const double*>(in.data->data()), reinterpret_cast<double*>(output.data()), count,
          0);
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
    case Id::kInt8:
      fn(int8_t{});
      return true;
    case Id::kInt16:
      fn(int16_t{});
      return true;
    case Id::kInt32:
      fn(int32_t{});
      return true;
    case Id::kInt64:
      fn(int64_t{});
      return true;
    case Id::kUInt8:
      fn(uint8_t{});
      return true;
    case Id::kUInt16:
      fn(uint16_t{});
      return true;
    case Id::kUInt32:
      fn(uint32_t{});
      return true;
    case Id::kUInt64:
      fn(uint64_t{});
      return true;
    case Id::kFloat32:
      fn(float{});
      return true;
    case Id::kFloat64:
      fn(double{});
      return true;
    default:
      return false;
  }
}

// Cast and ScaleOffset: y = Out(x), or y = Out(x) * scale + offset computed in Out (a float
// type), one number each per array. The Python side only asks for conversions that are
// defined for every value (integer or float to float, integer widening), so no
// out-of-range float-to-integer cast happens here. Products and sums round separately, as
// numpy's do (the build uses -ffp-contract=off).
class AffineCastTransform final : public ChunkTransform {
 public:
  AffineCastTransform(zarr::DataType in, zarr::DataType out, bool affine, double scale, double offset,
                      std::vector<uint64_t> field)
      : in_(in), out_(out), affine_(affine), scale_(scale), offset_(offset), field_(std::move(field)) {
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

Result<std::shared_ptr<const ChunkTransform>> MakeStandardScaler(std::vector<double> mean, std::vector<double> scale,
                                                                 std::vector<uint64_t> field, zarr::DataType dtype) {
  uint64_t n = 1;
  for (uint64_t e : field) n *= e;
  const bool uniform = mean.size() == 1 && scale.size() == 1;
  if (!uniform && (mean.size() != n || scale.size() != n)) {
    return InvalidArgument("standard scaler: " + std::to_string(mean.size()) + " means and " +
                           std::to_string(scale.size()) + " scales for a field of " + std::to_string(n) +
                           " elements (one each, or one per element)");
  }
  if (dtype.id != zarr::DataTypeId::kFloat32 && dtype.id != zarr::DataTypeId::kFloat64) {
    return InvalidArgument("standard scaler: float32 or float64 data, got " + std::string(dtype.name()));
  }
  return std::shared_ptr<const ChunkTransform>(std::make_shared<ScaleTransform>(mean, scale, std::move(field), dtype));
}

namespace {

Result<std::shared_ptr<const ChunkTransform>> MakeAffineCast(zarr::DataType in, zarr::DataType out, bool affine,
                                                             double scale, double offset, std::vector<uint64_t> field) {
  const bool numeric = WithNumericType(in.id, [](auto) {}) && WithNumericType(out.id, [](auto) {});
  if (!numeric || (affine && !out.is_float())) {
    return InvalidArgument(std::string(affine ? "scale-offset" : "cast") + ": no native conversion from " +
                           std::string(in.name()) + " to " + std::string(out.name()));
  }
  return std::shared_ptr<const ChunkTransform>(
      std::make_shared<AffineCastTransform>(in, out, affine, scale, offset, std::move(field)));
}

}  // namespace

Result<std::shared_ptr<const ChunkTransform>> MakeCast(zarr::DataType in, zarr::DataType out,
                                                       std::vector<uint64_t> field) {
  return MakeAffineCast(in, out, false, 1.0, 0.0, std::move(field));
}

Result<std::shared_ptr<const ChunkTransform>> MakeScaleOffset(zarr::DataType in, zarr::DataType out, double scale,
                                                              double offset, std::vector<uint64_t> field) {
  return MakeAffineCast(in, out, true, scale, offset, std::move(field));
}

}  // namespace insitubatch::engine
