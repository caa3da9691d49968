#include <blosc.h>
#include <gtest/gtest.h>

#include "insitubatch/zarr/codec/codec_test_util.h"

namespace insitubatch::zarr {
namespace {

using testing::AsBytes;
using testing::ExpectRoundTrip;
using testing::FieldBytes;
using testing::MakeBytesToBytes;
using testing::MakeRepr;

void PutLittle32(std::vector<std::byte>& v, size_t at, uint32_t x) {
  for (int i = 0; i < 4; ++i) v[at + i] = std::byte(x >> (8 * i));
}

class BloscCodecTest : public ::testing::Test {
 protected:
  std::vector<std::byte> Encoded(const Json& config) {
    auto codec = MakeBytesToBytes("blosc", config, repr_);
    auto out = codec->Encode(AsBytes(data_));
    EXPECT_TRUE(out.ok());
    return {out->data(), out->data() + out->size()};
  }

  const ArrayRepr repr_ = MakeRepr("float32", {64, 64});
  std::vector<std::byte> data_ = FieldBytes(repr_.nbytes());
  std::shared_ptr<const BytesToBytesCodec> codec_ =
      MakeBytesToBytes("blosc", {{"cname", "lz4"}, {"clevel", 5}, {"shuffle", "shuffle"}}, repr_);
};

TEST_F(BloscCodecTest, AcceptsNumcodecsSpelling) {
  for (int shuffle : {-1, 0, 1, 2}) {
    Json codecs = Json::array(
        {Json{{"name", "bytes"}, {"configuration", {{"endian", "little"}}}},
         Json{{"name", "numcodecs.blosc"},
              {"configuration",
               {{"id", "blosc"}, {"cname", "zstd"}, {"clevel", 3}, {"shuffle", shuffle}, {"blocksize", 4096}}}}});
    ExpectRoundTrip(codecs, repr_, data_);
  }
}

TEST_F(BloscCodecTest, ACorruptFrameNamesItsCompressor) {
  for (auto [cname, shown] :
       {std::pair{"zstd", "zstd"}, {"zlib", "zlib"}, {"lz4hc", "lz4/lz4hc"}, {"blosclz", "blosclz"}}) {
    for (size_t i = 0; i < data_.size(); ++i) data_[i] = std::byte(i % 7);  // compressible: not memcpy'd
    auto stored = Encoded({{"cname", cname}, {"shuffle", "noshuffle"}});
    for (size_t i = 32; i < stored.size(); ++i) stored[i] = std::byte{0xA5};  // the blocks, not the header
    std::vector<std::byte> out(data_.size());
    auto codec = MakeBytesToBytes("blosc", {{"cname", cname}}, repr_);
    Status status = codec->DecodeInto(AsBytes(stored), AsBytes(out));
    ASSERT_FALSE(status.ok()) << cname;
    EXPECT_NE(status.message().find(std::string("(") + shown + " blocks"), std::string::npos)
        << cname << ": " << status.message();
  }
}

TEST_F(BloscCodecTest, TypesizeComesFromConfigOrDtype) {
  // Byte 3 of the header is the typesize blosc shuffled with.
  EXPECT_EQ(Encoded({{"cname", "lz4"}})[3], std::byte{4});
  EXPECT_EQ(Encoded({{"cname", "lz4"}, {"typesize", 2}})[3], std::byte{2});
}

TEST_F(BloscCodecTest, HeaderSizesMustMatchChunkAndInput) {
  auto stored = Encoded({{"cname", "lz4"}, {"shuffle", "shuffle"}});
  std::vector<std::byte> out(data_.size());
  ASSERT_TRUE(codec_->DecodeInto(AsBytes(stored), AsBytes(out)).ok());
  ASSERT_EQ(out, data_);

  std::vector<std::byte> small(100);
  EXPECT_DATA_LOSS(codec_->DecodeInto(AsBytes(stored), AsBytes(small)),
                   "blosc: frame declares 16384 bytes, chunk needs 100 bytes");

  auto lying = stored;
  PutLittle32(lying, 4, 16000);  // nbytes
  EXPECT_FALSE(codec_->DecodeInto(AsBytes(lying), AsBytes(out)).ok());
  std::vector<std::byte> out_16000(16000);
  EXPECT_DATA_LOSS(codec_->DecodeInto(AsBytes(lying), AsBytes(out_16000)), "blosc:");

  auto bad_cbytes = stored;
  PutLittle32(bad_cbytes, 12, static_cast<uint32_t>(stored.size() + 10));
  EXPECT_DATA_LOSS(codec_->DecodeInto(AsBytes(bad_cbytes), AsBytes(out)), "header declares a");

  auto trailing = stored;
  trailing.push_back(std::byte{0});
  EXPECT_DATA_LOSS(codec_->DecodeInto(AsBytes(trailing), AsBytes(out)), "chunk holds");
}

TEST_F(BloscCodecTest, MalformedInputIsDataLoss) {
  auto stored = Encoded({{"cname", "zstd"}, {"shuffle", "bitshuffle"}});
  std::vector<std::byte> out(data_.size());
  std::vector<std::byte> empty;
  EXPECT_DATA_LOSS(codec_->DecodeInto(AsBytes(empty), AsBytes(out)), "shorter than the");
  EXPECT_DATA_LOSS(codec_->Decode(AsBytes(empty), 1 << 20).status(), "shorter than the");
  for (size_t cut : {size_t{3}, size_t{15}, size_t{16}, stored.size() / 2, stored.size() - 1}) {
    std::vector<std::byte> truncated(stored.begin(), stored.begin() + cut);
    EXPECT_DATA_LOSS(codec_->DecodeInto(AsBytes(truncated), AsBytes(out)), "blosc:");
  }
  std::vector<std::byte> garbage = FieldBytes(300, 4);
  EXPECT_DATA_LOSS(codec_->DecodeInto(AsBytes(garbage), AsBytes(out)), "blosc:");
  auto bad_version = stored;
  bad_version[0] = std::byte{9};
  EXPECT_DATA_LOSS(codec_->DecodeInto(AsBytes(bad_version), AsBytes(out)), "unsupported frame format version 9");
  // Corrupt the block bodies: a clean error or, when the damage lands in literals,
  // other bytes of the right size. Never a crash.
  for (size_t i = 16; i < stored.size(); i += 97) {
    auto bad = stored;
    bad[i] ^= std::byte{0xFF};
    Status st = codec_->DecodeInto(AsBytes(bad), AsBytes(out));
    if (!st.ok()) {
      EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st.ToString();
    }
  }
}

TEST_F(BloscCodecTest, DecodeRespectsLimit) {
  auto stored = Encoded({{"cname", "lz4"}});
  EXPECT_DATA_LOSS(codec_->Decode(AsBytes(stored), 1000).status(), "limit of 1000 bytes");
  auto ok = codec_->Decode(AsBytes(stored), data_.size());
  ASSERT_TRUE(ok.ok());
  EXPECT_TRUE(std::equal(data_.begin(), data_.end(), ok->data()));
}

TEST_F(BloscCodecTest, EmptyChunk) {
  auto codec = MakeBytesToBytes("blosc", {{"cname", "lz4"}}, MakeRepr("float32", {0}));
  std::vector<std::byte> nothing;
  auto stored = codec->Encode(AsBytes(nothing));
  ASSERT_TRUE(stored.ok());
  EXPECT_TRUE(codec->DecodeInto(stored->span(), AsBytes(nothing)).ok());
  std::vector<std::byte> one(1);
  EXPECT_DATA_LOSS(codec->DecodeInto(stored->span(), AsBytes(one)), "declares 0 bytes");
}

TEST_F(BloscCodecTest, ValidatesConfiguration) {
  const CodecRegistry& r = BuiltinCodecRegistry();
  EXPECT_EQ(r.Create({"blosc", {{"cname", "snappier"}}}, repr_).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.Create({"blosc", {{"shuffle", "sideways"}}}, repr_).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.Create({"blosc", {{"shuffle", 3}}}, repr_).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.Create({"blosc", {{"clevel", 10}}}, repr_).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(r.Create({"blosc", Json::object()}, repr_).ok());
}

}  // namespace
}  // namespace insitubatch::zarr
