#include "insitubatch/zarr/array.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cerrno>
#include <complex>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "insitubatch/io/file_store.h"
#include "insitubatch/io/memory_store.h"
#include "insitubatch/util/temp_dir_testutil.h"

namespace insitubatch::zarr {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string AsString(const Buffer& b) { return std::string(reinterpret_cast<const char*>(b.data()), b.size()); }

template <typename T>
FillValue FillOf(T value) {
  FillValue fill;
  std::memcpy(fill.bytes.data(), &value, sizeof(T));
  return fill;
}

const CodecSpec kBytesLE{"bytes", Json{{"endian", "little"}}};
const CodecSpec kZstd{"zstd", Json{{"level", 1}}};

// uint16 [5, 6] in chunks of [2, 4] (grid [3, 2]), fill 3, bytes + zstd.
ArrayMetadata SmallMetadata() {
  ArrayMetadata m;
  m.shape = {5, 6};
  m.chunk_shape = {2, 4};
  m.dtype = DataType{DataTypeId::kUInt16};
  m.fill_value = FillOf<uint16_t>(3);
  m.codecs = {kBytesLE, kZstd};
  return m;
}

std::string Chunk16(uint16_t first, size_t n) {
  std::string out(n * 2, '\0');
  for (size_t i = 0; i < n; ++i) {
    const uint16_t v = static_cast<uint16_t>(first + i);
    std::memcpy(out.data() + 2 * i, &v, 2);
  }
  return out;
}

MutableByteSpan Span(std::string& s) { return {reinterpret_cast<std::byte*>(s.data()), s.size()}; }
ByteSpan Span(const std::string& s) { return {reinterpret_cast<const std::byte*>(s.data()), s.size()}; }

class MemoryArrayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = std::make_shared<MemoryStore>();
    auto array = Array::Create(store_, "t2m", SmallMetadata());
    ASSERT_TRUE(array.ok()) << array.status().ToString();
    array_ = std::move(array).value();
  }
  void Put(const std::vector<uint64_t>& coords, const std::string& decoded) {
    auto encoded = array_->codecs().Encode(Span(decoded));
    ASSERT_TRUE(encoded.ok());
    store_->Set(array_->ChunkKey(coords), AsString(*encoded));
  }

  std::shared_ptr<MemoryStore> store_;
  std::shared_ptr<const Array> array_;
};

TEST_F(MemoryArrayTest, ReadsStoredChunk) {
  EXPECT_EQ(array_->chunk_bytes(), 16u);
  EXPECT_EQ(array_->codecs().Describe(), "bytes -> zstd");
  const std::string chunk = Chunk16(100, 8);
  Put({1, 0}, chunk);
  std::string out(16, '\0');
  ASSERT_TRUE(array_->ReadChunk({1, 0}, Span(out)).ok());
  EXPECT_EQ(out, chunk);
}

TEST_F(MemoryArrayTest, MissingChunkIsFillValue) {
  std::string out(16, '\x55');
  ASSERT_TRUE(array_->ReadChunk({2, 1}, Span(out)).ok());  // the ragged corner chunk
  EXPECT_EQ(out, std::string("\x03\x00", 2) + std::string("\x03\x00", 2) + std::string("\x03\x00", 2) +
                     std::string("\x03\x00", 2) + std::string("\x03\x00", 2) + std::string("\x03\x00", 2) +
                     std::string("\x03\x00", 2) + std::string("\x03\x00", 2));
}

TEST_F(MemoryArrayTest, BadCoordinates) {
  std::string out(16, '\0');
  Status outside = array_->ReadChunk({3, 0}, Span(out));
  EXPECT_EQ(outside.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(outside.message(), "array 't2m': chunk coordinates [3, 0] are outside the chunk grid [3, 2]");
  Status rank = array_->ReadChunk({0}, Span(out));
  EXPECT_EQ(rank.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(rank.message(), HasSubstr("have 1 dimensions, the array has 2"));
  EXPECT_EQ(array_->ValidateChunkCoords({0, 2}).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(array_->ValidateChunkCoords({2, 1}).ok());
  std::string small(15, '\0');
  EXPECT_EQ(array_->ReadChunk({0, 0}, Span(small)).code(), StatusCode::kInvalidArgument);
}

TEST_F(MemoryArrayTest, CorruptChunkNamesArrayCoordsAndLocation) {
  Put({1, 0}, Chunk16(7, 8));
  auto stored = store_->Read("t2m/c/1/0");
  ASSERT_TRUE(stored.ok() && stored->found);
  std::string bytes = AsString(stored->data);
  store_->Set("t2m/c/1/0", bytes.substr(0, bytes.size() - 3));  // truncated zstd frame
  std::string out(16, '\0');
  Status s = array_->ReadChunk({1, 0}, Span(out));
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("t2m [1, 0] (memory://t2m/c/1/0): zstd"));
}

// The bound a reader puts on a stored chunk: exact without a compressor, each compressor's
// worst case plus framing room with one; a shard's index plus each inner chunk's bound.
TEST(ArrayTest, MaxStoredBytesFollowsTheCodecChain) {
  auto with = [](std::vector<CodecSpec> codecs) {
    ArrayMetadata m = SmallMetadata();  // chunks of 2 x 4 uint16: 16 bytes
    m.codecs = std::move(codecs);
    auto array = Array::Create(std::make_shared<MemoryStore>(), "t2m", m);
    EXPECT_TRUE(array.ok()) << array.status().ToString();
    return array.ok() ? (*array)->max_stored_bytes() : 0;
  };
  const CodecSpec crc{"crc32c", Json::object()};
  EXPECT_EQ(with({kBytesLE}), 16u);
  EXPECT_EQ(with({kBytesLE, crc}), 20u);
  const uint64_t zstd = with({kBytesLE, kZstd});
  EXPECT_GE(zstd, CompressedBound(16));
  EXPECT_LT(zstd, CompressedBound(16 + 128));
  EXPECT_EQ(with({kBytesLE, kZstd, crc}), zstd + 4);
  const CodecSpec sharded{
      "sharding_indexed",
      Json::parse(R"({"chunk_shape": [1, 4], "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]})")};
  EXPECT_EQ(with({sharded}), 2 * 16 + 4 + 2 * 8u);  // the index (with zarr's default crc32c), two inner chunks
}

TEST_F(MemoryArrayTest, OversizedChunkIsRefusedNamingItsSizeAndTheBound) {
  ArrayMetadata m = SmallMetadata();
  m.codecs = {kBytesLE};
  auto array = Array::Create(store_, "raw", m);
  ASSERT_TRUE(array.ok());
  store_->Set("raw/c/1/0", std::string(17, '\0'));  // one byte more than the chunk
  std::string out(16, '\0');
  Status s = (*array)->ReadChunk({1, 0}, Span(out));
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("raw [1, 0]: reading memory://raw/c/1/0: object is 17 bytes, more than the 16 "
                                     "its reader accepts (refused unread)"));
  // Bytes that arrive without the store's check are refused before any codec runs.
  const std::string big(17, '\0');
  Status decoded = (*array)->DecodeChunk(Span(big), {1, 0}, Span(out));
  EXPECT_EQ(decoded.code(), StatusCode::kDataLoss);
  EXPECT_THAT(decoded.message(), HasSubstr("raw [1, 0] (memory://raw/c/1/0): stored object is 17 bytes, more than "
                                           "the 16 any valid encoding of the chunk takes (bytes)"));
}

TEST_F(MemoryArrayTest, StoreErrorsNameTheChunk) {
  auto store = std::make_shared<MemoryStore>();
  auto array = Array::Create(store, "a/../b", SmallMetadata());  // a key the store rejects
  ASSERT_TRUE(array.ok());
  std::string out(16, '\0');
  Status s = (*array)->ReadChunk({0, 0}, Span(out));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("a/../b [0, 0]: invalid store key"));
}

TEST(ArrayTest, ChunkKeys) {
  auto store = std::make_shared<MemoryStore>();
  ArrayMetadata m = SmallMetadata();
  auto root = Array::Create(store, "", m);
  ASSERT_TRUE(root.ok());
  EXPECT_EQ((*root)->ChunkKey({1, 0}), "c/1/0");
  auto nested = Array::Create(store, "g/t2m", m);
  ASSERT_TRUE(nested.ok());
  EXPECT_EQ((*nested)->ChunkKey({2, 1}), "g/t2m/c/2/1");
  m.chunk_key_encoding = {ChunkKeyEncoding::Kind::kV2, '.'};
  auto v2 = Array::Create(store, "g/t2m", m);
  ASSERT_TRUE(v2.ok());
  EXPECT_EQ((*v2)->ChunkKey({2, 1}), "g/t2m/2.1");
}

TEST(ArrayTest, DescribeChunk) {
  EXPECT_EQ(DescribeChunk("t2m", {1, 0, 0}), "t2m [1, 0, 0]");
  EXPECT_EQ(DescribeChunk("", {4}), "chunk [4]");
}

TEST(ArrayTest, CreateRejectsUnsupportedCodecsAndBadShapes) {
  auto store = std::make_shared<MemoryStore>();
  ArrayMetadata m = SmallMetadata();
  m.codecs = {CodecSpec{"numcodecs.pcodec", Json::object()}, kBytesLE};
  auto delta = Array::Create(store, "t2m", m);
  ASSERT_FALSE(delta.ok());
  EXPECT_EQ(delta.status().code(), StatusCode::kUnimplemented);
  EXPECT_EQ(delta.status().message(), "array 't2m': codec \"numcodecs.pcodec\" is not supported");

  m = SmallMetadata();
  m.chunk_shape = {2};
  EXPECT_EQ(Array::Create(store, "t2m", m).status().code(), StatusCode::kInvalidArgument);
  m.chunk_shape = {2, 0};
  EXPECT_EQ(Array::Create(store, "t2m", m).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Array::Create(nullptr, "t2m", SmallMetadata()).status().code(), StatusCode::kInvalidArgument);
}

TEST(ArrayTest, FillChunkWritesEveryElement) {
  auto store = std::make_shared<MemoryStore>();
  ArrayMetadata m = SmallMetadata();
  m.dtype = DataType{DataTypeId::kComplex128};
  m.fill_value = FillOf(std::complex<double>(1.5, -2.0));
  m.chunk_shape = {3, 3};
  auto array = Array::Create(store, "z", m);
  ASSERT_TRUE(array.ok()) << array.status().ToString();
  std::vector<std::complex<double>> out(9, {0, 0});
  (*array)->FillChunk({reinterpret_cast<std::byte*>(out.data()), out.size() * 16});
  for (const auto& v : out) EXPECT_EQ(v, std::complex<double>(1.5, -2.0));

  m.dtype = DataType{DataTypeId::kFloat32};
  m.fill_value = FillOf(0.0f);
  auto zero = Array::Create(store, "z", m);
  ASSERT_TRUE(zero.ok());
  std::vector<float> floats(9, 7.0f);
  (*zero)->FillChunk({reinterpret_cast<std::byte*>(floats.data()), floats.size() * 4});
  for (float v : floats) EXPECT_EQ(v, 0.0f);

  // No byte is left as it was, a tail shorter than an item included (it gets the fill's
  // first bytes): a buffer of 20 and of 5 bytes for 16-byte items.
  const std::complex<double> fill(1.5, -2.0);
  std::vector<std::byte> odd(20, std::byte{0xA5});
  (*array)->FillChunk({odd.data(), odd.size()});
  EXPECT_EQ(std::memcmp(odd.data(), &fill, 16), 0);
  EXPECT_EQ(std::memcmp(odd.data() + 16, &fill, 4), 0);
  std::vector<std::byte> short_tail(5, std::byte{0xA5});
  (*array)->FillChunk({short_tail.data(), short_tail.size()});
  EXPECT_EQ(std::memcmp(short_tail.data(), &fill, 5), 0);
}

// Sharded arrays written by zarr-python, read through a FileStore: every shard (present
// or not) decodes to the bytes numpy says it holds, edge shards padded with fill.
TEST(ArrayTest, ReadsZarrPythonShardedStores) {
  const std::string dir = std::string(INSITU_TESTDATA_DIR) + "/sharding/";
  const Json manifest = Json::parse(ReadFile(dir + "manifest.json"));
  int missing = 0;
  for (const Json& c : manifest) {
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    ArrayMetadata m;
    m.shape = c["shape"].get<std::vector<uint64_t>>();
    m.chunk_shape = c["shard_shape"].get<std::vector<uint64_t>>();
    m.dtype = DataType::FromV3Name(c["dtype"].get<std::string>()).value();
    const std::string hex = c["fill_hex"];
    for (size_t i = 0; i < hex.size(); i += 2) {
      m.fill_value.bytes[i / 2] = std::byte(std::stoi(hex.substr(i, 2), nullptr, 16));
    }
    for (const Json& codec : c["codecs"]) {
      m.codecs.push_back({codec["name"], codec.value("configuration", Json::object())});
    }
    auto store = FileStore::Open(dir + name);
    ASSERT_TRUE(store.ok());
    auto array = Array::Create(*store, "", m);
    ASSERT_TRUE(array.ok()) << array.status().ToString();
    for (const Json& shard : c["shards"]) {
      std::string out((*array)->chunk_bytes(), '\xAA');
      Status s = (*array)->ReadChunk(shard["coords"].get<std::vector<uint64_t>>(), Span(out));
      ASSERT_TRUE(s.ok()) << s.ToString();
      EXPECT_EQ(out, ReadFile(dir + shard["expected"].get<std::string>())) << shard["key"];
      missing += shard["present"].get<bool>() ? 0 : 1;
    }
  }
  EXPECT_EQ(missing, 1);  // u16_end's all-fill shard, never written
}

class FileArrayTest : public ::testing::Test {
 protected:
  void SetUp() override { root_ = dir_.path(); }
  insitubatch::testing::TempDir dir_;
  std::string root_;
};

TEST_F(FileArrayTest, CorruptShardNamesPathCoordsAndFile) {
  const std::string src = std::string(INSITU_TESTDATA_DIR) + "/sharding/u16_end/c/0/1";
  const std::string shard = ReadFile(src);
  fs::create_directories(fs::path(root_) / "grp/t2m/c/0");
  std::ofstream(fs::path(root_) / "grp/t2m/c/0/1", std::ios::binary) << shard.substr(40);

  ArrayMetadata m;
  m.shape = {10, 12};
  m.chunk_shape = {4, 8};
  m.dtype = DataType{DataTypeId::kUInt16};
  m.fill_value = FillOf<uint16_t>(7);
  m.codecs = {CodecSpec{"sharding_indexed", Json::parse(R"({"chunk_shape": [2, 4],
                                        "codecs": [{"name": "bytes",
                                                    "configuration": {"endian": "little"}},
                                                   {"name": "zstd"}]})")}};
  auto store = FileStore::Open(root_);
  ASSERT_TRUE(store.ok());
  auto array = Array::Create(*store, "grp/t2m", m);
  ASSERT_TRUE(array.ok()) << array.status().ToString();
  std::string out((*array)->chunk_bytes(), '\0');
  Status s = (*array)->ReadChunk({0, 1}, Span(out));
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("grp/t2m [0, 1] (" + root_ +
                                     "/grp/t2m/c/0/1): "
                                     "sharding_indexed: inner chunk ["));
  // Split into its inner chunks, a part that fails names the same chunk and file; an
  // absent inner chunk (fill value) still decodes.
  auto stored = (*store)->Read("grp/t2m/c/0/1");
  ASSERT_TRUE(stored.ok());
  auto parts = (*array)->SplitChunk(stored->data.span(), {0, 1});
  ASSERT_TRUE(parts.ok()) << parts.status().ToString();
  ASSERT_EQ((*parts)->count(), 4u);
  Status absent = (*parts)->DecodePart(1, Span(out));
  EXPECT_TRUE(absent.ok()) << absent.ToString();
  Status part = (*parts)->DecodePart(2, Span(out));
  EXPECT_EQ(part.code(), StatusCode::kDataLoss);
  EXPECT_THAT(part.message(), HasSubstr("grp/t2m [0, 1] (" + root_ +
                                        "/grp/t2m/c/0/1): "
                                        "sharding_indexed: inner chunk [1, 0]"));

  // An unreadable object (symlink loop) is a store error naming the chunk.
  fs::create_symlink(fs::path(root_) / "grp/t2m/c/1", fs::path(root_) / "grp/t2m/c/1");
  Status loop = (*array)->ReadChunk({1, 0}, Span(out));
  EXPECT_EQ(loop.code(), StatusCode::kIoError);
  EXPECT_EQ(loop.detail(), ELOOP);
  EXPECT_THAT(loop.message(), HasSubstr("grp/t2m [1, 0]: cannot open " + root_));
}

}  // namespace
}  // namespace insitubatch::zarr
