#include <gtest/gtest.h>

#include "insitubatch/zarr/codec/codec_test_util.h"

namespace insitubatch::zarr {
namespace {

using testing::AsBytes;
using testing::ExpectRoundTrip;
using testing::FieldBytes;
using testing::MakeBytesToBytes;
using testing::MakeRepr;

class ZlibCodecTest : public ::testing::Test {
 protected:
  std::vector<std::byte> Encoded(const std::vector<std::byte>& data) {
    auto out = codec_->Encode(AsBytes(data));
    EXPECT_TRUE(out.ok());
    return {out->data(), out->data() + out->size()};
  }

  const ArrayRepr repr_ = MakeRepr("int16", {50, 50});
  std::vector<std::byte> data_ = FieldBytes(repr_.nbytes());
  std::shared_ptr<const BytesToBytesCodec> codec_ = MakeBytesToBytes("numcodecs.zlib", {{"level", 6}}, repr_);
};

TEST_F(ZlibCodecTest, WritesZlibContainer) {
  const auto stored = Encoded(data_);
  ASSERT_GE(stored.size(), 6u);
  EXPECT_EQ(stored[0], std::byte{0x78});
  EXPECT_EQ((static_cast<unsigned>(stored[0]) * 256 + static_cast<unsigned>(stored[1])) % 31, 0u);
}

TEST_F(ZlibCodecTest, WrongSizeIsDataLoss) {
  const auto stored = Encoded(data_);
  std::vector<std::byte> small(4999), large(5001);
  EXPECT_DATA_LOSS(codec_->DecodeInto(AsBytes(stored), AsBytes(small)),
                   "zlib: data decodes to more than the chunk's 4999 bytes");
  EXPECT_DATA_LOSS(codec_->DecodeInto(AsBytes(stored), AsBytes(large)),
                   "zlib: data decodes to 5000 bytes, chunk needs 5001 bytes");
}

TEST_F(ZlibCodecTest, DecodeUnknownSize) {
  const auto stored = Encoded(data_);
  auto decoded = codec_->Decode(AsBytes(stored), 5000);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_TRUE(std::equal(data_.begin(), data_.end(), decoded->data()));
  EXPECT_EQ(decoded->size(), 5000u);
  EXPECT_DATA_LOSS(codec_->Decode(AsBytes(stored), 4999).status(), "limit of 4999 bytes");
}

TEST_F(ZlibCodecTest, MalformedInputIsDataLoss) {
  const auto stored = Encoded(data_);
  std::vector<std::byte> out(data_.size());
  std::vector<std::byte> empty;
  EXPECT_DATA_LOSS(codec_->DecodeInto(AsBytes(empty), AsBytes(out)), "empty input");
  EXPECT_DATA_LOSS(codec_->Decode(AsBytes(empty), 1 << 20).status(), "empty input");
  for (size_t cut : {size_t{1}, size_t{2}, stored.size() / 2, stored.size() - 1}) {
    std::vector<std::byte> truncated(stored.begin(), stored.begin() + cut);
    EXPECT_DATA_LOSS(codec_->DecodeInto(AsBytes(truncated), AsBytes(out)), "zlib:");
    EXPECT_DATA_LOSS(codec_->Decode(AsBytes(truncated), 1 << 20).status(), "zlib:");
  }
  auto garbage = FieldBytes(500, 2);
  EXPECT_DATA_LOSS(codec_->DecodeInto(AsBytes(garbage), AsBytes(out)), "corrupt");
  EXPECT_DATA_LOSS(codec_->Decode(AsBytes(garbage), 1 << 20).status(), "corrupt");
  auto bad_adler = stored;
  bad_adler.back() ^= std::byte{1};
  EXPECT_DATA_LOSS(codec_->DecodeInto(AsBytes(bad_adler), AsBytes(out)), "zlib:");
  EXPECT_DATA_LOSS(codec_->Decode(AsBytes(bad_adler), 1 << 20).status(), "zlib:");
  auto trailing = stored;
  trailing.push_back(std::byte{0});
  EXPECT_DATA_LOSS(codec_->DecodeInto(AsBytes(trailing), AsBytes(out)), "1 byte of trailing data");
  EXPECT_DATA_LOSS(codec_->Decode(AsBytes(trailing), 1 << 20).status(), "1 byte of trailing data");
  auto gzip = MakeBytesToBytes("gzip", {{"level", 1}}, repr_)->Encode(AsBytes(data_));
  ASSERT_TRUE(gzip.ok());
  EXPECT_DATA_LOSS(codec_->DecodeInto(gzip->span(), AsBytes(out)), "zlib:");
}

}  // namespace
}  // namespace insitubatch::zarr
