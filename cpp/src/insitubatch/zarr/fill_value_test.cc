#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "insitubatch/zarr/metadata.h"

namespace insitubatch::zarr {
namespace {

using ::testing::HasSubstr;

DataType Type(DataTypeId id) { return DataType{id}; }

template <typename T>
T As(const FillValue& fill, size_t offset = 0) {
  T value;
  std::memcpy(&value, fill.bytes.data() + offset, sizeof(T));
  return value;
}

template <typename T>
T V3(const Json& json, DataTypeId id) {
  auto fill = ParseFillValueV3(json, Type(id));
  EXPECT_TRUE(fill.ok()) << json << ": " << fill.status().ToString();
  return fill.ok() ? As<T>(*fill) : T{};
}

TEST(FillValueTest, Float16RoundsToNearestEvenLikeNumPy) {
  // Expected bits from numpy.float16(value).view(uint16).
  const std::vector<std::pair<double, uint16_t>> cases = {
      {0.1, 0x2e66},
      {-0.1, 0xae66},
      {0.3333333333333333, 0x3555},
      {65504.0, 0x7bff},
      {65519.99, 0x7bff},
      {5.960464477539063e-08, 0x0001},   // smallest subnormal
      {2.9802322387695312e-08, 0x0000},  // exactly half of it: ties to even (0)
      {2.980232238769532e-08, 0x0001},   // just above half
      {8.940696716308594e-08, 0x0002},   // 1.5 units: ties to even (2)
      {6.103515625e-05, 0x0400},         // smallest normal
      {6.097555160522461e-05, 0x03ff},   // largest subnormal
      {1.0009765625, 0x3c01},
      {1.00048828125, 0x3c00},  // tie, rounds down to even
      {1.00146484375, 0x3c02},  // tie, rounds up to even
      {-0.0, 0x8000},
      {1e-10, 0x0000},
      {2049.0, 0x6800},
      {2051.0, 0x6802},
      {-65504.0, 0xfbff},
      {3.0517578125e-05, 0x0200},
      {1e-300, 0x0000},
  };
  for (const auto& [value, bits] : cases) {
    EXPECT_EQ(V3<uint16_t>(value, DataTypeId::kFloat16), bits) << value;
  }
  EXPECT_EQ(V3<uint16_t>(1, DataTypeId::kFloat16), 0x3c00);
  EXPECT_EQ(V3<uint16_t>(-2, DataTypeId::kFloat16), 0xc000);
}

TEST(FillValueTest, FloatSpecialsAndHexPatterns) {
  EXPECT_EQ(V3<uint16_t>("NaN", DataTypeId::kFloat16), 0x7e00);
  EXPECT_EQ(V3<uint16_t>("Infinity", DataTypeId::kFloat16), 0x7c00);
  EXPECT_EQ(V3<uint16_t>("-Infinity", DataTypeId::kFloat16), 0xfc00);
  EXPECT_EQ(V3<uint16_t>("0x7e01", DataTypeId::kFloat16), 0x7e01);
  EXPECT_EQ(V3<uint32_t>("NaN", DataTypeId::kFloat32), 0x7fc00000u);
  EXPECT_EQ(V3<uint32_t>("-Infinity", DataTypeId::kFloat32), 0xff800000u);
  EXPECT_EQ(V3<uint32_t>("0x7fc00001", DataTypeId::kFloat32), 0x7fc00001u);
  EXPECT_EQ(V3<uint32_t>("0xDEADBEEF", DataTypeId::kFloat32), 0xdeadbeefu);
  EXPECT_EQ(V3<uint64_t>("NaN", DataTypeId::kFloat64), 0x7ff8000000000000u);
  EXPECT_EQ(V3<uint64_t>("Infinity", DataTypeId::kFloat64), 0x7ff0000000000000u);
  EXPECT_EQ(V3<uint64_t>("0x7ff8000000000001", DataTypeId::kFloat64), 0x7ff8000000000001u);
  EXPECT_EQ(V3<double>(-1.25, DataTypeId::kFloat64), -1.25);
  EXPECT_EQ(V3<float>(1e-3, DataTypeId::kFloat32), 1e-3f);
  EXPECT_EQ(V3<double>(18446744073709551615ull, DataTypeId::kFloat64), 18446744073709551615.0);
}

TEST(FillValueTest, MalformedFloats) {
  const std::vector<std::pair<Json, DataTypeId>> bad = {
      {"nan", DataTypeId::kFloat32},          {"inf", DataTypeId::kFloat32},
      {"0x7fc0", DataTypeId::kFloat32},  // wrong width
      {"0x7fc0000000", DataTypeId::kFloat32}, {"0x7fg00000", DataTypeId::kFloat32},
      {"1.5", DataTypeId::kFloat64},          {true, DataTypeId::kFloat64},
      {nullptr, DataTypeId::kFloat64},        {Json::array({1.0}), DataTypeId::kFloat64},
      {1e39, DataTypeId::kFloat32},           {65520.0, DataTypeId::kFloat16},
      {-1e5, DataTypeId::kFloat16},           {std::numeric_limits<double>::infinity(), DataTypeId::kFloat64},
  };
  for (const auto& [json, id] : bad) {
    auto fill = ParseFillValueV3(json, Type(id));
    ASSERT_FALSE(fill.ok()) << json;
    EXPECT_EQ(fill.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(fill.status().message(), HasSubstr("fill_value"));
    EXPECT_THAT(fill.status().message(), HasSubstr(std::string(Type(id).name())));
  }
}

TEST(FillValueTest, IntegerRangesAreCheckedPerType) {
  EXPECT_EQ(V3<int8_t>(-128, DataTypeId::kInt8), -128);
  EXPECT_EQ(V3<int8_t>(127, DataTypeId::kInt8), 127);
  EXPECT_EQ(V3<uint8_t>(255, DataTypeId::kUInt8), 255);
  EXPECT_EQ(V3<int16_t>(-32768, DataTypeId::kInt16), -32768);
  EXPECT_EQ(V3<uint16_t>(65535, DataTypeId::kUInt16), 65535);
  EXPECT_EQ(V3<int32_t>(INT32_MIN, DataTypeId::kInt32), INT32_MIN);
  EXPECT_EQ(V3<uint32_t>(UINT32_MAX, DataTypeId::kUInt32), UINT32_MAX);
  EXPECT_EQ(V3<int64_t>(INT64_MIN, DataTypeId::kInt64), INT64_MIN);
  EXPECT_EQ(V3<int64_t>(INT64_MAX, DataTypeId::kInt64), INT64_MAX);
  EXPECT_EQ(V3<uint64_t>(UINT64_MAX, DataTypeId::kUInt64), UINT64_MAX);
  EXPECT_EQ(V3<int32_t>(-7.0, DataTypeId::kInt32), -7);  // integral float
  EXPECT_EQ(V3<uint64_t>(4096.0, DataTypeId::kUInt64), 4096u);

  const std::vector<std::pair<Json, DataTypeId>> out_of_range = {
      {-129, DataTypeId::kInt8},
      {128, DataTypeId::kInt8},
      {256, DataTypeId::kUInt8},
      {-1, DataTypeId::kUInt8},
      {32768, DataTypeId::kInt16},
      {65536, DataTypeId::kUInt16},
      {2147483648LL, DataTypeId::kInt32},
      {4294967296LL, DataTypeId::kUInt32},
      {9223372036854775808ull, DataTypeId::kInt64},
      {-1, DataTypeId::kUInt64},
      {9.3e18, DataTypeId::kInt64},
      {1.9e19, DataTypeId::kUInt64},
      {-1.0, DataTypeId::kUInt32},
      {300.0, DataTypeId::kUInt8},
  };
  for (const auto& [json, id] : out_of_range) {
    auto fill = ParseFillValueV3(json, Type(id));
    ASSERT_FALSE(fill.ok()) << json << " " << Type(id).name();
    EXPECT_THAT(fill.status().message(), HasSubstr("out of range for " + std::string(Type(id).name())));
  }
  for (const Json& json : {Json(1.5), Json("1"), Json(true), Json("NaN"), Json(nullptr)}) {
    auto fill = ParseFillValueV3(json, Type(DataTypeId::kInt32));
    ASSERT_FALSE(fill.ok()) << json;
    EXPECT_THAT(fill.status().message(), HasSubstr("not a valid int32"));
  }
}

TEST(FillValueTest, BoolAndComplex) {
  EXPECT_EQ(V3<uint8_t>(true, DataTypeId::kBool), 1);
  EXPECT_EQ(V3<uint8_t>(false, DataTypeId::kBool), 0);
  EXPECT_FALSE(ParseFillValueV3(1, Type(DataTypeId::kBool)).ok());

  auto c64 = ParseFillValueV3(Json::array({1.5, "-Infinity"}), Type(DataTypeId::kComplex64));
  ASSERT_TRUE(c64.ok()) << c64.status().ToString();
  EXPECT_EQ(As<float>(*c64, 0), 1.5f);
  EXPECT_EQ(As<uint32_t>(*c64, 4), 0xff800000u);
  auto c128 = ParseFillValueV3(Json::array({"0x7ff8000000000001", -2}), Type(DataTypeId::kComplex128));
  ASSERT_TRUE(c128.ok()) << c128.status().ToString();
  EXPECT_EQ(As<uint64_t>(*c128, 0), 0x7ff8000000000001u);
  EXPECT_EQ(As<double>(*c128, 8), -2.0);

  for (const Json& json :
       {Json(1.0), Json::array({1.0}), Json::array({1.0, 2.0, 3.0}), Json::array({1.0, "x"}), Json::array({1e39, 0})}) {
    auto fill = ParseFillValueV3(json, Type(DataTypeId::kComplex64));
    EXPECT_FALSE(fill.ok()) << json;
  }
}

TEST(FillValueTest, V2Conventions) {
  // null reads as zero for every dtype (zarr-python 3 returns 0 / False / 0j for missing
  // chunks of a v2 array whose fill_value is null).
  for (int id = 0; id <= static_cast<int>(DataTypeId::kComplex128); ++id) {
    auto fill = ParseFillValueV2(nullptr, Type(static_cast<DataTypeId>(id)));
    ASSERT_TRUE(fill.ok());
    EXPECT_EQ(fill->bytes, FillValue{}.bytes);
  }
  auto nan = ParseFillValueV2("NaN", Type(DataTypeId::kFloat32));
  ASSERT_TRUE(nan.ok());
  EXPECT_EQ(As<uint32_t>(*nan), 0x7fc00000u);
  auto ninf = ParseFillValueV2("-Infinity", Type(DataTypeId::kFloat64));
  ASSERT_TRUE(ninf.ok());
  EXPECT_EQ(As<double>(*ninf), -std::numeric_limits<double>::infinity());
  auto flag = ParseFillValueV2(1, Type(DataTypeId::kBool));
  ASSERT_TRUE(flag.ok());
  EXPECT_EQ(As<uint8_t>(*flag), 1);
  auto number = ParseFillValueV2(-3, Type(DataTypeId::kInt16));
  ASSERT_TRUE(number.ok());
  EXPECT_EQ(As<int16_t>(*number), -3);

  EXPECT_FALSE(ParseFillValueV2(2, Type(DataTypeId::kBool)).ok());
  EXPECT_FALSE(ParseFillValueV2("0x7fc00000", Type(DataTypeId::kFloat32)).ok());  // v3 only
  EXPECT_FALSE(ParseFillValueV2("NaN", Type(DataTypeId::kInt32)).ok());
  EXPECT_FALSE(ParseFillValueV3(nullptr, Type(DataTypeId::kInt32)).ok());  // v3: no null
}

// A unicode fill value is its text as UTF-32 (little-endian; the metadata swaps it for
// ">U"), padded with zeros; text that is not UTF-8 or does not fit is refused.
TEST(FillValueTest, UnicodeTextFills) {
  DataType u3{DataTypeId::kStructured, 12};
  u3.text_kind = 'U';
  auto fill = ParseFillValueV2("a\u00e9", u3);
  ASSERT_TRUE(fill.ok()) << fill.status().ToString();
  const std::vector<std::byte> want = {std::byte{'a'},  std::byte{0}, std::byte{0}, std::byte{0},
                                       std::byte{0xe9}, std::byte{0}, std::byte{0}, std::byte{0},
                                       std::byte{0},    std::byte{0}, std::byte{0}, std::byte{0}};
  EXPECT_EQ(fill->record, want);
  EXPECT_TRUE(ParseFillValueV3("abc", u3).ok());
  EXPECT_THAT(ParseFillValueV3("abcd", u3).status().message(), HasSubstr("longer than the type's 3 characters"));
  EXPECT_THAT(ParseFillValueV3("\xff", u3).status().message(), HasSubstr("not valid UTF-8"));
  EXPECT_THAT(ParseFillValueV3(5, u3).status().message(), HasSubstr("is not text"));
  EXPECT_EQ(ParseFillValueV2(0, u3)->record, std::vector<std::byte>(12));
}

}  // namespace
}  // namespace insitubatch::zarr
