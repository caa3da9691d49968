#include <gtest/gtest.h>

#include <bit>

#include "insitubatch/zarr/codec/byte_swap.h"
#include "insitubatch/zarr/codec/codec_test_util.h"

namespace insitubatch::zarr {
namespace {

using testing::AsBytes;
using testing::ExpectRoundTrip;
using testing::FieldBytes;
using testing::MakeChain;
using testing::MakeRepr;

std::shared_ptr<const ArrayToBytesCodec> Bytes(const Json& config, const ArrayRepr& repr) {
  auto codec = BuiltinCodecRegistry().Create(CodecSpec{"bytes", config}, repr);
  EXPECT_TRUE(codec.ok()) << codec.status().ToString();
  return std::get<std::shared_ptr<const ArrayToBytesCodec>>(*codec);
}

TEST(BytesCodecTest, RoundTripsEveryDtypeInBothByteOrders) {
  for (const char* dtype : {"bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float16",
                            "float32", "float64", "complex64", "complex128"}) {
    for (const char* endian : {"little", "big"}) {
      const ArrayRepr repr = MakeRepr(dtype, {3, 5, 7});
      std::vector<std::byte> data = FieldBytes(repr.nbytes(), 7);
      if (std::string(dtype) == "bool") {
        for (auto& b : data) b = std::byte(static_cast<uint8_t>(b) & 1);
      }
      ExpectRoundTrip(Json::parse(R"([{"name":"bytes","configuration":{"endian":")" + std::string(endian) + "\"}}]"),
                      repr, data);
    }
  }
}

TEST(BytesCodecTest, BigEndianStoresMostSignificantByteFirst) {
  const ArrayRepr repr = MakeRepr("int32", {2});
  const std::vector<std::byte> stored = {std::byte{0x01}, std::byte{0x02}, std::byte{0x03}, std::byte{0x04},
                                         std::byte{0xFF}, std::byte{0xFF}, std::byte{0xFF}, std::byte{0xFE}};
  auto chain = MakeChain(Json::parse(R"([{"name":"bytes","configuration":{"endian":"big"}}])"), repr);
  ASSERT_TRUE(chain.ok());
  int32_t values[2];
  ASSERT_TRUE(chain->DecodeInto(AsBytes(stored), {reinterpret_cast<std::byte*>(values), 8}).ok());
  EXPECT_EQ(values[0], 0x01020304);
  EXPECT_EQ(values[1], -2);
}

TEST(BytesCodecTest, ComplexSwapsEachHalf) {
  const ArrayRepr repr = MakeRepr("complex64", {1});
  const float parts[2] = {1.5f, -2.25f};
  uint32_t re, im;
  std::memcpy(&re, &parts[0], 4);
  std::memcpy(&im, &parts[1], 4);
  re = __builtin_bswap32(re);
  im = __builtin_bswap32(im);
  std::vector<std::byte> stored(8);
  std::memcpy(stored.data(), &re, 4);
  std::memcpy(stored.data() + 4, &im, 4);
  auto codec = Bytes({{"endian", "big"}}, repr);
  float out[2];
  ASSERT_TRUE(codec->DecodeInto(AsBytes(stored), repr, {reinterpret_cast<std::byte*>(out), 8}).ok());
  EXPECT_EQ(out[0], 1.5f);
  EXPECT_EQ(out[1], -2.25f);
}

TEST(BytesCodecTest, IdentityOnlyInNativeOrder) {
  const bool little = std::endian::native == std::endian::little;
  const ArrayRepr f4 = MakeRepr("float32", {4, 4});
  const ArrayRepr u1 = MakeRepr("uint8", {4, 4});
  auto native = Bytes({{"endian", little ? "little" : "big"}}, f4);
  auto foreign = Bytes({{"endian", little ? "big" : "little"}}, f4);
  EXPECT_TRUE(native->is_identity(f4));
  EXPECT_FALSE(foreign->is_identity(f4));
  EXPECT_TRUE(foreign->is_identity(u1));  // one-byte types have no byte order
  EXPECT_EQ(native->FixedEncodedSize(f4), 64u);
  EXPECT_EQ(foreign->FixedEncodedSize(f4), 64u);
}

TEST(BytesCodecTest, FixByteOrderInPlaceSwapsOnlyForeignOrder) {
  const bool little = std::endian::native == std::endian::little;
  const ArrayRepr repr = MakeRepr("uint16", {3});
  uint16_t data[3] = {0x0102, 0x0304, 0xA0B0};
  MutableByteSpan span(reinterpret_cast<std::byte*>(data), 6);
  Bytes({{"endian", little ? "little" : "big"}}, repr)->FixByteOrderInPlace(span, repr);
  EXPECT_EQ(data[0], 0x0102);
  Bytes({{"endian", little ? "big" : "little"}}, repr)->FixByteOrderInPlace(span, repr);
  EXPECT_EQ(data[0], 0x0201);
  EXPECT_EQ(data[1], 0x0403);
  EXPECT_EQ(data[2], 0xB0A0);
}

TEST(BytesCodecTest, WrongEncodedSizeIsDataLoss) {
  const ArrayRepr repr = MakeRepr("float64", {4});
  for (const char* endian : {"little", "big"}) {
    auto codec = Bytes({{"endian", endian}}, repr);
    std::vector<std::byte> out(32);
    std::vector<std::byte> short_in(31), long_in(33), empty;
    EXPECT_DATA_LOSS(codec->DecodeInto(AsBytes(short_in), repr, AsBytes(out)), "chunk holds 31 bytes, expected 32");
    EXPECT_DATA_LOSS(codec->DecodeInto(AsBytes(long_in), repr, AsBytes(out)), "33 bytes");
    EXPECT_DATA_LOSS(codec->DecodeInto(AsBytes(empty), repr, AsBytes(out)), "0 bytes");
  }
}

TEST(BytesCodecTest, ValidatesConfiguration) {
  const CodecRegistry& r = BuiltinCodecRegistry();
  const ArrayRepr f4 = MakeRepr("float32", {2});
  const ArrayRepr u1 = MakeRepr("uint8", {2});
  EXPECT_EQ(r.Create({"bytes", Json::object()}, f4).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(r.Create({"bytes", Json::object()}, u1).ok());
  EXPECT_TRUE(r.Create({"bytes", Json()}, u1).ok());
  auto bad = r.Create({"bytes", {{"endian", "middle"}}}, f4);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("\"middle\""), std::string::npos);
  EXPECT_NE(bad.status().message().find("codec \"bytes\""), std::string::npos);
  EXPECT_EQ(r.Create({"bytes", {{"endian", 1}}}, f4).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.Create({"bytes", Json::array()}, f4).status().code(), StatusCode::kInvalidArgument);
}

// Every width is reversed, the ones without a fast path too, into a copy and in place.
TEST(BytesCodecTest, SwapBytesReversesEveryWidth) {
  for (size_t width = 1; width <= 17; ++width) {
    const std::vector<std::byte> src = FieldBytes(3 * width, static_cast<uint32_t>(width));
    std::vector<std::byte> want(src.size());
    for (size_t i = 0; i < 3; ++i) {
      for (size_t b = 0; b < width; ++b) want[i * width + b] = src[i * width + (width - 1 - b)];
    }
    std::vector<std::byte> out(src.size(), std::byte{0xA5});
    internal_codec::SwapBytes(src.data(), out.data(), 3, width);
    EXPECT_EQ(out, want) << "width " << width;
    std::vector<std::byte> in_place = src;
    internal_codec::SwapBytes(in_place.data(), in_place.data(), 3, width);
    EXPECT_EQ(in_place, want) << "in place, width " << width;
  }
}

}  // namespace
}  // namespace insitubatch::zarr
