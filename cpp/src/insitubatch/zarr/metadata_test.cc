#include "insitubatch/zarr/metadata.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "insitubatch/util/text.h"

namespace insitubatch::zarr {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;
using ::testing::Not;

const std::string kMetadataDir = std::string(INSITU_TESTDATA_DIR) + "/metadata/";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

bool FileExists(const std::string& path) { return std::ifstream(path).good(); }

Json LoadJson(const std::string& path) {
  auto parsed = ParseJson(ReadFile(path), path);
  EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
  return parsed.ok() ? *parsed : Json();
}

// ---------------------------------------------------------------------------------------
// Documents written by zarr-python 3 (cpp/testdata/metadata/generate.py), checked against
// what zarr-python itself reports for each array (expected.json).

std::vector<Json> LoadCases() {
  Json expected = LoadJson(kMetadataDir + "expected.json");
  std::vector<Json> cases;
  if (expected.is_object()) {
    for (const Json& c : expected["arrays"]) cases.push_back(c);
  }
  return cases;
}

std::string CaseName(const testing::TestParamInfo<Json>& info) {
  std::string name = info.param["dir"].get<std::string>();
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

// The expected fill bytes are little endian; swap each component on a big-endian host.
std::vector<std::byte> ExpectedFillBytes(const std::string& hex, DataType dtype) {
  std::vector<std::byte> bytes;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    bytes.push_back(static_cast<std::byte>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  if (std::endian::native == std::endian::big) {
    const size_t part = dtype.component_size();
    for (size_t i = 0; i < bytes.size(); i += part) {
      std::reverse(bytes.begin() + i, bytes.begin() + i + part);
    }
  }
  return bytes;
}

class ZarrPythonDocumentTest : public testing::TestWithParam<Json> {};

TEST_P(ZarrPythonDocumentTest, ParsesExactlyWhatZarrPythonReports) {
  const Json& expected = GetParam();
  const std::string dir = kMetadataDir + expected["dir"].get<std::string>() + "/";
  Result<ArrayMetadata> parsed = InvalidArgument("unparsed");
  if (expected["zarr_format"] == 3) {
    parsed = ParseArrayMetadataV3(LoadJson(dir + "zarr.json"), dir + "zarr.json");
  } else {
    Json zattrs;
    if (FileExists(dir + ".zattrs")) zattrs = LoadJson(dir + ".zattrs");
    parsed = ParseArrayMetadataV2(LoadJson(dir + ".zarray"), zattrs, dir + ".zarray");
  }
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  const ArrayMetadata& md = *parsed;

  EXPECT_EQ(md.zarr_format, expected["zarr_format"].get<int>());
  EXPECT_EQ(md.shape, expected["shape"].get<std::vector<uint64_t>>());
  EXPECT_EQ(md.chunk_shape, expected["chunk_shape"].get<std::vector<uint64_t>>());
  EXPECT_EQ(md.dtype.name(), expected["dtype"].get<std::string>());

  const std::vector<std::byte> fill = ExpectedFillBytes(expected["fill_hex"].get<std::string>(), md.dtype);
  ASSERT_EQ(fill.size(), md.dtype.itemsize());
  EXPECT_EQ(std::vector<std::byte>(md.fill_value.bytes.begin(), md.fill_value.bytes.begin() + fill.size()), fill);
  for (size_t i = fill.size(); i < md.fill_value.bytes.size(); ++i) {
    EXPECT_EQ(md.fill_value.bytes[i], std::byte{0}) << "padding byte " << i;
  }

  const Json& encoding = expected["chunk_key_encoding"];
  EXPECT_EQ(md.chunk_key_encoding.kind,
            encoding["name"] == "v2" ? ChunkKeyEncoding::Kind::kV2 : ChunkKeyEncoding::Kind::kDefault);
  EXPECT_EQ(std::string(1, md.chunk_key_encoding.separator), encoding["configuration"]["separator"].get<std::string>());
  EXPECT_EQ(md.chunk_key_encoding.Key(expected["chunk_coords"].get<std::vector<uint64_t>>()),
            expected["chunk_key"].get<std::string>());

  const Json& codecs = expected["codecs"];
  ASSERT_EQ(md.codecs.size(), codecs.size());
  for (size_t i = 0; i < codecs.size(); ++i) {
    EXPECT_EQ(md.codecs[i].name, codecs[i]["name"].get<std::string>()) << "codec " << i;
    EXPECT_EQ(md.codecs[i].configuration, codecs[i].value("configuration", Json::object()))
        << "codec " << i << " (" << md.codecs[i].name << ")";
  }
  EXPECT_EQ(md.attributes, expected["attributes"]);

  uint64_t elements = 1;
  std::vector<uint64_t> grid;
  for (size_t i = 0; i < md.ndim(); ++i) {
    elements *= md.chunk_shape[i];
    grid.push_back((md.shape[i] + md.chunk_shape[i] - 1) / md.chunk_shape[i]);
  }
  EXPECT_EQ(md.chunk_elements(), elements);
  EXPECT_EQ(md.chunk_bytes(), elements * md.dtype.itemsize());
  EXPECT_EQ(md.grid_shape(), grid);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ZarrPythonDocumentTest, testing::ValuesIn(LoadCases()), CaseName);

TEST(ZarrPythonDocumentTest, MatrixIsComplete) {
  // Guards against a silently empty or shrunken fixture set.
  const std::vector<Json> cases = LoadCases();
  EXPECT_GE(cases.size(), 90u);
  int v2 = 0, v3 = 0;
  for (const Json& c : cases) (c["zarr_format"] == 2 ? v2 : v3)++;
  EXPECT_GE(v2, 40);
  EXPECT_GE(v3, 40);
}

// ---------------------------------------------------------------------------------------
// Malformed documents: every field with a wrong type or value fails with a clear error
// naming the document and the field.

constexpr char kWhere[] = "store/arr/zarr.json";

Json BaseV3() {
  return Json::parse(R"({
    "zarr_format": 3, "node_type": "array", "shape": [10, 7], "data_type": "int16",
    "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4, 3]}},
    "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
    "fill_value": 0,
    "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd"}],
    "attributes": {"units": "K"}, "storage_transformers": [], "dimension_names": ["y", "x"]
  })");
}

struct Mutation {
  std::string label;
  std::string pointer;  // JSON pointer to replace; "" replaces the whole document
  Json value;           // discarded -> remove the field
  StatusCode code;
  std::string substring;
};

void PrintTo(const Mutation& m, std::ostream* os) { *os << m.label; }

Json Apply(Json document, const Mutation& m) {
  if (m.pointer.empty()) return m.value;
  const Json::json_pointer pointer(m.pointer);
  if (m.value.is_discarded()) {
    document[pointer.parent_pointer()].erase(pointer.back());
  } else {
    document[pointer] = m.value;
  }
  return document;
}

const Json kRemove = Json(Json::value_t::discarded);

std::vector<Mutation> V3Mutations() {
  const auto bad = StatusCode::kInvalidArgument;
  const auto unimpl = StatusCode::kUnimplemented;
  return {
      {"not_object", "", Json::array(), bad, "must be a JSON object"},
      {"zarr_format_missing", "/zarr_format", kRemove, bad, "\"zarr_format\""},
      {"zarr_format_string", "/zarr_format", "3", bad, "\"zarr_format\" must be an integer"},
      {"zarr_format_2", "/zarr_format", 2, bad, "expected 3"},
      {"node_type_missing", "/node_type", kRemove, bad, "\"node_type\""},
      {"node_type_int", "/node_type", 1, bad, "\"node_type\" must be a string"},
      {"node_type_group", "/node_type", "group", bad, "not \"array\""},
      {"shape_missing", "/shape", kRemove, bad, "\"shape\""},
      {"shape_string", "/shape", "10", bad, "\"shape\" must be an array"},
      {"shape_negative", "/shape/0", -10, bad, "\"shape\"[0] must be an integer >= 0"},
      {"shape_float", "/shape/1", 7.0, bad, "\"shape\"[1]"},
      {"shape_null_item", "/shape/1", nullptr, bad, "\"shape\"[1]"},
      {"shape_rank_too_high", "/shape", Json(std::vector<int>(65, 1)), bad, "65 dimensions"},
      {"rank_mismatch", "/shape", Json::array({10}), bad, "has rank 2 but shape [10]"},
      {"shape_overflow", "/shape", Json::array({1ull << 40, 1ull << 40}), bad, "more than 2^64 elements"},
      {"data_type_missing", "/data_type", kRemove, bad, "\"data_type\""},
      {"data_type_int", "/data_type", 4, bad, "\"data_type\" must be"},
      {"data_type_unknown", "/data_type", "float128", unimpl, "float128"},
      {"data_type_string_type", "/data_type", "text", unimpl, "\"text\""},
      {"chunk_grid_missing", "/chunk_grid", kRemove, bad, "\"chunk_grid\""},
      {"chunk_grid_string", "/chunk_grid", "regular", bad, "\"chunk_grid\" must be a JSON object"},
      {"chunk_grid_unknown", "/chunk_grid/name", "rectilinear", unimpl, "\"rectilinear\""},
      {"chunk_grid_name_int", "/chunk_grid/name", 1, bad, "\"name\" must be a string"},
      {"chunk_grid_no_config", "/chunk_grid/configuration", kRemove, bad, "\"configuration\""},
      {"chunk_grid_config_array", "/chunk_grid/configuration", Json::array(), bad,
       "configuration must be a JSON object"},
      {"chunk_shape_missing", "/chunk_grid/configuration/chunk_shape", kRemove, bad, "\"chunk_shape\""},
      {"chunk_shape_zero", "/chunk_grid/configuration/chunk_shape/1", 0, bad,
       "\"chunk_shape\"[1] must be an integer >= 1"},
      {"chunk_shape_string", "/chunk_grid/configuration/chunk_shape/0", "4", bad, "\"chunk_shape\"[0]"},
      {"chunk_too_big", "/chunk_grid/configuration/chunk_shape", Json::array({1ull << 32, 1ull << 32}), bad,
       "1 TiB limit"},
      {"chunk_bytes_overflow", "/chunk_grid/configuration/chunk_shape", Json::array({UINT64_MAX, UINT64_MAX}), bad,
       "1 TiB limit"},
      {"key_encoding_missing", "/chunk_key_encoding", kRemove, bad, "\"chunk_key_encoding\""},
      {"key_encoding_string", "/chunk_key_encoding", "default", bad, "\"chunk_key_encoding\""},
      {"key_encoding_unknown", "/chunk_key_encoding/name", "hashed", unimpl, "\"hashed\""},
      {"key_separator_bad", "/chunk_key_encoding/configuration/separator", "-", bad,
       "separator must be \"/\" or \".\""},
      {"key_separator_int", "/chunk_key_encoding/configuration/separator", 47, bad, "separator"},
      {"key_config_array", "/chunk_key_encoding/configuration", Json::array(), bad,
       "configuration must be a JSON object"},
      {"fill_missing", "/fill_value", kRemove, bad, "\"fill_value\""},
      {"fill_null", "/fill_value", nullptr, bad, "fill_value null"},
      {"fill_string", "/fill_value", "zero", bad, "fill_value \"zero\""},
      {"fill_out_of_range", "/fill_value", 70000, bad, "out of range for int16"},
      {"fill_fraction", "/fill_value", 1.5, bad, "not a valid int16"},
      {"fill_bool_for_int", "/fill_value", true, bad, "fill_value true"},
      {"codecs_missing", "/codecs", kRemove, bad, "\"codecs\""},
      {"codecs_empty", "/codecs", Json::array(), bad, "\"codecs\" must be a non-empty array"},
      {"codecs_object", "/codecs", Json::object(), bad, "\"codecs\" must be"},
      {"codec_int", "/codecs/1", 5, bad, "\"codecs\"[1] must be an object or a name"},
      {"codec_no_name", "/codecs/0/name", kRemove, bad, "\"codecs\"[0] needs a string \"name\""},
      {"codec_config_int", "/codecs/0/configuration", 3, bad, "(bytes) configuration must be an object"},
      {"attributes_array", "/attributes", Json::array(), bad, "\"attributes\""},
      {"transformers_object", "/storage_transformers", Json::object(), bad,
       "\"storage_transformers\" must be an array"},
      {"transformers_present", "/storage_transformers", Json::parse(R"([{"name": "chunk-manifest-json"}])"), unimpl,
       "chunk-manifest-json"},
      {"dimension_names_int", "/dimension_names", 3, bad, "\"dimension_names\""},
      {"dimension_names_short", "/dimension_names", Json::array({"x"}), bad, "array of 2 names"},
  };
}

class V3MalformedTest : public testing::TestWithParam<Mutation> {};

TEST_P(V3MalformedTest, FailsNamingFieldAndDocument) {
  const Mutation& m = GetParam();
  auto parsed = ParseArrayMetadataV3(Apply(BaseV3(), m), kWhere);
  ASSERT_FALSE(parsed.ok()) << m.label;
  EXPECT_EQ(parsed.status().code(), m.code) << parsed.status().ToString();
  EXPECT_THAT(parsed.status().message(), HasSubstr(kWhere));
  EXPECT_THAT(parsed.status().message(), HasSubstr(m.substring));
}

INSTANTIATE_TEST_SUITE_P(Fields, V3MalformedTest, testing::ValuesIn(V3Mutations()),
                         [](const auto& info) { return info.param.label; });

TEST(V3MetadataTest, BaseDocumentParses) {
  auto parsed = ParseArrayMetadataV3(BaseV3(), kWhere);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->attributes, Json({{"units", "K"}}));
  ASSERT_EQ(parsed->codecs.size(), 2u);
  EXPECT_EQ(parsed->codecs[1].name, "zstd");
  EXPECT_EQ(parsed->codecs[1].configuration, Json::object());
}

TEST(V3MetadataTest, OptionalFieldsAndBareCodecNames) {
  Json doc = BaseV3();
  doc.erase("attributes");
  doc.erase("storage_transformers");
  doc.erase("dimension_names");
  doc["codecs"] = Json::array({"bytes", {{"name", "crc32c"}, {"configuration", nullptr}}});
  doc["chunk_key_encoding"] = Json{{"name", "v2"}};
  doc["extension_field"] = Json{{"must_understand", false}};
  auto parsed = ParseArrayMetadataV3(doc, kWhere);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->attributes, Json::object());
  ASSERT_EQ(parsed->codecs.size(), 2u);
  EXPECT_EQ(parsed->codecs[0].name, "bytes");
  EXPECT_EQ(parsed->codecs[0].configuration, Json::object());
  EXPECT_EQ(parsed->codecs[1].name, "crc32c");
  // v2 key encoding defaults to "." without a configuration.
  EXPECT_EQ(parsed->chunk_key_encoding.kind, ChunkKeyEncoding::Kind::kV2);
  EXPECT_EQ(parsed->chunk_key_encoding.Key({2, 3}), "2.3");
}

TEST(V3MetadataTest, DefaultKeyEncodingWithoutConfigurationUsesSlash) {
  Json doc = BaseV3();
  doc["chunk_key_encoding"] = Json{{"name", "default"}};
  auto parsed = ParseArrayMetadataV3(doc, kWhere);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->chunk_key_encoding.Key({2, 3}), "c/2/3");
}

TEST(V3MetadataTest, ZeroDimensionalAndEmptyArrays) {
  Json doc = BaseV3();
  doc["shape"] = Json::array();
  doc["chunk_grid"]["configuration"]["chunk_shape"] = Json::array();
  doc.erase("dimension_names");
  auto scalar = ParseArrayMetadataV3(doc, kWhere);
  ASSERT_TRUE(scalar.ok()) << scalar.status().ToString();
  EXPECT_EQ(scalar->chunk_elements(), 1u);
  EXPECT_EQ(scalar->chunk_bytes(), 2u);
  EXPECT_TRUE(scalar->grid_shape().empty());
  EXPECT_EQ(scalar->chunk_key_encoding.Key({}), "c");

  doc["shape"] = Json::array({0, 5});
  doc["chunk_grid"]["configuration"]["chunk_shape"] = Json::array({3, 10});
  auto empty = ParseArrayMetadataV3(doc, kWhere);
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_EQ(empty->grid_shape(), (std::vector<uint64_t>{0, 1}));
  EXPECT_EQ(empty->chunk_elements(), 30u);
}

TEST(V3MetadataTest, ChunkJustUnderTheLimitIsAccepted) {
  Json doc = BaseV3();
  doc["data_type"] = "uint8";
  doc["shape"] = Json::array({1ull << 20, 1ull << 20});
  doc["chunk_grid"]["configuration"]["chunk_shape"] = Json::array({1ull << 20, 1ull << 20});
  auto parsed = ParseArrayMetadataV3(doc, kWhere);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->chunk_bytes(), 1ull << 40);
  doc["data_type"] = "uint16";  // now 2 TiB
  EXPECT_EQ(ParseArrayMetadataV3(doc, kWhere).status().code(), StatusCode::kInvalidArgument);
}

TEST(V3MetadataTest, ShardedArrayKeepsShardShapeAndCodecs) {
  const std::string path = kMetadataDir + "v3/sharded_end/zarr.json";
  const Json doc = LoadJson(path);
  auto parsed = ParseArrayMetadataV3(doc, path);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->chunk_shape, (std::vector<uint64_t>{10, 8}));  // the shard
  ASSERT_EQ(parsed->codecs.size(), 1u);
  EXPECT_EQ(parsed->codecs[0].name, "sharding_indexed");
  EXPECT_EQ(parsed->codecs[0].configuration, doc["codecs"][0]["configuration"]);
  EXPECT_EQ(parsed->codecs[0].configuration["chunk_shape"], Json::array({5, 4}));
}

TEST(V3MetadataTest, GroupDocumentIsNotAnArray) {
  auto parsed =
      ParseArrayMetadataV3(Json::parse(R"({"zarr_format": 3, "node_type": "group", "attributes": {}})"), kWhere);
  EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(parsed.status().message(), HasSubstr("\"group\""));
}

// ---------------------------------------------------------------------------------------
// v2 `.zarray`.

constexpr char kWhereV2[] = "store/arr/.zarray";

Json BaseV2() {
  return Json::parse(R"({
    "zarr_format": 2, "shape": [10, 7], "chunks": [4, 3], "dtype": "<i4", "fill_value": 0,
    "order": "C", "filters": null, "dimension_separator": ".",
    "compressor": {"id": "zstd", "level": 3}
  })");
}

// A v2 descr whose one field is a record `levels` deep.
Json NestedDescr(int levels) {
  Json descr = Json::parse(R"([["x", "<f4"]])");
  for (int i = 0; i < levels; ++i) descr = Json::array({Json::array({"n", descr})});
  return descr;
}

std::vector<Mutation> V2Mutations() {
  const auto bad = StatusCode::kInvalidArgument;
  const auto unimpl = StatusCode::kUnimplemented;
  return {
      {"not_object", "", "x", bad, ".zarray must be a JSON object"},
      {"zarr_format_missing", "/zarr_format", kRemove, bad, "\"zarr_format\""},
      {"zarr_format_3", "/zarr_format", 3, bad, "expected 2"},
      {"shape_missing", "/shape", kRemove, bad, "\"shape\""},
      {"shape_object", "/shape", Json::object(), bad, "\"shape\" must be an array"},
      {"shape_negative", "/shape/1", -1, bad, "\"shape\"[1]"},
      {"shape_float", "/shape/0", 10.5, bad, "\"shape\"[0]"},
      {"chunks_missing", "/chunks", kRemove, bad, "\"chunks\""},
      {"chunks_zero", "/chunks/0", 0, bad, "\"chunks\"[0] must be an integer >= 1"},
      {"chunks_rank", "/chunks", Json::array({4, 3, 1}), bad, "has rank 3"},
      {"chunks_huge", "/chunks", Json::array({1ull << 62, 1ull << 62}), bad, "1 TiB limit"},
      {"dtype_missing", "/dtype", kRemove, bad, "\"dtype\""},
      {"dtype_int", "/dtype", 4, bad, "\"dtype\" must be a typestring"},
      {"dtype_unknown", "/dtype", "<f16", unimpl, "\"<f16\""},
      {"dtype_object", "/dtype", "|O", unimpl, "\"|O\""},
      {"dtype_datetime_unit", "/dtype", "<M8[fortnight]", unimpl, "<M8[fortnight]"},
      {"dtype_unicode_order", "/dtype", "|U3", unimpl, "|U3"},
      {"dtype_raw_void", "/dtype", "|V8", unimpl, "raw void"},
      {"dtype_structured_deep", "/dtype", NestedDescr(9), unimpl, "nested over 8 deep"},
      {"dtype_structured_field_kind", "/dtype", Json::parse(R"([["a", 4]])"), unimpl, "structured dtype field"},
      {"dtype_structured_nested_object", "/dtype", Json::parse(R"([["a", [["x", "|O"]]]])"), unimpl, "|O"},
      {"dtype_structured_twice", "/dtype", Json::parse(R"([["a", "<f4"], ["a", "<i2"]])"), bad, "appears twice"},
      {"dtype_structured_empty", "/dtype", Json::array(), bad, "list of 1 to"},
      {"dtype_structured_field_type", "/dtype", Json::parse(R"([["a", "|O"]])"), unimpl, "|O"},
      {"dtype_structured_shape", "/dtype", Json::parse(R"([["a", "<f4", [0]]])"), bad, "shape"},
      {"order_bad", "/order", "K", bad, "\"order\" must be \"C\" or \"F\""},
      {"order_int", "/order", 0, bad, "\"order\""},
      {"compressor_string", "/compressor", "zstd", bad, "\"compressor\" must be null or"},
      {"compressor_no_id", "/compressor/id", kRemove, bad, "needs a string \"id\""},
      {"compressor_unknown", "/compressor", Json{{"id", "brotli"}, {"level", 9}}, unimpl,
       "compressor \"brotli\" is not supported"},
      {"compressor_needs_library", "/compressor", Json{{"id", "zfpy"}, {"mode", 4}}, unimpl,
       "compressor \"zfpy\" needs a codec library this build does not include"},
      {"compressor_bad_level", "/compressor/level", "high", bad,
       "compressor \"zstd\" field \"level\" must be an integer"},
      {"compressor_bad_checksum", "/compressor/checksum", 1, bad, "\"checksum\""},
      {"blosc_bad_cname", "/compressor", Json{{"id", "blosc"}, {"cname", 5}}, bad,
       "compressor \"blosc\" field \"cname\""},
      {"crc32c_at_start", "/compressor", Json{{"id", "crc32c"}, {"location", "start"}}, unimpl, "location \"start\""},
      {"filters_string", "/filters", "delta", bad, "\"filters\" must be null or an array"},
      {"filters_unknown", "/filters", Json::parse(R"([{"id": "delta", "dtype": "<i4"}, {"id": "json2"}])"), unimpl,
       "filter \"json2\" is not supported"},
      {"separator_bad", "/dimension_separator", "-", bad, "\"dimension_separator\""},
      {"separator_int", "/dimension_separator", 1, bad, "\"dimension_separator\""},
      {"fill_string", "/fill_value", "abc", bad, "fill_value \"abc\""},
      {"fill_range", "/fill_value", -2147483649LL, bad, "out of range for int32"},
      {"fill_array", "/fill_value", Json::array({1}), bad, "fill_value [1]"},
  };
}

class V2MalformedTest : public testing::TestWithParam<Mutation> {};

TEST_P(V2MalformedTest, FailsNamingFieldAndDocument) {
  const Mutation& m = GetParam();
  auto parsed = ParseArrayMetadataV2(Apply(BaseV2(), m), Json(), kWhereV2);
  ASSERT_FALSE(parsed.ok()) << m.label;
  EXPECT_EQ(parsed.status().code(), m.code) << parsed.status().ToString();
  EXPECT_THAT(parsed.status().message(), HasSubstr(kWhereV2));
  EXPECT_THAT(parsed.status().message(), HasSubstr(m.substring));
}

INSTANTIATE_TEST_SUITE_P(Fields, V2MalformedTest, testing::ValuesIn(V2Mutations()),
                         [](const auto& info) { return info.param.label; });

TEST(V2MetadataTest, ZattrsMustBeAnObject) {
  auto parsed = ParseArrayMetadataV2(BaseV2(), Json::array(), kWhereV2);
  EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(parsed.status().message(), HasSubstr(".zattrs must be a JSON object"));
}

TEST(V2MetadataTest, StructuredDtypesAreRecordsInTheirOwnByteOrder) {
  Json doc = BaseV2();
  doc["dtype"] = Json::parse(R"([["a", "<f4"], ["b", ">i2"], ["c", "|u1", [3]]])");
  doc["fill_value"] = "AQAAAAAAAAAA";  // 9 bytes: 0x01, then zeros
  auto parsed = ParseArrayMetadataV2(doc, Json(), kWhereV2);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->dtype.id, DataTypeId::kStructured);
  EXPECT_EQ(parsed->dtype.itemsize(), 4u + 2u + 3u);
  EXPECT_EQ(parsed->dtype.numpy_typestr(), "|V9");
  EXPECT_EQ(parsed->record_fields, doc["dtype"]);
  EXPECT_EQ(parsed->codecs[0].configuration, Json::object());  // never swapped as a whole
  ASSERT_EQ(parsed->fill_value.record.size(), 9u);
  EXPECT_EQ(parsed->fill_value.data()[0], std::byte{1});
  doc["fill_value"] = "AQ==";  // one byte, not one record
  EXPECT_THAT(ParseArrayMetadataV2(doc, Json(), kWhereV2).status().message(),
              HasSubstr("not base64 of one 9-byte record"));
  doc["fill_value"] = nullptr;
  EXPECT_EQ(ParseArrayMetadataV2(doc, Json(), kWhereV2)->fill_value.record, std::vector<std::byte>(9));
}

TEST(V2MetadataTest, NestedRecordsKeepTheirDescr) {
  Json doc = BaseV2();
  doc["dtype"] = Json::parse(R"([["a", "<i4"], ["b", [["x", ">f8"], ["s", "|S3"]], [2]], ["t", "<M8[s]"]])");
  doc["fill_value"] = nullptr;
  auto parsed = ParseArrayMetadataV2(doc, Json(), kWhereV2);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->dtype.itemsize(), 4u + 2 * (8u + 3u) + 8u);
  EXPECT_EQ(parsed->record_fields, doc["dtype"]);
}

TEST(V3MetadataTest, RecordFieldsBeyondNumbers) {
  for (const char* endian : {"little", "big"}) {
    Json doc = Json::parse(R"({"zarr_format": 3, "node_type": "array", "shape": [6],
      "data_type": {"name": "structured", "configuration": {"fields": [
        ["n", {"name": "structured", "configuration": {"fields": [["x", "float64"], ["y", "uint8"]]}}],
        ["s", {"name": "null_terminated_bytes", "configuration": {"length_bytes": 5}}],
        ["u", {"name": "fixed_length_utf32", "configuration": {"length_bytes": 12}}],
        ["r", {"name": "raw_bytes", "configuration": {"length_bytes": 3}}],
        ["t", {"name": "numpy.datetime64", "configuration": {"unit": "ms", "scale_factor": 10}}],
        ["ok", "bool"]]}},
      "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4]}},
      "chunk_key_encoding": {"name": "default"}, "fill_value": null, "codecs": []})");
    doc["codecs"] = Json::array({{{"name", "bytes"}, {"configuration", {{"endian", endian}}}}});
    auto parsed = ParseArrayMetadataV3(doc, "zarr.json");
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    EXPECT_EQ(parsed->dtype.itemsize(), 9u + 5u + 12u + 3u + 8u + 1u);
    const std::string o = std::string_view(endian) == "big" ? ">" : "<";
    EXPECT_EQ(parsed->record_fields, Json::parse(R"([["n", [["x", ")" + o + R"(f8"], ["y", "|u1"]]], ["s", "|S5"],
      ["u", ")" + o + R"(U3"], ["r", "|V3"], ["t", ")" +
                                                 o + R"(M8[10ms]"], ["ok", "|b1"]])"));
  }
  const auto refused = [](const char* field) {
    Json doc = Json::parse(R"({"zarr_format": 3, "node_type": "array", "shape": [6],
      "data_type": {"name": "structured", "configuration": {"fields": []}},
      "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4]}},
      "chunk_key_encoding": {"name": "default"}, "fill_value": null, "codecs": [{"name": "bytes"}]})");
    doc["data_type"]["configuration"]["fields"].push_back(Json::parse(field));
    return ParseArrayMetadataV3(doc, "zarr.json").status();
  };
  EXPECT_THAT(refused(R"(["s", "string"])").message(), HasSubstr("not supported in a record"));
  EXPECT_THAT(refused(R"(["r", {"name": "raw_bytes", "configuration": {"length_bytes": 0}}])").message(),
              HasSubstr("length_bytes"));
  EXPECT_THAT(refused(R"(["x", "float128"])").message(), HasSubstr("structured field \"x\""));
}

TEST(V3MetadataTest, StructuredDataTypeTakesTheBytesCodecsOrder) {
  for (const char* endian : {"little", "big"}) {
    Json doc = Json::parse(R"({"zarr_format": 3, "node_type": "array", "shape": [6],
      "data_type": {"name": "structured", "configuration": {"fields": [["a", "float32"], ["b", "int16"]]}},
      "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4]}},
      "chunk_key_encoding": {"name": "default"}, "fill_value": "AAAAAAAA", "codecs": []})");
    doc["codecs"] = Json::array({{{"name", "bytes"}, {"configuration", {{"endian", endian}}}}});
    auto parsed = ParseArrayMetadataV3(doc, "zarr.json");
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    EXPECT_EQ(parsed->dtype.itemsize(), 6u);
    const char* order = std::string_view(endian) == "big" ? ">" : "<";
    EXPECT_EQ(parsed->record_fields, Json::array({Json::array({"a", std::string(order) + "f4"}),
                                                  Json::array({"b", std::string(order) + "i2"})}));
  }
}

TEST(V2MetadataTest, MissingOptionalFieldsGetV2Defaults) {
  Json doc = BaseV2();
  for (const char* key : {"order", "filters", "dimension_separator", "compressor", "fill_value"}) {
    doc.erase(key);
  }
  auto parsed = ParseArrayMetadataV2(doc, Json(), kWhereV2);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  ASSERT_EQ(parsed->codecs.size(), 1u);
  EXPECT_EQ(parsed->codecs[0].name, "bytes");
  EXPECT_EQ(parsed->codecs[0].configuration, Json({{"endian", "little"}}));
  EXPECT_EQ(parsed->chunk_key_encoding.kind, ChunkKeyEncoding::Kind::kV2);
  EXPECT_EQ(parsed->chunk_key_encoding.Key({1, 2}), "1.2");
  EXPECT_EQ(parsed->fill_value.bytes, FillValue{}.bytes);
  EXPECT_EQ(parsed->attributes, Json::object());
}

TEST(V2MetadataTest, CompressorDefaultsFillAbsentSettings) {
  struct Case {
    Json compressor;
    std::string name;
    Json configuration;
  };
  const std::vector<Case> cases = {
      {{{"id", "zstd"}}, "zstd", {{"level", 1}, {"checksum", false}}},
      {{{"id", "zstd"}, {"level", -5}, {"checksum", true}}, "zstd", {{"level", -5}, {"checksum", true}}},
      {{{"id", "blosc"}}, "blosc", {{"cname", "lz4"}, {"clevel", 5}, {"shuffle", 1}, {"blocksize", 0}}},
      {{{"id", "blosc"}, {"shuffle", -1}},
       "blosc",
       {{"cname", "lz4"}, {"clevel", 5}, {"shuffle", -1}, {"blocksize", 0}}},
      {{{"id", "gzip"}}, "gzip", {{"level", 1}}},
      {{{"id", "zlib"}, {"level", 9}}, "numcodecs.zlib", {{"level", 9}}},
      {{{"id", "lz4"}}, "numcodecs.lz4", {{"acceleration", 1}}},
      {{{"id", "crc32c"}, {"location", "end"}}, "crc32c", Json::object()},
  };
  for (const Case& c : cases) {
    Json doc = BaseV2();
    doc["compressor"] = c.compressor;
    auto parsed = ParseArrayMetadataV2(doc, Json(), kWhereV2);
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    ASSERT_EQ(parsed->codecs.size(), 2u) << c.compressor;
    EXPECT_EQ(parsed->codecs[1].name, c.name);
    EXPECT_EQ(parsed->codecs[1].configuration, c.configuration) << c.compressor;
  }
}

TEST(V2MetadataTest, EmptyFilterListIsAccepted) {
  Json doc = BaseV2();
  doc["filters"] = Json::array();
  EXPECT_TRUE(ParseArrayMetadataV2(doc, Json(), kWhereV2).ok());
}

// ---------------------------------------------------------------------------------------
// ParseJson and chunk keys.

TEST(ParseJsonTest, SyntaxErrorsAreMetadataErrorsNamingTheDocumentAndPosition) {
  for (std::string_view text : {"", "hello", "{\"shape\": [1, 2", "{\"a\": 1,}", "[1, 2] x", "{\"a\": \"\xff\"}"}) {
    auto parsed = ParseJson(text, "s3://bucket/a/zarr.json");
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(parsed.status().message(), HasSubstr("s3://bucket/a/zarr.json: not valid JSON"));
    EXPECT_THAT(parsed.status().message(), HasSubstr("at line 1, column "));
    EXPECT_THAT(parsed.status().message(), Not(HasSubstr("[json.exception")));
  }
  auto multiline = ParseJson("{\n  \"shape\": [1,\n  }", "zarr.json");
  EXPECT_THAT(multiline.status().message(), HasSubstr("at line 3, column 3"));
}

// A byte that is not UTF-8 is refused where the document is parsed, and the message
// quoting it is UTF-8 itself (the binding turns it into a Python str).
TEST(ParseJsonTest, NonUtf8StringsAreRefusedWithATextMessage) {
  const std::string long_value(1000, 'v');
  for (const std::string& text : {std::string("{\"note\": \"X\xffZ\"}"), "{\"" + long_value + "\xc3\": 1}"}) {
    auto parsed = ParseJson(text, "/data/a/.zattrs");
    ASSERT_FALSE(parsed.ok());
    const std::string& message = parsed.status().message();
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(message, HasSubstr("/data/a/.zattrs: not valid JSON: parse error at line 1, column "));
    EXPECT_THAT(message, HasSubstr("ill-formed UTF-8 byte"));
    EXPECT_THAT(message, AnyOf(HasSubstr("X\\xff"), HasSubstr("v\\xc3")));
    EXPECT_LT(message.size(), 300u);  // the long string is cut to its end
    for (size_t pos = 0; pos < message.size();) ASSERT_TRUE(NextUtf8(message, pos).has_value()) << message;
  }
}

TEST(ParseJsonTest, ParsesValidDocuments) {
  auto parsed = ParseJson(R"({"a": [1, -2, 3.5, "x\"[{"], "b": null})", "doc");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ((*parsed)["a"][3], "x\"[{");
  EXPECT_TRUE((*parsed)["a"][0].is_number_unsigned());
}

TEST(ParseJsonTest, RejectsDeepNestingButNotBracketsInStrings) {
  const std::string deep = std::string(200, '[') + std::string(200, ']');
  auto parsed = ParseJson(deep, "doc");
  EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(parsed.status().message(), HasSubstr("nested deeper than 128"));

  const std::string brackets = "{\"s\": \"" + std::string(1000, '[') + "\\\"" + "\"}";
  EXPECT_TRUE(ParseJson(brackets, "doc").ok());
  const std::string ok_depth = std::string(100, '[') + std::string(100, ']');
  EXPECT_TRUE(ParseJson(ok_depth, "doc").ok());
}

TEST(ParseJsonTest, RejectsOversizedDocuments) {
  const std::string huge((64u << 20) + 1, ' ');
  auto parsed = ParseJson(huge, "doc");
  EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(parsed.status().message(), HasSubstr("64 MiB limit"));
}

TEST(ChunkKeyEncodingTest, Keys) {
  const ChunkKeyEncoding default_slash{ChunkKeyEncoding::Kind::kDefault, '/'};
  const ChunkKeyEncoding default_dot{ChunkKeyEncoding::Kind::kDefault, '.'};
  const ChunkKeyEncoding v2_dot{ChunkKeyEncoding::Kind::kV2, '.'};
  const ChunkKeyEncoding v2_slash{ChunkKeyEncoding::Kind::kV2, '/'};
  EXPECT_EQ(default_slash.Key({1, 0, 12}), "c/1/0/12");
  EXPECT_EQ(default_dot.Key({1, 0, 12}), "c.1.0.12");
  EXPECT_EQ(default_slash.Key({}), "c");
  EXPECT_EQ(v2_dot.Key({1, 0, 12}), "1.0.12");
  EXPECT_EQ(v2_slash.Key({1, 0, 12}), "1/0/12");
  EXPECT_EQ(v2_dot.Key({}), "0");
  EXPECT_EQ(v2_dot.Key({18446744073709551615ull}), "18446744073709551615");
}

TEST(ArrayMetadataTest, GridShapeRoundsUpWithoutOverflow) {
  ArrayMetadata md;
  md.shape = {10, 9, UINT64_MAX, 0};
  md.chunk_shape = {4, 3, 2, 5};
  EXPECT_EQ(md.grid_shape(), (std::vector<uint64_t>{3, 3, (UINT64_MAX / 2) + 1, 0}));
  EXPECT_EQ(md.chunk_elements(), 4u * 3 * 2 * 5);
}

}  // namespace
}  // namespace insitubatch::zarr
