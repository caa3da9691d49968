#include "insitubatch/engine/native_transforms.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace insitubatch::engine {
namespace {

using zarr::DataType;
using zarr::DataTypeId;

template <typename T>
std::shared_ptr<Buffer> BufferOf(const std::vector<T>& values) {
  auto buffer = std::make_shared<Buffer>(Buffer::CopyOf(std::as_bytes(std::span(values))).value());
  return buffer;
}

// Applies `t` to `samples` rows of `in` (field `field`, dtype `dtype`), out of place.
template <typename Out, typename In>
std::vector<Out> Apply(const ChunkTransform& t, const std::vector<In>& in, uint64_t samples,
                       std::vector<uint64_t> field, DataType dtype) {
  SlotLayout layout;
  layout.field_shape = std::move(field);
  layout.dtype = dtype;
  ChunkTransformInput input;
  input.samples = samples;
  input.data = BufferOf(in);
  input.layout = &layout;
  std::vector<Out> out(in.size());
  EXPECT_TRUE(t.Apply(input, std::as_writable_bytes(std::span(out))).ok());
  return out;
}

TEST(NativeTransformsTest, AScalerWithOneNumberPerFieldStandardisesEveryElement) {
  auto t = MakeStandardScaler({2.0}, {0.5}, {3}, DataType{DataTypeId::kFloat32}).value();
  EXPECT_TRUE(t->in_place() && t->fuses_into_decode());
  const std::vector<float> x = {2, 4, 6, 0, -2, 10};
  EXPECT_EQ((Apply<float>(*t, x, 2, {3}, DataType{DataTypeId::kFloat32})), (std::vector<float>{0, 1, 2, -1, -2, 4}));
}

TEST(NativeTransformsTest, PerElementStatisticsRepeatEveryFieldEvenFromMidChunkRuns) {
  // Two field elements with their own statistics; a fused run may start on the second.
  auto t = MakeStandardScaler({1.0, 10.0}, {1.0, 0.1}, {2}, DataType{DataTypeId::kFloat64}).value();
  const std::vector<double> x = {1, 10, 3, 30, 5, 50};
  EXPECT_EQ((Apply<double>(*t, x, 3, {2}, DataType{DataTypeId::kFloat64})), (std::vector<double>{0, 0, 2, 2, 4, 4}));
  std::vector<double> run = {30, 5, 50};  // elements 3, 4, 5 of the chunk
  t->ApplyToRun(std::as_writable_bytes(std::span(run)), 3);
  EXPECT_EQ(run, (std::vector<double>{2, 4, 4}));
}

TEST(NativeTransformsTest, AScalerRefusesStatisticsThatDoNotFitAndIntegerData) {
  EXPECT_FALSE(MakeStandardScaler({1, 2}, {1, 2}, {3}, DataType{DataTypeId::kFloat32}).ok());
  EXPECT_FALSE(MakeStandardScaler({1, 2, 3}, {1}, {3}, DataType{DataTypeId::kFloat32}).ok());
  auto ints = MakeStandardScaler({0}, {1}, {1}, DataType{DataTypeId::kInt32});
  ASSERT_FALSE(ints.ok());
  EXPECT_NE(ints.status().message().find("float32 or float64"), std::string::npos);
}

TEST(NativeTransformsTest, AMismatchedChunkLayoutIsAnErrorNotAnOverrun) {
  auto t = MakeStandardScaler({0}, {1}, {3}, DataType{DataTypeId::kFloat32}).value();
  SlotLayout layout;
  layout.field_shape = {3};
  layout.dtype = DataType{DataTypeId::kFloat32};
  ChunkTransformInput input;
  input.samples = 2;
  input.data = BufferOf(std::vector<float>(6));
  input.layout = &layout;
  std::vector<float> small(5);
  EXPECT_FALSE(t->Apply(input, std::as_writable_bytes(std::span(small))).ok());
  // An input smaller than the scaler's field (two samples of 2, not of 3): refused, not
  // read past its end.
  input.data = BufferOf(std::vector<float>{1, 2, 3, 4});
  std::vector<float> out(6);
  EXPECT_EQ(t->Apply(input, std::as_writable_bytes(std::span(out))).code(), StatusCode::kInvalidArgument);
}

TEST(NativeTransformsTest, CastsWidenIntegersAndConvertToFloatExactly) {
  auto t = MakeCast(DataType{DataTypeId::kInt16}, DataType{DataTypeId::kFloat32}, {}).value();
  EXPECT_FALSE(t->in_place());
  EXPECT_EQ((Apply<float>(*t, std::vector<int16_t>{-32768, -1, 0, 32767}, 4, {}, DataType{DataTypeId::kInt16})),
            (std::vector<float>{-32768, -1, 0, 32767}));
  auto widen = MakeCast(DataType{DataTypeId::kUInt8}, DataType{DataTypeId::kInt64}, {}).value();
  EXPECT_EQ((Apply<int64_t>(*widen, std::vector<uint8_t>{0, 255}, 2, {}, DataType{DataTypeId::kUInt8})),
            (std::vector<int64_t>{0, 255}));
}

TEST(NativeTransformsTest, ScaleOffsetRoundsTheProductAndTheSumSeparatelyAsNumpyDoes) {
  auto t = MakeScaleOffset(DataType{DataTypeId::kUInt16}, DataType{DataTypeId::kFloat32}, 0.1, 273.15, {}).value();
  const std::vector<uint16_t> x = {0, 1, 12345, 65535};
  const auto y = Apply<float>(*t, x, 4, {}, DataType{DataTypeId::kUInt16});
  for (size_t i = 0; i < x.size(); ++i) {
    volatile float product = static_cast<float>(x[i]) * 0.1f;  // volatile: no fused multiply-add
    EXPECT_EQ(y[i], product + 273.15f) << i;
  }
  auto same = MakeScaleOffset(DataType{DataTypeId::kFloat64}, DataType{DataTypeId::kFloat64}, 2.0, 1.0, {}).value();
  EXPECT_TRUE(same->in_place() && same->fuses_into_decode());
}

TEST(NativeTransformsTest, TypesWithoutANativeConversionAreRefusedByName) {
  auto to_int = MakeScaleOffset(DataType{DataTypeId::kFloat32}, DataType{DataTypeId::kInt32}, 1, 0, {});
  ASSERT_FALSE(to_int.ok());
  EXPECT_NE(to_int.status().message().find("scale-offset"), std::string::npos);
  EXPECT_FALSE(MakeCast(DataType{DataTypeId::kBool}, DataType{DataTypeId::kFloat32}, {}).ok());
  EXPECT_FALSE(MakeCast(DataType{DataTypeId::kComplex64}, DataType{DataTypeId::kFloat32}, {}).ok());
  EXPECT_FALSE(MakeCast(DataType{DataTypeId::kFloat16}, DataType{DataTypeId::kFloat32}, {}).ok());
}

}  // namespace
}  // namespace insitubatch::engine
