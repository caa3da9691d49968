#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "insitubatch/util/crc32c.h"
#include "insitubatch/zarr/codec/codec_chain.h"
#include "insitubatch/zarr/codec/registry.h"

namespace insitubatch::zarr {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kAbsent = ~uint64_t{0};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  return std::string(std::istreambuf_iterator<char>(in), {});
}

ByteSpan AsBytes(const std::string& s) { return {reinterpret_cast<const std::byte*>(s.data()), s.size()}; }

std::string AsString(const Buffer& b) { return std::string(reinterpret_cast<const char*>(b.data()), b.size()); }

std::vector<CodecSpec> SpecsFromJson(const Json& codecs) {
  std::vector<CodecSpec> specs;
  for (const Json& c : codecs) {
    specs.push_back({c["name"].get<std::string>(), c.contains("configuration") ? c["configuration"] : Json::object()});
  }
  return specs;
}

FillValue FillOf(const std::string& bytes) {
  FillValue fill;
  std::memcpy(fill.bytes.data(), bytes.data(), bytes.size());
  return fill;
}

const Json kBytesLE = {{"name", "bytes"}, {"configuration", {{"endian", "little"}}}};
const Json kZstd = {{"name", "zstd"}, {"configuration", {{"level", 1}}}};
const Json kCrc = {{"name", "crc32c"}};

// Codec lists as vectors: a braced single Json is a copy or a one-element array depending
// on the compiler (nlohmann FAQ), a vector is always a list.
Json ShardConfig(std::vector<uint64_t> chunk_shape, std::vector<Json> codecs, std::vector<Json> index_codecs,
                 const char* location = "end") {
  Json config = Json::object();
  config["chunk_shape"] = chunk_shape;
  config["codecs"] = codecs;
  config["index_codecs"] = index_codecs;
  config["index_location"] = location;
  return config;
}

Result<CodecChain> ShardChain(const Json& config, std::vector<uint64_t> shard_shape,
                              DataTypeId dtype = DataTypeId::kUInt16, FillValue fill = {}) {
  return CodecChain::Build({CodecSpec{"sharding_indexed", config}},
                           ArrayRepr{std::move(shard_shape), DataType{dtype}, fill}, BuiltinCodecRegistry());
}

// 0, 1, 2, ... as uint16 over a shard of `n` elements.
std::string Iota16(size_t n) {
  std::string out(n * 2, '\0');
  for (size_t i = 0; i < n; ++i) {
    const uint16_t v = static_cast<uint16_t>(i * 37 + 5);
    std::memcpy(out.data() + 2 * i, &v, 2);
  }
  return out;
}

// A hand-built shard: `chunks` (C order; nullopt = absent) followed or preceded by the
// little-endian index, optionally with its crc32c.
std::string HandShard(const std::vector<std::optional<std::string>>& chunks, bool crc, bool at_end = true) {
  const uint64_t index_size = chunks.size() * 16 + (crc ? 4 : 0);
  std::string data;
  std::vector<uint64_t> index;
  for (const auto& chunk : chunks) {
    if (!chunk) {
      index.insert(index.end(), {kAbsent, kAbsent});
      continue;
    }
    index.push_back(data.size() + (at_end ? 0 : index_size));
    index.push_back(chunk->size());
    data += *chunk;
  }
  static_assert(std::endian::native == std::endian::little, "test assumes little-endian");
  std::string index_bytes(reinterpret_cast<const char*>(index.data()), index.size() * 8);
  if (crc) {
    const uint32_t c = Crc32c(AsBytes(index_bytes));
    index_bytes.append(reinterpret_cast<const char*>(&c), 4);
  }
  return at_end ? data + index_bytes : index_bytes + data;
}

std::string Block16(std::initializer_list<uint16_t> values) {
  std::string out;
  for (uint16_t v : values) out.append(reinterpret_cast<const char*>(&v), 2);
  return out;
}

Status Decode(const CodecChain& chain, const std::string& shard, std::string& out) {
  out.assign(chain.repr().nbytes(), '\xAA');
  return chain.DecodeInto(AsBytes(shard), {reinterpret_cast<std::byte*>(out.data()), out.size()});
}

// Every shard zarr-python wrote decodes to exactly what numpy says it holds.
TEST(ShardingTest, DecodesZarrPythonShards) {
  const std::string dir = std::string(INSITU_TESTDATA_DIR) + "/sharding/";
  const Json manifest = Json::parse(ReadFile(dir + "manifest.json"));
  ASSERT_EQ(manifest.size(), 4u);
  int decoded = 0;
  for (const Json& c : manifest) {
    SCOPED_TRACE(c["name"].get<std::string>());
    auto dtype = DataType::FromV3Name(c["dtype"].get<std::string>());
    ASSERT_TRUE(dtype.ok());
    std::string fill_bytes;
    const std::string hex = c["fill_hex"];
    for (size_t i = 0; i < hex.size(); i += 2) {
      fill_bytes.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
    }
    const ArrayRepr repr{c["shard_shape"].get<std::vector<uint64_t>>(), *dtype, FillOf(fill_bytes)};
    auto chain = CodecChain::Build(SpecsFromJson(c["codecs"]), repr, BuiltinCodecRegistry());
    ASSERT_TRUE(chain.ok()) << chain.status().ToString();
    for (const Json& shard : c["shards"]) {
      if (!shard["present"].get<bool>()) continue;
      const std::string stored = ReadFile(dir + c["name"].get<std::string>() + "/" + shard["key"].get<std::string>());
      const std::string expected = ReadFile(dir + shard["expected"].get<std::string>());
      std::string out;
      Status s = Decode(*chain, stored, out);
      ASSERT_TRUE(s.ok()) << shard["key"] << ": " << s.ToString();
      EXPECT_EQ(out, expected) << shard["key"];
      ++decoded;
    }
  }
  EXPECT_EQ(decoded, 10);
}

// The manifest's shards, each with its chain and expected bytes.
struct ZarrPythonShard {
  std::string name;
  std::string key;
  std::string stored;
  std::string expected;
  std::shared_ptr<CodecChain> chain;
};

std::vector<ZarrPythonShard> ZarrPythonShards() {
  const std::string dir = std::string(INSITU_TESTDATA_DIR) + "/sharding/";
  std::vector<ZarrPythonShard> out;
  for (const Json& c : Json::parse(ReadFile(dir + "manifest.json"))) {
    std::string fill_bytes;
    const std::string hex = c["fill_hex"];
    for (size_t i = 0; i < hex.size(); i += 2) {
      fill_bytes.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
    }
    const ArrayRepr repr{c["shard_shape"].get<std::vector<uint64_t>>(),
                         DataType::FromV3Name(c["dtype"].get<std::string>()).value(), FillOf(fill_bytes)};
    auto chain = std::make_shared<CodecChain>(
        CodecChain::Build(SpecsFromJson(c["codecs"]), repr, BuiltinCodecRegistry()).value());
    for (const Json& shard : c["shards"]) {
      if (!shard["present"].get<bool>()) continue;
      out.push_back({c["name"], shard["key"],
                     ReadFile(dir + c["name"].get<std::string>() + "/" + shard["key"].get<std::string>()),
                     ReadFile(dir + shard["expected"].get<std::string>()), chain});
    }
  }
  return out;
}

// Split: every shard zarr-python wrote (index at the start and at the end, absent inner
// chunks, nested shards, contiguous and strided inner chunks) decodes to numpy's bytes
// with each inner chunk decoded on its own thread, last first, and the progress ranges
// cover the shard exactly once.
TEST(ShardingTest, SplitDecodesZarrPythonShardsOnePartPerThread) {
  const std::vector<ZarrPythonShard> shards = ZarrPythonShards();
  ASSERT_EQ(shards.size(), 10u);
  for (const ZarrPythonShard& shard : shards) {
    SCOPED_TRACE(shard.name + " " + shard.key);
    auto parts = shard.chain->Split(AsBytes(shard.stored));
    ASSERT_TRUE(parts.ok()) << parts.status().ToString();
    ASSERT_NE(*parts, nullptr);
    const uint64_t n = (*parts)->count();
    EXPECT_GT(n, 1u);
    std::string out(shard.expected.size(), '\xAA');
    MutableByteSpan span{reinterpret_cast<std::byte*>(out.data()), out.size()};
    std::vector<int> covered(out.size(), 0);  // each byte written once by exactly one part
    std::vector<std::vector<std::pair<size_t, size_t>>> ranges(n);
    std::vector<Status> statuses(n);
    std::vector<std::thread> threads;
    for (uint64_t i = n; i-- > 0;) {
      threads.emplace_back([&, i] {
        const DecodeProgress progress{1, [&, i](size_t offset, size_t length) {
                                        ranges[i].push_back({offset, length});
                                      }};
        statuses[i] = (*parts)->DecodePart(i, span, &progress);
      });
    }
    for (std::thread& t : threads) t.join();
    for (uint64_t i = 0; i < n; ++i) {
      EXPECT_TRUE(statuses[i].ok()) << i << ": " << statuses[i].ToString();
      for (auto [offset, length] : ranges[i]) {
        for (size_t b = offset; b < offset + length; ++b) ++covered[b];
      }
    }
    EXPECT_EQ(out, shard.expected);
    EXPECT_EQ(std::count(covered.begin(), covered.end(), 1), static_cast<long>(out.size()));
  }
}

// A corrupt inner chunk of a zarr-python shard fails only its own part, named by its grid
// position; the other parts still decode.
TEST(ShardingTest, SplitCorruptInnerChunkFailsItsPartOnly) {
  const std::vector<ZarrPythonShard> shards = ZarrPythonShards();
  const ZarrPythonShard& shard = shards.front();  // u16_end c/0/0: 2 x 2 inner chunks, index at the end
  ASSERT_EQ(shard.name, "u16_end");
  ASSERT_EQ(shard.key, "c/0/0");
  std::string stored = shard.stored;
  const size_t index_at = stored.size() - (4 * 16 + 4);
  uint64_t offset;  // inner chunk 3 = [1, 1]
  std::memcpy(&offset, stored.data() + index_at + 3 * 16, 8);
  stored.replace(offset, 4, "oops");  // its zstd magic number
  auto parts = shard.chain->Split(AsBytes(stored));
  ASSERT_TRUE(parts.ok()) << parts.status().ToString();
  std::string out(shard.expected.size(), '\0');
  MutableByteSpan span{reinterpret_cast<std::byte*>(out.data()), out.size()};
  for (uint64_t i = 0; i < 3; ++i) EXPECT_TRUE((*parts)->DecodePart(i, span).ok()) << i;
  Status s = (*parts)->DecodePart(3, span);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("sharding_indexed: inner chunk [1, 1]: "));
  EXPECT_THAT(s.message(), HasSubstr("zstd"));
  // No part beyond the grid, no buffer of another size.
  EXPECT_EQ((*parts)->DecodePart(4, span).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*parts)->DecodePart(0, span.first(8)).code(), StatusCode::kInvalidArgument);
}

// The index is read (and its checksum checked) when the shard is split, once.
TEST(ShardingTest, SplitChecksTheIndex) {
  const ZarrPythonShard shard = ZarrPythonShards().front();
  std::string stored = shard.stored;
  stored[stored.size() - 10] ^= 0x01;
  auto parts = shard.chain->Split(AsBytes(stored));
  EXPECT_EQ(parts.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(parts.status().message(), HasSubstr("shard index"));
  EXPECT_EQ(shard.chain->Split(AsBytes(stored.substr(0, 20))).status().code(), StatusCode::kDataLoss);
}

// Chains that do not end in a bare shard decode whole: a plain chunk, a transpose first.
TEST(ShardingTest, SplitOnlyBareShards) {
  auto plain = CodecChain::Build({CodecSpec{"bytes", {{"endian", "little"}}}},
                                 ArrayRepr{{4}, DataType{DataTypeId::kUInt16}, {}}, BuiltinCodecRegistry());
  ASSERT_TRUE(plain.ok());
  auto none = plain->Split(AsBytes(Block16({1, 2, 3, 4})));
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, nullptr);
  auto transposed = CodecChain::Build({CodecSpec{"transpose", {{"order", {1, 0}}}},
                                       CodecSpec{"sharding_indexed", ShardConfig({2, 2}, {kBytesLE}, {kBytesLE})}},
                                      ArrayRepr{{4, 4}, DataType{DataTypeId::kUInt16}, {}}, BuiltinCodecRegistry());
  ASSERT_TRUE(transposed.ok()) << transposed.status().ToString();
  auto whole = transposed->Split(AsBytes(std::string(64, '\0')));
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(*whole, nullptr);
}

TEST(ShardingTest, RoundTripIndexEndAndStart) {
  for (const char* location : {"end", "start"}) {
    SCOPED_TRACE(location);
    auto chain = ShardChain(ShardConfig({2, 3}, {kBytesLE, kZstd}, {kBytesLE, kCrc}, location), {4, 6});
    ASSERT_TRUE(chain.ok()) << chain.status().ToString();
    const std::string array = Iota16(24);
    auto encoded = chain->Encode(AsBytes(array));
    ASSERT_TRUE(encoded.ok()) << encoded.status().ToString();
    // The index (4 entries + crc) sits where the configuration says.
    const std::string shard = AsString(*encoded);
    const std::string index = std::string(location) == "end" ? shard.substr(shard.size() - 68) : shard.substr(0, 68);
    uint32_t crc;
    std::memcpy(&crc, index.data() + 64, 4);
    EXPECT_EQ(crc, Crc32c(AsBytes(index.substr(0, 64))));
    uint64_t first_offset;
    std::memcpy(&first_offset, index.data(), 8);
    EXPECT_EQ(first_offset, std::string(location) == "end" ? 0u : 68u);

    std::string out;
    ASSERT_TRUE(Decode(*chain, shard, out).ok());
    EXPECT_EQ(out, array);
  }
}

TEST(ShardingTest, HandBuiltShardPlacesChunksInCOrder) {
  // Shard [4, 4] of inner [2, 2]; chunk (0, 1) absent -> fill 9; index without crc.
  FillValue fill = FillOf(Block16({9}));
  auto chain = ShardChain(ShardConfig({2, 2}, {kBytesLE}, {kBytesLE}), {4, 4}, DataTypeId::kUInt16, fill);
  ASSERT_TRUE(chain.ok()) << chain.status().ToString();
  const std::string shard =
      HandShard({Block16({1, 2, 3, 4}), std::nullopt, Block16({5, 6, 7, 8}), Block16({10, 11, 12, 13})},
                /*crc=*/false);
  std::string out;
  ASSERT_TRUE(Decode(*chain, shard, out).ok());
  EXPECT_EQ(out, Block16({1, 2, 9, 9,    //
                          3, 4, 9, 9,    //
                          5, 6, 10, 11,  //
                          7, 8, 12, 13}));
}

TEST(ShardingTest, AllChunksAbsentIsAllFill) {
  auto chain = ShardChain(ShardConfig({2, 2}, {kBytesLE}, {kBytesLE, kCrc}, "start"), {2, 4}, DataTypeId::kUInt16,
                          FillOf(Block16({0xBEEF})));
  ASSERT_TRUE(chain.ok());
  std::string out;
  ASSERT_TRUE(Decode(*chain, HandShard({std::nullopt, std::nullopt}, true, false), out).ok());
  EXPECT_EQ(out, Block16({0xBEEF, 0xBEEF, 0xBEEF, 0xBEEF, 0xBEEF, 0xBEEF, 0xBEEF, 0xBEEF}));
}

TEST(ShardingTest, ContiguousInnerChunksDecodeInPlace) {
  // Inner [1, 4] spans the trailing dimension: each inner chunk is one run of the shard.
  auto chain = ShardChain(ShardConfig({1, 4}, {kBytesLE, kZstd}, {kBytesLE}), {3, 4});
  ASSERT_TRUE(chain.ok());
  const std::string array = Iota16(12);
  auto encoded = chain->Encode(AsBytes(array));
  ASSERT_TRUE(encoded.ok());
  std::string out;
  ASSERT_TRUE(Decode(*chain, AsString(*encoded), out).ok());
  EXPECT_EQ(out, array);
}

TEST(ShardingTest, NestedShardingRoundTrip) {
  const Json nested = {{"name", "sharding_indexed"},
                       {"configuration", ShardConfig({2, 2}, {kBytesLE, kZstd}, {kBytesLE, kCrc})}};
  auto chain = ShardChain(ShardConfig({4, 4}, {nested}, {kBytesLE, kCrc}, "start"), {8, 4});
  ASSERT_TRUE(chain.ok()) << chain.status().ToString();
  EXPECT_EQ(chain->Describe(), "sharding_indexed");
  const std::string array = Iota16(32);
  auto encoded = chain->Encode(AsBytes(array));
  ASSERT_TRUE(encoded.ok());
  std::string out;
  ASSERT_TRUE(Decode(*chain, AsString(*encoded), out).ok());
  EXPECT_EQ(out, array);

  // Corrupting a byte of an inner shard's index names both levels.
  std::string shard = AsString(*encoded);
  uint64_t offset, nbytes;  // first inner shard, from the outer index at the start
  std::memcpy(&offset, shard.data(), 8);
  std::memcpy(&nbytes, shard.data() + 8, 8);
  shard[offset + nbytes - 10] ^= 0x40;  // inside the nested shard's index (at its end)
  Status s = Decode(*chain, shard, out);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("inner chunk [0, 0]: sharding_indexed: shard index"));
  EXPECT_THAT(s.message(), HasSubstr("crc32c"));
}

TEST(ShardingTest, CorruptIndexChecksum) {
  auto chain = ShardChain(ShardConfig({2, 2}, {kBytesLE}, {kBytesLE, kCrc}), {2, 2});
  ASSERT_TRUE(chain.ok());
  std::string shard = HandShard({Block16({1, 2, 3, 4})}, true);
  std::string out;
  ASSERT_TRUE(Decode(*chain, shard, out).ok());
  shard[shard.size() - 12] ^= 1;  // inside the index entries
  Status s = Decode(*chain, shard, out);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("sharding_indexed: shard index"));
  EXPECT_THAT(s.message(), HasSubstr("checksum mismatch"));
}

TEST(ShardingTest, TruncatedShardIndex) {
  auto chain = ShardChain(ShardConfig({2, 2}, {kBytesLE}, {kBytesLE, kCrc}), {4, 4});
  ASSERT_TRUE(chain.ok());
  std::string out;
  for (size_t size : {0, 1, 67}) {
    Status s = Decode(*chain, std::string(size, '\xff'), out);
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << size;
    EXPECT_EQ(s.message(), "sharding_indexed: shard index needs 68 bytes, the shard holds only " +
                               std::to_string(size) + (size == 1 ? " byte" : " bytes"));
  }
}

TEST(ShardingTest, TruncatedShardDataNamesInnerChunk) {
  // Index at the end intact, but the shard lost its first 40 bytes: the second 32-byte
  // inner chunk now ends past the shard.
  auto chain = ShardChain(ShardConfig({4, 4}, {kBytesLE}, {kBytesLE}), {4, 8});
  ASSERT_TRUE(chain.ok());
  auto encoded = chain->Encode(AsBytes(Iota16(32)));
  ASSERT_TRUE(encoded.ok());
  ASSERT_EQ(encoded->size(), 96u);
  std::string out;
  Status s = Decode(*chain, AsString(*encoded).substr(40), out);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_EQ(s.message(),
            "sharding_indexed: inner chunk [0, 1] (offset 32, 32 bytes) runs past the end of "
            "the 56-byte shard");
}

TEST(ShardingTest, InnerChunkOutOfBounds) {
  auto chain = ShardChain(ShardConfig({2}, {kBytesLE}, {kBytesLE}), {2});
  ASSERT_TRUE(chain.ok());
  auto shard_with = [](uint64_t offset, uint64_t nbytes) {
    std::string shard = Block16({1, 2});
    shard.append(reinterpret_cast<const char*>(&offset), 8);
    shard.append(reinterpret_cast<const char*>(&nbytes), 8);
    return shard;
  };
  std::string out;
  ASSERT_TRUE(Decode(*chain, shard_with(0, 4), out).ok());
  EXPECT_EQ(out, Block16({1, 2}));
  // offset + nbytes wraps around uint64; one half of the "absent" marker; past the end.
  for (auto [offset, nbytes] : {std::pair<uint64_t, uint64_t>{kAbsent - 1, 4},
                                {4, kAbsent - 2},
                                {kAbsent, 4},
                                {0, kAbsent},
                                {17, 4},
                                {16, 5}}) {
    Status s = Decode(*chain, shard_with(offset, nbytes), out);
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << offset << " " << nbytes;
    EXPECT_THAT(s.message(), HasSubstr("inner chunk [0] (offset " + std::to_string(offset)));
  }
  // In bounds but the wrong size for the inner chunk: the inner codec says so.
  Status s = Decode(*chain, shard_with(0, 3), out);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("sharding_indexed: inner chunk [0]: bytes: chunk holds 3"));
}

// A shard is bounded as a plain chunk is: its index plus every inner chunk at its bound,
// which is exactly what a full shard of uncompressed inner chunks takes.
TEST(ShardingTest, MaxEncodedSizeIsTheIndexPlusEveryInnerChunksBound) {
  auto raw = ShardChain(ShardConfig({2, 2}, {kBytesLE}, {kBytesLE, kCrc}), {4, 4});
  ASSERT_TRUE(raw.ok());
  auto full = raw->Encode(AsBytes(Iota16(16)));
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(raw->MaxEncodedSize(), 68u + 4 * 8);
  EXPECT_EQ(full->size(), raw->MaxEncodedSize());

  auto zstd = ShardChain(ShardConfig({2, 2}, {kBytesLE, kZstd}, {kBytesLE}), {4, 4});
  auto inner = CodecChain::Build(SpecsFromJson(Json::array({kBytesLE, kZstd})),
                                 ArrayRepr{{2, 2}, DataType{DataTypeId::kUInt16}, {}}, BuiltinCodecRegistry());
  ASSERT_TRUE(zstd.ok() && inner.ok());
  EXPECT_EQ(zstd->MaxEncodedSize(), 64 + 4 * inner->MaxEncodedSize());

  // Nested: the outer bound counts each inner shard at its own bound; a checksum outside
  // the shard adds its 4 bytes.
  const Json nested = {{"name", "sharding_indexed"}, {"configuration", ShardConfig({2, 2}, {kBytesLE}, {kBytesLE})}};
  auto twice = ShardChain(ShardConfig({4, 4}, {nested}, {kBytesLE}), {8, 4});
  ASSERT_TRUE(twice.ok());
  EXPECT_EQ(twice->MaxEncodedSize(), 32 + 2 * (64 + 4 * 8));
  auto checked = CodecChain::Build(
      {CodecSpec{"sharding_indexed", ShardConfig({2, 2}, {kBytesLE}, {kBytesLE})}, CodecSpec{"crc32c", Json::object()}},
      ArrayRepr{{4, 4}, DataType{DataTypeId::kUInt16}, {}}, BuiltinCodecRegistry());
  ASSERT_TRUE(checked.ok());
  EXPECT_EQ(checked->MaxEncodedSize(), 64 + 4 * 8 + 4);
}

// An index entry may not name a range longer than any valid encoding of its inner chunk:
// refused before a codec sees it, with the message a whole chunk past its bound gets, both
// whole and part by part. Ranges that overlap (two entries naming the same bytes) stay
// legal: each is bounded, so a shard's work is too.
TEST(ShardingTest, AnInnerRangePastItsChunksBoundIsRefusedNamingTheBound) {
  auto chain = ShardChain(ShardConfig({2}, {kBytesLE}, {kBytesLE}), {4});
  ASSERT_TRUE(chain.ok());
  auto shard_with = [](std::vector<std::pair<uint64_t, uint64_t>> entries) {
    std::string shard = Block16({1, 2, 3, 4});
    for (auto [offset, nbytes] : entries) {
      shard.append(reinterpret_cast<const char*>(&offset), 8);
      shard.append(reinterpret_cast<const char*>(&nbytes), 8);
    }
    return shard;
  };
  std::string out;
  ASSERT_TRUE(Decode(*chain, shard_with({{0, 4}, {0, 4}}), out).ok());  // both entries, the same bytes
  EXPECT_EQ(out, Block16({1, 2, 1, 2}));
  const std::string text =
      "sharding_indexed: inner chunk [1] (offset 0): stored object is 8 bytes, more than the 4 any valid encoding of "
      "the chunk takes (bytes)";
  Status s = Decode(*chain, shard_with({{0, 4}, {0, 8}}), out);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_EQ(s.message(), text);
  auto parts = chain->Split(AsBytes(shard_with({{0, 4}, {0, 8}})));
  ASSERT_TRUE(parts.ok() && *parts != nullptr);
  Status part = (*parts)->DecodePart(1, {reinterpret_cast<std::byte*>(out.data()), out.size()});
  EXPECT_EQ(part.code(), StatusCode::kDataLoss);
  EXPECT_EQ(part.message(), text);
  // A compressed inner chunk: a range of the whole shard, far past zstd's bound for 8 bytes.
  auto zstd = ShardChain(ShardConfig({2}, {kBytesLE, kZstd}, {kBytesLE}), {4});
  ASSERT_TRUE(zstd.ok());
  const uint64_t inner = (zstd->MaxEncodedSize() - 32) / 2;  // the index, then two inner chunks
  const std::string index = shard_with({{0, 2 * inner}, {kAbsent, kAbsent}}).substr(8);
  s = Decode(*zstd, std::string(2 * inner, '\0') + index, out);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_EQ(s.message(), "sharding_indexed: inner chunk [0] (offset 0): stored object is " + std::to_string(2 * inner) +
                             " bytes, more than the " + std::to_string(inner) +
                             " any valid encoding of the chunk takes (bytes -> zstd)");
}

TEST(ShardingTest, CorruptInnerChunkNamesIt) {
  auto chain = ShardChain(ShardConfig({2, 2}, {kBytesLE, kZstd}, {kBytesLE, kCrc}), {2, 4});
  ASSERT_TRUE(chain.ok());
  auto encoded = chain->Encode(AsBytes(Iota16(8)));
  ASSERT_TRUE(encoded.ok());
  std::string shard = AsString(*encoded);
  uint64_t offset;  // chunk [0, 1], second index entry
  std::memcpy(&offset, shard.data() + shard.size() - 36 + 16, 8);
  shard.replace(offset, 4, "oops");  // the zstd magic number
  std::string out;
  Status s = Decode(*chain, shard, out);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("sharding_indexed: inner chunk [0, 1]: "));
  EXPECT_THAT(s.message(), HasSubstr("zstd"));
}

TEST(ShardingTest, WrongOutputSizeIsInvalidArgument) {
  auto chain = ShardChain(ShardConfig({2}, {kBytesLE}, {kBytesLE}), {4});
  ASSERT_TRUE(chain.ok());
  std::string out(6, '\0');
  Status s = chain->DecodeInto(AsBytes(HandShard({std::nullopt, std::nullopt}, false)),
                               {reinterpret_cast<std::byte*>(out.data()), out.size()});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
}

TEST(ShardingTest, RejectsBadConfigurations) {
  struct Case {
    Json config;
    StatusCode code;
    const char* text;
  };
  const std::vector<Case> cases = {
      {ShardConfig({3, 2}, {kBytesLE}, {kBytesLE}), StatusCode::kInvalidArgument,
       "does not divide the shard shape [4, 4]"},
      {ShardConfig({2}, {kBytesLE}, {kBytesLE}), StatusCode::kInvalidArgument, "has 1 dimensions, the shard has 2"},
      {ShardConfig({0, 2}, {kBytesLE}, {kBytesLE}), StatusCode::kInvalidArgument, "positive integers"},
      {Json::parse(R"({"chunk_shape": [-2, 2]})"), StatusCode::kInvalidArgument, "positive integers"},
      {Json::parse(R"({"chunk_shape": [2.0, 2]})"), StatusCode::kInvalidArgument, "positive integers"},
      {Json::parse(R"({"codecs": [{"name": "bytes"}]})"), StatusCode::kInvalidArgument, "chunk_shape"},
      {ShardConfig({2, 2}, {kBytesLE}, {kBytesLE}, "middle"), StatusCode::kInvalidArgument,
       "\"index_location\" must be \"start\" or \"end\""},
      {ShardConfig({2, 2}, {Json{{"name", "numcodecs.pcodec"}}}, {kBytesLE}), StatusCode::kUnimplemented,
       "inner codecs: codec \"numcodecs.pcodec\" is not supported"},
      {ShardConfig({2, 2}, {kBytesLE}, {kBytesLE, kZstd}), StatusCode::kUnimplemented,
       "index codec \"zstd\" has no fixed encoded size"},
      {ShardConfig({2, 2}, {kZstd}, {kBytesLE}), StatusCode::kInvalidArgument,
       "inner codecs: codec \"zstd\" (bytes -> bytes) must come after"},
      {Json::array(), StatusCode::kInvalidArgument, "configuration must be an object"},
  };
  for (const Case& c : cases) {
    auto chain = ShardChain(c.config, {4, 4});
    ASSERT_FALSE(chain.ok()) << c.config.dump();
    EXPECT_EQ(chain.status().code(), c.code) << chain.status().ToString();
    EXPECT_THAT(chain.status().message(), HasSubstr(c.text));
    EXPECT_THAT(chain.status().message(), HasSubstr("codec \"sharding_indexed\""));
  }
}

TEST(ShardingTest, DefaultsMatchZarrPython) {
  // Only chunk_shape given: codecs [bytes little], index [bytes little, crc32c] at the
  // end.
  Json config = Json::object();
  config["chunk_shape"] = {2};  // a signed JSON integer, as code-built JSON holds
  auto chain = ShardChain(config, {4});
  ASSERT_TRUE(chain.ok()) << chain.status().ToString();
  const std::string shard = HandShard({Block16({1, 2}), Block16({3, 4})}, /*crc=*/true);
  std::string out;
  ASSERT_TRUE(Decode(*chain, shard, out).ok());
  EXPECT_EQ(out, Block16({1, 2, 3, 4}));
}

TEST(ShardingTest, RandomShapesRoundTrip) {
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 30; ++trial) {
    const size_t ndim = 1 + rng() % 3;
    std::vector<uint64_t> shard, inner;
    for (size_t d = 0; d < ndim; ++d) {
      inner.push_back(1 + rng() % 3);
      shard.push_back(inner.back() * (1 + rng() % 3));
    }
    auto chain =
        ShardChain(ShardConfig(inner, {kBytesLE, kZstd}, {kBytesLE, kCrc}, trial % 2 ? "start" : "end"), shard);
    ASSERT_TRUE(chain.ok()) << chain.status().ToString();
    const std::string array = Iota16(chain->repr().elements());
    auto encoded = chain->Encode(AsBytes(array));
    ASSERT_TRUE(encoded.ok());
    std::string out;
    ASSERT_TRUE(Decode(*chain, AsString(*encoded), out).ok());
    EXPECT_EQ(out, array) << "trial " << trial;
  }
}

}  // namespace
}  // namespace insitubatch::zarr
