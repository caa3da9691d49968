#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

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

const char* DtypeOfSize(size_t itemsize) {
  switch (itemsize) {
    case 1:
      return "uint8";
    case 2:
      return "int16";
    case 4:
      return "float32";
    case 8:
      return "float64";
    default:
      return "complex128";
  }
}

TEST(TransposeCodecTest, MatchesNaiveTransposeForManyShapesAndOrders) {
  std::mt19937 rng(5);
  int checked = 0;
  for (size_t ndim = 1; ndim <= 5; ++ndim) {
    for (int trial = 0; trial < 12; ++trial) {
      std::vector<uint64_t> shape(ndim);
      for (auto& e : shape) e = 1 + rng() % (ndim <= 2 ? 70 : 9);
      std::vector<size_t> order(ndim);
      std::iota(order.begin(), order.end(), size_t{0});
      std::shuffle(order.begin(), order.end(), rng);
      for (size_t itemsize : {1, 2, 4, 8, 16}) {
        const ArrayRepr repr = MakeRepr(DtypeOfSize(itemsize), shape);
        const std::vector<std::byte> decoded = FieldBytes(repr.nbytes(), trial + 1);
        const std::vector<std::byte> expected = NaiveTranspose(decoded, shape, order, itemsize);
        auto codec = Transpose(Json(order), repr);
        ASSERT_NE(codec, nullptr);
        auto encoded = codec->Encode(AsBytes(decoded), repr);
        ASSERT_TRUE(encoded.ok());
        ASSERT_TRUE(std::equal(expected.begin(), expected.end(), encoded->data()))
            << "encode mismatch, order " << Json(order).dump() << " shape " << Json(shape).dump() << " itemsize "
            << itemsize;
        std::vector<std::byte> back(decoded.size());
        ASSERT_TRUE(codec->DecodeInto(encoded->span(), repr, AsBytes(back)).ok());
        ASSERT_TRUE(back == decoded) << "decode mismatch, order " << Json(order).dump();
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 5 * 12 * 5);
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
