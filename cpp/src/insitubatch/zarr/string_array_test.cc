// Variable-length string arrays: metadata (v3 "string" / "variable_length_bytes", v2 "|O"
// with vlen filters), decoding and fill values. Python's tests check zarr-python's stores.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <iterator>

#include "insitubatch/io/memory_store.h"
#include "insitubatch/zarr/array.h"
#include "insitubatch/zarr/codec/categorize_strings.h"
#include "insitubatch/zarr/metadata.h"
#include "insitubatch/zarr/string_decoder.h"

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
  // An absent chunk too: "filling" its 8-byte items with the fill text would hand out
  // bytes no decoder wrote (the text's, and past its end).
  std::fill(std::begin(out), std::end(out), std::byte{0xA5});
  EXPECT_EQ(array->ReadChunk({1}, out).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(out[0], std::byte{0xA5});
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

TEST(StringArrayTest, V2OrderFItemsComeBackInCOrder) {
  auto store = std::make_shared<MemoryStore>();
  auto array = Open(store, R"({"zarr_format": 2, "shape": [2, 3], "chunks": [2, 3], "dtype": "|O", "order": "F",
      "fill_value": "", "filters": [{"id": "vlen-utf8"}], "compressor": null})",
                    2);
  ASSERT_NE(array, nullptr);
  store->Set("s/0.0", Vlen({"a", "d", "b", "e", "c", "f"}));  // [[a, b, c], [d, e, f]] in F order
  EXPECT_EQ(array->ReadStringChunk({0, 0}).value(), (std::vector<std::string>{"a", "b", "c", "d", "e", "f"}));
}

// A shard of [4] items in inner chunks of [2], index (bytes only) at the end.
std::string Shard(const std::vector<std::string>& chunks, const std::vector<bool>& present) {
  std::string body;
  std::string index;
  auto le64 = [](uint64_t v) {
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(v >> (8 * i));
    return out;
  };
  for (size_t i = 0; i < chunks.size(); ++i) {
    index += present[i] ? le64(body.size()) + le64(chunks[i].size()) : le64(~uint64_t{0}) + le64(~uint64_t{0});
    if (present[i]) body += chunks[i];
  }
  return body + index;
}

constexpr const char* kShardedStrings = R"({"zarr_format": 3, "node_type": "array", "shape": [8], "data_type": "string",
    "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4]}},
    "chunk_key_encoding": {"name": "default"}, "fill_value": "-",
    "codecs": [{"name": "sharding_indexed", "configuration": {"chunk_shape": [2], "codecs": [{"name": "vlen-utf8"}],
      "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]}}]})";

TEST(StringArrayTest, ShardedStringsPlaceInnerChunksAndFillAbsentOnes) {
  auto store = std::make_shared<MemoryStore>();
  auto array = Open(store, kShardedStrings, 3);
  ASSERT_NE(array, nullptr);
  store->Set("s/c/0", Shard({Vlen({"a", "b"}), ""}, {true, false}));
  EXPECT_EQ(array->ReadStringChunk({0}).value(), (std::vector<std::string>{"a", "b", "-", "-"}));
  store->Set("s/c/1", Shard({Vlen({"a"}), Vlen({"c", "d"})}, {true, true}));  // inner chunk [0] holds 1 item
  auto bad = array->ReadStringChunk({1});
  EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(bad.status().message(), testing::HasSubstr("s [1]"));
  EXPECT_THAT(bad.status().message(), testing::HasSubstr("inner chunk [0]: the string chunk holds 1 items"));
}

// A vlen header's item count is checked against the bytes that follow it before any item is
// made: 2^27 items cannot fit in 8 bytes, and must not cost 2^27 empty strings first.
TEST(StringArrayTest, AnItemCountItsBytesCannotHoldIsRefusedBeforeTheItemsAreMade) {
  auto store = std::make_shared<MemoryStore>();
  auto array = Open(store, R"({"zarr_format": 3, "node_type": "array", "shape": [134217728], "data_type": "string",
      "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [134217728]}},
      "chunk_key_encoding": {"name": "default"}, "fill_value": "", "codecs": [{"name": "vlen-utf8"}]})",
                    3);
  ASSERT_NE(array, nullptr);
  store->Set("s/c/0", std::string("\x00\x00\x00\x08\x00\x00\x00\x00", 8));
  const Status s = array->ReadStringChunk({0}).status();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_EQ(s.message(),
            "s [0] (memory://s/c/0): the string chunk's 8 bytes cannot hold its 134217728 items (4 bytes each at "
            "least)");
}

// An inner chunk of strings is bounded as an inner chunk of numbers is, and the shard's
// string data together by the chunk's limit.
TEST(StringArrayTest, ShardedStringsAreBoundedPerInnerChunkAndTogether) {
  auto store = std::make_shared<MemoryStore>();
  auto array = Open(store, kShardedStrings, 3);
  ASSERT_NE(array, nullptr);
  std::string shard = Shard({Vlen({"a", "b"}), Vlen({"c", "d"})}, {true, true});
  const uint64_t huge = kMaxStringChunkBytes + 1;  // the second entry's length, in the index at the end
  shard.replace(shard.size() - 8, 8, std::string(reinterpret_cast<const char*>(&huge), 8));
  store->Set("s/c/0", shard);
  const Status past = array->ReadStringChunk({0}).status();
  EXPECT_EQ(past.code(), StatusCode::kDataLoss);
  EXPECT_THAT(past.message(),
              testing::HasSubstr("s [0] (memory://s/c/0): sharding_indexed: inner chunk [1] (offset 14): stored object "
                                 "is 1073741825 bytes, more than the 1073741824 any valid encoding of the chunk takes "
                                 "(vlen-utf8)"));
  // Together: the second inner chunk is left what the first did not use.
  auto decoder = MakeStringDecoder(array->metadata().codecs, {4}, array->metadata().dtype, "-");
  ASSERT_TRUE(decoder.ok()) << decoder.status().ToString();
  const std::string both = Shard({Vlen({"abcdef", "g"}), Vlen({"h", "i"})}, {true, true});
  const ByteSpan bytes(reinterpret_cast<const std::byte*>(both.data()), both.size());
  EXPECT_EQ((*decoder)->Decode(bytes, 19 + 14).value(), (std::vector<std::string>{"abcdef", "g", "h", "i"}));
  const Status over = (*decoder)->Decode(bytes, 19 + 13).status();
  EXPECT_EQ(over.code(), StatusCode::kDataLoss);
  EXPECT_EQ(over.message(),
            "sharding_indexed: inner chunk [1]: the string chunk holds 14 bytes, more than the limit of 13");
}

TEST(StringArrayTest, ShardsNestedTooDeepAreUnimplemented) {
  Json codecs = Json::array({{{"name", "vlen-utf8"}}});
  for (int i = 0; i < 5; ++i) {
    codecs = Json::array(
        {{{"name", "sharding_indexed"}, {"configuration", {{"chunk_shape", Json::array({1})}, {"codecs", codecs}}}}});
  }
  Json doc = Json::parse(kShardedStrings);
  doc["codecs"] = codecs;
  auto meta = ParseArrayMetadataV3(doc, "s/zarr.json");
  ASSERT_TRUE(meta.ok()) << meta.status().ToString();
  auto array = Array::Create(std::make_shared<MemoryStore>(), "s", std::move(meta).value());
  EXPECT_EQ(array.status().code(), StatusCode::kUnimplemented);
  EXPECT_THAT(array.status().message(), testing::HasSubstr("nested over 4 deep"));
}

// zarr-python 2 wrote string labels as integer codes with numcodecs' Categorize(dtype=object)
// as the "|O" array's object codec (tests/test_numcodecs_filters.py reads such a store).
Json CategorizedZarray(const char* astype, Json labels, Json fill_value, Json compressor) {
  return Json{{"zarr_format", 2},
              {"shape", {5}},
              {"chunks", {5}},
              {"dtype", "|O"},
              {"order", "C"},
              {"fill_value", std::move(fill_value)},
              {"filters", {{{"id", "categorize"}, {"labels", std::move(labels)}, {"dtype", "|O"}, {"astype", astype}}}},
              {"compressor", std::move(compressor)}};
}

std::shared_ptr<const Array> OpenV2(std::shared_ptr<MemoryStore> store, const Json& zarray) {
  auto meta = ParseArrayMetadataV2(zarray, Json(), "s/.zarray");
  EXPECT_TRUE(meta.ok()) << meta.status().ToString();
  if (!meta.ok()) return nullptr;
  auto array = Array::Create(std::move(store), "s", std::move(meta).value());
  EXPECT_TRUE(array.ok()) << array.status().ToString();
  return array.ok() ? *array : nullptr;
}

TEST(StringArrayTest, V2CategorizedObjectArraysReadTheirLabels) {
  auto store = std::make_shared<MemoryStore>();
  auto array = OpenV2(store, CategorizedZarray("<i2", {"cat", "\u00e9meu"}, "cat", nullptr));
  ASSERT_NE(array, nullptr);
  EXPECT_EQ(array->metadata().dtype.text_kind, 'U');
  // Codes 1 and 2 are the labels; 0, 3 and -1 no label: "" (as numcodecs decodes them).
  store->Set("s/0", std::string("\x01\x00\x02\x00\x00\x00\x03\x00\xff\xff", 10));
  EXPECT_EQ(array->ReadStringChunk({0}).value(), (std::vector<std::string>{"cat", "émeu", "", "", ""}));
  store->Set("s/0", std::string("\x01\x00\x02\x00\x00", 5));  // 2.5 codes
  const Status short_chunk = array->ReadStringChunk({0}).status();
  EXPECT_EQ(short_chunk.code(), StatusCode::kDataLoss);
  EXPECT_THAT(short_chunk.message(), ::testing::HasSubstr("categorize: chunk of 5 bytes does not hold 5 codes of <i2"));
  store->Erase("s/0");
  EXPECT_EQ(array->ReadStringChunk({0}).value(), (std::vector<std::string>(5, "cat")));  // absent: the fill
}

TEST(StringArrayTest, V2CategorizedLabelsAreBoundedAndChecked) {
  // The items are bounded together (n copies of a long label), checked before any is made.
  auto categorize = CategorizeStrings::Make(Json{{"labels", {std::string(40, 'x')}}, {"dtype", "|O"}});
  ASSERT_TRUE(categorize.ok()) << categorize.status().ToString();
  const std::byte ones[5] = {std::byte{1}, std::byte{1}, std::byte{1}, std::byte{1}, std::byte{1}};
  EXPECT_TRUE((*categorize)->Decode(ones, 5, 200).ok());
  const Status over = (*categorize)->Decode(ones, 5, 199).status();
  EXPECT_EQ(over.code(), StatusCode::kDataLoss);
  EXPECT_THAT(over.message(), ::testing::HasSubstr("labels exceed 199 bytes"));
  auto store = std::make_shared<MemoryStore>();
  // Codes must be integers; the categorize must decode to objects to be an object codec.
  auto floats = Array::Create(
      store, "s", ParseArrayMetadataV2(CategorizedZarray("<f4", {"a"}, 0, nullptr), Json(), "s/.zarray").value());
  EXPECT_EQ(floats.status().code(), StatusCode::kUnimplemented);
  Json fixed = CategorizedZarray("|u1", {"a"}, 0, nullptr);
  fixed["filters"][0]["dtype"] = "<U3";
  EXPECT_EQ(ParseArrayMetadataV2(fixed, Json(), "s/.zarray").status().code(), StatusCode::kUnimplemented);
  Json not_strings = CategorizedZarray("|u1", {1, 2}, 0, nullptr);
  EXPECT_EQ(Array::Create(store, "s", ParseArrayMetadataV2(not_strings, Json(), "s/.zarray").value()).status().code(),
            StatusCode::kInvalidArgument);
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

// A string chunk is bounded as a numeric one is: by its codecs' bound on the most string
// data a chunk may hold (kMaxStringChunkBytes; exact where the stored form has a fixed
// size), refused unread where the store knows the size, before decoding otherwise.
TEST(StringArrayTest, StoredStringChunksAreBoundedByTheirCodecs) {
  auto store = std::make_shared<MemoryStore>();
  auto raw = Open(store, R"({"zarr_format": 3, "node_type": "array", "shape": [5], "data_type": "string",
      "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [3]}},
      "chunk_key_encoding": {"name": "default"}, "fill_value": "", "codecs": [{"name": "vlen-utf8"}]})",
                  3);
  ASSERT_NE(raw, nullptr);
  EXPECT_EQ(raw->max_stored_bytes(), kMaxStringChunkBytes);
  auto zstd = Open(store, R"({"zarr_format": 3, "node_type": "array", "shape": [5], "data_type": "string",
      "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [3]}},
      "chunk_key_encoding": {"name": "default"}, "fill_value": "",
      "codecs": [{"name": "vlen-utf8"}, {"name": "zstd"}, {"name": "crc32c"}]})",
                   3);
  ASSERT_NE(zstd, nullptr);
  EXPECT_GT(zstd->max_stored_bytes(), CompressedBound(kMaxStringChunkBytes));
  EXPECT_LT(zstd->max_stored_bytes(), CompressedBound(kMaxStringChunkBytes + kMaxStringChunkBytes / 128));
  // A shard: its index, the inner chunks' bound on all the data, each inner chunk's framing.
  auto sharded = Open(store, kShardedStrings, 3);
  ASSERT_NE(sharded, nullptr);
  EXPECT_EQ(sharded->max_stored_bytes(), 32 + kMaxStringChunkBytes);

  // Categorized labels are codes of a fixed size: their bound is exact.
  auto codes = OpenV2(store, CategorizedZarray("<i2", {"cat"}, "", nullptr));
  ASSERT_NE(codes, nullptr);
  EXPECT_EQ(codes->max_stored_bytes(), 10u);
  store->Set("s/0", std::string(11, '\x01'));
  const Status unread = codes->ReadStringChunk({0}).status();
  EXPECT_EQ(unread.code(), StatusCode::kDataLoss);
  EXPECT_THAT(unread.message(), testing::HasSubstr("s [0]: reading memory://s/0: object is 11 bytes, more than the 10 "
                                                   "its reader accepts (refused unread)"));
  const std::string eleven(11, '\x01');
  const Status decoded =
      codes->DecodeStringChunk({reinterpret_cast<const std::byte*>(eleven.data()), eleven.size()}, {0}).status();
  EXPECT_EQ(decoded.code(), StatusCode::kDataLoss);
  EXPECT_EQ(decoded.message(),
            "s [0] (memory://s/0): stored object is 11 bytes, more than the 10 any valid encoding of the chunk takes "
            "(categorize)");
}

}  // namespace
}  // namespace insitubatch::zarr
