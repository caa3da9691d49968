#include "insitubatch/zarr/dtype.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <bit>
#include <string>
#include <tuple>
#include <vector>

namespace insitubatch::zarr {
namespace {

using ::testing::HasSubstr;

struct TypeCase {
  std::string name;
  size_t itemsize;
  size_t component_size;
  bool is_float;
  bool is_complex;
  std::string little_typestr;  // NumPy typestring on a little-endian host
};

const std::vector<TypeCase>& AllTypes() {
  static const std::vector<TypeCase> types = {
      {"bool", 1, 1, false, false, "|b1"},     {"int8", 1, 1, false, false, "|i1"},
      {"int16", 2, 2, false, false, "<i2"},    {"int32", 4, 4, false, false, "<i4"},
      {"int64", 8, 8, false, false, "<i8"},    {"uint8", 1, 1, false, false, "|u1"},
      {"uint16", 2, 2, false, false, "<u2"},   {"uint32", 4, 4, false, false, "<u4"},
      {"uint64", 8, 8, false, false, "<u8"},   {"float16", 2, 2, true, false, "<f2"},
      {"float32", 4, 4, true, false, "<f4"},   {"float64", 8, 8, true, false, "<f8"},
      {"complex64", 8, 4, false, true, "<c8"}, {"complex128", 16, 8, false, true, "<c16"},
  };
  return types;
}

TEST(DataTypeTest, EveryV3NameRoundTripsWithItsProperties) {
  for (const TypeCase& t : AllTypes()) {
    auto dtype = DataType::FromV3Name(t.name);
    ASSERT_TRUE(dtype.ok()) << t.name;
    EXPECT_EQ(dtype->name(), t.name);
    EXPECT_EQ(dtype->itemsize(), t.itemsize) << t.name;
    EXPECT_EQ(dtype->component_size(), t.component_size) << t.name;
    EXPECT_EQ(dtype->is_float(), t.is_float) << t.name;
    EXPECT_EQ(dtype->is_complex(), t.is_complex) << t.name;
    if (std::endian::native == std::endian::little) {
      EXPECT_EQ(dtype->numpy_typestr(), t.little_typestr) << t.name;
    }
  }
}

TEST(DataTypeTest, UnknownV3NamesAreUnimplemented) {
  for (const char* name : {"float128", "bytes", "datetime64", "", "Float32", "int"}) {
    auto dtype = DataType::FromV3Name(name);
    ASSERT_FALSE(dtype.ok()) << name;
    EXPECT_EQ(dtype.status().code(), StatusCode::kUnimplemented);
    EXPECT_THAT(dtype.status().message(), HasSubstr("\"" + std::string(name) + "\""));
  }
}

TEST(DataTypeTest, V2TypestringsMapToTypesAndByteOrder) {
  for (const TypeCase& t : AllTypes()) {
    const std::string kind_size = t.little_typestr.substr(1);
    for (char order : {'<', '>', '|'}) {
      auto parsed = ParseV2TypeString(std::string(1, order) + kind_size);
      ASSERT_TRUE(parsed.ok()) << order << kind_size;
      EXPECT_EQ(parsed->dtype.name(), t.name);
      // Byte order only matters for multi-byte types.
      EXPECT_EQ(parsed->big_endian, order == '>' && t.itemsize > 1) << order << kind_size;
    }
  }
  auto native = ParseV2TypeString("=f8");
  ASSERT_TRUE(native.ok());
  EXPECT_EQ(native->big_endian, std::endian::native == std::endian::big);
}

TEST(DataTypeTest, DatetimeAndTimedeltaTypestringsKeepUnitAndScale) {
  for (auto [typestr, id, unit, scale, big] : {std::tuple{"<M8[ns]", DataTypeId::kDateTime64, "ns", 1u, false},
                                               std::tuple{">m8[10s]", DataTypeId::kTimeDelta64, "s", 10u, true},
                                               std::tuple{"<M8[D]", DataTypeId::kDateTime64, "D", 1u, false}}) {
    auto parsed = ParseV2TypeString(typestr);
    ASSERT_TRUE(parsed.ok()) << typestr << ": " << parsed.status().ToString();
    EXPECT_EQ(parsed->dtype.id, id);
    EXPECT_EQ(std::string(parsed->dtype.time_unit.data()), unit);
    EXPECT_EQ(parsed->dtype.time_scale, scale);
    EXPECT_EQ(parsed->big_endian, big);
    EXPECT_EQ(parsed->dtype.itemsize(), 8u);
    EXPECT_EQ(parsed->dtype.component_size(), 8u);
    std::string native = typestr;
    native[0] = std::endian::native == std::endian::little ? '<' : '>';
    EXPECT_EQ(parsed->dtype.numpy_typestr(), native);
  }
}

TEST(DataTypeTest, FixedWidthTextIsOpaqueItemsOfItsWidth) {
  for (auto [typestr, bytes, kind] :
       {std::tuple{"|S10", 10u, 'S'}, std::tuple{"<U5", 20u, 'U'}, std::tuple{">U1", 4u, 'U'}}) {
    auto parsed = ParseV2TypeString(typestr);
    ASSERT_TRUE(parsed.ok()) << typestr;
    EXPECT_EQ(parsed->dtype.id, DataTypeId::kStructured) << typestr;
    EXPECT_EQ(parsed->dtype.itemsize(), bytes) << typestr;
    EXPECT_EQ(parsed->dtype.text_kind, kind) << typestr;
    EXPECT_EQ(parsed->dtype.component_size(), 1u) << typestr;  // never swapped: numpy reads the order
  }
}

TEST(DataTypeTest, AVoidTypestringIsAnOpaqueRecord) {
  auto parsed = ParseV2TypeString("|V9");  // numpy's typestr of a 9-byte structured dtype
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->dtype.id, DataTypeId::kStructured);
  EXPECT_EQ(parsed->dtype.itemsize(), 9u);
  EXPECT_EQ(parsed->dtype.component_size(), 1u);
  EXPECT_EQ(parsed->dtype.numpy_typestr(), "|V9");
}

TEST(DataTypeTest, TensorstoresV2Bfloat16IsLittleEndianBfloat16) {
  auto parsed = ParseV2TypeString("bfloat16");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->dtype.id, DataTypeId::kBFloat16);
  EXPECT_FALSE(parsed->big_endian);
  EXPECT_EQ(ParseV2TypeString(">bfloat16").status().code(), StatusCode::kUnimplemented);
}

TEST(DataTypeTest, UnsupportedV2TypestringsAreUnimplemented) {
  for (const char* typestr : {"",        "<",
                              "<f",      "f4",
                              "<f3",     "<f16",
                              "<x4",     "<i16",
                              "<O",      "<S10",
                              "|U5",     "|S0",
                              "<M8[xs]", "|M8[ns]",
                              "<M8[0s]", "<M8[]",
                              "<m8",     "<V8",
                              "|V0",     "<f4 ",
                              "*f4",     "<f99999999999999999999999",
                              "<b2"}) {
    auto parsed = ParseV2TypeString(typestr);
    ASSERT_FALSE(parsed.ok()) << typestr;
    EXPECT_EQ(parsed.status().code(), StatusCode::kUnimplemented) << typestr;
    EXPECT_THAT(parsed.status().message(), HasSubstr("\"" + std::string(typestr) + "\""));
  }
}

}  // namespace
}  // namespace insitubatch::zarr
