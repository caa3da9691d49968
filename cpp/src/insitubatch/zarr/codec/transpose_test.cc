#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <string>

#include "insitubatch/zarr/codec/codec_test_util.h"

namespace insitubatch::zarr {
namespace {

using testing::AsBytes;
using testing::FieldBytes;
using testing::MakeChain;
using testing::MakeRepr;

std::shared_ptr<const ArrayToArrayCodec> Transpose(const Json& order, const ArrayRepr& repr) {
  auto codec = BuiltinCodecRegistry().Create(CodecSpec{"transpose", {{"order", order}}}, repr);
  EXPECT_TRUE(codec.ok()) << codec.status().ToString();
  if (!codec.ok()) return nullptr;
  return std::get<std::shared_ptr<const ArrayToArrayCodec>>(*codec);
}

// numpy.transpose(decoded, order) element by element: the oracle for the strided kernel.
std::vector<std::byte> NaiveTranspose(const std::vector<std::byte>& decoded, const std::vector<uint64_t>& shape,
                                      const std::vector<size_t>& order, size_t itemsize) {
  const size_t ndim = shape.size();
  std::vector<uint64_t> strides(ndim, 1);
  for (size_t i = ndim; i-- > 1;) strides[i - 1] = strides[i] * shape[i];
  std::vector<uint64_t> enc_shape(ndim);
  for (size_t i = 0; i < ndim; ++i) enc_shape[i] = shape[order[i]];
  std::vector<std::byte> out(decoded.size());
  std::vector<uint64_t> idx(ndim, 0);  // encoded index
  for (size_t e = 0; e < decoded.size() / itemsize; ++e) {
    uint64_t src = 0;
    for (size_t i = 0; i < ndim; ++i) src += idx[i] * strides[order[i]];
    std::memcpy(out.data() + e * itemsize, decoded.data() + src * itemsize, itemsize);
    for (size_t i = ndim; i-- > 0;) {
      if (++idx[i] < enc_shape[i]) break;
      idx[i] = 0;
    }
  }
  return out;
}

// A representation with items of `itemsize` bytes: a numeric type for the sizes that have
// one, else opaque records (fixed-width text and odd-size records take that path).
ArrayRepr ReprOfItemSize(size_t itemsize, std::vector<uint64_t> shape) {
  switch (itemsize) {
    case 1:
      return MakeRepr("uint8", std::move(shape));
    case 2:
      return MakeRepr("int16", std::move(shape));
    case 4:
      return MakeRepr("float32", std::move(shape));
    case 8:
      return MakeRepr("float64", std::move(shape));
    default: {
      ArrayRepr repr;
      repr.dtype = DataType{DataTypeId::kStructured};
      repr.dtype.record_size = static_cast<uint32_t>(itemsize);
      repr.shape = std::move(shape);
      return repr;
    }
  }
}

// Every item size from 1 to 40 bytes (the specialised and the generic copies), 1-5
// dimensions, random orders, against an element-by-element transpose.
TEST(TransposeCodecTest, MatchesNaiveTransposeForEveryItemSizeShapeAndOrder) {
  std::mt19937 rng(5);
  int checked = 0;
  for (size_t ndim = 1; ndim <= 5; ++ndim) {
    for (int trial = 0; trial < 6; ++trial) {
      std::vector<uint64_t> shape(ndim);
      for (auto& e : shape) e = 1 + rng() % (ndim <= 2 ? 70 : 9);
      std::vector<size_t> order(ndim);
      std::iota(order.begin(), order.end(), size_t{0});
      std::shuffle(order.begin(), order.end(), rng);
      for (size_t itemsize = 1; itemsize <= 40; ++itemsize) {
        const ArrayRepr repr = ReprOfItemSize(itemsize, shape);
        ASSERT_EQ(repr.dtype.itemsize(), itemsize);
        const std::vector<std::byte> decoded = FieldBytes(repr.nbytes(), trial + 1);
        const std::vector<std::byte> expected = NaiveTranspose(decoded, shape, order, itemsize);
        auto codec = Transpose(Json(order), repr);
        ASSERT_NE(codec, nullptr);
        auto encoded = codec->Encode(AsBytes(decoded), repr);
        ASSERT_TRUE(encoded.ok());
        ASSERT_TRUE(std::equal(expected.begin(), expected.end(), encoded->data()))
            << "encode mismatch, order " << Json(order).dump() << " shape " << Json(shape).dump() << " itemsize "
            << itemsize;
        // The output starts as a pattern no element holds, so an unwritten byte fails.
        std::vector<std::byte> back(decoded.size(), std::byte{0xA5});
        ASSERT_TRUE(codec->DecodeInto(encoded->span(), repr, AsBytes(back)).ok());
        ASSERT_TRUE(back == decoded) << "decode mismatch, order " << Json(order).dump() << " itemsize " << itemsize;
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 5 * 6 * 40);
}

// The reproduction from the field: a (5, 2) chunk of "S3" stored in order F.
TEST(TransposeCodecTest, OddItemSizeTwoDimensionalFOrder) {
  const ArrayRepr repr = ReprOfItemSize(3, {5, 2});
  const std::string c_order = "abcdefghijklmnopqrstuvwxyz0123";  // 10 items of 3 bytes, C order
  std::vector<std::byte> decoded(30);
  std::memcpy(decoded.data(), c_order.data(), 30);
  auto codec = Transpose("F", repr);
  ASSERT_NE(codec, nullptr);
  const std::vector<std::byte> encoded = NaiveTranspose(decoded, repr.shape, {1, 0}, 3);
  std::vector<std::byte> back(30, std::byte{0xA5});
  ASSERT_TRUE(codec->DecodeInto(AsBytes(encoded), repr, AsBytes(back)).ok());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(back.data()), 30), c_order);
}

TEST(TransposeCodecTest, LargeTwoDimensionalTransposeUsesTiles) {
  const ArrayRepr repr = MakeRepr("float32", {300, 257});
  const std::vector<std::byte> decoded = FieldBytes(repr.nbytes(), 3);
  auto codec = Transpose(Json::array({1, 0}), repr);
  auto encoded = codec->Encode(AsBytes(decoded), repr);
  ASSERT_TRUE(encoded.ok());
  const auto expected = NaiveTranspose(decoded, repr.shape, {1, 0}, 4);
  EXPECT_TRUE(std::equal(expected.begin(), expected.end(), encoded->data()));
}

TEST(TransposeCodecTest, EncodedReprPermutesShape) {
  const ArrayRepr repr = MakeRepr("int32", {2, 3, 4});
  auto codec = Transpose(Json::array({2, 0, 1}), repr);
  auto encoded = codec->EncodedRepr(repr);
  ASSERT_TRUE(encoded.ok());
  EXPECT_EQ(encoded->shape, (std::vector<uint64_t>{4, 2, 3}));
  EXPECT_EQ(encoded->dtype, repr.dtype);
}

TEST(TransposeCodecTest, AcceptsCAndFStrings) {
  const ArrayRepr repr = MakeRepr("int32", {2, 3, 4});
  auto c = BuiltinCodecRegistry().Create({"transpose", {{"order", "C"}}}, repr);
  auto f = BuiltinCodecRegistry().Create({"transpose", {{"order", "F"}}}, repr);
  ASSERT_TRUE(c.ok() && f.ok());
  auto fr = std::get<std::shared_ptr<const ArrayToArrayCodec>>(*f)->EncodedRepr(repr);
  EXPECT_EQ(fr->shape, (std::vector<uint64_t>{4, 3, 2}));
}

TEST(TransposeCodecTest, RejectsInvalidOrders) {
  const ArrayRepr repr = MakeRepr("int32", {2, 3, 4});
  for (const char* order :
       {"[0, 1]", "[0, 1, 1]", "[0, 1, 3]", "[-1, 0, 1]", "[0, 1, 2, 3]", "\"X\"", "[0.5, 1, 2]", "null"}) {
    auto codec = BuiltinCodecRegistry().Create({"transpose", {{"order", Json::parse(order)}}}, repr);
    EXPECT_EQ(codec.status().code(), StatusCode::kInvalidArgument) << order;
  }
  EXPECT_EQ(BuiltinCodecRegistry().Create({"transpose", Json::object()}, repr).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(TransposeCodecTest, SizeMismatchIsDataLoss) {
  const ArrayRepr repr = MakeRepr("int16", {4, 5});
  auto codec = Transpose(Json::array({1, 0}), repr);
  std::vector<std::byte> in(39), out(40);
  EXPECT_DATA_LOSS(codec->DecodeInto(AsBytes(in), repr, AsBytes(out)), "39 bytes");
  std::vector<std::byte> small_out(20), ok_in(40);
  EXPECT_EQ(codec->DecodeInto(AsBytes(ok_in), repr, AsBytes(small_out)).code(), StatusCode::kInvalidArgument);
  const ArrayRepr other_rank = MakeRepr("int16", {40});
  EXPECT_EQ(codec->DecodeInto(AsBytes(ok_in), other_rank, AsBytes(out)).code(), StatusCode::kInvalidArgument);
}

TEST(TransposeCodecTest, OverflowingShapeIsRejected) {
  const ArrayRepr repr = MakeRepr("float64", {uint64_t{1} << 40, uint64_t{1} << 30});
  auto codec = Transpose(Json::array({1, 0}), repr);
  std::vector<std::byte> in(64), out(64);
  EXPECT_EQ(codec->DecodeInto(AsBytes(in), repr, AsBytes(out)).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace insitubatch::zarr
