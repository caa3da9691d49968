// Variable-length string arrays: metadata (v3 "string" / "variable_length_bytes", v2 "|O"
// with vlen filters), decoding and fill values. Python's tests check zarr-python's stores.

#include <gtest/gtest.h>

#include "insitubatch/io/memory_store.h"
#include "insitubatch/zarr/array.h"
#include "insitubatch/zarr/metadata.h"

namespace insitubatch::zarr {
namespace {

// numcodecs' VLenUTF8 layout: a uint32 count, then (uint32 length, bytes) per item.
std::string Vlen(const std::vector<std::string>& items) {
  auto le32 = [](uint32_t v) {
    return std::string{static_cast<char>(v), static_cast<char>(v >> 8), static_cast<char>(v >> 16),
                       static_cast<char>(v >> 24)};
  };
  std::string out = le32(static_cast<uint32_t>(items.size()));
  for (const std::string& s : items) out += le32(static_cast<uint32_t>(s.size())) + s;
  return out;
}

std::shared_ptr<const Array> Open(std::shared_ptr<MemoryStore> store, const char* metadata, int format) {
  auto meta = format == 3 ? ParseArrayMetadataV3(Json::parse(metadata), "s/zarr.json")
                          : ParseArrayMetadataV2(Json::parse(metadata), Json(), "s/.zarray");
  EXPECT_TRUE(meta.ok()) << meta.status().ToString();
  auto array = Array::Create(std::move(store), "s", std::move(meta).value());
  EXPECT_TRUE(array.ok()) << array.status().ToString();
  return array.ok() ? *array : nullptr;
}

TEST(StringArrayTest, V3StringsWithTheirFillValue) {
  auto store = std::make_shared<MemoryStore>();
  auto array = Open(store, R"({"zarr_format": 3, "node_type": "array", "shape": [5], "data_type": "string",
      "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [3]}},
      "chunk_key_encoding": {"name": "default"}, "fill_value": "n/a", "codecs": [{"name": "vlen-utf8"}]})",
                    3);
  ASSERT_NE(array, nullptr);
  EXPECT_TRUE(array->metadata().dtype.is_variable());
  EXPECT_EQ(array->metadata().dtype.numpy_typestr(), "|O");
  store->Set("s/c/0", Vlen({"", "Zürich", "x y"}));
  EXPECT_EQ(array->ReadStringChunk({0}).value(), (std::vector<std::string>{"", "Zürich", "x y"}));
  EXPECT_EQ(array->ReadStringChunk({1}).value(), (std::vector<std::string>(3, "n/a")));  // absent
  std::byte out[24];
  EXPECT_EQ(array->ReadChunk({0}, out).code(), StatusCode::kFailedPrecondition);  // no fixed form
}

TEST(StringArrayTest, V2ObjectArraysNeedAVlenFilter) {
  auto store = std::make_shared<MemoryStore>();
  auto array = Open(store, R"({"zarr_format": 2, "shape": [2], "chunks": [2], "dtype": "|O", "order": "C",
      "fill_value": null, "filters": [{"id": "vlen-bytes"}], "compressor": {"id": "zstd", "level": 1}})",
                    2);
  ASSERT_NE(array, nullptr);
  EXPECT_EQ(array->metadata().dtype.text_kind, 'S');
  EXPECT_EQ(array->ReadStringChunk({0}).value(), (std::vector<std::string>{"", ""}));
  auto pickled = ParseArrayMetadataV2(Json::parse(R"({"zarr_format": 2, "shape": [2], "chunks": [2],
      "dtype": "|O", "order": "C", "fill_value": null, "filters": [{"id": "pickle"}], "compressor": null})"),
                                      Json(), "s/.zarray");
  EXPECT_EQ(pickled.status().code(), StatusCode::kUnimplemented);
}

TEST(StringArrayTest, OnlyBytesCodecsFollowTheVlenCodec) {
  auto meta = ParseArrayMetadataV3(Json::parse(R"({"zarr_format": 3, "node_type": "array", "shape": [4],
      "data_type": "string", "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}},
      "chunk_key_encoding": {"name": "default"}, "fill_value": "",
      "codecs": [{"name": "bytes"}]})"),
                                   "s/zarr.json");
  ASSERT_TRUE(meta.ok());
  auto array = Array::Create(std::make_shared<MemoryStore>(), "s", std::move(meta).value());
  EXPECT_EQ(array.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(array.status().message().find("vlen-utf8"), std::string::npos);
}

TEST(StringArrayTest, VariableLengthBytesFillIsBase64) {
  auto meta = ParseArrayMetadataV3(Json::parse(R"({"zarr_format": 3, "node_type": "array", "shape": [2],
      "data_type": "variable_length_bytes", "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}},
      "chunk_key_encoding": {"name": "default"}, "fill_value": "YWI=", "codecs": [{"name": "vlen-bytes"}]})"),
                                   "s/zarr.json");
  ASSERT_TRUE(meta.ok()) << meta.status().ToString();
  const auto& fill = meta->fill_value.record;
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(fill.data()), fill.size()), "ab");
}

}  // namespace
}  // namespace insitubatch::zarr
